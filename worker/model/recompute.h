// Activation recomputation (Megatron's --recompute-granularity) for the C++ API, where
// torch.utils.checkpoint does not exist.
//
// RecomputeInBackward(fn, inputs, params) runs fn(inputs) without recording its graph, keeps
// only `inputs`, and in backward reruns fn under grad on detached copies of them to get the
// gradients of `inputs` and `params` (the parameters fn reads; they must be listed so that
// autograd routes their gradients back through this node, where they accumulate into .grad as
// usual).
//
// Dropout inside fn draws from the default generator of the inputs' device. With
// preserve_rng, the generator state is captured before the forward run and restored for the
// rerun, so the recomputed dropout masks are the ones the forward used; the state after the
// rerun is put back to what it was, so recomputation consumes no random numbers of its own
// (PyTorch's checkpoint does the same with fork_rng). The caller's RNG stream is therefore
// identical with and without recomputation.
//
// Thread-compatible: the generator is locked only while its state is read or written.
#ifndef MT_WORKER_MODEL_RECOMPUTE_H_
#define MT_WORKER_MODEL_RECOMPUTE_H_

#include <torch/types.h>

#include <functional>
#include <vector>

namespace mt::model {

using RecomputeFn = std::function<torch::Tensor(const std::vector<torch::Tensor>& inputs)>;

torch::Tensor RecomputeInBackward(RecomputeFn fn, const std::vector<torch::Tensor>& inputs,
                                  const std::vector<torch::Tensor>& params, bool preserve_rng);

}  // namespace mt::model

#endif  // MT_WORKER_MODEL_RECOMPUTE_H_
