// The static-shape decode step (decode_step.h) and its eager DecodeGraph on the CPU in fp32:
// greedy tokens equal ForwardWithCache's and the logits are within 1e-5, stale cache entries
// after the position do not matter, capture is refused off CUDA, and a Generator reused between
// calls gives the same tokens as a fresh Generate.
#include "worker/generate/decode_step.h"

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/generate/cached_forward.h"
#include "worker/generate/decode_graph.h"
#include "worker/generate/generator.h"
#include "worker/generate/kv_cache.h"
#include "worker/generate/test_models.h"

namespace mt::generate::decode_step_test {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kContext = 32;
constexpr int64_t kVocab = 100;

KvCache NewCache(const model::GptModel& gpt, int64_t batch) {
  auto cache = KvCache::Create(gpt.config(), batch, kContext, gpt.output_weight().options());
  EXPECT_TRUE(cache.ok()) << cache.status();
  return std::move(*cache);
}

class StaticStepTest : public ::testing::TestWithParam<model::AttentionBackend> {};

TEST_P(StaticStepTest, GreedyEqualsForwardWithCacheAndLogitsAreClose) {
  TinyGptOptions t;
  t.backend = GetParam();
  auto gpt = TinyGpt(t);
  ASSERT_NE(gpt, nullptr);
  torch::NoGradGuard no_grad;
  constexpr int64_t kBatch = 2;
  KvCache dynamic = NewCache(*gpt, kBatch);
  KvCache fixed = NewCache(*gpt, kBatch);
  // Stale entries after the position (a longer earlier generation) must be masked off.
  ForwardWithCache(*gpt, torch::randint(0, kVocab, {kBatch, kContext}, torch::kLong), fixed);
  fixed.Reset();
  const torch::Tensor prompt = torch::randint(0, kVocab, {kBatch, 7}, torch::kLong);
  torch::Tensor a = ForwardWithCache(*gpt, prompt, dynamic);
  ForwardWithCache(*gpt, prompt, fixed);
  MT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DecodeGraph> step,
                          DecodeGraph::Create(*gpt, fixed, torch::kCPU, /*capture=*/false));
  for (int64_t i = 0; i < kContext - 7; ++i) {
    const torch::Tensor next = a.narrow(-1, 0, kVocab).argmax(-1);
    a = ForwardWithCache(*gpt, next.view({kBatch, 1}), dynamic);
    const torch::Tensor b = step->Step(next);
    ASSERT_TRUE(
        torch::equal(a.narrow(-1, 0, kVocab).argmax(-1), b.narrow(-1, 0, kVocab).argmax(-1)))
        << "step " << i;
    EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-5)) << "step " << i;
  }
  EXPECT_EQ(fixed.length(), kContext);
  EXPECT_EQ(step->replays(), 0);
  EXPECT_THROW(step->Step(torch::zeros({kBatch}, torch::kLong)), c10::Error);  // full
}

INSTANTIATE_TEST_SUITE_P(Attention, StaticStepTest,
                         ::testing::Values(model::AttentionBackend::kMath,
                                           model::AttentionBackend::kAuto));

TEST(DecodeGraphTest, CaptureNeedsCuda) {
  auto gpt = TinyGpt({});
  ASSERT_NE(gpt, nullptr);
  KvCache cache = NewCache(*gpt, 1);
  EXPECT_THAT(DecodeGraph::Create(*gpt, cache, torch::kCPU, /*capture=*/true).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("CUDA")));
}

TEST(GeneratorTest, ReusedGeneratorGivesTheTokensOfAFreshGenerate) {
  auto gpt = TinyGpt({});
  ASSERT_NE(gpt, nullptr);
  const std::vector<int32_t> prompt = {5, 17, 3, 99, 42, 8};
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.num_samples = 2;
  o.sampling.temperature = 0.0;
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult fresh, Generate(*gpt, prompt, o, LetterText));
  Generator generator(*gpt);
  for (int call = 0; call < 3; ++call) {
    MT_ASSERT_OK_AND_ASSIGN(GenerateResult r, generator.Generate(prompt, o, LetterText));
    ASSERT_EQ(r.samples.size(), 2u);
    EXPECT_EQ(r.samples[0].tokens, fresh.samples[0].tokens) << "call " << call;
    EXPECT_EQ(r.samples[1].tokens, fresh.samples[0].tokens) << "call " << call;
    EXPECT_EQ(r.kv_cache_bytes, fresh.kv_cache_bytes);
    EXPECT_EQ(r.graph_replays, 0);  // the CPU decodes with ForwardWithCache
  }
  // Another shape (a shorter generation) replaces the state; the tokens are a prefix.
  o.max_new_tokens = 5;
  MT_ASSERT_OK_AND_ASSIGN(GenerateResult shorter, generator.Generate(prompt, o, LetterText));
  EXPECT_EQ(shorter.samples[0].tokens, std::vector<int32_t>(fresh.samples[0].tokens.begin(),
                                                            fresh.samples[0].tokens.begin() + 5));
}

}  // namespace
}  // namespace mt::generate::decode_step_test
