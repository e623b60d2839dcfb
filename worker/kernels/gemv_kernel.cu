// See gemv.h. Two kernels, both launched as dependents (dependent_launch.cuh): each issues its
// first weight loads before it waits for the kernel before it, so the weight streams while the
// LayerNorm or attention before it finishes.
//
// One row (any dtype), and up to 4 in fp32, CUDA cores: a group of 1-8 warps per output
// feature, each lane with eight 16-byte weight loads in flight (cache-streaming loads: the
// weight is read once per launch and should not push x out of L1), the matching elements of
// every row of x read through L1; fp32 sums reduced over the warp, then over the group in shared
// memory. A group covers a 2,048-element bf16 row (one warp) or an 8,192-element one (four) in
// one pass: one round trip to memory per warp, where one warp looping over a long row waited for
// eight.
//
// 2 to 8 rows (bf16, fp16), tensor cores: reading x for every weight element bounds the
// CUDA-core kernel by x's reads and its FMAs past one row, so a warp computes 16 output features
// for the rows of x with mma.sync m16n8k16 (fp32 accumulators). The k order inside a 32-column
// slice is permuted identically for the weight and x (a dot product does not care), so that each
// lane loads 16 contiguous bytes of a weight row and of an x row straight into the fragments:
// lane (g, t) (g = lane / 4, t = lane % 4) reads columns [8 t, 8 t + 8) of weight rows g and
// g + 8 and of x row g; its first 4 columns are the fragments' k = 2t, 2t + 1, 2t + 8, 2t + 9 of
// one mma, the next 4 the same of a second. A block's 8 warps split the columns, two passes of
// loads in flight per warp, and sum in shared memory.
//
// With an input LayerNorm (GemvArgs::norm_weight; one row), each block of the CUDA-core kernel
// stages the LayerNorm's weight and bias in shared memory before the wait, then adds the
// residual to x and normalises the row into shared memory (the whole block, a few values a
// thread) and reads x from there: the LayerNorm kernel before a decode step's QKV, fc1 and
// logits goes away. It pays at one row only: every block normalises the row again, and at 8 rows
// (the tensor-core kernel, 16 features a block) that doubled a 1.3B decode step's time, where at
// one row it took 2% off 1.3B's step and 7% off GPT-2 124M's (0% and 3% in another lease;
// bench/RESULTS.md, 2026-12-03).
//
// Measured against cuBLAS (bench/generate/gemv_bench.cc, bench/RESULTS.md, 2026-12-03): a
// one-wave form of both kernels (blocks looping over features, every row prefetched into L2
// before the wait) read 1.3B's weights slower at every row count, and a second m16n8 tile for
// 9 to 16 rows was slower than cuBLAS; those take cuBLAS.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "worker/kernels/dependent_launch.cuh"
#include "worker/kernels/float_convert.cuh"
#include "worker/kernels/gemv_launch.h"

namespace mt::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kLoads = 8;                 // CUDA cores: 16-byte weight loads a lane keeps in flight
constexpr int kChunk = 32 * kLoads;       // packs a warp covers per pass
constexpr int kMmaSlots = 4;              // tensor cores: 16-byte loads per weight row per pass
constexpr int kMmaCols = 32 * kMmaSlots;  // columns a warp covers per pass (4 lanes x 8 a slot)

__device__ __forceinline__ int4 Zero4() { return make_int4(0, 0, 0, 0); }

// GemvArgs in the element type, passed to the kernels by value.
template <typename T>
struct Args {
  const T* x;
  const T* w;
  const T* bias;
  bool gelu;
  T* y;
  int rows;
  int64_t out, in;
  const T* residual;
  const T* norm_weight;
  const T* norm_bias;
  float eps;
  T* sum;
};

template <typename T>
Args<T> Typed(const GemvArgs& a) {
  return Args<T>{static_cast<const T*>(a.x),
                 static_cast<const T*>(a.w),
                 static_cast<const T*>(a.bias),
                 a.gelu,
                 static_cast<T*>(a.y),
                 static_cast<int>(a.rows),
                 a.out,
                 a.in,
                 static_cast<const T*>(a.residual),
                 static_cast<const T*>(a.norm_weight),
                 static_cast<const T*>(a.norm_bias),
                 a.eps,
                 static_cast<T*>(a.sum)};
}

// ---- The input LayerNorm (one row) ----

// Shared memory of the input LayerNorm: its weight, its bias and the row, `in` elements each.
template <typename T>
size_t NormSharedBytes(int64_t in) {
  return static_cast<size_t>(3 * in) * sizeof(T);
}

// Before the wait: the LayerNorm's weight and bias (parameters: no kernel of the stream writes
// them) into shared memory.
template <typename T>
__device__ __forceinline__ void StageNormParams(const Args<T>& a, T* s_w, T* s_b) {
  using P = Pack<T, 16 / sizeof(T)>;
  const int64_t npacks = a.in / (16 / sizeof(T));
  for (int64_t p = threadIdx.x; p < npacks; p += kThreads) {
    reinterpret_cast<P*>(s_w)[p] = reinterpret_cast<const P*>(a.norm_weight)[p];
    reinterpret_cast<P*>(s_b)[p] = reinterpret_cast<const P*>(a.norm_bias)[p];
  }
}

// The block's sum of every thread's v (a warp sum, then over the warps through `scratch`).
__device__ __forceinline__ float BlockSum(float v, float (&scratch)[kWarps]) {
  v = WarpSum(v);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) total += scratch[i];
  return total;
}

// After the wait: x (+ the residual, the sum rounded to T and written out by block 0) into
// shared memory and normalised there by the whole block: mean and biased variance in fp32 (two
// passes, as the LayerNorm kernel), each value rounded to T. Every thread handles the same
// packs in each pass, so only the sums need barriers.
template <typename T>
__device__ void NormalizeRow(const Args<T>& a, const T* s_w, const T* s_b, T* xs) {
  constexpr int kVec = 16 / sizeof(T);
  using P = Pack<T, kVec>;
  __shared__ float scratch[2][kWarps];
  const int npacks = static_cast<int>(a.in / kVec);
  const P* x = reinterpret_cast<const P*>(a.x);
  const P* residual = reinterpret_cast<const P*>(a.residual);
  P* sum = blockIdx.x == 0 ? reinterpret_cast<P*>(a.sum) : nullptr;
  P* s = reinterpret_cast<P*>(xs);
  float acc = 0.0f;
  for (int p = threadIdx.x; p < npacks; p += kThreads) {
    P v = x[p];
    if (residual != nullptr) {
      v = AddPacks(v, residual[p]);
      if (sum != nullptr) sum[p] = v;
    }
    s[p] = v;
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc += F(v.v[k]);
  }
  const float mean = BlockSum(acc, scratch[0]) / static_cast<float>(a.in);
  acc = 0.0f;
  for (int p = threadIdx.x; p < npacks; p += kThreads) {
    const P v = s[p];
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc += (F(v.v[k]) - mean) * (F(v.v[k]) - mean);
  }
  const float rstd = rsqrtf(BlockSum(acc, scratch[1]) / static_cast<float>(a.in) + a.eps);
  for (int p = threadIdx.x; p < npacks; p += kThreads) {
    const P v = s[p];
    const P w = reinterpret_cast<const P*>(s_w)[p], b = reinterpret_cast<const P*>(s_b)[p];
    P o;
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      o.v[k] = To<T>((F(v.v[k]) - mean) * rstd * F(w.v[k]) + F(b.v[k]));
    s[p] = o;
  }
  __syncthreads();
}

// The kernel's x: the argument, or with kNorm the normalised row in shared memory. Call where
// the kernel waits for its prerequisites: stages before, normalises after.
template <typename T, bool kNorm>
__device__ __forceinline__ const T* PrepareInput(const Args<T>& a, int4* smem) {
  if constexpr (kNorm) {
    T* s_w = reinterpret_cast<T*>(smem);
    T* s_b = s_w + a.in;
    T* xs = s_b + a.in;
    StageNormParams(a, s_w, s_b);
    WaitForPrerequisites();
    NormalizeRow(a, s_w, s_b, xs);
    return xs;
  } else {
    WaitForPrerequisites();
    return a.x;
  }
}

template <typename T>
__device__ __forceinline__ float Epilogue(float v, const T* bias, int64_t j, bool gelu) {
  if (bias != nullptr) v += F(bias[j]);
  return gelu ? GeluTanh(v) : v;
}

// ---- CUDA cores ----

// The weight packs [first + 32 u] of a row (zeros past its end or for a dead feature).
__device__ __forceinline__ void LoadRowPacks(const int4* wj, int64_t first, int64_t npacks,
                                             bool live, int4 (&raw)[kLoads]) {
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    const int64_t p = first + 32 * u;
    raw[u] = live && p < npacks ? __ldcs(wj + p) : Zero4();
  }
}

template <typename T, int kRows>
__device__ __forceinline__ void AccumulatePacks(const T* x, const int4 (&raw)[kLoads],
                                                int64_t first, int64_t npacks, int rows, int64_t in,
                                                float (&acc)[kRows]) {
  constexpr int kVec = 16 / sizeof(T);
  using P = Pack<T, kVec>;
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    const int64_t p = first + 32 * u;
    if (p >= npacks) break;
    const P wp = *reinterpret_cast<const P*>(&raw[u]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= rows) break;
      const P xp = reinterpret_cast<const P*>(x + r * in)[p];
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[r] = fmaf(F(xp.v[e]), F(wp.v[e]), acc[r]);
    }
  }
}

// kSplit warps per output feature (1, 2, 4 or 8), kWarps / kSplit features per block; kNorm:
// the input LayerNorm (kRows = 1). Four blocks an SM (64 registers a thread; 3 at the 76-80 the
// compiler took unbounded, a few bytes spilled with kNorm): a third more weight in flight took
// 4% off a 1.3B decode step at batch 1 and 2% off 124M's (bench/RESULTS.md, 2026-12-03, 14:50).
template <typename T, int kRows, int kSplit, bool kNorm>
__global__ void __launch_bounds__(kThreads, 4) GemvKernel(const Args<T> a) {
  static_assert(kRows == 1 || !kNorm, "the input LayerNorm takes one row");
  constexpr int kVec = 16 / sizeof(T);
  __shared__ float partial[kWarps][kRows];
  extern __shared__ int4 norm_smem[];
  const int rows = a.rows;
  const int64_t out = a.out, in = a.in;
  AllowDependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int part = warp % kSplit;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * (kWarps / kSplit) + warp / kSplit;
  const bool live = j < out;
  const int4* wj = reinterpret_cast<const int4*>(a.w + (live ? j : 0) * in);
  const int64_t npacks = in / kVec;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  int4 raw[kLoads];
  int64_t start = static_cast<int64_t>(part) * kChunk;
  LoadRowPacks(wj, start + lane, npacks, live, raw);
  // x is the kernel before's output; y may still be read by one.
  const T* x = PrepareInput<T, kNorm>(a, norm_smem);
  while (start < npacks) {
    AccumulatePacks<T, kRows>(x, raw, start + lane, npacks, rows, in, acc);
    start += static_cast<int64_t>(kSplit) * kChunk;
    if (start < npacks) LoadRowPacks(wj, start + lane, npacks, live, raw);
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = WarpSum(acc[r]);
  if constexpr (kSplit > 1) {
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) partial[warp][r] = acc[r];
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      acc[r] = 0.0f;
#pragma unroll
      for (int s = 0; s < kSplit; ++s) acc[r] += partial[warp + s][r];
    }
  }
  if (lane != 0 || !live) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r < rows) a.y[r * out + j] = To<T>(Epilogue(acc[r], a.bias, j, a.gelu));
  }
}

// The fewest warps per feature (a power of two, at most kWarps) that cover a row in one pass.
int SplitFor(int64_t npacks) {
  int split = 1;
  while (split < kWarps && static_cast<int64_t>(split) * kChunk < npacks) split *= 2;
  return split;
}

template <typename T, int kRows, int kSplit>
cudaError_t LaunchCudaCores(const Args<T>& a, cudaStream_t stream) {
  constexpr int64_t kPerBlock = kWarps / kSplit;
  const dim3 grid(static_cast<unsigned>((a.out + kPerBlock - 1) / kPerBlock));
  if constexpr (kRows == 1) {
    if (a.norm_weight != nullptr) {
      return LaunchDependent(GemvKernel<T, 1, kSplit, true>, grid, dim3(kThreads),
                             NormSharedBytes<T>(a.in), stream, a);
    }
  }
  return LaunchDependent(GemvKernel<T, kRows, kSplit, false>, grid, dim3(kThreads), 0, stream, a);
}

template <typename T, int kRows>
cudaError_t LaunchRows(const Args<T>& a, cudaStream_t stream) {
  switch (SplitFor(a.in / (16 / static_cast<int64_t>(sizeof(T))))) {
    case 1:
      return LaunchCudaCores<T, kRows, 1>(a, stream);
    case 2:
      return LaunchCudaCores<T, kRows, 2>(a, stream);
    case 4:
      return LaunchCudaCores<T, kRows, 4>(a, stream);
    default:
      return LaunchCudaCores<T, kRows, 8>(a, stream);
  }
}

// ---- Tensor cores ----

// d += a b for one m16n8k16 tile: a = 16 weight rows x 16 k, b = 16 k x 8 rows of x.
template <typename T>
__device__ __forceinline__ void Mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// A warp's weight slice of one pass: rows g and g + 8 of the block's 16, columns
// [col0 + 32 u, + 8) for each slot u (zeros past the row's end or the matrix).
template <typename T>
__device__ __forceinline__ void LoadTile(const T* lo, const T* hi, bool lo_live, bool hi_live,
                                         int64_t col0, int64_t in, int4 (&a_lo)[kMmaSlots],
                                         int4 (&a_hi)[kMmaSlots]) {
#pragma unroll
  for (int u = 0; u < kMmaSlots; ++u) {
    const int64_t c = col0 + 32 * u;
    a_lo[u] = lo_live && c < in ? __ldcs(reinterpret_cast<const int4*>(lo + c)) : Zero4();
    a_hi[u] = hi_live && c < in ? __ldcs(reinterpret_cast<const int4*>(hi + c)) : Zero4();
  }
}

// One pass of a warp: the mmas of its slice (columns pass * kMmaCols + ...) against x row g.
template <typename T>
__device__ __forceinline__ void MmaPass(const T* x, const int4 (&a_lo)[kMmaSlots],
                                        const int4 (&a_hi)[kMmaSlots], int64_t pass, int g, int t,
                                        int rows, int64_t in, float (&acc)[4]) {
#pragma unroll
  for (int u = 0; u < kMmaSlots; ++u) {
    const int64_t c = pass * kMmaCols + 32 * u + 8 * t;
    const uint32_t* wl = reinterpret_cast<const uint32_t*>(&a_lo[u]);
    const uint32_t* wh = reinterpret_cast<const uint32_t*>(&a_hi[u]);
    const int4 xv = c < in && g < rows ? *reinterpret_cast<const int4*>(x + g * in + c) : Zero4();
    const uint32_t* xb = reinterpret_cast<const uint32_t*>(&xv);
    Mma<T>(acc, wl[0], wh[0], wl[1], wh[1], xb[0], xb[1]);
    Mma<T>(acc, wl[2], wh[2], wl[3], wh[3], xb[2], xb[3]);
  }
}

// A block computes 16 output features for up to 8 rows of x.
template <typename T>
__global__ void __launch_bounds__(kThreads) MmaGemvKernel(const Args<T> a) {
  __shared__ float partial[kWarps][32][4];
  const int rows = a.rows;
  const int64_t out = a.out, in = a.in;
  AllowDependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * 16;
  const bool lo_live = j0 + g < out, hi_live = j0 + g + 8 < out;
  const T* lo = a.w + (lo_live ? j0 + g : 0) * in;
  const T* hi = a.w + (hi_live ? j0 + g + 8 : 0) * in;
  const int64_t passes = (in + kMmaCols - 1) / kMmaCols;
  float acc[4] = {};
  int4 a_lo[kMmaSlots], a_hi[kMmaSlots];
  int64_t pass = warp;
  if (pass < passes) LoadTile(lo, hi, lo_live, hi_live, pass * kMmaCols + 8 * t, in, a_lo, a_hi);
  WaitForPrerequisites();  // x is the kernel before's output; y may still be read by one
  const T* x = a.x;
  for (; pass < passes; pass += kWarps) {
    int4 n_lo[kMmaSlots], n_hi[kMmaSlots];
    const bool more = pass + kWarps < passes;
    if (more) {
      LoadTile(lo, hi, lo_live, hi_live, (pass + kWarps) * kMmaCols + 8 * t, in, n_lo, n_hi);
    }
    MmaPass<T>(x, a_lo, a_hi, pass, g, t, rows, in, acc);
    if (more) {
#pragma unroll
      for (int u = 0; u < kMmaSlots; ++u) {
        a_lo[u] = n_lo[u];
        a_hi[u] = n_hi[u];
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][lane][i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // The accumulator layout of m16n8: i < 2 feature g, else g + 8; row 2t + (i & 1).
    const int64_t j = j0 + g + (i < 2 ? 0 : 8);
    const int n = 2 * t + (i & 1);
    if (j >= out || n >= rows) continue;
    float s = 0.0f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) s += partial[v][lane][i];
    a.y[n * out + j] = To<T>(Epilogue(s, a.bias, j, a.gelu));
  }
}

template <typename T>
cudaError_t LaunchTensorCores(const Args<T>& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((a.out + 15) / 16));
  return LaunchDependent(MmaGemvKernel<T>, grid, dim3(kThreads), 0, stream, a);
}

template <typename T>
cudaError_t LaunchTyped(const GemvArgs& args, cudaStream_t stream) {
  const Args<T> a = Typed<T>(args);
  if (a.rows <= 1) return LaunchRows<T, 1>(a, stream);
  if constexpr (std::is_same_v<T, float>) {
    if (a.rows <= 2) return LaunchRows<T, 2>(a, stream);
    return LaunchRows<T, 4>(a, stream);
  } else {
    return LaunchTensorCores<T>(a, stream);
  }
}

}  // namespace

int64_t GemvMaxRows(FloatKind kind) {
  return kind == FloatKind::kFloat32 ? kGemvCudaCoreRows : kGemvTensorCoreRows;
}

bool GemvNormFits(FloatKind kind, int64_t rows, int64_t in) {
  constexpr size_t kMaxBytes = 48 * 1024;  // without opting in to more per block
  if (rows != 1) return false;
  switch (kind) {
    case FloatKind::kBFloat16:
      return NormSharedBytes<__nv_bfloat16>(in) <= kMaxBytes;
    case FloatKind::kFloat16:
      return NormSharedBytes<__half>(in) <= kMaxBytes;
    case FloatKind::kFloat32:
      return NormSharedBytes<float>(in) <= kMaxBytes;
  }
  return false;
}

cudaError_t LaunchGemv(FloatKind kind, const GemvArgs& args, cudaStream_t stream) {
  if (args.rows < 1 || args.rows > GemvMaxRows(kind)) return cudaErrorInvalidValue;
  if (args.norm_weight != nullptr &&
      (args.norm_bias == nullptr || !GemvNormFits(kind, args.rows, args.in))) {
    return cudaErrorInvalidValue;
  }
  if (args.out == 0) return cudaSuccess;
  switch (kind) {
    case FloatKind::kBFloat16:
      return LaunchTyped<__nv_bfloat16>(args, stream);
    case FloatKind::kFloat16:
      return LaunchTyped<__half>(args, stream);
    case FloatKind::kFloat32:
      return LaunchTyped<float>(args, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mt::kernels
