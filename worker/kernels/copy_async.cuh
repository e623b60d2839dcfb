// Asynchronous copies from global to shared memory (cp.async, compute capability 8.0 and later;
// nvcc only): a thread issues 16-byte copies that land in shared memory without passing through
// its registers, and goes on working while they are in flight. Before 8.0 each copy is an
// ordinary load and store, done when CopyAsync16 returns.
//
// A thread's copies since its last CommitCopies form a group; WaitCopies<N> returns once at most
// the newest N of the thread's groups are still in flight. A thread sees its own landed copies
// after WaitCopies; other threads' only after a barrier that follows their WaitCopies.
#ifndef MT_WORKER_KERNELS_COPY_ASYNC_CUH_
#define MT_WORKER_KERNELS_COPY_ASYNC_CUH_

#include <cuda_runtime.h>

namespace mt::kernels {

// 16 bytes from `global` to `shared` (both 16-byte aligned).
__device__ __forceinline__ void CopyAsync16(void* shared, const void* global) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(global) : "memory");
#else
  *static_cast<int4*>(shared) = *static_cast<const int4*>(global);
#endif
}

// Closes this thread's group of copies (an empty group counts too).
__device__ __forceinline__ void CommitCopies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most the newest N of this thread's committed groups are in flight.
template <int N>
__device__ __forceinline__ void WaitCopies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_COPY_ASYNC_CUH_
