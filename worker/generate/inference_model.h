// A checkpoint as a model ready to evaluate or decode on one device: the whole model (any TP/PP
// layout the checkpoint was written with is assembled, checkpoint/reshard.h), no dropout, its
// weights the checkpoint's model.* tensors cast to the chosen dtype. Or, for a generation job
// over tensor parallelism (worker/train/sharded_generate.h), one TP rank's shard of it: the
// checkpoint resharded to that rank (its vocabulary keeping the checkpoint's padding, split
// over the ranks), every layer, its collectives over the given TP group. CHECKPOINT is what --load
// takes: a save directory (its latest good checkpoint), one checkpoint directory, or a Hugging
// Face GPT-2 directory.
//
// No LibTorch in this header. Thread-compatible.
#ifndef MT_WORKER_GENERATE_INFERENCE_MODEL_H_
#define MT_WORKER_GENERATE_INFERENCE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "mt/v1/checkpoint.pb.h"

namespace mt::model {
class GptModel;
}  // namespace mt::model

namespace mt::parallel {
struct GroupHandle;  // worker/parallel/process_groups.h
}  // namespace mt::parallel

namespace mt::generate {

// One rank's place in tensor parallelism: its index in the TP group and the group's size;
// size > 1 needs `group` (the ranks' TP group).
struct TensorParallelPlace {
  int rank = 0;
  int size = 1;
  std::shared_ptr<const parallel::GroupHandle> group;
};

struct InferenceModelOptions {
  std::string device = "cpu";  // "cpu", "cuda", "cuda:N" (--device)
  // "fp32", "bf16", "fp16", or "auto" = fp32 on the CPU, bf16 on CUDA (--dtype).
  std::string dtype = "auto";
  // "auto", "math" or "fused" (--attention).
  std::string attention = "auto";
  // "none" or "int8" (--quantize): int8 weight-only linear layers (worker/model/quantize.h).
  std::string quantize = "none";
  // Tensor parallelism (no sequence parallelism): size > 1 needs --quantize none.
  TensorParallelPlace tp;
};

struct InferenceModel {
  std::shared_ptr<model::GptModel> model;
  std::string dir;  // the checkpoint directory loaded
  mt::v1::CheckpointManifest manifest;
};

// Errors: NOT_FOUND naming the path when it holds no checkpoint (CHECKPOINT argument);
// INVALID_ARGUMENT naming --device / --dtype / --attention / --quantize for a bad value, and
// --tensor-model-parallel-size for a TP size that does not divide the checkpoint's heads or
// padded vocabulary (or with --quantize int8); the load's own errors (a damaged checkpoint, a
// tensor of the wrong shape, no CUDA) otherwise.
absl::StatusOr<InferenceModel> LoadInferenceModel(const std::string& path,
                                                  const InferenceModelOptions& options);

}  // namespace mt::generate

#endif  // MT_WORKER_GENERATE_INFERENCE_MODEL_H_
