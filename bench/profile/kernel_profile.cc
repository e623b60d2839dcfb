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

[[maybe_unused]] void PrintTop(const std::map<std::string, KernelTotal>& totals, double busy_ns,
                               const KernelProfileOptions& o) {
  std::vector<std::pair<std::string, KernelTotal>> rows(totals.begin(), totals.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  std::printf("%8s %6s %6s  %s\n", ("ms/" + o.unit).c_str(), "share", "calls", "kernel");
  for (int i = 0; i < o.top && i < static_cast<int>(rows.size()); ++i) {
    const KernelTotal& k = rows[i].second;
    std::string name = rows[i].first;
    if (name.size() > 140) name = name.substr(0, 137) + "...";
    std::printf("%8.3f %5.1f%% %6.1f  %s\n", k.ns / 1e6 / o.units, 100.0 * k.ns / busy_ns,
                static_cast<double>(k.calls) / o.units, name.c_str());
  }
}

// Where the GPU idles: the gaps between one kernel's end (the latest end so far, for kernels that
// overlap) and the next kernel's start, split into launch spacing (< 10 us, what a queue that is
// ahead of the GPU still costs between kernels) and stalls (>= 10 us: the host was behind), with
// the largest stalls and the kernels on either side of them.
struct GpuEvent {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  std::string name;
};

[[maybe_unused]] std::string Short(std::string name) {
  return name.size() > 60 ? name.substr(0, 57) + "..." : name;
}

[[maybe_unused]] void PrintGaps(std::vector<GpuEvent> events, const KernelProfileOptions& o) {
  if (events.size() < 2) return;
  std::sort(events.begin(), events.end(),
            [](const GpuEvent& a, const GpuEvent& b) { return a.start_ns < b.start_ns; });
  constexpr int64_t kStallNs = 10'000;
  struct Stall {
    int64_t ns;
    size_t after;
  };
  std::vector<Stall> stalls;
  double spacing_ns = 0, stall_ns = 0;
  int64_t spacing_count = 0;
  int64_t end = events[0].end_ns;
  size_t last = 0;
  for (size_t i = 1; i < events.size(); ++i) {
    const int64_t gap = events[i].start_ns - end;
    if (gap > 0 && gap < kStallNs) {
      spacing_ns += static_cast<double>(gap);
      ++spacing_count;
    } else if (gap >= kStallNs) {
      stall_ns += static_cast<double>(gap);
      stalls.push_back({gap, last});
    }
    if (events[i].end_ns > end) {
      end = events[i].end_ns;
      last = i;
    }
  }
  std::printf(
      "GPU idle per %s: %.3f ms between kernels (%.1f gaps of %.2f us on average), %.3f ms in "
      "%.1f stalls of 10 us or more\n",
      o.unit.c_str(), spacing_ns / 1e6 / o.units, static_cast<double>(spacing_count) / o.units,
      spacing_count > 0 ? spacing_ns / 1e3 / static_cast<double>(spacing_count) : 0.0,
      stall_ns / 1e6 / o.units, static_cast<double>(stalls.size()) / o.units);
  std::sort(stalls.begin(), stalls.end(),
            [](const Stall& a, const Stall& b) { return a.ns > b.ns; });
  for (size_t i = 0; i < stalls.size() && i < 10; ++i) {
    const Stall& st = stalls[i];
    std::printf("  stall %8.1f us after %s\n", static_cast<double>(st.ns) / 1e3,
                Short(events[st.after].name).c_str());
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
  double busy_ns = 0;
  std::vector<GpuEvent> events;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    const auto start = static_cast<int64_t>(e.startNs());
    events.push_back({start, start + static_cast<int64_t>(e.durationNs()), std::string(e.name())});
    KernelTotal& k = totals[std::string(e.name())];
    k.ns += static_cast<double>(e.durationNs());
    k.calls += 1;
    busy_ns += static_cast<double>(e.durationNs());
  }
  std::printf("%ss profiled: %d; wall %.3f ms/%s; GPU busy %.3f ms/%s (%.1f%%)\n", o.unit.c_str(),
              o.units, wall_ms / o.units, o.unit.c_str(), busy_ns / 1e6 / o.units, o.unit.c_str(),
              100.0 * busy_ns / 1e6 / wall_ms);
  PrintGaps(std::move(events), o);
  PrintTop(totals, busy_ns, o);
  if (!o.trace.empty()) result->save(o.trace);
  return true;
#else
  (void)body;
  std::fprintf(stderr, "profiling needs LibTorch >= 2.0 (Kineto); this is %s\n", TORCH_VERSION);
  return false;
#endif
}

}  // namespace mt::bench
