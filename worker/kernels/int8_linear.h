// Int8 weight-only linear layers for inference (`--quantize int8`, issue #17): each weight
// [out, in] is stored as int8 rows and one fp32 scale per output feature (symmetric, per
// channel: scale = max |w_row| / 127, q = round(w / scale) in [-127, 127]), a quarter of fp32's
// bytes and half of bf16's. A decode step reads every weight once per token, so its time is
// the weights' bytes over memory bandwidth: int8 halves what bf16 reads.
//
// Int8Linear computes x (q * scale)^T + bias. On CUDA with at most kInt8GemvMaxRows (4) rows of
// x (decoding a few sequences: one row each) and in % 16 == 0 a kernel reads the int8 weight
// directly (int8_linear_kernel.cu), with fp32 products and sums; otherwise (more sequences,
// prefill, evaluation, the CPU) the weight is dequantized to x's dtype (rounded once from fp32;
// one kernel on CUDA) and LibTorch's linear runs. Both compute with the same quantized weights,
// so their results differ only by rounding. Past a few rows the dequantized path reads and
// writes more bytes than bf16 weights would: int8 is for latency at small batches and for
// memory, not for throughput at large ones (bench/RESULTS.md).
// No autograd: inference only.
#ifndef MT_WORKER_KERNELS_INT8_LINEAR_H_
#define MT_WORKER_KERNELS_INT8_LINEAR_H_

#include <torch/types.h>

namespace mt::kernels {

struct Int8Weight {
  torch::Tensor q;      // int8 [out, in]
  torch::Tensor scale;  // fp32 [out]
};

// Per-output-channel symmetric int8 of a floating weight [out, in] (any device, any floating
// dtype; the max and the division in fp32). A row of zeros gets scale 1 and q 0. Throws
// c10::Error for a weight that is not 2-D or not floating.
Int8Weight QuantizeInt8(const torch::Tensor& weight);

// q * scale[:, None] as `dtype` (computed in fp32, rounded once).
torch::Tensor DequantizeInt8(const Int8Weight& weight, torch::ScalarType dtype);

// True when Int8Linear runs the CUDA kernel for this input (see above).
bool Int8GemvAvailable(const torch::Tensor& x, const Int8Weight& weight);

// act(x (q * scale)^T + bias): x [..., in] -> [..., out] in x's dtype; bias [out] in x's dtype
// or undefined; act = tanh-approximated GELU with `gelu` (applied in fp32 before rounding on
// the kernel path, to the rounded linear output on the dequantized path), else the identity.
torch::Tensor Int8Linear(const torch::Tensor& x, const Int8Weight& weight,
                         const torch::Tensor& bias, bool gelu = false);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_INT8_LINEAR_H_
