#include "worker/train/inference_rank.h"

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/base/logging.h"
#include "common/spec/inference.h"
#include "worker/engine/trainer.h"
#include "worker/report/progress_beacon.h"
#include "worker/train/eval_command.h"
#include "worker/train/generate_command.h"
#include "worker/train/pipe_reporter.h"
#include "worker/train/sharded_eval.h"
#include "worker/train/sharded_generate.h"

namespace mt::train {
namespace {

int Fail(const absl::Status& status, const char* what) {
  // The daemon puts the log's last line into the job's failure reason: make it the cause.
  std::fprintf(stderr, "mt-train: %s: %s\n", what, std::string(status.message()).c_str());
  std::fflush(stderr);
  return 1;
}

void Send(worker::ReportWriter writer, const mt::v1::RankReport& report) {
  if (absl::Status s = writer.Write(report); !s.ok()) {
    MT_LOG(WARNING) << "report not sent: " << s.message();
  }
}

int RunEval(const mt::v1::JobSpec& spec, const std::vector<std::string>& device,
            const worker::ReportWriter& writer, worker::ProgressBeacon& beacon) {
  bool usage_error = false;
  absl::StatusOr<EvalRun> run = EvaluateFromArgs(
      spec::EvalCommandArgs(spec, device),
      [&beacon](int64_t batches) { beacon.Set(mt::v1::RANK_ACTIVITY_EVAL, batches); },
      &usage_error);
  if (!run.ok()) return Fail(run.status(), "evaluation");
  MT_LOG(INFO) << "evaluated: " << EvalRunJson(*run);
  mt::v1::RankReport report;
  report.set_phase(mt::v1::RANK_PHASE_EVALUATING);
  mt::v1::Progress* p = report.mutable_progress();
  p->set_step(run->loaded.manifest.step());
  p->set_validation_step(run->loaded.manifest.step());
  p->set_validation_loss(run->result.loss);
  p->set_validation_perplexity(run->result.perplexity);
  p->set_evaluated_tokens(run->result.tokens);
  Send(writer, report);
  return 0;
}

// An eval job past one rank: each rank evaluates its shard; every rank reports the result
// (the coordinator takes its reporting rank's).
int RunShardedEval(const mt::v1::JobSpec& spec,
                   const std::function<absl::StatusOr<RankPlace>()>& join,
                   const worker::ReportWriter& writer, worker::ProgressBeacon& beacon) {
  absl::StatusOr<RankPlace> place = join();
  if (!place.ok()) return Fail(place.status(), "a sharded evaluation's rank");
  ShardedEvalOptions options;
  options.load = place->session.load;
  options.restore = place->session.restore;
  options.trainer = place->session.trainer;
  options.trainer.on_activity = [&beacon](engine::Activity a, int64_t step) {
    beacon.Set(ToRankActivity(a), step);
  };
  options.dp_rank = place->distributed.collectives->dp_rank();
  options.dp_size = place->distributed.collectives->dp_size();
  absl::StatusOr<ShardedEvalRun> run = EvaluateSharded(spec, options);
  if (!run.ok()) return Fail(run.status(), "evaluation");
  MT_LOG(INFO) << absl::StrFormat(
      "evaluated %s (step %d): loss %.6f perplexity %.6f, %d tokens in %d iterations of %d x "
      "%d samples of %d tokens, %.3f s",
      run->dir, run->step, run->metrics.loss, run->metrics.perplexity, run->tokens,
      run->metrics.batches, options.dp_size, run->micro_batch_size, run->context_length,
      run->metrics.seconds);
  mt::v1::RankReport report;
  report.set_phase(mt::v1::RANK_PHASE_EVALUATING);
  mt::v1::Progress* p = report.mutable_progress();
  p->set_step(run->step);
  p->set_validation_step(run->step);
  p->set_validation_loss(run->metrics.loss);
  p->set_validation_perplexity(run->metrics.perplexity);
  p->set_evaluated_tokens(run->tokens);
  Send(writer, report);
  return 0;
}

// Each sample's new text as a RankReport.generated (when `report`), a beacon per piece.
generate::TextCallback TextReporter(const worker::ReportWriter& writer,
                                    worker::ProgressBeacon& beacon, bool report) {
  return [&writer, &beacon, report, pieces = int64_t{0}](int64_t sample,
                                                         absl::string_view text) mutable {
    beacon.Set(mt::v1::RANK_ACTIVITY_EVAL, ++pieces);
    if (!report || text.empty()) return;
    mt::v1::RankReport r;
    r.mutable_generated()->set_sample(static_cast<int32_t>(sample));
    r.mutable_generated()->set_text(std::string(text));
    Send(writer, r);
  };
}

// One message per sample with done, its finish reason and token count.
void ReportDone(const worker::ReportWriter& writer, const generate::GenerateResult& r) {
  for (size_t i = 0; i < r.samples.size(); ++i) {
    mt::v1::RankReport report;
    mt::v1::GeneratedText* g = report.mutable_generated();
    g->set_sample(static_cast<int32_t>(i));
    g->set_done(true);
    g->set_finish_reason(r.samples[i].finish_reason);
    g->set_tokens(static_cast<int64_t>(r.samples[i].tokens.size()));
    Send(writer, report);
  }
}

void LogGenerated(const generate::GenerateResult& r, const std::string& who = "") {
  MT_LOG(INFO) << who << "generated " << r.samples.size() << " sample(s), " << r.prompt_tokens
               << " prompt tokens, " << r.generated_tokens << " generated, first token "
               << r.prefill_seconds << " s, decode " << r.decode_seconds << " s";
}

int RunGenerate(const mt::v1::JobSpec& spec, const std::vector<std::string>& device,
                const worker::ReportWriter& writer, worker::ProgressBeacon& beacon) {
  bool usage_error = false;
  absl::StatusOr<GenerateRun> run = GenerateFromArgs(
      spec::GenerateCommandArgs(spec, device), TextReporter(writer, beacon, true), &usage_error);
  if (!run.ok()) return Fail(run.status(), "generation");
  ReportDone(writer, run->result);
  LogGenerated(run->result);
  return 0;
}

// A generation job past one rank (TP ranks): every rank decodes its shard; TP rank 0 (the job's
// rank 0, whose reports the coordinator streams) reports the text as one rank does, the others
// only their beacons.
int RunShardedGenerate(const mt::v1::JobSpec& spec, const std::string& device,
                       const std::function<absl::StatusOr<RankPlace>()>& join,
                       const worker::ReportWriter& writer, worker::ProgressBeacon& beacon) {
  absl::StatusOr<RankPlace> place = join();
  if (!place.ok()) return Fail(place.status(), "a sharded generation's rank");
  ShardedGenerateOptions options;
  options.device = device;
  options.tp = TensorParallelPlaceOf(place->distributed.groups);
  const bool reports = options.tp.rank == 0;
  absl::StatusOr<GenerateRun> run =
      GenerateSharded(spec, options, TextReporter(writer, beacon, reports));
  if (!run.ok()) return Fail(run.status(), "generation");
  if (reports) ReportDone(writer, run->result);
  LogGenerated(run->result,
               absl::StrCat("TP rank ", options.tp.rank, " of ", options.tp.size, ": "));
  return 0;
}

}  // namespace

int RunInferenceRank(const mt::v1::JobSpec& spec, const mt::v1::Assignment& assignment,
                     const worker::ReportWriter& writer,
                     const std::function<absl::StatusOr<RankPlace>()>& join) {
  MT_LOG(INFO) << (spec.inference().has_eval() ? "evaluating " : "generating from ")
               << spec.inference().checkpoint_dir() << " for " << assignment.job_id();
  // Nothing here to stop gracefully: a stop order (a cancel, the stream's client gone) ends the
  // process at once instead of after the stop grace.
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  worker::ProgressBeacon beacon(writer);
  mt::v1::RankReport started;
  started.set_phase(mt::v1::RANK_PHASE_EVALUATING);
  Send(writer, started);
  beacon.Set(mt::v1::RANK_ACTIVITY_LOAD, 0);
  // The daemon sets CUDA_VISIBLE_DEVICES to the rank's GPU: it is device 0 here.
  const std::vector<std::string> device = {"--device",
                                           assignment.gpu_index() >= 0 ? "cuda:0" : "cpu"};
  if (spec.inference().has_eval() && assignment.layout().world_size() > 1) {
    return RunShardedEval(spec, join, writer, beacon);
  }
  if (spec.inference().has_generate() && assignment.layout().world_size() > 1) {
    return RunShardedGenerate(spec, device[1], join, writer, beacon);
  }
  if (spec.inference().has_eval()) return RunEval(spec, device, writer, beacon);
  if (spec.inference().has_generate()) return RunGenerate(spec, device, writer, beacon);
  return Fail(absl::InvalidArgumentError("the inference spec names no task"), "the assignment");
}

}  // namespace mt::train
