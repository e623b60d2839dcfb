// Model shards without communication: the initialisation is the same whatever the layout
// (tensor-parallel shards and pipeline stages slice the one-device weights exactly), pipeline
// stages chained by hand compute the whole model's loss and gradients, and bad shards are
// rejected by name. The tensor-parallel forward/backward (with a real TP group) is in
// gpt_tensor_parallel_test.cc.
#include <torch/autograd.h>
#include <torch/utils.h>

#include <map>
#include <string>
#include <vector>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/gpt.h"
#include "worker/model/sharding.h"

namespace mt::model {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

// 4 layers, hidden 64, 4 heads, seq 16, vocabulary 512 (a multiple of 128 * 4: every TP size
// up to 4 pads it to the same 512).
GptConfig SmallConfig(bool untie) {
  GptConfig c;
  c.num_layers = 4;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 16;
  c.vocab_size = 512;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  c.attention_backend = AttentionBackend::kMath;
  c.untie_embeddings_and_output_weights = untie;
  return c.Resolve();
}

std::shared_ptr<GptModel> Build(const GptConfig& c, const ModelShard& shard,
                                torch::ScalarType dtype = torch::kFloat) {
  ModelBuildOptions options;
  options.seed = 1234;
  options.dtype = dtype;
  auto model = GptModel::Create(c, shard, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

std::map<std::string, torch::Tensor> Params(const GptModel& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value();
  return out;
}

torch::Tensor Sample(int64_t b, const GptConfig& c, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(c.vocab_size, {b, c.seq_length + 1}, torch::kLong);
}

TEST(GptShardTest, TensorParallelShardsSliceTheOneDeviceWeightsExactly) {
  for (bool untie : {false, true}) {
    const GptConfig c = SmallConfig(untie);
    const auto full = Params(*Build(c, ModelShard{}));
    for (int tp : {2, 4}) {
      std::vector<std::map<std::string, torch::Tensor>> shards;
      for (int r = 0; r < tp; ++r) {
        ModelShard s;
        s.tp_size = tp;
        s.tp_rank = r;
        shards.push_back(Params(*Build(c, s)));
      }
      ASSERT_EQ(shards[0].size(), full.size());
      for (const auto& [name, want] : full) {
        const TpSplit split = TensorParallelSplit(name);
        std::vector<torch::Tensor> parts;
        for (const auto& shard : shards) parts.push_back(shard.at(name));
        const torch::Tensor got = split == TpSplit::kReplicated ? parts[0]
                                  : split == TpSplit::kDim0     ? torch::cat(parts, 0)
                                                                : torch::cat(parts, 1);
        EXPECT_TRUE(torch::equal(got, want)) << name << " tp=" << tp;
        if (split == TpSplit::kReplicated) {
          for (const auto& part : parts) EXPECT_TRUE(torch::equal(part, want)) << name;
        }
      }
    }
  }
}

TEST(GptShardTest, PipelineStagesHoldTheirLayersUnderGlobalNamesWithTheSameWeights) {
  for (bool untie : {false, true}) {
    const GptConfig c = SmallConfig(untie);
    const auto full = Params(*Build(c, ModelShard{}));
    ModelShard first;
    first.layers = {0, 1};
    first.post_process = false;
    ModelShard last;
    last.layers = {2, 3};
    last.pre_process = false;
    auto a = Build(c, first);
    auto b = Build(c, last);
    for (const auto& [name, value] : Params(*a)) {
      EXPECT_TRUE(torch::equal(value, full.at(name))) << name;
      EXPECT_THAT(LayerIndexOf(name), ::testing::AnyOf(-1, 0, 1)) << name;
    }
    EXPECT_FALSE(a->shared_output_weight().defined());
    EXPECT_FALSE(a->output_weight().defined());
    for (const auto& [name, value] : Params(*b)) {
      EXPECT_THAT(LayerIndexOf(name), ::testing::AnyOf(-1, 2, 3)) << name;
      if (name == GptModel::kSharedOutputWeightName && !untie) {
        // The tied last stage's copy starts as the word embedding.
        EXPECT_TRUE(torch::equal(value, full.at("embedding.word_embeddings.weight")));
      } else {
        EXPECT_TRUE(torch::equal(value, full.at(name))) << name;
      }
    }
    EXPECT_EQ(b->shared_output_weight().defined(), !untie);
    EXPECT_EQ(Params(*b).count("decoder.final_layernorm.weight"), 1u);
    EXPECT_EQ(Params(*a).count("decoder.final_layernorm.weight"), 0u);
    EXPECT_EQ(Params(*a).count("embedding.word_embeddings.weight"), 1u);
    EXPECT_EQ(Params(*b).count("embedding.word_embeddings.weight"), 0u);
  }
}

// Stage {0,1} then stage {2,3}, chained by hand, against the whole model: the same loss and
// the same gradients (fp32; tolerance 1e-6 relative, the same arithmetic in the same order).
TEST(GptShardTest, ChainedStagesGiveTheWholeModelsLossAndGradients) {
  for (bool untie : {false, true}) {
    const GptConfig c = SmallConfig(untie);
    auto whole = Build(c, ModelShard{});
    ModelShard first;
    first.layers = {0, 1};
    first.post_process = false;
    ModelShard last;
    last.layers = {2, 3};
    last.pre_process = false;
    auto a = Build(c, first);
    auto b = Build(c, last);
    const torch::Tensor sample = Sample(3, c, 5);
    const int64_t s = c.seq_length;
    const torch::Tensor tokens = sample.narrow(1, 0, s);
    const torch::Tensor targets = sample.narrow(1, 1, s);

    const torch::Tensor want = whole->LossOnSample(sample);
    want.backward();

    const torch::Tensor hidden = a->ForwardStage(tokens, torch::Tensor());
    ASSERT_EQ(hidden.sizes(), (std::vector<int64_t>{3, s, c.hidden_size}));
    // What the next stage receives: a leaf that collects the gradient to send back.
    const torch::Tensor received = hidden.detach().requires_grad_(true);
    const torch::Tensor got = b->ForwardStage(received, targets);
    got.backward();
    hidden.backward(received.grad());

    EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-6 * want.item<double>());
    const auto ref = Params(*whole);
    auto check = [&](const std::string& name, const torch::Tensor& grad) {
      const torch::Tensor& w = ref.at(name).grad();
      const double scale = w.abs().max().item<double>() + 1e-12;
      EXPECT_LE((grad - w).abs().max().item<double>(), 1e-5 * scale) << name;
    };
    for (const auto& [name, p] : Params(*a)) {
      if (name == "embedding.word_embeddings.weight" && !untie) continue;
      check(name, p.grad());
    }
    for (const auto& [name, p] : Params(*b)) {
      if (name == GptModel::kSharedOutputWeightName && !untie) continue;
      check(name, p.grad());
    }
    if (!untie) {
      // Tied: the embedding's gradient is the sum of the first stage's and the last stage's
      // copy (what the embedding-group all-reduce computes).
      check("embedding.word_embeddings.weight",
            a->embedding->word_embeddings->weight.grad() + b->shared_output_weight().grad());
    }
  }
}

// The forward pre-hook (where the trainer waits for a part's parameter all-gathers): a whole
// model calls it with parts 0 (embedding), 1..4 (layers), 5 (final LayerNorm + output) in
// order; a middle stage (layers 1, 2) with 0, 1; a last stage (layer 3) with 0 (layer), 1
// (final LayerNorm + the tied embedding's copy). ForwardPartOf names the part that first uses
// each parameter (the tied word embedding: the embedding's), -1 for one the stage lacks; a
// recomputed layer calls the hook again in backward; a null hook is never called.
TEST(GptShardTest, ForwardPreHookRunsBeforeEachPartInOrder) {
  const GptConfig c = SmallConfig(false);
  std::vector<int64_t> parts;
  auto record = [&parts](int64_t part) { parts.push_back(part); };

  auto whole = Build(c, {});
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->num_forward_parts(), 6);
  EXPECT_EQ(whole->ForwardPartOf("embedding.word_embeddings.weight"), 0);
  EXPECT_EQ(whole->ForwardPartOf("embedding.position_embeddings.weight"), 0);
  EXPECT_EQ(whole->ForwardPartOf("decoder.layers.0.input_layernorm.weight"), 1);
  EXPECT_EQ(whole->ForwardPartOf("decoder.layers.3.mlp.linear_fc2.bias"), 4);
  EXPECT_EQ(whole->ForwardPartOf("decoder.final_layernorm.weight"), 5);
  for (const auto& p : whole->named_parameters()) {
    EXPECT_GE(whole->ForwardPartOf(p.key()), 0) << p.key();
  }
  whole->SetForwardPreHook(record);
  const torch::Tensor x = Sample(2, c, 5);
  whole->LossOnSample(x);
  EXPECT_EQ(parts, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));

  parts.clear();
  ModelShard middle;
  middle.layers = {1, 2};
  middle.pre_process = false;
  middle.post_process = false;
  auto mid = Build(c, middle);
  ASSERT_NE(mid, nullptr);
  EXPECT_EQ(mid->num_forward_parts(), 2);
  EXPECT_EQ(mid->ForwardPartOf("decoder.layers.2.self_attention.linear_qkv.weight"), 1);
  EXPECT_EQ(mid->ForwardPartOf("decoder.layers.0.self_attention.linear_qkv.weight"), -1);
  EXPECT_EQ(mid->ForwardPartOf("embedding.word_embeddings.weight"), -1);
  mid->SetForwardPreHook(record);
  mid->ForwardStage(torch::zeros({2, c.seq_length, c.hidden_size}), torch::Tensor());
  EXPECT_EQ(parts, (std::vector<int64_t>{0, 1}));

  parts.clear();
  ModelShard last;
  last.layers = {3};
  last.pre_process = false;
  auto tail = Build(c, last);
  ASSERT_NE(tail, nullptr);
  EXPECT_EQ(tail->ForwardPartOf(GptModel::kSharedOutputWeightName), 1);
  EXPECT_EQ(tail->ForwardPartOf("decoder.final_layernorm.bias"), 1);
  tail->SetForwardPreHook(record);
  tail->SetRecompute(RecomputeGranularity::kFull, RecomputeMethod::kUniform, 1);
  const torch::Tensor hidden = torch::randn({2, c.seq_length, c.hidden_size});
  const torch::Tensor targets = x.narrow(1, 1, c.seq_length);
  torch::Tensor loss = tail->ForwardStage(hidden, targets);
  EXPECT_EQ(parts, (std::vector<int64_t>{0, 1}));
  loss.backward();
  EXPECT_EQ(parts, (std::vector<int64_t>{0, 1, 0}));  // the layer, recomputed

  parts.clear();
  tail->SetForwardPreHook(nullptr);
  tail->ForwardStage(hidden, targets);
  EXPECT_TRUE(parts.empty());
}

TEST(GptShardTest, BuildsDirectlyInTheRequestedDtype) {
  const GptConfig c = SmallConfig(false);
  const auto full = Params(*Build(c, ModelShard{}));
  ModelShard s;
  s.tp_size = 2;
  s.tp_rank = 1;
  for (const auto& [name, p] : Params(*Build(c, s, torch::kBFloat16))) {
    ASSERT_EQ(p.scalar_type(), torch::kBFloat16) << name;
  }
  for (const auto& [name, p] : Params(*Build(c, ModelShard{}, torch::kBFloat16))) {
    EXPECT_TRUE(torch::equal(p, full.at(name).to(torch::kBFloat16))) << name;
  }
}

TEST(GptShardTest, SeedDecidesTheWeights) {
  const GptConfig c = SmallConfig(false);
  ModelBuildOptions o;
  o.seed = 7;
  MT_ASSERT_OK_AND_ASSIGN(auto m1, GptModel::Create(c, {}, o));
  MT_ASSERT_OK_AND_ASSIGN(auto m2, GptModel::Create(c, {}, o));
  o.seed = 8;
  MT_ASSERT_OK_AND_ASSIGN(auto m3, GptModel::Create(c, {}, o));
  const torch::Tensor w1 = m1->embedding->word_embeddings->weight;
  EXPECT_TRUE(torch::equal(w1, m2->embedding->word_embeddings->weight));
  EXPECT_FALSE(torch::equal(w1, m3->embedding->word_embeddings->weight));
  // Without a seed, the default generator decides (torch::manual_seed makes it repeatable).
  torch::manual_seed(3);
  MT_ASSERT_OK_AND_ASSIGN(auto d1, GptModel::Create(c));
  torch::manual_seed(3);
  MT_ASSERT_OK_AND_ASSIGN(auto d2, GptModel::Create(c));
  EXPECT_TRUE(
      torch::equal(d1->embedding->word_embeddings->weight, d2->embedding->word_embeddings->weight));
}

TEST(GptShardTest, BadShardsAreRejectedByName) {
  const GptConfig c = SmallConfig(false);
  ModelShard s;
  s.tp_size = 3;  // 4 heads
  EXPECT_THAT(GptModel::Create(c, s),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_attention_heads")));
  s = ModelShard{};
  s.tp_size = 2;
  s.tp_rank = 2;
  EXPECT_THAT(GptModel::Create(c, s),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensor-parallel rank")));
  GptConfig odd = c;
  odd.seq_length = 15;
  s = ModelShard{};
  s.tp_size = 2;
  s.sequence_parallel = true;
  EXPECT_THAT(GptModel::Create(odd, s),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("seq_length")));
  s = ModelShard{};
  s.layers = {1, 3};
  EXPECT_THAT(GptModel::Create(c, s),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("consecutive")));
  s.layers = {3, 4};
  EXPECT_THAT(GptModel::Create(c, s),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("consecutive")));
}

}  // namespace
}  // namespace mt::model
