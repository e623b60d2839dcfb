// See decode_attention.h. Flash-decoding: the live keys [0, p] of one (row, head) are cut into
// `splits` equal chunks (the split count is static, the chunk length follows p, read from the
// device), one block of 128 threads per (row, head, split). In a block, groups of kG lanes (a
// power of two, so that a group is aligned lanes of one warp) each take one key at a time: every
// lane holds kV 16-byte vectors of q (pre-scaled by log2(e) / sqrt(d)) and of the key, the group
// reduces the dot product by shuffles, and each group keeps its own online softmax (running max,
// sum and the fp32 weighted sum of the values over the head dims its lanes hold), four keys per
// iteration with their loads issued together. The groups are merged through shared memory; with
// one split the block writes the output, else its unnormalised output, max and sum go to the
// fp32 scratch and a second kernel (one block per (row, head)) merges the splits.
//
// The new token's key and value are read from k_new / v_new, never from the cache, and only the
// blocks of split 0 write them into the cache: no block reads what another writes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "worker/kernels/decode_attention_launch.h"
#include "worker/kernels/dependent_launch.cuh"
#include "worker/kernels/float_convert.cuh"

namespace mt::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kUnroll = 4;            // keys per group per iteration, loaded together
constexpr int kBlocksPerSm = 4;       // the split count aims at this many blocks per SM
constexpr int kMinKeysPerSplit = 64;  // at max_len: more splits than max_len / 64 only add work
constexpr int kMinChunk = 32;         // a split takes at least this many of the live keys
constexpr int kMaxSplits = 128;

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// The sum over the kG lanes of a group; every lane of the group gets it.
template <int kG>
__device__ __forceinline__ float GroupSum(float v) {
#pragma unroll
  for (int offset = kG / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ int64_t ClampedPosition(const int64_t* position, int64_t max_len) {
  const int64_t p = *position;
  return p < 0 ? 0 : (p >= max_len ? max_len - 1 : p);
}

// Zeros, whatever T's default constructor does.
template <typename T, int kVec>
__device__ __forceinline__ Pack<T, kVec> ZeroPack() {
  Pack<T, kVec> p;
#pragma unroll
  for (int e = 0; e < kVec; ++e) p.v[e] = To<T>(0.0f);
  return p;
}

// Weight of a partial softmax with running max m against the overall max; 0 for an empty one.
__device__ __forceinline__ float MergeWeight(float m, float overall) {
  return m == -INFINITY ? 0.0f : exp2f(m - overall);
}

// The end of a split block: its groups' partial softmaxes (o, m, l of each thread's group)
// merged through shared memory (s_o, s_m, s_l, s_w, s_max, s_sum: the kernel's), then written
// as the output (one split) or as the split's partial sums and (max, sum) for CombineKernel.
template <typename T, int kG, int kV>
__device__ __forceinline__ void MergeGroupsAndWrite(const DecodeAttentionArgs& a,
                                                    const float (&o)[kV][16 / sizeof(T)], float m,
                                                    float l, int group, int glane, int nvec,
                                                    int64_t bh, int split, float* s_o, float* s_m,
                                                    float* s_l, float* s_w, float& s_max,
                                                    float& s_sum) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kGroups = kThreads / kG;
  constexpr int kRow = kG * kV * kVec;
  const int64_t d = a.head_dim;
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int i = glane + v * kG;
    if (i < nvec) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) s_o[group * kRow + i * kVec + e] = o[v][e];
    }
  }
  if (glane == 0) {
    s_m[group] = m;
    s_l[group] = l;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int g = threadIdx.x;
    const float mg = g < kGroups ? s_m[g] : -INFINITY;
    const float overall = WarpMax(mg);
    const float w = MergeWeight(mg, overall);
    const float sum = WarpSum(g < kGroups ? w * s_l[g] : 0.0f);
    if (g < kGroups) s_w[g] = w;
    if (g == 0) {
      s_max = overall;
      s_sum = sum;
    }
  }
  __syncthreads();
  const bool single = a.splits == 1;
  const int64_t slot = bh * a.splits + split;
  for (int64_t c = threadIdx.x; c < d; c += kThreads) {
    float acc = 0.0f;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) acc = fmaf(s_w[g], s_o[g * kRow + c], acc);
    if (single) {
      static_cast<T*>(a.out)[bh * d + c] = To<T>(acc / s_sum);
    } else {
      a.partial[slot * d + c] = acc;
    }
  }
  if (!single && threadIdx.x == 0) {
    float* ml = a.partial + a.batch * a.heads * a.splits * d;
    ml[2 * slot] = s_max;
    ml[2 * slot + 1] = s_sum;
  }
}

template <typename T, int kG, int kV>
__global__ void __launch_bounds__(kThreads) SplitKernel(const DecodeAttentionArgs a, float scale) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kGroups = kThreads / kG;  // <= 32: warp 0 merges them, one per lane
  constexpr int kRow = kG * kV * kVec;    // >= head_dim
  using P = Pack<T, kVec>;
  __shared__ float s_o[kGroups * kRow];
  __shared__ float s_m[kGroups], s_l[kGroups], s_w[kGroups];
  __shared__ float s_max, s_sum;
  // Launched as a dependent (dependent_launch.cuh): q, k, v come from the kernel before.
  AllowDependents();
  WaitForPrerequisites();

  const int split = static_cast<int>(blockIdx.x % static_cast<unsigned>(a.splits));
  const int64_t bh = blockIdx.x / static_cast<unsigned>(a.splits);
  const int64_t b = bh / a.heads, h = bh % a.heads;
  const int64_t d = a.head_dim;
  const int nvec = static_cast<int>(d / kVec);
  const int64_t pos = ClampedPosition(a.position, a.max_len);
  const int64_t len = pos + 1;
  const T* q = static_cast<const T*>(a.q) + b * a.q_batch_stride + h * a.q_head_stride;
  const T* kn = static_cast<const T*>(a.k_new) + b * a.k_batch_stride + h * a.k_head_stride;
  const T* vn = static_cast<const T*>(a.v_new) + b * a.v_batch_stride + h * a.v_head_stride;
  T* kc = static_cast<T*>(a.k_cache) + bh * a.max_len * d;
  T* vc = static_cast<T*>(a.v_cache) + bh * a.max_len * d;
  if (split == 0) {
    for (int i = threadIdx.x; i < nvec; i += kThreads) {
      reinterpret_cast<P*>(kc + pos * d)[i] = reinterpret_cast<const P*>(kn)[i];
      reinterpret_cast<P*>(vc + pos * d)[i] = reinterpret_cast<const P*>(vn)[i];
    }
  }

  const int64_t chunk = max((len + a.splits - 1) / a.splits, static_cast<int64_t>(kMinChunk));
  const int64_t start = split * chunk;
  const int64_t end = min(start + chunk, len);
  const int group = threadIdx.x / kG, glane = threadIdx.x % kG;

  float qf[kV][kVec];
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int i = glane + v * kG;
    P p = ZeroPack<T, kVec>();
    if (i < nvec) p = reinterpret_cast<const P*>(q)[i];
#pragma unroll
    for (int e = 0; e < kVec; ++e) qf[v][e] = F(p.v[e]) * scale;
  }
  float m = -INFINITY, l = 0.0f;
  float o[kV][kVec];
#pragma unroll
  for (int v = 0; v < kV; ++v) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) o[v][e] = 0.0f;
  }

  // The loop bounds are the same for every thread (the shuffles need whole warps).
  for (int64_t base = start; base < end; base += kGroups * kUnroll) {
    P kr[kUnroll][kV], vr[kUnroll][kV];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = base + u * kGroups + group;
      valid[u] = j < end;
      const T* kp = j == pos ? kn : kc + j * d;
      const T* vp = j == pos ? vn : vc + j * d;
#pragma unroll
      for (int v = 0; v < kV; ++v) {
        const int i = glane + v * kG;
        kr[u][v] = ZeroPack<T, kVec>();
        vr[u][v] = ZeroPack<T, kVec>();
        if (valid[u] && i < nvec) {
          kr[u][v] = reinterpret_cast<const P*>(kp)[i];
          vr[u][v] = reinterpret_cast<const P*>(vp)[i];
        }
      }
    }
    float s[kUnroll];
    float m_new = m;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float dot = 0.0f;
#pragma unroll
      for (int v = 0; v < kV; ++v) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) dot = fmaf(qf[v][e], F(kr[u][v].v[e]), dot);
      }
      dot = GroupSum<kG>(dot);
      s[u] = valid[u] ? dot : -INFINITY;
      m_new = fmaxf(m_new, s[u]);
    }
    // m_new is -inf only while the group has seen no key (l and o are then 0).
    const float corr = m_new == -INFINITY ? 1.0f : exp2f(m - m_new);
    l *= corr;
#pragma unroll
    for (int v = 0; v < kV; ++v) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) o[v][e] *= corr;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const float p = valid[u] ? exp2f(s[u] - m_new) : 0.0f;
      l += p;
#pragma unroll
      for (int v = 0; v < kV; ++v) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) o[v][e] = fmaf(p, F(vr[u][v].v[e]), o[v][e]);
      }
    }
    m = m_new;
  }

  MergeGroupsAndWrite<T, kG, kV>(a, o, m, l, group, glane, nvec, bh, split, s_o, s_m, s_l, s_w,
                                 s_max, s_sum);
}

// One block per (row, head): out = sum_s w_s o_s / sum_s w_s l_s, w_s = 2^(m_s - max m).
template <typename T>
__global__ void __launch_bounds__(kThreads) CombineKernel(const DecodeAttentionArgs a) {
  __shared__ float s_w[kMaxSplits];
  __shared__ float s_inv;
  AllowDependents();
  WaitForPrerequisites();  // the split kernel's partial sums
  const int64_t bh = blockIdx.x;
  const int64_t d = a.head_dim;
  const int splits = a.splits;
  const float* po = a.partial + bh * splits * d;
  const float* ml = a.partial + a.batch * a.heads * splits * d + 2 * bh * splits;
  if (threadIdx.x < 32) {
    float overall = -INFINITY;
    for (int s = threadIdx.x; s < splits; s += 32) overall = fmaxf(overall, ml[2 * s]);
    overall = WarpMax(overall);
    float sum = 0.0f;
    for (int s = threadIdx.x; s < splits; s += 32) {
      const float w = MergeWeight(ml[2 * s], overall);
      s_w[s] = w;
      sum += w * ml[2 * s + 1];
    }
    sum = WarpSum(sum);
    if (threadIdx.x == 0) s_inv = 1.0f / sum;
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < d; c += kThreads) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) acc = fmaf(s_w[s], po[s * d + c], acc);
    static_cast<T*>(a.out)[bh * d + c] = To<T>(acc * s_inv);
  }
}

template <typename T>
cudaError_t Launch(const DecodeAttentionArgs& a, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t nvec = a.head_dim / kVec;
  const float scale =
      static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(a.head_dim)));
  const int64_t pairs = a.batch * a.heads;
  const dim3 grid(static_cast<unsigned>(pairs * a.splits));
  auto split = [&](auto kernel) {
    cudaError_t err = LaunchDependent(kernel, grid, dim3(kThreads), 0, stream, a, scale);
    if (err != cudaSuccess || a.splits == 1) return err;
    return LaunchDependent(CombineKernel<T>, dim3(static_cast<unsigned>(pairs)), dim3(kThreads), 0,
                           stream, a);
  };
  if (nvec <= 4) {
    return split(SplitKernel<T, 4, 1>);
  } else if (nvec <= 8) {
    return split(SplitKernel<T, 8, 1>);
  } else if (nvec <= 16) {
    return split(SplitKernel<T, 16, 1>);
  } else if (nvec <= 32) {
    return split(SplitKernel<T, 32, 1>);
  } else if constexpr (kVec == 4) {  // fp32 past 128 dims (16-bit takes 256 in one vector)
    return split(SplitKernel<T, 32, 2>);
  } else {
    return cudaErrorInvalidValue;
  }
}

}  // namespace

int DecodeAttentionSplits(int64_t batch, int64_t heads, int64_t max_len, int sm_count) {
  const int64_t pairs = std::max<int64_t>(1, batch * heads);
  const int64_t target = static_cast<int64_t>(std::max(sm_count, 1)) * kBlocksPerSm;
  int64_t splits = (target + pairs - 1) / pairs;
  splits = std::min(splits, std::max<int64_t>(1, max_len / kMinKeysPerSplit));
  return static_cast<int>(std::clamp<int64_t>(splits, 1, kMaxSplits));
}

int64_t DecodeAttentionScratchFloats(int64_t batch, int64_t heads, int64_t head_dim, int splits) {
  if (splits <= 1) return 0;
  return batch * heads * splits * (head_dim + 2);
}

cudaError_t LaunchDecodeAttention(FloatKind kind, const DecodeAttentionArgs& args,
                                  cudaStream_t stream) {
  const int64_t blocks = args.batch * args.heads * args.splits;
  if (!DecodeAttentionHeadDimSupported(args.head_dim) || args.batch < 1 || args.heads < 1 ||
      args.max_len < 1 || args.splits < 1 || args.splits > kMaxSplits || blocks > 0x7fffffff ||
      (args.splits > 1 && args.partial == nullptr)) {
    return cudaErrorInvalidValue;
  }
  switch (kind) {
    case FloatKind::kFloat32:
      return Launch<float>(args, stream);
    case FloatKind::kBFloat16:
      return Launch<__nv_bfloat16>(args, stream);
    case FloatKind::kFloat16:
      return Launch<__half>(args, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mt::kernels
