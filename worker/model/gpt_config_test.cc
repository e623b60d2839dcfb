#include "worker/model/gpt_config.h"

#include <cmath>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::model {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

TEST(PaddedVocabSizeTest, MegatronRule) {
  struct Case {
    int64_t vocab, divisible_by, tp, want;
  };
  const Case cases[] = {
      {50257, 128, 1, 50304}, {50257, 128, 2, 50432}, {50257, 128, 8, 51200},
      {50304, 128, 1, 50304}, {128, 128, 1, 128},     {100, 128, 1, 128},
      {129, 128, 1, 256},     {11, 1, 1, 11},         {11, 16, 1, 16},
      {1, 128, 1, 128},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(PaddedVocabSize(c.vocab, c.divisible_by, c.tp), c.want)
        << c.vocab << " " << c.divisible_by << " " << c.tp;
  }
}

mt::v1::JobSpec Gpt2SmallSpec() {
  mt::v1::JobSpec spec;
  auto* m = spec.mutable_model();
  m->set_num_layers(12);
  m->set_hidden_size(768);
  m->set_num_attention_heads(12);
  m->set_seq_length(1024);
  return spec;
}

TEST(GptConfigTest, FromSpecAppliesProtoDefaults) {
  MT_ASSERT_OK_AND_ASSIGN(GptConfig c, GptConfig::FromSpec(Gpt2SmallSpec()));
  EXPECT_EQ(c.ffn_size(), 3072);
  EXPECT_EQ(c.head_dim(), 64);
  EXPECT_EQ(c.max_positions(), 1024);
  EXPECT_EQ(c.vocab_size, 50257);
  EXPECT_EQ(c.padded_vocab_size(), 50304);
  EXPECT_DOUBLE_EQ(c.hidden_dropout, 0.1);
  EXPECT_DOUBLE_EQ(c.attention_dropout, 0.1);
  EXPECT_DOUBLE_EQ(c.init_method_std, 0.02);
  EXPECT_DOUBLE_EQ(c.layernorm_epsilon, 1e-5);
  EXPECT_FALSE(c.untie_embeddings_and_output_weights);
  EXPECT_EQ(c.recompute_granularity, RecomputeGranularity::kNone);
}

TEST(GptConfigTest, FromSpecReadsExplicitFields) {
  mt::v1::JobSpec spec = Gpt2SmallSpec();
  auto* m = spec.mutable_model();
  m->set_hidden_dropout(0.0);
  m->set_attention_dropout(0.0);
  m->set_ffn_hidden_size(1000);
  m->set_vocab_size(1000);
  m->set_make_vocab_size_divisible_by(64);
  m->set_untie_embeddings_and_output_weights(true);
  spec.mutable_parallel()->set_tensor_model_parallel_size(2);
  spec.mutable_training()->set_recompute_granularity(mt::v1::RECOMPUTE_GRANULARITY_FULL);
  spec.mutable_training()->set_recompute_method(mt::v1::RECOMPUTE_METHOD_BLOCK);
  spec.mutable_training()->set_recompute_num_layers(3);
  MT_ASSERT_OK_AND_ASSIGN(GptConfig c, GptConfig::FromSpec(spec));
  EXPECT_DOUBLE_EQ(c.hidden_dropout, 0.0);  // explicit 0 is not "unset"
  EXPECT_EQ(c.ffn_size(), 1000);
  EXPECT_EQ(c.padded_vocab_size(), 1024);  // multiple of 64 * tp 2
  EXPECT_TRUE(c.untie_embeddings_and_output_weights);
  EXPECT_EQ(c.recompute_granularity, RecomputeGranularity::kFull);
  EXPECT_EQ(c.recompute_method, RecomputeMethod::kBlock);
  EXPECT_EQ(c.recompute_num_layers, 3);
}

TEST(GptConfigTest, RejectsBadShapes) {
  mt::v1::JobSpec spec = Gpt2SmallSpec();
  spec.mutable_model()->set_num_attention_heads(5);
  EXPECT_THAT(GptConfig::FromSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not divisible")));
  spec = Gpt2SmallSpec();
  spec.mutable_model()->set_max_position_embeddings(512);
  EXPECT_THAT(GptConfig::FromSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_position_embeddings")));
  spec = Gpt2SmallSpec();
  spec.mutable_model()->set_hidden_dropout(1.0);
  EXPECT_THAT(GptConfig::FromSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hidden_dropout")));
  spec = Gpt2SmallSpec();
  spec.mutable_training()->set_recompute_granularity(mt::v1::RECOMPUTE_GRANULARITY_FULL);
  spec.mutable_training()->set_recompute_num_layers(13);
  EXPECT_THAT(GptConfig::FromSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("recompute_num_layers")));
  spec = Gpt2SmallSpec();
  spec.mutable_model()->set_num_layers(0);
  EXPECT_THAT(GptConfig::FromSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_layers")));
}

// Reference counts: GPT-2 small/medium as published (Hugging Face, vocabulary 50257, 1024
// positions) plus Megatron's padding rows (47 * hidden).
TEST(CountParametersTest, Gpt2Sizes) {
  MT_ASSERT_OK_AND_ASSIGN(GptConfig small, GptConfig::FromSpec(Gpt2SmallSpec()));
  EXPECT_EQ(CountParameters(small), 124439808 + 47 * 768);
  mt::v1::JobSpec medium = Gpt2SmallSpec();
  medium.mutable_model()->set_num_layers(24);
  medium.mutable_model()->set_hidden_size(1024);
  medium.mutable_model()->set_num_attention_heads(16);
  MT_ASSERT_OK_AND_ASSIGN(GptConfig m, GptConfig::FromSpec(medium));
  EXPECT_EQ(CountParameters(m), 354823168 + 47 * 1024);
  // Untied: one more vocabulary-sized matrix.
  small.untie_embeddings_and_output_weights = true;
  EXPECT_EQ(CountParameters(small), 124439808 + 47 * 768 + 50304 * 768);
}

// DESIGN.md §9: GPT-2 124M at 374K tokens/s on an H200 (989 TFLOP/s) is 32.6% MFU, 350M at
// 157K tokens/s 38.7%, 1.3B (24 x 2048) at 56K tokens/s 48.1%. The table's throughputs are
// rounded to 1K tokens/s, hence the 0.15-point tolerance.
TEST(MfuTest, MatchesDesignAnchors) {
  struct Case {
    int64_t layers, hidden, heads;
    double tokens_per_s, want_mfu;
  };
  const Case cases[] = {
      {12, 768, 12, 374e3, 0.326},
      {24, 1024, 16, 157e3, 0.387},
      {24, 2048, 16, 56e3, 0.481},
  };
  for (const Case& c : cases) {
    mt::v1::JobSpec spec = Gpt2SmallSpec();
    spec.mutable_model()->set_num_layers(static_cast<int32_t>(c.layers));
    spec.mutable_model()->set_hidden_size(static_cast<int32_t>(c.hidden));
    spec.mutable_model()->set_num_attention_heads(static_cast<int32_t>(c.heads));
    MT_ASSERT_OK_AND_ASSIGN(GptConfig g, GptConfig::FromSpec(spec));
    const double flops =
        TrainingFlopsPerToken(CountParameters(g), g.num_layers, g.hidden_size, g.seq_length);
    EXPECT_NEAR(ModelFlopsUtilization(c.tokens_per_s, flops, 989e12), c.want_mfu, 0.0015)
        << c.layers << "x" << c.hidden;
  }
  EXPECT_EQ(ModelFlopsUtilization(1e6, 1e9, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(10, 2, 3, 4), 6.0 * 10 + 12.0 * 2 * 3 * 4);
}

}  // namespace
}  // namespace mt::model
