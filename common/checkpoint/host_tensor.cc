#include "common/checkpoint/host_tensor.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mt::checkpoint {
namespace {

struct Split3 {
  int64_t outer = 1;  // product of dims before `dim`
  int64_t dim = 1;
  int64_t inner = 1;  // product of dims after `dim`, in elements
};

absl::StatusOr<Split3> SplitAt(const std::vector<int64_t>& shape, int dim) {
  if (dim < 0 || dim >= static_cast<int>(shape.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("dimension ", dim, " is outside a tensor of shape ", ShapeString(shape)));
  }
  Split3 s;
  for (int i = 0; i < dim; ++i) s.outer *= shape[i];
  s.dim = shape[dim];
  for (size_t i = dim + 1; i < shape.size(); ++i) s.inner *= shape[i];
  return s;
}

}  // namespace

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF64:
      return "F64";
    case DType::kI64:
      return "I64";
    case DType::kI32:
      return "I32";
    case DType::kU8:
      return "U8";
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI64, DType::kI32,
                  DType::kU8}) {
    if (name == DTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "dtype \"", name, "\" is not one of F32, F16, BF16, F64, I64, I32, U8 (the ones mt uses)"));
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
  }
  return 1;
}

bool IsFloating(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF64;
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

HostTensor ZerosTensor(DType dtype, std::vector<int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.assign(static_cast<size_t>(t.numel()) * DTypeSize(dtype), '\0');
  return t;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<HostTensor> SliceAlong(const HostTensor& t, int dim, int64_t begin, int64_t length) {
  auto s = SplitAt(t.shape, dim);
  if (!s.ok()) return s.status();
  if (begin < 0 || length < 0 || begin + length > s->dim) {
    return absl::InvalidArgumentError(absl::StrCat("slice [", begin, ", ", begin + length,
                                                   ") of dimension ", dim, " of a tensor ",
                                                   ShapeString(t.shape)));
  }
  const size_t es = DTypeSize(t.dtype);
  HostTensor out;
  out.dtype = t.dtype;
  out.shape = t.shape;
  out.shape[dim] = length;
  const size_t chunk = static_cast<size_t>(length * s->inner) * es;
  const size_t stride = static_cast<size_t>(s->dim * s->inner) * es;
  const size_t skip = static_cast<size_t>(begin * s->inner) * es;
  out.data.resize(static_cast<size_t>(s->outer) * chunk);
  for (int64_t o = 0; o < s->outer; ++o) {
    std::memcpy(out.data.data() + o * chunk, t.data.data() + o * stride + skip, chunk);
  }
  return out;
}

absl::StatusOr<HostTensor> ConcatAlong(const std::vector<HostTensor>& parts, int dim) {
  if (parts.empty()) return absl::InvalidArgumentError("concatenation of no tensors");
  if (parts.size() == 1) return parts[0];
  const HostTensor& first = parts[0];
  int64_t total = 0;
  for (const HostTensor& p : parts) {
    bool same = p.dtype == first.dtype && p.shape.size() == first.shape.size();
    for (size_t i = 0; same && i < p.shape.size(); ++i) {
      if (static_cast<int>(i) != dim && p.shape[i] != first.shape[i]) same = false;
    }
    if (!same || dim < 0 || dim >= static_cast<int>(p.shape.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot concatenate ", DTypeName(p.dtype), ShapeString(p.shape), " with ",
                       DTypeName(first.dtype), ShapeString(first.shape), " along dimension ", dim));
    }
    total += p.shape[dim];
  }
  HostTensor out;
  out.dtype = first.dtype;
  out.shape = first.shape;
  out.shape[dim] = total;
  auto s = SplitAt(out.shape, dim);
  if (!s.ok()) return s.status();
  const size_t es = DTypeSize(out.dtype);
  out.data.resize(static_cast<size_t>(out.numel()) * es);
  const size_t out_stride = static_cast<size_t>(total * s->inner) * es;
  size_t at = 0;
  for (const HostTensor& p : parts) {
    const size_t chunk = static_cast<size_t>(p.shape[dim] * s->inner) * es;
    for (int64_t o = 0; o < s->outer; ++o) {
      std::memcpy(out.data.data() + o * out_stride + at, p.data.data() + o * chunk, chunk);
    }
    at += chunk;
  }
  return out;
}

absl::StatusOr<HostTensor> Transpose2D(const HostTensor& t) {
  if (t.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("transpose of a tensor of shape ", ShapeString(t.shape), ", want 2-D"));
  }
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const size_t es = DTypeSize(t.dtype);
  HostTensor out;
  out.dtype = t.dtype;
  out.shape = {cols, rows};
  out.data.resize(t.data.size());
  // Blocked so that both sides stay in cache.
  constexpr int64_t kBlock = 64;
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      for (int64_t r = r0; r < std::min(rows, r0 + kBlock); ++r) {
        for (int64_t c = c0; c < std::min(cols, c0 + kBlock); ++c) {
          std::memcpy(out.data.data() + (c * rows + r) * es, t.data.data() + (r * cols + c) * es,
                      es);
        }
      }
    }
  }
  return out;
}

absl::StatusOr<HostTensor> PermuteRows(const HostTensor& t, const std::vector<int64_t>& order) {
  if (t.shape.empty() || static_cast<int64_t>(order.size()) != t.shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat("row permutation of ", order.size(),
                                                   " rows for a tensor ", ShapeString(t.shape)));
  }
  const size_t row = t.shape[0] == 0 ? 0 : t.data.size() / static_cast<size_t>(t.shape[0]);
  HostTensor out;
  out.dtype = t.dtype;
  out.shape = t.shape;
  out.data.resize(t.data.size());
  for (size_t r = 0; r < order.size(); ++r) {
    if (order[r] < 0 || order[r] >= t.shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat("row ", order[r], " out of range"));
    }
    std::memcpy(out.data.data() + r * row, t.data.data() + order[r] * row, row);
  }
  return out;
}

absl::StatusOr<HostTensor> ResizeRows(const HostTensor& t, int64_t rows) {
  if (t.shape.empty() || rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resize a tensor ", ShapeString(t.shape), " to ", rows, " rows"));
  }
  if (rows <= t.shape[0]) return SliceAlong(t, 0, 0, rows);
  HostTensor out = t;
  const size_t row = t.shape[0] == 0 ? 0 : t.data.size() / static_cast<size_t>(t.shape[0]);
  out.shape[0] = rows;
  if (row == 0) {
    HostTensor z = ZerosTensor(t.dtype, out.shape);
    return z;
  }
  out.data.resize(row * static_cast<size_t>(rows), '\0');
  return out;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = mant;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((m & 0x3FF) << 13);
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFF;
  if (abs > 0x7F800000) return sign | 0x7E00;   // NaN
  if (abs >= 0x477FF000) return sign | 0x7C00;  // rounds to >= 65520: inf
  if (abs < 0x38800000) {                       // below the smallest normal half (2^-14)
    if (abs < 0x33000000) return sign;          // below half the smallest subnormal
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - e;  // 14 + (127 - 15) - e + 13 ... = bits to drop
    const uint32_t kept = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = kept + ((rem > half || (rem == half && (kept & 1))) ? 1 : 0);
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t e = (abs >> 23) - 127 + 15;
  const uint32_t m = abs & 0x7FFFFF;
  uint32_t h = (e << 10) | (m >> 13);
  const uint32_t rem = m & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // may carry into the exponent: fine
  return static_cast<uint16_t>(sign | h);
}

float BFloat16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN
  const uint32_t rounding = 0x7FFF + ((x >> 16) & 1);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

absl::StatusOr<HostTensor> CastTo(const HostTensor& t, DType to) {
  if (t.dtype == to) return t;
  if (!IsFloating(t.dtype) || !IsFloating(to)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot cast ", DTypeName(t.dtype), " to ", DTypeName(to)));
  }
  const int64_t n = t.numel();
  auto load = [&](int64_t i) -> double {
    const char* p = t.data.data() + i * DTypeSize(t.dtype);
    switch (t.dtype) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      case DType::kF64: {
        double d;
        std::memcpy(&d, p, 8);
        return d;
      }
      case DType::kF16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return HalfToFloat(h);
      }
      default: {
        uint16_t b;
        std::memcpy(&b, p, 2);
        return BFloat16ToFloat(b);
      }
    }
  };
  HostTensor out;
  out.dtype = to;
  out.shape = t.shape;
  out.data.resize(static_cast<size_t>(n) * DTypeSize(to));
  for (int64_t i = 0; i < n; ++i) {
    const double v = load(i);
    char* q = out.data.data() + i * DTypeSize(to);
    switch (to) {
      case DType::kF32: {
        const float f = static_cast<float>(v);
        std::memcpy(q, &f, 4);
        break;
      }
      case DType::kF64:
        std::memcpy(q, &v, 8);
        break;
      case DType::kF16: {
        const uint16_t h = FloatToHalf(static_cast<float>(v));
        std::memcpy(q, &h, 2);
        break;
      }
      default: {
        const uint16_t b = FloatToBFloat16(static_cast<float>(v));
        std::memcpy(q, &b, 2);
        break;
      }
    }
  }
  return out;
}

}  // namespace mt::checkpoint
