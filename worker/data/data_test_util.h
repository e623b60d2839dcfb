// Test helpers for worker/data: small indexed datasets on disk (temporary directories:
// testutil::MakeTempDir).
#ifndef MT_WORKER_DATA_DATA_TEST_UTIL_H_
#define MT_WORKER_DATA_DATA_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/data/indexed_dataset.h"
#include "gtest/gtest.h"

namespace mt::data::testing {

// The token at position `pos` of document `doc`: both can be read back from it.
inline int32_t TokenOf(int64_t doc, int64_t pos, DType dtype = DType::kInt32) {
  if (dtype == DType::kUInt16) return static_cast<int32_t>((doc * 97 + pos) % 65536);
  return static_cast<int32_t>(doc * 10000 + pos);
}

// Writes a dataset of one sequence per document with the given lengths (empty ones included, so
// that document d is sequence d); tokens are TokenOf.
inline void WriteDataset(const std::string& prefix, const std::vector<int32_t>& lengths,
                         DType dtype = DType::kInt32) {
  auto writer = IndexedDatasetWriter::Create(prefix, dtype);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int32_t> tokens(lengths[d]);
    for (int32_t p = 0; p < lengths[d]; ++p) tokens[p] = TokenOf(static_cast<int64_t>(d), p, dtype);
    ASSERT_TRUE((*writer)->AddSequence(tokens).ok());
    ASSERT_TRUE((*writer)->EndDocument().ok());
  }
  ASSERT_TRUE((*writer)->Finalize().ok());
}

}  // namespace mt::data::testing

#endif  // MT_WORKER_DATA_DATA_TEST_UTIL_H_
