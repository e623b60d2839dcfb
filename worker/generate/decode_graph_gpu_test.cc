// The decode step replayed from a CUDA graph (decode_graph.h) on the GPU, label gpu (skips
// without CUDA): greedy tokens equal the same step run eagerly, token for token, over 64 new
// tokens of a small random GPT in fp32 and bf16 with the math and the fused attention, at batch
// 1 and 3; in fp32 they also equal the dynamic-shape ForwardWithCache decoding; a replay
// allocates nothing (the CUDA caching allocator's counters); a Generator captures once and
// replays on its later calls; with int8 weights the graph's greedy tokens equal the eager step's,
// the dynamic-shape decoding's and the whole-sequence forward's. The step with the fused
// backend runs the decode-attention kernel (kernels::DecodeAttention: head_dim 32 here); against
// the step with kMath (index_copy_ + masked math over the whole cache) on the same model its
// logits agree within 1e-4 of their largest in fp32 (0.1 in bf16) over 40 steps, and the first
// layer's cache (the same inputs on both paths) is the same bit for bit. A stop text that ends
// the samples while the next step is enqueued leaves the Generator's later calls as they were,
// decode_bench's comparison switches (no read-ahead, no LayerNorm inside the linear layers, the
// greedy token chosen outside the step) give the same tokens, a greedy graph feeds its own
// tokens back without a copy or an allocation, and TokenReadback's pinned copy reads the tokens
// as enqueued.
// The lead runs it on the GPU machine:
//   ctest --test-dir BUILD -R "DecodeGraph(Replay)?GpuTest|TokenReadbackGpuTest"
//   --output-on-failure
#include <torch/cuda.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/generate/cached_forward.h"
#include "worker/generate/decode_graph.h"
#include "worker/generate/generator.h"
#include "worker/generate/kv_cache.h"
#include "worker/generate/test_models.h"
#include "worker/generate/token_readback.h"
#include "worker/kernels/decode_attention.h"
#include "worker/model/quantize.h"

#if MT_GENERATE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace mt::generate {
namespace {

constexpr int64_t kNew = 64;
constexpr int64_t kVocab = 1000;

bool NoCudaGraphs() { return !torch::cuda::is_available() || !DecodeGraph::Available(); }

TinyGptOptions GpuGpt(torch::ScalarType dtype, model::AttentionBackend backend) {
  TinyGptOptions t;
  t.layers = 4;
  t.hidden = 128;
  t.heads = 4;
  t.context = 128;
  t.vocab = kVocab;
  t.backend = backend;
  t.device = torch::Device(torch::kCUDA);
  t.dtype = dtype;
  return t;
}

std::vector<int32_t> Prompt() {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < 16; ++i) p.push_back((i * 37 + 11) % static_cast<int32_t>(kVocab));
  return p;
}

GenerateOptions Greedy(int64_t batch, bool graph) {
  GenerateOptions o;
  o.max_new_tokens = kNew;
  o.num_samples = batch;
  o.sampling.temperature = 0.0;
  o.cuda_graph = graph;
  return o;
}

// Greedy with ForwardWithCache for every step (the dynamic-shape path of the CPU).
std::vector<int32_t> DynamicGreedy(model::GptModel& gpt, const std::vector<int32_t>& prompt) {
  torch::NoGradGuard no_grad;
  const torch::Tensor weight = gpt.output_weight();
  const int64_t p = static_cast<int64_t>(prompt.size());
  auto cache = KvCache::Create(gpt.config(), 1, p + kNew, weight.options());
  EXPECT_TRUE(cache.ok()) << cache.status();
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  torch::Tensor logits = ForwardWithCache(
      gpt, torch::tensor(ids, torch::kLong).to(weight.device()).view({1, p}), *cache);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < kNew; ++i) {
    const torch::Tensor next = logits.narrow(-1, 0, kVocab).argmax(-1);
    out.push_back(static_cast<int32_t>(next.item<int64_t>()));
    if (i + 1 < kNew) logits = ForwardWithCache(gpt, next.view({1, 1}), *cache);
  }
  return out;
}

using Case = std::tuple<torch::ScalarType, model::AttentionBackend, int64_t>;
class DecodeGraphGpuTest : public ::testing::TestWithParam<Case> {};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const auto [dtype, backend, batch] = info.param;
  return absl::StrCat(dtype == torch::kFloat ? "Fp32" : "Bf16",
                      backend == model::AttentionBackend::kMath ? "Math" : "Fused", "Batch", batch);
}

TEST_P(DecodeGraphGpuTest, GreedyGraphEqualsEagerTokenForToken) {
  if (NoCudaGraphs()) GTEST_SKIP() << "no CUDA (or a build without CUDA graphs)";
  const auto [dtype, backend, batch] = GetParam();
  auto gpt = TinyGpt(GpuGpt(dtype, backend));
  ASSERT_NE(gpt, nullptr);
  const std::vector<int32_t> prompt = Prompt();
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult eager,
                          Generate(*gpt, prompt, Greedy(batch, false), LetterText));
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult graph,
                          Generate(*gpt, prompt, Greedy(batch, true), LetterText));
  ASSERT_EQ(graph.samples.size(), static_cast<size_t>(batch));
  for (size_t i = 0; i < graph.samples.size(); ++i) {
    EXPECT_EQ(graph.samples[i].tokens.size(), static_cast<size_t>(kNew)) << "sample " << i;
    EXPECT_EQ(graph.samples[i].tokens, eager.samples[i].tokens) << "sample " << i;
  }
  EXPECT_EQ(eager.graph_replays, 0);
  EXPECT_EQ(graph.graph_replays, kNew - 1);  // every decode step; the first token is prefill's
  EXPECT_GT(graph.graph_capture_seconds, 0.0);
  if (dtype == torch::kFloat && batch == 1) {
    EXPECT_EQ(graph.samples[0].tokens, DynamicGreedy(*gpt, prompt));
  }
}

INSTANTIATE_TEST_SUITE_P(DtypeAttentionBatch, DecodeGraphGpuTest,
                         ::testing::Combine(::testing::Values(torch::kFloat, torch::kBFloat16),
                                            ::testing::Values(model::AttentionBackend::kMath,
                                                              model::AttentionBackend::kAuto),
                                            ::testing::Values(int64_t{1}, int64_t{3})),
                         CaseName);

// Int8 weights (--quantize int8): the decode step's linear layers run the int8 GEMV kernel.
// Greedy through the graph equals the eager step, and in fp32 the dynamic-shape decoding and the
// whole-sequence forward (which past 16 rows dequantizes instead: other code, same weights).
TEST(DecodeGraphInt8GpuTest, GreedyGraphEqualsEagerAndTheFullForward) {
  if (NoCudaGraphs()) GTEST_SKIP() << "no CUDA (or a build without CUDA graphs)";
  for (const torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    auto gpt = TinyGpt(GpuGpt(dtype, model::AttentionBackend::kAuto));
    ASSERT_NE(gpt, nullptr);
    MT_ASSERT_OK(model::QuantizeInt8Linears(*gpt));
    const std::vector<int32_t> prompt = Prompt();
    for (const int64_t batch : {int64_t{1}, int64_t{3}}) {
      MT_ASSERT_OK_AND_ASSIGN(GenerateResult eager,
                              Generate(*gpt, prompt, Greedy(batch, false), LetterText));
      MT_ASSERT_OK_AND_ASSIGN(GenerateResult graph,
                              Generate(*gpt, prompt, Greedy(batch, true), LetterText));
      ASSERT_EQ(graph.samples.size(), static_cast<size_t>(batch));
      for (size_t i = 0; i < graph.samples.size(); ++i) {
        EXPECT_EQ(graph.samples[i].tokens, eager.samples[i].tokens)
            << "sample " << i << (dtype == torch::kFloat ? " fp32" : " bf16");
      }
      EXPECT_EQ(graph.graph_replays, kNew - 1);
      if (dtype != torch::kFloat || batch != 1) continue;
      EXPECT_EQ(graph.samples[0].tokens, DynamicGreedy(*gpt, prompt));
      torch::NoGradGuard no_grad;
      std::vector<int64_t> seq(prompt.begin(), prompt.end());
      for (int64_t i = 0; i < kNew; ++i) {
        const torch::Tensor ids = torch::tensor(seq, torch::kLong).to(torch::kCUDA).unsqueeze(0);
        const int64_t next =
            ReferenceLastLogits(*gpt, ids).narrow(-1, 0, kVocab).argmax(-1).item<int64_t>();
        ASSERT_EQ(next, graph.samples[0].tokens[static_cast<size_t>(i)]) << "token " << i;
        seq.push_back(next);
      }
    }
  }
}

TEST(DecodeAttentionStepGpuTest, KernelStepMatchesTheMathStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    auto gpt = TinyGpt(GpuGpt(dtype, model::AttentionBackend::kAuto));
    ASSERT_NE(gpt, nullptr);
    torch::NoGradGuard no_grad;
    const torch::TensorOptions options = gpt->output_weight().options();
    const torch::Device device = options.device();
    const auto longs = torch::TensorOptions(torch::kLong).device(device);
    constexpr int64_t kBatch = 3, kPrompt = 20, kSteps = 40;
    const model::GptConfig& c = gpt->config();
    {
      // The kernel takes this model's layers (else this test would compare the math with itself).
      const torch::Tensor token =
          torch::zeros({kBatch, 1, c.num_attention_heads, c.head_dim()}, options);
      const torch::Tensor cache =
          torch::zeros({kBatch, c.num_attention_heads, kPrompt + kSteps, c.head_dim()}, options);
      ASSERT_TRUE(kernels::DecodeAttentionAvailable(token, token, token, torch::zeros({1}, longs),
                                                    cache, cache));
    }
    MT_ASSERT_OK_AND_ASSIGN(KvCache kernel_cache,
                            KvCache::Create(c, kBatch, kPrompt + kSteps, options));
    MT_ASSERT_OK_AND_ASSIGN(KvCache math_cache,
                            KvCache::Create(c, kBatch, kPrompt + kSteps, options));
    torch::manual_seed(5);
    const torch::Tensor prompt = torch::randint(0, kVocab, {kBatch, kPrompt}, longs);
    ForwardWithCache(*gpt, prompt, kernel_cache);
    ForwardWithCache(*gpt, prompt, math_cache);
    DecodeInputs in = DecodeInputs::For(kernel_cache, device);
    const double tol = dtype == torch::kFloat ? 1e-4 : 0.1;
    for (int64_t i = 0; i < kSteps; ++i) {
      in.tokens.copy_(torch::randint(0, kVocab, {kBatch, 1}, longs));
      in.position.fill_(kernel_cache.length());
      gpt->SetAttentionBackend(model::AttentionBackend::kAuto);
      const torch::Tensor kernel = StaticDecodeStep(*gpt, in, kernel_cache);
      gpt->SetAttentionBackend(model::AttentionBackend::kMath);
      const torch::Tensor math = StaticDecodeStep(*gpt, in, math_cache);
      kernel_cache.Advance(1);
      math_cache.Advance(1);
      const double scale = math.abs().max().item<double>();
      EXPECT_LE((kernel - math).abs().max().item<double>(), tol * scale)
          << "step " << i << (dtype == torch::kFloat ? " fp32" : " bf16");
    }
    EXPECT_TRUE(torch::equal(kernel_cache.keys(0), math_cache.keys(0)));
    EXPECT_TRUE(torch::equal(kernel_cache.values(0), math_cache.values(0)));
  }
}

// The switches decode_bench compares: without the read-ahead the graph's greedy tokens are the
// same bit for bit (the same kernels); without the LayerNorm inside the linear layers (batch 1,
// fp32: the LayerNorm kernel's sums in another order) they are the same tokens.
TEST(DecodeGraphReplayGpuTest, TheComparisonSwitchesGiveTheSameTokens) {
  if (NoCudaGraphs()) GTEST_SKIP() << "no CUDA (or a build without CUDA graphs)";
  auto gpt = TinyGpt(GpuGpt(torch::kFloat, model::AttentionBackend::kAuto));
  ASSERT_NE(gpt, nullptr);
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult base,
                          Generate(*gpt, Prompt(), Greedy(1, true), LetterText));
  GenerateOptions waited = Greedy(1, true);
  waited.read_ahead = false;
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult no_ahead, Generate(*gpt, Prompt(), waited, LetterText));
  EXPECT_EQ(no_ahead.samples[0].tokens, base.samples[0].tokens);
  GenerateOptions unfused = Greedy(1, true);
  unfused.step.norm_in_linear = false;
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult no_norm, Generate(*gpt, Prompt(), unfused, LetterText));
  EXPECT_EQ(no_norm.samples[0].tokens, base.samples[0].tokens);
  EXPECT_EQ(no_norm.samples[0].tokens.size(), static_cast<size_t>(kNew));
}

// The CUDA caching allocator's count of allocations on `device` so far (0 without CUDA).
int64_t AllocationsSoFar(const torch::Device& device) {
#if MT_GENERATE_WITH_CUDA
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index())
      .allocation[0]
      .allocated;
#else
  (void)device;
  return 0;
#endif
}

// Greedy decoding chooses each token inside the step (the argmax in the graph, fed straight to
// the next step) by default; chosen outside it from the fp32 logits, as sampling does, the
// tokens are the same, in fp32 and bf16, at batch 1 and 3, with and without the graph.
TEST(DecodeGraphReplayGpuTest, GreedyInTheStepGivesTheTokensChosenOutsideIt) {
  if (NoCudaGraphs()) GTEST_SKIP() << "no CUDA (or a build without CUDA graphs)";
  for (const torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    auto gpt = TinyGpt(GpuGpt(dtype, model::AttentionBackend::kAuto));
    ASSERT_NE(gpt, nullptr);
    for (const int64_t batch : {int64_t{1}, int64_t{3}}) {
      for (const bool graph : {true, false}) {
        const std::string where = absl::StrCat(dtype == torch::kFloat ? "fp32" : "bf16", " batch ",
                                               batch, graph ? " graph" : " eager");
        MT_ASSERT_OK_AND_ASSIGN(GenerateResult inside,
                                Generate(*gpt, Prompt(), Greedy(batch, graph), LetterText));
        GenerateOptions o = Greedy(batch, graph);
        o.step.greedy_in_step = false;
        MT_ASSERT_OK_AND_ASSIGN(GenerateResult outside, Generate(*gpt, Prompt(), o, LetterText));
        ASSERT_EQ(inside.samples.size(), static_cast<size_t>(batch)) << where;
        for (size_t i = 0; i < inside.samples.size(); ++i) {
          EXPECT_EQ(inside.samples[i].tokens.size(), static_cast<size_t>(kNew)) << where;
          EXPECT_EQ(inside.samples[i].tokens, outside.samples[i].tokens)
              << where << " sample " << i;
        }
        EXPECT_EQ(inside.graph_replays, graph ? kNew - 1 : 0) << where;
      }
    }
  }
}

// A greedy DecodeGraph driven directly: each StepGreedy returns the step's own token input,
// which the next StepGreedy reads without a copy, with the same tokens as the argmax of a
// sampling graph's logits over the same prefilled cache; its replays allocate nothing; the
// cache fills to its last position (captured there, the warm-up steps leave the position as
// it was) and a step past it throws, as does Step on a greedy graph.
TEST(DecodeGraphReplayGpuTest, AGreedyGraphFeedsItsOwnTokensBack) {
  if (NoCudaGraphs()) GTEST_SKIP() << "no CUDA (or a build without CUDA graphs)";
  auto gpt = TinyGpt(GpuGpt(torch::kBFloat16, model::AttentionBackend::kAuto));
  ASSERT_NE(gpt, nullptr);
  torch::NoGradGuard no_grad;
  const torch::Device device = gpt->output_weight().device();
  const auto longs = torch::TensorOptions(torch::kLong).device(device);
  constexpr int64_t kBatch = 2, kPrompt = 10, kSteps = 40;
  const torch::Tensor prompt = torch::randint(0, kVocab, {kBatch, kPrompt}, longs);
  MT_ASSERT_OK_AND_ASSIGN(
      KvCache greedy_cache,
      KvCache::Create(gpt->config(), kBatch, kPrompt + kSteps, gpt->output_weight().options()));
  MT_ASSERT_OK_AND_ASSIGN(
      KvCache sampling_cache,
      KvCache::Create(gpt->config(), kBatch, kPrompt + kSteps, gpt->output_weight().options()));
  const torch::Tensor first =
      ForwardWithCache(*gpt, prompt, greedy_cache).narrow(-1, 0, kVocab).argmax(-1);
  ForwardWithCache(*gpt, prompt, sampling_cache);
  MT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DecodeGraph> greedy,
                          DecodeGraph::Create(*gpt, greedy_cache, device, /*capture=*/true, {},
                                              /*greedy_vocab=*/kVocab));
  MT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DecodeGraph> sampling,
                          DecodeGraph::Create(*gpt, sampling_cache, device, /*capture=*/true));
  EXPECT_TRUE(greedy->greedy());
  EXPECT_FALSE(sampling->greedy());
  EXPECT_THROW(greedy->Step(first), c10::Error);
  EXPECT_THROW(sampling->StepGreedy(first), c10::Error);
  EXPECT_EQ(greedy_cache.length(), kPrompt);  // the refused steps did nothing

  torch::Tensor mine = greedy->StepGreedy(first);  // captures
  torch::Tensor theirs = sampling->Step(first).narrow(-1, 0, kVocab).argmax(-1);
  ASSERT_EQ(mine.dim(), 1);
  ASSERT_EQ(mine.size(0), kBatch);
  EXPECT_TRUE(torch::equal(mine, theirs));
  const void* input = mine.data_ptr();
  torch::cuda::synchronize();
  for (int64_t i = 1; i < kSteps; ++i) {
    const int64_t before = AllocationsSoFar(device);
    mine = greedy->StepGreedy(mine);
    EXPECT_EQ(AllocationsSoFar(device), before) << "step " << i;
    EXPECT_EQ(mine.data_ptr(), input) << "step " << i;
    theirs = sampling->Step(theirs).narrow(-1, 0, kVocab).argmax(-1);
    ASSERT_TRUE(torch::equal(mine, theirs)) << "step " << i;
  }
  EXPECT_EQ(greedy->replays(), kSteps);
  EXPECT_EQ(greedy_cache.length(), kPrompt + kSteps);
  EXPECT_THROW(greedy->StepGreedy(mine), c10::Error);  // the cache is full

  // Captured with one position left: the warm-up steps must not move the position past it.
  MT_ASSERT_OK_AND_ASSIGN(KvCache last_cache, KvCache::Create(gpt->config(), kBatch, kPrompt + 1,
                                                              gpt->output_weight().options()));
  ForwardWithCache(*gpt, prompt, last_cache);
  MT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DecodeGraph> last,
                          DecodeGraph::Create(*gpt, last_cache, device, /*capture=*/true, {},
                                              /*greedy_vocab=*/kVocab));
  MT_ASSERT_OK_AND_ASSIGN(KvCache eager_cache, KvCache::Create(gpt->config(), kBatch, kPrompt + 1,
                                                               gpt->output_weight().options()));
  ForwardWithCache(*gpt, prompt, eager_cache);
  MT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DecodeGraph> eager,
                          DecodeGraph::Create(*gpt, eager_cache, device, /*capture=*/false, {},
                                              /*greedy_vocab=*/kVocab));
  const torch::Tensor at_last = last->StepGreedy(first).clone();
  EXPECT_TRUE(torch::equal(at_last, eager->StepGreedy(first)));
  EXPECT_TRUE(torch::equal(last_cache.keys(0), eager_cache.keys(0)));
  EXPECT_EQ(last_cache.length(), kPrompt + 1);
}

// TokenReadback's CUDA path: the copy is ordered behind the work enqueued before it and ahead
// of what is enqueued after it, so Wait gives the tokens as they were at Enqueue even when
// later work (a long matmul, then the tokens overwritten) is still queued.
TEST(TokenReadbackGpuTest, WaitGivesTheTokensAsEnqueuedWhileLaterWorkRuns) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device cuda(torch::kCUDA);
  TokenReadback readback(4, cuda);
  torch::Tensor tokens = torch::arange(4, torch::dtype(torch::kLong).device(cuda)) * 3;
  readback.Enqueue(tokens);
  const torch::Tensor a = torch::randn({4096, 4096}, torch::dtype(torch::kFloat).device(cuda));
  const torch::Tensor busy = torch::matmul(torch::matmul(a, a), a);
  tokens.fill_(-1);
  const int64_t* got = readback.Wait();
  EXPECT_EQ(std::vector<int64_t>(got, got + 4), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(tokens.cpu()[0].item<int64_t>(), -1);
  EXPECT_TRUE(busy.isfinite().all().item<bool>());
}

TEST(DecodeGraphReplayGpuTest, ReplaysAllocateNothing) {
  if (NoCudaGraphs()) GTEST_SKIP() << "no CUDA (or a build without CUDA graphs)";
#if MT_GENERATE_WITH_CUDA
  auto gpt = TinyGpt(GpuGpt(torch::kBFloat16, model::AttentionBackend::kAuto));
  ASSERT_NE(gpt, nullptr);
  torch::NoGradGuard no_grad;
  const torch::Device device = gpt->output_weight().device();
  MT_ASSERT_OK_AND_ASSIGN(KvCache cache,
                          KvCache::Create(gpt->config(), 2, 100, gpt->output_weight().options()));
  ForwardWithCache(*gpt, torch::ones({2, 10}, torch::TensorOptions(torch::kLong).device(device)),
                   cache);
  MT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DecodeGraph> step,
                          DecodeGraph::Create(*gpt, cache, device, /*capture=*/true));
  const torch::Tensor token =
      torch::full({2}, 7, torch::TensorOptions(torch::kLong).device(device));
  step->Step(token);  // captures
  torch::cuda::synchronize();
  using c10::cuda::CUDACachingAllocator::getDeviceStats;
  const auto before = getDeviceStats(device.index() < 0 ? 0 : device.index());
  constexpr int kSteps = 48;
  for (int i = 0; i < kSteps; ++i) step->Step(token);
  torch::cuda::synchronize();
  const auto after = getDeviceStats(device.index() < 0 ? 0 : device.index());
  EXPECT_EQ(after.allocation[0].allocated, before.allocation[0].allocated);
  EXPECT_EQ(after.reserved_bytes[0].current, before.reserved_bytes[0].current);
  EXPECT_EQ(step->replays(), kSteps + 1);
  EXPECT_EQ(cache.length(), 10 + kSteps + 1);
#endif
}

TEST(DecodeGraphReplayGpuTest, GeneratorCapturesOnceAndReplaysOnLaterCalls) {
  if (NoCudaGraphs()) GTEST_SKIP() << "no CUDA (or a build without CUDA graphs)";
  auto gpt = TinyGpt(GpuGpt(torch::kBFloat16, model::AttentionBackend::kAuto));
  ASSERT_NE(gpt, nullptr);
  Generator generator(*gpt);
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult first,
                          generator.Generate(Prompt(), Greedy(2, true), LetterText));
  EXPECT_GT(first.graph_capture_seconds, 0.0);
  // A stop text ends both samples halfway, with the step after it already enqueued (the host
  // reads a step's tokens while the next one runs): the calls after it decode the same tokens.
  const std::string text = first.samples[0].text;
  ASSERT_EQ(text.size(), static_cast<size_t>(kNew));
  GenerateOptions stop = Greedy(2, true);
  stop.stop = text.substr(kNew / 2, 3);
  const size_t cut = text.find(stop.stop);
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult stopped, generator.Generate(Prompt(), stop, LetterText));
  for (const GeneratedSample& s : stopped.samples) {
    EXPECT_EQ(s.finish_reason, "stop");
    EXPECT_EQ(s.text, text.substr(0, cut));
  }
  for (int call = 0; call < 2; ++call) {
    MT_ASSERT_OK_AND_ASSIGN(GenerateResult again,
                            generator.Generate(Prompt(), Greedy(2, true), LetterText));
    EXPECT_EQ(again.graph_capture_seconds, 0.0) << "call " << call;
    EXPECT_EQ(again.graph_replays, kNew - 1);
    EXPECT_EQ(again.samples[0].tokens, first.samples[0].tokens) << "call " << call;
  }
}

}  // namespace
}  // namespace mt::generate
