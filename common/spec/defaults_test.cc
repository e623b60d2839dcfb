#include "common/spec/defaults.h"

#include <string>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace mt::spec {
namespace {

using google::protobuf::util::MessageDifferencer;

TEST(SpecDefaultsTest, EmptySpecGetsEveryDefault) {
  mt::v1::JobSpec s;
  ApplyDefaults(&s);
  EXPECT_EQ(s.name(), "job");
  EXPECT_EQ(s.priority(), 0);

  EXPECT_EQ(s.model().ffn_hidden_size(), 0);  // hidden_size unknown
  EXPECT_EQ(s.model().kv_channels(), 0);
  EXPECT_EQ(s.model().max_position_embeddings(), 0);
  EXPECT_EQ(s.model().vocab_size(), 0);  // the tokenizer's
  EXPECT_EQ(s.model().make_vocab_size_divisible_by(), 128);
  EXPECT_EQ(s.model().hidden_dropout(), 0.1);
  EXPECT_EQ(s.model().attention_dropout(), 0.1);
  EXPECT_EQ(s.model().init_method_std(), 0.02);
  EXPECT_EQ(s.model().layernorm_epsilon(), 1e-5);
  EXPECT_FALSE(s.model().untie_embeddings_and_output_weights());

  EXPECT_EQ(s.parallel().tensor_model_parallel_size(), 1);
  EXPECT_EQ(s.parallel().pipeline_model_parallel_size(), 1);
  EXPECT_EQ(s.parallel().context_parallel_size(), 1);
  EXPECT_EQ(s.parallel().data_parallel_size(), 0);  // auto
  EXPECT_EQ(s.parallel().world_size(), 0);          // auto
  EXPECT_EQ(s.parallel().num_layers_per_virtual_pipeline_stage(), 0);
  EXPECT_EQ(s.parallel().ddp_bucket_size(), 40000000);

  const mt::v1::TrainingSpec& t = s.training();
  EXPECT_EQ(t.global_batch_size(), 0);
  EXPECT_EQ(t.min_lr(), 0);
  EXPECT_EQ(t.lr_decay_style(), mt::v1::LR_DECAY_STYLE_LINEAR);
  EXPECT_EQ(t.lr_decay_iters(), 0);
  EXPECT_EQ(t.lr_warmup_iters(), 0);
  EXPECT_FALSE(t.has_lr_warmup_fraction());
  EXPECT_EQ(t.optimizer(), mt::v1::OPTIMIZER_ADAM);
  EXPECT_EQ(t.weight_decay(), 0.01);
  EXPECT_EQ(t.adam_beta1(), 0.9);
  EXPECT_EQ(t.adam_beta2(), 0.999);
  EXPECT_EQ(t.adam_eps(), 1e-8);
  EXPECT_EQ(t.sgd_momentum(), 0.9);
  EXPECT_EQ(t.clip_grad(), 1.0);
  EXPECT_EQ(t.precision(), mt::v1::PRECISION_FP32);
  EXPECT_FALSE(t.has_loss_scale());
  EXPECT_EQ(t.initial_loss_scale(), 4294967296.0);
  EXPECT_EQ(t.min_loss_scale(), 1.0);
  EXPECT_EQ(t.loss_scale_window(), 1000);
  EXPECT_EQ(t.hysteresis(), 2);
  EXPECT_EQ(t.recompute_granularity(), mt::v1::RECOMPUTE_GRANULARITY_NONE);
  EXPECT_EQ(t.recompute_method(), mt::v1::RECOMPUTE_METHOD_UNIFORM);
  EXPECT_EQ(t.recompute_num_layers(), 1);
  EXPECT_EQ(t.seed(), 1234u);

  EXPECT_EQ(s.data().split(), "969,30,1");
  EXPECT_EQ(s.data().tokenizer().type(), mt::v1::TOKENIZER_TYPE_GPT2_BPE);
  EXPECT_EQ(s.data().num_workers(), 2);
  EXPECT_TRUE(s.checkpoint().has_retention());
  EXPECT_EQ(s.evaluation().eval_interval(), 1000);
  EXPECT_EQ(s.evaluation().eval_iters(), 100);
  EXPECT_EQ(s.logging().log_interval(), 100);
  EXPECT_EQ(s.restart().max_restarts(), 3);
  EXPECT_EQ(s.resources().device(), mt::v1::DEVICE_KIND_AUTO);

  // Every sub-message is present, so stored specs compare equal field by field.
  EXPECT_TRUE(s.has_model() && s.has_parallel() && s.has_training() && s.has_data() &&
              s.has_checkpoint() && s.has_evaluation() && s.has_logging() && s.has_restart() &&
              s.has_resources() && s.data().has_tokenizer());
}

TEST(SpecDefaultsTest, DerivedDefaultsFollowOtherFields) {
  mt::v1::JobSpec s;
  s.mutable_model()->set_hidden_size(1024);
  s.mutable_model()->set_num_attention_heads(16);
  s.mutable_model()->set_seq_length(2048);
  s.mutable_training()->set_train_iters(5000);
  ApplyDefaults(&s);
  EXPECT_EQ(s.model().ffn_hidden_size(), 4096);
  EXPECT_EQ(s.model().kv_channels(), 64);
  EXPECT_EQ(s.model().max_position_embeddings(), 2048);
  EXPECT_EQ(s.training().lr_decay_iters(), 5000);
  EXPECT_EQ(s.training().lr_decay_samples(), 0);
}

TEST(SpecDefaultsTest, SampleBasedDecayDefaultsToTrainSamples) {
  mt::v1::JobSpec s;
  s.mutable_training()->set_train_samples(300000);
  ApplyDefaults(&s);
  EXPECT_EQ(s.training().lr_decay_samples(), 300000);
  EXPECT_EQ(s.training().lr_decay_iters(), 0);
}

TEST(SpecDefaultsTest, KvChannelsLeftUnsetWhenHiddenNotDivisible) {
  mt::v1::JobSpec s;
  s.mutable_model()->set_hidden_size(1000);
  s.mutable_model()->set_num_attention_heads(16);
  ApplyDefaults(&s);
  EXPECT_EQ(s.model().kv_channels(), 0);
  EXPECT_EQ(s.model().ffn_hidden_size(), 4000);
}

TEST(SpecDefaultsTest, ExplicitValuesIncludingZerosAreKept) {
  mt::v1::JobSpec s;
  s.set_name("mine");
  s.mutable_model()->set_hidden_size(1024);
  s.mutable_model()->set_ffn_hidden_size(3000);
  s.mutable_model()->set_kv_channels(32);
  s.mutable_model()->set_hidden_dropout(0);
  s.mutable_model()->set_attention_dropout(0);
  s.mutable_model()->set_make_vocab_size_divisible_by(64);
  s.mutable_parallel()->set_tensor_model_parallel_size(4);
  s.mutable_training()->set_weight_decay(0);
  s.mutable_training()->set_clip_grad(0);
  s.mutable_training()->set_seed(0);
  s.mutable_training()->set_precision(mt::v1::PRECISION_BF16);
  s.mutable_training()->set_lr_decay_style(mt::v1::LR_DECAY_STYLE_COSINE);
  s.mutable_training()->set_train_iters(100);
  s.mutable_training()->set_lr_decay_iters(80);
  s.mutable_data()->set_num_workers(0);
  s.mutable_data()->set_split("100,0,0");
  s.mutable_evaluation()->set_eval_interval(0);
  s.mutable_restart()->set_max_restarts(0);
  s.mutable_resources()->set_device(mt::v1::DEVICE_KIND_CPU);
  ApplyDefaults(&s);
  EXPECT_EQ(s.name(), "mine");
  EXPECT_EQ(s.model().ffn_hidden_size(), 3000);
  EXPECT_EQ(s.model().kv_channels(), 32);
  EXPECT_EQ(s.model().hidden_dropout(), 0);
  EXPECT_EQ(s.model().attention_dropout(), 0);
  EXPECT_EQ(s.model().make_vocab_size_divisible_by(), 64);
  EXPECT_EQ(s.parallel().tensor_model_parallel_size(), 4);
  EXPECT_EQ(s.training().weight_decay(), 0);
  EXPECT_EQ(s.training().clip_grad(), 0);
  EXPECT_EQ(s.training().seed(), 0u);
  EXPECT_EQ(s.training().precision(), mt::v1::PRECISION_BF16);
  EXPECT_EQ(s.training().lr_decay_style(), mt::v1::LR_DECAY_STYLE_COSINE);
  EXPECT_EQ(s.training().lr_decay_iters(), 80);
  EXPECT_EQ(s.data().num_workers(), 0);
  EXPECT_EQ(s.data().split(), "100,0,0");
  EXPECT_EQ(s.evaluation().eval_interval(), 0);
  EXPECT_EQ(s.restart().max_restarts(), 0);
  EXPECT_EQ(s.resources().device(), mt::v1::DEVICE_KIND_CPU);
}

struct GlobalBatchCase {
  const char* name;
  int dp;
  int world;
  int tp;
  int pp;
  int micro;
  int want_global;
};

class SpecDefaultsGlobalBatchTest : public ::testing::TestWithParam<GlobalBatchCase> {};

TEST_P(SpecDefaultsGlobalBatchTest, IsMicroTimesKnownDataParallelSize) {
  const GlobalBatchCase& c = GetParam();
  mt::v1::JobSpec s;
  s.mutable_parallel()->set_data_parallel_size(c.dp);
  s.mutable_parallel()->set_world_size(c.world);
  s.mutable_parallel()->set_tensor_model_parallel_size(c.tp);
  s.mutable_parallel()->set_pipeline_model_parallel_size(c.pp);
  s.mutable_training()->set_micro_batch_size(c.micro);
  ApplyDefaults(&s);
  EXPECT_EQ(s.training().global_batch_size(), c.want_global);
  EXPECT_EQ(s.parallel().data_parallel_size(), c.dp);  // never filled in
  EXPECT_EQ(s.parallel().world_size(), c.world);
}

INSTANTIATE_TEST_SUITE_P(Cases, SpecDefaultsGlobalBatchTest,
                         ::testing::Values(GlobalBatchCase{"explicit_dp", 4, 0, 1, 1, 8, 32},
                                           GlobalBatchCase{"from_world", 0, 16, 2, 2, 4, 16},
                                           GlobalBatchCase{"auto", 0, 0, 2, 2, 4, 0},
                                           GlobalBatchCase{"world_not_multiple", 0, 10, 4, 1, 4, 0},
                                           GlobalBatchCase{"no_micro", 2, 0, 1, 1, 0, 0}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(SpecDefaultsTest, ExplicitGlobalBatchIsKept) {
  mt::v1::JobSpec s;
  s.mutable_parallel()->set_data_parallel_size(2);
  s.mutable_training()->set_micro_batch_size(4);
  s.mutable_training()->set_global_batch_size(64);
  ApplyDefaults(&s);
  EXPECT_EQ(s.training().global_batch_size(), 64);
}

TEST(SpecDefaultsTest, SingleDataPathWeightDefaultsToOne) {
  mt::v1::JobSpec s;
  s.mutable_data()->add_data_path()->set_prefix("a");
  s.mutable_data()->add_train_data_path()->set_prefix("t");
  auto* v1 = s.mutable_data()->add_valid_data_path();
  v1->set_prefix("v1");
  auto* v2 = s.mutable_data()->add_valid_data_path();
  v2->set_prefix("v2");
  v2->set_weight(2);
  ApplyDefaults(&s);
  EXPECT_EQ(s.data().data_path(0).weight(), 1.0);
  EXPECT_EQ(s.data().train_data_path(0).weight(), 1.0);
  // With several paths a missing weight stays missing; the validator reports it.
  EXPECT_EQ(s.data().valid_data_path(0).weight(), 0.0);
  EXPECT_EQ(s.data().valid_data_path(1).weight(), 2.0);
}

TEST(SpecDefaultsTest, IsIdempotent) {
  mt::v1::JobSpec s;
  s.mutable_model()->set_hidden_size(768);
  s.mutable_model()->set_num_attention_heads(12);
  s.mutable_model()->set_seq_length(1024);
  s.mutable_parallel()->set_data_parallel_size(2);
  s.mutable_training()->set_micro_batch_size(4);
  s.mutable_training()->set_train_iters(10);
  s.mutable_data()->add_data_path()->set_prefix("a");
  ApplyDefaults(&s);
  mt::v1::JobSpec again = s;
  ApplyDefaults(&again);
  EXPECT_TRUE(MessageDifferencer::Equals(s, again));
}

TEST(SpecDefaultsTest, HugeHiddenSizeDoesNotOverflowFfn) {
  mt::v1::JobSpec s;
  s.mutable_model()->set_hidden_size(1 << 30);
  ApplyDefaults(&s);
  EXPECT_EQ(s.model().ffn_hidden_size(), 0);  // 4 * 2^30 does not fit; the validator reports it
}

TEST(SpecDefaultsTest, ResolveForLayoutSetsTheGlobalBatchOnce) {
  mt::v1::JobSpec s;
  s.mutable_training()->set_micro_batch_size(4);
  ApplyDefaults(&s);
  ASSERT_EQ(s.training().global_batch_size(), 0);  // DP unknown until placement
  ASSERT_TRUE(ResolveForLayout(&s, 3).ok());
  EXPECT_EQ(s.training().global_batch_size(), 12);
  // Idempotent, and a later placement at another DP keeps the batch the job started with.
  ASSERT_TRUE(ResolveForLayout(&s, 2).ok());
  EXPECT_EQ(s.training().global_batch_size(), 12);
}

TEST(SpecDefaultsTest, ResolveForLayoutRefusesContradictionsAndOverflow) {
  mt::v1::JobSpec s;
  s.mutable_training()->set_micro_batch_size(1 << 30);
  EXPECT_EQ(ResolveForLayout(&s, 0).code(), absl::StatusCode::kInvalidArgument);
  absl::Status overflow = ResolveForLayout(&s, 4);
  EXPECT_EQ(overflow.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(overflow.message().find("training.global_batch_size"), std::string::npos) << overflow;
  EXPECT_EQ(s.training().global_batch_size(), 0);  // nothing half-written
  s.mutable_training()->set_micro_batch_size(2);
  s.mutable_parallel()->set_data_parallel_size(2);
  absl::Status other = ResolveForLayout(&s, 4);
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other.message().find("parallel.data_parallel_size"), std::string::npos) << other;
}

}  // namespace
}  // namespace mt::spec
