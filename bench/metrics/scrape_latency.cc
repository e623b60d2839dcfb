// How long a Prometheus scrape of a worker daemon takes with ~1,000 series: the worker's own
// families with a rank's series (WorkerMetrics, fed one telemetry) plus enough per-rank gauges
// to reach the count, served by the real endpoint (MetricsServer) and fetched over loopback
// HTTP, as Prometheus does. Prints p50/p99/max; exits 1 when p99 is over --max_p99 (10 ms).
//
//   scrape_latency [--series 1000] [--scrapes 300] [--max_p99 10ms]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/clock.h"
#include "common/cli/daemon.h"
#include "common/metrics/metrics_server.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "tests/testutil/http.h"
#include "worker/daemon/worker_metrics.h"

ABSL_FLAG(int, series, 1000, "Series on the endpoint (at least the worker's own).");
ABSL_FLAG(int, scrapes, 300, "Scrapes to time.");
ABSL_FLAG(absl::Duration, max_p99, absl::Milliseconds(10), "Fail above this p99.");

int main(int argc, char** argv) {
  mt::cli::ParseFlags(argc, argv,
                      "How long a Prometheus scrape of a worker daemon with ~1,000 "
                      "series takes; exits 1 when p99 is over --max_p99.",
                      "scrape_latency.cc");
  mt::RealClock clock;
  auto registry = std::make_shared<prometheus::Registry>();
  mt::v1::WorkerResources resources;
  resources.set_node("bench-node");
  resources.set_gpu_index(0);
  resources.set_device_name("NVIDIA H200");
  mt::worker::metrics::WorkerMetrics worker(registry.get(), resources, "bench", &clock);
  mt::v1::Assignment a;
  a.set_job_id("j-1");
  a.mutable_coordinates()->set_rank(3);
  worker.OnRankStarted(a);
  mt::v1::RankReport report;
  report.set_job_id("j-1");
  report.set_rank(3);
  auto* t = report.mutable_telemetry();
  t->set_step(100);
  t->set_loss(3.2);
  for (int i = 0; i < 100; ++i) t->add_step_seconds(0.1 + 0.001 * i);
  worker.OnRankReport(report);

  auto count = [&] {
    int n = 0;
    for (absl::string_view line : absl::StrSplit(mt::metrics::SerializeMetrics({registry}), '\n')) {
      n += !line.empty() && line[0] != '#';
    }
    return n;
  };
  const int own = count();
  auto& filler = prometheus::BuildGauge()
                     .Name("mt_bench_rank_value")
                     .Help("Filler series of the benchmark, shaped like rank series.")
                     .Register(*registry);
  for (int i = 0; own + i < absl::GetFlag(FLAGS_series); ++i) {
    filler
        .Add({{"job", absl::StrCat("j-", i / 100)},
              {"rank", absl::StrCat(i % 100)},
              {"tp", "0"},
              {"pp", "0"},
              {"dp", absl::StrCat(i % 100)},
              {"node", "bench-node"},
              {"gpu", "0"}})
        .Set(i);
  }
  const int series = count();
  auto server = mt::metrics::MetricsServer::Start(mt::metrics::MetricsServerOptions(), {registry});
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", std::string(server.status().message()).c_str());
    return 2;
  }
  std::vector<double> ms;
  size_t bytes = 0;
  for (int i = 0; i < absl::GetFlag(FLAGS_scrapes) + 10; ++i) {
    const absl::Time start = absl::Now();
    auto r = mt::testutil::HttpGet((*server)->address(), "/metrics");
    const double elapsed = absl::ToDoubleMilliseconds(absl::Now() - start);
    if (!r.ok() || r->status != 200) {
      std::fprintf(stderr, "scrape failed\n");
      return 2;
    }
    bytes = r->body.size();
    if (i >= 10) ms.push_back(elapsed);  // the first few warm the server's threads
  }
  std::sort(ms.begin(), ms.end());
  const double p50 = ms[ms.size() / 2];
  const double p99 = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  const double limit = absl::ToDoubleMilliseconds(absl::GetFlag(FLAGS_max_p99));
  std::printf(
      "scrape of %d series (%zu bytes, %d of them the worker's own): p50 %.3f ms, p99 %.3f ms, "
      "max %.3f ms over %zu scrapes; p99 / limit %.3f (limit %.1f ms)\n",
      series, bytes, own, p50, p99, ms.back(), ms.size(), p99 / limit, limit);
  return p99 <= limit ? 0 : 1;
}
