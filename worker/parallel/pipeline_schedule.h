// Pipeline-parallel schedules as pure tables (DESIGN.md §8.3): no LibTorch, no I/O.
//
// For p stages, m micro-batches and v model chunks per stage ("virtual stages", Megatron's
// virtual_pipeline_model_parallel_size), StageSchedule gives the ordered actions of one stage:
// forward(mb, chunk), backward(mb, chunk) and batches of point-to-point operations that are
// posted together and complete together (Megatron's batch_isend_irecv; one NCCL group).
//
// Model chunk c of stage s is virtual stage k = c*p + s; the model is virtual stages 0 .. v*p-1
// in order, so activations flow s -> s+1 (mod p: the last stage's chunk c feeds the first
// stage's chunk c+1) and gradients the other way. Virtual stage 0 reads tokens; virtual stage
// v*p-1 computes the loss.
//
// Schedules (Megatron-LM, megatron/core/pipeline_parallel/schedules.py):
//  - v == 1: 1F1B (forward_backward_pipelining_without_interleaving). Stage s runs
//    W = min(p-s-1, m) warm-up forwards, then m-W steady (forward, backward) pairs, then W
//    cool-down backwards. At most min(p-s, m) micro-batches hold activations at once.
//  - v > 1: the interleaved schedule (forward_backward_pipelining_with_interleaving). Needs
//    p > 1 and m a multiple of p (as Megatron requires). Forward k (0 <= k < v*m) runs chunk
//    (k mod p*v) / p on micro-batch (k / (p*v))*p + k mod p; backward k runs chunk v-1 minus
//    that. Warm-up forwards W = min(2(p-s-1) + (v-1)p, v*m), or all v*m when m == p.
//    At most min(W+1, v*m) (micro-batch, chunk) activations are held at once.
//  - forward_only (evaluation): every forward in the same order, nothing kept.
//
// The theoretical bubble (idle share of a stage's time, unit-time forwards and backwards, free
// communication) is (p-1)/(v*m + p-1); for v == 1 that is 1F1B's (p-1)/(m+p-1). Simulate()
// executes a table with blocking send/recv between the stages and measures it;
// pipeline_schedule_test.cc checks every (p <= 8, m <= 16, v <= 4) against it.
//
// Point-to-point order: between any two stages, the k-th send of one matches the k-th receive
// of the other whatever the kind (NCCL ignores tags), and Simulate() checks that every match
// carries the tensor the receiver expects.
//
// Thread-safe: free functions over values.
#ifndef MT_WORKER_PARALLEL_PIPELINE_SCHEDULE_H_
#define MT_WORKER_PARALLEL_PIPELINE_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mt::parallel {

struct PipelineScheduleSpec {
  int num_stages = 1;         // p, the pipeline-parallel size
  int num_micro_batches = 1;  // m, per pipeline per step
  int num_chunks = 1;         // v, model chunks per stage (1 = no interleaving)
  bool forward_only = false;  // evaluation: no backward, no activations kept
};

// INVALID_ARGUMENT naming the field and the fix, e.g.
//   "the interleaved schedule needs num_micro_batches (6) to be a multiple of
//    pipeline_model_parallel_size (4); choose a global batch that gives a multiple of 4"
absl::Status ValidateScheduleSpec(const PipelineScheduleSpec& spec);

enum class P2PKind {
  kSendActivation,  // a forward's output to the next stage
  kRecvActivation,  // a forward's input from the previous stage
  kSendGradient,    // the gradient of a forward's input to the previous stage
  kRecvGradient,    // the gradient of a forward's output from the next stage
};

struct P2POp {
  P2PKind kind = P2PKind::kSendActivation;
  int peer = 0;         // the other stage (its index in the pipeline group)
  int micro_batch = 0;  // the micro-batch the tensor belongs to
  int chunk = 0;        // this stage's model chunk that produces (send) or uses (recv) it

  bool is_send() const {
    return kind == P2PKind::kSendActivation || kind == P2PKind::kSendGradient;
  }
  bool is_activation() const {
    return kind == P2PKind::kSendActivation || kind == P2PKind::kRecvActivation;
  }
  friend bool operator==(const P2POp& a, const P2POp& b) {
    return a.kind == b.kind && a.peer == b.peer && a.micro_batch == b.micro_batch &&
           a.chunk == b.chunk;
  }
};

struct PipelineAction {
  enum class Type {
    kForward,      // forward of `chunk` on `micro_batch`; keep what backward needs
    kBackward,     // backward of `chunk` on `micro_batch`
    kCommunicate,  // post every op of `ops` together, then wait for all of them
  };
  Type type = Type::kForward;
  int micro_batch = -1;  // kForward / kBackward
  int chunk = -1;        // kForward / kBackward
  std::vector<P2POp> ops;

  static PipelineAction Forward(int micro_batch, int chunk);
  static PipelineAction Backward(int micro_batch, int chunk);
  static PipelineAction Communicate(std::vector<P2POp> ops);
};

// The actions of `stage` (0 <= stage < num_stages), in order.
absl::StatusOr<std::vector<PipelineAction>> StageSchedule(const PipelineScheduleSpec& spec,
                                                          int stage);
// StageSchedule of every stage.
absl::StatusOr<std::vector<std::vector<PipelineAction>>> PipelineSchedule(
    const PipelineScheduleSpec& spec);

// Megatron's bound on the (micro-batch, chunk) activations a stage holds at once (see the top
// of this file); 0 for forward_only.
int MaxInFlightActivations(const PipelineScheduleSpec& spec, int stage);
// Warm-up forwards of `stage` before its first backward (v*m when forward_only).
int WarmupForwards(const PipelineScheduleSpec& spec, int stage);
// (p-1)/(v*m + p-1).
double TheoreticalBubbleFraction(int num_stages, int num_micro_batches, int num_chunks);

// "F3.1" (forward, micro-batch 3, chunk 1), "B3.1", "[sA3.1>2 rG1.0<2]" (a batch: send the
// activation of 3.1 to stage 2, receive the gradient of 1.0 from stage 2).
std::string ActionString(const PipelineAction& action);
std::string ScheduleString(const std::vector<PipelineAction>& actions);

struct SimulationOptions {
  int64_t forward_time = 1;  // per (micro-batch, chunk)
  int64_t backward_time = 1;
  // false: a kCommunicate action blocks until each of its ops has met its peer (Megatron's
  // default). true (--overlap-p2p-comm): ops are posted and not waited for; a forward or
  // backward waits for the receive it consumes, and a stage waits for its sends at the end.
  bool overlap = false;
};

struct SimulationResult {
  int64_t makespan = 0;            // time when the last stage finished
  std::vector<int64_t> busy;       // per stage: time spent computing
  std::vector<int64_t> finish;     // per stage: time its last action completed
  std::vector<int> max_in_flight;  // per stage: most activations held at once
  int64_t idle(int stage) const { return makespan - busy[stage]; }
};

// Executes the tables of every stage with rendezvous point-to-point semantics (a send meets
// the receive posted by its peer; between two stages the k-th send meets the k-th receive),
// unit costs from `options` and free communication. Fails (kFailedPrecondition, saying which
// stage waits for what) on a deadlock, a send/receive pair that carries the wrong tensor or
// goes to the wrong stage, a forward or backward whose input is not there yet, a send of
// something not computed, an action repeated or missing, or an unmatched send or receive.
absl::StatusOr<SimulationResult> Simulate(const PipelineScheduleSpec& spec,
                                          const std::vector<std::vector<PipelineAction>>& stages,
                                          const SimulationOptions& options = {});

}  // namespace mt::parallel

#endif  // MT_WORKER_PARALLEL_PIPELINE_SCHEDULE_H_
