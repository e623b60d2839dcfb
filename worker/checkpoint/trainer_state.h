// What a checkpoint holds of a Trainer, as a list of named tensors plus scalars: the ONE place
// that knows the optimizer's internals (MixedPrecisionOptimizer: slots(), segments(), the flat
// master / exp_avg / exp_avg_sq / momentum buffers). Re-point it here when the optimizer
// changes.
//
// The optimizer state is saved per parameter whatever the optimizer's layout: with the
// distributed optimizer (ZeRO-1) each DP rank holds only its segments of the flat buffers, and
// CollectTensors gathers every parameter's whole state onto DP rank 0 (a collective over the
// DP group: every DP rank calls it); RestoreTrainer reads each parameter's whole state and
// keeps the part this rank holds. A checkpoint therefore loads under any DP size, with or
// without the distributed optimizer (FORMAT.md).
//
// Names (global layer indices, the rank's TP slice of each tensor):
//   model.<param>                 the model's parameters, in the model's dtype
//   optimizer.master.<param>      fp32 master weights (16-bit models only; an fp32 model's
//                                 master weights are its parameters)
//   optimizer.exp_avg.<param>     AdamW moments (fp32)      optimizer.exp_avg_sq.<param>
//   optimizer.momentum.<param>    SGD momentum buffer (fp32)
//   rng.cpu                       the default CPU generator's state (uint8)
// Thread-compatible; call from the training thread.
#ifndef MT_WORKER_CHECKPOINT_TRAINER_STATE_H_
#define MT_WORKER_CHECKPOINT_TRAINER_STATE_H_

#include <torch/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/checkpoint/reshard.h"
#include "mt/v1/checkpoint.pb.h"
#include "worker/engine/trainer.h"

namespace mt::checkpoint {

struct StateTensor {
  std::string name;
  torch::Tensor tensor;  // on the training device; may be a view
  int split_dim = -1;    // over tensor parallelism (worker/model/sharding.h)
};

// Every tensor of the state (views of the live tensors: copy before training on). Every rank
// of the job calls it at the same step: with the distributed optimizer it gathers the
// optimizer state over the DP group, and only DP rank 0 gets the optimizer.* tensors (the
// others, which write nothing, get the model's and the generator's). Errors come from the
// collective.
absl::StatusOr<std::vector<StateTensor>> CollectTensors(engine::Trainer& trainer);
// The scalars: iteration, samples, loss scaler, optimizer steps, seed ...
mt::v1::TrainerState CollectScalars(engine::Trainer& trainer);
// The model's shape for the manifest.
mt::v1::ManifestModel DescribeModel(engine::Trainer& trainer);

struct RestoreOptions {
  bool load_optimizer = true;  // !--no-load-optim
  bool load_rng = true;        // !--no-load-rng
  // --finetune or a weights-only checkpoint: weights only, iteration 0, fresh optimizer.
  bool weights_only = false;
  int tp_rank = 0;
  int tp_size = 1;
};

// Loads `source` into the trainer: each parameter's slice for this rank (whatever layout
// wrote it), fp32 master weights (the checkpoint's when it has them, else the weights), the
// optimizer state and the counters as `options` say. The data sources must already start at
// the checkpoint's consumed samples. Errors name the tensor whose shape does not fit.
absl::Status RestoreTrainer(engine::Trainer& trainer, TensorSource& source,
                            const RestoreOptions& options);

// Helpers between LibTorch and HostTensor (host copies).
absl::StatusOr<DType> ToDType(c10::ScalarType type);
absl::StatusOr<c10::ScalarType> ToScalarType(DType dtype);

}  // namespace mt::checkpoint

#endif  // MT_WORKER_CHECKPOINT_TRAINER_STATE_H_
