// Fuzz target: the MMIDIDX reader (common/data/indexed_dataset). The input is
// "<.idx bytes>\n--bin--\n<.bin bytes>", written to a scratch prefix; a dataset that opens is
// read whole (the reader promises that one that opens reads anywhere without further checks).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/data/indexed_dataset.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = mt::fuzz::Split(mt::fuzz::AsView(data, size), "\n--bin--\n", 2);
  const std::string prefix = mt::fuzz::ScratchDir() + "/ds";
  mt::fuzz::WriteBytes(mt::data::IndexPath(prefix), parts[0]);
  mt::fuzz::WriteBytes(mt::data::DataPath(prefix), parts.size() > 1 ? parts[1] : "");
  auto ds = mt::data::IndexedDataset::Create(prefix);
  if (!ds.ok()) return 0;
  const mt::data::IndexedDataset& d = **ds;
  for (int64_t doc = 0; doc <= d.num_documents(); ++doc) (void)d.document_index(doc);
  std::vector<int32_t> out;
  for (int64_t s = 0; s < d.num_sequences(); ++s) {
    (void)d.sequence_pointer(s);
    (void)d.RawSequence(s);
    (void)d.Get(s);
    (void)d.Get(s, 1, 1);
  }
  (void)d.SequenceLengths();
  (void)d.DocumentIndices();
  return 0;
}
