#include "worker/parallel/pipeline.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/durations.h"
#include "common/base/status_macros.h"

namespace mt::parallel {
namespace {

using Clock = std::chrono::steady_clock;

// Gloo matches by (peer, tag); NCCL ignores tags and matches in order, which the schedule's
// canonical batch order makes consistent (pipeline_schedule.h).
constexpr int kActivationTag = 0;
constexpr int kGradientTag = 1;

std::string ShapeString(at::IntArrayRef shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status FromException(const std::exception& e, const std::string& what) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return absl::InternalError(absl::StrCat(what, ": ", c10_error->what_without_backtrace()));
  }
  return absl::InternalError(absl::StrCat(what, ": ", e.what()));
}

}  // namespace

struct PipelineExecutor::Batch {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<at::Tensor> sent;  // alive until the sends complete
  // The timing of each send/recv (comm_stats.h) by its work in `works` (-1: the batch's).
  std::vector<std::pair<int, CommStats::Span>> spans;
  bool done = false;

  // Finishes the spans of works[work], or every span left when work < 0.
  void FinishSpans(int work) {
    for (auto& [w, span] : spans) {
      if (work < 0 || w == work) span.Finish();
    }
  }
};

PipelineExecutor::PipelineExecutor(const GroupHandle& pp, const PipelineConfig& config)
    : pp_(pp), config_(config), stage_(pp.rank), num_stages_(pp.size) {}

absl::StatusOr<std::unique_ptr<PipelineExecutor>> PipelineExecutor::Create(
    const GroupHandle& pp, const PipelineConfig& config) {
  if (!pp.member() || pp.size < 1) {
    return absl::InvalidArgumentError("this rank is in no pipeline group");
  }
  if (pp.size > 1 && pp.group == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline group ", pp.name, " of ", pp.size, " ranks has no communicator"));
  }
  PipelineScheduleSpec spec{pp.size, config.num_micro_batches, config.num_chunks, false};
  MT_RETURN_IF_ERROR(ValidateScheduleSpec(spec));
  if (pp.size > 1 && config.activation_shape.empty()) {
    return absl::InvalidArgumentError("the pipeline needs the activation shape");
  }
  std::unique_ptr<PipelineExecutor> e(new PipelineExecutor(pp, config));
  MT_RETURN_IF_ERROR(e->Table(config.num_micro_batches, /*forward_only=*/false).status());
  return e;
}

absl::StatusOr<const std::vector<PipelineAction>*> PipelineExecutor::Table(int num_micro_batches,
                                                                           bool forward_only) {
  const auto key = std::make_pair(num_micro_batches, forward_only);
  auto it = tables_.find(key);
  if (it == tables_.end()) {
    PipelineScheduleSpec spec{num_stages_, num_micro_batches, config_.num_chunks, forward_only};
    MT_ASSIGN_OR_RETURN(std::vector<PipelineAction> table, StageSchedule(spec, stage_));
    it = tables_.emplace(key, std::move(table)).first;
  }
  return &it->second;
}

at::Tensor PipelineExecutor::NewBuffer() const {
  return at::empty(config_.activation_shape,
                   at::TensorOptions().dtype(config_.activation_dtype).device(config_.device));
}

absl::Status PipelineExecutor::Post(const std::vector<P2POp>& ops,
                                    std::map<Key, at::Tensor>* to_send_activation,
                                    std::map<Key, at::Tensor>* to_send_gradient) {
  const Clock::time_point start = Clock::now();
  auto batch = std::make_shared<Batch>();
  // One NCCL group per batch (batch_isend_irecv): its sends and receives progress together.
  const bool coalesce = pp_.group->getBackendName() == "nccl" && ops.size() > 1;
  try {
    if (coalesce) pp_.group->startCoalescing();
    for (const P2POp& op : ops) {
      const Key key{op.micro_batch, op.chunk};
      const int tag = op.is_activation() ? kActivationTag : kGradientTag;
      const char* what = op.is_activation() ? "activation" : "gradient";
      c10::intrusive_ptr<c10d::Work> work;
      CommStats::Span span;
      if (op.is_send()) {
        auto* from = op.is_activation() ? to_send_activation : to_send_gradient;
        auto it = from->find(key);
        if (it == from->end() || !it->second.defined()) {
          return absl::InternalError(absl::StrCat("pipeline stage ", stage_, ": no ", what,
                                                  " of micro-batch ", op.micro_batch, " chunk ",
                                                  op.chunk, " to send"));
        }
        at::Tensor t = it->second.detach().contiguous();
        from->erase(it);
        if (t.sizes() != at::IntArrayRef(config_.activation_shape) ||
            t.scalar_type() != config_.activation_dtype) {
          return absl::InternalError(absl::StrCat(
              "pipeline stage ", stage_, " sends a ", what, " of shape ", ShapeString(t.sizes()),
              " ", c10::toString(t.scalar_type()), "; the pipeline carries ",
              ShapeString(config_.activation_shape), " ", c10::toString(config_.activation_dtype)));
        }
        std::vector<at::Tensor> v{t};
        span = StartComm(pp_, Collective::kSend, t);
        work = pp_.group->send(v, op.peer, tag);
        batch->sent.push_back(t);
      } else {
        at::Tensor buffer = NewBuffer();
        std::vector<at::Tensor> v{buffer};
        span = StartComm(pp_, Collective::kRecv, buffer);
        work = pp_.group->recv(v, op.peer, tag);
        auto& into = op.is_activation() ? activations_in_ : gradients_in_;
        if (into.count(key)) {
          return absl::InternalError(absl::StrCat("pipeline stage ", stage_, " receives the ", what,
                                                  " of micro-batch ", op.micro_batch, " chunk ",
                                                  op.chunk, " twice"));
        }
        // Within an NCCL group only the group's work is waited for.
        into[key] =
            Received{buffer, coalesce || !work ? -1 : static_cast<int>(batch->works.size()), batch};
      }
      if (work) batch->works.push_back(work);
      batch->spans.emplace_back(work ? static_cast<int>(batch->works.size()) - 1 : -1,
                                std::move(span));
    }
    if (coalesce) {
#if TORCH_VERSION_MAJOR >= 2
      c10::intrusive_ptr<c10d::Work> group_work = pp_.group->endCoalescing();
      if (group_work) batch->works.push_back(group_work);
#else
      pp_.group->endCoalescing(batch->works);
#endif
    }
  } catch (const std::exception& e) {
    return FromException(e, absl::StrCat("pipeline stage ", stage_, " posting send/recv"));
  }
  outstanding_.push_back(batch);
  p2p_seconds_ += SecondsSince(start);
  if (!config_.overlap_p2p_comm) return WaitBatch(batch);
  return absl::OkStatus();
}

absl::Status PipelineExecutor::WaitBatch(const std::shared_ptr<Batch>& batch) {
  if (batch->done) return absl::OkStatus();
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < batch->works.size(); ++i) {
    auto& work = batch->works[i];
    if (!work) continue;
    MT_RETURN_IF_ERROR(Wait(work, absl::StrCat("pipeline send/recv on ", pp_.name)));
    work.reset();
    batch->FinishSpans(static_cast<int>(i));
  }
  batch->FinishSpans(-1);
  batch->done = true;
  batch->sent.clear();
  p2p_seconds_ += SecondsSince(start);
  return absl::OkStatus();
}

absl::Status PipelineExecutor::WaitAll() {
  for (const auto& batch : outstanding_) MT_RETURN_IF_ERROR(WaitBatch(batch));
  outstanding_.clear();
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> PipelineExecutor::TakeReceived(std::map<Key, Received>* from,
                                                          const Key& key, const char* what) {
  auto it = from->find(key);
  if (it == from->end()) {
    return absl::InternalError(absl::StrCat("pipeline stage ", stage_, " has no ", what,
                                            " for micro-batch ", key.first, " chunk ", key.second));
  }
  Received r = std::move(it->second);
  from->erase(it);
  if (!r.batch->done) {
    if (r.work >= 0) {
      // Only this receive; a Gloo work must be waited for once.
      auto& work = r.batch->works[r.work];
      if (work) {
        const Clock::time_point start = Clock::now();
        MT_RETURN_IF_ERROR(Wait(work, absl::StrCat("pipeline recv on ", pp_.name)));
        work.reset();
        r.batch->FinishSpans(r.work);
        p2p_seconds_ += SecondsSince(start);
      }
    } else {
      MT_RETURN_IF_ERROR(WaitBatch(r.batch));
    }
  }
  return r.tensor;
}

absl::StatusOr<PipelineStepResult> PipelineExecutor::Train(
    const ChunkForward& forward, const std::vector<PipelineMicroBatch>& micro_batches,
    double loss_scale, const std::function<void()>& after_backward,
    const std::function<void(int chunk, bool last)>& before_backward) {
  if (static_cast<int>(micro_batches.size()) != config_.num_micro_batches) {
    return absl::InvalidArgumentError(absl::StrCat("a training step takes ",
                                                   config_.num_micro_batches,
                                                   " micro-batches, got ", micro_batches.size()));
  }
  return Run(forward, micro_batches, /*forward_only=*/false, loss_scale, after_backward,
             before_backward);
}

absl::StatusOr<PipelineStepResult> PipelineExecutor::Evaluate(
    const ChunkForward& forward, const std::vector<PipelineMicroBatch>& micro_batches) {
  torch::NoGradGuard no_grad;
  return Run(forward, micro_batches, /*forward_only=*/true, 1.0, {}, {});
}

absl::StatusOr<PipelineStepResult> PipelineExecutor::Run(
    const ChunkForward& forward, const std::vector<PipelineMicroBatch>& micro_batches,
    bool forward_only, double loss_scale, const std::function<void()>& after_backward,
    const std::function<void(int, bool)>& before_backward) {
  const int m = static_cast<int>(micro_batches.size());
  MT_ASSIGN_OR_RETURN(const std::vector<PipelineAction>* table, Table(m, forward_only));
  // The micro-batch of each chunk's last backward in the table.
  std::vector<int> last_backward(config_.num_chunks, -1);
  for (const PipelineAction& a : *table) {
    if (a.type == PipelineAction::Type::kBackward) last_backward[a.chunk] = a.micro_batch;
  }
  const int p = num_stages_;
  const int last_vs = p * config_.num_chunks - 1;
  struct Slot {
    at::Tensor input;   // what the chunk read: the received activation (a leaf) or tokens
    at::Tensor output;  // the next stage's input, or the loss
  };
  std::map<Key, Slot> slots;
  std::map<Key, at::Tensor> send_activation, send_gradient;
  at::Tensor loss_sum;
  activations_in_.clear();
  gradients_in_.clear();
  outstanding_.clear();
  p2p_seconds_ = 0.0;
  const Clock::time_point run_start = Clock::now();
  double compute_seconds = 0.0;
  auto where = [this](const PipelineAction& a) {
    return absl::StrCat("pipeline stage ", stage_, " ", ActionString(a));
  };
  for (const PipelineAction& a : *table) {
    const Key key{a.micro_batch, a.chunk};
    const Clock::time_point action_start = Clock::now();
    try {
      switch (a.type) {
        case PipelineAction::Type::kForward: {
          const int vs = a.chunk * p + stage_;
          const PipelineMicroBatch& mb = micro_batches[a.micro_batch];
          at::Tensor input;
          if (vs == 0) {
            input = mb.tokens;
            if (!input.defined()) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "the first pipeline stage needs the tokens of micro-batch ", a.micro_batch));
            }
          } else {
            MT_ASSIGN_OR_RETURN(input, TakeReceived(&activations_in_, key, "activation"));
            if (!forward_only) input.requires_grad_(true);
          }
          const at::Tensor targets = vs == last_vs ? mb.targets : at::Tensor();
          if (vs == last_vs && !targets.defined()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "the last pipeline stage needs the targets of micro-batch ", a.micro_batch));
          }
          at::Tensor output = forward(a.chunk, input, targets);
          if (vs == last_vs) {
            const at::Tensor loss = output.detach().to(at::kDouble);
            loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
          } else {
            send_activation[key] = output;
          }
          if (!forward_only) slots[key] = Slot{input, output};
          break;
        }
        case PipelineAction::Type::kBackward: {
          const int vs = a.chunk * p + stage_;
          auto it = slots.find(key);
          if (it == slots.end()) {
            return absl::InternalError(absl::StrCat(where(a), " before its forward"));
          }
          Slot slot = std::move(it->second);
          slots.erase(it);
          if (before_backward) before_backward(a.chunk, a.micro_batch == last_backward[a.chunk]);
          if (vs == last_vs) {
            (slot.output * (loss_scale / static_cast<double>(config_.num_micro_batches)))
                .backward();
          } else {
            MT_ASSIGN_OR_RETURN(at::Tensor grad,
                                TakeReceived(&gradients_in_, key, "output gradient"));
            slot.output.backward(grad);
          }
          if (vs > 0) {
            at::Tensor g = slot.input.grad();
            send_gradient[key] = g.defined() ? g : at::zeros_like(slot.input);
          }
          if (after_backward) after_backward();
          break;
        }
        case PipelineAction::Type::kCommunicate:
          MT_RETURN_IF_ERROR(Post(a.ops, &send_activation, &send_gradient));
          break;
      }
      if (config_.synchronize) config_.synchronize();
    } catch (const std::exception& e) {
      return FromException(e, where(a));
    }
    if (a.type != PipelineAction::Type::kCommunicate) {
      compute_seconds += SecondsSince(action_start);
    }
  }
  MT_RETURN_IF_ERROR(WaitAll());
  if (!slots.empty() || !send_activation.empty() || !send_gradient.empty() ||
      !activations_in_.empty() || !gradients_in_.empty()) {
    return absl::InternalError(
        absl::StrCat("pipeline stage ", stage_, " ended a step with tensors left over"));
  }
  PipelineStepResult result;
  result.loss_sum = loss_sum.defined() ? loss_sum.item<double>() : 0.0;
  result.p2p_seconds = p2p_seconds_;
  if (config_.synchronize) config_.synchronize();
  result.compute_seconds = compute_seconds;
  result.seconds = SecondsSince(run_start);
  return result;
}

absl::StatusOr<double> PipelineExecutor::BroadcastFromLastStage(double value) {
  if (!pp_.active()) return value;
  try {
    auto options = at::TensorOptions().dtype(at::kDouble);
    if (pp_.group->getBackendName() == "nccl") options = options.device(config_.device);
    std::vector<at::Tensor> t{at::full({1}, value, options)};
    c10d::BroadcastOptions opts;
    opts.rootRank = pp_.size - 1;
    CommStats::Span span = StartComm(pp_, Collective::kBroadcast, t[0]);
    MT_RETURN_IF_ERROR(Wait(pp_.group->broadcast(t, opts), "loss broadcast over " + pp_.name));
    span.Finish();
    return t[0].item<double>();
  } catch (const std::exception& e) {
    return FromException(e, "loss broadcast");
  }
}

absl::Status SumOverGroup(const GroupHandle& group, std::vector<at::Tensor> tensors,
                          const char* what) {
  if (!group.active() || tensors.empty()) return absl::OkStatus();
  try {
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    if (tensors.size() == 1 && tensors[0].is_contiguous()) {
      std::vector<at::Tensor> v{tensors[0]};
      CommStats::Span span = StartComm(group, Collective::kAllReduce, v[0]);
      MT_RETURN_IF_ERROR(
          Wait(group.group->allreduce(v, opts), absl::StrCat(what, " over ", group.name)));
      span.Finish();
      return absl::OkStatus();
    }
    std::vector<at::Tensor> flat_views;
    for (const at::Tensor& t : tensors) flat_views.push_back(t.reshape({-1}));
    std::vector<at::Tensor> v{at::cat(flat_views)};
    CommStats::Span span = StartComm(group, Collective::kAllReduce, v[0]);
    MT_RETURN_IF_ERROR(
        Wait(group.group->allreduce(v, opts), absl::StrCat(what, " over ", group.name)));
    span.Finish();
    int64_t offset = 0;
    for (at::Tensor& t : tensors) {
      t.copy_(v[0].narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  } catch (const std::exception& e) {
    return FromException(e, what);
  }
  return absl::OkStatus();
}

}  // namespace mt::parallel
