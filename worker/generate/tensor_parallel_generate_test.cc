// Decoding over tensor parallelism (one thread per TP rank over real Gloo groups,
// parallel/rank_threads_testing.h) against the one-device model with the same seed, whose
// shards the TP ranks build (gpt.h: every parameter drawn whole, then sliced): the cached
// forward's logits, gathered over the group, within 1e-5 of the whole model's full forward
// (fp32; the sharded sums add in another order), prefill and every decode step; and Generate()
// gives the one-device samples token for token on every rank: greedy, sampled (TP rank 0
// samples and broadcasts), -n, stop text.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "worker/generate/cached_forward.h"
#include "worker/generate/generator.h"
#include "worker/generate/kv_cache.h"
#include "worker/generate/test_models.h"
#include "worker/model/gpt.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/rank_threads_testing.h"

namespace mt::generate {
namespace {

// The tiny model of test_models.h as a config: vocabulary 100 padded to 128 whatever the TP
// size (Megatron's multiple 128 / tp x tp), so that shards slice exactly the one-device tables.
model::GptConfig Config(int tp) {
  model::GptConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = 32;
  c.vocab_size = 100;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  c.attention_backend = model::AttentionBackend::kMath;
  c.init_method_std = 0.2;
  c.make_vocab_size_divisible_by = 128 / tp;
  c.tensor_model_parallel_size = tp;
  return c.Resolve();
}

std::shared_ptr<model::GptModel> Build(int tp, int rank,
                                       std::shared_ptr<parallel::ProcessGroups> groups) {
  model::ModelShard shard;
  shard.tp_size = tp;
  shard.tp_rank = rank;
  if (groups != nullptr) {
    shard.tp_group = std::shared_ptr<const parallel::GroupHandle>(groups, &groups->tp());
  }
  model::ModelBuildOptions o;
  o.seed = 42;
  auto m = model::GptModel::Create(Config(tp), shard, o);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  (*m)->eval();
  return *m;
}

class TensorParallelDecodeTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  }
};

TEST_P(TensorParallelDecodeTest, CachedForwardLogitsEqualTheWholeModels) {
  const int tp = GetParam();
  torch::NoGradGuard no_grad;
  const std::shared_ptr<model::GptModel> whole = Build(1, 0, nullptr);
  ASSERT_NE(whole, nullptr);
  ASSERT_EQ(whole->config().padded_vocab_size(), 128);
  // 3 rows of a 5-token prompt, then 4 decode steps of one token per row.
  torch::manual_seed(5);
  const torch::Tensor prompt = torch::randint(100, {3, 5}, torch::kLong);
  const torch::Tensor steps = torch::randint(100, {3, 4}, torch::kLong);
  std::vector<torch::Tensor> want;
  for (int64_t s = 0; s <= steps.size(1); ++s) {
    want.push_back(ReferenceLastLogits(*whole, torch::cat({prompt, steps.narrow(1, 0, s)}, 1)));
  }
  auto whole_cache = KvCache::Create(whole->config(), 3, 16, torch::TensorOptions());
  ASSERT_TRUE(whole_cache.ok());
  // A shard's cache holds 1 to all of the model's heads.
  for (int64_t heads : {0, 5}) {
    auto bad = KvCache::Create(whole->config(), 3, 16, torch::TensorOptions(), heads);
    EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << heads;
    EXPECT_EQ(bad.status().message(),
              "KV cache: " + std::to_string(heads) + " heads outside [1, 4] (the model's heads)");
  }

  const auto errors = parallel::testing::RunRanks(
      parallel::testing::LayoutOf(tp, 1, 1, 2),
      [&](int rank, std::shared_ptr<parallel::ProcessGroups> groups) {
        torch::NoGradGuard no_grad;
        const std::shared_ptr<model::GptModel> gpt = Build(tp, groups->tp_rank(), groups);
        ASSERT_NE(gpt, nullptr);
        // The shard's cache holds its own heads only.
        auto cache = KvCache::Create(gpt->config(), 3, 16, torch::TensorOptions(), 4 / tp);
        ASSERT_TRUE(cache.ok()) << cache.status();
        EXPECT_EQ(cache->bytes() * tp, whole_cache->bytes());
        EXPECT_EQ(cache->keys(0).size(1), 4 / tp);
        for (int64_t s = 0; s <= steps.size(1); ++s) {
          const torch::Tensor in = s == 0 ? prompt : steps.narrow(1, s - 1, 1);
          const torch::Tensor got = ForwardWithCache(*gpt, in, *cache);
          ASSERT_EQ(got.sizes(), want[s].sizes()) << "rank " << rank;  // [3, 128], gathered
          EXPECT_EQ(got.scalar_type(), torch::kFloat);
          const double diff = (got - want[s]).abs().max().item<double>();
          EXPECT_LE(diff, 1e-5) << "rank " << rank << " step " << s;
        }
        EXPECT_EQ(cache->length(), 5 + steps.size(1));
      });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

// What one rank's Generate() gave, and what on_text streamed.
struct Decoded {
  std::vector<GeneratedSample> samples;
  std::vector<std::string> streamed;
};

Decoded GenerateOn(model::GptModel& gpt, const GenerateOptions& o) {
  Decoded run;
  run.streamed.resize(static_cast<size_t>(o.num_samples));
  auto r =
      Generate(gpt, {3, 14, 15, 9, 2, 6}, o, LetterText, [&run](int64_t i, absl::string_view text) {
        run.streamed[static_cast<size_t>(i)].append(text.data(), text.size());
      });
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) run.samples = r->samples;
  return run;
}

void ExpectSameSamples(const Decoded& got, const Decoded& want, const std::string& what) {
  ASSERT_EQ(got.samples.size(), want.samples.size()) << what;
  for (size_t i = 0; i < want.samples.size(); ++i) {
    EXPECT_EQ(got.samples[i].tokens, want.samples[i].tokens) << what << " sample " << i;
    EXPECT_EQ(got.samples[i].text, want.samples[i].text) << what << " sample " << i;
    EXPECT_EQ(got.samples[i].finish_reason, want.samples[i].finish_reason)
        << what << " sample " << i;
    EXPECT_EQ(got.streamed[i], want.streamed[i]) << what << " sample " << i;
  }
}

TEST_P(TensorParallelDecodeTest, GenerateGivesTheOneDeviceSamplesOnEveryRank) {
  const int tp = GetParam();
  const std::shared_ptr<model::GptModel> whole = Build(1, 0, nullptr);
  ASSERT_NE(whole, nullptr);
  GenerateOptions greedy;
  greedy.max_new_tokens = 12;
  greedy.num_samples = 2;
  greedy.sampling.temperature = 0;
  GenerateOptions sampled;
  sampled.max_new_tokens = 12;
  sampled.num_samples = 3;
  sampled.sampling.temperature = 0.9;
  sampled.sampling.top_k = 40;
  sampled.sampling.top_p = 0.95;
  sampled.sampling.seed = 7;
  std::vector<GenerateOptions> cases = {greedy, sampled};
  std::vector<Decoded> want;
  for (const GenerateOptions& o : cases) want.push_back(GenerateOn(*whole, o));
  ASSERT_EQ(want[0].samples[0].tokens.size(), 12u);
  // The sampled rows differ from each other (so the test would see a rank sampling alone).
  EXPECT_NE(want[1].samples[0].tokens, want[1].samples[1].tokens);
  // A stop text the greedy sample meets: it ends there on every rank, never streamed.
  GenerateOptions stopped = greedy;
  stopped.stop = want[0].samples[0].text.substr(4, 2);
  cases.push_back(stopped);
  want.push_back(GenerateOn(*whole, stopped));
  EXPECT_EQ(want[2].samples[0].finish_reason, "stop");

  const auto errors = parallel::testing::RunRanks(
      parallel::testing::LayoutOf(tp, 1, 1, 2),
      [&](int rank, std::shared_ptr<parallel::ProcessGroups> groups) {
        const std::shared_ptr<model::GptModel> gpt = Build(tp, groups->tp_rank(), groups);
        ASSERT_NE(gpt, nullptr);
        for (size_t c = 0; c < cases.size(); ++c) {
          ExpectSameSamples(GenerateOn(*gpt, cases[c]), want[c],
                            "rank " + std::to_string(rank) + " case " + std::to_string(c));
        }
      });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

INSTANTIATE_TEST_SUITE_P(Tp, TensorParallelDecodeTest, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "tp" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace mt::generate
