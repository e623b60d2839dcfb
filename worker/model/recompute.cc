#include "worker/model/recompute.h"

#include <ATen/core/ivalue.h>
#include <torch/autograd.h>

#include <optional>
#include <string>
#include <utility>

#include "worker/model/generator_state.h"

namespace mt::model {
namespace {

// What the backward pass needs besides the saved inputs; held by the autograd context.
struct RecomputeState : torch::CustomClassHolder {
  RecomputeFn fn;
  at::Tensor rng_state;  // undefined when the RNG is not preserved
  c10::Device device = c10::Device(c10::kCPU);
  std::vector<torch::Tensor> params;  // the parameters fn reads (leaves, not copies)
  std::vector<bool> input_requires_grad;
};

class RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx,
                               c10::intrusive_ptr<RecomputeState> state, at::TensorList inputs,
                               at::TensorList params) {
    // Grad mode is off here (Function::apply), so fn records no graph.
    std::vector<torch::Tensor> in(inputs.begin(), inputs.end());
    torch::Tensor out = state->fn(in);
    ctx->save_for_backward(in);
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const c10::intrusive_ptr<torch::CustomClassHolder> holder =
        ctx->saved_data["state"].toCapsule();
    auto* state = static_cast<RecomputeState*>(holder.get());
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    // The forward's arguments were (state, inputs..., params...).
    const size_t num_params = state->params.size();

    std::vector<torch::Tensor> detached;
    detached.reserve(saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      detached.push_back(saved[i].detach().requires_grad_(state->input_requires_grad[i]));
    }

    torch::Tensor out;
    {
      // The caller's state comes back after the rerun (and if it throws).
      std::optional<GeneratorStateGuard> outer_rng;
      if (state->rng_state.defined()) {
        outer_rng.emplace(state->device);
        SetGeneratorState(state->device, state->rng_state);
      }
      torch::AutoGradMode enable_grad(true);
      out = state->fn(detached);
    }

    const std::vector<torch::Tensor>& params = state->params;
    std::vector<torch::Tensor> wrt;
    std::vector<size_t> slot;  // position of wrt[j] in the result (after the state slot)
    for (size_t i = 0; i < detached.size(); ++i) {
      if (detached[i].requires_grad()) {
        wrt.push_back(detached[i]);
        slot.push_back(i);
      }
    }
    for (size_t i = 0; i < num_params; ++i) {
      if (params[i].requires_grad()) {
        wrt.push_back(params[i]);
        slot.push_back(detached.size() + i);
      }
    }
    torch::autograd::variable_list result(1 + detached.size() + num_params);
    if (!wrt.empty() && out.requires_grad()) {
      torch::autograd::variable_list grads =
          torch::autograd::grad({out}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                                /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t j = 0; j < grads.size(); ++j) result[1 + slot[j]] = grads[j];
    }
    return result;
  }
};

}  // namespace

torch::Tensor RecomputeInBackward(RecomputeFn fn, const std::vector<torch::Tensor>& inputs,
                                  const std::vector<torch::Tensor>& params, bool preserve_rng) {
  auto state = c10::make_intrusive<RecomputeState>();
  state->fn = std::move(fn);
  state->params = params;
  for (const torch::Tensor& t : inputs) state->input_requires_grad.push_back(t.requires_grad());
  if (!inputs.empty()) state->device = inputs[0].device();
  if (preserve_rng) state->rng_state = GeneratorState(state->device);
  return RecomputeFunction::apply(std::move(state), at::TensorList(inputs), at::TensorList(params));
}

}  // namespace mt::model
