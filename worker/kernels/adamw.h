// The engine optimizer's fused kernels (worker/engine/optimizer.h): the gradients' sum of
// squares for the global norm, and AdamW's update with the 16-bit model copy, each one pass
// over all of a step's gradients however many parameters there are.
//
// What they replaced: one norm kernel per parameter plus a stack and a sum; a conversion of
// each 16-bit gradient into an fp32 temporary, at::_fused_adamw_ over the temporaries, and a
// copy of the master weights into the model. The kernels read 16-bit (or fp32) gradients as
// they are and write the model's copy in the same pass: 30 bytes of traffic a parameter where
// that chain moved 42 (bf16 model, fp32 master and moments). CPU builds, and tensors these
// kernels do not take, keep the optimizer's element-wise LibTorch path.
//
// The pieces are runs of the optimizer's flat fp32 buffers (file comment of adamw_launch.h),
// each with the gradient that belongs to it: a parameter's own .grad or a range of a gradient
// buffer, any alignment. Results are deterministic: the same inputs give the same bits.
#ifndef MT_WORKER_KERNELS_ADAMW_H_
#define MT_WORKER_KERNELS_ADAMW_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace mt::kernels {

// True in a build with the CUDA kernels (where the Supports checks can say yes).
bool FusedOptimizerKernelsBuilt();

struct GradPiece {
  torch::Tensor grad;   // 1-D; undefined = zeros (a parameter backward did not reach)
  bool counted = true;  // false: only its inf/NaN reaches the sum (0 x its sum of squares)
};

// Whether GradSumOfSquares runs these pieces: a CUDA build, every defined gradient a
// contiguous CUDA tensor of one dtype (fp32, bf16 or fp16) on one device, at least one piece.
bool GradSumOfSquaresSupports(const std::vector<GradPiece>& pieces);

// [1] fp32 on the pieces' device: sum of the counted gradients' squares + 0 x the others'.
// Queued on the current stream; nothing waits for it. Check GradSumOfSquaresSupports first.
torch::Tensor GradSumOfSquares(const std::vector<GradPiece>& pieces);

struct AdamWPiece {
  torch::Tensor grad;       // 1-D, numel elements; undefined = zeros
  int64_t state_begin = 0;  // into master, exp_avg and exp_avg_sq
  int64_t model_begin = 0;  // into model
  int64_t numel = 0;
  bool weight_decay = true;
};

struct AdamWState {
  torch::Tensor master;          // fp32, 1-D: the master weights, indexed by state_begin
  torch::Tensor exp_avg;         // fp32, 1-D, indexed by state_begin
  torch::Tensor exp_avg_sq;      // fp32, like exp_avg
  torch::Tensor model;           // bf16 or fp16, 1-D: the model's copy, indexed by model_begin;
                                 // undefined when master_is_model
  bool master_is_model = false;  // an fp32 model: master is the model, indexed by model_begin
  torch::Tensor step;            // fp32 0-dim: Adam's t, this step's increment included
  torch::Tensor grad_divisor;    // fp32 0-dim: every gradient is divided by it
  torch::Tensor found_inf;       // fp32 0-dim: != 0 leaves everything as it is
};

struct AdamWHyper {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
};

// Whether FusedAdamW runs these: a CUDA build; state on one CUDA device, fp32 and contiguous;
// a bf16/fp16 model copy or none (then master_is_model); gradients of one dtype (fp32, bf16,
// fp16), 1-D, contiguous, numel long, on that device; every piece inside the buffers.
bool FusedAdamWSupports(const AdamWState& state, const std::vector<AdamWPiece>& pieces);

// torch.optim.AdamW(fused=True)'s update of every piece (adamw_launch.h gives the formula),
// then the model's copy of it, all in one kernel on the current stream; with found_inf != 0
// nothing changes. Check FusedAdamWSupports first.
void FusedAdamW(const AdamWState& state, const std::vector<AdamWPiece>& pieces,
                const AdamWHyper& hyper);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_ADAMW_H_
