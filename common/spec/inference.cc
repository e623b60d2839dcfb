#include "common/spec/inference.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/spec/defaults.h"

namespace mt::spec {
namespace {

absl::Status Bad(const std::string& message) { return absl::InvalidArgumentError(message); }

std::string Num(double v) { return absl::StrFormat("%.17g", v); }

absl::Status ValidateQuantize(const std::string& q) {
  if (q.empty() || q == "none" || q == "int8") return absl::OkStatus();
  return Bad(absl::StrCat("--quantize \"", q, "\": want none or int8"));
}

void AddQuantize(const std::string& q, std::vector<std::string>& args) {
  if (!q.empty() && q != "none") args.insert(args.end(), {"--quantize", q});
}

}  // namespace

absl::Status ValidateEvalTask(const mt::v1::EvalTask& task, int64_t max_positions) {
  if (task.data_path().empty()) return Bad("--data-path PREFIX is required");
  if (task.data_path()[0] != '/') {
    return Bad(absl::StrCat("--data-path \"", task.data_path(), "\" must be absolute"));
  }
  if (task.all() && task.has_eval_iters()) return Bad("give --eval-iters N or --all, not both");
  if (task.has_eval_iters() && (task.eval_iters() < 1 || task.eval_iters() > kMaxEvalIters)) {
    return Bad(absl::StrCat("--eval-iters ", task.eval_iters(), ": want an integer in [1, ",
                            kMaxEvalIters, "]"));
  }
  if (task.has_micro_batch_size() &&
      (task.micro_batch_size() < 1 || task.micro_batch_size() > kMaxEvalMicroBatch)) {
    return Bad(absl::StrCat("--micro-batch-size ", task.micro_batch_size(),
                            ": want an integer in [1, ", kMaxEvalMicroBatch, "]"));
  }
  if (task.has_context_length() &&
      (task.context_length() < 2 || task.context_length() > max_positions)) {
    return Bad(absl::StrCat("--context-length ", task.context_length(), ": want an integer in [2, ",
                            max_positions, "] (the checkpoint's positions)"));
  }
  const struct {
    const char* flag;
    int32_t size;
  } sizes[] = {{"--tensor-model-parallel-size", task.tensor_model_parallel_size()},
               {"--pipeline-model-parallel-size", task.pipeline_model_parallel_size()},
               {"--data-parallel-size", task.data_parallel_size()}};
  for (const auto& [flag, size] : sizes) {
    // 0 is the field's unset value (1 rank); a flag given says 1 or more.
    if (size != 0) MT_RETURN_IF_ERROR(ValidateEvalParallelSize(flag, size));
  }
  if (!task.quantize().empty() && task.quantize() != "none" && EvalWorldSize(task) > 1) {
    return Bad(
        absl::StrCat("--quantize ", task.quantize(),
                     " evaluates on one rank: give --quantize none, or parallel sizes of 1"));
  }
  return ValidateQuantize(task.quantize());
}

absl::Status ValidateEvalParallelSize(const char* flag, int64_t size) {
  if (size >= 1 && size <= kMaxEvalParallelSize) return absl::OkStatus();
  return Bad(absl::StrCat(flag, " ", size, ": want an integer in [1, ", kMaxEvalParallelSize, "]"));
}

int64_t EvalWorldSize(const mt::v1::EvalTask& task) {
  int64_t world = 1;
  for (int32_t size : {task.tensor_model_parallel_size(), task.pipeline_model_parallel_size(),
                       task.data_parallel_size()}) {
    world *= std::max(1, size);
  }
  return world;
}

absl::Status ValidateGenerateTask(const mt::v1::GenerateTask& t) {
  if (t.prompt().empty()) return Bad("--prompt TEXT (or --prompt-file FILE) is required");
  if (static_cast<int64_t>(t.prompt().size()) > kMaxPromptBytes) {
    return Bad(absl::StrCat("--prompt: ", t.prompt().size(), " bytes, at most ", kMaxPromptBytes));
  }
  if (t.has_max_new_tokens() && (t.max_new_tokens() < 1 || t.max_new_tokens() > kMaxNewTokens)) {
    return Bad(absl::StrCat("--max-new-tokens ", t.max_new_tokens(), ": want an integer in [1, ",
                            kMaxNewTokens, "]"));
  }
  if (t.has_num_samples() && (t.num_samples() < 1 || t.num_samples() > kMaxSamples)) {
    return Bad(absl::StrCat("-n ", t.num_samples(), ": want an integer in [1, ", kMaxSamples, "]"));
  }
  if (t.has_temperature() && !(t.temperature() >= 0 && std::isfinite(t.temperature()))) {
    return Bad(absl::StrCat("--temperature ", Num(t.temperature()),
                            ": want a finite number >= 0 (0 = greedy)"));
  }
  if (t.has_top_k() && t.top_k() < 0) {
    return Bad(absl::StrCat("--top-k ", t.top_k(), ": want an integer >= 0 (0 = all)"));
  }
  if (t.has_top_p() && !(t.top_p() > 0 && t.top_p() <= 1)) {
    return Bad(absl::StrCat("--top-p ", Num(t.top_p()), ": want a number in (0, 1]"));
  }
  if (t.stop().size() > 4096) return Bad("--stop: at most 4096 bytes");
  // 0 is the field's unset value (one rank).
  if (t.tensor_model_parallel_size() != 0) {
    MT_RETURN_IF_ERROR(
        ValidateEvalParallelSize("--tensor-model-parallel-size", t.tensor_model_parallel_size()));
  }
  MT_RETURN_IF_ERROR(ValidateQuantize(t.quantize()));
  if (!t.quantize().empty() && t.quantize() != "none" && t.tensor_model_parallel_size() > 1) {
    return Bad(absl::StrCat("--quantize ", t.quantize(),
                            " generates on one rank: give --quantize none, or "
                            "--tensor-model-parallel-size 1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<mt::v1::JobSpec> InferenceJobSpec(const mt::v1::CheckpointManifest& manifest,
                                                 const std::string& dir,
                                                 mt::v1::InferenceSpec inference,
                                                 const std::string& name, int32_t priority,
                                                 mt::v1::DeviceKind device) {
  if (!manifest.has_spec() || manifest.spec().model().num_layers() <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", dir,
                     " holds no job spec (an import?); evaluate or generate from it "
                     "locally with `mt-worker eval|generate`"));
  }
  mt::v1::JobSpec spec = manifest.spec();
  const int64_t positions = manifest.model().max_position_embeddings() > 0
                                ? manifest.model().max_position_embeddings()
                                : spec.model().seq_length();
  if (inference.has_eval()) {
    mt::v1::EvalTask* eval = inference.mutable_eval();
    if (eval->split().empty()) eval->set_split(kDefaultSplit);
    if (absl::Status s = ValidateEvalTask(*eval, positions); !s.ok()) return s;
    mt::v1::DataSpec* data = spec.mutable_data();
    data->clear_data_path();
    data->clear_train_data_path();
    data->clear_valid_data_path();
    data->clear_test_data_path();
    mt::v1::DataPath* path = data->add_data_path();
    path->set_weight(1.0);
    path->set_prefix(eval->data_path());
    data->set_split(eval->split());
  } else if (inference.has_generate()) {
    if (absl::Status s = ValidateGenerateTask(inference.generate()); !s.ok()) return s;
  } else {
    return Bad("an inference job needs an eval or a generate task");
  }
  // The ranks split the checkpoint's heads, and its padded vocabulary as it is
  // (worker/train/sharded_eval.h, sharded_generate.h).
  const int32_t tp = InferenceLayout(inference).tensor_model_parallel_size();
  const int64_t heads = manifest.model().num_attention_heads() > 0
                            ? manifest.model().num_attention_heads()
                            : spec.model().num_attention_heads();
  if (heads > 0 && heads % tp != 0) {
    return Bad(absl::StrCat("--tensor-model-parallel-size ", tp, ": the checkpoint's ", heads,
                            " attention heads do not split evenly over ", tp,
                            " ranks; give a divisor of ", heads));
  }
  const int64_t padded = manifest.model().padded_vocab_size();
  if (padded > 0 && padded % tp != 0) {
    return Bad(absl::StrCat(
        "--tensor-model-parallel-size ", tp, ": the checkpoint's vocabulary of ", padded,
        " rows (padded) does not split evenly over ", tp, " ranks; give a divisor of ", padded));
  }
  inference.set_checkpoint_dir(dir);
  inference.set_checkpoint_job_id(manifest.job_id());
  *spec.mutable_inference() = std::move(inference);
  spec.set_name(name);
  spec.set_priority(priority);
  spec.clear_from_checkpoint();
  *spec.mutable_parallel() = InferenceLayout(spec.inference());
  spec.mutable_training()->set_global_batch_size(spec.training().micro_batch_size() *
                                                 spec.parallel().data_parallel_size());
  mt::v1::CheckpointSpec* checkpoint = spec.mutable_checkpoint();
  checkpoint->Clear();
  checkpoint->set_load_dir(dir);
  spec.mutable_logging()->clear_tensorboard_dir();
  spec.mutable_restart()->set_max_restarts(0);
  spec.mutable_resources()->set_device(device);
  return spec;
}

mt::v1::ParallelSpec InferenceLayout(const mt::v1::InferenceSpec& inference) {
  mt::v1::ParallelSpec p;
  p.set_context_parallel_size(1);
  if (inference.has_generate()) {
    // Tensor parallelism only: the model split over the ranks, one batch of samples.
    const int32_t tp = std::max(1, inference.generate().tensor_model_parallel_size());
    p.set_tensor_model_parallel_size(tp);
    p.set_pipeline_model_parallel_size(1);
    p.set_data_parallel_size(1);
    p.set_world_size(tp);
    return p;
  }
  const mt::v1::EvalTask& eval = inference.eval();
  p.set_tensor_model_parallel_size(std::max(1, eval.tensor_model_parallel_size()));
  p.set_pipeline_model_parallel_size(std::max(1, eval.pipeline_model_parallel_size()));
  p.set_data_parallel_size(std::max(1, eval.data_parallel_size()));
  p.set_world_size(static_cast<int32_t>(EvalWorldSize(eval)));
  return p;
}

std::vector<std::string> ListInferenceProblems(const mt::v1::JobSpec& spec) {
  std::vector<std::string> problems;
  if (!spec.has_inference()) return problems;
  const mt::v1::InferenceSpec& inference = spec.inference();
  const mt::v1::ParallelSpec& p = spec.parallel();
  const mt::v1::ParallelSpec want = InferenceLayout(inference);
  if (std::max(1, p.tensor_model_parallel_size()) != want.tensor_model_parallel_size() ||
      std::max(1, p.pipeline_model_parallel_size()) != want.pipeline_model_parallel_size() ||
      std::max(1, p.data_parallel_size()) != want.data_parallel_size() ||
      p.context_parallel_size() > 1 || std::max(1, p.world_size()) != want.world_size()) {
    problems.push_back(absl::StrCat(
        "inference: the parallel sizes must be the task's (TP ", want.tensor_model_parallel_size(),
        ", PP ", want.pipeline_model_parallel_size(), ", DP ", want.data_parallel_size(),
        "; a generation job's PP and DP are 1)"));
  }
  if (!spec.checkpoint().save_dir().empty()) {
    problems.push_back("inference: an eval or generation job saves nothing (checkpoint.save_dir)");
  }
  if (spec.checkpoint().load_dir().empty() ||
      spec.checkpoint().load_dir() != inference.checkpoint_dir()) {
    problems.push_back("inference.checkpoint_dir: must be set and equal to checkpoint.load_dir");
  }
  const int64_t positions = spec.model().max_position_embeddings() > 0
                                ? spec.model().max_position_embeddings()
                                : spec.model().seq_length();
  absl::Status task = absl::OkStatus();
  if (inference.has_eval()) {
    task = ValidateEvalTask(inference.eval(), positions);
    if (spec.data().data_path_size() != 1 ||
        spec.data().data_path(0).prefix() != inference.eval().data_path()) {
      problems.push_back("inference.eval.data_path: must be data.data_path's one prefix");
    }
  } else if (inference.has_generate()) {
    task = ValidateGenerateTask(inference.generate());
  } else {
    task = Bad("inference: give an eval or a generate task");
  }
  if (!task.ok()) problems.push_back(absl::StrCat("inference: ", task.message()));
  return problems;
}

std::vector<std::string> EvalCommandArgs(const mt::v1::JobSpec& spec,
                                         const std::vector<std::string>& extra) {
  const mt::v1::EvalTask& t = spec.inference().eval();
  const std::string data =
      spec.data().data_path_size() > 0 ? spec.data().data_path(0).prefix() : "";
  std::vector<std::string> args = {spec.checkpoint().load_dir(), "--data-path", data};
  if (!spec.data().split().empty()) args.insert(args.end(), {"--split", spec.data().split()});
  if (t.has_eval_iters()) args.insert(args.end(), {"--eval-iters", absl::StrCat(t.eval_iters())});
  if (t.all()) args.push_back("--all");
  if (t.has_micro_batch_size()) {
    args.insert(args.end(), {"--micro-batch-size", absl::StrCat(t.micro_batch_size())});
  }
  if (t.has_context_length()) {
    args.insert(args.end(), {"--context-length", absl::StrCat(t.context_length())});
  }
  AddQuantize(t.quantize(), args);
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"-o", "json"});
  return args;
}

std::vector<std::string> GenerateCommandArgs(const mt::v1::JobSpec& spec,
                                             const std::vector<std::string>& extra) {
  const mt::v1::GenerateTask& t = spec.inference().generate();
  // Inline values: a prompt or stop text may start with '-'.
  std::vector<std::string> args = {spec.checkpoint().load_dir(),
                                   absl::StrCat("--prompt=", t.prompt())};
  if (t.has_max_new_tokens()) {
    args.insert(args.end(), {"--max-new-tokens", absl::StrCat(t.max_new_tokens())});
  }
  if (t.has_temperature()) args.insert(args.end(), {"--temperature", Num(t.temperature())});
  if (t.has_top_k()) args.insert(args.end(), {"--top-k", absl::StrCat(t.top_k())});
  if (t.has_top_p()) args.insert(args.end(), {"--top-p", Num(t.top_p())});
  if (t.has_seed()) args.insert(args.end(), {"--seed", absl::StrCat(t.seed())});
  if (!t.stop().empty()) args.push_back(absl::StrCat("--stop=", t.stop()));
  if (t.has_num_samples()) args.insert(args.end(), {"-n", absl::StrCat(t.num_samples())});
  AddQuantize(t.quantize(), args);
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"-o", "json"});
  return args;
}

}  // namespace mt::spec
