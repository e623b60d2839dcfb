// Int8 weight-only inference (`--quantize int8`, issue #17): the four linear layers of every
// transformer layer (linear_qkv, linear_proj, linear_fc1, linear_fc2: 12 h^2 of the 12 h^2 + V h
// weights of GPT-2) take per-output-channel int8 weights (worker/kernels/int8_linear.h) and
// drop their floating ones; the embeddings, the output layer, the LayerNorms and every bias stay
// in the model's dtype. The model then serves forward passes only (no gradients, no
// checkpoint of it): evaluation and decoding compute with the int8 weights.
#ifndef MT_WORKER_MODEL_QUANTIZE_H_
#define MT_WORKER_MODEL_QUANTIZE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "worker/model/gpt.h"

namespace mt::model {

// Quantizes the linear layers of every layer of `gpt` in place (on its device). Errors:
// FAILED_PRECONDITION for a tensor-parallel part (tp > 1) or a model already quantized.
absl::Status QuantizeInt8Linears(GptModel& gpt);

// Bytes the model's tensors hold now (parameters and buffers, int8 weights at one byte each).
int64_t ModelBytes(GptModel& gpt);

}  // namespace mt::model

#endif  // MT_WORKER_MODEL_QUANTIZE_H_
