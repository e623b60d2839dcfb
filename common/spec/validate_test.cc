#include "common/spec/validate.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <string>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/status_matchers.h"
#include "common/spec/defaults.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::spec {
namespace {

using ::mt::testing::IsOk;
using ::mt::testing::StatusIs;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// A small valid job: 24 layers, TP 2, PP 2, DP auto.
mt::v1::JobSpec ValidSpec() {
  mt::v1::JobSpec s;
  s.set_name("gpt-350m");
  auto* m = s.mutable_model();
  m->set_num_layers(24);
  m->set_hidden_size(1024);
  m->set_num_attention_heads(16);
  m->set_seq_length(1024);
  auto* p = s.mutable_parallel();
  p->set_tensor_model_parallel_size(2);
  p->set_pipeline_model_parallel_size(2);
  auto* t = s.mutable_training();
  t->set_micro_batch_size(4);
  t->set_global_batch_size(64);
  t->set_train_iters(1000);
  t->set_lr(1.5e-4);
  t->set_min_lr(1e-5);
  auto* d = s.mutable_data();
  auto* path = d->add_data_path();
  path->set_weight(1);
  path->set_prefix("/data/a_text_document");
  d->mutable_tokenizer()->set_vocab_file("/assets/gpt2-vocab.json");
  d->mutable_tokenizer()->set_merge_file("/assets/gpt2-merges.txt");
  ApplyDefaults(&s);
  return s;
}

TEST(SpecValidateTest, ValidSpecPasses) {
  EXPECT_THAT(ValidateSpec(ValidSpec()), IsOk());
  EXPECT_THAT(ListSpecProblems(ValidSpec()), IsEmpty());
}

TEST(SpecValidateTest, SameResultBeforeAndAfterDefaults) {
  mt::v1::JobSpec s = ValidSpec();
  mt::v1::JobSpec raw;
  raw.set_name("x");
  *raw.mutable_model() = s.model();
  raw.mutable_model()->clear_hidden_dropout();
  raw.mutable_model()->clear_ffn_hidden_size();
  raw.mutable_training()->set_micro_batch_size(4);
  raw.mutable_training()->set_train_iters(10);
  raw.mutable_training()->set_lr(0.1);
  *raw.mutable_data() = s.data();
  EXPECT_THAT(ValidateSpec(raw), IsOk());
  ApplyDefaults(&raw);
  EXPECT_THAT(ValidateSpec(raw), IsOk());
}

TEST(SpecValidateTest, ExactMessagesForDivisibility) {
  mt::v1::JobSpec s = ValidSpec();
  s.mutable_model()->set_hidden_size(1000);
  s.mutable_parallel()->set_tensor_model_parallel_size(1);
  EXPECT_THAT(ListSpecProblems(s),
              ElementsAre("model.hidden_size (1000) must be divisible by "
                          "model.num_attention_heads (16); choose a multiple of 16 such as 1008"));

  s = ValidSpec();
  s.mutable_parallel()->set_tensor_model_parallel_size(3);
  s.mutable_model()->set_hidden_size(1008);  // divisible by 3 and by 16
  s.mutable_model()->set_ffn_hidden_size(4032);
  EXPECT_THAT(ListSpecProblems(s),
              ElementsAre("parallel.tensor_model_parallel_size (3) must divide "
                          "model.num_attention_heads (16); choose one of 1, 2, 4, 8, 16"));
}

TEST(SpecValidateTest, EveryProblemIsListedOnItsOwnLine) {
  mt::v1::JobSpec s = ValidSpec();
  s.mutable_model()->set_hidden_size(1001);
  s.mutable_training()->set_lr(0);
  s.mutable_data()->clear_data_path();
  const absl::Status status = ValidateSpec(s);
  ASSERT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  std::vector<std::string> lines = absl::StrSplit(status.message(), '\n');
  ASSERT_THAT(lines, SizeIs(4));
  EXPECT_THAT(lines[0], HasSubstr("model.hidden_size (1001) must be divisible"));
  EXPECT_THAT(lines[1], HasSubstr("parallel.tensor_model_parallel_size (2) must divide "
                                  "model.hidden_size (1001)"));
  EXPECT_THAT(lines[2], HasSubstr("training.lr (--lr) is required"));
  EXPECT_THAT(lines[3], HasSubstr("data.data_path (--data-path) is empty"));
}

struct Case {
  std::string name;
  std::function<void(mt::v1::JobSpec*)> mutate;
  std::string want;  // a substring of the message; "" = valid
};

class SpecValidateRuleTest : public ::testing::TestWithParam<Case> {};

TEST_P(SpecValidateRuleTest, Checks) {
  mt::v1::JobSpec s = ValidSpec();
  GetParam().mutate(&s);
  if (GetParam().want.empty()) {
    EXPECT_THAT(ValidateSpec(s), IsOk());
  } else {
    EXPECT_THAT(ValidateSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().want)));
  }
}

using S = mt::v1::JobSpec;
const std::string kLong4097(4097, 'a');

// clang-format off
const Case kCases[] = {
  // Job.
  {"name_ok", [](S* s) { s->set_name(std::string(128, 'x')); }, ""},
  {"name_charset_ok", [](S* s) { s->set_name("gpt-2_small.v1"); }, ""},
  {"name_too_long", [](S* s) { s->set_name(std::string(129, 'x')); },
   "must be 1..128 characters of [A-Za-z0-9._-]"},
  {"name_space", [](S* s) { s->set_name("my job"); },
   "name (\"my job\") must be 1..128 characters of [A-Za-z0-9._-]"},
  {"name_shell", [](S* s) { s->set_name("job;reboot"); },
   "name (\"job;reboot\") contains the shell metacharacter \";\""},
  {"name_nul", [](S* s) { s->set_name(std::string("a\0b", 3)); }, "name contains a NUL byte"},
  {"priority_ok", [](S* s) { s->set_priority(-1000); }, ""},
  {"priority_range", [](S* s) { s->set_priority(1001); },
   "priority (1001) is out of range -1000..1000"},
  {"from_checkpoint_shell", [](S* s) { s->set_from_checkpoint("`id`"); },
   "from_checkpoint (\"`id`\") contains the shell metacharacter \"`\""},

  // Model sizes.
  {"layers_required", [](S* s) { s->mutable_model()->set_num_layers(0); },
   "model.num_layers (--num-layers) is required: set the number of transformer layers, 1..1024"},
  {"layers_range", [](S* s) { s->mutable_model()->set_num_layers(1026); },
   "model.num_layers (1026) is out of range 1..1024"},
  {"layers_negative", [](S* s) { s->mutable_model()->set_num_layers(-2); },
   "model.num_layers (-2) is out of range 1..1024"},
  {"hidden_required", [](S* s) { s->mutable_model()->set_hidden_size(0); },
   "model.hidden_size (--hidden-size) is required"},
  {"hidden_range", [](S* s) { s->mutable_model()->set_hidden_size(65537); },
   "model.hidden_size (65537) is out of range 1..65536"},
  {"heads_required", [](S* s) { s->mutable_model()->set_num_attention_heads(0); },
   "model.num_attention_heads (--num-attention-heads) is required"},
  {"heads_range", [](S* s) { s->mutable_model()->set_num_attention_heads(2048); },
   "model.num_attention_heads (2048) is out of range 1..1024"},
  {"seq_required", [](S* s) { s->mutable_model()->set_seq_length(0); },
   "model.seq_length (--seq-length) is required"},
  {"seq_range", [](S* s) { s->mutable_model()->set_seq_length(1048577); },
   "model.seq_length (1048577) is out of range 1..1048576"},
  {"hidden_heads", [](S* s) {
     s->mutable_model()->set_hidden_size(1000);
   }, "model.hidden_size (1000) must be divisible by model.num_attention_heads (16); choose a "
      "multiple of 16 such as 1008"},
  {"ffn_negative", [](S* s) { s->mutable_model()->set_ffn_hidden_size(-1); },
   "model.ffn_hidden_size (-1) must be >= 0 (0 = 4 * hidden_size)"},
  {"kv_negative", [](S* s) { s->mutable_model()->set_kv_channels(-1); },
   "model.kv_channels (-1) must be >= 0"},
  {"vocab_negative", [](S* s) { s->mutable_model()->set_vocab_size(-1); },
   "model.vocab_size (-1) must be >= 0 (0 = the tokenizer's)"},
  {"vocab_ok", [](S* s) { s->mutable_model()->set_vocab_size(50257); }, ""},
  {"max_pos_short", [](S* s) { s->mutable_model()->set_max_position_embeddings(512); },
   "model.max_position_embeddings (512) must be >= model.seq_length (1024)"},
  {"max_pos_longer_ok", [](S* s) { s->mutable_model()->set_max_position_embeddings(2048); }, ""},
  {"make_vocab_zero", [](S* s) { s->mutable_model()->set_make_vocab_size_divisible_by(0); },
   "model.make_vocab_size_divisible_by (0) is out of range 1..65536"},
  {"make_vocab_big", [](S* s) { s->mutable_model()->set_make_vocab_size_divisible_by(65537); },
   "model.make_vocab_size_divisible_by (65537) is out of range 1..65536"},
  {"hidden_dropout_range", [](S* s) { s->mutable_model()->set_hidden_dropout(1.5); },
   "model.hidden_dropout (1.5) must be in [0, 1]"},
  {"attention_dropout_negative", [](S* s) { s->mutable_model()->set_attention_dropout(-0.1); },
   "model.attention_dropout (-0.1) must be in [0, 1]"},
  {"dropout_nan", [](S* s) { s->mutable_model()->set_hidden_dropout(std::nan("")); },
   "model.hidden_dropout (.nan) must be in [0, 1]"},
  {"dropout_bounds_ok", [](S* s) {
     s->mutable_model()->set_hidden_dropout(0);
     s->mutable_model()->set_attention_dropout(1);
   }, ""},
  {"init_std_zero", [](S* s) { s->mutable_model()->set_init_method_std(0); },
   "model.init_method_std (0.0) must be > 0"},
  {"layernorm_eps_negative", [](S* s) { s->mutable_model()->set_layernorm_epsilon(-1e-5); },
   "model.layernorm_epsilon (-1.0e-05) must be > 0"},

  // Tensor parallelism.
  {"tp_heads", [](S* s) { s->mutable_parallel()->set_tensor_model_parallel_size(3); },
   "parallel.tensor_model_parallel_size (3) must divide model.num_attention_heads (16)"},
  {"tp_hidden", [](S* s) {
     s->mutable_model()->set_hidden_size(1025);
     s->mutable_model()->set_ffn_hidden_size(4096);
   }, "parallel.tensor_model_parallel_size (2) must divide model.hidden_size (1025)"},
  {"tp_ffn", [](S* s) { s->mutable_model()->set_ffn_hidden_size(4095); },
   "model.ffn_hidden_size (4095) must be divisible by parallel.tensor_model_parallel_size (2); "
   "choose a multiple of 2 such as 4096"},
  {"tp_8_ok", [](S* s) { s->mutable_parallel()->set_tensor_model_parallel_size(8); }, ""},
  {"tp_range", [](S* s) { s->mutable_parallel()->set_tensor_model_parallel_size(128); },
   "parallel.tensor_model_parallel_size (128) is out of range 1..64"},
  {"pp_range", [](S* s) { s->mutable_parallel()->set_pipeline_model_parallel_size(2000); },
   "parallel.pipeline_model_parallel_size (2000) is out of range 1..1024"},
  {"cp_negative", [](S* s) { s->mutable_parallel()->set_context_parallel_size(-1); },
   "parallel.context_parallel_size (-1) is out of range 1..65536"},
  {"dp_negative", [](S* s) { s->mutable_parallel()->set_data_parallel_size(-1); },
   "parallel.data_parallel_size (-1) is out of range 0..1048576"},
  {"world_negative", [](S* s) { s->mutable_parallel()->set_world_size(-4); },
   "parallel.world_size (-4) is out of range 0..1048576"},
  {"ddp_bucket_negative", [](S* s) { s->mutable_parallel()->set_ddp_bucket_size(-1); },
   "parallel.ddp_bucket_size (-1) must be >= 0"},

  // Pipeline.
  {"layers_pp", [](S* s) {
     s->mutable_model()->set_num_layers(10);
     s->mutable_parallel()->set_pipeline_model_parallel_size(4);
   }, "model.num_layers (10) must be divisible by parallel.pipeline_model_parallel_size (4); "
      "choose a multiple of 4 such as 12, or give parallel.pipeline_layer_split with 4 entries "
      "summing to 10"},
  {"layer_split_ok", [](S* s) {
     s->mutable_model()->set_num_layers(10);
     s->mutable_parallel()->set_pipeline_model_parallel_size(4);
     for (int n : {3, 3, 2, 2}) s->mutable_parallel()->add_pipeline_layer_split(n);
   }, ""},
  {"layer_split_count", [](S* s) {
     for (int n : {8, 8, 8}) s->mutable_parallel()->add_pipeline_layer_split(n);
   }, "parallel.pipeline_layer_split has 3 entries; it needs one per pipeline stage "
      "(parallel.pipeline_model_parallel_size = 2)"},
  {"layer_split_zero", [](S* s) {
     for (int n : {24, 0}) s->mutable_parallel()->add_pipeline_layer_split(n);
   }, "parallel.pipeline_layer_split[1] (0) must be >= 1"},
  {"layer_split_sum", [](S* s) {
     for (int n : {12, 10}) s->mutable_parallel()->add_pipeline_layer_split(n);
   }, "parallel.pipeline_layer_split sums to 22; it must sum to model.num_layers (24)"},
  {"virtual_ok", [](S* s) {
     s->mutable_parallel()->set_pipeline_model_parallel_size(4);
     s->mutable_parallel()->set_num_layers_per_virtual_pipeline_stage(3);
   }, ""},
  {"virtual_needs_pp", [](S* s) {
     s->mutable_parallel()->set_pipeline_model_parallel_size(1);
     s->mutable_parallel()->set_num_layers_per_virtual_pipeline_stage(2);
   }, "parallel.num_layers_per_virtual_pipeline_stage (2) needs "
      "parallel.pipeline_model_parallel_size > 1 (it is 1)"},
  {"virtual_divisible", [](S* s) {
     s->mutable_parallel()->set_pipeline_model_parallel_size(4);
     s->mutable_parallel()->set_num_layers_per_virtual_pipeline_stage(4);
   }, "model.num_layers (24) must be divisible by parallel.pipeline_model_parallel_size (4) * "
      "parallel.num_layers_per_virtual_pipeline_stage (4) = 16 for the interleaved schedule"},
  {"virtual_with_split", [](S* s) {
     s->mutable_parallel()->set_num_layers_per_virtual_pipeline_stage(2);
     for (int n : {12, 12}) s->mutable_parallel()->add_pipeline_layer_split(n);
   }, "cannot be combined with parallel.pipeline_layer_split"},
  {"virtual_negative", [](S* s) {
     s->mutable_parallel()->set_num_layers_per_virtual_pipeline_stage(-1);
   }, "parallel.num_layers_per_virtual_pipeline_stage (-1) must be >= 0"},
  {"interleaved_microbatches", [](S* s) {
     s->mutable_parallel()->set_pipeline_model_parallel_size(4);
     s->mutable_parallel()->set_num_layers_per_virtual_pipeline_stage(3);
     s->mutable_parallel()->set_data_parallel_size(2);
     s->mutable_training()->set_global_batch_size(24);  // 3 micro-batches
   }, "the interleaved schedule needs the number of micro-batches (training.global_batch_size / "
      "(micro_batch_size * data-parallel size) = 3) to be divisible by "
      "parallel.pipeline_model_parallel_size (4); choose global_batch_size such as 32"},
  {"interleaved_microbatches_ok", [](S* s) {
     s->mutable_parallel()->set_pipeline_model_parallel_size(4);
     s->mutable_parallel()->set_num_layers_per_virtual_pipeline_stage(3);
     s->mutable_parallel()->set_data_parallel_size(2);
     s->mutable_training()->set_global_batch_size(32);
   }, ""},

  // World size.
  {"world_ok", [](S* s) { s->mutable_parallel()->set_world_size(16); }, ""},
  {"world_and_dp_ok", [](S* s) {
     s->mutable_parallel()->set_world_size(16);
     s->mutable_parallel()->set_data_parallel_size(4);
   }, ""},
  {"world_mismatch", [](S* s) {
     s->mutable_parallel()->set_tensor_model_parallel_size(2);
     s->mutable_parallel()->set_pipeline_model_parallel_size(4);
     s->mutable_parallel()->set_data_parallel_size(3);
     s->mutable_parallel()->set_world_size(16);
     s->mutable_training()->set_global_batch_size(48);
   }, "parallel.world_size (16) != tp(2)*cp(1)*pp(4)*dp(3) = 24; set world_size to 24, or "
      "data_parallel_size to auto (0)"},
  {"world_not_multiple", [](S* s) { s->mutable_parallel()->set_world_size(10); },
   "parallel.world_size (10) must be a multiple of tp(2)*cp(1)*pp(2) = 4"},
  {"dp_too_large", [](S* s) { s->mutable_parallel()->set_data_parallel_size(1000000); },
   "tp(2)*cp(1)*pp(2)*dp(1000000) = 4000000 exceeds the largest world size (1048576)"},

  // Sequence and context parallelism, overlap.
  {"sp_needs_tp", [](S* s) {
     s->mutable_parallel()->set_tensor_model_parallel_size(1);
     s->mutable_parallel()->set_sequence_parallel(true);
   }, "parallel.sequence_parallel needs parallel.tensor_model_parallel_size > 1 (it is 1): "
      "sequence parallelism shards the tensor-parallel regions; set tensor_model_parallel_size "
      "(--tensor-model-parallel-size) to 2 or more, or turn sequence_parallel off"},
  {"sp_ok", [](S* s) { s->mutable_parallel()->set_sequence_parallel(true); }, ""},
  {"sp_seq", [](S* s) {
     s->mutable_parallel()->set_sequence_parallel(true);
     s->mutable_model()->set_seq_length(1023);
   }, "model.seq_length (1023) must be divisible by parallel.tensor_model_parallel_size (2) with "
      "parallel.sequence_parallel"},
  {"tp_comm_overlap_needs_sp", [](S* s) { s->mutable_parallel()->set_tp_comm_overlap(true); },
   "parallel.tp_comm_overlap needs parallel.sequence_parallel (--sequence-parallel)"},
  {"tp_comm_overlap_ok", [](S* s) {
     s->mutable_parallel()->set_sequence_parallel(true);
     s->mutable_parallel()->set_tp_comm_overlap(true);
   }, ""},
  {"cp_seq", [](S* s) {
     s->mutable_parallel()->set_context_parallel_size(3);
   }, "model.seq_length (1024) must be divisible by 2 * parallel.context_parallel_size (6)"},
  {"cp_ok", [](S* s) { s->mutable_parallel()->set_context_parallel_size(4); }, ""},
  {"param_gather_needs_distopt", [](S* s) {
     s->mutable_parallel()->set_overlap_param_gather(true);
     s->mutable_parallel()->set_overlap_grad_reduce(true);
   }, "parallel.overlap_param_gather needs parallel.use_distributed_optimizer "
      "(--use-distributed-optimizer)"},
  {"param_gather_needs_grad_reduce", [](S* s) {
     s->mutable_parallel()->set_overlap_param_gather(true);
     s->mutable_parallel()->set_use_distributed_optimizer(true);
   }, "parallel.overlap_param_gather needs parallel.overlap_grad_reduce"},
  {"param_gather_ok", [](S* s) {
     s->mutable_parallel()->set_overlap_param_gather(true);
     s->mutable_parallel()->set_overlap_grad_reduce(true);
     s->mutable_parallel()->set_use_distributed_optimizer(true);
     s->mutable_parallel()->set_overlap_p2p_comm(true);
   }, ""},

  // Batch sizes.
  {"micro_required", [](S* s) { s->mutable_training()->set_micro_batch_size(0); },
   "training.micro_batch_size (--micro-batch-size) is required"},
  {"micro_range", [](S* s) { s->mutable_training()->set_micro_batch_size(65537); },
   "training.micro_batch_size (65537) is out of range 1..65536"},
  {"global_range", [](S* s) { s->mutable_training()->set_global_batch_size(16777217); },
   "training.global_batch_size (16777217) is out of range 0..16777216"},
  {"global_micro_dp", [](S* s) { s->mutable_parallel()->set_data_parallel_size(3); },
   "training.global_batch_size (64) must be divisible by training.micro_batch_size (4) * "
   "parallel.data_parallel_size (3) = 12; choose a multiple of 12 such as 72"},
  {"global_micro_dp_ok", [](S* s) {
     s->mutable_parallel()->set_data_parallel_size(3);
     s->mutable_training()->set_global_batch_size(72);
   }, ""},
  {"global_micro_world", [](S* s) { s->mutable_parallel()->set_world_size(12); },
   "training.global_batch_size (64) must be divisible by training.micro_batch_size (4) * the "
   "data-parallel size (3 = parallel.world_size / (tp*cp*pp)) = 12"},
  {"global_micro_dp_unknown", [](S* s) { s->mutable_training()->set_global_batch_size(66); },
   "training.global_batch_size (66) must be divisible by training.micro_batch_size (4); choose a "
   "multiple of 4 such as 68"},
  {"global_auto_ok", [](S* s) { s->mutable_training()->set_global_batch_size(0); }, ""},

  // Length of training.
  {"iters_and_samples", [](S* s) { s->mutable_training()->set_train_samples(10); },
   "training.train_iters (1000) and training.train_samples (10) are exclusive; set exactly one"},
  {"neither_iters_nor_samples", [](S* s) {
     s->mutable_training()->set_train_iters(0);
     s->mutable_training()->set_lr_decay_iters(0);
   }, "set exactly one of training.train_iters (--train-iters) and training.train_samples "
      "(--train-samples): neither is set"},
  {"samples_ok", [](S* s) {
     s->mutable_training()->set_train_iters(0);
     s->mutable_training()->set_lr_decay_iters(0);
     s->mutable_training()->set_train_samples(64000);
   }, ""},
  {"iters_negative", [](S* s) { s->mutable_training()->set_train_iters(-5); },
   "training.train_iters (-5) must be >= 0"},
  {"iters_huge",
   [](S* s) { s->mutable_training()->set_train_iters(9223372036854775807); },
   "training.train_iters (9223372036854775807) is more than 1000000000000 steps; set a real "
   "length (stop a run early with mtctl cancel)"},
  {"samples_huge",
   [](S* s) {
     s->mutable_training()->set_train_iters(0);
     s->mutable_training()->set_train_samples(1'000'000'000'001);
   },
   "training.train_samples (1000000000001) is more than 1000000000000 samples; set a real "
   "length"},

  // Learning rate.
  {"lr_required", [](S* s) { s->mutable_training()->set_lr(0); },
   "training.lr (--lr) is required: set the peak learning rate, > 0 and <= 10.0"},
  {"lr_range", [](S* s) { s->mutable_training()->set_lr(11); },
   "training.lr (11.0) is out of range: it must be > 0 and <= 10.0"},
  {"lr_negative", [](S* s) { s->mutable_training()->set_lr(-1e-4); },
   "training.lr (-0.0001) is out of range"},
  {"lr_ten_ok", [](S* s) { s->mutable_training()->set_lr(10); }, ""},
  {"min_lr_above_lr", [](S* s) { s->mutable_training()->set_min_lr(1e-3); },
   "training.min_lr (0.001) must be <= training.lr (0.00015)"},
  {"min_lr_equal_ok", [](S* s) { s->mutable_training()->set_min_lr(1.5e-4); }, ""},
  {"min_lr_negative", [](S* s) { s->mutable_training()->set_min_lr(-1); },
   "training.min_lr (-1.0) must be >= 0"},
  {"decay_samples_with_iters", [](S* s) { s->mutable_training()->set_lr_decay_samples(5); },
   "training.lr_decay_samples (5) is for sample-based training (training.train_samples); with "
   "training.train_iters use training.lr_decay_iters"},
  {"warmup_samples_with_iters", [](S* s) { s->mutable_training()->set_lr_warmup_samples(5); },
   "training.lr_warmup_samples (5) is for sample-based training"},
  {"warmup_iters_with_samples", [](S* s) {
     s->mutable_training()->set_train_iters(0);
     s->mutable_training()->set_lr_decay_iters(0);
     s->mutable_training()->set_train_samples(6400);
     s->mutable_training()->set_lr_warmup_iters(10);
   }, "training.lr_warmup_iters (10) is for iteration-based training"},
  {"warmup_samples_with_samples_ok", [](S* s) {
     s->mutable_training()->set_train_iters(0);
     s->mutable_training()->set_lr_decay_iters(0);
     s->mutable_training()->set_train_samples(6400);
     s->mutable_training()->set_lr_warmup_samples(640);
   }, ""},
  {"warmup_samples_too_long", [](S* s) {
     s->mutable_training()->set_train_iters(0);
     s->mutable_training()->set_lr_decay_iters(0);
     s->mutable_training()->set_train_samples(6400);
     s->mutable_training()->set_lr_warmup_samples(6400);
   }, "training.lr_warmup_samples (6400) must be less than the decay samples"},
  {"warmup_iters_too_long", [](S* s) { s->mutable_training()->set_lr_warmup_iters(1000); },
   "training.lr_warmup_iters (1000) must be less than the decay steps (training.lr_decay_iters, "
   "default train_iters: 1000)"},
  {"warmup_iters_ok", [](S* s) { s->mutable_training()->set_lr_warmup_iters(100); }, ""},
  {"warmup_fraction_ok", [](S* s) { s->mutable_training()->set_lr_warmup_fraction(0.01); }, ""},
  {"warmup_fraction_range", [](S* s) { s->mutable_training()->set_lr_warmup_fraction(1.0); },
   "training.lr_warmup_fraction (1.0) must be in [0, 1)"},
  {"warmup_fraction_exclusive", [](S* s) {
     s->mutable_training()->set_lr_warmup_fraction(0.1);
     s->mutable_training()->set_lr_warmup_iters(10);
   }, "training.lr_warmup_fraction is exclusive with training.lr_warmup_iters"},
  {"decay_iters_negative", [](S* s) { s->mutable_training()->set_lr_decay_iters(-1); },
   "training.lr_decay_iters (-1) must be >= 0"},

  // Optimizer.
  {"weight_decay_negative", [](S* s) { s->mutable_training()->set_weight_decay(-0.1); },
   "training.weight_decay (-0.1) must be >= 0"},
  {"weight_decay_zero_ok", [](S* s) { s->mutable_training()->set_weight_decay(0); }, ""},
  {"beta1_one", [](S* s) { s->mutable_training()->set_adam_beta1(1.0); },
   "training.adam_beta1 (1.0) must be in [0, 1)"},
  {"beta1_zero_ok", [](S* s) { s->mutable_training()->set_adam_beta1(0); }, ""},
  {"beta2_negative", [](S* s) { s->mutable_training()->set_adam_beta2(-0.5); },
   "training.adam_beta2 (-0.5) must be in [0, 1)"},
  {"eps_zero", [](S* s) { s->mutable_training()->set_adam_eps(0); },
   "training.adam_eps (0.0) must be > 0"},
  {"sgd_momentum_one", [](S* s) { s->mutable_training()->set_sgd_momentum(1); },
   "training.sgd_momentum (1.0) must be in [0, 1)"},
  {"clip_negative", [](S* s) { s->mutable_training()->set_clip_grad(-1); },
   "training.clip_grad (-1.0) must be >= 0"},
  {"clip_zero_ok", [](S* s) { s->mutable_training()->set_clip_grad(0); }, ""},
  {"optimizer_unknown", [](S* s) {
     s->mutable_training()->set_optimizer(static_cast<mt::v1::Optimizer>(9));
   }, "training.optimizer (9) is not a known value; expected one of adam, sgd"},

  // Precision and loss scaling.
  {"loss_scale_bf16", [](S* s) {
     s->mutable_training()->set_precision(mt::v1::PRECISION_BF16);
     s->mutable_training()->set_loss_scale(1024);
   }, "training.loss_scale is set but training.precision is bf16: loss scaling only applies to "
      "fp16; remove loss_scale or set precision: fp16 (--fp16)"},
  {"loss_scale_fp32", [](S* s) { s->mutable_training()->set_loss_scale(1024); },
   "training.loss_scale is set but training.precision is fp32"},
  {"loss_scale_fp16_ok", [](S* s) {
     s->mutable_training()->set_precision(mt::v1::PRECISION_FP16);
     s->mutable_training()->set_loss_scale(1024);
   }, ""},
  {"loss_scale_zero", [](S* s) {
     s->mutable_training()->set_precision(mt::v1::PRECISION_FP16);
     s->mutable_training()->set_loss_scale(0);
   }, "training.loss_scale (0.0) must be > 0"},
  {"initial_loss_scale_zero", [](S* s) { s->mutable_training()->set_initial_loss_scale(0); },
   "training.initial_loss_scale (0.0) must be > 0"},
  {"min_loss_scale_above_initial", [](S* s) {
     s->mutable_training()->set_initial_loss_scale(16);
     s->mutable_training()->set_min_loss_scale(32);
   }, "training.min_loss_scale (32.0) must be <= training.initial_loss_scale (16.0)"},
  {"loss_scale_window_zero", [](S* s) { s->mutable_training()->set_loss_scale_window(0); },
   "training.loss_scale_window (0) must be >= 1"},
  {"hysteresis_zero", [](S* s) { s->mutable_training()->set_hysteresis(0); },
   "training.hysteresis (0) must be >= 1"},
  {"precision_unknown", [](S* s) {
     s->mutable_training()->set_precision(static_cast<mt::v1::Precision>(7));
   }, "training.precision (7) is not a known value; expected one of fp32, fp16, bf16"},

  // Recompute.
  {"recompute_full_ok", [](S* s) {
     s->mutable_training()->set_recompute_granularity(mt::v1::RECOMPUTE_GRANULARITY_FULL);
     s->mutable_training()->set_recompute_method(mt::v1::RECOMPUTE_METHOD_BLOCK);
     s->mutable_training()->set_recompute_num_layers(12);
   }, ""},
  {"recompute_layers_per_stage", [](S* s) {
     s->mutable_training()->set_recompute_granularity(mt::v1::RECOMPUTE_GRANULARITY_FULL);
     s->mutable_training()->set_recompute_num_layers(13);
   }, "training.recompute_num_layers (13) must be <= the layers per pipeline stage (12)"},
  {"recompute_block_selective", [](S* s) {
     s->mutable_training()->set_recompute_granularity(mt::v1::RECOMPUTE_GRANULARITY_SELECTIVE);
     s->mutable_training()->set_recompute_method(mt::v1::RECOMPUTE_METHOD_BLOCK);
   }, "training.recompute_method block only applies to recompute_granularity full"},
  {"recompute_layers_negative", [](S* s) {
     s->mutable_training()->set_recompute_num_layers(-1);
   }, "training.recompute_num_layers (-1) must be >= 0"},

  // Data.
  {"data_missing", [](S* s) { s->mutable_data()->clear_data_path(); },
   "data.data_path (--data-path) is empty: give at least one dataset prefix"},
  {"train_data_ok", [](S* s) {
     s->mutable_data()->clear_data_path();
     s->mutable_data()->add_train_data_path()->set_prefix("/d/train");
     s->mutable_data()->add_valid_data_path()->set_prefix("/d/valid");
   }, ""},
  {"data_and_train_data", [](S* s) {
     s->mutable_data()->add_train_data_path()->set_prefix("/d/train");
   }, "data.data_path and data.train_data_path are exclusive"},
  {"valid_with_blend", [](S* s) {
     s->mutable_data()->add_valid_data_path()->set_prefix("/d/valid");
   }, "data.valid_data_path and data.test_data_path go with data.train_data_path"},
  {"weight_zero_of_two", [](S* s) {
     auto* p = s->mutable_data()->add_data_path();
     p->set_prefix("/d/b");
     p->set_weight(0);
   }, "data.data_path[1].weight (0.0) must be > 0"},
  {"weight_negative_single", [](S* s) { s->mutable_data()->mutable_data_path(0)->set_weight(-1); },
   "data.data_path[0].weight (-1.0) must be > 0"},
  {"weight_unset_single_ok", [](S* s) { s->mutable_data()->mutable_data_path(0)->set_weight(0); },
   ""},
  {"weights_ok", [](S* s) {
     s->mutable_data()->mutable_data_path(0)->set_weight(0.3);
     auto* p = s->mutable_data()->add_data_path();
     p->set_prefix("/d/b");
     p->set_weight(0.7);
   }, ""},
  {"prefix_empty", [](S* s) { s->mutable_data()->mutable_data_path(0)->set_prefix(""); },
   "data.data_path[0].prefix is empty"},
  {"too_many_paths", [](S* s) {
     for (int i = 0; i < 1024; ++i) {
       auto* p = s->mutable_data()->add_data_path();
       p->set_prefix("/d/x");
       p->set_weight(1);
     }
   }, "data.data_path has 1025 entries, over the limit of 1024"},
  {"split_letters", [](S* s) { s->mutable_data()->set_split("a,b"); },
   "data.split: expected one to three comma-separated non-negative numbers with a positive sum "
   "(train,valid,test such as 969,30,1), got \"a,b\""},
  {"split_four", [](S* s) { s->mutable_data()->set_split("1,2,3,4"); }, "data.split: expected"},
  {"split_zero_sum", [](S* s) { s->mutable_data()->set_split("0,0,0"); }, "data.split: expected"},
  {"split_negative", [](S* s) { s->mutable_data()->set_split("-1,2"); }, "data.split: expected"},
  {"split_one_ok", [](S* s) { s->mutable_data()->set_split("100"); }, ""},
  {"split_two_ok", [](S* s) { s->mutable_data()->set_split("98,2"); }, ""},
  {"split_fraction_ok", [](S* s) { s->mutable_data()->set_split("0.9,0.05,0.05"); }, ""},
  {"vocab_missing", [](S* s) { s->mutable_data()->mutable_tokenizer()->clear_vocab_file(); },
   "data.tokenizer.vocab_file (--vocab-file) is required for the GPT-2 BPE tokenizer"},
  {"merge_missing", [](S* s) { s->mutable_data()->mutable_tokenizer()->clear_merge_file(); },
   "data.tokenizer.merge_file (--merge-file) is required for the GPT-2 BPE tokenizer"},
  {"tokenizer_unknown", [](S* s) {
     s->mutable_data()->mutable_tokenizer()->set_type(static_cast<mt::v1::TokenizerType>(5));
   }, "data.tokenizer.type (5) is not a known value; expected one of gpt2_bpe"},
  {"num_workers_range", [](S* s) { s->mutable_data()->set_num_workers(65); },
   "data.num_workers (65) is out of range 0..64"},
  {"num_workers_zero_ok", [](S* s) { s->mutable_data()->set_num_workers(0); }, ""},

  // Paths: limits and shell syntax, in every path field.
  {"path_too_long", [](S* s) { s->mutable_checkpoint()->set_save_dir("/" + kLong4097); },
   "checkpoint.save_dir: path is 4098 bytes, over the limit of 4096"},
  {"path_4096_ok", [](S* s) { s->mutable_checkpoint()->set_save_dir("/" + std::string(4095, 'a')); },
   ""},
  {"path_nul", [](S* s) {
     s->mutable_checkpoint()->set_load_dir(std::string("/ckpt\0x", 7));
   }, "checkpoint.load_dir: path contains a NUL byte"},
  {"path_not_utf8", [](S* s) { s->mutable_data()->set_data_cache_path("/cache/\xff"); },
   "data.data_cache_path (\"/cache/\\xff\") is not valid UTF-8"},
  {"shell_subst_prefix", [](S* s) {
     s->mutable_data()->mutable_data_path(0)->set_prefix("/data/$(rm -rf ~)");
   }, "data.data_path[0].prefix (\"/data/$(rm -rf ~)\") contains the shell metacharacter \"$(\"; "
      "mt never runs a shell and a spec holds no shell syntax: remove it"},
  {"shell_backtick_vocab", [](S* s) {
     s->mutable_data()->mutable_tokenizer()->set_vocab_file("/a/`whoami`.json");
   }, "data.tokenizer.vocab_file (\"/a/`whoami`.json\") contains the shell metacharacter \"`\""},
  {"shell_semicolon_merge", [](S* s) {
     s->mutable_data()->mutable_tokenizer()->set_merge_file("/a/m.txt; reboot");
   }, "data.tokenizer.merge_file (\"/a/m.txt; reboot\") contains the shell metacharacter \";\""},
  {"shell_pipe_save", [](S* s) { s->mutable_checkpoint()->set_save_dir("/c | nc host 1"); },
   "checkpoint.save_dir (\"/c | nc host 1\") contains the shell metacharacter \"|\""},
  {"shell_and_load", [](S* s) { s->mutable_checkpoint()->set_load_dir("/c && curl x"); },
   "checkpoint.load_dir (\"/c && curl x\") contains the shell metacharacter \"&&\""},
  {"shell_newline_tb", [](S* s) { s->mutable_logging()->set_tensorboard_dir("/tb\nrm"); },
   "logging.tensorboard_dir (\"/tb\\nrm\") contains the shell metacharacter \"\\n\""},
  {"shell_var_cache", [](S* s) { s->mutable_data()->set_data_cache_path("/c/${USER}"); },
   "data.data_cache_path (\"/c/${USER}\") contains the shell metacharacter \"${\""},
  {"shell_redirect_valid", [](S* s) {
     s->mutable_data()->clear_data_path();
     s->mutable_data()->add_train_data_path()->set_prefix("/d/t");
     s->mutable_data()->add_test_data_path()->set_prefix("/d/x > /etc/passwd");
   }, "data.test_data_path[0].prefix (\"/d/x > /etc/passwd\") contains the shell metacharacter "
      "\">\""},
  {"paths_with_specials_ok", [](S* s) {
     s->mutable_data()->mutable_data_path(0)->set_prefix("/data/my data (v2)/a-b_c.d+e=f,g@h");
     s->mutable_checkpoint()->set_save_dir("relative/ckpt");
   }, ""},

  // Checkpoint, evaluation, logging, restart, resources.
  {"save_interval_negative", [](S* s) { s->mutable_checkpoint()->set_save_interval(-1); },
   "checkpoint.save_interval (-1) must be >= 0"},
  {"finetune_without_load", [](S* s) { s->mutable_checkpoint()->set_finetune(true); },
   "checkpoint.finetune needs a checkpoint to start from"},
  {"finetune_ok", [](S* s) {
     s->mutable_checkpoint()->set_finetune(true);
     s->mutable_checkpoint()->set_load_dir("/ckpt/base");
   }, ""},
  {"finetune_from_catalog_ok", [](S* s) {
     s->mutable_checkpoint()->set_finetune(true);
     s->set_from_checkpoint("ckpt-42");
   }, ""},
  {"keep_last_negative", [](S* s) {
     s->mutable_checkpoint()->mutable_retention()->set_keep_last(-1);
   }, "checkpoint.retention.keep_last (-1) must be >= 0"},
  {"keep_best_without_eval", [](S* s) {
     s->mutable_checkpoint()->mutable_retention()->set_keep_best(2);
     s->mutable_evaluation()->set_eval_interval(0);
   }, "checkpoint.retention.keep_best (2) ranks checkpoints by validation loss, but "
      "evaluation.eval_interval is 0"},
  {"keep_best_ok", [](S* s) { s->mutable_checkpoint()->mutable_retention()->set_keep_best(2); },
   ""},
  {"eval_interval_negative", [](S* s) { s->mutable_evaluation()->set_eval_interval(-1); },
   "evaluation.eval_interval (-1) must be >= 0"},
  {"eval_iters_negative", [](S* s) { s->mutable_evaluation()->set_eval_iters(-1); },
   "evaluation.eval_iters (-1) must be >= 0"},
  {"log_interval_zero", [](S* s) { s->mutable_logging()->set_log_interval(0); },
   "logging.log_interval (0) must be >= 1"},
  {"max_restarts_range", [](S* s) { s->mutable_restart()->set_max_restarts(101); },
   "restart.max_restarts (101) is out of range 0..100"},
  {"max_restarts_zero_ok", [](S* s) { s->mutable_restart()->set_max_restarts(0); }, ""},
  {"hang_floor_zero", [](S* s) { s->mutable_restart()->set_hang_timeout_floor_seconds(0); },
   "restart.hang_timeout_floor_seconds (0) is out of range 1..86400"},
  {"hang_floor_small_ok", [](S* s) { s->mutable_restart()->set_hang_timeout_floor_seconds(5); },
   ""},
  {"hang_multiplier_below_one", [](S* s) { s->mutable_restart()->set_hang_step_multiplier(0.5); },
   "restart.hang_step_multiplier (0.5) must be in [1, 1000]"},
  {"hang_multiplier_nan", [](S* s) {
     s->mutable_restart()->set_hang_step_multiplier(std::nan(""));
   }, "restart.hang_step_multiplier (.nan) must be in [1, 1000]"},
  {"save_load_below_floor", [](S* s) {
     s->mutable_restart()->set_hang_timeout_floor_seconds(120);
     s->mutable_restart()->set_save_load_timeout_seconds(60);
   }, "restart.save_load_timeout_seconds (60) is out of range 120..86400"},
  {"distributed_timeout_zero", [](S* s) {
     s->mutable_restart()->set_distributed_timeout_minutes(0);
   }, "restart.distributed_timeout_minutes (--distributed-timeout-minutes) (0) is out of range "
      "1..1440"},
  {"distributed_timeout_below_floor", [](S* s) {
     s->mutable_restart()->set_hang_timeout_floor_seconds(600);
     s->mutable_restart()->set_distributed_timeout_minutes(10);
   }, "restart.distributed_timeout_minutes (10) must be longer than "
      "restart.hang_timeout_floor_seconds (600 s)"},
  {"straggler_threshold_one", [](S* s) { s->mutable_restart()->set_straggler_threshold(1); },
   "restart.straggler_threshold (1.0) must be in [1.05, 100]"},
  {"straggler_window_zero", [](S* s) { s->mutable_restart()->set_straggler_window_steps(0); },
   "restart.straggler_window_steps (0) is out of range 1..100000"},
  {"node_name_bad", [](S* s) { s->mutable_resources()->add_nodes("node 1"); },
   "resources.nodes[0] (\"node 1\") must be a node name"},
  {"node_name_shell", [](S* s) { s->mutable_resources()->add_nodes("n1;ls"); },
   "resources.nodes[0] (\"n1;ls\") contains the shell metacharacter \";\""},
  {"node_names_ok", [](S* s) {
     s->mutable_resources()->add_nodes("gpu-node-01.cluster.local");
     s->mutable_resources()->set_device(mt::v1::DEVICE_KIND_GPU);
   }, ""},
  {"device_unknown", [](S* s) {
     s->mutable_resources()->set_device(static_cast<mt::v1::DeviceKind>(8));
   }, "resources.device (8) is not a known value; expected one of auto, gpu, cpu"},
};
// clang-format on

INSTANTIATE_TEST_SUITE_P(Rules, SpecValidateRuleTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

TEST(SpecValidateTest, ShellMetacharacterIsReportedOncePerField) {
  mt::v1::JobSpec s = ValidSpec();
  s.set_name("a|b");
  EXPECT_THAT(ListSpecProblems(s),
              ElementsAre("name (\"a|b\") contains the shell metacharacter \"|\"; mt never runs a "
                          "shell and a spec holds no shell syntax: remove it"));
}

TEST(SpecResolvePathsTest, MakesRelativePathsAbsolute) {
  mt::v1::JobSpec s;
  s.mutable_data()->add_data_path()->set_prefix("data/a_text_document");
  s.mutable_data()->add_data_path()->set_prefix("/abs/./c/../b");
  s.mutable_data()->add_train_data_path()->set_prefix("./t");
  s.mutable_data()->add_valid_data_path()->set_prefix("v//x");
  s.mutable_data()->add_test_data_path()->set_prefix("../shared/x");
  s.mutable_data()->mutable_tokenizer()->set_vocab_file("gpt2-vocab.json");
  s.mutable_data()->mutable_tokenizer()->set_merge_file("/assets/gpt2-merges.txt");
  s.mutable_data()->set_data_cache_path("cache/");
  s.mutable_checkpoint()->set_save_dir("ckpt");
  s.mutable_checkpoint()->set_load_dir("ckpt");
  s.mutable_logging()->set_tensorboard_dir("tb");
  ASSERT_THAT(ResolveRelativePaths(&s, "/home/u/job/"), IsOk());
  EXPECT_EQ(s.data().data_path(0).prefix(), "/home/u/job/data/a_text_document");
  EXPECT_EQ(s.data().data_path(1).prefix(), "/abs/b");
  EXPECT_EQ(s.data().train_data_path(0).prefix(), "/home/u/job/t");
  EXPECT_EQ(s.data().valid_data_path(0).prefix(), "/home/u/job/v/x");
  EXPECT_EQ(s.data().test_data_path(0).prefix(), "/home/u/shared/x");
  EXPECT_EQ(s.data().tokenizer().vocab_file(), "/home/u/job/gpt2-vocab.json");
  EXPECT_EQ(s.data().tokenizer().merge_file(), "/assets/gpt2-merges.txt");
  EXPECT_EQ(s.data().data_cache_path(), "/home/u/job/cache");
  EXPECT_EQ(s.checkpoint().save_dir(), "/home/u/job/ckpt");
  EXPECT_EQ(s.checkpoint().load_dir(), "/home/u/job/ckpt");
  EXPECT_EQ(s.logging().tensorboard_dir(), "/home/u/job/tb");
}

TEST(SpecResolvePathsTest, LeavesEmptyFieldsAndPresenceAlone) {
  mt::v1::JobSpec s;
  s.set_name("x");
  ASSERT_THAT(ResolveRelativePaths(&s, "/"), IsOk());
  EXPECT_FALSE(s.has_data());
  EXPECT_FALSE(s.has_checkpoint());
  EXPECT_FALSE(s.has_logging());
  s.mutable_checkpoint()->set_save_dir("c");
  ASSERT_THAT(ResolveRelativePaths(&s, "/"), IsOk());
  EXPECT_EQ(s.checkpoint().save_dir(), "/c");
  EXPECT_EQ(s.checkpoint().load_dir(), "");
}

TEST(SpecResolvePathsTest, Errors) {
  mt::v1::JobSpec s;
  EXPECT_THAT(ResolveRelativePaths(&s, "relative/dir"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("base directory \"relative/dir\" must be an absolute path")));
  EXPECT_THAT(ResolveRelativePaths(&s, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("path is empty")));
  s.mutable_data()->mutable_tokenizer()->set_vocab_file("~/gpt2-vocab.json");
  EXPECT_THAT(ResolveRelativePaths(&s, "/home/u"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("data.tokenizer.vocab_file (\"~/gpt2-vocab.json\") starts with "
                                 "'~', which mt does not expand; give an absolute path")));
}

TEST(SpecResolvePathsTest, DotDotIsResolvedLexicallyAndStopsAtTheRoot) {
  mt::v1::JobSpec s;
  s.mutable_checkpoint()->set_save_dir("../../../../x/./y/..//z");
  s.mutable_checkpoint()->set_load_dir("/a/b/../../../c");
  ASSERT_THAT(ResolveRelativePaths(&s, "/home/u"), IsOk());
  EXPECT_EQ(s.checkpoint().save_dir(), "/x/z");
  EXPECT_EQ(s.checkpoint().load_dir(), "/c");
  EXPECT_THAT(ListSubmittedPathProblems(s), IsEmpty());
}

TEST(SpecSubmittedPathsTest, RejectsRelativeAndUnnormalizedPathsNamingFieldAndFix) {
  mt::v1::JobSpec s;
  s.mutable_data()->add_data_path()->set_prefix("/data/a");
  s.mutable_data()->add_data_path()->set_prefix("/data/../etc/passwd");
  s.mutable_data()->mutable_tokenizer()->set_vocab_file("vocab.json");
  s.mutable_checkpoint()->set_save_dir("/ck//x/.");
  s.mutable_logging()->set_tensorboard_dir(std::string("/tb\0x", 6));
  const std::vector<std::string> problems = ListSubmittedPathProblems(s);
  ASSERT_EQ(problems.size(), 4u) << absl::StrJoin(problems, "\n");
  EXPECT_THAT(problems, Contains(HasSubstr("data.data_path[1].prefix (\"/data/../etc/passwd\") "
                                           "must be a normalized path without '.', '..' or "
                                           "repeated slashes: give \"/etc/passwd\"")));
  EXPECT_THAT(problems, Contains(HasSubstr("data.tokenizer.vocab_file (\"vocab.json\") must be an "
                                           "absolute path")));
  EXPECT_THAT(problems, Contains(HasSubstr("checkpoint.save_dir (\"/ck//x/.\") must be a "
                                           "normalized path")));
  EXPECT_THAT(problems, Contains(HasSubstr("logging.tensorboard_dir: path contains a NUL byte")));
  EXPECT_THAT(ValidateSubmittedPaths(s),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("data.data_path[1].prefix")));
  mt::v1::JobSpec ok;
  ok.mutable_data()->add_data_path()->set_prefix("/data/a");
  ok.mutable_checkpoint()->set_save_dir("/ck/x");
  EXPECT_THAT(ValidateSubmittedPaths(ok), IsOk());
}

TEST(SpecConfinedPathsTest, EveryPathFieldIsCheckedAfterResolvingLinks) {
  std::string tmpl = ::testing::TempDir() + "mt_spec_confine_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  char real[PATH_MAX];
  ASSERT_NE(::realpath(tmpl.c_str(), real), nullptr);
  const std::string d = real;
  ASSERT_EQ(::mkdir((d + "/data").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("/var/tmp", (d + "/data/tb").c_str()), 0);
  ASSERT_EQ(::symlink("/etc/shadow", (d + "/data/corpus_text_document.bin").c_str()), 0);
  MT_ASSERT_OK_AND_ASSIGN(AllowedRoots roots, AllowedRoots::Create({d + "/data"}));

  mt::v1::JobSpec ok;
  ok.mutable_data()->add_data_path()->set_prefix(d + "/data/other_text_document");
  ok.mutable_data()->mutable_tokenizer()->set_vocab_file(d + "/data/vocab.json");
  ok.mutable_checkpoint()->set_save_dir(d + "/data/ck");
  ok.mutable_logging()->set_tensorboard_dir(d + "/data/runs");
  EXPECT_THAT(CheckPathsConfined(ok, roots), IsOk());
  EXPECT_THAT(CheckPathsConfined(ok, AllowedRoots()), IsOk());

  mt::v1::JobSpec bad = ok;
  bad.mutable_checkpoint()->set_save_dir("/root/ck");
  bad.mutable_checkpoint()->set_load_dir(d + "/data2/ck");
  bad.mutable_logging()->set_tensorboard_dir(d + "/data/tb/run1");
  bad.mutable_data()->mutable_data_path(0)->set_prefix(d + "/data/corpus_text_document");
  bad.mutable_data()->set_data_cache_path(d + "/data/../cache");
  const absl::Status s = CheckPathsConfined(bad, roots);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kPermissionDenied));
  const std::vector<std::string> lines = absl::StrSplit(s.message(), '\n');
  EXPECT_THAT(lines, SizeIs(5)) << s.message();
  EXPECT_THAT(s.message(), HasSubstr("checkpoint.save_dir: '/root/ck' is outside"));
  EXPECT_THAT(s.message(), HasSubstr("checkpoint.load_dir: '" + d + "/data2/ck' is outside"));
  EXPECT_THAT(s.message(), HasSubstr("logging.tensorboard_dir: '" + d +
                                     "/data/tb/run1' (it resolves to '/var/tmp/run1')"));
  EXPECT_THAT(s.message(), HasSubstr("data.data_path[0].prefix: '" + d +
                                     "/data/corpus_text_document.bin' (it resolves to "
                                     "'/etc/shadow')"));
  EXPECT_THAT(s.message(), HasSubstr("data.data_cache_path:"));
}

}  // namespace
}  // namespace mt::spec
