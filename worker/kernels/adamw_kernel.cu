// The optimizer's fused kernels (adamw_launch.h): the gradients' sum of squares for the global
// norm, and AdamW's update with the 16-bit model copy, over a table of pieces.
//
// A tile is 4,096 elements of one piece. In AdamW's update thread t of a block of 256 handles
// the four consecutive elements at t * 4 + j * 1,024 for j = 0..3, as 16-byte vectors of fp32
// state (and 8- or 16-byte vectors of gradient and model) where the piece's addresses allow,
// element by element where they do not; all loads of a thread in a tile are issued before its
// arithmetic (8-element vectors measured no faster: 3.74 against 3.72 TB/s on the H200). The
// sum of squares reads the gradient in 16-byte vectors (8 elements of bf16).
// Each of a fixed number of blocks takes a contiguous run of tiles: it searches the table for
// its first piece once and walks forward from there (a search per tile cost a chain of
// dependent loads per 4,096 elements: 1.5 TB/s for the sum of squares on the H200).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "worker/kernels/adamw_launch.h"
#include "worker/kernels/float_convert.cuh"

namespace mt::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 4;
constexpr int kSteps = static_cast<int>(kAdamWTileElements / (kThreads * kVec));  // 4
static_assert(kSteps * kThreads * kVec == kAdamWTileElements, "a tile is whole vectors");
constexpr int kSumBlocks = 1024;
constexpr int kUpdateBlocks = 4096;  // 2% faster than 2,048 for 1.3B (9.69 against 9.88 ms)

// Block b's tiles: [TileBegin(b), TileBegin(b + 1)).
__device__ __forceinline__ int64_t TileBegin(int64_t b, int64_t num_tiles) {
  return b * num_tiles / gridDim.x;
}

// The piece holding tile t: the last one whose tile_begin <= t (tile_begin ascends from 0).
// From a piece before it, the walk forward: Advance.
__device__ __forceinline__ int FindPiece(const AdamWPieceDesc* pieces, int n, int64_t t) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (pieces[mid].tile_begin <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

__device__ __forceinline__ int Advance(const AdamWPieceDesc* pieces, int n, int i, int64_t t) {
  while (i + 1 < n && pieces[i + 1].tile_begin <= t) ++i;
  return i;
}

template <typename T, int V = kVec>
__device__ __forceinline__ bool AlignedFor(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * V) == 0;
}

// The V gradient values at element i of a piece (i + V <= numel, vector-aligned).
template <typename G, int V = kVec>
__device__ __forceinline__ void LoadGrad(const void* grad, int64_t i, float (&g)[V]) {
  if (grad == nullptr) {
#pragma unroll
    for (int k = 0; k < V; ++k) g[k] = 0.0f;
    return;
  }
  const Pack<G, V> v = *reinterpret_cast<const Pack<G, V>*>(static_cast<const G*>(grad) + i);
#pragma unroll
  for (int k = 0; k < V; ++k) g[k] = F(v.v[k]);
}

template <typename G>
__device__ __forceinline__ float GradAt(const void* grad, int64_t i) {
  return grad == nullptr ? 0.0f : F(static_cast<const G*>(grad)[i]);
}

// ---- Sum of squares ----

// The gradient in 16-byte vectors (8 bf16 or fp16 values, 4 fp32): 2.1x the speed of 8-byte
// vectors of bf16 on the H200 (1.24 -> 0.59 ms for 1.3B's 2.6 GB in a micro-benchmark; the
// loads in flight were the limit, not the arithmetic).
template <typename G>
__global__ void __launch_bounds__(kThreads)
    SumOfSquaresKernel(const AdamWPieceDesc* pieces, int num_pieces, int64_t num_tiles,
                       float* partial) {
  constexpr int V = static_cast<int>(16 / sizeof(G));
  constexpr int kSumSteps = static_cast<int>(kAdamWTileElements / (kThreads * V));
  static_assert(kSumSteps * kThreads * V == kAdamWTileElements, "a tile is whole vectors");
  float counted = 0.0f, other = 0.0f;
  const int64_t first = TileBegin(blockIdx.x, num_tiles),
                end = TileBegin(blockIdx.x + 1, num_tiles);
  int piece = first < end ? FindPiece(pieces, num_pieces, first) : 0;
  for (int64_t t = first; t < end; ++t) {
    piece = Advance(pieces, num_pieces, piece, t);
    const AdamWPieceDesc p = pieces[piece];
    const int64_t base = (t - p.tile_begin) * kAdamWTileElements;
    const bool vec = AlignedFor<G, V>(p.grad);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < kSumSteps; ++j) {
      const int64_t i = base + j * kThreads * V + threadIdx.x * V;
      if (vec && i + V <= p.numel) {
        float g[V];
        LoadGrad<G, V>(p.grad, i, g);
#pragma unroll
        for (int k = 0; k < V; ++k) s += g[k] * g[k];
      } else {
        for (int64_t e = i; e < i + V && e < p.numel; ++e) {
          const float g = GradAt<G>(p.grad, e);
          s += g * g;
        }
      }
    }
    if (p.counted) {
      counted += s;
    } else {
      other += s;
    }
  }
  __shared__ float sums[2][kThreads / 32];
  counted = WarpSum(counted);
  other = WarpSum(other);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sums[0][warp] = counted;
    sums[1][warp] = other;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    float c = lane < kThreads / 32 ? sums[0][lane] : 0.0f;
    float o = lane < kThreads / 32 ? sums[1][lane] : 0.0f;
    c = WarpSum(c);
    o = WarpSum(o);
    if (lane == 0) {
      partial[2 * blockIdx.x] = c;
      partial[2 * blockIdx.x + 1] = o;
    }
  }
}

// One block of kSumBlocks threads: the partial sums in a fixed order.
__global__ void __launch_bounds__(kSumBlocks) FinishSumKernel(const float* partial, float* sumsq) {
  __shared__ float sums[2][kSumBlocks / 32];
  float c = WarpSum(partial[2 * threadIdx.x]);
  float o = WarpSum(partial[2 * threadIdx.x + 1]);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sums[0][warp] = c;
    sums[1][warp] = o;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    c = WarpSum(sums[0][lane]);
    o = WarpSum(sums[1][lane]);
    // The others' inf or NaN reaches the sum; their finite values do not.
    if (lane == 0) sumsq[0] = c + 0.0f * o;
  }
}
static_assert(kSumBlocks / 32 == 32, "FinishSumKernel's second stage is one warp");

// ---- AdamW ----

struct AdamWFactors {
  float lr, beta1, beta2, eps, decay;  // decay = lr * weight_decay
  float step_size, bc2_sqrt, divisor;
};

__device__ __forceinline__ void AdamWElement(const AdamWFactors& f, bool decays, float g, float& w,
                                             float& m, float& v) {
  g /= f.divisor;
  if (decays) w -= f.decay * w;
  m = f.beta1 * m + (1.0f - f.beta1) * g;
  v = f.beta2 * v + (1.0f - f.beta2) * g * g;
  const float denom = sqrtf(v) / f.bc2_sqrt + f.eps;
  w -= f.step_size * m / denom;
}

// Tile t of piece p.
template <typename G, typename M>
__device__ __forceinline__ void UpdateTile(const AdamWFactors& f, const AdamWArgs& a,
                                           const AdamWPieceDesc& p, int64_t t) {
  const bool decays = p.weight_decay != 0 && a.weight_decay != 0.0f;
  float* w = a.master + (a.master_is_model ? p.model_begin : p.state_begin);
  float* m = a.exp_avg + p.state_begin;
  float* v = a.exp_avg_sq + p.state_begin;
  M* model = a.model != nullptr ? static_cast<M*>(a.model) + p.model_begin : nullptr;
  const bool vec = AlignedFor<G>(p.grad) && AlignedFor<float>(w) && AlignedFor<float>(m) &&
                   AlignedFor<float>(v) && (model == nullptr || AlignedFor<M>(model));
  const int64_t base = (t - p.tile_begin) * kAdamWTileElements;
  if (vec && base + kAdamWTileElements <= p.numel) {
    // A whole tile: every load first, then the arithmetic and the stores.
    float g[kSteps][kVec];
    Pack<float, kVec> wv[kSteps], mv[kSteps], vv[kSteps];
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const int64_t i = base + j * kThreads * kVec + threadIdx.x * kVec;
      LoadGrad<G>(p.grad, i, g[j]);
      wv[j] = *reinterpret_cast<const Pack<float, kVec>*>(w + i);
      mv[j] = *reinterpret_cast<const Pack<float, kVec>*>(m + i);
      vv[j] = *reinterpret_cast<const Pack<float, kVec>*>(v + i);
    }
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const int64_t i = base + j * kThreads * kVec + threadIdx.x * kVec;
      Pack<M, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        AdamWElement(f, decays, g[j][k], wv[j].v[k], mv[j].v[k], vv[j].v[k]);
        out.v[k] = To<M>(wv[j].v[k]);
      }
      *reinterpret_cast<Pack<float, kVec>*>(w + i) = wv[j];
      *reinterpret_cast<Pack<float, kVec>*>(m + i) = mv[j];
      *reinterpret_cast<Pack<float, kVec>*>(v + i) = vv[j];
      if (model != nullptr) *reinterpret_cast<Pack<M, kVec>*>(model + i) = out;
    }
    return;
  }
  // The piece's last tile, or addresses that are not vector-aligned: element by element.
  for (int j = 0; j < kSteps; ++j) {
    const int64_t i = base + j * kThreads * kVec + threadIdx.x * kVec;
    for (int64_t e = i; e < i + kVec && e < p.numel; ++e) {
      float we = w[e], me = m[e], ve = v[e];
      AdamWElement(f, decays, GradAt<G>(p.grad, e), we, me, ve);
      w[e] = we;
      m[e] = me;
      v[e] = ve;
      if (model != nullptr) model[e] = To<M>(we);
    }
  }
}

template <typename G, typename M>
__global__ void __launch_bounds__(kThreads)
    AdamWKernel(const AdamWPieceDesc* pieces, int num_pieces, int64_t num_tiles, AdamWArgs a) {
  if (*a.found_inf != 0.0f) return;
  const double t = *a.step;
  AdamWFactors f;
  f.lr = a.lr;
  f.beta1 = a.beta1;
  f.beta2 = a.beta2;
  f.eps = a.eps;
  f.decay = a.lr * a.weight_decay;
  f.step_size = static_cast<float>(a.lr / (1.0 - pow(static_cast<double>(a.beta1), t)));
  f.bc2_sqrt = static_cast<float>(sqrt(1.0 - pow(static_cast<double>(a.beta2), t)));
  f.divisor = *a.grad_divisor;
  const int64_t first = TileBegin(blockIdx.x, num_tiles),
                end = TileBegin(blockIdx.x + 1, num_tiles);
  int piece = first < end ? FindPiece(pieces, num_pieces, first) : 0;
  for (int64_t tile = first; tile < end; ++tile) {
    piece = Advance(pieces, num_pieces, piece, tile);
    UpdateTile<G, M>(f, a, pieces[piece], tile);
  }
}

template <typename G>
cudaError_t LaunchSum(const AdamWPieceDesc* pieces, int num_pieces, int64_t num_tiles,
                      float* partial, float* sumsq, cudaStream_t stream) {
  SumOfSquaresKernel<G>
      <<<kSumBlocks, kThreads, 0, stream>>>(pieces, num_pieces, num_tiles, partial);
  FinishSumKernel<<<1, kSumBlocks, 0, stream>>>(partial, sumsq);
  return cudaGetLastError();
}

template <typename G, typename M>
cudaError_t LaunchUpdate(const AdamWPieceDesc* pieces, int num_pieces, int64_t num_tiles,
                         const AdamWArgs& args, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(num_tiles < kUpdateBlocks ? num_tiles : kUpdateBlocks);
  AdamWKernel<G, M><<<blocks, kThreads, 0, stream>>>(pieces, num_pieces, num_tiles, args);
  return cudaGetLastError();
}

template <typename G>
cudaError_t LaunchUpdateFor(FloatKind model_kind, const AdamWPieceDesc* pieces, int num_pieces,
                            int64_t num_tiles, const AdamWArgs& args, cudaStream_t stream) {
  switch (model_kind) {
    case FloatKind::kBFloat16:
      return LaunchUpdate<G, __nv_bfloat16>(pieces, num_pieces, num_tiles, args, stream);
    case FloatKind::kFloat16:
      return LaunchUpdate<G, __half>(pieces, num_pieces, num_tiles, args, stream);
    case FloatKind::kFloat32:
      return LaunchUpdate<G, float>(pieces, num_pieces, num_tiles, args, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int GradSumOfSquaresBlocks() { return kSumBlocks; }

cudaError_t LaunchGradSumOfSquares(FloatKind grad_kind, const AdamWPieceDesc* pieces,
                                   int num_pieces, int64_t num_tiles, float* partial, float* sumsq,
                                   cudaStream_t stream) {
  if (num_pieces <= 0 || num_tiles <= 0) return cudaErrorInvalidValue;
  switch (grad_kind) {
    case FloatKind::kFloat32:
      return LaunchSum<float>(pieces, num_pieces, num_tiles, partial, sumsq, stream);
    case FloatKind::kBFloat16:
      return LaunchSum<__nv_bfloat16>(pieces, num_pieces, num_tiles, partial, sumsq, stream);
    case FloatKind::kFloat16:
      return LaunchSum<__half>(pieces, num_pieces, num_tiles, partial, sumsq, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchAdamW(FloatKind grad_kind, FloatKind model_kind, const AdamWPieceDesc* pieces,
                        int num_pieces, int64_t num_tiles, const AdamWArgs& args,
                        cudaStream_t stream) {
  if (num_pieces <= 0 || num_tiles <= 0) return cudaErrorInvalidValue;
  switch (grad_kind) {
    case FloatKind::kFloat32:
      return LaunchUpdateFor<float>(model_kind, pieces, num_pieces, num_tiles, args, stream);
    case FloatKind::kBFloat16:
      return LaunchUpdateFor<__nv_bfloat16>(model_kind, pieces, num_pieces, num_tiles, args,
                                            stream);
    case FloatKind::kFloat16:
      return LaunchUpdateFor<__half>(model_kind, pieces, num_pieces, num_tiles, args, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mt::kernels
