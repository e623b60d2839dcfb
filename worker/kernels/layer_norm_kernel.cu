// See layer_norm.h. One warp per row; 16-byte vector loads when the row allows. Statistics
// and every product in fp32. Backward: d gamma / d beta summed per lane in registers (rows up
// to 2,048 wide in 16-bit), then per block in shared memory, then over blocks by a second
// kernel (one thread per column).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "worker/kernels/float_convert.cuh"
#include "worker/kernels/layer_norm_launch.h"

namespace mt::kernels {
namespace {

constexpr int kWarps = 8;  // rows per block at a time
constexpr int kThreads = kWarps * 32;
constexpr int kMaxBackwardBlocks = 528;  // 4 per SM of an H100/H200

template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    ForwardKernel(const T* x, const T* residual, T* sum, const T* weight, const T* bias, T* y,
                  float* mean_out, float* rstd_out, int64_t rows, int64_t hidden, float eps) {
  using P = Pack<T, kVec>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t npacks = hidden / kVec;
  const P* xr = reinterpret_cast<const P*>(x + row * hidden);
  // The LayerNorm's input: the stored sum (rounded to T) with a residual, else x itself.
  const P* in = xr;
  if (residual != nullptr) {
    const P* rr = reinterpret_cast<const P*>(residual + row * hidden);
    P* sr = reinterpret_cast<P*>(sum + row * hidden);
    for (int64_t p = lane; p < npacks; p += 32) {
      const P a = xr[p], b = rr[p];
      P s;
#pragma unroll
      for (int k = 0; k < kVec; ++k) s.v[k] = To<T>(F(a.v[k]) + F(b.v[k]));
      sr[p] = s;
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

// partial: [2][gridDim.x][hidden] fp32 (d weight, then d bias), written whole by each block.
// A lane always sees the same columns (packs lane, lane + 32, ...), so with kPacks > 0 (at least
// ceil(packs / 32)) it sums its columns' d weight / d bias over all its rows in registers and
// adds them to the block's shared sums once at the end; kPacks = 0 (wider rows) adds every
// row's products to shared memory, where the block's eight warps contend for the same words.
template <typename T, int kVec, int kPacks>
__global__ void __launch_bounds__(kThreads)
    BackwardKernel(const T* dy, const T* x, const float* mean, const float* rstd, const T* weight,
                   const T* dsum, T* dx, float* partial, int64_t rows, int64_t hidden) {
  using P = Pack<T, kVec>;
  extern __shared__ float shared[];  // [2][hidden]
  float* sdw = shared;
  float* sdb = shared + hidden;
  for (int64_t c = threadIdx.x; c < 2 * hidden; c += kThreads) shared[c] = 0.0f;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int64_t npacks = hidden / kVec;
  const P* wr = reinterpret_cast<const P*>(weight);
  float rdw[kPacks > 0 ? kPacks : 1][kVec] = {};
  float rdb[kPacks > 0 ? kPacks : 1][kVec] = {};
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarps) {
    const P* dyr = reinterpret_cast<const P*>(dy + row * hidden);
    const P* xr = reinterpret_cast<const P*>(x + row * hidden);
    const float mu = mean[row], rs = rstd[row];
    float a1 = 0.0f, a2 = 0.0f;
    if constexpr (kPacks > 0) {
#pragma unroll
      for (int j = 0; j < kPacks; ++j) {
        const int64_t p = lane + 32 * j;
        if (p >= npacks) break;
        const P g = dyr[p], a = xr[p], w = wr[p];
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const float xhat = (F(a.v[k]) - mu) * rs;
          const float d = F(g.v[k]);
          const float gw = d * F(w.v[k]);
          a1 += gw;
          a2 += gw * xhat;
          rdw[j][k] += d * xhat;
          rdb[j][k] += d;
        }
      }
    } else {
      for (int64_t p = lane; p < npacks; p += 32) {
        const P g = dyr[p], a = xr[p], w = wr[p];
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const float xhat = (F(a.v[k]) - mu) * rs;
          const float d = F(g.v[k]);
          const float gw = d * F(w.v[k]);
          a1 += gw;
          a2 += gw * xhat;
          const int64_t c = p * kVec + k;
          atomicAdd(&sdw[c], d * xhat);
          atomicAdd(&sdb[c], d);
        }
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
    }
  }
  if constexpr (kPacks > 0) {
#pragma unroll
    for (int j = 0; j < kPacks; ++j) {
      const int64_t p = lane + 32 * j;
      if (p >= npacks) break;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        atomicAdd(&sdw[p * kVec + k], rdw[j][k]);
        atomicAdd(&sdb[p * kVec + k], rdb[j][k]);
      }
    }
  }
  __syncthreads();
  float* pw = partial + static_cast<int64_t>(blockIdx.x) * hidden;
  float* pb = partial + (static_cast<int64_t>(gridDim.x) + blockIdx.x) * hidden;
  for (int64_t c = threadIdx.x; c < hidden; c += kThreads) {
    pw[c] = sdw[c];
    pb[c] = sdb[c];
  }
}

template <typename T>
__global__ void FinishKernel(const float* partial, int blocks, int64_t hidden, T* dweight,
                             T* dbias) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= hidden) return;
  float w = 0.0f, b = 0.0f;
  for (int i = 0; i < blocks; ++i) {
    w += partial[static_cast<int64_t>(i) * hidden + c];
    b += partial[static_cast<int64_t>(blocks + i) * hidden + c];
  }
  dweight[c] = To<T>(w);
  dbias[c] = To<T>(b);
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T>
cudaError_t Forward(const void* x, const void* residual, void* sum, const void* weight,
                    const void* bias, void* y, float* mean, float* rstd, int64_t rows,
                    int64_t hidden, float eps, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = hidden % kVec == 0 && Aligned(x) && Aligned(weight) && Aligned(bias) &&
                   Aligned(y) && (residual == nullptr || (Aligned(residual) && Aligned(sum)));
  const dim3 grid(static_cast<unsigned>((rows + kWarps - 1) / kWarps));
  auto args = [&](auto kernel) {
    kernel<<<grid, kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(residual),
                                          static_cast<T*>(sum), static_cast<const T*>(weight),
                                          static_cast<const T*>(bias), static_cast<T*>(y), mean,
                                          rstd, rows, hidden, eps);
  };
  if (vec) {
    args(ForwardKernel<T, kVec>);
  } else {
    args(ForwardKernel<T, 1>);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t Backward(const void* dy, const void* x, const float* mean, const float* rstd,
                     const void* weight, const void* dsum, void* dx, void* dweight, void* dbias,
                     float* partial, int64_t rows, int64_t hidden, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = hidden % kVec == 0 && Aligned(dy) && Aligned(x) && Aligned(weight) &&
                   Aligned(dx) && (dsum == nullptr || Aligned(dsum));
  const int blocks = LayerNormBackwardBlocks(rows);
  const size_t smem = 2 * static_cast<size_t>(hidden) * sizeof(float);
  auto launch = [&](auto kernel) {
    cudaError_t err = cudaSuccess;
    if (smem > 48 * 1024) {
      err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(smem));
    }
    if (err != cudaSuccess) return err;
    kernel<<<blocks, kThreads, smem, stream>>>(static_cast<const T*>(dy), static_cast<const T*>(x),
                                               mean, rstd, static_cast<const T*>(weight),
                                               static_cast<const T*>(dsum), static_cast<T*>(dx),
                                               partial, rows, hidden);
    return cudaGetLastError();
  };
  // Packs per lane: the register path up to 8 (hidden 2,048 in 16-bit, 1,024 in fp32).
  const int64_t per_lane = (hidden / (vec ? kVec : 1) + 31) / 32;
  cudaError_t err;
  if (!vec) {
    err = per_lane <= 8 ? launch(BackwardKernel<T, 1, 8>) : launch(BackwardKernel<T, 1, 0>);
  } else if (per_lane <= 2) {
    err = launch(BackwardKernel<T, kVec, 2>);
  } else if (per_lane <= 4) {
    err = launch(BackwardKernel<T, kVec, 4>);
  } else if (per_lane <= 8) {
    err = launch(BackwardKernel<T, kVec, 8>);
  } else {
    err = launch(BackwardKernel<T, kVec, 0>);
  }
  if (err != cudaSuccess) return err;
  const int threads = 256;
  FinishKernel<T><<<static_cast<unsigned>((hidden + threads - 1) / threads), threads, 0, stream>>>(
      partial, blocks, hidden, static_cast<T*>(dweight), static_cast<T*>(dbias));
  return cudaGetLastError();
}

}  // namespace

int LayerNormBackwardBlocks(int64_t rows) {
  const int64_t wanted = (rows + kWarps - 1) / kWarps;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wanted, kMaxBackwardBlocks)));
}

cudaError_t LaunchLayerNormForward(FloatKind kind, const void* x, const void* residual, void* sum,
                                   const void* weight, const void* bias, void* y, float* mean,
                                   float* rstd, int64_t rows, int64_t hidden, float eps,
                                   cudaStream_t stream) {
  switch (kind) {
    case FloatKind::kFloat32:
      return Forward<float>(x, residual, sum, weight, bias, y, mean, rstd, rows, hidden, eps,
                            stream);
    case FloatKind::kBFloat16:
      return Forward<__nv_bfloat16>(x, residual, sum, weight, bias, y, mean, rstd, rows, hidden,
                                    eps, stream);
    case FloatKind::kFloat16:
      return Forward<__half>(x, residual, sum, weight, bias, y, mean, rstd, rows, hidden, eps,
                             stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchLayerNormBackward(FloatKind kind, const void* dy, const void* x,
                                    const float* mean, const float* rstd, const void* weight,
                                    const void* dsum, void* dx, void* dweight, void* dbias,
                                    float* partial, int64_t rows, int64_t hidden,
                                    cudaStream_t stream) {
  switch (kind) {
    case FloatKind::kFloat32:
      return Backward<float>(dy, x, mean, rstd, weight, dsum, dx, dweight, dbias, partial, rows,
                             hidden, stream);
    case FloatKind::kBFloat16:
      return Backward<__nv_bfloat16>(dy, x, mean, rstd, weight, dsum, dx, dweight, dbias, partial,
                                     rows, hidden, stream);
    case FloatKind::kFloat16:
      return Backward<__half>(dy, x, mean, rstd, weight, dsum, dx, dweight, dbias, partial, rows,
                              hidden, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mt::kernels
