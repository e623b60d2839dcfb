// See cross_entropy.h. One thread block per row; 16-byte vector loads when the row allows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "worker/kernels/cross_entropy_launch.h"
#include "worker/kernels/float_convert.cuh"

namespace mt::kernels {
namespace {

constexpr int kThreads = 512;

// Running (max, sum of exp(x - max)) pairs, merged associatively.
struct MaxSum {
  float m;
  float s;
};

__device__ __forceinline__ MaxSum Merge(MaxSum a, MaxSum b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

__device__ __forceinline__ MaxSum Add(MaxSum a, float x) {
  if (x > a.m) return {x, a.s * __expf(a.m - x) + 1.0f};
  return {a.m, a.s + __expf(x - a.m)};
}

__device__ MaxSum BlockReduce(MaxSum v) {
  __shared__ MaxSum warp_results[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, offset),
                 __shfl_xor_sync(0xffffffffu, v.s, offset)};
    v = Merge(v, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? warp_results[lane] : MaxSum{-INFINITY, 0.0f};
    for (int offset = 16; offset > 0; offset /= 2) {
      MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, offset),
                   __shfl_xor_sync(0xffffffffu, v.s, offset)};
      v = Merge(v, other);
    }
    if (lane == 0) warp_results[0] = v;
  }
  __syncthreads();
  return warp_results[0];
}

// kVec elements per 16-byte load when the row is aligned and vocab % kVec == 0; 1 otherwise.
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    FusedCrossEntropyKernel(T* logits, const int64_t* targets, float* losses, int64_t vocab,
                            float grad_scale) {
  using P = Pack<T, kVec>;
  const int64_t row = blockIdx.x;
  T* x = logits + row * vocab;
  const int64_t target = targets[row];
  const bool target_ok = target >= 0 && target < vocab;
  // Read before the row is overwritten with its gradient.
  const float target_logit = target_ok ? F(x[target]) : NAN;
  __syncthreads();

  P* packs = reinterpret_cast<P*>(x);
  const int64_t npacks = vocab / kVec;
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t p = threadIdx.x; p < npacks; p += kThreads) {
    const P pk = packs[p];
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc = Add(acc, F(pk.v[k]));
  }
  const MaxSum total = BlockReduce(acc);
  const float inv_sum = 1.0f / total.s;
  for (int64_t p = threadIdx.x; p < npacks; p += kThreads) {
    P pk = packs[p];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int64_t j = p * kVec + k;
      float g = __expf(F(pk.v[k]) - total.m) * inv_sum;
      if (j == target) g -= 1.0f;
      pk.v[k] = To<T>(g * grad_scale);
    }
    packs[p] = pk;
  }
  if (threadIdx.x == 0) losses[row] = logf(total.s) + total.m - target_logit;
}

template <typename T>
cudaError_t Launch(void* logits, const int64_t* targets, float* losses, int64_t rows, int64_t vocab,
                   float grad_scale, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorised = vocab % kVec == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  if (rows == 0) return cudaSuccess;
  if (vectorised) {
    FusedCrossEntropyKernel<T, kVec><<<rows, kThreads, 0, stream>>>(
        static_cast<T*>(logits), targets, losses, vocab, grad_scale);
  } else {
    FusedCrossEntropyKernel<T, 1><<<rows, kThreads, 0, stream>>>(static_cast<T*>(logits), targets,
                                                                 losses, vocab, grad_scale);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchFusedCrossEntropy(FloatKind kind, void* logits, const int64_t* targets,
                                    float* losses, int64_t rows, int64_t vocab, float grad_scale,
                                    cudaStream_t stream) {
  switch (kind) {
    case FloatKind::kFloat32:
      return Launch<float>(logits, targets, losses, rows, vocab, grad_scale, stream);
    case FloatKind::kBFloat16:
      return Launch<__nv_bfloat16>(logits, targets, losses, rows, vocab, grad_scale, stream);
    case FloatKind::kFloat16:
      return Launch<__half>(logits, targets, losses, rows, vocab, grad_scale, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mt::kernels
