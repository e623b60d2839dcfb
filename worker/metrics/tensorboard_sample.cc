// Writes a small, known TensorBoard run with the rank's own logger (TensorBoardLogger) and
// prints what it wrote as JSON ({"file": ..., "scalars": {tag: [[step, value], ...]}}), so that
// a reader of another make (tests/gpu/tensorboard_check.py, with tensorboard's own reader) can
// compare. Usage: tensorboard_sample DIR
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/cli/help_version.h"
#include "worker/metrics/tensorboard_logger.h"

constexpr char kUsage[] =
    "usage: tensorboard_sample DIR\n"
    "Writes a small, known TensorBoard run into DIR with the rank's own logger and prints it as "
    "JSON.\n";

int main(int argc, char** argv) {
  if (mt::cli::AnswerHelpOrVersion(argc, argv, "tensorboard_sample", kUsage)) return 0;
  if (argc != 2) {
    std::fprintf(stderr, "usage: tensorboard_sample DIR\n");
    return 2;
  }
  namespace m = mt::worker::metrics;
  m::TensorBoardOptions options;
  options.world_size = 8;
  options.flops_per_token = 1e9;
  options.global_batch_size = 32;
  const absl::Time t0 = absl::FromUnixSeconds(1'700'000'000);
  auto logger = m::TensorBoardLogger::Create(argv[1], options, t0);
  if (!logger.ok()) {
    std::fprintf(stderr, "%s\n", std::string(logger.status().message()).c_str());
    return 1;
  }
  std::map<std::string, std::vector<std::pair<int64_t, double>>> wrote;
  for (int it = 1; it <= 5; ++it) {
    mt::engine::StepMetrics s;
    s.iteration = it;
    s.consumed_samples = 32 * it;
    s.loss = 10.0 / it;
    s.learning_rate = 1e-4 * it;
    s.grad_norm = it == 3 ? INFINITY : 0.5 * it;  // step 3 skipped: no grad-norm point
    s.loss_scale = 65536;
    s.seconds = 0.25;
    s.tokens_per_second = 131072;
    s.mfu = 0.375;
    const absl::Time now = t0 + absl::Seconds(it);
    (*logger)->OnStep(s, now);
    wrote["lm loss"].push_back({it, s.loss});
    wrote["lm loss vs samples"].push_back({s.consumed_samples, s.loss});
    wrote["learning-rate"].push_back({it, s.learning_rate});
    if (std::isfinite(s.grad_norm)) wrote["grad-norm"].push_back({it, s.grad_norm});
    wrote["loss-scale"].push_back({it, s.loss_scale});
    wrote["iteration-time"].push_back({it, s.seconds});
    wrote["tokens-per-second"].push_back({it, s.tokens_per_second});
    wrote["throughput"].push_back({it, s.tokens_per_second * 1e9 / 8 / 1e12});
    wrote["mfu"].push_back({it, s.mfu});
  }
  mt::engine::EvalMetrics e;
  e.iteration = 5;
  e.loss = 2.5;
  e.perplexity = std::exp(2.5);
  (*logger)->OnEval(e, 160, t0 + absl::Seconds(6));
  wrote["lm loss validation"].push_back({5, e.loss});
  wrote["lm loss validation ppl"].push_back({5, e.perplexity});
  if (absl::Status s = (*logger)->Flush(); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::vector<std::string> tags;
  for (const auto& [tag, points] : wrote) {
    std::vector<std::string> p;
    for (const auto& [step, value] : points) {
      p.push_back(absl::StrFormat("[%d, %.17g]", step, value));  // every digit of the double
    }
    tags.push_back(absl::StrCat("\"", tag, "\": [", absl::StrJoin(p, ", "), "]"));
  }
  std::printf("{\"file\": \"%s\", \"scalars\": {%s}}\n", (*logger)->path().c_str(),
              absl::StrJoin(tags, ", ").c_str());
  return 0;
}
