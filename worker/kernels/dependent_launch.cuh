// Programmatic dependent launch (Hopper, compute capability 9.0; nvcc only). A decode step is a
// chain of ~170 short kernels (issue #17): between two of them the GPU idles while the second
// launches and ramps up, and a GEMV could already stream its weight, which no earlier kernel
// writes. A kernel launched by LaunchDependent may start while the kernel before it in the stream
// is still running, once every block of that one has called AllowDependents (or ended).
//
// The contract, for every kernel launched by LaunchDependent:
// - it calls WaitForPrerequisites before it reads anything an earlier kernel may write and
//   before it writes anything at all (an earlier kernel may still read that memory); only
//   inputs no kernel of the stream writes (a model's weights) may be read before;
// - it may call AllowDependents anywhere, once per thread: a dependent that starts early waits
//   in its own WaitForPrerequisites for this grid's completion and memory flush.
// Both are no-ops when the kernel was launched the ordinary way, and before compute capability
// 9.0, where LaunchDependent's attribute is ignored. Graph capture keeps the early start as a
// programmatic edge.
#ifndef MT_WORKER_KERNELS_DEPENDENT_LAUNCH_CUH_
#define MT_WORKER_KERNELS_DEPENDENT_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <utility>

namespace mt::kernels {

// Waits until the kernels this grid depends on have completed and their writes are visible.
__device__ __forceinline__ void WaitForPrerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel of the stream, if launched by LaunchDependent, start.
__device__ __forceinline__ void AllowDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...) allowed to overlap the kernel before it (see
// above). Returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t LaunchDependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                            cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute[1] = {};
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_DEPENDENT_LAUNCH_CUH_
