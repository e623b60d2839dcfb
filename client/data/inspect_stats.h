// What `mtctl data inspect` reports about an indexed dataset: lengths, end-of-document tokens,
// the token histogram and the first documents. Computed here, printed by inspect_cmd.cc.
// Thread-compatible structs; functions only read the dataset.
#ifndef MT_CLIENT_DATA_INSPECT_STATS_H_
#define MT_CLIENT_DATA_INSPECT_STATS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/data/indexed_dataset.h"
#include "common/tokenizer/gpt2_bpe_tokenizer.h"

namespace mt::client::data_cli {

struct LengthStats {
  int64_t count = 0, min = 0, max = 0, sum = 0;
  void Add(int64_t v);
  double mean() const { return count > 0 ? static_cast<double>(sum) / count : 0; }
  // "min 1  mean 2.5  max 4" (thousands separated).
  std::string Text() const;
};

struct DatasetStats {
  LengthStats sequences;
  LengthStats documents;
  int64_t empty_documents = 0;
  int32_t eod = 0;            // the end-of-document id looked for
  int64_t eod_documents = 0;  // documents whose last token is `eod`
  int64_t distinct_tokens = 0;
  int64_t min_id = -1, max_id = -1;  // -1 when there are no tokens
  // The most frequent ids with their counts, most frequent first (ties: smaller id first).
  std::vector<std::pair<int64_t, int64_t>> top_tokens;
};

// Lengths, end-of-document counts and the `top` most frequent token ids.
absl::StatusOr<DatasetStats> ComputeStats(const data::IndexedDataset& ds, int32_t eod, int64_t top);

// Every token of document `d`, its sequences concatenated.
absl::StatusOr<std::vector<int32_t>> DocumentTokens(const data::IndexedDataset& ds, int64_t d);

struct SampleDocument {
  int64_t document;
  int64_t tokens;
  std::string text;  // decoded with the tokenizer, else the token ids
  bool truncated;
};

// The first `count` documents: decoded and cut to `max_chars` (0: all) with a tokenizer, else
// at most 32 ids (all when max_chars is 0).
absl::StatusOr<std::vector<SampleDocument>> SampleDocuments(const data::IndexedDataset& ds,
                                                            const tokenizer::Gpt2BpeTokenizer* tok,
                                                            int64_t count, int64_t max_chars);

}  // namespace mt::client::data_cli

#endif  // MT_CLIENT_DATA_INSPECT_STATS_H_
