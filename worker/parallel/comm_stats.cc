#include "worker/parallel/comm_stats.h"

#include <algorithm>
#include <utility>

#if MT_COMM_STATS_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <map>
#endif

namespace mt::parallel {
namespace {

// Finished CUDA spans beyond this many are resolved as they finish (completed ones only), so
// that a long logging interval does not grow the pending list without bound.
constexpr size_t kResolveAbove = 4096;

}  // namespace

absl::string_view CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kSend:
      return "send";
    case Collective::kRecv:
      return "recv";
  }
  return "other";
}

absl::string_view CommGroupName(CommGroup g) {
  switch (g) {
    case CommGroup::kWorld:
      return "world";
    case CommGroup::kTp:
      return "tp";
    case CommGroup::kPp:
      return "pp";
    case CommGroup::kDp:
      return "dp";
    case CommGroup::kEmbedding:
      return "embedding";
    case CommGroup::kModelParallel:
      return "model_parallel";
  }
  return "other";
}

// A pool of timing events (cudaEventDefault: timing on), reused across spans.
struct CommStats::CudaEvents {
#if MT_COMM_STATS_WITH_CUDA
  struct Event {
    cudaEvent_t event = nullptr;
    int device = 0;
  };
  std::vector<Event> events;
  std::map<int, std::vector<int>> free;  // by device

  ~CudaEvents() {
    for (const Event& e : events) {
      c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(e.device));
      (void)cudaEventDestroy(e.event);
    }
  }

  int Acquire(int device) {
    std::vector<int>& f = free[device];
    if (!f.empty()) {
      const int i = f.back();
      f.pop_back();
      return i;
    }
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    Event e;
    e.device = device;
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&e.event, cudaEventDefault));
    events.push_back(e);
    return static_cast<int>(events.size()) - 1;
  }

  void Release(int i) { free[events[i].device].push_back(i); }

  // On the current stream of the event's device.
  void Record(int i) {
    const Event& e = events[i];
    const auto device = static_cast<c10::DeviceIndex>(e.device);
    c10::cuda::CUDAGuard guard(device);
    C10_CUDA_CHECK(cudaEventRecord(e.event, c10::cuda::getCurrentCUDAStream(device).stream()));
  }

  // 1: done, 0: not yet, -1: failed (the span is dropped).
  int Query(int i) const {
    const cudaError_t err = cudaEventQuery(events[i].event);
    if (err == cudaSuccess) return 1;
    (void)cudaGetLastError();  // not sticky: clear it for LibTorch's own checks
    return err == cudaErrorNotReady ? 0 : -1;
  }

  // Seconds from one completed event to another (negative when `to` came first); false on
  // failure.
  bool Elapsed(int from, int to, double* seconds) const {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, events[from].event, events[to].event) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    *seconds = static_cast<double>(ms) * 1e-3;
    return true;
  }
#endif
};

CommStats::Span& CommStats::Span::operator=(Span&& other) noexcept {
  if (this != &other) {
    if (stats_ != nullptr) stats_->Drop(this);
    stats_ = std::exchange(other.stats_, nullptr);
    collective_ = other.collective_;
    group_ = other.group_;
    start_ = other.start_;
    event_ = std::exchange(other.event_, -1);
  }
  return *this;
}

CommStats::Span::~Span() {
  if (stats_ != nullptr) stats_->Drop(this);
}

void CommStats::Span::Finish() {
  if (stats_ == nullptr) return;
  stats_->Finish(this);
  stats_ = nullptr;
  event_ = -1;
}

CommStats::CommStats() = default;
CommStats::~CommStats() = default;

CommStats::Span CommStats::Start(Collective collective, CommGroup group, int cuda_device) {
  Span s;
  s.stats_ = this;
  s.collective_ = collective;
  s.group_ = group;
#if MT_COMM_STATS_WITH_CUDA
  if (cuda_device >= 0) {
    absl::MutexLock lock(&mu_);
    if (events_ == nullptr) events_ = std::make_unique<CudaEvents>();
    const int e = events_->Acquire(cuda_device);
    events_->Record(e);
    s.event_ = e;
    return s;
  }
#else
  (void)cuda_device;
#endif
  s.start_ = std::chrono::steady_clock::now();
  return s;
}

void CommStats::Finish(Span* span) {
  if (span->event_ < 0) {
    const auto now = std::chrono::steady_clock::now();
    absl::MutexLock lock(&mu_);
    auto& last_end = last_end_[static_cast<int>(span->group_)];
    // In flight together with the group's previous op: only the time after it counts.
    const auto from = std::max(span->start_, last_end);
    AddLocked(span->collective_, span->group_,
              std::max(0.0, std::chrono::duration<double>(now - from).count()));
    last_end = std::max(last_end, now);
    return;
  }
#if MT_COMM_STATS_WITH_CUDA
  absl::MutexLock lock(&mu_);
  const int end = events_->Acquire(events_->events[span->event_].device);
  events_->Record(end);
  pending_.push_back(Pending{span->collective_, span->group_, span->event_, end});
  if (pending_.size() > kResolveAbove) ResolveLocked();
#endif
}

void CommStats::Drop(Span* span) {
#if MT_COMM_STATS_WITH_CUDA
  if (span->event_ >= 0) {
    absl::MutexLock lock(&mu_);
    events_->Release(span->event_);
  }
#endif
  span->stats_ = nullptr;
  span->event_ = -1;
}

void CommStats::AddLocked(Collective c, CommGroup g, double seconds) {
  seconds_[static_cast<int>(c)][static_cast<int>(g)] += seconds;
  calls_[static_cast<int>(c)][static_cast<int>(g)] += 1;
}

void CommStats::ResolveLocked() {
#if MT_COMM_STATS_WITH_CUDA
  // In finish order, per group: a group's spans resolve only up to its first one still
  // running (the next span's overlap with it needs its end).
  bool blocked[kNumCommGroups] = {};
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    const Pending p = pending_[i];
    const int g = static_cast<int>(p.group);
    const int done = blocked[g] ? 0 : events_->Query(p.end);
    if (done == 0) {
      blocked[g] = true;
      pending_[kept++] = p;
      continue;
    }
    // The end event follows the start event on one stream: both are complete.
    double seconds = 0;
    bool ok = done > 0 && events_->Elapsed(p.start, p.end, &seconds);
    int& last = last_end_event_[g];
    double after_last = 0;  // from the group's previous end to this span's end
    const bool have_last = ok && last >= 0 && events_->Elapsed(last, p.end, &after_last);
    if (have_last) {
      double gap = 0;  // from the previous end to this start: < 0 while it was in flight
      if (events_->Elapsed(last, p.start, &gap) && gap < 0) seconds = std::max(0.0, after_last);
    }
    if (ok) AddLocked(p.collective, p.group, seconds);
    events_->Release(p.start);
    if (ok && (last < 0 || (have_last && after_last >= 0))) {
      if (last >= 0) events_->Release(last);
      last = p.end;  // the group's latest end
    } else {
      events_->Release(p.end);
    }
  }
  pending_.resize(kept);
#endif
}

void CommStats::ResolveCompleted() {
  absl::MutexLock lock(&mu_);
  if (!pending_.empty()) ResolveLocked();
}

int64_t CommStats::pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(pending_.size());
}

std::vector<CommTime> CommStats::Take() {
  std::vector<CommTime> out;
  absl::MutexLock lock(&mu_);
  for (int c = 0; c < kNumCollectives; ++c) {
    for (int g = 0; g < kNumCommGroups; ++g) {
      if (calls_[c][g] == 0) continue;
      CommTime t;
      t.collective = std::string(CollectiveName(static_cast<Collective>(c)));
      t.group = std::string(CommGroupName(static_cast<CommGroup>(g)));
      t.seconds = seconds_[c][g];
      t.calls = calls_[c][g];
      out.push_back(std::move(t));
      seconds_[c][g] = 0.0;
      calls_[c][g] = 0;
    }
  }
  return out;
}

}  // namespace mt::parallel
