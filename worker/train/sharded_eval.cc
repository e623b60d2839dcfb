#include "worker/train/sharded_eval.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/spec/inference.h"
#include "worker/engine/data_sources.h"
#include "worker/train/eval_command.h"

namespace mt::train {
namespace {

// The engine's spec for the evaluation: the job's model and layout, one global batch of a
// micro-batch per DP rank per iteration, the plan's context; fp32 on the CPU, as the local
// command's --dtype auto. The vocabulary keeps the checkpoint's padding (`padded` rows, split
// over the TP ranks): padded again for another TP size, the added rows' logits would join the
// softmax and change the loss (by 0.003 for GPT-2's vocabulary going from TP 1 to TP 2).
absl::StatusOr<mt::v1::JobSpec> EngineSpec(const mt::v1::JobSpec& job, const EvalPlan& plan,
                                           int64_t iters, int64_t positions, int64_t padded,
                                           int dp_size, bool cpu) {
  mt::v1::JobSpec spec = job;
  const int tp = std::max(1, spec.parallel().tensor_model_parallel_size());
  if (padded > 0) {
    if (padded % tp != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tensor-model-parallel-size ", tp, ": the checkpoint's vocabulary of ",
                       padded, " rows (padded) does not split evenly over ", tp, " ranks"));
    }
    spec.mutable_model()->set_make_vocab_size_divisible_by(padded / tp);
  }
  mt::v1::TrainingSpec* t = spec.mutable_training();
  t->set_micro_batch_size(static_cast<int32_t>(plan.micro_batch));
  t->set_global_batch_size(static_cast<int32_t>(plan.micro_batch * dp_size));
  if (cpu) t->set_precision(mt::v1::PRECISION_FP32);
  spec.mutable_evaluation()->set_eval_iters(iters);
  spec.mutable_evaluation()->set_eval_interval(0);
  mt::v1::ModelSpec* m = spec.mutable_model();
  if (m->max_position_embeddings() <= 0) m->set_max_position_embeddings(positions);
  m->set_seq_length(plan.context);
  return spec;
}

}  // namespace

absl::StatusOr<ShardedEvalRun> EvaluateSharded(const mt::v1::JobSpec& spec,
                                               const ShardedEvalOptions& options) {
  const std::string& dir = spec.checkpoint().load_dir();
  MT_ASSIGN_OR_RETURN(std::optional<checkpoint::LoadChoice> load,
                      checkpoint::ChooseLoad(dir, options.load));
  if (!load.has_value()) return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir));
  const mt::v1::JobSpec& training = load->manifest.spec();
  const int64_t positions = load->manifest.model().max_position_embeddings() > 0
                                ? load->manifest.model().max_position_embeddings()
                                : training.model().seq_length();
  MT_ASSIGN_OR_RETURN(EvalPlan plan,
                      EvalPlanFromArgs(spec::EvalCommandArgs(spec, {}), training, positions));
  const int64_t global_rows = plan.micro_batch * options.dp_size;
  MT_ASSIGN_OR_RETURN(engine::EvalData data, engine::EvaluationDataSource(
                                                 EvalDataRequestFor(plan, training, global_rows)));
  const int64_t iters = plan.iters > 0 ? plan.iters : data.micro_batches;
  if (iters < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--split ", plan.split, ": the validation part holds no global batch of ",
                     global_rows, " samples of ", plan.context + 1,
                     " tokens (lower --micro-batch-size or --context-length)"));
  }
  const bool cpu = options.trainer.device.rfind("cpu", 0) == 0;
  auto valid = std::make_unique<engine::DataParallelSlice>(std::move(data.source), options.dp_rank,
                                                           options.dp_size);
  MT_ASSIGN_OR_RETURN(const mt::v1::JobSpec engine_spec,
                      EngineSpec(spec, plan, iters, positions,
                                 load->manifest.model().padded_vocab_size(), options.dp_size, cpu));
  // The engine wants a training source; it is never read.
  MT_ASSIGN_OR_RETURN(engine::DataSources unused,
                      engine::SyntheticDataSources(engine_spec, options.dp_rank, options.dp_size));
  // Evaluation only: the weights, no optimizer (engine::TrainerOptions::evaluation_only).
  engine::TrainerOptions trainer_options = options.trainer;
  trainer_options.evaluation_only = true;
  MT_ASSIGN_OR_RETURN(std::unique_ptr<engine::Trainer> trainer,
                      engine::Trainer::Create(engine_spec, trainer_options, std::move(unused.train),
                                              std::move(valid)));
  {
    MT_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::TensorSource> source,
                        checkpoint::OpenLoadSource(*load));
    checkpoint::RestoreOptions restore = options.restore;
    restore.weights_only = true;
    restore.load_optimizer = false;
    restore.load_rng = false;
    MT_RETURN_IF_ERROR(checkpoint::RestoreTrainer(*trainer, *source, restore));
  }
  ShardedEvalRun run;
  run.dir = load->dir;
  run.step = load->manifest.step();
  load->files.reset();
  load->attachment.reset();
  MT_ASSIGN_OR_RETURN(run.metrics, trainer->Evaluate());
  run.tokens = iters * global_rows * plan.context;
  run.micro_batch_size = plan.micro_batch;
  run.context_length = plan.context;
  run.same_samples_as_training = data.same_samples_as_training;
  return run;
}

}  // namespace mt::train
