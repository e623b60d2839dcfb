#include "worker/parallel/grad_reducer.h"

#include <torch/torch.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace mt::parallel {

GradReducer::GradReducer(GroupHandle dp, bool cuda, bool shard, std::vector<Range> buckets)
    : dp_(std::move(dp)), cuda_(cuda), shard_(shard), buckets_(std::move(buckets)) {}

GradReducer::Range GradReducer::Shard(int b) const {
  const Range& bucket = buckets_[b];
  if (!shard_ || dp_.size <= 1) return bucket;
  const int64_t part = bucket.size() / dp_.size;
  return Range{bucket.begin + part * dp_.rank, bucket.begin + part * (dp_.rank + 1)};
}

void GradReducer::StartReduction(int b, const at::Tensor& grads) {
  if (!dp_.active()) return;
  const Range& r = buckets_[b];
  at::Tensor bucket = grads.narrow(0, r.begin, r.size());
  if (shard_ && cuda_) {
    // NCCL reduce-scatter in place: this rank's output slice lies at rank * count in the input,
    // which is the in-place layout NCCL allows.
    const Range s = Shard(b);
    at::Tensor out = grads.narrow(0, s.begin, s.size());
    CommStats::Span span = StartComm(dp_, Collective::kReduceScatter, bucket);
    reductions_.push_back(dp_.group->_reduce_scatter_base(out, bucket));
    reduction_spans_.push_back(std::move(span));
    return;
  }
  // All-reduce. For the distributed optimizer on Gloo this stands in for a reduce-scatter
  // (Gloo in LibTorch 1.13 has none): every rank gets the whole summed bucket and uses only its
  // slice, so the numbers are exactly those of a reduce-scatter; it costs twice the traffic,
  // which on the CPU path does not matter.
  std::vector<at::Tensor> tensors = {bucket};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::SUM;
  CommStats::Span span = StartComm(dp_, Collective::kAllReduce, bucket);
  reductions_.push_back(dp_.group->allreduce(tensors, opts));
  reduction_spans_.push_back(std::move(span));
}

absl::Status GradReducer::WaitReductions() {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.swap(reductions_);
  std::vector<CommStats::Span> spans;
  spans.swap(reduction_spans_);
  for (size_t i = 0; i < works.size(); ++i) {
    MT_RETURN_IF_ERROR(Wait(works[i], "gradient reduction over DP"));
    spans[i].Finish();
  }
  return absl::OkStatus();
}

void GradReducer::StartGather(int b, const at::Tensor& params) {
  if (!dp_.active() || !shard_) return;
  const Range& r = buckets_[b];
  const Range s = Shard(b);
  at::Tensor bucket = params.narrow(0, r.begin, r.size());
  at::Tensor mine = params.narrow(0, s.begin, s.size());
  if (cuda_) {
    // In place: the input is the output's slice at rank * count (NCCL's in-place layout).
    CommStats::Span span = StartComm(dp_, Collective::kAllGather, bucket);
    gathers_.push_back({b, dp_.group->_allgather_base(bucket, mine), std::move(span)});
    return;
  }
  // Gloo: one output view per rank into the bucket (it gathers into a flat temporary and
  // copies out, so the input being one of the outputs is fine). Gloo has no bf16: a gather
  // only moves bytes, so 16-bit parameters travel as bytes, bit for bit.
  if (bucket.element_size() == 2) {
    bucket = bucket.view(at::kByte);
    mine = mine.view(at::kByte);
  }
  std::vector<std::vector<at::Tensor>> outputs(1);
  const int64_t part = bucket.numel() / dp_.size;
  for (int i = 0; i < dp_.size; ++i) outputs[0].push_back(bucket.narrow(0, part * i, part));
  std::vector<at::Tensor> inputs = {mine};
  CommStats::Span span = StartComm(dp_, Collective::kAllGather, bucket);
  gathers_.push_back({b, dp_.group->allgather(outputs, inputs), std::move(span)});
}

absl::Status GradReducer::WaitGathers() {
  std::vector<Gather> works;
  works.swap(gathers_);
  for (Gather& g : works) {
    MT_RETURN_IF_ERROR(Wait(g.work, "parameter all-gather over DP"));
    g.span.Finish();
  }
  return absl::OkStatus();
}

absl::Status GradReducer::WaitGather(int b) {
  for (auto it = gathers_.begin(); it != gathers_.end(); ++it) {
    if (it->bucket != b) continue;
    Gather g = std::move(*it);
    gathers_.erase(it);
    MT_RETURN_IF_ERROR(
        Wait(g.work, absl::StrCat("parameter all-gather of bucket ", b, " over DP")));
    g.span.Finish();
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace mt::parallel
