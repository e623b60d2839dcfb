// Tensors as plain bytes on the host, for the parts of checkpointing that must not need
// LibTorch (the coordinator's Hugging Face export, mtctl, resharding): a dtype, a shape and
// little-endian row-major data, with the few operations resharding and format conversion use
// (slice and concatenate along a dimension, 2-D transpose, row permutation, dtype casts).
// Pure: no I/O. Thread-compatible values.
#ifndef MT_COMMON_CHECKPOINT_HOST_TENSOR_H_
#define MT_COMMON_CHECKPOINT_HOST_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt::checkpoint {

// The dtypes checkpoints hold, named as safetensors names them.
enum class DType { kF32, kF16, kBF16, kF64, kI64, kI32, kU8 };

// "F32", "F16", "BF16", "F64", "I64", "I32", "U8".
const char* DTypeName(DType dtype);
absl::StatusOr<DType> ParseDType(absl::string_view name);
// Bytes per element.
size_t DTypeSize(DType dtype);
bool IsFloating(DType dtype);

struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string data;  // numel() * DTypeSize(dtype) bytes

  int64_t numel() const;
  size_t nbytes() const { return data.size(); }
};

// A tensor of zeros.
HostTensor ZerosTensor(DType dtype, std::vector<int64_t> shape);
// "[50304, 768]".
std::string ShapeString(const std::vector<int64_t>& shape);

// Elements [begin, begin + length) along `dim`. Errors: dim or range out of bounds.
absl::StatusOr<HostTensor> SliceAlong(const HostTensor& t, int dim, int64_t begin, int64_t length);
// Concatenation along `dim`; every part must have the same dtype and the same other dims.
absl::StatusOr<HostTensor> ConcatAlong(const std::vector<HostTensor>& parts, int dim);
// [a, b] -> [b, a].
absl::StatusOr<HostTensor> Transpose2D(const HostTensor& t);
// Row r of the result is row order[r] of `t` (rows = dim 0).
absl::StatusOr<HostTensor> PermuteRows(const HostTensor& t, const std::vector<int64_t>& order);
// Keeps the first `rows` rows along dim 0, or appends rows of zeros up to `rows`.
absl::StatusOr<HostTensor> ResizeRows(const HostTensor& t, int64_t rows);
// Float dtypes into each other (round to nearest even into F16/BF16); same dtype = copy.
absl::StatusOr<HostTensor> CastTo(const HostTensor& t, DType to);

// IEEE half and bfloat16 conversions (round to nearest even; NaN stays NaN).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

}  // namespace mt::checkpoint

#endif  // MT_COMMON_CHECKPOINT_HOST_TENSOR_H_
