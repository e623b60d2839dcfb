// Our own reader and writer of the safetensors format (huggingface/safetensors), the file
// format of every mt checkpoint shard and of Hugging Face exports:
//
//   u64 little-endian N | N bytes of JSON header (UTF-8, padded with spaces) | data
//   header = {"__metadata__": {string: string}, "<name>": {"dtype": "F32", "shape": [..],
//             "data_offsets": [begin, end]}, ...}
//   offsets are relative to the start of the data; the tensors tile the data exactly (no
//   holes, no overlap), row-major little-endian.
//
// The writer pads the header so the data starts at a multiple of 64 bytes and writes through
// AtomicFileWriter (temporary name, fsync, rename). The reader checks every offset against
// the file (a truncated or hostile file is an error, never a read outside it).
// Thread-compatible free functions.
#ifndef MT_COMMON_CHECKPOINT_SAFETENSORS_H_
#define MT_COMMON_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint/file_writer.h"
#include "common/checkpoint/host_tensor.h"

namespace mt::checkpoint {

// A tensor to write: `data` points at nbytes = numel * DTypeSize(dtype) bytes in host memory.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

TensorView ViewOf(const std::string& name, const HostTensor& t);

// Writes the tensors in the given order. Errors: duplicate or empty names, a size that does
// not match the shape, I/O (the temporary file is removed; an existing `path` stays).
absl::StatusOr<FileDigest> WriteSafetensors(const std::string& path,
                                            const std::vector<TensorView>& tensors,
                                            const std::map<std::string, std::string>& metadata);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // relative to the data start
  uint64_t end = 0;
};

struct SafetensorsIndex {
  std::vector<SafetensorsEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // absolute file offset of the data
  uint64_t file_size = 0;
  // nullptr when absent.
  const SafetensorsEntry* Find(const std::string& name) const;
};

// Reads and checks the header. DATA_LOSS for a malformed or truncated file.
absl::StatusOr<SafetensorsIndex> ReadSafetensorsIndex(const std::string& path);
// Parses a header from memory (`file_size` = the whole file's size), for tests and fuzzing.
absl::StatusOr<SafetensorsIndex> ParseSafetensorsHeader(absl::string_view header,
                                                        uint64_t file_size);
// The index of a whole file held in memory (FileBytes::view()); offsets as for a file.
absl::StatusOr<SafetensorsIndex> ParseSafetensorsFile(absl::string_view file);
absl::StatusOr<HostTensor> ReadSafetensorsTensor(const std::string& path,
                                                 const SafetensorsIndex& index,
                                                 const SafetensorsEntry& entry);
// Reads the tensor's bytes straight into `dst` (exactly entry.end - entry.begin bytes).
absl::Status ReadSafetensorsInto(const std::string& path, const SafetensorsIndex& index,
                                 const SafetensorsEntry& entry, void* dst, size_t size);
// The tensor's bytes out of a whole file in memory (its index from ParseSafetensorsFile).
HostTensor SafetensorsTensorFromMemory(absl::string_view file, const SafetensorsIndex& index,
                                       const SafetensorsEntry& entry);

}  // namespace mt::checkpoint

#endif  // MT_COMMON_CHECKPOINT_SAFETENSORS_H_
