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

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/checkpoint/checkpoint_dir.h"
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

// Where a restore took its tensors from (RestoreOptions::stats).
struct RestoreStats {
  int from_staged = 0;     // the device copy of a verified file (StagedSource)
  int from_memory = 0;     // the verified bytes in host memory
  int from_assembled = 0;  // a host tensor the source assembled (resharding, files not kept)
};

struct RestoreOptions {
  bool load_optimizer = true;  // !--no-load-optim
  bool load_rng = true;        // !--no-load-rng
  // --finetune or a weights-only checkpoint: weights only, iteration 0, fresh optimizer.
  bool weights_only = false;
  int tp_rank = 0;
  int tp_size = 1;
  RestoreStats* stats = nullptr;  // filled when set
};

// Copies of a checkpoint's files on the training device, made while the load read and verified
// them (checkpointer.h ChooseLoad): the restore then copies each tensor device to device.
// Only files that verified are ever used (the restore finds them through TensorSource::Locate,
// which answers only for the verified files held in memory). Immutable once built; thread-safe
// to read.
class StagedFiles : public LoadAttachment {
 public:
  explicit StagedFiles(std::map<std::string, torch::Tensor> files) : files_(std::move(files)) {}
  // The whole file's bytes (uint8, on the device); undefined when the file was not staged.
  torch::Tensor Find(const std::string& file) const;
  int64_t bytes() const;

 private:
  std::map<std::string, torch::Tensor> files_;
};

// A TensorSource with the staged copies of its in-memory files (OpenLoadSource makes one).
// Thread-compatible.
class StagedSource : public TensorSource {
 public:
  StagedSource(std::unique_ptr<TensorSource> inner, std::shared_ptr<const StagedFiles> staged)
      : inner_(std::move(inner)), staged_(std::move(staged)) {}
  const mt::v1::CheckpointManifest& manifest() const override { return inner_->manifest(); }
  bool Has(const std::string& name) const override { return inner_->Has(name); }
  std::vector<std::string> Names() const override { return inner_->Names(); }
  absl::StatusOr<HostTensor> Full(const std::string& name) override { return inner_->Full(name); }
  absl::StatusOr<HostTensor> Slice(const std::string& name, const SliceRequest& request) override {
    return inner_->Slice(name, request);
  }
  absl::StatusOr<std::optional<StoredTensor>> Locate(const std::string& name,
                                                     const SliceRequest& request) override {
    return inner_->Locate(name, request);
  }
  const StagedFiles& staged() const { return *staged_; }

 private:
  std::unique_ptr<TensorSource> inner_;
  std::shared_ptr<const StagedFiles> staged_;
};

// Loads `source` into the trainer: each parameter's slice for this rank (whatever layout
// wrote it), fp32 master weights (the checkpoint's when it has them, else the weights), the
// optimizer state and the counters as `options` say. The data sources must already start at
// the checkpoint's consumed samples. Errors name the tensor whose shape does not fit.
// Each tensor is copied once, straight to its place (the parameter; this rank's part of the
// optimizer's flat buffers), from the staged device copy (StagedSource), else from the verified
// bytes in memory, else (resharding, files not kept) from a host tensor the source assembles;
// device-to-device copies are issued without waiting and the device is synchronised once at
// the end.
absl::Status RestoreTrainer(engine::Trainer& trainer, TensorSource& source,
                            const RestoreOptions& options);

// Helpers between LibTorch and HostTensor (host copies).
absl::StatusOr<DType> ToDType(c10::ScalarType type);
absl::StatusOr<c10::ScalarType> ToScalarType(DType dtype);

}  // namespace mt::checkpoint

#endif  // MT_WORKER_CHECKPOINT_TRAINER_STATE_H_
