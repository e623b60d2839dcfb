// See layer_norm.h. Rows of up to 1,024 16-byte packs (8,192 16-bit or 4,096 fp32 values) take
// the register kernels: a group of G warps (1, 2, 4 or 8) holds a row in registers, loaded
// once, and reduces over the group (shuffles, then shared memory past one warp). Wider or
// unaligned rows take the streaming kernels (one warp per row, rows read again per pass).
// Statistics and every product in fp32. Backward: rows of exactly 32 W packs (W = 1, 2, 3, 4, 6
// or 8: GPT-2's 768, 1,024, 2,048 in 16 bits) take the staged kernel, one pack a thread, a
// group's next three rows copied into shared memory by the copy engine (bulk_copy.cuh) while it
// works; the pipelined kernel (the next row's loads in registers, one row ahead) is the same
// shape and sums, bit for bit. Other rows of up to 1,024 packs take the register kernel (a row
// per group of warps, two packs a thread). d gamma / d beta summed over a block's rows (one
// copy per group, each column owned by one thread, no atomics), then over blocks by a second
// kernel. (A backward that staged the next rows in shared memory with per-thread cp.async
// copies ran at 0.76-0.81x the register kernel on an H200: bench/RESULTS.md, 2026-12-05.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "worker/kernels/bulk_copy.cuh"
#include "worker/kernels/dependent_launch.cuh"
#include "worker/kernels/dropout_rng.cuh"
#include "worker/kernels/float_convert.cuh"
#include "worker/kernels/layer_norm_launch.h"

namespace mt::kernels {
namespace {

constexpr int kWarps = 8;  // warps per block
constexpr int kThreads = kWarps * 32;
constexpr int kSms = 132;                     // an H100's or H200's SMs
constexpr int kMaxBackwardBlocks = 3 * kSms;  // the register backward: one wave
constexpr int kMaxPartialBlocks = 6 * kSms;   // the most any backward kernel runs
constexpr int kForwardPacks = 4;              // packs a thread holds in the register forward
constexpr int kBackwardPacks = 2;        // and in the register backward (more: fewer blocks an SM)
constexpr int kBackwardBlocksPerSm = 3;  // the register backward: <= 85 registers, no spills
constexpr int64_t kFewRows = 264;        // below: the forward spreads a row over 8 warps

// The sums of v.x and v.y over the G warps of this thread's group (G divides kWarps). Every
// thread of the block must call it (it holds barriers past G = 1); `scratch` is kWarps float2s
// of shared memory, reused from call to call.
template <int G>
__device__ __forceinline__ float2 GroupSum(float2 v, float2* scratch) {
  v.x = WarpSum(v.x);
  v.y = WarpSum(v.y);
  if constexpr (G == 1) {
    return v;
  } else {
    const int warp = threadIdx.x / 32;
    __syncthreads();  // the previous call's reads are done
    if (threadIdx.x % 32 == 0) scratch[warp] = v;
    __syncthreads();
    const int first = warp / G * G;
    float2 s = scratch[first];
#pragma unroll
    for (int i = 1; i < G; ++i) {
      s.x += scratch[first + i].x;
      s.y += scratch[first + i].y;
    }
    return s;
  }
}

// x + r (+ pack p of the residual's bias when `bias` is non-null), in fp32, rounded once.
template <typename T, int kVec>
__device__ __forceinline__ Pack<T, kVec> SumPacks(const Pack<T, kVec>& x, const Pack<T, kVec>& r,
                                                  const T* bias, int64_t p) {
  if (bias == nullptr) return AddPacks(x, r);
  const Pack<T, kVec> b = reinterpret_cast<const Pack<T, kVec>*>(bias)[p];
  Pack<T, kVec> s;
#pragma unroll
  for (int k = 0; k < kVec; ++k) s.v[k] = To<T>(F(x.v[k]) + F(r.v[k]) + F(b.v[k]));
  return s;
}

// x + dropout(r (+ the residual's bias)), the pack's first element `first` of the tensor: in
// fp32, rounded once.
template <typename T, int kVec>
__device__ __forceinline__ Pack<T, kVec> DropSumPacks(const Pack<T, kVec>& x,
                                                      const Pack<T, kVec>& r, const T* bias,
                                                      int64_t p, const PhiloxSeedOffset& seeds,
                                                      int64_t first, float drop_p, float scale) {
  float keep[kVec];
  KeepScales<kVec>(seeds, first, drop_p, scale, keep);
  Pack<T, kVec> b{};
  if (bias != nullptr) b = reinterpret_cast<const Pack<T, kVec>*>(bias)[p];
  Pack<T, kVec> s;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const float v = bias != nullptr ? F(r.v[k]) + F(b.v[k]) : F(r.v[k]);
    s.v[k] = To<T>(F(x.v[k]) + v * keep[k]);
  }
  return s;
}

// The pack's values times their keep-scales (dropout_rng.h), rounded: dropout's backward.
template <typename T, int kVec>
__device__ __forceinline__ Pack<T, kVec> DropPack(const Pack<T, kVec>& g,
                                                  const PhiloxSeedOffset& seeds, int64_t first,
                                                  float drop_p, float scale) {
  float keep[kVec];
  KeepScales<kVec>(seeds, first, drop_p, scale, keep);
  Pack<T, kVec> o;
#pragma unroll
  for (int k = 0; k < kVec; ++k) o.v[k] = To<T>(F(g.v[k]) * keep[k]);
  return o;
}

// One row per group of G warps; thread t of a group holds packs t, t + 32 G, ... (at most
// kForwardPacks). The grid covers the rows once. kDrop: the residual (+ its bias) goes through
// dropout before it joins x.
template <typename T, int kVec, int G, bool kDrop>
__global__ void __launch_bounds__(kThreads)
    RegisterForwardKernel(const T* x, const T* residual, const T* residual_bias, T* sum,
                          const T* weight, const T* bias, T* y, float* mean_out, float* rstd_out,
                          int64_t rows, int64_t hidden, float eps, DropoutArgs drop) {
  using P = Pack<T, kVec>;
  __shared__ float2 scratch[kWarps];
  // Launched as a dependent for a few rows (dependent_launch.cuh); no-ops otherwise.
  AllowDependents();
  WaitForPrerequisites();
  constexpr int kGroup = 32 * G;
  const int t = threadIdx.x % kGroup;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kWarps / G) + threadIdx.x / kGroup;
  const bool live = row < rows;
  const int64_t npacks = hidden / kVec;
  const int64_t offset = live ? row * hidden : 0;
  const P* xr = reinterpret_cast<const P*>(x + offset);
  const P* rr = reinterpret_cast<const P*>(residual + (residual != nullptr ? offset : 0));
  P* sr = reinterpret_cast<P*>(sum + (sum != nullptr ? offset : 0));
  PhiloxSeedOffset seeds{};
  float scale = 1.0f;
  if constexpr (kDrop) {
    seeds = Unpack(drop.rng);
    scale = 1.0f / (1.0f - drop.p);
  }
  P a[kForwardPacks];
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < kForwardPacks; ++j) {
    const int64_t p = t + j * kGroup;
    if (!live || p >= npacks) continue;
    a[j] = xr[p];
    if (residual != nullptr) {
      if constexpr (kDrop) {
        a[j] = DropSumPacks(a[j], rr[p], residual_bias, p, seeds, offset + p * kVec, drop.p, scale);
      } else {
        a[j] = SumPacks(a[j], rr[p], residual_bias, p);
      }
      sr[p] = a[j];  // the LayerNorm reads the sum as stored (rounded to T)
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc += F(a[j].v[k]);
  }
  const float mean = GroupSum<G>(make_float2(acc, 0.0f), scratch).x / static_cast<float>(hidden);
  acc = 0.0f;
#pragma unroll
  for (int j = 0; j < kForwardPacks; ++j) {
    const int64_t p = t + j * kGroup;
    if (!live || p >= npacks) continue;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float d = F(a[j].v[k]) - mean;
      acc += d * d;
    }
  }
  const float var = GroupSum<G>(make_float2(acc, 0.0f), scratch).x / static_cast<float>(hidden);
  const float rstd = rsqrtf(var + eps);
  if (!live) return;
  const P* wr = reinterpret_cast<const P*>(weight);
  const P* br = reinterpret_cast<const P*>(bias);
  P* yr = reinterpret_cast<P*>(y + offset);
#pragma unroll
  for (int j = 0; j < kForwardPacks; ++j) {
    const int64_t p = t + j * kGroup;
    if (p >= npacks) continue;
    const P w = wr[p], b = br[p];
    P o;
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      o.v[k] = To<T>((F(a[j].v[k]) - mean) * rstd * F(w.v[k]) + F(b.v[k]));
    yr[p] = o;
  }
  if (t == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// Any width (hidden % kVec == 0): one warp per row, the row read again for each pass.
template <typename T, int kVec, bool kDrop>
__global__ void __launch_bounds__(kThreads)
    StreamingForwardKernel(const T* x, const T* residual, const T* residual_bias, T* sum,
                           const T* weight, const T* bias, T* y, float* mean_out, float* rstd_out,
                           int64_t rows, int64_t hidden, float eps, DropoutArgs drop) {
  using P = Pack<T, kVec>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t npacks = hidden / kVec;
  const P* in = reinterpret_cast<const P*>(x + row * hidden);
  if (residual != nullptr) {
    const P* rr = reinterpret_cast<const P*>(residual + row * hidden);
    P* sr = reinterpret_cast<P*>(sum + row * hidden);
    if constexpr (kDrop) {
      const PhiloxSeedOffset seeds = Unpack(drop.rng);
      const float scale = 1.0f / (1.0f - drop.p);
      for (int64_t p = lane; p < npacks; p += 32) {
        sr[p] = DropSumPacks(in[p], rr[p], residual_bias, p, seeds, row * hidden + p * kVec, drop.p,
                             scale);
      }
    } else {
      for (int64_t p = lane; p < npacks; p += 32) sr[p] = SumPacks(in[p], rr[p], residual_bias, p);
    }
    in = sr;  // this thread reads back only what it wrote itself
  }
  float acc = 0.0f;
  for (int64_t p = lane; p < npacks; p += 32) {
    const P a = in[p];
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc += F(a.v[k]);
  }
  const float mean = WarpSum(acc) / static_cast<float>(hidden);
  acc = 0.0f;
  for (int64_t p = lane; p < npacks; p += 32) {
    const P a = in[p];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float d = F(a.v[k]) - mean;
      acc += d * d;
    }
  }
  const float rstd = rsqrtf(WarpSum(acc) / static_cast<float>(hidden) + eps);
  const P* wr = reinterpret_cast<const P*>(weight);
  const P* br = reinterpret_cast<const P*>(bias);
  P* yr = reinterpret_cast<P*>(y + row * hidden);
  for (int64_t p = lane; p < npacks; p += 32) {
    const P a = in[p], w = wr[p], b = br[p];
    P o;
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      o.v[k] = To<T>((F(a.v[k]) - mean) * rstd * F(w.v[k]) + F(b.v[k]));
    yr[p] = o;
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// The column sums a backward kernel keeps: d weight, d bias, and where asked the residual bias's
// gradient (the sums of d input's columns).
__host__ __device__ constexpr int SumsOf(bool residual_bias) { return residual_bias ? 3 : 2; }
static_assert(SumsOf(true) == LayerNormBackwardSums(true) &&
                  SumsOf(false) == LayerNormBackwardSums(false),
              "partial's rows as layer_norm_launch.h sizes them");

// Shared memory of the backward kernels: `copies` x [sums][hidden] fp32 (the column sums, sums
// 2 or 3), then kWarps float2 of reduction scratch.
size_t BackwardSharedBytes(int64_t hidden, int copies, int sums) {
  return static_cast<size_t>(copies) * sums * hidden * sizeof(float) + kWarps * sizeof(float2);
}

__device__ __forceinline__ void ZeroShared(float* shared, int64_t n) {
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) shared[c] = 0.0f;
  __syncthreads();
}

// partial: [sums][gridDim.x][hidden] fp32 (d weight, d bias, then the residual bias's gradient),
// written whole by each block: the sums of the block's `copies` x [sums][hidden] shared sums.
__device__ __forceinline__ void WritePartial(const float* shared, int copies, int sums,
                                             float* partial, int64_t hidden) {
  AllowDependents();  // FinishKernel may be scheduled; it waits for this grid's end to read
  __syncthreads();
  for (int k = 0; k < sums; ++k) {
    float* out = partial + (static_cast<int64_t>(k) * gridDim.x + blockIdx.x) * hidden;
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
      float v = 0.0f;
      for (int i = 0; i < copies; ++i)
        v += shared[(static_cast<int64_t>(i) * sums + k) * hidden + c];
      out[c] = v;
    }
  }
}

// sums[0, kVec) = v (16-byte aligned shared memory, kVec a multiple of 4).
template <int kVec>
__device__ __forceinline__ void StoreSums(float* sums, const float (&v)[kVec]) {
  static_assert(kVec % 4 == 0, "float4 steps");
  float4* s4 = reinterpret_cast<float4*>(sums);
#pragma unroll
  for (int q = 0; q < kVec / 4; ++q) {
    s4[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
  }
}

// sums[0, kVec) += v (16-byte aligned shared memory, kVec a multiple of 4).
template <int kVec>
__device__ __forceinline__ void AddToShared(float* sums, const float (&v)[kVec]) {
  static_assert(kVec % 4 == 0, "float4 steps");
  float4* s4 = reinterpret_cast<float4*>(sums);
#pragma unroll
  for (int q = 0; q < kVec / 4; ++q) {
    float4 t = s4[q];
    t.x += v[4 * q];
    t.y += v[4 * q + 1];
    t.z += v[4 * q + 2];
    t.w += v[4 * q + 3];
    s4[q] = t;
  }
}

// The backward's first pass over one pack of a row (dy g, input a, weight w; the row's mean mu
// and rstd rs): acc += (sum of dy w, sum of dy w xhat) over its elements, and its d weight /
// d bias products added to the group's shared sums of its columns (sdw, sdb).
template <int kVec, typename P>
__device__ __forceinline__ void AddPackProducts(const P& g, const P& a, const P& w, float mu,
                                                float rs, float2& acc, float* sdw, float* sdb) {
  float pdw[kVec], pdb[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const float xhat = (F(a.v[k]) - mu) * rs;
    const float d = F(g.v[k]);
    const float gw = d * F(w.v[k]);
    acc.x += gw;
    acc.y += gw * xhat;
    pdw[k] = d * xhat;
    pdb[k] = d;
  }
  AddToShared<kVec>(sdw, pdw);
  AddToShared<kVec>(sdb, pdb);
}

// sums[0, kVec) += pack o's values (d input as stored: the residual bias's gradient sums the
// rounded values, as a column sum of d input would).
template <int kVec, typename P>
__device__ __forceinline__ void AddPackToShared(float* sums, const P& o) {
  float v[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) v[k] = F(o.v[k]);
  AddToShared<kVec>(sums, v);
}

// The second pass over one pack: d input = rs (dy w - m1 - xhat m2), plus the residual
// stream's gradient r where with_r (by value and a flag: a pointer to a pack in registers would
// put the pack on the stack).
template <int kVec, typename P>
__device__ __forceinline__ P PackGradient(const P& g, const P& a, const P& w, float mu, float rs,
                                          float m1, float m2, const P& r, bool with_r) {
  using T = std::remove_cv_t<std::remove_reference_t<decltype(g.v[0])>>;
  P o;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const float xhat = (F(a.v[k]) - mu) * rs;
    float v = rs * (F(g.v[k]) * F(w.v[k]) - m1 - xhat * m2);
    if (with_r) v += F(r.v[k]);
    o.v[k] = To<T>(v);
  }
  return o;
}

// Writes pack p of a row's d input `o` (the row starting at element `offset`); with kDrop also
// dropout's backward of it into dbranch. Returns what the residual bias's gradient sums: d input,
// or dbranch with kDrop.
template <int kVec, bool kDrop, typename P, typename T>
__device__ __forceinline__ P WriteGradientPack(const P& o, int64_t offset, int64_t p, T* dx,
                                               const DropoutArgs& drop, T* dbranch) {
  reinterpret_cast<P*>(dx + offset)[p] = o;
  if constexpr (kDrop) {
    const P ob = DropPack(o, Unpack(drop.rng), offset + p * kVec, drop.p, 1.0f / (1.0f - drop.p));
    reinterpret_cast<P*>(dbranch + offset)[p] = ob;
    return ob;
  } else {
    return o;
  }
}

// WriteGradientPack, then what the residual bias's gradient sums added to the shared sums `sr`
// of the pack's columns where non-null.
template <int kVec, bool kDrop, typename P, typename T>
__device__ __forceinline__ void StoreGradientPack(const P& o, int64_t offset, int64_t p, T* dx,
                                                  const DropoutArgs& drop, T* dbranch, float* sr) {
  const P summed = WriteGradientPack<kVec, kDrop>(o, offset, p, dx, drop, dbranch);
  if (sr != nullptr) AddPackToShared<kVec>(sr, summed);
}

// One row per group of G warps at a time; thread t holds packs t, t + 32 G (kBackwardPacks) of
// the row and its weight packs for the whole run. Each group adds its rows' d weight / d bias
// products to its own copy of the sums in shared memory: a column belongs to one thread of the
// group, so no atomics, and no registers held for the sums (which cost occupancy: 124 registers
// a thread at hidden 2,048 when the sums lived in registers). kDrop: d branch (the residual's
// gradient) = dropout's backward of d input (the forward's masks drawn again), the residual
// bias's gradient its sums.
template <typename T, int kVec, int G, bool kDrop>
__global__ void __launch_bounds__(kThreads, kBackwardBlocksPerSm)
    RegisterBackwardKernel(const T* dy, const T* x, const float* mean, const float* rstd,
                           const T* weight, const T* dsum, T* dx, float* partial, int64_t rows,
                           int64_t hidden, bool residual_bias, DropoutArgs drop, T* dbranch) {
  using P = Pack<T, kVec>;
  constexpr int kGroup = 32 * G;
  constexpr int kCopies = kWarps / G;  // groups of a block = rows of a block at a time
  extern __shared__ __align__(16) float shared[];
  const int sums = SumsOf(residual_bias);
  const int group = threadIdx.x / kGroup;
  float* sdw = shared + sums * group * hidden;
  float* sdb = sdw + hidden;
  float* sdr = residual_bias ? sdb + hidden : nullptr;
  float2* scratch = reinterpret_cast<float2*>(shared + sums * kCopies * hidden);
  ZeroShared(shared, sums * kCopies * hidden);
  const int t = threadIdx.x % kGroup;
  const int64_t npacks = hidden / kVec;
  P w[kBackwardPacks];
#pragma unroll
  for (int j = 0; j < kBackwardPacks; ++j) {
    const int64_t p = t + j * kGroup;
    if (p < npacks) w[j] = reinterpret_cast<const P*>(weight)[p];
  }
  // `base` is the same for the whole block, so every thread meets GroupSum's barriers.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kCopies; base < rows;
       base += static_cast<int64_t>(gridDim.x) * kCopies) {
    const int64_t row = base + group;
    const bool live = row < rows;
    const int64_t offset = live ? row * hidden : 0;
    const P* dyr = reinterpret_cast<const P*>(dy + offset);
    const P* xr = reinterpret_cast<const P*>(x + offset);
    const float mu = live ? mean[row] : 0.0f, rs = live ? rstd[row] : 0.0f;
    P g[kBackwardPacks], a[kBackwardPacks];
    float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int j = 0; j < kBackwardPacks; ++j) {
      const int64_t p = t + j * kGroup;
      if (!live || p >= npacks) continue;
      g[j] = dyr[p];
      a[j] = xr[p];
      AddPackProducts<kVec>(g[j], a[j], w[j], mu, rs, acc, sdw + p * kVec, sdb + p * kVec);
    }
    const float2 m = GroupSum<G>(acc, scratch);
    if (!live) continue;
    const float m1 = m.x / static_cast<float>(hidden), m2 = m.y / static_cast<float>(hidden);
    const P* dsr = dsum != nullptr ? reinterpret_cast<const P*>(dsum + offset) : nullptr;
#pragma unroll
    for (int j = 0; j < kBackwardPacks; ++j) {
      const int64_t p = t + j * kGroup;
      if (p >= npacks) continue;
      P r{};
      if (dsr != nullptr) r = dsr[p];
      const P o = PackGradient<kVec>(g[j], a[j], w[j], mu, rs, m1, m2, r, dsr != nullptr);
      StoreGradientPack<kVec, kDrop>(o, offset, p, dx, drop, dbranch,
                                     sdr != nullptr ? sdr + p * kVec : nullptr);
    }
  }
  WritePartial(shared, kCopies, sums, partial, hidden);
}

// The pipelined backward's shape for rows of exactly 32 W packs (W warps a row, one pack a
// thread): rows a block holds at a time (6 to 8 warps a block), and blocks an SM (24 warps an SM,
// as the register kernel: the launch bounds leave 80-85 registers a thread, which its packs of
// this row and the next need without spilling; 64 spilled).
__host__ __device__ constexpr int PipeRows(int w) { return w >= 5 ? 1 : 8 / w; }
__host__ __device__ constexpr int PipeThreads(int w) { return PipeRows(w) * w * 32; }
__host__ __device__ constexpr int PipeBlocksPerSm(int w) {
  return 24 / (PipeRows(w) * w) > 1 ? 24 / (PipeRows(w) * w) : 1;
}
static_assert(PipeThreads(3) == 192 && PipeBlocksPerSm(3) == 4, "GPT-2 124M's rows (768 bf16)");
static_assert(PipeThreads(8) == 256 && PipeBlocksPerSm(8) == 3, "hidden 2,048 (bf16)");

// Waits for the `count` threads of named barrier `id` (1..15; 0 is __syncthreads'): a row's
// group meets here without holding up the block's other groups.
__device__ __forceinline__ void GroupBarrier(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// The sums of v.x and v.y over the W warps of a group (group `group` of its block, warp `warp`
// of the group). `buf`: W float2 of shared memory that the group alternates with a second W
// (by the row's parity): a group's next write to `buf` follows its next barrier, which every
// thread reaches only after reading `buf`.
template <int W>
__device__ __forceinline__ float2 RowSum(float2 v, float2* buf, int group, int warp) {
  v.x = WarpSum(v.x);
  v.y = WarpSum(v.y);
  if constexpr (W == 1) {
    return v;
  } else {
    if (threadIdx.x % 32 == 0) buf[warp] = v;
    GroupBarrier(1 + group, 32 * W);
    float2 s = buf[0];
#pragma unroll
    for (int i = 1; i < W; ++i) {
      s.x += buf[i].x;
      s.y += buf[i].y;
    }
    return s;
  }
}

// Rows of exactly 32 W packs: a group of W warps per row, thread t holding pack t of every row
// its group takes (rows blockIdx.x * R + group, then every gridDim.x * R-th). The next row's dy
// and x (and its mean and rstd) are loaded before this row's sums and this row's dsum with them,
// so a row's two passes wait on no load of their own, and groups meet only at their own
// barrier, once a row. The column sums go to the group's copy in shared memory as in the
// register kernel (a column belongs to one thread: no atomics).
template <typename T, int kVec, int W, bool kDrop>
__global__ void __launch_bounds__(PipeThreads(W), PipeBlocksPerSm(W))
    PipelinedBackwardKernel(const T* dy, const T* x, const float* mean, const float* rstd,
                            const T* weight, const T* dsum, T* dx, float* partial, int64_t rows,
                            int64_t hidden, bool residual_bias, DropoutArgs drop, T* dbranch) {
  using P = Pack<T, kVec>;
  constexpr int kRows = PipeRows(W);
  constexpr int kGroup = 32 * W;
  extern __shared__ __align__(16) float shared[];
  const int sums = SumsOf(residual_bias);
  const int group = threadIdx.x / kGroup;
  const int t = threadIdx.x % kGroup;
  float* sdw = shared + sums * group * hidden + t * kVec;
  float* sdb = sdw + hidden;
  float* sdr = residual_bias ? sdb + hidden : nullptr;
  float2* buf = reinterpret_cast<float2*>(shared + sums * kRows * hidden) + group * 2 * W;
  const P w = reinterpret_cast<const P*>(weight)[t];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRows;
  int64_t row = static_cast<int64_t>(blockIdx.x) * kRows + group;
  P g{}, a{};
  float mu = 0.0f, rs = 0.0f;
  if (row < rows) {
    g = reinterpret_cast<const P*>(dy + row * hidden)[t];
    a = reinterpret_cast<const P*>(x + row * hidden)[t];
    mu = mean[row];
    rs = rstd[row];
  }
  ZeroShared(shared, sums * kRows * hidden);
  for (int parity = 0; row < rows; row += stride, parity ^= 1) {
    const int64_t offset = row * hidden;
    P r{};
    if (dsum != nullptr) r = reinterpret_cast<const P*>(dsum + offset)[t];
    const int64_t next = row + stride;
    P gn{}, an{};
    float mun = 0.0f, rsn = 0.0f;
    if (next < rows) {
      gn = reinterpret_cast<const P*>(dy + next * hidden)[t];
      an = reinterpret_cast<const P*>(x + next * hidden)[t];
      mun = mean[next];
      rsn = rstd[next];
    }
    float2 acc = make_float2(0.0f, 0.0f);
    AddPackProducts<kVec>(g, a, w, mu, rs, acc, sdw, sdb);
    const float2 m = RowSum<W>(acc, buf + parity * W, group, t / 32);
    const float m1 = m.x / static_cast<float>(hidden), m2 = m.y / static_cast<float>(hidden);
    const P o = PackGradient<kVec>(g, a, w, mu, rs, m1, m2, r, dsum != nullptr);
    StoreGradientPack<kVec, kDrop>(o, offset, t, dx, drop, dbranch, sdr);
    g = gn;
    a = an;
    mu = mun;
    rs = rsn;
  }
  WritePartial(shared, kRows, sums, partial, hidden);
}

// The staged backward: the pipelined kernel's shape (W warps a row, thread t holding pack t of
// every row its group takes, the same row sums), with each group's next rows in shared memory
// instead of registers. A group keeps kStages rows in flight: its first thread issues one bulk
// copy of each of a row's dy, x and dsum (bulk_copy.cuh) kStages rows ahead, on that stage's
// barrier, and the group reads a stage once its barrier's phase completes. A stage is free again
// after the row's reduction, which every thread of the group reaches only after reading its
// packs. The column sums stay in registers (a thread's columns are the same in every row), added
// in the pipelined kernel's order and written to the group's shared copy once at the end, not
// read and written in shared memory every row. The pipelined kernel holds one row ahead in
// registers (80-85 a thread); more did not fit, and it ran at 2.3-2.6 TB/s against a copy's 3.9
// (bench/RESULTS.md, 2026-12-06).
constexpr int kStages = 3;

// The staged kernel's shared memory starts with each group's kStages x `tensors` x [hidden] rows
// (dy, x and dsum where there is one); StagedSharedBytes has the rest.
__host__ __device__ inline size_t StagedRowsBytes(int64_t hidden, int w, int tensors,
                                                  size_t element) {
  return static_cast<size_t>(PipeRows(w)) * kStages * tensors * hidden * element;
}

// Stages row `row`'s dy, x (and dsum) into `stage` ([tensors][hidden]); every thread of the
// group calls it. From compute capability 9.0, thread 0 of the group issues the bulk copies on
// `barrier`; below it, thread t copies its own pack t of each (the only one it reads), done on
// return.
template <typename T, int kVec>
__device__ __forceinline__ void StageRow(T* stage, const T* dy, const T* x, const T* dsum,
                                         int64_t row, int64_t hidden, uint64_t* barrier, int t) {
  const int64_t offset = row * hidden;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  (void)kVec;
  if (t != 0) return;
  const uint32_t bytes = static_cast<uint32_t>(hidden * sizeof(T));
  ExpectBytes(barrier, bytes * (dsum != nullptr ? 3 : 2));
  IssueBulkCopy(stage, dy + offset, bytes, barrier);
  IssueBulkCopy(stage + hidden, x + offset, bytes, barrier);
  if (dsum != nullptr) IssueBulkCopy(stage + 2 * hidden, dsum + offset, bytes, barrier);
#else
  using P = Pack<T, kVec>;
  (void)barrier;
  reinterpret_cast<P*>(stage)[t] = reinterpret_cast<const P*>(dy + offset)[t];
  reinterpret_cast<P*>(stage + hidden)[t] = reinterpret_cast<const P*>(x + offset)[t];
  if (dsum != nullptr) {
    reinterpret_cast<P*>(stage + 2 * hidden)[t] = reinterpret_cast<const P*>(dsum + offset)[t];
  }
#endif
}

// Waits until the stage on `barrier` holds its row (its `use`-th row; see StageRow).
__device__ __forceinline__ void WaitForStage(uint64_t* barrier, int64_t use) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  WaitForBytes(barrier, static_cast<uint32_t>(use & 1));
#else
  (void)barrier, (void)use;
#endif
}

// Makes the group's `count` stage barriers (one thread of the group calls it, before a block
// barrier).
__device__ __forceinline__ void InitStageBarriers(uint64_t* barriers, int count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  for (int i = 0; i < count; ++i) InitBytesBarrier(barriers + i);
#else
  (void)barriers, (void)count;
#endif
}

template <typename T, int kVec, int W, bool kDrop>
__global__ void __launch_bounds__(PipeThreads(W), PipeBlocksPerSm(W))
    StagedBackwardKernel(const T* dy, const T* x, const float* mean, const float* rstd,
                         const T* weight, const T* dsum, T* dx, float* partial, int64_t rows,
                         int64_t hidden, bool residual_bias, DropoutArgs drop, T* dbranch) {
  using P = Pack<T, kVec>;
  constexpr int kRows = PipeRows(W);
  constexpr int kGroup = 32 * W;
  extern __shared__ __align__(128) unsigned char staged_smem[];
  const int sums = SumsOf(residual_bias);
  const int tensors = dsum != nullptr ? 3 : 2;
  const int group = threadIdx.x / kGroup;
  const int t = threadIdx.x % kGroup;
  T* stages =
      reinterpret_cast<T*>(staged_smem) + static_cast<int64_t>(group) * kStages * tensors * hidden;
  float* shared =
      reinterpret_cast<float*>(staged_smem + StagedRowsBytes(hidden, W, tensors, sizeof(T)));
  float* sdw = shared + sums * group * hidden + t * kVec;
  float* sdb = sdw + hidden;
  float* sdr = residual_bias ? sdb + hidden : nullptr;
  float2* buffers = reinterpret_cast<float2*>(shared + sums * kRows * hidden);
  float2* buf = buffers + group * 2 * W;
  uint64_t* barriers = reinterpret_cast<uint64_t*>(buffers + 2 * kRows * W) + group * kStages;
  if (t == 0) InitStageBarriers(barriers, kStages);
  __syncthreads();  // publishes the barriers
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRows;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRows + group;
  for (int s = 0; s < kStages && first + s * stride < rows; ++s) {
    StageRow<T, kVec>(stages + s * tensors * hidden, dy, x, dsum, first + s * stride, hidden,
                      barriers + s, t);
  }
  const P w = reinterpret_cast<const P*>(weight)[t];
  float mu = first < rows ? mean[first] : 0.0f, rs = first < rows ? rstd[first] : 0.0f;
  // This thread's columns of d weight, d bias and the residual bias's gradient, in registers:
  // thread t holds pack t of every row of its group.
  float cdw[kVec] = {}, cdb[kVec] = {}, cdr[kVec] = {};
  int64_t k = 0;  // this group's rows so far
  for (int64_t row = first; row < rows; row += stride, ++k) {
    const int s = static_cast<int>(k % kStages);
    const int64_t next = row + stride;
    const float mun = next < rows ? mean[next] : 0.0f, rsn = next < rows ? rstd[next] : 0.0f;
    WaitForStage(barriers + s, k / kStages);
    const T* stage = stages + s * tensors * hidden;
    const P g = reinterpret_cast<const P*>(stage)[t];
    const P a = reinterpret_cast<const P*>(stage + hidden)[t];
    P r{};
    if (dsum != nullptr) r = reinterpret_cast<const P*>(stage + 2 * hidden)[t];
    float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float xhat = (F(a.v[e]) - mu) * rs;
      const float d = F(g.v[e]);
      const float gw = d * F(w.v[e]);
      acc.x += gw;
      acc.y += gw * xhat;
      cdw[e] += d * xhat;
      cdb[e] += d;
    }
    const float2 m = RowSum<W>(acc, buf + (k & 1) * W, group, t / 32);
    if constexpr (W == 1) __syncwarp();  // RowSum<1> meets at no barrier
    // Every thread of the group has read this stage: it takes the row kStages ahead.
    const int64_t ahead = row + kStages * stride;
    if (ahead < rows) {
      StageRow<T, kVec>(stages + s * tensors * hidden, dy, x, dsum, ahead, hidden, barriers + s, t);
    }
    const float m1 = m.x / static_cast<float>(hidden), m2 = m.y / static_cast<float>(hidden);
    const P o = PackGradient<kVec>(g, a, w, mu, rs, m1, m2, r, dsum != nullptr);
    const P summed = WriteGradientPack<kVec, kDrop>(o, row * hidden, t, dx, drop, dbranch);
    if (residual_bias) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) cdr[e] += F(summed.v[e]);
    }
    mu = mun;
    rs = rsn;
  }
  // The thread's columns, summed over its rows in the order the other kernels add them.
  StoreSums<kVec>(sdw, cdw);
  StoreSums<kVec>(sdb, cdb);
  if (residual_bias) StoreSums<kVec>(sdr, cdr);
  WritePartial(shared, kRows, sums, partial, hidden);
}

// Any width (hidden % kVec == 0): one warp per row; every row's d weight / d bias products go
// to the block's shared sums, where the block's eight warps contend for the same words.
template <typename T, int kVec, bool kDrop>
__global__ void __launch_bounds__(kThreads)
    StreamingBackwardKernel(const T* dy, const T* x, const float* mean, const float* rstd,
                            const T* weight, const T* dsum, T* dx, float* partial, int64_t rows,
                            int64_t hidden, bool residual_bias, DropoutArgs drop, T* dbranch) {
  using P = Pack<T, kVec>;
  extern __shared__ __align__(16) float shared[];
  const int sums = SumsOf(residual_bias);
  float* sdw = shared;
  float* sdb = shared + hidden;
  float* sdr = shared + 2 * hidden;
  ZeroShared(shared, sums * hidden);
  const int lane = threadIdx.x % 32;
  const int64_t npacks = hidden / kVec;
  const P* wr = reinterpret_cast<const P*>(weight);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarps) {
    const P* dyr = reinterpret_cast<const P*>(dy + row * hidden);
    const P* xr = reinterpret_cast<const P*>(x + row * hidden);
    const float mu = mean[row], rs = rstd[row];
    float a1 = 0.0f, a2 = 0.0f;
    for (int64_t p = lane; p < npacks; p += 32) {
      const P g = dyr[p], a = xr[p], w = wr[p];
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float xhat = (F(a.v[k]) - mu) * rs;
        const float d = F(g.v[k]);
        const float gw = d * F(w.v[k]);
        a1 += gw;
        a2 += gw * xhat;
        atomicAdd(&sdw[p * kVec + k], d * xhat);
        atomicAdd(&sdb[p * kVec + k], d);
      }
    }
    const float m1 = WarpSum(a1) / static_cast<float>(hidden);
    const float m2 = WarpSum(a2) / static_cast<float>(hidden);
    const P* dsr = dsum != nullptr ? reinterpret_cast<const P*>(dsum + row * hidden) : nullptr;
    P* dxr = reinterpret_cast<P*>(dx + row * hidden);
    for (int64_t p = lane; p < npacks; p += 32) {
      const P g = dyr[p], a = xr[p], w = wr[p];
      P o;
      P r{};
      if (dsr != nullptr) r = dsr[p];
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float xhat = (F(a.v[k]) - mu) * rs;
        float v = rs * (F(g.v[k]) * F(w.v[k]) - m1 - xhat * m2);
        if (dsr != nullptr) v += F(r.v[k]);
        o.v[k] = To<T>(v);
      }
      dxr[p] = o;
      P ob = o;  // what the residual bias's gradient sums: d input, or its dropout's backward
      if constexpr (kDrop) {
        ob = DropPack(o, Unpack(drop.rng), row * hidden + p * kVec, drop.p, 1.0f / (1.0f - drop.p));
        reinterpret_cast<P*>(dbranch + row * hidden)[p] = ob;
      }
      if (residual_bias) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) atomicAdd(&sdr[p * kVec + k], F(ob.v[k]));
      }
    }
  }
  WritePartial(shared, 1, sums, partial, hidden);
}

// d weight, d bias (and the residual bias's gradient where `dresidual_bias` is non-null) = the
// sums of `partial`'s `blocks` rows of each. A block takes 32 columns; its 32 warps sum every
// 32nd partial row, four rows' loads in flight at a time, then warp 0 adds the 32 sums in warp
// order (coalesced reads; fixed order, so deterministic). Launched as a dependent of the
// backward kernel (dependent_launch.cuh): it reads `partial` only after that kernel has ended.
// With 8 warps, one load at a time, it took 5.8-5.9 us a call on an H100 (50 sequential L2 reads
// a thread at 350M), 10% of the backward (bench/RESULTS.md, 2026-12-06).
constexpr int kFinishColumns = 32;
constexpr int kFinishSlices = 32;

template <typename T>
__global__ void __launch_bounds__(kFinishColumns* kFinishSlices)
    FinishKernel(const float* partial, int blocks, int64_t hidden, T* dweight, T* dbias,
                 T* dresidual_bias) {
  __shared__ float3 sums[kFinishSlices][kFinishColumns];
  const int col = threadIdx.x % kFinishColumns, slice = threadIdx.x / kFinishColumns;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kFinishColumns + col;
  const bool third = dresidual_bias != nullptr;
  WaitForPrerequisites();
  float3 s = make_float3(0.0f, 0.0f, 0.0f);
  if (c < hidden) {
#pragma unroll 4
    for (int i = slice; i < blocks; i += kFinishSlices) {
      s.x += partial[static_cast<int64_t>(i) * hidden + c];
      s.y += partial[static_cast<int64_t>(blocks + i) * hidden + c];
      if (third) s.z += partial[static_cast<int64_t>(2 * blocks + i) * hidden + c];
    }
  }
  sums[slice][col] = s;
  __syncthreads();
  if (slice != 0 || c >= hidden) return;
  for (int i = 1; i < kFinishSlices; ++i) {
    s.x += sums[i][col].x;
    s.y += sums[i][col].y;
    s.z += sums[i][col].z;
  }
  dweight[c] = To<T>(s.x);
  dbias[c] = To<T>(s.y);
  if (third) dresidual_bias[c] = To<T>(s.z);
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The smallest group (warps per row) whose threads hold `npacks` in `per_thread` packs each;
// 0 when even 8 warps cannot.
int GroupFor(int64_t npacks, int per_thread) {
  for (int g = 1; g <= kWarps; g *= 2) {
    if (npacks <= static_cast<int64_t>(32) * g * per_thread) return g;
  }
  return 0;
}

// Calls launch(std::integral_constant<int, G>) for g = G in {1, 2, 4, 8}.
template <typename Launch>
cudaError_t WithGroup(int g, Launch&& launch) {
  switch (g) {
    case 1:
      return launch(std::integral_constant<int, 1>{});
    case 2:
      return launch(std::integral_constant<int, 2>{});
    case 4:
      return launch(std::integral_constant<int, 4>{});
    default:
      return launch(std::integral_constant<int, 8>{});
  }
}

// The pipelined backward's warps a row for rows of `npacks` packs: npacks / 32 where that is a
// width it is built for (kPipeWarps), else 0 (the register or streaming kernel).
constexpr int kPipeWarps[] = {1, 2, 3, 4, 6, 8};
int PipeWarpsFor(int64_t npacks) {
  if (npacks % 32 != 0) return 0;
  for (int w : kPipeWarps) {
    if (npacks == 32 * w) return w;
  }
  return 0;
}

// kAuto's kernel for rows of 32 W packs (layer_norm_launch.h): the staged kernel, 1.03x /
// 1.11x / 1.10x the pipelined one at 124M's, 350M's and 1.3B's rows on an H100.
constexpr LayerNormBackwardPath kAutoRowsKernel = LayerNormBackwardPath::kStaged;

// Calls launch(std::integral_constant<int, W>) for w = W, one of kPipeWarps.
template <typename Launch>
cudaError_t WithPipeWarps(int w, Launch&& launch) {
  switch (w) {
    case 1:
      return launch(std::integral_constant<int, 1>{});
    case 2:
      return launch(std::integral_constant<int, 2>{});
    case 3:
      return launch(std::integral_constant<int, 3>{});
    case 4:
      return launch(std::integral_constant<int, 4>{});
    case 6:
      return launch(std::integral_constant<int, 6>{});
    default:
      return launch(std::integral_constant<int, 8>{});
  }
}

// Grids: the pipelined kernel's (one wave of PipeBlocksPerSm(w) blocks an SM at most) and the
// register and streaming kernels' (kMaxBackwardBlocks at most). Neither passes
// kMaxPartialBlocks, the rows LayerNormBackwardBlocks sizes `partial` for.
int PipeBlocks(int64_t rows, int w) {
  const int64_t wanted = (rows + PipeRows(w) - 1) / PipeRows(w);
  return static_cast<int>(
      std::min<int64_t>(wanted, static_cast<int64_t>(PipeBlocksPerSm(w)) * kSms));
}
int RegisterBlocks(int64_t rows) {
  const int64_t wanted = (rows + kWarps - 1) / kWarps;
  return static_cast<int>(std::min<int64_t>(wanted, kMaxBackwardBlocks));
}
constexpr bool PipeGridsFitPartial() {
  for (int w : kPipeWarps) {
    if (PipeBlocksPerSm(w) * kSms > kMaxPartialBlocks) return false;
  }
  return kMaxBackwardBlocks <= kMaxPartialBlocks;
}
static_assert(PipeGridsFitPartial(), "LayerNormBackwardBlocks sizes `partial` for every grid");

// The pipelined kernel's shared memory: PipeRows(w) x [sums][hidden] fp32 column sums, then
// each group's two W-float2 reduction buffers.
size_t PipeSharedBytes(int64_t hidden, int w, int sums) {
  return static_cast<size_t>(PipeRows(w)) * sums * hidden * sizeof(float) +
         static_cast<size_t>(2 * PipeRows(w) * w) * sizeof(float2);
}

// The staged kernel's shared memory: its rows (StagedRowsBytes), then the pipelined kernel's
// (column sums, reduction buffers), then each group's kStages barriers.
size_t StagedSharedBytes(int64_t hidden, int w, int sums, int tensors, size_t element) {
  return StagedRowsBytes(hidden, w, tensors, element) + PipeSharedBytes(hidden, w, sums) +
         static_cast<size_t>(PipeRows(w)) * kStages * sizeof(uint64_t);
}

// Calls launch(std::integral_constant<bool, D>) for D = drop.
template <typename Launch>
cudaError_t WithDrop(bool drop, Launch&& launch) {
  if (drop) return launch(std::integral_constant<bool, true>{});
  return launch(std::integral_constant<bool, false>{});
}

// Lets `kernel` use `smem` bytes of dynamic shared memory (past the default 48 KiB).
template <typename Kernel>
cudaError_t AllowSharedBytes(Kernel kernel, size_t smem) {
  if (smem <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(smem));
}

template <typename T>
cudaError_t Forward(const void* x, const void* residual, const void* residual_bias, void* sum,
                    const void* weight, const void* bias, void* y, float* mean, float* rstd,
                    int64_t rows, int64_t hidden, float eps, cudaStream_t stream,
                    const DropoutArgs& drop) {
  if (rows == 0) return cudaSuccess;
  if (residual == nullptr) residual_bias = nullptr;
  const bool dropping = residual != nullptr && drop.p > 0.0f;
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = hidden % kVec == 0 && Aligned(x) && Aligned(weight) && Aligned(bias) &&
                   Aligned(y) && (residual == nullptr || (Aligned(residual) && Aligned(sum))) &&
                   (residual_bias == nullptr || Aligned(residual_bias));
  const auto* xt = static_cast<const T*>(x);
  const auto* rt = static_cast<const T*>(residual);
  const auto* rbt = static_cast<const T*>(residual_bias);
  auto* st = static_cast<T*>(sum);
  const auto* wt = static_cast<const T*>(weight);
  const auto* bt = static_cast<const T*>(bias);
  auto* yt = static_cast<T*>(y);
  int group = vec ? GroupFor(hidden / kVec, kForwardPacks) : 0;
  if (group == 0) {
    const dim3 grid(static_cast<unsigned>((rows + kWarps - 1) / kWarps));
    return WithDrop(dropping, [&](auto d) {
      constexpr bool D = decltype(d)::value;
      if (vec) {
        StreamingForwardKernel<T, kVec, D><<<grid, kThreads, 0, stream>>>(
            xt, rt, rbt, st, wt, bt, yt, mean, rstd, rows, hidden, eps, drop);
      } else {
        StreamingForwardKernel<T, 1, D><<<grid, kThreads, 0, stream>>>(
            xt, rt, rbt, st, wt, bt, yt, mean, rstd, rows, hidden, eps, drop);
      }
      return cudaGetLastError();
    });
  }
  // Few rows (decoding): a row's loads spread wider, and the kernel overlaps the launch of the
  // one before it (a decode step is a chain of short kernels).
  const bool few = rows < kFewRows;
  if (few) group = kWarps;
  return WithGroup(group, [&](auto g) {
    return WithDrop(dropping, [&](auto d) {
      constexpr int G = decltype(g)::value;
      constexpr bool D = decltype(d)::value;
      constexpr int64_t kPerBlock = kWarps / G;
      const dim3 grid(static_cast<unsigned>((rows + kPerBlock - 1) / kPerBlock));
      if (few) {
        return LaunchDependent(RegisterForwardKernel<T, kVec, G, D>, grid, dim3(kThreads), 0,
                               stream, xt, rt, rbt, st, wt, bt, yt, mean, rstd, rows, hidden, eps,
                               drop);
      }
      RegisterForwardKernel<T, kVec, G, D><<<grid, kThreads, 0, stream>>>(
          xt, rt, rbt, st, wt, bt, yt, mean, rstd, rows, hidden, eps, drop);
      return cudaGetLastError();
    });
  });
}

template <typename T>
cudaError_t Backward(const void* dy, const void* x, const float* mean, const float* rstd,
                     const void* weight, const void* dsum, void* dx, void* dweight, void* dbias,
                     float* partial, int64_t rows, int64_t hidden, cudaStream_t stream,
                     void* dresidual_bias, const DropoutArgs& drop, void* dbranch,
                     LayerNormBackwardPath path) {
  if (rows == 0) {
    // No rows: the column sums are zeros.
    for (void* out : {dweight, dbias, dresidual_bias}) {
      if (out == nullptr || hidden == 0) continue;
      const cudaError_t err = cudaMemsetAsync(out, 0, hidden * sizeof(T), stream);
      if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
  }
  constexpr int kVec = 16 / sizeof(T);
  const bool with_rb = dresidual_bias != nullptr;
  const int sums = SumsOf(with_rb);
  const bool dropping = drop.p > 0.0f && dbranch != nullptr;
  const bool vec = hidden % kVec == 0 && Aligned(dy) && Aligned(x) && Aligned(weight) &&
                   Aligned(dx) && (dsum == nullptr || Aligned(dsum)) &&
                   (!dropping || Aligned(dbranch));
  auto launch = [&](auto kernel, int blocks, int threads, size_t smem) {
    const cudaError_t err = AllowSharedBytes(kernel, smem);
    if (err != cudaSuccess) return err;
    kernel<<<blocks, threads, smem, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd,
        static_cast<const T*>(weight), static_cast<const T*>(dsum), static_cast<T*>(dx), partial,
        rows, hidden, with_rb, drop, static_cast<T*>(dbranch));
    return cudaGetLastError();
  };
  const int64_t npacks = hidden / kVec;
  if (path == LayerNormBackwardPath::kAuto) path = kAutoRowsKernel;
  const int pipe = vec && path != LayerNormBackwardPath::kRegister ? PipeWarpsFor(npacks) : 0;
  const int group = vec ? GroupFor(npacks, kBackwardPacks) : 0;
  // `partial`'s rows this call fills (at most LayerNormBackwardBlocks(rows)).
  const int blocks = pipe > 0 ? PipeBlocks(rows, pipe) : RegisterBlocks(rows);
  const cudaError_t err = WithDrop(dropping, [&](auto d) {
    constexpr bool D = decltype(d)::value;
    if (pipe > 0) {
      return WithPipeWarps(pipe, [&](auto wc) {
        constexpr int W = decltype(wc)::value;
        if (path == LayerNormBackwardPath::kStaged) {
          return launch(StagedBackwardKernel<T, kVec, W, D>, blocks, PipeThreads(W),
                        StagedSharedBytes(hidden, W, sums, dsum != nullptr ? 3 : 2, sizeof(T)));
        }
        return launch(PipelinedBackwardKernel<T, kVec, W, D>, blocks, PipeThreads(W),
                      PipeSharedBytes(hidden, W, sums));
      });
    }
    if (group > 0) {
      return WithGroup(group, [&](auto g) {
        constexpr int G = decltype(g)::value;
        constexpr int kCopies = kWarps / G;
        return launch(RegisterBackwardKernel<T, kVec, G, D>, blocks, kThreads,
                      BackwardSharedBytes(hidden, kCopies, sums));
      });
    }
    if (vec) {
      return launch(StreamingBackwardKernel<T, kVec, D>, blocks, kThreads,
                    BackwardSharedBytes(hidden, 1, sums));
    }
    return launch(StreamingBackwardKernel<T, 1, D>, blocks, kThreads,
                  BackwardSharedBytes(hidden, 1, sums));
  });
  if (err != cudaSuccess) return err;
  const unsigned finish_blocks =
      static_cast<unsigned>((hidden + kFinishColumns - 1) / kFinishColumns);
  return LaunchDependent(FinishKernel<T>, dim3(finish_blocks), dim3(kFinishColumns * kFinishSlices),
                         0, stream, static_cast<const float*>(partial), blocks, hidden,
                         static_cast<T*>(dweight), static_cast<T*>(dbias),
                         static_cast<T*>(dresidual_bias));
}

}  // namespace

int LayerNormBackwardBlocks(int64_t rows) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(rows, kMaxPartialBlocks)));
}

cudaError_t LaunchLayerNormForward(FloatKind kind, const void* x, const void* residual, void* sum,
                                   const void* weight, const void* bias, void* y, float* mean,
                                   float* rstd, int64_t rows, int64_t hidden, float eps,
                                   cudaStream_t stream, const void* residual_bias,
                                   const DropoutArgs& drop) {
  switch (kind) {
    case FloatKind::kFloat32:
      return Forward<float>(x, residual, residual_bias, sum, weight, bias, y, mean, rstd, rows,
                            hidden, eps, stream, drop);
    case FloatKind::kBFloat16:
      return Forward<__nv_bfloat16>(x, residual, residual_bias, sum, weight, bias, y, mean, rstd,
                                    rows, hidden, eps, stream, drop);
    case FloatKind::kFloat16:
      return Forward<__half>(x, residual, residual_bias, sum, weight, bias, y, mean, rstd, rows,
                             hidden, eps, stream, drop);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchLayerNormBackward(FloatKind kind, const void* dy, const void* x,
                                    const float* mean, const float* rstd, const void* weight,
                                    const void* dsum, void* dx, void* dweight, void* dbias,
                                    float* partial, int64_t rows, int64_t hidden,
                                    cudaStream_t stream, void* dresidual_bias,
                                    const DropoutArgs& drop, void* dbranch,
                                    LayerNormBackwardPath path) {
  switch (kind) {
    case FloatKind::kFloat32:
      return Backward<float>(dy, x, mean, rstd, weight, dsum, dx, dweight, dbias, partial, rows,
                             hidden, stream, dresidual_bias, drop, dbranch, path);
    case FloatKind::kBFloat16:
      return Backward<__nv_bfloat16>(dy, x, mean, rstd, weight, dsum, dx, dweight, dbias, partial,
                                     rows, hidden, stream, dresidual_bias, drop, dbranch, path);
    case FloatKind::kFloat16:
      return Backward<__half>(dy, x, mean, rstd, weight, dsum, dx, dweight, dbias, partial, rows,
                              hidden, stream, dresidual_bias, drop, dbranch, path);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mt::kernels
