#include "client/data/inspect_stats.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/format.h"
#include "common/base/status_macros.h"

namespace mt::client::data_cli {

void LengthStats::Add(int64_t v) {
  if (count == 0 || v < min) min = v;
  if (count == 0 || v > max) max = v;
  sum += v;
  ++count;
}

std::string LengthStats::Text() const {
  return absl::StrFormat("min %s  mean %.1f  max %s", Thousands(min), mean(), Thousands(max));
}

namespace {

// Document lengths, empty documents and those ending with `eod`.
void CountDocuments(const data::IndexedDataset& ds, DatasetStats* stats) {
  for (int64_t d = 0; d < ds.num_documents(); ++d) {
    int64_t len = 0;
    const int64_t first = ds.document_index(d), last = ds.document_index(d + 1);
    for (int64_t s = first; s < last; ++s) len += ds.sequence_length(s);
    stats->documents.Add(len);
    if (len == 0) ++stats->empty_documents;
    // The document's last token: the last token of its last non-empty sequence.
    for (int64_t s = last - 1; s >= first; --s) {
      const int32_t n = ds.sequence_length(s);
      if (n == 0) continue;
      int32_t t = -1;
      if (ds.Read(s, n - 1, 1, &t).ok() && t == stats->eod) ++stats->eod_documents;
      break;
    }
  }
}

// How often each token id occurs. Small dtypes are counted straight from the raw bytes.
absl::StatusOr<absl::flat_hash_map<int64_t, int64_t>> CountTokens(const data::IndexedDataset& ds) {
  absl::flat_hash_map<int64_t, int64_t> counts;
  if (ds.dtype() == data::DType::kUInt16 || ds.dtype() == data::DType::kUInt8) {
    std::vector<int64_t> small_counts(65536, 0);
    const absl::string_view raw = ds.RawData();
    if (ds.dtype() == data::DType::kUInt16) {
      const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
      for (size_t i = 0; i + 1 < raw.size(); i += 2) ++small_counts[p[i] | (p[i + 1] << 8)];
    } else {
      for (unsigned char c : raw) ++small_counts[c];
    }
    for (size_t id = 0; id < small_counts.size(); ++id) {
      if (small_counts[id] > 0) counts[static_cast<int64_t>(id)] = small_counts[id];
    }
    return counts;
  }
  std::vector<int32_t> buf;
  for (int64_t s = 0; s < ds.num_sequences(); ++s) {
    buf.resize(static_cast<size_t>(ds.sequence_length(s)));
    MT_RETURN_IF_ERROR(ds.Read(s, 0, ds.sequence_length(s), buf.data()));
    for (int32_t t : buf) ++counts[t];
  }
  return counts;
}

void RankTokens(const absl::flat_hash_map<int64_t, int64_t>& counts, int64_t top,
                DatasetStats* stats) {
  stats->distinct_tokens = static_cast<int64_t>(counts.size());
  bool first_id = true;
  for (const auto& [id, n] : counts) {
    if (first_id || id > stats->max_id) stats->max_id = id;
    if (first_id || id < stats->min_id) stats->min_id = id;
    first_id = false;
  }
  std::vector<std::pair<int64_t, int64_t>> ranked(counts.begin(), counts.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (static_cast<int64_t>(ranked.size()) > top) ranked.resize(static_cast<size_t>(top));
  stats->top_tokens = std::move(ranked);
}

// At most max_chars bytes of s, cut at a UTF-8 character boundary.
std::string Truncate(const std::string& s, int64_t max_chars, bool* truncated) {
  *truncated = max_chars > 0 && static_cast<int64_t>(s.size()) > max_chars;
  if (!*truncated) return s;
  size_t n = static_cast<size_t>(max_chars);
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

}  // namespace

absl::StatusOr<DatasetStats> ComputeStats(const data::IndexedDataset& ds, int32_t eod,
                                          int64_t top) {
  DatasetStats stats;
  stats.eod = eod;
  for (int64_t s = 0; s < ds.num_sequences(); ++s) stats.sequences.Add(ds.sequence_length(s));
  CountDocuments(ds, &stats);
  MT_ASSIGN_OR_RETURN(auto counts, CountTokens(ds));
  RankTokens(counts, top, &stats);
  return stats;
}

absl::StatusOr<std::vector<int32_t>> DocumentTokens(const data::IndexedDataset& ds, int64_t d) {
  std::vector<int32_t> out;
  for (int64_t s = ds.document_index(d); s < ds.document_index(d + 1); ++s) {
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>(ds.sequence_length(s)));
    MT_RETURN_IF_ERROR(ds.Read(s, 0, ds.sequence_length(s), out.data() + at));
  }
  return out;
}

absl::StatusOr<std::vector<SampleDocument>> SampleDocuments(const data::IndexedDataset& ds,
                                                            const tokenizer::Gpt2BpeTokenizer* tok,
                                                            int64_t count, int64_t max_chars) {
  std::vector<SampleDocument> samples;
  for (int64_t d = 0; d < std::min<int64_t>(count, ds.num_documents()); ++d) {
    MT_ASSIGN_OR_RETURN(std::vector<int32_t> ids, DocumentTokens(ds, d));
    SampleDocument s{d, static_cast<int64_t>(ids.size()), "", false};
    if (tok != nullptr) {
      s.text = Truncate(tok->Decode(ids), max_chars, &s.truncated);
    } else {
      const size_t shown = max_chars > 0 ? std::min<size_t>(ids.size(), 32) : ids.size();
      s.truncated = shown < ids.size();
      s.text = absl::StrJoin(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(shown), " ");
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

}  // namespace mt::client::data_cli
