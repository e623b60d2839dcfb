#include "bench/profile/kernel_profile.h"

#include <torch/cuda.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "bench/profile/gpu_timeline.h"

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#define MT_HAVE_KINETO 1
#else
#define MT_HAVE_KINETO 0
#endif

namespace mt::bench {
namespace {

struct KernelTotal {
  double ns = 0;
  int64_t calls = 0;
};

// The kernels by total time; a share is of all kernels' time (`kernel_ns`).
[[maybe_unused]] void PrintTop(const std::map<std::string, KernelTotal>& totals, double kernel_ns,
                               const KernelProfileOptions& o) {
  std::vector<std::pair<std::string, KernelTotal>> rows(totals.begin(), totals.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  std::printf("%8s %6s %6s  %s\n", ("ms/" + o.unit).c_str(), "share", "calls", "kernel");
  for (int i = 0; i < o.top && i < static_cast<int>(rows.size()); ++i) {
    const KernelTotal& k = rows[i].second;
    std::string name = rows[i].first;
    if (name.size() > 140) name = name.substr(0, 137) + "...";
    std::printf("%8.3f %5.1f%% %6.1f  %s\n", k.ns / 1e6 / o.units, 100.0 * k.ns / kernel_ns,
                static_cast<double>(k.calls) / o.units, name.c_str());
  }
}

[[maybe_unused]] std::string Short(std::string name) {
  return name.size() > 60 ? name.substr(0, 57) + "..." : name;
}

// Where the GPU idles (gpu_timeline.h): launch spacing, stalls, and the largest stalls with the
// kernel before each.
[[maybe_unused]] void PrintGaps(const GpuTimeline& t, const std::vector<std::string>& names,
                                const KernelProfileOptions& o) {
  std::printf(
      "GPU idle per %s: %.3f ms between kernels (%.1f gaps of %.2f us on average), %.3f ms in "
      "%.1f stalls of 10 us or more\n",
      o.unit.c_str(), static_cast<double>(t.spacing_ns) / 1e6 / o.units,
      static_cast<double>(t.spacing_gaps) / o.units,
      t.spacing_gaps > 0 ? static_cast<double>(t.spacing_ns) / 1e3 / t.spacing_gaps : 0.0,
      static_cast<double>(t.stall_ns) / 1e6 / o.units,
      static_cast<double>(t.stalls.size()) / o.units);
  for (size_t i = 0; i < t.stalls.size() && i < 10; ++i) {
    std::printf("  stall %8.1f us after %s\n", static_cast<double>(t.stalls[i].ns) / 1e3,
                Short(names[t.stalls[i].after]).c_str());
  }
}

}  // namespace

bool ProfileKernels(const std::function<void()>& body, const KernelProfileOptions& o) {
#if MT_HAVE_KINETO
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  const std::set<ActivityType> activities{ActivityType::CPU, ActivityType::CUDA};
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  const auto t0 = std::chrono::steady_clock::now();
  body();
  torch::cuda::synchronize();
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  std::map<std::string, KernelTotal> totals;
  std::vector<GpuInterval> intervals;
  std::vector<std::string> names;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    const auto start = static_cast<int64_t>(e.startNs());
    intervals.push_back({start, start + static_cast<int64_t>(e.durationNs())});
    names.push_back(std::string(e.name()));
    KernelTotal& k = totals[names.back()];
    k.ns += static_cast<double>(e.durationNs());
    k.calls += 1;
  }
  const GpuTimeline t = MeasureTimeline(intervals);
  const double busy_ms = static_cast<double>(t.busy_ns) / 1e6;
  std::printf(
      "%ss profiled: %d; wall %.3f ms/%s; GPU busy %.3f ms/%s (%.1f%%); kernels %.3f ms/%s "
      "(their sum: more than busy where they overlap)\n",
      o.unit.c_str(), o.units, wall_ms / o.units, o.unit.c_str(), busy_ms / o.units, o.unit.c_str(),
      100.0 * busy_ms / wall_ms, static_cast<double>(t.kernel_ns) / 1e6 / o.units, o.unit.c_str());
  PrintGaps(t, names, o);
  PrintTop(totals, static_cast<double>(t.kernel_ns), o);
  if (!o.trace.empty()) result->save(o.trace);
  return true;
#else
  (void)body;
  std::fprintf(stderr, "profiling needs LibTorch >= 2.0 (Kineto); this is %s\n", TORCH_VERSION);
  return false;
#endif
}

}  // namespace mt::bench
