#include "common/spec/megatron_flags.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/base/status_matchers.h"
#include "common/spec/defaults.h"
#include "common/spec/spec_internal.h"
#include "common/spec/validate.h"
#include "common/spec/yaml_spec.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/testutil/proto_matchers.h"

namespace mt::spec {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::mt::testing::IsOk;
using ::mt::testing::StatusIs;
using ::mt::testutil::EqualsProto;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr auto kBadFlag = absl::StatusCode::kInvalidArgument;

std::vector<std::string> Args(absl::string_view line) {
  return absl::StrSplit(line, ' ', absl::SkipEmpty());
}

constexpr char kLaunchA[] =
    "--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
    "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --micro-batch-size 4 "
    "--global-batch-size 64 --lr 1.5e-4 --train-iters 100000 "
    "--data-path /data/my_dataset_text_document --vocab-file gpt2-vocab.json "
    "--merge-file gpt2-merges.txt --save /checkpoints/gpt_model --load /checkpoints/gpt_model "
    "--fp16";

constexpr char kLaunchB[] =
    "--num-layers 32 --hidden-size 2560 --num-attention-heads 32 --seq-length 2048 "
    "--micro-batch-size 4 --global-batch-size 256 --lr 6e-5 --train-iters 500000 "
    "--lr-decay-style cosine --vocab-file vocab.json --merge-file merges.txt --fp16 "
    "--log-interval 10 --save-interval 1000 --eval-interval 200 --eval-iters 20";

constexpr char kLaunchCExtra[] =
    " --sequence-parallel --overlap-p2p-comm --use-distributed-optimizer --checkpoint-activations "
    "--recompute-granularity selective --clip-grad 1.0 --bf16 --adam-beta1 0.9 --adam-beta2 0.95 "
    "--tensorboard-dir /logs/tb";

mt::v1::JobSpec WantA() {
  mt::v1::JobSpec s;
  auto* m = s.mutable_model();
  m->set_num_layers(24);
  m->set_hidden_size(1024);
  m->set_num_attention_heads(16);
  m->set_seq_length(1024);
  s.mutable_parallel()->set_tensor_model_parallel_size(4);
  s.mutable_parallel()->set_pipeline_model_parallel_size(2);
  auto* t = s.mutable_training();
  t->set_micro_batch_size(4);
  t->set_global_batch_size(64);
  t->set_lr(1.5e-4);
  t->set_train_iters(100000);
  t->set_precision(mt::v1::PRECISION_FP16);
  auto* p = s.mutable_data()->add_data_path();
  p->set_weight(1.0);
  p->set_prefix("/data/my_dataset_text_document");
  s.mutable_data()->mutable_tokenizer()->set_vocab_file("gpt2-vocab.json");
  s.mutable_data()->mutable_tokenizer()->set_merge_file("gpt2-merges.txt");
  s.mutable_checkpoint()->set_save_dir("/checkpoints/gpt_model");
  s.mutable_checkpoint()->set_load_dir("/checkpoints/gpt_model");
  return s;
}

mt::v1::JobSpec WantB() {
  mt::v1::JobSpec s;
  auto* m = s.mutable_model();
  m->set_num_layers(32);
  m->set_hidden_size(2560);
  m->set_num_attention_heads(32);
  m->set_seq_length(2048);
  auto* t = s.mutable_training();
  t->set_micro_batch_size(4);
  t->set_global_batch_size(256);
  t->set_lr(6e-5);
  t->set_train_iters(500000);
  t->set_lr_decay_style(mt::v1::LR_DECAY_STYLE_COSINE);
  t->set_precision(mt::v1::PRECISION_FP16);
  s.mutable_data()->mutable_tokenizer()->set_vocab_file("vocab.json");
  s.mutable_data()->mutable_tokenizer()->set_merge_file("merges.txt");
  s.mutable_logging()->set_log_interval(10);
  s.mutable_checkpoint()->set_save_interval(1000);
  s.mutable_evaluation()->set_eval_interval(200);
  s.mutable_evaluation()->set_eval_iters(20);
  return s;
}

TEST(SpecMegatronFlagsTest, LaunchLineA) {
  MT_ASSERT_OK_AND_ASSIGN(ParsedSpec parsed, ParseMegatronFlags(Args(kLaunchA)));
  EXPECT_THAT(parsed.spec, EqualsProto(WantA()));
  EXPECT_THAT(parsed.warnings, IsEmpty());
  ApplyDefaults(&parsed.spec);
  EXPECT_THAT(ValidateSpec(parsed.spec), IsOk());
}

TEST(SpecMegatronFlagsTest, LaunchLineBParsesButHasNoData) {
  MT_ASSERT_OK_AND_ASSIGN(ParsedSpec parsed, ParseMegatronFlags(Args(kLaunchB)));
  EXPECT_THAT(parsed.spec, EqualsProto(WantB()));
  EXPECT_THAT(parsed.warnings, IsEmpty());
  ApplyDefaults(&parsed.spec);
  EXPECT_THAT(ListSpecProblems(parsed.spec),
              ElementsAre("data.data_path (--data-path) is empty: give at least one dataset "
                          "prefix (the path of <prefix>.bin and <prefix>.idx without the "
                          "suffix), or data.train_data_path (--train-data-path) for separate "
                          "train/valid/test datasets"));
}

TEST(SpecMegatronFlagsTest, LaunchLineCRejectsFp16WithBf16) {
  EXPECT_THAT(ParseMegatronFlags(Args(std::string(kLaunchB) + kLaunchCExtra)),
              StatusIs(kBadFlag,
                       "--fp16 and --bf16 are mutually exclusive (Megatron-LM rejects "
                       "the pair too); keep one"));
}

std::string WithoutFlag(std::string line, const std::string& flag) {
  const size_t at = line.find(" " + flag);
  line.erase(at, flag.size() + 1);
  return line;
}

TEST(SpecMegatronFlagsTest, LaunchLineCRejectsContradictoryRecompute) {
  const std::string c = WithoutFlag(std::string(kLaunchB) + kLaunchCExtra, "--fp16");
  EXPECT_THAT(ParseMegatronFlags(Args(c)),
              StatusIs(kBadFlag,
                       "--checkpoint-activations (= --recompute-granularity full) and "
                       "--recompute-granularity selective contradict each other; keep "
                       "one of them"));
}

TEST(SpecMegatronFlagsTest, LaunchLineCWithoutConflicts) {
  const std::string c = WithoutFlag(WithoutFlag(std::string(kLaunchB) + kLaunchCExtra, "--fp16"),
                                    "--checkpoint-activations");
  MT_ASSERT_OK_AND_ASSIGN(ParsedSpec parsed, ParseMegatronFlags(Args(c)));
  mt::v1::JobSpec want = WantB();
  auto* t = want.mutable_training();
  t->set_precision(mt::v1::PRECISION_BF16);
  t->set_recompute_granularity(mt::v1::RECOMPUTE_GRANULARITY_SELECTIVE);
  t->set_clip_grad(1.0);
  t->set_adam_beta1(0.9);
  t->set_adam_beta2(0.95);
  auto* p = want.mutable_parallel();
  p->set_sequence_parallel(true);
  p->set_overlap_p2p_comm(true);
  p->set_use_distributed_optimizer(true);
  want.mutable_logging()->set_tensorboard_dir("/logs/tb");
  EXPECT_THAT(parsed.spec, EqualsProto(want));
  EXPECT_THAT(parsed.warnings, IsEmpty());
  ApplyDefaults(&parsed.spec);
  const std::vector<std::string> problems = ListSpecProblems(parsed.spec);
  ASSERT_EQ(problems.size(), 2u) << ::testing::PrintToString(problems);
  EXPECT_THAT(problems[0], StartsWith("parallel.sequence_parallel needs "
                                      "parallel.tensor_model_parallel_size > 1 (it is 1)"));
  EXPECT_THAT(problems[1], StartsWith("data.data_path (--data-path) is empty"));
}

TEST(SpecMegatronFlagsTest, LaunchLineDWeightedData) {
  MT_ASSERT_OK_AND_ASSIGN(
      ParsedSpec parsed,
      ParseMegatronFlags(Args("--data-path 0.3 a_text_document 0.7 b_text_document --split "
                              "969,30,1 --vocab-file v.json")));
  mt::v1::JobSpec want;
  auto* a = want.mutable_data()->add_data_path();
  a->set_weight(0.3);
  a->set_prefix("a_text_document");
  auto* b = want.mutable_data()->add_data_path();
  b->set_weight(0.7);
  b->set_prefix("b_text_document");
  want.mutable_data()->set_split("969,30,1");
  want.mutable_data()->mutable_tokenizer()->set_vocab_file("v.json");
  EXPECT_THAT(parsed.spec, EqualsProto(want));
  EXPECT_THAT(parsed.warnings, IsEmpty());
}

TEST(SpecMegatronFlagsTest, LaunchLineENoEffectFlagsAreNoticed) {
  MT_ASSERT_OK_AND_ASSIGN(
      ParsedSpec parsed,
      ParseMegatronFlags(
          Args(std::string(kLaunchA) + " --dataset-impl mmap --distributed-backend nccl")));
  EXPECT_THAT(parsed.spec, EqualsProto(WantA()));
  EXPECT_THAT(parsed.warnings,
              ElementsAre("--dataset-impl mmap: accepted, no effect in mt (mt reads Megatron's "
                          "mmap (MMIDIDX) format)",
                          "--distributed-backend nccl: accepted, no effect in mt (mt uses NCCL on "
                          "GPUs and Gloo on CPUs, by resources.device)"));
}

// Every flag that maps to a field sets exactly that field.
struct FieldCase {
  const char* args;
  const char* field;
  const char* want;  // ScalarText of the field
};

class SpecMegatronFieldTest : public ::testing::TestWithParam<FieldCase> {};

TEST_P(SpecMegatronFieldTest, SetsField) {
  const FieldCase& c = GetParam();
  MT_ASSERT_OK_AND_ASSIGN(ParsedSpec parsed, ParseMegatronFlags(Args(c.args)));
  EXPECT_THAT(parsed.warnings, IsEmpty());
  mt::v1::JobSpec spec = parsed.spec;
  auto found = internal::MutableFieldByPath(&spec, c.field);
  ASSERT_THAT(found, IsOk());
  EXPECT_EQ(internal::ScalarText(*found.value().first, found.value().second, -1), c.want);
  // Nothing else is set: without the field, only the (empty) parent messages are left.
  found.value().first->GetReflection()->ClearField(found.value().first, found.value().second);
  mt::v1::JobSpec only_parents;
  ASSERT_THAT(internal::MutableFieldByPath(&only_parents, c.field), IsOk());
  EXPECT_THAT(spec, EqualsProto(only_parents)) << c.args;
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(Flags, SpecMegatronFieldTest, ::testing::Values(
    FieldCase{"--num-layers 12", "model.num_layers", "12"},
    FieldCase{"--hidden-size 768", "model.hidden_size", "768"},
    FieldCase{"--num-attention-heads 12", "model.num_attention_heads", "12"},
    FieldCase{"--ffn-hidden-size 3072", "model.ffn_hidden_size", "3072"},
    FieldCase{"--kv-channels 64", "model.kv_channels", "64"},
    FieldCase{"--seq-length 1024", "model.seq_length", "1024"},
    FieldCase{"--max-position-embeddings 2048", "model.max_position_embeddings", "2048"},
    FieldCase{"--vocab-size 50257", "model.vocab_size", "50257"},
    FieldCase{"--make-vocab-size-divisible-by 64", "model.make_vocab_size_divisible_by", "64"},
    FieldCase{"--hidden-dropout 0.0", "model.hidden_dropout", "0.0"},
    FieldCase{"--attention-dropout 0.05", "model.attention_dropout", "0.05"},
    FieldCase{"--init-method-std 0.006", "model.init_method_std", "0.006"},
    FieldCase{"--untie-embeddings-and-output-weights", "model.untie_embeddings_and_output_weights",
              "true"},
    FieldCase{"--layernorm-epsilon 1e-6", "model.layernorm_epsilon", "1.0e-06"},
    FieldCase{"--tensor-model-parallel-size 8", "parallel.tensor_model_parallel_size", "8"},
    FieldCase{"--pipeline-model-parallel-size 4", "parallel.pipeline_model_parallel_size", "4"},
    FieldCase{"--context-parallel-size 2", "parallel.context_parallel_size", "2"},
    FieldCase{"--num-layers-per-virtual-pipeline-stage 2",
              "parallel.num_layers_per_virtual_pipeline_stage", "2"},
    FieldCase{"--sequence-parallel", "parallel.sequence_parallel", "true"},
    FieldCase{"--use-distributed-optimizer", "parallel.use_distributed_optimizer", "true"},
    FieldCase{"--overlap-grad-reduce", "parallel.overlap_grad_reduce", "true"},
    FieldCase{"--overlap-param-gather", "parallel.overlap_param_gather", "true"},
    FieldCase{"--overlap-p2p-comm", "parallel.overlap_p2p_comm", "true"},
    FieldCase{"--tp-comm-overlap", "parallel.tp_comm_overlap", "true"},
    FieldCase{"--ddp-bucket-size 10000000", "parallel.ddp_bucket_size", "10000000"},
    FieldCase{"--micro-batch-size 8", "training.micro_batch_size", "8"},
    FieldCase{"--global-batch-size 512", "training.global_batch_size", "512"},
    FieldCase{"--train-iters 5000000000", "training.train_iters", "5000000000"},
    FieldCase{"--train-samples 300000000", "training.train_samples", "300000000"},
    FieldCase{"--lr 3e-4", "training.lr", "0.0003"},
    FieldCase{"--min-lr 3e-5", "training.min_lr", "3.0e-05"},
    FieldCase{"--lr-decay-style inverse-square-root", "training.lr_decay_style",
              "inverse_square_root"},
    FieldCase{"--lr-decay-style constant", "training.lr_decay_style", "constant"},
    FieldCase{"--lr-decay-style linear", "training.lr_decay_style", "linear"},
    FieldCase{"--lr-decay-iters 320000", "training.lr_decay_iters", "320000"},
    FieldCase{"--lr-decay-samples 1000", "training.lr_decay_samples", "1000"},
    FieldCase{"--lr-warmup-iters 2000", "training.lr_warmup_iters", "2000"},
    FieldCase{"--lr-warmup-samples 100", "training.lr_warmup_samples", "100"},
    FieldCase{"--lr-warmup-fraction .01", "training.lr_warmup_fraction", "0.01"},
    FieldCase{"--optimizer sgd", "training.optimizer", "sgd"},
    FieldCase{"--optimizer adam", "training.optimizer", "adam"},
    FieldCase{"--weight-decay 0.1", "training.weight_decay", "0.1"},
    FieldCase{"--adam-beta1 0.9", "training.adam_beta1", "0.9"},
    FieldCase{"--adam-beta2 0.95", "training.adam_beta2", "0.95"},
    FieldCase{"--adam-eps 1e-8", "training.adam_eps", "1.0e-08"},
    FieldCase{"--sgd-momentum 0.8", "training.sgd_momentum", "0.8"},
    FieldCase{"--clip-grad 0", "training.clip_grad", "0.0"},
    FieldCase{"--fp16", "training.precision", "fp16"},
    FieldCase{"--bf16", "training.precision", "bf16"},
    FieldCase{"--loss-scale 4096", "training.loss_scale", "4096.0"},
    FieldCase{"--initial-loss-scale 65536", "training.initial_loss_scale", "65536.0"},
    FieldCase{"--min-loss-scale 1", "training.min_loss_scale", "1.0"},
    FieldCase{"--loss-scale-window 500", "training.loss_scale_window", "500"},
    FieldCase{"--hysteresis 3", "training.hysteresis", "3"},
    FieldCase{"--recompute-granularity full", "training.recompute_granularity", "full"},
    FieldCase{"--recompute-granularity selective", "training.recompute_granularity", "selective"},
    FieldCase{"--checkpoint-activations", "training.recompute_granularity", "full"},
    FieldCase{"--recompute-activations", "training.recompute_granularity", "selective"},
    FieldCase{"--recompute-method block", "training.recompute_method", "block"},
    FieldCase{"--recompute-method uniform", "training.recompute_method", "uniform"},
    FieldCase{"--recompute-num-layers 4", "training.recompute_num_layers", "4"},
    FieldCase{"--checkpoint-num-layers 2", "training.recompute_num_layers", "2"},
    FieldCase{"--seed 42", "training.seed", "42"},
    FieldCase{"--accumulate-allreduce-grads-in-fp32",
              "training.accumulate_allreduce_grads_in_fp32", "true"},
    FieldCase{"--split 949,50,1", "data.split", "949,50,1"},
    FieldCase{"--split 949/50/1", "data.split", "949,50,1"},
    FieldCase{"--vocab-file /a/gpt2-vocab.json", "data.tokenizer.vocab_file", "/a/gpt2-vocab.json"},
    FieldCase{"--merge-file /a/gpt2-merges.txt", "data.tokenizer.merge_file", "/a/gpt2-merges.txt"},
    FieldCase{"--tokenizer-type GPT2BPETokenizer", "data.tokenizer.type", "gpt2_bpe"},
    FieldCase{"--data-cache-path /cache", "data.data_cache_path", "/cache"},
    FieldCase{"--num-workers 4", "data.num_workers", "4"},
    FieldCase{"--save /ckpt", "checkpoint.save_dir", "/ckpt"},
    FieldCase{"--load /ckpt/base", "checkpoint.load_dir", "/ckpt/base"},
    FieldCase{"--save-interval 500", "checkpoint.save_interval", "500"},
    FieldCase{"--async-save", "checkpoint.async_save", "true"},
    FieldCase{"--no-load-optim", "checkpoint.no_load_optim", "true"},
    FieldCase{"--no-load-rng", "checkpoint.no_load_rng", "true"},
    FieldCase{"--finetune", "checkpoint.finetune", "true"},
    FieldCase{"--eval-interval 100", "evaluation.eval_interval", "100"},
    FieldCase{"--eval-iters 10", "evaluation.eval_iters", "10"},
    FieldCase{"--log-interval 1", "logging.log_interval", "1"},
    FieldCase{"--tensorboard-dir /tb", "logging.tensorboard_dir", "/tb"},
    FieldCase{"--lr=3e-4", "training.lr", "0.0003"},
    FieldCase{"--min-lr -1", "training.min_lr", "-1.0"},
    FieldCase{"--save=", "checkpoint.save_dir", ""}));
// clang-format on

TEST(SpecMegatronFlagsTest, DataPathForms) {
  struct Case {
    const char* args;
    const char* field;
    std::vector<std::pair<double, std::string>> want;
  };
  const Case cases[] = {
      {"--data-path /d/a", "data_path", {{1.0, "/d/a"}}},
      {"--data-path=/d/a", "data_path", {{1.0, "/d/a"}}},
      {"--data-path 1 a 2 b 3 c", "data_path", {{1, "a"}, {2, "b"}, {3, "c"}}},
      {"--train-data-path 0.5 t1 0.5 t2", "train_data_path", {{0.5, "t1"}, {0.5, "t2"}}},
      {"--valid-data-path v", "valid_data_path", {{1.0, "v"}}},
      {"--test-data-path x --fp16", "test_data_path", {{1.0, "x"}}},
      {"--data-path a --data-path b", "data_path", {{1.0, "b"}}},  // the last one wins
  };
  for (const Case& c : cases) {
    MT_ASSERT_OK_AND_ASSIGN(ParsedSpec parsed, ParseMegatronFlags(Args(c.args)));
    const auto* field = mt::v1::DataSpec::descriptor()->FindFieldByName(c.field);
    const auto* r = parsed.spec.data().GetReflection();
    ASSERT_EQ(r->FieldSize(parsed.spec.data(), field), static_cast<int>(c.want.size())) << c.args;
    for (size_t i = 0; i < c.want.size(); ++i) {
      const auto& p = static_cast<const mt::v1::DataPath&>(
          r->GetRepeatedMessage(parsed.spec.data(), field, static_cast<int>(i)));
      EXPECT_EQ(p.weight(), c.want[i].first) << c.args;
      EXPECT_EQ(p.prefix(), c.want[i].second) << c.args;
    }
  }
}

TEST(SpecMegatronFlagsTest, NoEffectFlagsWithoutValue) {
  for (const char* flag :
       {"--no-masked-softmax-fusion", "--no-bias-gelu-fusion", "--no-bias-dropout-fusion",
        "--use-flash-attn", "--log-timers-to-tensorboard", "--log-validation-ppl-to-tensorboard",
        "--log-memory-to-tensorboard", "--log-params-norm", "--log-num-zeros-in-grad",
        "--no-gradient-accumulation-fusion", "--use-mcore-models", "--attention-softmax-in-fp32"}) {
    MT_ASSERT_OK_AND_ASSIGN(ParsedSpec parsed, ParseMegatronFlags({flag, "--num-layers", "2"}));
    ASSERT_EQ(parsed.warnings.size(), 1u) << flag;
    EXPECT_THAT(parsed.warnings[0], StartsWith(std::string(flag) + ": accepted, no effect in mt"));
    EXPECT_EQ(parsed.spec.model().num_layers(), 2) << flag;  // the next flag is still read
  }
}

TEST(SpecMegatronFlagsTest, NoEffectFlagsWithValue) {
  struct Case {
    std::vector<std::string> args;
    std::string want;
  };
  const Case cases[] = {
      {{"--dataset-impl", "infer"}, "--dataset-impl infer: accepted, no effect in mt"},
      {{"--distributed-backend", "gloo"}, "--distributed-backend gloo: accepted, no effect in mt"},
      {{"--DDP-impl", "local"}, "--DDP-impl local: accepted, no effect in mt"},
      {{"--tensorboard-log-interval", "10"},
       "--tensorboard-log-interval 10: accepted, no effect in mt"},
      {{"--timing-log-level", "2"}, "--timing-log-level 2: accepted, no effect in mt"},
      {{"--transformer-impl", "transformer_engine"},
       "--transformer-impl transformer_engine: accepted, no effect in mt"},
      {{"--position-embedding-type", "learned_absolute"},
       "--position-embedding-type learned_absolute: accepted, no effect in mt"},
      {{"--normalization", "LayerNorm"}, "--normalization LayerNorm: accepted, no effect in mt"},
      {{"--local-rank", "3"},
       "--local-rank 3: accepted, no effect in mt (the coordinator places "
       "ranks)"},
      {{"--local_rank=0"},
       "--local_rank 0: accepted, no effect in mt (the coordinator places "
       "ranks)"},
      {{"--exit-duration-in-mins", "230"},
       "--exit-duration-in-mins 230: accepted, no effect in mt"},
  };
  for (const Case& c : cases) {
    MT_ASSERT_OK_AND_ASSIGN(ParsedSpec parsed, ParseMegatronFlags(c.args));
    ASSERT_EQ(parsed.warnings.size(), 1u) << c.want;
    EXPECT_THAT(parsed.warnings[0], StartsWith(c.want));
    EXPECT_THAT(parsed.spec, EqualsProto(mt::v1::JobSpec()));
  }
}

TEST(SpecMegatronFlagsTest, ScriptNameIsSkipped) {
  MT_ASSERT_OK_AND_ASSIGN(ParsedSpec parsed,
                          ParseMegatronFlags({"/opt/Megatron-LM/pretrain_gpt.py", "--lr", "1"}));
  EXPECT_EQ(parsed.spec.training().lr(), 1.0);
  EXPECT_THAT(parsed.warnings, ElementsAre("/opt/Megatron-LM/pretrain_gpt.py: the script name is "
                                           "skipped; mt runs its own trainer"));
}

TEST(SpecMegatronFlagsTest, RepeatsAndOverrides) {
  MT_ASSERT_OK_AND_ASSIGN(ParsedSpec parsed, ParseMegatronFlags(Args("--lr 1e-4 --lr 2e-4")));
  EXPECT_EQ(parsed.spec.training().lr(), 2e-4);
  EXPECT_THAT(parsed.warnings, ElementsAre("--lr given twice; the last value (2e-4) wins"));

  MT_ASSERT_OK_AND_ASSIGN(parsed, ParseMegatronFlags(Args("--lr 1e-4 --lr 1e-4 --fp16 --fp16")));
  EXPECT_THAT(parsed.warnings, IsEmpty());

  MT_ASSERT_OK_AND_ASSIGN(
      parsed, ParseMegatronFlags(Args("--checkpoint-num-layers 2 --recompute-num-layers 3")));
  EXPECT_EQ(parsed.spec.training().recompute_num_layers(), 3);
  EXPECT_THAT(parsed.warnings, ElementsAre("--recompute-num-layers 3 overrides "
                                           "--checkpoint-num-layers 2 (the last one wins)"));

  // The same granularity through the old and the new flag agrees.
  MT_ASSERT_OK_AND_ASSIGN(
      parsed, ParseMegatronFlags(Args("--checkpoint-activations --recompute-granularity full")));
  EXPECT_EQ(parsed.spec.training().recompute_granularity(), mt::v1::RECOMPUTE_GRANULARITY_FULL);
  EXPECT_THAT(parsed.warnings, IsEmpty());

  // One flag repeated: the last one wins, as in argparse.
  MT_ASSERT_OK_AND_ASSIGN(parsed, ParseMegatronFlags(Args("--recompute-granularity selective "
                                                          "--recompute-granularity full")));
  EXPECT_EQ(parsed.spec.training().recompute_granularity(), mt::v1::RECOMPUTE_GRANULARITY_FULL);
  EXPECT_THAT(parsed.warnings,
              ElementsAre("--recompute-granularity given twice; the last value (full) wins"));

  EXPECT_THAT(ParseMegatronFlags(Args("--recompute-activations --recompute-granularity full")),
              StatusIs(kBadFlag,
                       "--recompute-activations (= --recompute-granularity selective) "
                       "and --recompute-granularity full contradict each other; keep "
                       "one of them"));
  EXPECT_THAT(ParseMegatronFlags(Args("--bf16 --fp16")),
              StatusIs(kBadFlag, HasSubstr("--fp16 and --bf16 are mutually exclusive")));
}

TEST(SpecMegatronFlagsTest, UnknownFlags) {
  struct Case {
    const char* args;
    const char* want;
  };
  const Case cases[] = {
      {"--gradient-accumulation-steps 4",
       "unknown flag --gradient-accumulation-steps; Megatron-LM has no such flag — set "
       "--global-batch-size instead"},
      {"--num-layer 4", "unknown flag --num-layer; did you mean --num-layers?"},
      {"--hiden-size 4", "unknown flag --hiden-size; did you mean --hidden-size?"},
      {"--fp-16", "unknown flag --fp-16; did you mean --fp16?"},
      {"--zzz", "unknown flag --zzz"},
      {"-x", "unknown flag -x"},
      {"--batch-size 8",
       "unknown flag --batch-size; Megatron-LM replaced it by --micro-batch-size (per rank) and "
       "--global-batch-size"},
      {"--world-size 8",
       "unknown flag --world-size; Megatron-LM takes the world size from the "
       "launcher"},
      {"--nproc_per_node 8",
       "unknown flag --nproc_per_node; a torchrun option, not a "
       "pretrain_gpt.py flag; mt places ranks itself — drop it"},
      {"--swiglu",
       "--swiglu: not supported; mt trains the GPT-2 architecture (learned absolute "
       "positions, LayerNorm, GELU MLP, multi-head attention with biases)"},
      {"--num-query-groups 8",
       "--num-query-groups 8: not supported; mt trains the GPT-2 "
       "architecture"},
      {"--num-experts 8", "--num-experts 8: not supported; mt has no mixture of experts"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseMegatronFlags(Args(c.args)), StatusIs(kBadFlag, HasSubstr(c.want))) << c.args;
  }
  EXPECT_THAT(ParseMegatronFlags(Args("--zzz")), StatusIs(kBadFlag, "unknown flag --zzz"));
}

TEST(SpecMegatronFlagsTest, BadValues) {
  struct Case {
    std::vector<std::string> args;
    const char* want;
  };
  const Case cases[] = {
      {{"--lr", "abc"}, "--lr: expected a number, got \"abc\""},
      {{"--lr=abc"}, "--lr: expected a number, got \"abc\""},
      {{"--num-layers", "1.5"}, "--num-layers: expected an integer, got \"1.5\""},
      {{"--num-layers", "3000000000"},
       "--num-layers: 3000000000 is out of range (-2147483648..2147483647)"},
      {{"--seed", "-1"}, "--seed: -1 is out of range (0..18446744073709551615)"},
      {{"--lr"}, "--lr: missing value (expected a number)"},
      {{"--lr", "--fp16"}, "--lr: missing value (expected a number)"},
      {{"--num-layers"}, "--num-layers: missing value (expected an integer)"},
      {{"--save"}, "--save: missing value (expected a path)"},
      {{"--data-path"},
       "--data-path: missing value (expected a dataset prefix or weight-prefix "
       "pairs)"},
      {{"--data-path", "--fp16"}, "--data-path: missing value"},
      {{"--split"}, "--split: missing value (expected train,valid,test weights such as 969,30,1)"},
      {{"--fp16=true"}, "--fp16 takes no value, got \"true\""},
      {{"--fp16", "yes"},
       "unexpected argument \"yes\": pretrain_gpt.py takes only flags, and "
       "values follow their flag (--fp16 takes no value)"},
      {{"stray"}, "unexpected argument \"stray\": pretrain_gpt.py takes only flags"},
      {{"--"}, "unexpected argument \"--\""},
      {{"--lr", "1", "2"}, "unexpected argument \"2\""},
      {{"--lr-decay-style", "WSD"},
       "--lr-decay-style: expected one of constant, linear, cosine, "
       "inverse-square-root, got \"WSD\" (WSD is not supported)"},
      {{"--lr-decay-style", "exponential"},
       "--lr-decay-style: expected one of constant, linear, "
       "cosine, inverse-square-root, got \"exponential\""},
      {{"--optimizer", "adamw"}, "--optimizer: expected one of adam, sgd, got \"adamw\""},
      {{"--recompute-granularity", "partial"},
       "--recompute-granularity: expected one of full, selective, got \"partial\""},
      {{"--recompute-method", "random"},
       "--recompute-method: expected one of uniform, block, got \"random\""},
      {{"--tokenizer-type", "SentencePieceTokenizer"},
       "--tokenizer-type SentencePieceTokenizer: not supported; mt supports GPT2BPETokenizer"},
      {{"--position-embedding-type", "rope"},
       "--position-embedding-type rope: not supported; mt trains the GPT-2 architecture (learned "
       "absolute positions, LayerNorm, GELU MLP, multi-head attention with biases) (accepted: "
       "learned_absolute)"},
      {{"--normalization", "RMSNorm"},
       "--normalization RMSNorm: not supported; mt trains the "
       "GPT-2 architecture"},
      {{"--dataset-impl", "lazy"},
       "--dataset-impl lazy: not supported; mt reads Megatron's mmap "
       "(MMIDIDX) format (accepted: mmap, infer)"},
      {{"--distributed-backend", "mpi"}, "--distributed-backend mpi: not supported"},
      {{"--DDP-impl", "fast"}, "--DDP-impl: expected one of local, torch, got \"fast\""},
      {{"--timing-log-level", "5"}, "--timing-log-level: expected one of 0, 1, 2, got \"5\""},
      {{"--local-rank", "x"}, "--local-rank: expected an integer, got \"x\""},
      {{"--split", "1,2,3,4"},
       "--split: expected one to three comma-separated non-negative "
       "numbers"},
      {{"--split", "a/b"}, "--split: expected one to three"},
      {{"--data-path", "a", "b"},
       "--data-path value 1: expected a blend weight (a number) before "
       "each prefix, got \"a\"; write weight-prefix pairs (w1 p1 w2 "
       "p2 ...)"},
      {{"--data-path", "0.5", "a", "0.5"},
       "--data-path: expected one prefix or weight-prefix "
       "pairs (w1 p1 w2 p2 ...), got 3 values"},
      {{"--vocab-file", "\xff"}, "--vocab-file: expected UTF-8 text, got \"\\xff\""},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseMegatronFlags(c.args), StatusIs(kBadFlag, HasSubstr(c.want)))
        << ::testing::PrintToString(c.args);
  }
}

TEST(SpecMegatronFlagsTest, EmptyArgumentsGiveAnEmptySpec) {
  MT_ASSERT_OK_AND_ASSIGN(ParsedSpec parsed, ParseMegatronFlags({}));
  EXPECT_THAT(parsed.spec, EqualsProto(mt::v1::JobSpec()));
  EXPECT_THAT(parsed.warnings, IsEmpty());
}

TEST(SpecMegatronFlagsTest, FlagForField) {
  EXPECT_EQ(MegatronFlagForField("model.num_layers"), "--num-layers");
  EXPECT_EQ(MegatronFlagForField("data.data_path"), "--data-path");
  EXPECT_EQ(MegatronFlagForField("training.recompute_num_layers"), "--recompute-num-layers");
  EXPECT_EQ(MegatronFlagForField("training.recompute_granularity"), "--recompute-granularity");
  EXPECT_EQ(MegatronFlagForField("training.precision"), "--fp16 / --bf16");
  EXPECT_EQ(MegatronFlagForField("checkpoint.save_dir"), "--save");
  EXPECT_EQ(MegatronFlagForField("resources.device"), "");
  const std::vector<std::string> known = KnownMegatronFlags();
  EXPECT_TRUE(std::is_sorted(known.begin(), known.end()));
  EXPECT_THAT(known, ::testing::Contains("--dataset-impl"));
  EXPECT_THAT(known, ::testing::Contains("--num-layers"));
  EXPECT_THAT(known, ::testing::Not(::testing::Contains("--swiglu")));
}

// The same job through both front ends is the same spec once defaults are applied.
TEST(SpecMegatronFlagsTest, YamlAndFlagsAgree) {
  struct Case {
    std::string flags;
    std::string yaml;
  };
  const Case cases[] = {
      {kLaunchA, R"(
model: {num_layers: 24, hidden_size: 1024, num_attention_heads: 16, seq_length: 1024}
parallel: {tp: 4, pp: 2}
training:
  micro_batch_size: 4
  global_batch_size: 64
  lr: 1.5e-4
  train_iters: 100000
  precision: fp16
data:
  data_path: /data/my_dataset_text_document
  tokenizer: {vocab_file: gpt2-vocab.json, merge_file: gpt2-merges.txt}
checkpoint: {save_dir: /checkpoints/gpt_model, load_dir: /checkpoints/gpt_model}
)"},
      {std::string(kLaunchB) + " --data-path 0.3 a_text_document 0.7 b_text_document --split "
                               "969,30,1 --tensor-model-parallel-size 2 --sequence-parallel "
                               "--use-distributed-optimizer --overlap-grad-reduce "
                               "--overlap-param-gather --recompute-activations --dataset-impl mmap "
                               "--lr-warmup-fraction 0.01 --min-lr 6e-6 --weight-decay 0.1",
       R"(
model: {num_layers: 32, hidden_size: 2560, num_attention_heads: 32, seq_length: 2048}
parallel:
  tp: 2
  sequence_parallel: true
  use_distributed_optimizer: true
  overlap_grad_reduce: true
  overlap_param_gather: true
training:
  micro_batch_size: 4
  global_batch_size: 256
  lr: 6.0e-5
  min_lr: 6.0e-6
  train_iters: 500000
  lr_decay_style: cosine
  lr_warmup_fraction: 0.01
  weight_decay: 0.1
  precision: fp16
  recompute_granularity: selective
data:
  data_path:
    - {weight: 0.3, prefix: a_text_document}
    - {weight: 0.7, prefix: b_text_document}
  split: 969,30,1
  tokenizer: {vocab_file: vocab.json, merge_file: merges.txt}
checkpoint: {save_interval: 1000}
evaluation: {eval_interval: 200, eval_iters: 20}
logging: {log_interval: 10}
)"},
  };
  for (const Case& c : cases) {
    MT_ASSERT_OK_AND_ASSIGN(ParsedSpec from_flags, ParseMegatronFlags(Args(c.flags)));
    MT_ASSERT_OK_AND_ASSIGN(ParsedSpec from_yaml, ParseYamlSpec(c.yaml));
    ApplyDefaults(&from_flags.spec);
    ApplyDefaults(&from_yaml.spec);
    EXPECT_TRUE(MessageDifferencer::Equals(from_flags.spec, from_yaml.spec));
    EXPECT_THAT(from_flags.spec, EqualsProto(from_yaml.spec));
    EXPECT_THAT(ValidateSpec(from_flags.spec), IsOk());
  }
}

}  // namespace
}  // namespace mt::spec
