// Decoding on the CPU in fp32: the KV-cache path against the no-cache full re-forward (token for
// token and logits at a tolerance; also with int8 weights), sampling reproducible from the seed,
// the stop text and the streamed text, and bad input named by its flag.
#include "worker/generate/generator.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <string>
#include <vector>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/generate/cached_forward.h"
#include "worker/generate/kv_cache.h"
#include "worker/generate/sampling.h"
#include "worker/generate/test_models.h"
#include "worker/model/gpt.h"
#include "worker/model/quantize.h"

namespace mt::generate {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kVocab = 100;  // padded to 128: the padding must never be chosen
constexpr int64_t kContext = 32;

std::shared_ptr<model::GptModel> TinyModel(model::AttentionBackend backend) {
  TinyGptOptions t;
  t.context = kContext;
  t.vocab = kVocab;
  t.backend = backend;
  return TinyGpt(t);
}

const std::vector<int32_t> kPrompt = {5, 17, 3, 99, 42, 8};

// Greedy by re-running the whole sequence through GptModel::forward for every token.
std::vector<int32_t> ReferenceGreedy(model::GptModel& gpt, std::vector<int32_t> seq, int64_t n,
                                     std::vector<torch::Tensor>* logits) {
  torch::NoGradGuard no_grad;
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> ids(seq.begin(), seq.end());
    torch::Tensor l = ReferenceLastLogits(gpt, torch::tensor(ids, torch::kLong).unsqueeze(0));
    l = l.narrow(-1, 0, kVocab);
    logits->push_back(l);
    const int32_t next = static_cast<int32_t>(l.argmax(-1).item<int64_t>());
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

GenerateOptions Greedy(int64_t max_new) {
  GenerateOptions o;
  o.max_new_tokens = max_new;
  o.sampling.temperature = 0.0;
  return o;
}

class BackendTest : public ::testing::TestWithParam<model::AttentionBackend> {};

TEST_P(BackendTest, GreedyWithCacheEqualsFullReforwardTokenForToken) {
  auto gpt = TinyModel(GetParam());
  constexpr int64_t kNew = 20;
  std::vector<torch::Tensor> ref_logits;
  const std::vector<int32_t> expected = ReferenceGreedy(*gpt, kPrompt, kNew, &ref_logits);
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult r, Generate(*gpt, kPrompt, Greedy(kNew), LetterText));
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.samples[0].tokens, expected);
  EXPECT_EQ(r.samples[0].finish_reason, "length");
  EXPECT_EQ(r.samples[0].text, LetterText(expected));
  EXPECT_EQ(r.generated_tokens, kNew);
  EXPECT_EQ(r.prompt_tokens, static_cast<int64_t>(kPrompt.size()));

  // The logits themselves, step by step through the cache, within 1e-5 of the reference.
  torch::NoGradGuard no_grad;
  MT_ASSERT_OK_AND_ASSIGN(
      KvCache cache, KvCache::Create(gpt->config(), 1, kContext, gpt->output_weight().options()));
  std::vector<int64_t> ids(kPrompt.begin(), kPrompt.end());
  torch::Tensor l = ForwardWithCache(*gpt, torch::tensor(ids, torch::kLong).unsqueeze(0), cache);
  for (int64_t i = 0; i < kNew; ++i) {
    EXPECT_TRUE(
        torch::allclose(l.narrow(-1, 0, kVocab), ref_logits[static_cast<size_t>(i)], 1e-5, 1e-5))
        << "step " << i;
    l = ForwardWithCache(
        *gpt, torch::tensor({int64_t{expected[static_cast<size_t>(i)]}}).view({1, 1}), cache);
  }
  EXPECT_EQ(cache.length(), static_cast<int64_t>(kPrompt.size()) + kNew);
}

INSTANTIATE_TEST_SUITE_P(Attention, BackendTest,
                         ::testing::Values(model::AttentionBackend::kMath,
                                           model::AttentionBackend::kAuto));

// Int8 weights (--quantize int8): decoding through the cache equals the full re-forward of the
// same quantized model token for token; the logits moved from the fp32 model's, not far.
TEST(GenerateTest, Int8WeightsGreedyWithCacheEqualsFullReforward) {
  auto gpt = TinyModel(model::AttentionBackend::kMath);
  std::vector<torch::Tensor> fp32_logits;
  ReferenceGreedy(*gpt, kPrompt, 1, &fp32_logits);
  MT_ASSERT_OK(model::QuantizeInt8Linears(*gpt));
  constexpr int64_t kNew = 20;
  std::vector<torch::Tensor> ref_logits;
  const std::vector<int32_t> expected = ReferenceGreedy(*gpt, kPrompt, kNew, &ref_logits);
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult r, Generate(*gpt, kPrompt, Greedy(kNew), LetterText));
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.samples[0].tokens, expected);
  const float moved = (ref_logits[0] - fp32_logits[0]).abs().max().item<float>();
  EXPECT_GT(moved, 1e-4);
  EXPECT_LT(moved, 0.5 * fp32_logits[0].abs().max().item<float>());
}

TEST(CachedForwardTest, ChunkedPrefillEqualsOneShot) {
  // A prompt fed in two chunks (the masked path: queries after cached keys) gives the same
  // last logits as the whole sequence at once.
  auto gpt = TinyModel(model::AttentionBackend::kMath);
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::randint(0, kVocab, {3, 12}, torch::kLong);
  MT_ASSERT_OK_AND_ASSIGN(
      KvCache cache, KvCache::Create(gpt->config(), 3, kContext, gpt->output_weight().options()));
  ForwardWithCache(*gpt, tokens.narrow(1, 0, 5), cache);
  const torch::Tensor chunked = ForwardWithCache(*gpt, tokens.narrow(1, 5, 7), cache);
  EXPECT_TRUE(torch::allclose(chunked, ReferenceLastLogits(*gpt, tokens), 1e-5, 1e-5));
}

TEST(CachedForwardTest, CacheIsAllocatedOnceAndRefusesOverflow) {
  auto gpt = TinyModel(model::AttentionBackend::kMath);
  torch::NoGradGuard no_grad;
  MT_ASSERT_OK_AND_ASSIGN(KvCache cache,
                          KvCache::Create(gpt->config(), 2, 8, gpt->output_weight().options()));
  // 2 layers x (keys + values) x [2, 4 heads, 8, 8] fp32.
  EXPECT_EQ(cache.bytes(), 2 * 2 * (2 * 4 * 8 * 8) * 4);
  ForwardWithCache(*gpt, torch::zeros({2, 8}, torch::kLong), cache);
  EXPECT_THROW(ForwardWithCache(*gpt, torch::zeros({2, 1}, torch::kLong), cache), c10::Error);
  EXPECT_THAT(
      KvCache::Create(gpt->config(), 1, kContext + 1, gpt->output_weight().options()).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("position embeddings")));
}

TEST(GenerateTest, SamplingIsReproducibleFromTheSeed) {
  auto gpt = TinyModel(model::AttentionBackend::kMath);
  GenerateOptions o;
  o.max_new_tokens = 16;
  o.num_samples = 3;
  o.sampling.temperature = 1.0;
  o.sampling.top_k = 50;
  o.sampling.top_p = 0.95;
  o.sampling.seed = 7;
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult a, Generate(*gpt, kPrompt, o, LetterText));
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult b, Generate(*gpt, kPrompt, o, LetterText));
  ASSERT_EQ(a.samples.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a.samples[i].tokens, b.samples[i].tokens) << "sample " << i;
    EXPECT_EQ(a.samples[i].tokens.size(), 16u);
    for (int32_t t : a.samples[i].tokens) EXPECT_LT(t, kVocab);  // never the padding
  }
  // The samples of one batch differ from each other, and another seed gives other tokens.
  EXPECT_NE(a.samples[0].tokens, a.samples[1].tokens);
  o.sampling.seed = 8;
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult c, Generate(*gpt, kPrompt, o, LetterText));
  EXPECT_NE(a.samples[0].tokens, c.samples[0].tokens);
}

TEST(GenerateTest, TopKOneAndTinyTopPAreGreedy) {
  auto gpt = TinyModel(model::AttentionBackend::kMath);
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult greedy, Generate(*gpt, kPrompt, Greedy(10), LetterText));
  GenerateOptions o = Greedy(10);
  o.sampling.temperature = 0.7;
  o.sampling.top_k = 1;
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult k1, Generate(*gpt, kPrompt, o, LetterText));
  EXPECT_EQ(k1.samples[0].tokens, greedy.samples[0].tokens);
  o.sampling.top_k = 0;
  o.sampling.top_p = 1e-6;
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult p, Generate(*gpt, kPrompt, o, LetterText));
  EXPECT_EQ(p.samples[0].tokens, greedy.samples[0].tokens);
}

TEST(SamplingTest, TopKAndTopPKeepOnlyTheirTokens) {
  // Probabilities 0.5, 0.3, 0.15, 0.05: top-p 0.7 keeps the first two, top-k 3 the first three.
  const torch::Tensor logits = torch::log(torch::tensor({0.5, 0.3, 0.15, 0.05}, torch::kFloat))
                                   .unsqueeze(0)
                                   .repeat({400, 1});
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1);
  SamplingOptions o;
  o.top_p = 0.7;
  torch::Tensor drawn = NextTokens(logits, 4, o, gen);
  EXPECT_EQ(drawn.max().item<int64_t>(), 1);
  EXPECT_EQ(drawn.min().item<int64_t>(), 0);
  o.top_p = 1.0;
  o.top_k = 3;
  drawn = NextTokens(logits, 4, o, gen);
  EXPECT_EQ(drawn.max().item<int64_t>(), 2);
  // The share of token 0 among 400 draws of {0.5, 0.3, 0.15}/0.95: 0.526 +- 0.1.
  EXPECT_NEAR(drawn.eq(0).sum().item<double>() / 400.0, 0.5 / 0.95, 0.1);
}

TEST(GenerateTest, StopTextEndsTheSampleAndIsNeverStreamed) {
  auto gpt = TinyModel(model::AttentionBackend::kMath);
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult full, Generate(*gpt, kPrompt, Greedy(12), LetterText));
  const std::string text = full.samples[0].text;
  ASSERT_EQ(text.size(), 12u);
  GenerateOptions o = Greedy(12);
  o.stop = text.substr(5, 3);
  const size_t cut = text.find(o.stop);  // the first occurrence (may be before 5)
  std::string streamed;
  MT_ASSERT_OK_AND_ASSIGN(
      GenerateResult r, Generate(*gpt, kPrompt, o, LetterText, [&](int64_t i, absl::string_view t) {
        EXPECT_EQ(i, 0);
        streamed.append(t.data(), t.size());
      }));
  EXPECT_EQ(r.samples[0].finish_reason, "stop");
  EXPECT_EQ(r.samples[0].text, text.substr(0, cut));
  EXPECT_EQ(streamed, r.samples[0].text);
  EXPECT_EQ(r.samples[0].tokens.size(), cut + 3);

  // Without a stop text everything is streamed, in order.
  streamed.clear();
  MT_ASSERT_OK(Generate(*gpt, kPrompt, Greedy(12), LetterText, [&](int64_t, absl::string_view t) {
                 streamed.append(t.data(), t.size());
               }).status());
  EXPECT_EQ(streamed, text);
}

// Reading each step's tokens before the next step is enqueued (read_ahead false) gives the same
// samples, to the end and at a stop text that ends every sample with the next step enqueued.
TEST(GenerateTest, ReadAheadGivesTheSameSamples) {
  auto gpt = TinyModel(model::AttentionBackend::kMath);
  GenerateOptions o = Greedy(12);
  o.num_samples = 2;
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult ahead, Generate(*gpt, kPrompt, o, LetterText));
  o.read_ahead = false;
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult waited, Generate(*gpt, kPrompt, o, LetterText));
  ASSERT_EQ(ahead.samples.size(), 2u);
  ASSERT_EQ(waited.samples.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(ahead.samples[i].tokens, waited.samples[i].tokens) << "sample " << i;
    EXPECT_EQ(ahead.samples[i].tokens.size(), 12u);
  }
  Generator generator(*gpt);
  o.stop = ahead.samples[0].text.substr(5, 3);
  const size_t cut = ahead.samples[0].text.find(o.stop);
  for (const bool read_ahead : {true, false}) {
    o.read_ahead = read_ahead;
    MT_ASSERT_OK_AND_ASSIGN(GenerateResult stopped, generator.Generate(kPrompt, o, LetterText));
    for (const GeneratedSample& sample : stopped.samples) {
      EXPECT_EQ(sample.finish_reason, "stop") << read_ahead;
      EXPECT_EQ(sample.text, ahead.samples[0].text.substr(0, cut)) << read_ahead;
    }
  }
  // The Generator's next call after a stop with a step enqueued decodes from a clean cache.
  o.stop.clear();
  o.read_ahead = true;
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult again, generator.Generate(kPrompt, o, LetterText));
  EXPECT_EQ(again.samples[0].tokens, ahead.samples[0].tokens);
}

TEST(GenerateTest, EndOfDocumentAndContextEndSamples) {
  auto gpt = TinyModel(model::AttentionBackend::kMath);
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult full, Generate(*gpt, kPrompt, Greedy(8), LetterText));
  GenerateOptions o = Greedy(8);
  o.eod = full.samples[0].tokens[3];
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult r, Generate(*gpt, kPrompt, o, LetterText));
  EXPECT_EQ(r.samples[0].finish_reason, "eod");
  EXPECT_LE(r.samples[0].tokens.size(), 3u);
  // More new tokens than the context holds: stops at the context.
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult c, Generate(*gpt, kPrompt, Greedy(1000), LetterText));
  EXPECT_EQ(c.samples[0].finish_reason, "context");
  EXPECT_EQ(static_cast<int64_t>(c.samples[0].tokens.size()),
            kContext - static_cast<int64_t>(kPrompt.size()) + 1);
}

// A prompt that fills the context still gets its one next token (time to first token at the
// full context is what the decode benchmark measures).
TEST(GenerateTest, APromptFillingTheContextGivesOneToken) {
  auto gpt = TinyModel(model::AttentionBackend::kMath);
  std::vector<int32_t> full_prompt(kContext, 1);
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult r, Generate(*gpt, full_prompt, Greedy(4), LetterText));
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.samples[0].tokens.size(), 1u);
  EXPECT_EQ(r.samples[0].finish_reason, "context");
  EXPECT_EQ(r.prompt_tokens, kContext);
}

TEST(GenerateTest, BadInputNamesTheFlag) {
  auto gpt = TinyModel(model::AttentionBackend::kMath);
  std::vector<int32_t> long_prompt(kContext + 1, 1);
  EXPECT_THAT(Generate(*gpt, long_prompt, Greedy(4), LetterText).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--prompt: 33 tokens exceed the model's context of 32 tokens")));
  EXPECT_THAT(Generate(*gpt, {}, Greedy(4), LetterText).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--prompt")));
  EXPECT_THAT(Generate(*gpt, {int32_t{kVocab}}, Greedy(4), LetterText).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--prompt")));
  GenerateOptions o = Greedy(4);
  o.sampling.temperature = -0.5;
  EXPECT_THAT(Generate(*gpt, kPrompt, o, LetterText).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--temperature")));
  o = Greedy(4);
  o.sampling.top_p = 0.0;
  EXPECT_THAT(ValidateGenerate(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--top-p")));
  o.sampling.top_p = 1.5;
  EXPECT_THAT(ValidateGenerate(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--top-p")));
  o = Greedy(4);
  o.sampling.top_k = -1;
  EXPECT_THAT(ValidateGenerate(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--top-k")));
  o = Greedy(0);
  EXPECT_THAT(ValidateGenerate(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--max-new-tokens")));
  o = Greedy(4);
  o.num_samples = 0;
  EXPECT_THAT(ValidateGenerate(o), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("-n ")));
}

}  // namespace
}  // namespace mt::generate
