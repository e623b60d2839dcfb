// What metrics cost a training step: the same tiny GPT trained on the CPU with the rank's
// whole observability path on (RankObservability: per-step telemetry over a real pipe to a
// reader thread that feeds the daemon's WorkerMetrics, a scraper thread serializing them every
// 100 ms, TensorBoard events written every step) and off, alternating step by step so that
// drift on a noisy machine hits both alike. Prints the ratio of median step times (on / off),
// and the time spent in the metrics hook itself as a share of the median step (the part of the
// difference that is not noise); exits 1 when the ratio is over 1 + --max_overhead.
//
//   metrics_overhead [--steps 200] [--hidden 128] [--seq 128]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/clock.h"
#include "common/base/clock.h"
#include "common/cli/daemon.h"
#include "common/metrics/metrics_server.h"
#include "prometheus/registry.h"
#include "tests/testutil/subprocess.h"
#include "worker/daemon/worker_metrics.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/trainer.h"
#include "worker/metrics/rank_observability.h"
#include "worker/report/report_channel.h"

ABSL_FLAG(int, steps, 200, "Steps per side (on and off alternate).");
ABSL_FLAG(int, hidden, 128, "Hidden size of the model.");
ABSL_FLAG(int, seq, 128, "Sequence length.");
ABSL_FLAG(double, max_overhead, 0.01, "Fail when on/off - 1 is above this.");

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A 2-layer GPT that trains for as long as the bench runs, logging every 10 steps, with
// TensorBoard events in a temporary directory.
mt::v1::JobSpec BenchSpec(int hidden, int seq) {
  mt::v1::JobSpec spec;
  auto* m = spec.mutable_model();
  m->set_num_layers(2);
  m->set_hidden_size(hidden);
  m->set_num_attention_heads(4);
  m->set_seq_length(seq);
  m->set_vocab_size(1024);
  m->set_hidden_dropout(0.0);
  m->set_attention_dropout(0.0);
  auto* t = spec.mutable_training();
  t->set_micro_batch_size(4);
  t->set_global_batch_size(4);
  t->set_train_iters(1'000'000);
  t->set_lr(1e-4);
  t->set_seed(1);
  spec.mutable_evaluation()->set_eval_interval(0);
  spec.mutable_logging()->set_log_interval(10);
  spec.mutable_logging()->set_tensorboard_dir(mt::testutil::MakeTempDir("bench_tb"));
  return spec;
}

// Step times with the metrics hook (on) and without (off), alternating, and the hook's own.
struct Timings {
  std::vector<double> on;
  std::vector<double> off;
  std::vector<double> hook;
};

// Runs 2 * `steps` steps, every second one followed by the rank's metrics hook.
absl::StatusOr<Timings> Alternate(mt::engine::Trainer& tr,
                                  mt::worker::metrics::RankObservability& observability,
                                  int steps) {
  Timings t;
  for (int i = 0; i < 2 * steps; ++i) {
    const bool metrics = i % 2 == 1;
    const absl::Time start = absl::Now();
    auto step = tr.Step();
    if (!step.ok()) return step.status();
    if (metrics) {
      const absl::Time hook_start = absl::Now();
      for (const mt::parallel::CommTime& c : tr.TakeCommunication()) {
        observability.AddCommunication(c.collective, c.group, c.seconds, c.calls);
      }
      observability.OnStep(*step, step->iteration % 10 == 1, [&] { return tr.memory(); });
      t.hook.push_back(absl::ToDoubleSeconds(absl::Now() - hook_start));
    }
    (metrics ? t.on : t.off).push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  mt::cli::ParseFlags(argc, argv,
                      "What metrics cost a training step (the rank's "
                      "observability path on and off, alternating); exits 1 over --max_overhead.",
                      "metrics_overhead.cc");
  namespace engine = mt::engine;
  const int seq = absl::GetFlag(FLAGS_seq);
  const mt::v1::JobSpec spec = BenchSpec(absl::GetFlag(FLAGS_hidden), seq);
  auto source = engine::TokenSequenceSource::Create(engine::SyntheticTokens(1 << 16, 1024, 3), seq);
  if (!source.ok()) return 2;
  engine::TrainerOptions options;
  options.log_progress = false;
  auto trainer = engine::Trainer::Create(spec, options, *std::move(source), nullptr);
  if (!trainer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(trainer.status().message()).c_str());
    return 2;
  }
  engine::Trainer& tr = **trainer;

  // The daemon's side: a pipe reader feeding WorkerMetrics, and a scraper.
  mt::RealClock clock;
  auto registry = std::make_shared<prometheus::Registry>();
  mt::v1::WorkerResources resources;
  resources.set_node("bench");
  resources.set_gpu_index(-1);
  mt::worker::metrics::WorkerMetrics worker(registry.get(), resources, "bench", &clock);
  mt::v1::Assignment assignment;
  assignment.set_job_id("j-1");
  assignment.mutable_layout()->set_world_size(1);
  assignment.mutable_layout()->set_pipeline_model_parallel_size(1);
  worker.OnRankStarted(assignment);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return 2;
  auto observability = mt::worker::metrics::RankObservability::Create(
      spec, assignment, tr.plan(), mt::worker::ReportWriter(fds[1]));
  if (!observability.ok()) {
    std::fprintf(stderr, "%s\n", std::string(observability.status().message()).c_str());
    return 2;
  }
  std::thread reader([&] {
    while (true) {
      auto r = mt::worker::ReadReport(fds[0]);
      if (!r.ok() || !r->has_value()) return;
      (*r)->set_job_id("j-1");
      worker.OnRankReport(**r);
    }
  });
  std::atomic<bool> done{false};
  std::atomic<int> scrapes{0};
  std::thread scraper([&] {
    while (!done.load()) {
      (void)mt::metrics::SerializeMetrics({registry});
      scrapes.fetch_add(1);
      absl::SleepFor(absl::Milliseconds(100));
    }
  });

  for (int i = 0; i < 5; ++i) (void)tr.Step();  // warm-up
  const absl::StatusOr<Timings> timings =
      Alternate(tr, **observability, absl::GetFlag(FLAGS_steps));
  // The threads stop before any return: a joinable thread's destructor would abort.
  (*observability)->Finish(tr.memory());
  done.store(true);
  scraper.join();
  ::close(fds[1]);
  reader.join();
  ::close(fds[0]);
  if (!timings.ok()) {
    std::fprintf(stderr, "%s\n", std::string(timings.status().message()).c_str());
    return 2;
  }
  const std::vector<double>& on = timings->on;
  const std::vector<double>& off = timings->off;
  const std::vector<double>& hook = timings->hook;
  const double ratio = Median(on) / Median(off);
  double hook_total = 0;
  for (double h : hook) hook_total += h;
  const double hook_mean = hook_total / static_cast<double>(hook.size());
  std::printf(
      "metrics on/off step time ratio %.4f (median %.2f ms vs %.2f ms over %zu steps each, "
      "%d scrapes; target < %.4f)\n"
      "the hook itself: median %.1f us, mean %.1f us (preemptions included) = %.5f of a "
      "median step\n",
      ratio, 1e3 * Median(on), 1e3 * Median(off), on.size(), scrapes.load(),
      1 + absl::GetFlag(FLAGS_max_overhead), 1e6 * Median(hook), 1e6 * hook_mean,
      hook_mean / Median(off));
  return ratio <= 1 + absl::GetFlag(FLAGS_max_overhead) ? 0 : 1;
}
