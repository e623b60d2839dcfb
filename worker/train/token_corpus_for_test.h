// The corpus of the eval command tests (test-only, header-only): 60 documents of 40..99
// tokens over a vocabulary of 128, already token ids (PREFIX.bin/.idx, uint16), so that no
// tokenizer file is read.
#ifndef MT_WORKER_TRAIN_TOKEN_CORPUS_FOR_TEST_H_
#define MT_WORKER_TRAIN_TOKEN_CORPUS_FOR_TEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/data/indexed_dataset.h"
#include "gtest/gtest.h"

namespace mt::train {

// Writes DIR/corpus.bin/.idx; returns the prefix DIR/corpus.
inline std::string WriteTokenCorpus(const std::string& dir) {
  const std::string prefix = dir + "/corpus";
  auto w = data::IndexedDatasetWriter::Create(prefix, data::DType::kUInt16);
  EXPECT_TRUE(w.ok());
  if (!w.ok()) return prefix;
  for (int d = 0; d < 60; ++d) {
    std::vector<int32_t> tokens(40 + (d * 37) % 60);
    for (size_t p = 0; p < tokens.size(); ++p) {
      tokens[p] = static_cast<int32_t>((d * 31 + p * 7) % 128);
    }
    EXPECT_TRUE((*w)->AddSequence(tokens).ok());
    EXPECT_TRUE((*w)->EndDocument().ok());
  }
  EXPECT_TRUE((*w)->Finalize().ok());
  return prefix;
}

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_TOKEN_CORPUS_FOR_TEST_H_
