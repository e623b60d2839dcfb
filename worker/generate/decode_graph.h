// The decode step of Generate on CUDA: StaticDecodeStep (decode_step.h) captured once into a
// CUDA graph for one KV cache (one batch and max_len) and replayed for every new token, one
// graph launch in place of some fifteen kernel launches per layer (decoding a small model at
// batch 1 is launch-bound). Step() copies the new tokens into the static input tensor (device
// to device) and, where the device does not hold it already, the position into its
// one-element tensor (a fill), replays the graph, advances the cache and returns the graph's
// static logits; no memory is allocated per step (the test reads the CUDA allocator's counters
// around the replays). The captured step ends by advancing the position on the device.
// Sampling stays outside the graph. Greedy decoding (a graph made with greedy_vocab) ends the
// step with the argmax written into the step's own token input: StepGreedy() then returns the
// chosen tokens, which the next StepGreedy() reads without a copy, so a greedy step is the
// replay alone (no fp32 logits, no argmax, copy or fill launched between replays).
//
// The capture happens at the first Step, once the prompt is in the cache: on a side stream that
// waits for the current one, the step runs twice eagerly (warm-up: cuBLAS workspaces and other
// lazy set-up on that stream), then once under capture, into the graph's private memory pool;
// the current stream then waits for the side stream, and replays run on the current stream.
// Any run of the step writes the keys and values of the position being decoded before reading
// them, so the warm-up's writes are harmless; the warm-up runs leave the position where it was
// and a greedy graph's warm-up puts the tokens back. The graph holds the addresses of the model's
// parameters and of the cache: both must keep their storage while the DecodeGraph lives
// (in-place updates of the values are fine).
//
// Without capture (`capture` false, or the CPU) Step runs the same static step eagerly: the
// same kernels with the same shapes, so greedy tokens with and without the graph are the same.
// CUDA graphs exist only in a build against a CUDA LibTorch (MT_GENERATE_WITH_CUDA); elsewhere
// Create refuses capture with FAILED_PRECONDITION.
//
// Thread-compatible; one device.
#ifndef MT_WORKER_GENERATE_DECODE_GRAPH_H_
#define MT_WORKER_GENERATE_DECODE_GRAPH_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/generate/decode_step.h"
#include "worker/generate/kv_cache.h"
#include "worker/model/gpt.h"

namespace mt::generate {

class DecodeGraph {
 public:
  // True when this build can capture CUDA graphs (it was built against a CUDA LibTorch).
  static bool Available();

  // For `cache` on `device`, which must outlive the DecodeGraph. `capture`: replay a CUDA
  // graph (device must be CUDA and Available()); else run eagerly. `step`: how the step runs
  // (decode_step.h). `greedy_vocab` > 0: a greedy graph, whose step chooses every row's next
  // token, the argmax of its first greedy_vocab logits (the rest is the vocabulary's padding):
  // use StepGreedy; 0: use Step. Errors: FAILED_PRECONDITION for capture where there are no
  // CUDA graphs; INVALID_ARGUMENT for a negative greedy_vocab.
  static absl::StatusOr<std::unique_ptr<DecodeGraph>> Create(model::GptModel& gpt, KvCache& cache,
                                                             const torch::Device& device,
                                                             bool capture,
                                                             const DecodeStepOptions& step = {},
                                                             int64_t greedy_vocab = 0);
  ~DecodeGraph();
  DecodeGraph(const DecodeGraph&) = delete;
  DecodeGraph& operator=(const DecodeGraph&) = delete;

  // tokens [batch] or [batch, 1] int64 on the device, at position cache.length(): advances the
  // cache by one and returns the logits [batch, padded_vocab] in fp32. With the graph they are
  // its static output, overwritten by the next Step (copy what must outlive it). Throws
  // c10::Error (a full cache, a failed capture, LibTorch's own errors; Step on a greedy graph).
  torch::Tensor Step(const torch::Tensor& tokens);

  // A greedy graph's step: `tokens` as for Step (the first step's are chosen from the prefill's
  // logits; after that, pass what the last StepGreedy returned, which needs no copy). Advances
  // the cache by one and returns every row's next token [batch] int64 on the device: the step's
  // own token input, which the next step reads and then overwrites, so read it stream-ordered
  // before the next step (TokenReadback). Throws as Step (StepGreedy on a sampling graph).
  torch::Tensor StepGreedy(const torch::Tensor& tokens);

  bool greedy() const { return greedy_vocab_ > 0; }
  bool capturing() const { return capture_; }
  // Steps replayed from the graph so far (0 without capture).
  int64_t replays() const { return replays_; }
  // Host time of the warm-up and capture (0 before the first Step or without capture).
  double capture_seconds() const { return capture_seconds_; }

 private:
  struct Graph;  // the CUDA graph (decode_graph.cc; empty without CUDA)

  DecodeGraph(model::GptModel& gpt, KvCache& cache, const torch::Device& device, bool capture,
              const DecodeStepOptions& step, int64_t greedy_vocab);
  // The step's inputs set, the step run (replayed, captured first if need be) and the cache
  // advanced; returns the step's output (logits, or the greedy graph's chosen tokens).
  torch::Tensor Advance(const torch::Tensor& tokens);
  // The step as captured: the logits in fp32, or the greedy graph's argmax written into the
  // token input (returned as [batch]).
  torch::Tensor RunStep();
  void Capture();

  model::GptModel& gpt_;
  KvCache& cache_;
  torch::Device device_;
  bool capture_;
  DecodeStepOptions step_options_;
  int64_t greedy_vocab_;
  // Declared before the tensors it made (the static logits): destroyed after them.
  std::unique_ptr<Graph> graph_;
  DecodeInputs inputs_;
  torch::Tensor logits_;  // the graph's output; undefined until captured
  // The position the device's inputs_.position holds once the enqueued work has run (-1:
  // unknown), so that the host fills it only when it differs.
  int64_t device_position_ = -1;
  int64_t replays_ = 0;
  double capture_seconds_ = 0.0;
};

}  // namespace mt::generate

#endif  // MT_WORKER_GENERATE_DECODE_GRAPH_H_
