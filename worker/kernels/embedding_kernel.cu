// An embedding table's gradient (embedding_launch.h): the rows of the output gradient summed by
// the token that looked them up.
//
// 1. The table's gradient is zeroed (one memset) and the tokens sorted, each with its position
//    (cub's stable radix sort over the bits a row index needs: equal tokens keep the order of
//    their positions).
// 2. ChunkKernel: block k takes the sorted entries [16k, 16k + 16) and, for each 16-byte vector
//    of columns a thread owns, sums the rows of each run of equal tokens in it (all 16 loads in
//    flight first). A run that neither began in an earlier chunk nor goes on into the next is a
//    token's whole sum: written to its row of the table. The piece of a token that began earlier
//    is the chunk's head partial, that of one that began here and goes on its tail partial
//    (fp32).
// 3. FinishKernel: block k, where its tail partial starts a token that goes on, adds that token's
//    head partials of the chunks after, in order, and writes the row.
// Every sum runs in the order of the positions and of the chunks: the same bits on every call.
// A token outside [0, rows) sorts as the key `rows`, after every row's, and is summed into no
// row: nothing is written outside the table whatever the tokens hold.
// LibTorch's embedding backward (sort, then partial segments of at most 10 rows) took ~0.95 ms
// of a GPT-2 124M step on an H100 (32,768 tokens, 50,304 x 768 bf16; bench/RESULTS.md,
// 2026-12-06).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "worker/kernels/embedding_launch.h"
#include "worker/kernels/float_convert.cuh"

namespace mt::kernels {
namespace {

constexpr int kChunk = kEmbeddingRowsPerChunk;
constexpr int kThreads = 128;
constexpr int64_t kMaxCount = 2147483647;  // int32 keys and positions
constexpr size_t kAlign = 256;

size_t AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

int64_t Chunks(int64_t n) { return (n + kChunk - 1) / kChunk; }

// Bits the sort's keys take: a row index, or `rows` for a token outside [0, rows) (the key that
// names no row, sorted last): rows < 2^bits.
int KeyBits(int64_t rows) {
  int bits = 1;
  while ((int64_t{1} << bits) <= rows) ++bits;
  return bits;
}

// The scratch's parts, in order, each kAlign-aligned.
struct Scratch {
  int* keys_in = nullptr;
  int* keys = nullptr;  // sorted
  int* positions_in = nullptr;
  int* positions = nullptr;  // in the sorted order
  void* sort_temp = nullptr;
  size_t sort_bytes = 0;
  float* partial = nullptr;  // [chunks][2][cols]: each chunk's head, then tail
  size_t total = 0;
};

Scratch Layout(char* base, int64_t n, int64_t cols, size_t sort_bytes) {
  Scratch s;
  const size_t ints = AlignUp(static_cast<size_t>(n) * sizeof(int));
  size_t at = 0;
  auto take = [&](size_t bytes) {
    char* p = base == nullptr ? nullptr : base + at;
    at += AlignUp(bytes);
    return p;
  };
  s.keys_in = reinterpret_cast<int*>(take(ints));
  s.keys = reinterpret_cast<int*>(take(ints));
  s.positions_in = reinterpret_cast<int*>(take(ints));
  s.positions = reinterpret_cast<int*>(take(ints));
  s.sort_temp = take(sort_bytes);
  s.sort_bytes = sort_bytes;
  s.partial = reinterpret_cast<float*>(
      take(static_cast<size_t>(Chunks(n)) * 2 * static_cast<size_t>(cols) * sizeof(float)));
  s.total = at;
  return s;
}

size_t SortBytes(int64_t n, int bits) {
  size_t bytes = 0;
  const cudaError_t err = cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const int*>(nullptr), static_cast<int*>(nullptr),
      static_cast<const int*>(nullptr), static_cast<int*>(nullptr), static_cast<int>(n), 0, bits);
  return err == cudaSuccess ? bytes : 0;
}

// keys[i] = tokens[i], or `rows` (no row) where it lies outside [0, rows); positions[i] = i.
__global__ void PrepareKeysKernel(const int64_t* __restrict__ tokens, int* __restrict__ keys,
                                  int* __restrict__ positions, int64_t n, int64_t rows) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const int64_t token = tokens[i];
    keys[i] = static_cast<int>(token >= 0 && token < rows ? token : rows);
    positions[i] = static_cast<int>(i);
  }
}

template <int kVec>
__device__ __forceinline__ void StorePartial(const float (&acc)[kVec], float* dst) {
#pragma unroll
  for (int k = 0; k < kVec; k += 4) {
    *reinterpret_cast<float4*>(dst + k) = make_float4(acc[k], acc[k + 1], acc[k + 2], acc[k + 3]);
  }
}

template <typename T, int kVec>
__device__ __forceinline__ void StoreRow(const float (&acc)[kVec], T* dst) {
  Pack<T, kVec> out;
#pragma unroll
  for (int k = 0; k < kVec; ++k) out.v[k] = To<T>(acc[k]);
  *reinterpret_cast<Pack<T, kVec>*>(dst) = out;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ChunkKernel(const T* __restrict__ grad_out, const int* __restrict__ keys,
                const int* __restrict__ positions, T* __restrict__ grad_weight,
                float* __restrict__ partial, int64_t n, int64_t rows, int64_t cols) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t chunk = blockIdx.x;
  const int64_t begin = chunk * kChunk;
  const int count = static_cast<int>(min(static_cast<int64_t>(kChunk), n - begin));
  // key[0]: the entry before the chunk (-1 if none), key[1 .. count]: the chunk's, key[count +
  // 1]: the entry after it (-1 if none).
  __shared__ int key[kChunk + 2];
  __shared__ int position[kChunk];
  if (threadIdx.x < kChunk + 2) {
    const int64_t i = begin - 1 + threadIdx.x;
    key[threadIdx.x] = i >= 0 && i < n && threadIdx.x <= count + 1 ? keys[i] : -1;
  }
  if (threadIdx.x < count) position[threadIdx.x] = positions[begin + threadIdx.x];
  __syncthreads();
  const int before = key[0], after = key[count + 1];
  for (int64_t col = static_cast<int64_t>(threadIdx.x) * kVec; col < cols;
       col += static_cast<int64_t>(kThreads) * kVec) {
    Pack<T, kVec> row[kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      if (j < count) {
        row[j] = *reinterpret_cast<const Pack<T, kVec>*>(
            grad_out + static_cast<int64_t>(position[j]) * cols + col);
      }
    }
    float acc[kVec] = {};
    int run_begin = 0;
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      if (j < count) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[k] += F(row[j].v[k]);
        const int token = key[j + 1];
        const bool run_ends = j == count - 1 || key[j + 2] != token;
        if (run_ends) {
          const bool began_before = run_begin == 0 && before == token;
          const bool goes_on = j == count - 1 && after == token;
          if (began_before) {
            StorePartial<kVec>(acc, partial + (chunk * 2) * cols + col);
          } else if (goes_on) {
            StorePartial<kVec>(acc, partial + (chunk * 2 + 1) * cols + col);
          } else if (token != rows) {  // the key `rows` names no row
            StoreRow<T, kVec>(acc, grad_weight + static_cast<int64_t>(token) * cols + col);
          }
#pragma unroll
          for (int k = 0; k < kVec; ++k) acc[k] = 0.0f;
          run_begin = j + 1;
        }
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    FinishKernel(const int* __restrict__ keys, const float* __restrict__ partial,
                 T* __restrict__ grad_weight, int64_t n, int64_t rows, int64_t cols) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t chunk = blockIdx.x;
  const int64_t begin = chunk * kChunk;
  const int64_t end = min(begin + kChunk, n);
  if (end >= n) return;  // nothing goes on past the last chunk
  const int token = keys[end - 1];
  if (keys[end] != token) return;  // the chunk's last run ends here
  if (token == rows) return;       // the key that names no row
  // Began in an earlier chunk: that chunk's block writes it.
  if (begin > 0 && keys[begin] == token && keys[begin - 1] == token) return;
  // The token's last entry: the first index past `end` whose key differs, less one.
  int64_t lo = end, hi = n;  // keys[lo] == token; the answer in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] == token) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int64_t last_chunk = lo / kChunk;
  for (int64_t col = static_cast<int64_t>(threadIdx.x) * kVec; col < cols;
       col += static_cast<int64_t>(kThreads) * kVec) {
    float acc[kVec];
    const float* tail = partial + (chunk * 2 + 1) * cols + col;
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[k] = tail[k];
#pragma unroll 4
    for (int64_t c = chunk + 1; c <= last_chunk; ++c) {
      const float* head = partial + (c * 2) * cols + col;
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[k] += head[k];
    }
    StoreRow<T, kVec>(acc, grad_weight + static_cast<int64_t>(token) * cols + col);
  }
}

template <typename T>
cudaError_t Launch(const void* grad_out, const int64_t* tokens, int64_t n, int64_t rows,
                   int64_t cols, void* grad_weight, void* scratch, size_t scratch_bytes,
                   cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  if (cols % kVec != 0) return cudaErrorInvalidValue;
  const int bits = KeyBits(rows);
  const size_t sort_bytes = SortBytes(n, bits);
  const Scratch s = Layout(static_cast<char*>(scratch), n, cols, sort_bytes);
  if (sort_bytes == 0 || s.total > scratch_bytes) return cudaErrorInvalidValue;
  cudaError_t err = cudaMemsetAsync(
      grad_weight, 0, static_cast<size_t>(rows) * static_cast<size_t>(cols) * sizeof(T), stream);
  if (err != cudaSuccess) return err;
  PrepareKeysKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
      tokens, s.keys_in, s.positions_in, n, rows);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  size_t temp_bytes = s.sort_bytes;
  err = cub::DeviceRadixSort::SortPairs(s.sort_temp, temp_bytes, s.keys_in, s.keys, s.positions_in,
                                        s.positions, static_cast<int>(n), 0, bits, stream);
  if (err != cudaSuccess) return err;
  const auto chunks = static_cast<unsigned>(Chunks(n));
  ChunkKernel<T><<<chunks, kThreads, 0, stream>>>(static_cast<const T*>(grad_out), s.keys,
                                                  s.positions, static_cast<T*>(grad_weight),
                                                  s.partial, n, rows, cols);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  FinishKernel<T><<<chunks, kThreads, 0, stream>>>(s.keys, s.partial, static_cast<T*>(grad_weight),
                                                   n, rows, cols);
  return cudaGetLastError();
}

}  // namespace

size_t EmbeddingBackwardScratchBytes(int64_t n, int64_t rows, int64_t cols) {
  if (n < 1 || n > kMaxCount || rows < 1 || rows > kMaxCount || cols < 1) return 0;
  const size_t sort_bytes = SortBytes(n, KeyBits(rows));
  if (sort_bytes == 0) return 0;
  return Layout(nullptr, n, cols, sort_bytes).total;
}

cudaError_t LaunchEmbeddingBackward(FloatKind kind, const void* grad_out, const int64_t* tokens,
                                    int64_t n, int64_t rows, int64_t cols, void* grad_weight,
                                    void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  if (n < 1 || n > kMaxCount || rows < 1 || rows > kMaxCount || cols < 1 ||
      Chunks(n) > 2147483647) {
    return cudaErrorInvalidValue;
  }
  switch (kind) {
    case FloatKind::kFloat32:
      return Launch<float>(grad_out, tokens, n, rows, cols, grad_weight, scratch, scratch_bytes,
                           stream);
    case FloatKind::kBFloat16:
      return Launch<__nv_bfloat16>(grad_out, tokens, n, rows, cols, grad_weight, scratch,
                                   scratch_bytes, stream);
    case FloatKind::kFloat16:
      return Launch<__half>(grad_out, tokens, n, rows, cols, grad_weight, scratch, scratch_bytes,
                            stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mt::kernels
