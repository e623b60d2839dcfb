// The transformer's MLP, fc2(gelu(fc1(x))), with its element-wise work folded into cuBLASLt
// epilogues (llm.c and Transformer Engine do the same): forward, fc1's bias and the (tanh) GELU
// are applied by the fc1 GEMM, which also writes the pre-activation for backward
// (GELU_AUX_BIAS), or where that is slower for the shape the GEMM adds the bias and a GELU
// kernel follows (FusedMlpOptions::gelu, mlp_gelu.h); backward, the GELU's derivative and fc1's
// bias gradient are applied by the GEMM that computes fc2's input gradient (DGELU_BGRAD). The
// unfused chain instead runs a GELU kernel forward, a GELU-backward kernel and a bias-gradient
// reduction backward, each a full pass over the [tokens, ffn] activation: 5.9 ms of a 77.6 ms GPT-2
// 124M step on an H200 (bench/RESULTS.md, issue #16).
//
// The epilogue's GELU is computed in fp32 on the accumulator before rounding, so in bf16 / fp16
// it is no less exact than the chain (which rounds the pre-activation first); the GPU test
// compares both against an fp32 reference. No LibTorch in this header beyond the tensor type.
#ifndef MT_WORKER_KERNELS_FUSED_MLP_H_
#define MT_WORKER_KERNELS_FUSED_MLP_H_

#include <torch/types.h>

#include "worker/kernels/mlp_gelu.h"

namespace mt::kernels {

// How backward gets d pre-activation (= (dy w2) * gelu'(pre)) and fc1's bias gradient.
enum class MlpBackward {
  kDGeluBGrad,      // both from the DGELU_BGRAD epilogue of the dy w2 GEMM
  kDGelu,           // the DGELU epilogue; the bias gradient by a separate reduction
  kUnfused,         // dy w2, then LibTorch's gelu_backward and reduction (only forward is fused)
  kDGeluWGradBias,  // the DGELU epilogue; both bias gradients from the BGRADB epilogues of the
                    // weight-gradient GEMMs (dw1 = dpre^T x, dw2 = dy^T h), no reductions
};

struct FusedMlpOptions {
  // bench/engine/fused_mlp_bench.cc measures the three on the GPU (bench/RESULTS.md): on an
  // H200 in bf16, kDGelu is 1.03-1.07x the unfused chain's forward + backward, kUnfused
  // 0.93-1.00x, kDGeluBGrad 0.80-0.85x (cuBLASLt reduces the bias gradient in a separate,
  // slow kernel). kDGeluWGradBias: measured there too (bench/RESULTS.md, 2026-12-03).
  MlpBackward backward = MlpBackward::kDGelu;
  // Where training's forward applies fc1's bias and GELU (mlp_gelu.h). Inference (no
  // gradients) always takes the epilogue, which then writes no pre-activation.
  MlpGelu gelu = MlpGelu::kAuto;
  // Where cuBLASLt offers no algorithm for a GEMM, run that step unfused (same math); false:
  // throw instead (tests, so that a pass cannot come from the fallback).
  bool allow_fallback = true;
};

// True when FusedMlp runs the epilogues for these tensors: a CUDA build, CUDA tensors of one
// dtype (fp32, bf16 or fp16), x [N, K], w1 [F, K], b1 [F], w2 [H, F], b2 [H] or undefined, every
// dimension a multiple of 8 (cuBLASLt's 16-byte rows and its aux leading dimension).
bool FusedMlpAvailable(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                       const torch::Tensor& w2, const torch::Tensor& b2);

// fc2(gelu_tanh(x w1^T + b1)) = [N, H] with autograd into x and the four parameters. b2 may be
// undefined: fc2 without its bias (added, and its gradient summed, by the LayerNorm the output
// goes to: model::GptConfig::fold_linear_bias). Where FusedMlpAvailable is false: the same chain
// through LibTorch (addmm, gelu, addmm or mm).
torch::Tensor FusedMlp(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                       const torch::Tensor& w2, const torch::Tensor& b2,
                       const FusedMlpOptions& options = {});

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_FUSED_MLP_H_
