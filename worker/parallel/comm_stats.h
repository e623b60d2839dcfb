// Time a rank spends in communication, by collective and process group (DESIGN.md §7,
// docs/metrics.md): every collective call site of the step (worker/parallel: the DP gradient
// buckets and parameter all-gathers, the tensor-parallel mappings and vocabulary-parallel
// cross entropy, pipeline send/recv and the loss broadcast, the tied-embedding and
// global-norm all-reduces, the scalar reductions of dist.h) times its op into the CommStats of
// its group (GroupHandle::comm_stats, process_groups.h). ProcessGroups owns one per rank and
// hands it to every group it builds; the trainer takes what was recorded since the last take
// (Trainer::TakeCommunication) for the rank's telemetry.
//
// What a span measures:
//   - host (Gloo, CPU tensors): wall time from issuing the op to the return of its wait;
//   - CUDA (NCCL): a CUDA event on the tensor's device's current stream before the op is
//     issued and another after its wait made that stream wait for NCCL; the time between them
//     is resolved later, only for events that have completed (ResolveCompleted, which the
//     trainer calls where it already synchronised with the device: never a sync of its own).
// A span covers the op's whole duration, including time overlapped with compute (a bucket's
// all-reduce during backward). Ops in flight together on one group (the DP buckets, a send and
// a receive posted together) count their union once, the time the group was busy: a span that
// starts while an earlier-finished one of its group was still in flight counts from that
// one's end. So the seconds of one group never exceed the wall time they span. Events are
// pooled per device; a failed op's span is dropped, not counted.
//
// No LibTorch in this header. Thread-safe: spans start and finish on autograd threads as well
// as on the training thread. A Span is a movable value used by one thread at a time.
#ifndef MT_WORKER_PARALLEL_COMM_STATS_H_
#define MT_WORKER_PARALLEL_COMM_STATS_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace mt::parallel {

// The op, as c10d ran it: a Gloo stand-in is named for what it is (Gloo's reduce-scatter is
// an all-reduce). Names: "all_reduce", "all_gather", "reduce_scatter", "broadcast", "send",
// "recv".
enum class Collective : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kSend,
  kRecv
};
inline constexpr int kNumCollectives = 6;
// The group kinds of ProcessGroups: "world", "tp", "pp", "dp", "embedding", "model_parallel".
enum class CommGroup : uint8_t { kWorld, kTp, kPp, kDp, kEmbedding, kModelParallel };
inline constexpr int kNumCommGroups = 6;

absl::string_view CollectiveName(Collective c);
absl::string_view CommGroupName(CommGroup g);

// What one (collective, group) took since the last Take.
struct CommTime {
  std::string collective;  // CollectiveName
  std::string group;       // CommGroupName
  double seconds = 0.0;
  int64_t calls = 0;
};

class CommStats {
 public:
  // Timing of one op: Start before issuing it, Finish once its wait returned. A default or
  // moved-from span records nothing; one destroyed unfinished (the op failed) is dropped.
  class Span {
   public:
    Span() = default;
    Span(Span&& other) noexcept { *this = std::move(other); }
    Span& operator=(Span&& other) noexcept;
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;
    ~Span();
    // Records the op (once; later calls do nothing).
    void Finish();

   private:
    friend class CommStats;
    CommStats* stats_ = nullptr;
    Collective collective_ = Collective::kAllReduce;
    CommGroup group_ = CommGroup::kWorld;
    std::chrono::steady_clock::time_point start_;
    int event_ = -1;  // CUDA: index of the start event in stats_'s pool; -1 = host timing
  };

  CommStats();
  ~CommStats();
  CommStats(const CommStats&) = delete;
  CommStats& operator=(const CommStats&) = delete;

  // `cuda_device` >= 0: the op's tensors are on that CUDA device (NCCL): timed with CUDA
  // events on its current stream (in a build with CUDA; host time otherwise).
  Span Start(Collective collective, CommGroup group, int cuda_device = -1);

  // Everything resolved since the last Take, one entry per (collective, group) that ran, in
  // enum order. CUDA spans count once their events were resolved (ResolveCompleted).
  std::vector<CommTime> Take();
  // Resolves the CUDA spans whose events have completed (cudaEventQuery: never waits); the
  // others stay pending. Call right after a synchronisation with the device.
  void ResolveCompleted();
  // CUDA spans finished but not resolved yet.
  int64_t pending() const;

 private:
  struct Pending {
    Collective collective;
    CommGroup group;
    int start;  // event indices in the pool
    int end;
  };
  struct CudaEvents;  // the pool (comm_stats.cc)

  void Finish(Span* span);
  void Drop(Span* span);
  void AddLocked(Collective c, CommGroup g, double seconds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ResolveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  double seconds_[kNumCollectives][kNumCommGroups] ABSL_GUARDED_BY(mu_) = {};
  int64_t calls_[kNumCollectives][kNumCommGroups] ABSL_GUARDED_BY(mu_) = {};
  // Per group: when its latest op finished (host), or that op's end event (CUDA; -1: none).
  std::chrono::steady_clock::time_point last_end_[kNumCommGroups] ABSL_GUARDED_BY(mu_) = {};
  int last_end_event_[kNumCommGroups] ABSL_GUARDED_BY(mu_) = {-1, -1, -1, -1, -1, -1};
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<CudaEvents> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mt::parallel

#endif  // MT_WORKER_PARALLEL_COMM_STATS_H_
