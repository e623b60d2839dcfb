#include "worker/parallel/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mt::parallel {
namespace {

// Python's %, which Megatron's chunk arithmetic relies on for negative indices.
int FloorMod(int a, int n) {
  const int r = a % n;
  return r < 0 ? r + n : r;
}

struct Work {
  int micro_batch;
  int chunk;
};

// Builds one stage's table: the compute order from Megatron's schedule, and the receives
// annotated with the tensor they bring (the j-th activation received feeds the j-th forward
// that needs one; likewise for gradients and backwards).
class StageBuilder {
 public:
  StageBuilder(const PipelineScheduleSpec& spec, int stage)
      : p_(spec.num_stages), m_(spec.num_micro_batches), v_(spec.num_chunks), s_(stage) {
    const int total = m_ * v_;
    for (int k = 0; k < total; ++k) {
      fwd_.push_back({MicroBatch(k), Chunk(k, /*forward=*/true)});
      bwd_.push_back({MicroBatch(k), Chunk(k, /*forward=*/false)});
    }
    for (const Work& w : fwd_) {
      if (!IsFirstVirtualStage(w.chunk)) needs_activation_.push_back(w);
    }
    for (const Work& w : bwd_) {
      if (!IsLastVirtualStage(w.chunk)) needs_gradient_.push_back(w);
    }
  }

  int Chunk(int k, bool forward) const {
    if (v_ == 1) return 0;
    const int c = FloorMod(k, p_ * v_) / p_;
    return forward ? c : v_ - 1 - c;
  }
  int MicroBatch(int k) const {
    if (v_ == 1) return k;
    return (k / (p_ * v_)) * p_ + FloorMod(k, p_ * v_) % p_;
  }
  bool IsFirstVirtualStage(int chunk) const { return s_ == 0 && chunk == 0; }
  bool IsLastVirtualStage(int chunk) const { return s_ == p_ - 1 && chunk == v_ - 1; }
  const Work& forward(int k) const { return fwd_[k]; }

  void F(int k) { out_.push_back(PipelineAction::Forward(fwd_[k].micro_batch, fwd_[k].chunk)); }
  void B(int k) { out_.push_back(PipelineAction::Backward(bwd_[k].micro_batch, bwd_[k].chunk)); }

  std::optional<P2POp> SendActivation(int k) const {
    if (IsLastVirtualStage(fwd_[k].chunk)) return std::nullopt;
    return P2POp{P2PKind::kSendActivation, (s_ + 1) % p_, fwd_[k].micro_batch, fwd_[k].chunk};
  }
  std::optional<P2POp> SendGradient(int k) const {
    if (IsFirstVirtualStage(bwd_[k].chunk)) return std::nullopt;
    return P2POp{P2PKind::kSendGradient, (s_ + p_ - 1) % p_, bwd_[k].micro_batch, bwd_[k].chunk};
  }
  std::optional<P2POp> RecvActivation(bool want = true) {
    if (!want) return std::nullopt;
    if (next_activation_ >= needs_activation_.size()) {
      overflow_ = true;
      return std::nullopt;
    }
    const Work& w = needs_activation_[next_activation_++];
    return P2POp{P2PKind::kRecvActivation, (s_ + p_ - 1) % p_, w.micro_batch, w.chunk};
  }
  std::optional<P2POp> RecvGradient(bool want = true) {
    if (!want) return std::nullopt;
    if (next_gradient_ >= needs_gradient_.size()) {
      overflow_ = true;
      return std::nullopt;
    }
    const Work& w = needs_gradient_[next_gradient_++];
    return P2POp{P2PKind::kRecvGradient, (s_ + 1) % p_, w.micro_batch, w.chunk};
  }

  // One batch. Canonical order, the same on every stage: activations before gradients, so
  // that when both go to one peer (p == 2) the sends of one side meet the receives of the
  // other in the same order.
  void Communicate(std::optional<P2POp> send_activation, std::optional<P2POp> recv_activation,
                   std::optional<P2POp> send_gradient, std::optional<P2POp> recv_gradient) {
    std::vector<P2POp> ops;
    for (const auto& op : {send_activation, recv_activation, send_gradient, recv_gradient}) {
      if (op.has_value()) ops.push_back(*op);
    }
    if (!ops.empty()) out_.push_back(PipelineAction::Communicate(std::move(ops)));
  }

  absl::StatusOr<std::vector<PipelineAction>> Finish(bool forward_only) {
    const bool gradients_done = forward_only || next_gradient_ == needs_gradient_.size();
    if (overflow_ || next_activation_ != needs_activation_.size() || !gradients_done) {
      return absl::InternalError(
          absl::StrCat("pipeline schedule of stage ", s_, " (p=", p_, " m=", m_, " v=", v_,
                       ") receives the wrong number of tensors: ", next_activation_, " of ",
                       needs_activation_.size(), " activations, ", next_gradient_, " of ",
                       needs_gradient_.size(), " gradients"));
    }
    return std::move(out_);
  }

 private:
  const int p_, m_, v_, s_;
  std::vector<Work> fwd_, bwd_;
  std::vector<Work> needs_activation_, needs_gradient_;
  size_t next_activation_ = 0, next_gradient_ = 0;
  bool overflow_ = false;
  std::vector<PipelineAction> out_;
};

constexpr std::nullopt_t kNone = std::nullopt;

// Megatron's forward_backward_pipelining_without_interleaving (and forward-only).
absl::StatusOr<std::vector<PipelineAction>> OneForwardOneBackward(const PipelineScheduleSpec& spec,
                                                                  int s) {
  const int p = spec.num_stages;
  const int m = spec.num_micro_batches;
  const bool first = s == 0;
  const bool last = s == p - 1;
  StageBuilder b(spec, s);
  if (spec.forward_only) {
    for (int k = 0; k < m; ++k) {
      b.Communicate(kNone, b.RecvActivation(!first), kNone, kNone);
      b.F(k);
      b.Communicate(b.SendActivation(k), kNone, kNone, kNone);
    }
    return b.Finish(/*forward_only=*/true);
  }
  const int warmup = WarmupForwards(spec, s);
  const int remaining = m - warmup;
  for (int k = 0; k < warmup; ++k) {
    b.Communicate(kNone, b.RecvActivation(!first), kNone, kNone);
    b.F(k);
    b.Communicate(b.SendActivation(k), kNone, kNone, kNone);
  }
  if (remaining > 0) b.Communicate(kNone, b.RecvActivation(!first), kNone, kNone);
  for (int i = 0; i < remaining; ++i) {
    b.F(warmup + i);
    b.Communicate(b.SendActivation(warmup + i), kNone, kNone, b.RecvGradient(!last));
    b.B(i);
    const bool more = i < remaining - 1;
    b.Communicate(kNone, b.RecvActivation(more && !first), b.SendGradient(i), kNone);
  }
  for (int i = remaining; i < m; ++i) {
    b.Communicate(kNone, kNone, kNone, b.RecvGradient(!last));
    b.B(i);
    b.Communicate(kNone, kNone, b.SendGradient(i), kNone);
  }
  return b.Finish(/*forward_only=*/false);
}

// Megatron's forward_backward_pipelining_with_interleaving (and its forward-only mode).
absl::StatusOr<std::vector<PipelineAction>> Interleaved(const PipelineScheduleSpec& spec, int s) {
  const int p = spec.num_stages;
  const int v = spec.num_chunks;
  const int total = spec.num_micro_batches * v;
  const bool all_warmup = spec.num_micro_batches == p;
  const bool first = s == 0;
  const bool last = s == p - 1;
  StageBuilder b(spec, s);
  const int warmup = WarmupForwards(spec, s);
  const int remaining = total - warmup;

  b.Communicate(kNone, b.RecvActivation(!b.IsFirstVirtualStage(b.forward(0).chunk)), kNone, kNone);
  for (int k = 0; k < warmup; ++k) {
    b.F(k);
    bool recv_prev = !(first && b.Chunk(k + 1, /*forward=*/true) == 0);
    if (k == total - 1) recv_prev = false;
    const bool last_warmup = k == warmup - 1 && !spec.forward_only && !all_warmup;
    b.Communicate(b.SendActivation(k), b.RecvActivation(recv_prev), kNone,
                  b.RecvGradient(last_warmup && !last));
  }
  for (int k = 0; k < remaining; ++k) {
    const int fk = k + warmup;
    b.F(fk);
    b.B(k);
    // The first stage runs p-1 forwards ahead of the last one, the last stage p-1 backwards
    // ahead of the first: that decides whether the peer sends anything this round.
    bool recv_prev = true;
    if (first) recv_prev = b.Chunk(fk - (p - 1), /*forward=*/true) != v - 1;
    bool recv_next = true;
    if (last) recv_next = b.Chunk(k - (p - 1), /*forward=*/false) != 0;
    if (k == remaining - 1) recv_prev = false;
    b.Communicate(b.SendActivation(fk), b.RecvActivation(recv_prev), b.SendGradient(k),
                  b.RecvGradient(recv_next));
  }
  if (!spec.forward_only) {
    if (all_warmup) b.Communicate(kNone, kNone, kNone, b.RecvGradient(!last));
    for (int k = remaining; k < total; ++k) {
      b.B(k);
      bool recv_next = !(last && b.Chunk(k + 1, /*forward=*/false) == v - 1);
      if (k == total - 1) recv_next = false;
      b.Communicate(kNone, kNone, b.SendGradient(k), b.RecvGradient(recv_next));
    }
  }
  return b.Finish(spec.forward_only);
}

std::string KindString(P2PKind kind) {
  switch (kind) {
    case P2PKind::kSendActivation:
      return "sA";
    case P2PKind::kRecvActivation:
      return "rA";
    case P2PKind::kSendGradient:
      return "sG";
    case P2PKind::kRecvGradient:
      return "rG";
  }
  return "?";
}

std::string OpString(const P2POp& op) {
  return absl::StrCat(KindString(op.kind), op.micro_batch, ".", op.chunk, op.is_send() ? ">" : "<",
                      op.peer);
}

}  // namespace

PipelineAction PipelineAction::Forward(int micro_batch, int chunk) {
  PipelineAction a;
  a.type = Type::kForward;
  a.micro_batch = micro_batch;
  a.chunk = chunk;
  return a;
}

PipelineAction PipelineAction::Backward(int micro_batch, int chunk) {
  PipelineAction a;
  a.type = Type::kBackward;
  a.micro_batch = micro_batch;
  a.chunk = chunk;
  return a;
}

PipelineAction PipelineAction::Communicate(std::vector<P2POp> ops) {
  PipelineAction a;
  a.type = Type::kCommunicate;
  a.ops = std::move(ops);
  return a;
}

absl::Status ValidateScheduleSpec(const PipelineScheduleSpec& spec) {
  if (spec.num_stages < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline_model_parallel_size must be >= 1, got ", spec.num_stages));
  }
  if (spec.num_micro_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the pipeline needs at least one micro-batch per step, got ", spec.num_micro_batches,
        "; global_batch_size must be at least micro_batch_size * data_parallel_size"));
  }
  if (spec.num_chunks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the number of model chunks per stage must be >= 1, got ", spec.num_chunks));
  }
  if (spec.num_chunks > 1 && spec.num_stages == 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the interleaved schedule (", spec.num_chunks,
                     " model chunks per stage) needs pipeline_model_parallel_size > 1; unset "
                     "num_layers_per_virtual_pipeline_stage"));
  }
  if (spec.num_chunks > 1 && spec.num_micro_batches % spec.num_stages != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the interleaved schedule needs num_micro_batches (", spec.num_micro_batches,
                     ") to be a multiple of pipeline_model_parallel_size (", spec.num_stages,
                     "); choose a global_batch_size that gives a multiple of ", spec.num_stages,
                     " micro-batches per pipeline, or drop num_layers_per_virtual_pipeline_stage"));
  }
  const int64_t total = static_cast<int64_t>(spec.num_micro_batches) * spec.num_chunks;
  if (total > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("num_micro_batches (", spec.num_micro_batches,
                                                   ") * model chunks (", spec.num_chunks,
                                                   ") is too large for a schedule"));
  }
  return absl::OkStatus();
}

int WarmupForwards(const PipelineScheduleSpec& spec, int stage) {
  const int p = spec.num_stages;
  const int m = spec.num_micro_batches;
  const int v = spec.num_chunks;
  const int total = m * v;
  if (spec.forward_only) return total;
  if (v == 1) return std::min(p - stage - 1, m);
  if (m == p) return total;
  return std::min(2 * (p - stage - 1) + (v - 1) * p, total);
}

int MaxInFlightActivations(const PipelineScheduleSpec& spec, int stage) {
  if (spec.forward_only) return 0;
  const int total = spec.num_micro_batches * spec.num_chunks;
  return std::min(WarmupForwards(spec, stage) + 1, total);
}

double TheoreticalBubbleFraction(int num_stages, int num_micro_batches, int num_chunks) {
  const double p = num_stages;
  return (p - 1) / (static_cast<double>(num_chunks) * num_micro_batches + p - 1);
}

absl::StatusOr<std::vector<PipelineAction>> StageSchedule(const PipelineScheduleSpec& spec,
                                                          int stage) {
  if (absl::Status s = ValidateScheduleSpec(spec); !s.ok()) return s;
  if (stage < 0 || stage >= spec.num_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage ", stage, " outside the pipeline of ", spec.num_stages));
  }
  if (spec.num_chunks == 1) return OneForwardOneBackward(spec, stage);
  return Interleaved(spec, stage);
}

absl::StatusOr<std::vector<std::vector<PipelineAction>>> PipelineSchedule(
    const PipelineScheduleSpec& spec) {
  if (absl::Status s = ValidateScheduleSpec(spec); !s.ok()) return s;
  std::vector<std::vector<PipelineAction>> out;
  for (int s = 0; s < spec.num_stages; ++s) {
    absl::StatusOr<std::vector<PipelineAction>> stage = StageSchedule(spec, s);
    if (!stage.ok()) return stage.status();
    out.push_back(*std::move(stage));
  }
  return out;
}

std::string ActionString(const PipelineAction& a) {
  switch (a.type) {
    case PipelineAction::Type::kForward:
      return absl::StrCat("F", a.micro_batch, ".", a.chunk);
    case PipelineAction::Type::kBackward:
      return absl::StrCat("B", a.micro_batch, ".", a.chunk);
    case PipelineAction::Type::kCommunicate: {
      std::vector<std::string> ops;
      for (const P2POp& op : a.ops) ops.push_back(OpString(op));
      return absl::StrCat("[", absl::StrJoin(ops, " "), "]");
    }
  }
  return "?";
}

std::string ScheduleString(const std::vector<PipelineAction>& actions) {
  std::vector<std::string> parts;
  for (const PipelineAction& a : actions) parts.push_back(ActionString(a));
  return absl::StrJoin(parts, " ");
}

// ---------------------------------------------------------------------------------------------
// Simulation.

namespace {

// What crosses a boundary: the activation or the gradient between virtual stages
// `boundary` and `boundary + 1`, for one micro-batch.
struct Message {
  bool gradient = false;
  int micro_batch = 0;
  int boundary = 0;
  friend bool operator==(const Message& a, const Message& b) {
    return a.gradient == b.gradient && a.micro_batch == b.micro_batch && a.boundary == b.boundary;
  }
};

std::string MessageString(const Message& m) {
  return absl::StrCat(m.gradient ? "gradient" : "activation", " of micro-batch ", m.micro_batch,
                      " between virtual stages ", m.boundary, " and ", m.boundary + 1);
}

struct Posted {
  Message message;
  int64_t time = 0;
  int stage = 0;
  size_t action = 0;
};

class Simulator {
 public:
  Simulator(const PipelineScheduleSpec& spec,
            const std::vector<std::vector<PipelineAction>>& stages,
            const SimulationOptions& options)
      : spec_(spec),
        stages_(stages),
        options_(options),
        p_(spec.num_stages),
        last_vs_(spec.num_stages * spec.num_chunks - 1) {
    const size_t n = static_cast<size_t>(p_);
    pc_.assign(n, 0);
    clock_.assign(n, 0);
    posted_.assign(n, false);
    result_.busy.assign(n, 0);
    result_.finish.assign(n, 0);
    result_.max_in_flight.assign(n, 0);
    in_flight_.assign(n, 0);
    forwarded_.resize(n);
    backwarded_.resize(n);
    arrived_.resize(n);
    pending_recv_.resize(n);
    pending_send_.resize(n);
    batch_.resize(n);
  }

  absl::StatusOr<SimulationResult> Run() {
    if (static_cast<int>(stages_.size()) != p_) {
      return Fail(absl::StrCat("tables for ", stages_.size(), " stages, expected ", p_));
    }
    while (true) {
      bool progress = false;
      bool done = true;
      for (int s = 0; s < p_; ++s) {
        while (true) {
          absl::StatusOr<bool> advanced = Advance(s);
          if (!advanced.ok()) return advanced.status();
          if (!*advanced) break;
          progress = true;
        }
        if (!Finished(s)) done = false;
      }
      if (done) break;
      if (!progress) return Fail(absl::StrCat("deadlock: ", Blocked()));
    }
    for (const auto& [pair, sends] : sends_) {
      const size_t recvs = recvs_.count(pair) ? recvs_.at(pair).size() : 0;
      if (sends.size() != recvs) {
        return Fail(absl::StrCat("stage ", pair.first, " sends ", sends.size(),
                                 " tensors to stage ", pair.second, ", which receives ", recvs));
      }
    }
    for (const auto& [pair, recvs] : recvs_) {
      if (!sends_.count(pair)) {
        return Fail(absl::StrCat("stage ", pair.second, " receives ", recvs.size(),
                                 " tensors from stage ", pair.first, ", which sends none"));
      }
    }
    const int total = spec_.num_micro_batches * spec_.num_chunks;
    for (int s = 0; s < p_; ++s) {
      if (static_cast<int>(forwarded_[s].size()) != total) {
        return Fail(absl::StrCat("stage ", s, " runs ", forwarded_[s].size(),
                                 " forwards, expected ", total));
      }
      const int want_backward = spec_.forward_only ? 0 : total;
      if (static_cast<int>(backwarded_[s].size()) != want_backward) {
        return Fail(absl::StrCat("stage ", s, " runs ", backwarded_[s].size(),
                                 " backwards, expected ", want_backward));
      }
      result_.makespan = std::max(result_.makespan, result_.finish[s]);
    }
    return result_;
  }

 private:
  using Pair = std::pair<int, int>;        // (sender stage, receiver stage)
  using Work = std::pair<int, int>;        // (micro-batch, chunk)
  using Key = std::tuple<bool, int, int>;  // (gradient?, micro-batch, chunk)
  struct BatchOp {
    Pair pair;
    size_t index = 0;  // in sends_[pair] or recvs_[pair]
    bool send = false;
    Key key;
  };

  absl::Status Fail(const std::string& what) const {
    return absl::FailedPreconditionError(absl::StrCat("pipeline schedule p=", p_,
                                                      " m=", spec_.num_micro_batches,
                                                      " v=", spec_.num_chunks, ": ", what));
  }

  int VirtualStage(int stage, int chunk) const { return chunk * p_ + stage; }

  // The message an op carries (send) or expects (receive), and the stage it must go to.
  Message MessageOf(int stage, const P2POp& op, int* peer) const {
    const int vs = VirtualStage(stage, op.chunk);
    Message m;
    m.micro_batch = op.micro_batch;
    m.gradient = !op.is_activation();
    switch (op.kind) {
      case P2PKind::kSendActivation:
        m.boundary = vs;
        *peer = (stage + 1) % p_;
        break;
      case P2PKind::kRecvActivation:
        m.boundary = vs - 1;
        *peer = (stage + p_ - 1) % p_;
        break;
      case P2PKind::kSendGradient:
        m.boundary = vs - 1;
        *peer = (stage + p_ - 1) % p_;
        break;
      case P2PKind::kRecvGradient:
        m.boundary = vs;
        *peer = (stage + 1) % p_;
        break;
    }
    return m;
  }

  bool Finished(int s) const {
    return pc_[s] >= stages_[s].size() && (pending_send_[s].empty() || !options_.overlap);
  }

  absl::Status CheckWork(int s, const PipelineAction& a) const {
    if (a.micro_batch < 0 || a.micro_batch >= spec_.num_micro_batches || a.chunk < 0 ||
        a.chunk >= spec_.num_chunks) {
      return Fail(absl::StrCat("stage ", s, " action ", ActionString(a), " is out of range"));
    }
    return absl::OkStatus();
  }

  // Posts every op of a communicate action (once), checking what it sends exists.
  absl::Status Post(int s, size_t index, const PipelineAction& a) {
    for (const P2POp& op : a.ops) {
      if (op.micro_batch < 0 || op.micro_batch >= spec_.num_micro_batches || op.chunk < 0 ||
          op.chunk >= spec_.num_chunks) {
        return Fail(absl::StrCat("stage ", s, " op ", OpString(op), " is out of range"));
      }
      int peer = 0;
      const Message msg = MessageOf(s, op, &peer);
      if (op.peer != peer) {
        return Fail(absl::StrCat("stage ", s, " op ", OpString(op), " names stage ", op.peer,
                                 ", but the ", MessageString(msg), " lives on stage ", peer));
      }
      if (msg.boundary < 0 || msg.boundary >= last_vs_) {
        return Fail(
            absl::StrCat("stage ", s, " op ", OpString(op), " crosses no boundary of the model"));
      }
      const Work w{op.micro_batch, op.chunk};
      if (op.kind == P2PKind::kSendActivation && !forwarded_[s].count(w)) {
        return Fail(absl::StrCat("stage ", s, " sends the output of ", op.micro_batch, ".",
                                 op.chunk, " before its forward"));
      }
      if (op.kind == P2PKind::kSendGradient && !backwarded_[s].count(w)) {
        return Fail(absl::StrCat("stage ", s, " sends the input gradient of ", op.micro_batch, ".",
                                 op.chunk, " before its backward"));
      }
      Posted posted{msg, clock_[s], s, index};
      const auto key = std::make_tuple(msg.gradient, op.micro_batch, op.chunk);
      if (op.is_send()) {
        const Pair pair{s, peer};
        sends_[pair].push_back(posted);
        pending_send_[s].push_back({pair, sends_[pair].size() - 1});
        batch_[s].push_back({pair, sends_[pair].size() - 1, true, key});
      } else {
        const Pair pair{peer, s};
        if (arrived_[s].count(key) || pending_recv_[s].count(key)) {
          return Fail(absl::StrCat("stage ", s, " receives the ", MessageString(msg), " twice"));
        }
        recvs_[pair].push_back(posted);
        pending_recv_[s][key] = {pair, recvs_[pair].size() - 1};
        batch_[s].push_back({pair, recvs_[pair].size() - 1, false, key});
      }
    }
    return absl::OkStatus();
  }

  // Whether the op at (pair, index) on the `send` side has met its peer; fills the time the
  // peer posted it and checks both sides agree on the message.
  absl::StatusOr<bool> Met(const Pair& pair, size_t index, bool send, int64_t* peer_time) {
    const auto& mine = send ? sends_[pair] : recvs_[pair];
    const auto& theirs = send ? recvs_[pair] : sends_[pair];
    if (index >= theirs.size()) return false;
    const Posted& a = mine[index];
    const Posted& b = theirs[index];
    if (!(a.message == b.message)) {
      const Posted& snd = send ? a : b;
      const Posted& rcv = send ? b : a;
      return Fail(absl::StrCat("stage ", pair.first, " sends the ", MessageString(snd.message),
                               " (action ", snd.action, ") where stage ", pair.second,
                               " receives the ", MessageString(rcv.message), " (action ",
                               rcv.action, ")"));
    }
    *peer_time = b.time;
    return true;
  }

  // Whether the input of a forward (activation) or backward (gradient) on `s` has arrived;
  // advances the clock to its arrival. A missing receive is an error, a pending one a wait.
  absl::StatusOr<bool> InputReady(int s, bool gradient, const Work& w) {
    const auto key = std::make_tuple(gradient, w.first, w.second);
    if (arrived_[s].count(key)) return true;
    auto it = pending_recv_[s].find(key);
    if (it == pending_recv_[s].end()) {
      return Fail(absl::StrCat("stage ", s, " runs the ", gradient ? "backward" : "forward", " of ",
                               w.first, ".", w.second, " without receiving its ",
                               gradient ? "output gradient" : "input"));
    }
    if (!options_.overlap) {
      return Fail(absl::StrCat("stage ", s, " runs ", w.first, ".", w.second,
                               " before the batch receiving its input completed"));
    }
    int64_t t = 0;
    absl::StatusOr<bool> met = Met(it->second.first, it->second.second, /*send=*/false, &t);
    if (!met.ok() || !*met) return met;
    clock_[s] = std::max(clock_[s], t);
    arrived_[s].insert(key);
    pending_recv_[s].erase(it);
    return true;
  }

  // One step of stage s; false when it is blocked or done.
  absl::StatusOr<bool> Advance(int s) {
    if (pc_[s] >= stages_[s].size()) {
      // Overlap: wait for the sends still in flight.
      if (!options_.overlap || pending_send_[s].empty()) return false;
      int64_t t = clock_[s];
      for (const auto& [pair, index] : pending_send_[s]) {
        int64_t peer_time = 0;
        absl::StatusOr<bool> met = Met(pair, index, /*send=*/true, &peer_time);
        if (!met.ok() || !*met) return met;
        t = std::max(t, peer_time);
      }
      pending_send_[s].clear();
      clock_[s] = t;
      result_.finish[s] = t;
      return true;
    }
    const size_t index = pc_[s];
    const PipelineAction& a = stages_[s][index];
    switch (a.type) {
      case PipelineAction::Type::kForward: {
        if (absl::Status st = CheckWork(s, a); !st.ok()) return st;
        const Work w{a.micro_batch, a.chunk};
        if (forwarded_[s].count(w)) {
          return Fail(
              absl::StrCat("stage ", s, " runs the forward of ", w.first, ".", w.second, " twice"));
        }
        if (VirtualStage(s, a.chunk) > 0) {
          absl::StatusOr<bool> ready = InputReady(s, /*gradient=*/false, w);
          if (!ready.ok() || !*ready) return ready;
        }
        forwarded_[s].insert(w);
        clock_[s] += options_.forward_time;
        result_.busy[s] += options_.forward_time;
        if (!spec_.forward_only) {
          result_.max_in_flight[s] = std::max(result_.max_in_flight[s], ++in_flight_[s]);
        }
        break;
      }
      case PipelineAction::Type::kBackward: {
        if (absl::Status st = CheckWork(s, a); !st.ok()) return st;
        const Work w{a.micro_batch, a.chunk};
        if (spec_.forward_only) {
          return Fail(absl::StrCat("stage ", s, " runs a backward in a forward-only schedule"));
        }
        if (!forwarded_[s].count(w)) {
          return Fail(absl::StrCat("stage ", s, " runs the backward of ", w.first, ".", w.second,
                                   " before its forward"));
        }
        if (backwarded_[s].count(w)) {
          return Fail(absl::StrCat("stage ", s, " runs the backward of ", w.first, ".", w.second,
                                   " twice"));
        }
        if (VirtualStage(s, a.chunk) < last_vs_) {
          absl::StatusOr<bool> ready = InputReady(s, /*gradient=*/true, w);
          if (!ready.ok() || !*ready) return ready;
        }
        backwarded_[s].insert(w);
        clock_[s] += options_.backward_time;
        result_.busy[s] += options_.backward_time;
        --in_flight_[s];
        break;
      }
      case PipelineAction::Type::kCommunicate: {
        if (a.ops.empty()) return Fail(absl::StrCat("stage ", s, " has an empty batch"));
        if (!posted_[s]) {
          batch_[s].clear();
          if (absl::Status st = Post(s, index, a); !st.ok()) return st;
          posted_[s] = true;
        }
        if (options_.overlap) break;
        // Blocking: every op of the batch must have met its peer.
        int64_t t = clock_[s];
        for (const BatchOp& op : batch_[s]) {
          int64_t peer_time = 0;
          absl::StatusOr<bool> met = Met(op.pair, op.index, op.send, &peer_time);
          if (!met.ok() || !*met) return met;
          t = std::max(t, peer_time);
        }
        for (const BatchOp& op : batch_[s]) {
          if (op.send) continue;
          arrived_[s].insert(op.key);
          pending_recv_[s].erase(op.key);
        }
        pending_send_[s].clear();
        clock_[s] = t;
        break;
      }
    }
    posted_[s] = false;
    ++pc_[s];
    result_.finish[s] = clock_[s];
    return true;
  }

  std::string Blocked() const {
    std::vector<std::string> parts;
    for (int s = 0; s < p_; ++s) {
      if (pc_[s] >= stages_[s].size()) {
        if (options_.overlap && !pending_send_[s].empty()) {
          parts.push_back(absl::StrCat("stage ", s, " waits for its sends"));
        }
        continue;
      }
      parts.push_back(absl::StrCat("stage ", s, " waits at action ", pc_[s], " ",
                                   ActionString(stages_[s][pc_[s]])));
    }
    return absl::StrJoin(parts, "; ");
  }

  const PipelineScheduleSpec& spec_;
  const std::vector<std::vector<PipelineAction>>& stages_;
  const SimulationOptions options_;
  const int p_;
  const int last_vs_;
  std::vector<size_t> pc_;
  std::vector<int64_t> clock_;
  std::vector<bool> posted_;
  std::vector<int> in_flight_;
  std::vector<std::set<Work>> forwarded_, backwarded_;
  // (gradient?, micro-batch, chunk) of the tensors a stage has received.
  std::vector<std::set<Key>> arrived_;
  std::vector<std::map<Key, std::pair<Pair, size_t>>> pending_recv_;
  std::vector<std::vector<std::pair<Pair, size_t>>> pending_send_;
  std::vector<std::vector<BatchOp>> batch_;  // the ops of the batch each stage is in
  std::map<Pair, std::vector<Posted>> sends_, recvs_;
  SimulationResult result_;
};

}  // namespace

absl::StatusOr<SimulationResult> Simulate(const PipelineScheduleSpec& spec,
                                          const std::vector<std::vector<PipelineAction>>& stages,
                                          const SimulationOptions& options) {
  if (absl::Status s = ValidateScheduleSpec(spec); !s.ok()) return s;
  return Simulator(spec, stages, options).Run();
}

}  // namespace mt::parallel
