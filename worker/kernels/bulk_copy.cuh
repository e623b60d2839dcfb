// Bulk copies from global to shared memory (cp.async.bulk, the copy engine of compute capability
// 9.0; nvcc only): one thread moves a whole contiguous range (a multiple of 16 bytes, both ends
// 16-byte aligned) into shared memory, and a barrier in shared memory (an mbarrier) counts the
// bytes as they land. Threads wait on that barrier, not on registers, so a kernel can keep
// several rows in flight without holding them in registers.
//
// A barrier's life, per use (its phase): one thread calls ExpectBytes with the bytes of the
// copies it then issues on it; the phase completes when they have all landed; every reader
// waits for the phase with WaitForBytes(barrier, use % 2). The thread that issues a copy into
// shared memory that threads have read before calls it only after a barrier with those readers
// (a block or named barrier, or __syncwarp within a warp); IssueBulkCopy orders those reads
// before the copy. Only for compute capability 9.0 and later: callers keep another path below.
#ifndef MT_WORKER_KERNELS_BULK_COPY_CUH_
#define MT_WORKER_KERNELS_BULK_COPY_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace mt::kernels {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Makes `barrier` (8-byte aligned shared memory) count one arrival a phase. One thread calls
// it; the block's barrier that follows makes it visible to the others.
__device__ __forceinline__ void InitBytesBarrier(uint64_t* barrier) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(SharedAddress(barrier)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Opens the barrier's phase for `bytes` of copies (the phase's one arrival).
__device__ __forceinline__ void ExpectBytes(uint64_t* barrier, uint32_t bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SharedAddress(barrier)),
      "r"(bytes)
      : "memory");
}

// Copies `bytes` from `global` to `shared`, counted on `barrier`.
__device__ __forceinline__ void IssueBulkCopy(void* shared, const void* global, uint32_t bytes,
                                              uint64_t* barrier) {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(SharedAddress(shared)),
      "l"(global), "r"(bytes), "r"(SharedAddress(barrier))
      : "memory");
}

// Returns once the barrier's phase of parity `parity` (its use count % 2) has completed.
__device__ __forceinline__ void WaitForBytes(uint64_t* barrier, uint32_t parity) {
  const uint32_t address = SharedAddress(barrier);
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
  }
}

#endif  // __CUDA_ARCH__ >= 900

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_BULK_COPY_CUH_
