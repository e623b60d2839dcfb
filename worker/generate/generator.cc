#include "worker/generate/generator.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/durations.h"
#include "common/base/status_macros.h"
#include "worker/generate/cached_forward.h"
#include "worker/generate/decode_graph.h"
#include "worker/generate/kv_cache.h"
#include "worker/generate/token_readback.h"
#include "worker/model/gpt.h"
#include "worker/parallel/tensor_parallel.h"

namespace mt::generate {
namespace {

using Clock = std::chrono::steady_clock;

// One sample's progress and what of its text was already handed to on_text.
struct SampleState {
  GeneratedSample out;
  bool done = false;
  size_t emitted = 0;
};

class Streamer {
 public:
  Streamer(const GenerateOptions& o, const Detokenizer& detokenize, const TextCallback& on_text)
      : options_(o), detokenize_(detokenize), on_text_(on_text) {}

  // A token chosen for sample `i`; `last` = no token can follow it (length or context).
  void Add(int64_t i, SampleState& s, int32_t token, const char* reason_if_last, bool last) {
    if (options_.eod >= 0 && token == options_.eod) return Finish(i, s, "eod");
    s.out.tokens.push_back(token);
    s.out.text = detokenize_(s.out.tokens);
    const std::string& stop = options_.stop;
    if (!stop.empty()) {
      const size_t from = s.emitted;
      const size_t at = s.out.text.find(stop, from);
      if (at != std::string::npos) {
        s.out.text.resize(at);
        return Finish(i, s, "stop");
      }
    }
    if (last) return Finish(i, s, reason_if_last);
    // Hold back what could be the start of the stop text.
    const size_t keep = stop.empty() ? 0 : stop.size() - 1;
    const size_t safe = s.out.text.size() > keep ? s.out.text.size() - keep : 0;
    Emit(i, s, std::max(safe, s.emitted));
  }

 private:
  void Finish(int64_t i, SampleState& s, const char* reason) {
    s.out.finish_reason = reason;
    s.done = true;
    Emit(i, s, s.out.text.size());
  }
  void Emit(int64_t i, SampleState& s, size_t upto) {
    if (upto > s.emitted && on_text_) {
      on_text_(i, absl::string_view(s.out.text).substr(s.emitted, upto - s.emitted));
    }
    s.emitted = std::max(s.emitted, upto);
  }

  const GenerateOptions& options_;
  const Detokenizer& detokenize_;
  const TextCallback& on_text_;
};

}  // namespace

// The cache and the decode step of the last call, reused by the next call of the same shape.
class GeneratorState {
 public:
  struct Key {
    int64_t batch = 0;
    int64_t max_len = 0;
    bool graph = false;
    bool greedy = false;           // the step chooses greedy tokens itself (DecodeGraph)
    const void* weight = nullptr;  // the output weight's data: a moved or re-cast model differs
    model::AttentionBackend backend = model::AttentionBackend::kAuto;
    DecodeStepOptions step;

    bool operator==(const Key& o) const {
      return batch == o.batch && max_len == o.max_len && graph == o.graph && greedy == o.greedy &&
             weight == o.weight && backend == o.backend && step == o.step;
    }
  };

  Key key;
  KvCache cache;
  std::unique_ptr<DecodeGraph> step;  // CUDA only; after the cache: destroyed before it
};

namespace {

// `state` ready for a call of `n` rows and `max_len` positions, its cache emptied. `greedy`:
// the decode step chooses the tokens (greedy decoding with DecodeStepOptions::greedy_in_step).
absl::Status PrepareState(model::GptModel& gpt, int64_t n, int64_t max_len, bool cuda_graph,
                          bool greedy, const DecodeStepOptions& step,
                          std::unique_ptr<GeneratorState>& state) {
  const torch::Tensor weight = gpt.output_weight();
  const model::ModelShard& shard = gpt.shard();
  // The static decode step (decode_step.h) is a whole model's: a TP shard decodes with
  // ForwardWithCache, whose linears do the shard's collectives.
  const bool whole = shard.tp_size == 1;
  GeneratorState::Key key;
  key.batch = n;
  key.max_len = max_len;
  key.graph = whole && weight.is_cuda() && cuda_graph && DecodeGraph::Available();
  key.greedy = whole && weight.is_cuda() && greedy;
  key.weight = weight.data_ptr();
  key.backend = gpt.config().attention_backend;
  key.step = step;
  if (state != nullptr && state->key == key) {
    state->cache.Reset();
    return absl::OkStatus();
  }
  state.reset();  // the old cache and graph go before the new ones are made
  auto fresh = std::make_unique<GeneratorState>();
  fresh->key = key;
  MT_ASSIGN_OR_RETURN(fresh->cache,
                      KvCache::Create(gpt.config(), n, max_len, weight.options(),
                                      gpt.config().num_attention_heads / shard.tp_size));
  if (whole && weight.is_cuda()) {
    MT_ASSIGN_OR_RETURN(fresh->step,
                        DecodeGraph::Create(gpt, fresh->cache, weight.device(), key.graph, step,
                                            key.greedy ? gpt.config().vocab_size : 0));
  }
  state = std::move(fresh);
  return absl::OkStatus();
}

// The prompt repeated in `n` rows: [n, prompt size] int64 on `device`.
torch::Tensor PromptRows(const std::vector<int32_t>& prompt, int64_t n,
                         const torch::Device& device) {
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  const int64_t p = static_cast<int64_t>(ids.size());
  return torch::tensor(ids, torch::kLong).to(device).unsqueeze(0).expand({n, p}).contiguous();
}

// The next token of every row. Over tensor parallelism TP rank 0 samples and broadcasts its
// choice: every rank feeds the same tokens back and ends the same samples at the same step,
// whatever a rank's logits differ by in their last bits, and rank 0 draws from the generator
// exactly as one device does.
torch::Tensor ChooseTokens(const model::ModelShard& shard, const torch::Tensor& logits,
                           int64_t vocab_size, const SamplingOptions& sampling,
                           at::Generator& generator) {
  if (shard.tp_size == 1) return NextTokens(logits, vocab_size, sampling, generator);
  torch::Tensor next = shard.tp_rank == 0
                           ? NextTokens(logits, vocab_size, sampling, generator).contiguous()
                           : torch::zeros({logits.size(0)}, logits.options().dtype(torch::kLong));
  parallel::Broadcast(next, /*root=*/0, shard.group());
  return next;
}

// What a decode step gives: its logits, or the tokens a greedy decode graph chose itself.
struct StepOutput {
  torch::Tensor logits;
  torch::Tensor tokens;
};

// The step that feeds `next` [n] back: through the decode graph where there is one, else the
// cached forward.
StepOutput Decode(DecodeGraph* graph, model::GptModel& gpt, const torch::Tensor& next,
                  KvCache& cache) {
  if (graph == nullptr) return {ForwardWithCache(gpt, next.view({next.size(0), 1}), cache), {}};
  if (graph->greedy()) return {torch::Tensor(), graph->StepGreedy(next)};
  return {graph->Step(next), torch::Tensor()};
}

// Prefill, then decode until every sample is done. `state` was prepared for this call.
absl::StatusOr<GenerateResult> GenerateImpl(model::GptModel& gpt,
                                            const std::vector<int32_t>& prompt,
                                            const GenerateOptions& o, const Detokenizer& detokenize,
                                            const TextCallback& on_text, GeneratorState& state) {
  torch::NoGradGuard no_grad;
  const model::GptConfig& config = gpt.config();
  const int64_t n = o.num_samples;
  const int64_t p = static_cast<int64_t>(prompt.size());
  const int64_t max_len = state.key.max_len;
  KvCache& cache = state.cache;
  DecodeGraph* graph = state.step.get();
  const int64_t replays_before = graph != nullptr ? graph->replays() : 0;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(o.sampling.seed);
  const torch::Tensor input = PromptRows(prompt, n, gpt.output_weight().device());

  GenerateResult result;
  result.prompt_tokens = p;
  result.kv_cache_bytes = cache.bytes();
  std::vector<SampleState> samples(static_cast<size_t>(n));
  Streamer streamer(o, detokenize, on_text);
  Clock::time_point start = Clock::now();
  StepOutput out{ForwardWithCache(gpt, input, cache), torch::Tensor()};
  const model::ModelShard& shard = gpt.shard();
  TokenReadback readback(n, input.device());
  for (int64_t step = 0;; ++step) {
    const torch::Tensor next =
        out.tokens.defined()
            ? out.tokens
            : ChooseTokens(shard, out.logits, config.vocab_size, o.sampling, generator);
    readback.Enqueue(next);
    const bool by_length = step + 1 >= o.max_new_tokens;
    const bool last = by_length || cache.length() >= max_len;
    // The next step is enqueued before the host reads these tokens (it needs only `next`, on the
    // device), so that the device runs it while the host streams them; it is wasted where every
    // sample stops here at a stop text. Not at the first token: the first step captures the CUDA
    // graph, which is no part of the time to first token.
    const bool ahead = o.read_ahead && step > 0 && !last;
    if (ahead) out = Decode(graph, gpt, next, cache);
    const int64_t* chosen_ids = readback.Wait();
    if (step == 0) {
      result.prefill_seconds = SecondsSince(start);
      start = Clock::now();
    }
    bool all_done = true;
    for (int64_t i = 0; i < n; ++i) {
      SampleState& s = samples[static_cast<size_t>(i)];
      if (s.done) continue;
      ++result.generated_tokens;
      streamer.Add(i, s, static_cast<int32_t>(chosen_ids[i]), by_length ? "length" : "context",
                   last);
      all_done = all_done && s.done;
    }
    if (all_done) break;
    if (!ahead) out = Decode(graph, gpt, next, cache);
  }
  result.decode_seconds = SecondsSince(start);
  if (graph != nullptr) {
    result.graph_replays = graph->replays() - replays_before;
    if (replays_before == 0) result.graph_capture_seconds = graph->capture_seconds();
  }
  for (SampleState& s : samples) result.samples.push_back(std::move(s.out));
  return result;
}

absl::Status ValidatePrompt(const model::GptModel& gpt, const std::vector<int32_t>& prompt) {
  const int64_t context = gpt.config().max_positions();
  if (prompt.empty()) {
    return absl::InvalidArgumentError("--prompt: the prompt is empty (want at least one token)");
  }
  // A prompt may fill the context: the token chosen after it is never fed back, so it needs
  // no position (generation then ends after that one token, finish reason "context").
  if (static_cast<int64_t>(prompt.size()) > context) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prompt: ", prompt.size(), " tokens exceed the model's context of ", context,
                     " tokens; shorten the prompt to at most ", context, " tokens"));
  }
  for (int32_t id : prompt) {
    if (id < 0 || id >= gpt.config().vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt: token id ", id, " outside [0, ", gpt.config().vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

// LibTorch's error as a status: RESOURCE_EXHAUSTED for out-of-memory, INTERNAL otherwise.
absl::Status FromTorchError(const c10::Error& e) {
  const std::string what = e.what_without_backtrace();
  return absl::StrContains(what, "out of memory")
             ? absl::ResourceExhaustedError(absl::StrCat("generation: ", what))
             : absl::InternalError(absl::StrCat("generation: ", what));
}

}  // namespace

absl::Status ValidateGenerate(const GenerateOptions& o) {
  MT_RETURN_IF_ERROR(ValidateSampling(o.sampling));
  if (o.max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-new-tokens ", o.max_new_tokens, ": want an integer >= 1"));
  }
  if (o.num_samples < 1 || o.num_samples > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("-n ", o.num_samples, ": want an integer in [1, 4096]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<GenerateResult> Generate(model::GptModel& gpt, const std::vector<int32_t>& prompt,
                                        const GenerateOptions& options,
                                        const Detokenizer& detokenize,
                                        const TextCallback& on_text) {
  Generator generator(gpt);
  return generator.Generate(prompt, options, detokenize, on_text);
}

Generator::Generator(model::GptModel& gpt) : gpt_(gpt) {}
Generator::~Generator() = default;
void Generator::Reset() { state_.reset(); }

absl::StatusOr<GenerateResult> Generator::Generate(const std::vector<int32_t>& prompt,
                                                   const GenerateOptions& options,
                                                   const Detokenizer& detokenize,
                                                   const TextCallback& on_text) {
  MT_RETURN_IF_ERROR(ValidateGenerate(options));
  MT_RETURN_IF_ERROR(ValidatePrompt(gpt_, prompt));
  const int64_t max_len = std::min(gpt_.config().max_positions(),
                                   static_cast<int64_t>(prompt.size()) + options.max_new_tokens);
  const bool was_training = gpt_.is_training();
  gpt_.eval();
  absl::StatusOr<GenerateResult> out;
  try {
    const bool greedy = options.sampling.temperature == 0.0 && options.step.greedy_in_step;
    absl::Status prepared = PrepareState(gpt_, options.num_samples, max_len, options.cuda_graph,
                                         greedy, options.step, state_);
    out = prepared.ok() ? GenerateImpl(gpt_, prompt, options, detokenize, on_text, *state_)
                        : absl::StatusOr<GenerateResult>(prepared);
  } catch (const c10::Error& e) {
    out = FromTorchError(e);
  }
  // After an error the cache or a half-made capture may be unusable: the next call starts anew.
  if (!out.ok()) state_.reset();
  gpt_.train(was_training);
  return out;
}

}  // namespace mt::generate
