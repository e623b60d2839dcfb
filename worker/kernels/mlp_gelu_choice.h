// MlpGelu::kAuto's choice (mlp_gelu.h): for a shape of fc1 (device, dtype, rows, in, out), its
// first call outside a CUDA graph capture times both forward paths and remembers the faster for
// the process; a capture takes a shape's remembered choice, or the epilogue for a shape not met
// before. Each path is timed alone on the caller's stream (CUDA events; the stream is
// synchronised) after twice the L2's size is written, as the GEMM tuning times its candidates
// (gemm_lt_launch.h): the median of kMlpGeluRepeats runs each after one warm-up run, the two
// interleaved; the kernel path is kept where it beats the epilogue by kMlpGeluMargin. CUDA
// builds only. Thread-safe.
#ifndef MT_WORKER_KERNELS_MLP_GELU_CHOICE_H_
#define MT_WORKER_KERNELS_MLP_GELU_CHOICE_H_

#include <torch/types.h>

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"

namespace mt::kernels {

inline constexpr int kMlpGeluRepeats = 5;
inline constexpr float kMlpGeluMargin = 0.02f;

// True where the kernel path is the one to run for fc1 with `x` [rows, in] and `out` outputs.
// `epilogue` and `kernel` queue one forward each on the current stream (false: it could not,
// and the epilogue is chosen); they are called only while the shape is timed.
bool GeluKernelFaster(const torch::Tensor& x, int64_t out, absl::FunctionRef<bool()> epilogue,
                      absl::FunctionRef<bool()> kernel);

// Shapes timed so far in this process, and how many of them run the kernel path.
struct MlpGeluCounts {
  size_t shapes = 0;
  size_t kernel = 0;
};
MlpGeluCounts MlpGeluSoFar();

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_MLP_GELU_CHOICE_H_
