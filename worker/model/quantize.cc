#include "worker/model/quantize.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"

namespace mt::model {
namespace {

template <typename LinearImpl>
void QuantizeLinear(LinearImpl& linear) {
  torch::NoGradGuard no_grad;
  linear.int8 = kernels::QuantizeInt8(linear.weight);
  // Buffers, so that the module's to() moves them (in place: `int8` shares their storage).
  linear.register_buffer("weight_int8", linear.int8.q);
  linear.register_buffer("weight_scale", linear.int8.scale);
  linear.weight.set_data(torch::empty({0}, linear.weight.options()));
}

}  // namespace

absl::Status QuantizeInt8Linears(GptModel& gpt) {
  if (gpt.shard().tp_size != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("--quantize int8 needs the whole model on one device (this part is one of ",
                     gpt.shard().tp_size, " tensor-parallel ranks)"));
  }
  for (const auto& layer : gpt.decoder->layers) {
    if (layer->self_attention->linear_qkv->int8.q.defined()) {
      return absl::FailedPreconditionError("the model is already quantized");
    }
  }
  for (auto& layer : gpt.decoder->layers) {
    QuantizeLinear(*layer->self_attention->linear_qkv);
    QuantizeLinear(*layer->self_attention->linear_proj);
    QuantizeLinear(*layer->mlp->linear_fc1);
    QuantizeLinear(*layer->mlp->linear_fc2);
  }
  return absl::OkStatus();
}

int64_t ModelBytes(GptModel& gpt) {
  int64_t bytes = 0;
  for (const auto& p : gpt.parameters()) bytes += p.numel() * p.element_size();
  for (const auto& b : gpt.buffers()) bytes += b.numel() * b.element_size();
  return bytes;
}

}  // namespace mt::model
