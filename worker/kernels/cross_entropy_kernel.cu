// See cross_entropy.h. One thread block per row; 16-byte vector loads when the row allows.
// A row that fits in shared memory with room for a second block on the SM (GPT-2's 50,304
// bf16 logits are 98 KiB) is copied there first with asynchronous copies, all of a block's in
// flight at once, and its max, sum and gradient are taken from there: the logits are read from
// memory once. A longer row (fp32 at 50,304) is read twice, the second time mostly from the L2
// (CrossEntropyPath in cross_entropy_launch.h chooses otherwise for tests and benchmarks).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "worker/kernels/copy_async.cuh"
#include "worker/kernels/cross_entropy_launch.h"
#include "worker/kernels/float_convert.cuh"

namespace mt::kernels {
namespace {

constexpr int kThreads = 512;
// The staged kernel's row in shared memory: at most this much, so that two blocks fit an SM of
// the H100/H200 (227 KiB), and no more than the device allows a block.
constexpr size_t kMaxStagedRowBytes = 112 * 1024;
// The staged kernel's static shared memory (its two block reductions' warp results).
constexpr size_t kReductionBytes = 2 * (kThreads / 32) * sizeof(float);

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

__device__ __forceinline__ float ShuffleXor(float v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ MaxSum ShuffleXor(MaxSum v, int offset) {
  return {ShuffleXor(v.m, offset), ShuffleXor(v.s, offset)};
}

// `op` of every thread's v over the block (kThreads threads), `identity` its neutral value;
// `red` is kThreads / 32 Vs of shared memory of its own (two reductions in a row use two arrays,
// so no barrier is needed between them). Every thread gets the result.
template <typename V, typename Op>
__device__ V BlockReduce(V v, V identity, Op op, V* red) {
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, ShuffleXor(v, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? red[lane] : identity;
    for (int offset = 16; offset > 0; offset /= 2) v = op(v, ShuffleXor(v, offset));
    if (lane == 0) red[0] = v;
  }
  __syncthreads();
  return red[0];
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
  __shared__ MaxSum red[kThreads / 32];
  const MaxSum total = BlockReduce(
      acc, MaxSum{-INFINITY, 0.0f}, [](MaxSum a, MaxSum b) { return Merge(a, b); }, red);
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

// The row (vocab % kVec == 0, 16-byte aligned) copied into dynamic shared memory, then three
// passes over the copy: the max, the sum of exp(x - max), the gradient written over the row.
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    StagedCrossEntropyKernel(T* logits, const int64_t* targets, float* losses, int64_t vocab,
                             float grad_scale) {
  using P = Pack<T, kVec>;
  extern __shared__ __align__(16) unsigned char staged_row[];
  __shared__ float red_max[kThreads / 32], red_sum[kThreads / 32];
  P* row = reinterpret_cast<P*>(staged_row);
  P* packs = reinterpret_cast<P*>(logits + blockIdx.x * vocab);
  const int64_t npacks = vocab / kVec;
  for (int64_t p = threadIdx.x; p < npacks; p += kThreads) CopyAsync16(&row[p], &packs[p]);
  CommitCopies();
  const int64_t target = targets[blockIdx.x];
  WaitCopies<0>();
  __syncthreads();

  float m = -INFINITY;
  for (int64_t p = threadIdx.x; p < npacks; p += kThreads) {
    const P pk = row[p];
#pragma unroll
    for (int k = 0; k < kVec; ++k) m = fmaxf(m, F(pk.v[k]));
  }
  const float max = BlockReduce(
      m, -INFINITY, [](float a, float b) { return fmaxf(a, b); }, red_max);
  float s = 0.0f;
  for (int64_t p = threadIdx.x; p < npacks; p += kThreads) {
    const P pk = row[p];
#pragma unroll
    for (int k = 0; k < kVec; ++k) s += __expf(F(pk.v[k]) - max);
  }
  const float sum = BlockReduce(
      s, 0.0f, [](float a, float b) { return a + b; }, red_sum);
  const float inv_sum = 1.0f / sum;
  for (int64_t p = threadIdx.x; p < npacks; p += kThreads) {
    P pk = row[p];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      float g = __expf(F(pk.v[k]) - max) * inv_sum;
      if (p * kVec + k == target) g -= 1.0f;
      pk.v[k] = To<T>(g * grad_scale);
    }
    packs[p] = pk;
  }
  if (threadIdx.x == 0) {
    const bool target_ok = target >= 0 && target < vocab;
    const float target_logit = target_ok ? F(reinterpret_cast<const T*>(staged_row)[target]) : NAN;
    losses[blockIdx.x] = logf(sum) + max - target_logit;
  }
}

// The shared memory a block may opt into on the current device (0 when it cannot be asked).
size_t MaxSharedPerBlock() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    cudaGetLastError();  // clear it: the unstaged kernel runs instead
    return 0;
  }
  return static_cast<size_t>(bytes);
}

template <typename T>
cudaError_t Launch(void* logits, const int64_t* targets, float* losses, int64_t rows, int64_t vocab,
                   float grad_scale, cudaStream_t stream, CrossEntropyPath path) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorised = vocab % kVec == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  if (rows == 0) return cudaSuccess;
  const size_t row_bytes = static_cast<size_t>(vocab) * sizeof(T);
  const bool fits = row_bytes + kReductionBytes <= MaxSharedPerBlock();
  const bool staged = path == CrossEntropyPath::kStaged ||
                      (path == CrossEntropyPath::kAuto && row_bytes <= kMaxStagedRowBytes);
  if (vectorised && staged && fits) {
    const auto kernel = StagedCrossEntropyKernel<T, kVec>;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(row_bytes)) == cudaSuccess) {
      kernel<<<rows, kThreads, row_bytes, stream>>>(static_cast<T*>(logits), targets, losses, vocab,
                                                    grad_scale);
      return cudaGetLastError();
    }
    cudaGetLastError();  // refused: the two-pass kernel below needs no opt-in
  }
  if (vectorised && path == CrossEntropyPath::kStaged) return cudaErrorInvalidConfiguration;
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
                                    cudaStream_t stream, CrossEntropyPath path) {
  switch (kind) {
    case FloatKind::kFloat32:
      return Launch<float>(logits, targets, losses, rows, vocab, grad_scale, stream, path);
    case FloatKind::kBFloat16:
      return Launch<__nv_bfloat16>(logits, targets, losses, rows, vocab, grad_scale, stream, path);
    case FloatKind::kFloat16:
      return Launch<__half>(logits, targets, losses, rows, vocab, grad_scale, stream, path);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mt::kernels
