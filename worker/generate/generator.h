// Text generation from a GPT model: prefill the prompt once, then decode one token per step
// for every sample with the KV cache (kv_cache.h, cached_forward.h), choosing each token as
// sampling.h says. The samples of one call are one batch (the prompt repeated num_samples
// times); each ends at max_new_tokens, at the model's context, at the end-of-document token,
// or when its text contains the stop text. Text is streamed as produced: on_text receives
// each sample's new text, holding back bytes that might still turn out to start the stop text
// (the stop text itself is never emitted).
//
// On CUDA the decode steps run StaticDecodeStep (decode_step.h) through a DecodeGraph
// (decode_graph.h): replayed from a CUDA graph (cuda_graph, the default) or eagerly; the prefill
// is ForwardWithCache. Greedy decoding there chooses the tokens inside the step (the argmax in
// the graph, fed straight to the next step; DecodeStepOptions::greedy_in_step); sampling
// chooses from the step's logits. On the CPU, and for a tensor-parallel shard, every step is
// ForwardWithCache. A Generator keeps the KV cache and the captured graph between calls of the
// same shape and way of choosing; Generate() is a Generator's one call.
//
// No LibTorch in this header. Thread-compatible.
#ifndef MT_WORKER_GENERATE_GENERATOR_H_
#define MT_WORKER_GENERATE_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/generate/decode_step_options.h"
#include "worker/generate/sampling.h"

namespace mt::model {
class GptModel;
}  // namespace mt::model

namespace mt::generate {

class GeneratorState;  // generator.cc

struct GenerateOptions {
  int64_t max_new_tokens = 64;  // >= 1 (--max-new-tokens)
  int64_t num_samples = 1;      // >= 1 (-n)
  SamplingOptions sampling;
  std::string stop;  // stop text; empty = none (--stop)
  int32_t eod = -1;  // end-of-document token that ends a sample; -1 = none
  // On CUDA, replay each decode step from a CUDA graph (decode_graph.h); false runs the same
  // step's kernels one by one. No effect on the CPU or in a build without CUDA graphs.
  bool cuda_graph = true;
  // Enqueue the next decode step before the host reads this step's tokens, so that the device
  // runs it while the host streams them (token_readback.h); false reads each step's tokens
  // first. The same tokens either way; for comparing the two (decode_bench --no-read-ahead).
  bool read_ahead = true;
  // How the static decode step runs on CUDA (decode_step.h; decode_bench --no-norm-in-linear).
  DecodeStepOptions step;
};

// INVALID_ARGUMENT naming the flag: the sampling values, --max-new-tokens, -n.
absl::Status ValidateGenerate(const GenerateOptions& options);

struct GeneratedSample {
  std::vector<int32_t> tokens;  // generated tokens (not the prompt; the eod token excluded)
  std::string text;             // their text, cut before the stop text
  // "length" (max_new_tokens), "context" (the model's positions), "eod", "stop".
  std::string finish_reason;
};

struct GenerateResult {
  std::vector<GeneratedSample> samples;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;  // over all samples, the stop and eod tokens included
  double prefill_seconds = 0.0;  // prompt in, first tokens out (time to first token)
  double decode_seconds = 0.0;   // the decode steps after it
  int64_t kv_cache_bytes = 0;
  int64_t graph_replays = 0;           // decode steps replayed from a CUDA graph
  double graph_capture_seconds = 0.0;  // its warm-up and capture, if this call made it (within
                                       // decode_seconds)
};

// Token ids -> text (the tokenizer's Decode).
using Detokenizer = std::function<std::string(absl::Span<const int32_t>)>;
// New text of sample `sample`, in order.
using TextCallback = std::function<void(int64_t sample, absl::string_view text)>;

// Generates from `prompt` (token ids, at least one, fewer than the model's positions: else
// INVALID_ARGUMENT naming --prompt). The model holds every layer on one device, in eval mode
// for the call: the whole model, or a tensor-parallel shard (no sequence parallelism) whose TP
// ranks all make this call with the same arguments; they decode together (cached_forward.h),
// TP rank 0 picks each token and broadcasts it, so every rank produces the same samples (the
// text a caller streams from rank 0 is the one-device model's, up to the last bits of the
// sharded sums). `on_text` may be empty. LibTorch errors come back as INTERNAL
// (RESOURCE_EXHAUSTED for out-of-memory).
absl::StatusOr<GenerateResult> Generate(model::GptModel& gpt, const std::vector<int32_t>& prompt,
                                        const GenerateOptions& options,
                                        const Detokenizer& detokenize,
                                        const TextCallback& on_text = {});

// Generate with state kept between calls: the KV cache and (CUDA) the decode step's graph are
// reused while the batch (num_samples), the length (prompt + max_new_tokens, at most the
// context), cuda_graph, the step options and the model's output weight stay the same; another
// shape replaces them (a new capture). `gpt` must outlive the Generator and keep its
// parameters' storage while it holds a graph (in-place updates are fine; Reset() drops the
// state).
class Generator {
 public:
  explicit Generator(model::GptModel& gpt);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // As the free Generate above, on this Generator's model.
  absl::StatusOr<GenerateResult> Generate(const std::vector<int32_t>& prompt,
                                          const GenerateOptions& options,
                                          const Detokenizer& detokenize,
                                          const TextCallback& on_text = {});
  // Frees the cache and the graph.
  void Reset();

 private:
  model::GptModel& gpt_;
  std::unique_ptr<GeneratorState> state_;
};

}  // namespace mt::generate

#endif  // MT_WORKER_GENERATE_GENERATOR_H_
