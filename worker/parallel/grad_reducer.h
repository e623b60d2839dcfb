// Data-parallel reduction of one flat gradient buffer, bucket by bucket, and the all-gather of
// parameter shards after a distributed-optimizer step (Megatron-core's ParamAndGradBuffer
// buckets). The optimizer (worker/engine/optimizer.h) owns the buffers and decides when a
// bucket is ready; this class only runs the c10d collectives over the DP group, in place.
//
// Buckets tile the flat buffers: [begin, end) in elements. Without sharding a bucket is
// all-reduced (SUM). With sharding (the distributed optimizer, ZeRO-1) every bucket's length
// is a multiple of the DP size, DP rank r owns the r-th of its dp equal slices, and a
// reduction leaves only that slice summed (reduce-scatter); StartGather later fills the rest
// of the bucket of the parameter buffer from the other ranks' slices (all-gather).
//
// Every rank must start the same buckets in the same order (c10d matches collectives by
// order). Collectives are asynchronous: Start* returns once the collective is queued (NCCL:
// on its stream; Gloo: on its worker thread) and Wait* makes the caller's stream (NCCL) or
// thread (Gloo) wait. Nothing touches a bucket's memory between its Start and Wait but the
// collective. The sums are not divided by the DP size: the optimizer folds 1/dp into its
// unscale factor, which saves a pass over the buffer.
//
// This header includes c10d (through process_groups.h): LibTorch translation units only.
// Thread-compatible; Start may run on an autograd thread while the training thread is blocked
// in backward(), which is what the optimizer's gradient hooks do.
#ifndef MT_WORKER_PARALLEL_GRAD_REDUCER_H_
#define MT_WORKER_PARALLEL_GRAD_REDUCER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "worker/parallel/process_groups.h"

namespace mt::parallel {

class GradReducer {
 public:
  struct Range {
    int64_t begin = 0;
    int64_t end = 0;
    int64_t size() const { return end - begin; }
  };

  // `dp` is this rank's DP group (a group of one reduces nothing); `cuda` selects NCCL's
  // reduce-scatter/all-gather, otherwise Gloo's all-reduce/all-gather.
  GradReducer(GroupHandle dp, bool cuda, bool shard, std::vector<Range> buckets);

  int dp_size() const { return dp_.size; }
  int dp_rank() const { return dp_.rank; }
  bool shard() const { return shard_; }
  bool active() const { return dp_.active(); }
  const std::vector<Range>& buckets() const { return buckets_; }
  // This rank's slice of bucket `b` (the whole bucket without sharding).
  Range Shard(int b) const;

  // Starts the SUM reduction of bucket `b` of `grads` (a flat buffer). Throws c10::Error
  // when c10d cannot queue it.
  void StartReduction(int b, const at::Tensor& grads);
  // Waits for every started reduction.
  absl::Status WaitReductions();
  // Starts the all-gather of bucket `b` of `params` from every rank's shard (sharding only).
  void StartGather(int b, const at::Tensor& params);
  // Waits for every started gather, or for bucket `b`'s only (a no-op when it has none
  // pending): the forward waits bucket by bucket (overlap_param_gather).
  absl::Status WaitGathers();
  absl::Status WaitGather(int b);
  bool gathers_pending() const { return !gathers_.empty(); }
  size_t num_gathers_pending() const { return gathers_.size(); }

 private:
  GroupHandle dp_;
  bool cuda_;
  bool shard_;
  std::vector<Range> buckets_;
  std::vector<c10::intrusive_ptr<c10d::Work>> reductions_;
  // A started parameter all-gather: its bucket, its work and its timing (comm_stats.h).
  struct Gather {
    int bucket;
    c10::intrusive_ptr<c10d::Work> work;
    CommStats::Span span;
  };
  std::vector<Gather> gathers_;
  // The timing of each started reduction (comm_stats.h), beside its work.
  std::vector<CommStats::Span> reduction_spans_;
};

}  // namespace mt::parallel

#endif  // MT_WORKER_PARALLEL_GRAD_REDUCER_H_
