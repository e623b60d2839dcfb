#include "common/spec/yaml_spec.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/str_split.h"
#include "common/base/status_matchers.h"
#include "common/spec/defaults.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/proto_matchers.h"

namespace mt::spec {
namespace {

using ::mt::testing::IsOk;
using ::mt::testing::StatusIs;
using ::mt::testutil::EqualsProto;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

TEST(SpecYamlTest, ParsesAFullJob) {
  MT_ASSERT_OK_AND_ASSIGN(ParsedSpec parsed, ParseYamlSpec(R"(
name: gpt-350m
priority: 5
model:
  num_layers: 24
  hidden_size: 1024
  num_attention_heads: 16
  seq_length: 1024
  hidden_dropout: 0
  untie_embeddings_and_output_weights: true
parallel:
  tp: 4
  pp: 2
  dp: auto
  sequence_parallel: true
  pipeline_layer_split: [12, 12]
training:
  micro_batch_size: 4
  global_batch_size: 64
  train_iters: 5000000000
  lr: 1.5e-4
  min_lr: 1.0e-5
  lr_decay_style: cosine
  precision: bf16
  recompute_granularity: SELECTIVE
  seed: 42
data:
  data_path: [0.3, /data/a_text_document, 0.7, /data/b_text_document]
  split: "969,30,1"
  tokenizer:
    type: GPT2BPETokenizer
    vocab_file: gpt2-vocab.json
    merge_file: gpt2-merges.txt
checkpoint:
  save_dir: /ckpt
  save_interval: 1000
  retention: {keep_last: 3, keep_best: 1}
evaluation: {eval_interval: 200, eval_iters: 20}
logging: {log_interval: 10, tensorboard_dir: /tb}
restart: {max_restarts: 0}
resources: {device: gpu, nodes: [node-a, node-b]}
)"));
  mt::v1::JobSpec want;
  want.set_name("gpt-350m");
  want.set_priority(5);
  auto* m = want.mutable_model();
  m->set_num_layers(24);
  m->set_hidden_size(1024);
  m->set_num_attention_heads(16);
  m->set_seq_length(1024);
  m->set_hidden_dropout(0);
  m->set_untie_embeddings_and_output_weights(true);
  auto* p = want.mutable_parallel();
  p->set_tensor_model_parallel_size(4);
  p->set_pipeline_model_parallel_size(2);
  p->set_sequence_parallel(true);
  p->add_pipeline_layer_split(12);
  p->add_pipeline_layer_split(12);
  auto* t = want.mutable_training();
  t->set_micro_batch_size(4);
  t->set_global_batch_size(64);
  t->set_train_iters(5000000000);
  t->set_lr(1.5e-4);
  t->set_min_lr(1e-5);
  t->set_lr_decay_style(mt::v1::LR_DECAY_STYLE_COSINE);
  t->set_precision(mt::v1::PRECISION_BF16);
  t->set_recompute_granularity(mt::v1::RECOMPUTE_GRANULARITY_SELECTIVE);
  t->set_seed(42);
  auto* d = want.mutable_data();
  auto* a = d->add_data_path();
  a->set_weight(0.3);
  a->set_prefix("/data/a_text_document");
  auto* b = d->add_data_path();
  b->set_weight(0.7);
  b->set_prefix("/data/b_text_document");
  d->set_split("969,30,1");
  d->mutable_tokenizer()->set_type(mt::v1::TOKENIZER_TYPE_GPT2_BPE);
  d->mutable_tokenizer()->set_vocab_file("gpt2-vocab.json");
  d->mutable_tokenizer()->set_merge_file("gpt2-merges.txt");
  auto* c = want.mutable_checkpoint();
  c->set_save_dir("/ckpt");
  c->set_save_interval(1000);
  c->mutable_retention()->set_keep_last(3);
  c->mutable_retention()->set_keep_best(1);
  want.mutable_evaluation()->set_eval_interval(200);
  want.mutable_evaluation()->set_eval_iters(20);
  want.mutable_logging()->set_log_interval(10);
  want.mutable_logging()->set_tensorboard_dir("/tb");
  want.mutable_restart()->set_max_restarts(0);
  want.mutable_resources()->set_device(mt::v1::DEVICE_KIND_GPU);
  want.mutable_resources()->add_nodes("node-a");
  want.mutable_resources()->add_nodes("node-b");
  EXPECT_THAT(parsed.spec, EqualsProto(want));
  EXPECT_THAT(parsed.warnings, IsEmpty());
  EXPECT_TRUE(parsed.spec.model().has_hidden_dropout());  // an explicit 0 is kept
}

TEST(SpecYamlTest, ParallelAliasesAndAuto) {
  MT_ASSERT_OK_AND_ASSIGN(
      ParsedSpec parsed,
      ParseYamlSpec("parallel: {tp: 2, pp: 4, dp: 3, cp: 2, world_size: auto}\n"));
  EXPECT_EQ(parsed.spec.parallel().tensor_model_parallel_size(), 2);
  EXPECT_EQ(parsed.spec.parallel().pipeline_model_parallel_size(), 4);
  EXPECT_EQ(parsed.spec.parallel().data_parallel_size(), 3);
  EXPECT_EQ(parsed.spec.parallel().context_parallel_size(), 2);
  EXPECT_EQ(parsed.spec.parallel().world_size(), 0);
  MT_ASSERT_OK_AND_ASSIGN(parsed, ParseYamlSpec("parallel: {data_parallel_size: AUTO}\n"));
  EXPECT_EQ(parsed.spec.parallel().data_parallel_size(), 0);
  EXPECT_THAT(ParseYamlSpec("parallel: {tp: auto}\n"),
              StatusIs(kInvalid, "parallel.tp: expected an integer, got \"auto\" [line 1]"));
}

TEST(SpecYamlTest, EnumSpellings) {
  struct Case {
    const char* text;
    mt::v1::LrDecayStyle want;
  };
  for (const Case& c : {Case{"cosine", mt::v1::LR_DECAY_STYLE_COSINE},
                        Case{"Cosine", mt::v1::LR_DECAY_STYLE_COSINE},
                        Case{"LR_DECAY_STYLE_LINEAR", mt::v1::LR_DECAY_STYLE_LINEAR},
                        Case{"inverse-square-root", mt::v1::LR_DECAY_STYLE_INVERSE_SQUARE_ROOT},
                        Case{"constant", mt::v1::LR_DECAY_STYLE_CONSTANT}}) {
    MT_ASSERT_OK_AND_ASSIGN(
        ParsedSpec parsed,
        ParseYamlSpec(std::string("training: {lr_decay_style: ") + c.text + "}"));
    EXPECT_EQ(parsed.spec.training().lr_decay_style(), c.want) << c.text;
  }
  EXPECT_THAT(ParseYamlSpec("training:\n  precision: fp8\n"),
              StatusIs(kInvalid,
                       "training.precision: expected one of fp32, fp16, bf16, got "
                       "\"fp8\" [line 2]"));
  EXPECT_THAT(ParseYamlSpec("resources: {device: tpu}"),
              StatusIs(kInvalid, HasSubstr("resources.device: expected one of auto, gpu, cpu, "
                                           "got \"tpu\"")));
}

TEST(SpecYamlTest, DataPathForms) {
  struct Case {
    const char* name;
    const char* yaml;
    std::vector<std::pair<double, std::string>> want;
  };
  const Case cases[] = {
      {"string", "data: {data_path: /d/a}", {{1.0, "/d/a"}}},
      {"maps",
       "data:\n  data_path:\n    - {weight: 0.3, prefix: a}\n    - {weight: 0.7, prefix: b}\n",
       {{0.3, "a"}, {0.7, "b"}}},
      {"flat", "data: {data_path: [0.3, a, 0.7, b]}", {{0.3, "a"}, {0.7, "b"}}},
      {"flat_one", "data: {data_path: [a]}", {{1.0, "a"}}},
      {"one_map", "data: {data_path: {weight: 2, prefix: a}}", {{2.0, "a"}}},
      {"map_without_weight", "data: {data_path: [{prefix: a}]}", {{0.0, "a"}}},
      {"train_valid_test",
       "data: {train_data_path: t, valid_data_path: [1, v], test_data_path: [{weight: 1, prefix: "
       "x}]}",
       {}},
  };
  for (const Case& c : cases) {
    MT_ASSERT_OK_AND_ASSIGN(ParsedSpec parsed, ParseYamlSpec(c.yaml));
    const auto& paths = parsed.spec.data().data_path();
    ASSERT_EQ(paths.size(), static_cast<int>(c.want.size())) << c.name;
    for (size_t i = 0; i < c.want.size(); ++i) {
      EXPECT_EQ(paths[i].weight(), c.want[i].first) << c.name;
      EXPECT_EQ(paths[i].prefix(), c.want[i].second) << c.name;
    }
  }
  MT_ASSERT_OK_AND_ASSIGN(
      ParsedSpec tvt,
      ParseYamlSpec("data: {train_data_path: t, valid_data_path: [1, v], test_data_path: [x]}"));
  EXPECT_EQ(tvt.spec.data().train_data_path(0).prefix(), "t");
  EXPECT_EQ(tvt.spec.data().valid_data_path(0).prefix(), "v");
  EXPECT_EQ(tvt.spec.data().valid_data_path(0).weight(), 1.0);
  EXPECT_EQ(tvt.spec.data().test_data_path(0).prefix(), "x");
}

TEST(SpecYamlTest, DataPathErrors) {
  EXPECT_THAT(ParseYamlSpec("data: {data_path: [a, b]}"),
              StatusIs(kInvalid,
                       "data.data_path[0]: expected a blend weight (a number) before "
                       "each prefix, got \"a\"; write weight-prefix pairs (w1 p1 w2 "
                       "p2 ...) [line 1]"));
  EXPECT_THAT(ParseYamlSpec("data: {data_path: [0.3, a, 0.7]}"),
              StatusIs(kInvalid, HasSubstr("data.data_path: expected one prefix or weight-prefix "
                                           "pairs (w1 p1 w2 p2 ...), got 3 values")));
  EXPECT_THAT(ParseYamlSpec("data: {data_path: [{weight: 1, prefix: a}, b]}"),
              StatusIs(kInvalid, HasSubstr("data.data_path[1]: expected a {weight, prefix} "
                                           "mapping like the other entries, got \"b\"")));
  EXPECT_THAT(ParseYamlSpec("data: {data_path: [{weight: heavy, prefix: a}]}"),
              StatusIs(kInvalid, HasSubstr("data.data_path[0].weight: expected a number, got "
                                           "\"heavy\"")));
  EXPECT_THAT(ParseYamlSpec("data: {data_path: [{wieght: 1, prefix: a}]}"),
              StatusIs(kInvalid, HasSubstr("data.data_path[0].wieght: unknown key (did you mean "
                                           "data.data_path[0].weight?)")));
}

TEST(SpecYamlTest, UnknownKeys) {
  EXPECT_THAT(ParseYamlSpec("training:\n  micro_batch: 4\n"),
              StatusIs(kInvalid,
                       "training.micro_batch: unknown key (did you mean "
                       "training.micro_batch_size?) [line 2]"));
  EXPECT_THAT(ParseYamlSpec("modle: {}\n"),
              StatusIs(kInvalid, "modle: unknown key (did you mean model?) [line 1]"));
  EXPECT_THAT(ParseYamlSpec("model: {num-layers: 4}\n"),
              StatusIs(kInvalid, HasSubstr("model.num-layers: unknown key (did you mean "
                                           "model.num_layers?)")));
  EXPECT_THAT(ParseYamlSpec("model: {numAttentionHeads: 4}\n"),
              StatusIs(kInvalid, HasSubstr("(did you mean model.num_attention_heads?)")));
  EXPECT_THAT(ParseYamlSpec("parallel: {xyzzy: 1}\n"),
              StatusIs(kInvalid, HasSubstr("parallel.xyzzy: unknown key; expected one of "
                                           "tensor_model_parallel_size, ")));
  EXPECT_THAT(ParseYamlSpec("parallel: {xyzzy: 1}\n"),
              StatusIs(kInvalid, HasSubstr("ddp_bucket_size, tp_comm_overlap, cp, dp, pp, tp")));
  EXPECT_THAT(ParseYamlSpec("[1, 2]: x\n"),
              StatusIs(kInvalid, "top level: keys must be plain names, got a list [line 1]"));
}

TEST(SpecYamlTest, WrongTypes) {
  struct Case {
    const char* yaml;
    const char* want;
  };
  const Case cases[] = {
      {"model: {num_layers: twelve}",
       "model.num_layers: expected an integer, got \"twelve\" [line 1]"},
      {"model: {num_layers: 12.5}", "model.num_layers: expected an integer, got \"12.5\""},
      {"model: {num_layers: [12]}", "model.num_layers: expected an integer, got a list"},
      {"model: {num_layers: {n: 12}}", "model.num_layers: expected an integer, got a mapping"},
      {"model: {num_layers: 3000000000}",
       "model.num_layers: 3000000000 is out of range (-2147483648..2147483647)"},
      {"training: {train_iters: 99999999999999999999}",
       "training.train_iters: 99999999999999999999 is out of range"},
      {"training: {seed: -1}", "training.seed: -1 is out of range (0..18446744073709551615)"},
      {"training: {lr: fast}", "training.lr: expected a number, got \"fast\""},
      {"training: {lr: .inf}", "training.lr: expected a number, got \".inf\""},
      {"parallel: {sequence_parallel: maybe}",
       "parallel.sequence_parallel: expected true or false, got \"maybe\""},
      {"model: 24", "model: expected a mapping (key: value), got \"24\""},
      {"model: [24]", "model: expected a mapping (key: value), got a list"},
      {"name: [a]", "name: expected a string, got a list"},
      {"parallel: {pipeline_layer_split: 12}",
       "parallel.pipeline_layer_split: expected a list of an integer, got \"12\""},
      {"parallel: {pipeline_layer_split: [12, x]}",
       "parallel.pipeline_layer_split[1]: expected an integer, got \"x\""},
      {"resources: {nodes: [[a]]}", "resources.nodes[0]: expected a string, got a list"},
      {"data: {data_path: {weight: 1, prefix: [a]}}",
       "data.data_path[0].prefix: expected a string, got a list"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseYamlSpec(c.yaml), StatusIs(kInvalid, HasSubstr(c.want))) << c.yaml;
  }
  // Text that is not UTF-8 is refused where it is read, naming the byte.
  EXPECT_THAT(ParseYamlSpec("name: a\xff\xfe"),
              StatusIs(kInvalid,
                       "YAML syntax error at byte 7: invalid leading UTF-8 octet (a job "
                       "spec is UTF-8 text)"));
}

TEST(SpecYamlTest, DuplicateKeys) {
  EXPECT_THAT(
      ParseYamlSpec("model:\n  num_layers: 2\n  num_layers: 3\n"),
      StatusIs(kInvalid, "model.num_layers: duplicate key (first given [line 2]) [line 3]"));
  EXPECT_THAT(ParseYamlSpec("parallel:\n  tensor_model_parallel_size: 2\n  tp: 2\n"),
              StatusIs(kInvalid,
                       "parallel.tp: duplicate key (parallel.tensor_model_parallel_size "
                       "is the same field [line 2]) [line 3]"));
  EXPECT_THAT(ParseYamlSpec("model: {}\nmodel: {}\n"),
              StatusIs(kInvalid, HasSubstr("model: duplicate key")));
}

TEST(SpecYamlTest, DocumentLevelErrors) {
  EXPECT_THAT(ParseYamlSpec("name: a\n---\nname: b\n"),
              StatusIs(kInvalid,
                       "found 2 YAML documents; a job spec is exactly one (remove the "
                       "'---' separators)"));
  EXPECT_THAT(ParseYamlSpec(""), StatusIs(kInvalid, HasSubstr("the job spec is empty")));
  EXPECT_THAT(ParseYamlSpec("# only a comment\n"),
              StatusIs(kInvalid, HasSubstr("the job spec is empty")));
  EXPECT_THAT(ParseYamlSpec("- a\n- b\n"),
              StatusIs(kInvalid,
                       "the job spec must be a mapping (name:, model:, training:, ...), "
                       "got a list [line 1]"));
  EXPECT_THAT(ParseYamlSpec("just text"),
              StatusIs(kInvalid, HasSubstr("the job spec must be a mapping")));
  EXPECT_THAT(ParseYamlSpec("model: {num_layers: 2\n"),
              StatusIs(kInvalid, HasSubstr("YAML syntax error at line")));
  EXPECT_THAT(ParseYamlSpec("a: b: c\n"), StatusIs(kInvalid, HasSubstr("YAML syntax error")));
  EXPECT_THAT(ParseYamlSpec(std::string(kMaxYamlSpecBytes + 1, ' ')),
              StatusIs(kInvalid, "the job spec is 1048577 bytes, over the limit of 1048576"));
}

TEST(SpecYamlTest, EveryErrorIsReportedOnItsOwnLine) {
  const absl::StatusOr<ParsedSpec> parsed = ParseYamlSpec(R"(
model:
  num_layers: x
  hidden: 4
training:
  lr: y
)");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(std::vector<std::string>(absl::StrSplit(parsed.status().message(), '\n')),
              ElementsAre("model.num_layers: expected an integer, got \"x\" [line 3]",
                          "model.hidden: unknown key (did you mean model.hidden_size?) [line 4]",
                          "training.lr: expected a number, got \"y\" [line 6]"));
}

TEST(SpecYamlTest, EmptyValuesWarnAndLeaveUnset) {
  MT_ASSERT_OK_AND_ASSIGN(ParsedSpec parsed,
                          ParseYamlSpec("checkpoint:\n  load_dir:\n  save_dir: ~\nlogging:\n"));
  EXPECT_FALSE(parsed.spec.has_logging());
  EXPECT_EQ(parsed.spec.checkpoint().load_dir(), "");
  EXPECT_THAT(parsed.warnings, ElementsAre("checkpoint.load_dir: empty value, left unset [line 2]",
                                           "checkpoint.save_dir: empty value, left unset [line 3]",
                                           "logging: empty value, left unset [line 4]"));
}

TEST(SpecYamlTest, QuotedValuesAndAnchors) {
  MT_ASSERT_OK_AND_ASSIGN(ParsedSpec parsed, ParseYamlSpec(R"(
name: "~"
model: &m {num_layers: "12", hidden_size: 768}
training: {lr: '3e-4', accumulate_allreduce_grads_in_fp32: yes}
checkpoint: {save_dir: "null"}
)"));
  EXPECT_EQ(parsed.spec.name(), "~");
  EXPECT_EQ(parsed.spec.model().num_layers(), 12);
  EXPECT_EQ(parsed.spec.training().lr(), 3e-4);
  EXPECT_TRUE(parsed.spec.training().accumulate_allreduce_grads_in_fp32());
  EXPECT_EQ(parsed.spec.checkpoint().save_dir(), "null");
}

TEST(SpecYamlTest, SpecToYamlText) {
  mt::v1::JobSpec s;
  s.set_name("tiny");
  s.mutable_model()->set_num_layers(2);
  s.mutable_model()->set_hidden_dropout(0);
  s.mutable_parallel()->set_tensor_model_parallel_size(2);
  s.mutable_parallel()->add_pipeline_layer_split(1);
  s.mutable_parallel()->add_pipeline_layer_split(1);
  s.mutable_training()->set_lr(1.5e-4);
  s.mutable_training()->set_precision(mt::v1::PRECISION_BF16);
  auto* a = s.mutable_data()->add_data_path();
  a->set_weight(0.3);
  a->set_prefix("/d/a");
  auto* b = s.mutable_data()->add_data_path();
  b->set_weight(0.7);
  b->set_prefix("/d/b");
  s.mutable_data()->add_train_data_path()->set_prefix("t");
  s.mutable_data()->mutable_train_data_path(0)->set_weight(1);
  s.mutable_checkpoint();
  EXPECT_EQ(SpecToYaml(s),
            "name: tiny\n"
            "model:\n"
            "  num_layers: 2\n"
            "  hidden_dropout: 0.0\n"
            "parallel:\n"
            "  tensor_model_parallel_size: 2\n"
            "  pipeline_layer_split: [1, 1]\n"
            "training:\n"
            "  lr: 0.00015\n"
            "  precision: bf16\n"
            "data:\n"
            "  data_path:\n"
            "    - {weight: 0.3, prefix: /d/a}\n"
            "    - {weight: 0.7, prefix: /d/b}\n"
            "  train_data_path: t\n"
            "checkpoint: {}\n");
}

// Parse(SpecToYaml(s)) == s.
void ExpectRoundTrip(const mt::v1::JobSpec& s) {
  const std::string yaml = SpecToYaml(s);
  auto parsed = ParseYamlSpec(yaml);
  ASSERT_THAT(parsed, IsOk()) << yaml;
  EXPECT_THAT(parsed->spec, EqualsProto(s)) << yaml;
  EXPECT_THAT(parsed->warnings, IsEmpty()) << yaml;
}

TEST(SpecYamlTest, RoundTripEmptyAndDefaulted) {
  mt::v1::JobSpec empty;
  ExpectRoundTrip(empty);
  mt::v1::JobSpec defaulted;
  ApplyDefaults(&defaulted);
  ExpectRoundTrip(defaulted);
}

TEST(SpecYamlTest, RoundTripEveryFieldSet) {
  mt::v1::JobSpec s;
  s.set_name("round.trip_1");
  s.set_priority(-7);
  s.set_from_checkpoint("ckpt-9");
  auto* m = s.mutable_model();
  m->set_num_layers(24);
  m->set_hidden_size(1024);
  m->set_num_attention_heads(16);
  m->set_ffn_hidden_size(4096);
  m->set_kv_channels(64);
  m->set_seq_length(2048);
  m->set_max_position_embeddings(4096);
  m->set_vocab_size(50257);
  m->set_make_vocab_size_divisible_by(128);
  m->set_hidden_dropout(0.1);
  m->set_attention_dropout(0);
  m->set_init_method_std(0.006);
  m->set_untie_embeddings_and_output_weights(true);
  m->set_layernorm_epsilon(1e-5);
  auto* p = s.mutable_parallel();
  p->set_tensor_model_parallel_size(2);
  p->set_pipeline_model_parallel_size(2);
  p->set_data_parallel_size(4);
  p->set_context_parallel_size(1);
  p->set_world_size(16);
  p->set_num_layers_per_virtual_pipeline_stage(3);
  p->add_pipeline_layer_split(10);
  p->add_pipeline_layer_split(14);
  p->set_sequence_parallel(true);
  p->set_use_distributed_optimizer(true);
  p->set_overlap_grad_reduce(true);
  p->set_overlap_param_gather(true);
  p->set_overlap_p2p_comm(true);
  p->set_ddp_bucket_size(123456789012);
  auto* t = s.mutable_training();
  t->set_micro_batch_size(4);
  t->set_global_batch_size(256);
  t->set_train_iters(500000);
  t->set_train_samples(1);
  t->set_lr(6e-5);
  t->set_min_lr(1.0 / 3 * 1e-5);
  t->set_lr_decay_style(mt::v1::LR_DECAY_STYLE_INVERSE_SQUARE_ROOT);
  t->set_lr_decay_iters(400000);
  t->set_lr_decay_samples(2);
  t->set_lr_warmup_iters(2000);
  t->set_lr_warmup_samples(3);
  t->set_lr_warmup_fraction(0.01);
  t->set_optimizer(mt::v1::OPTIMIZER_SGD);
  t->set_weight_decay(0.1);
  t->set_adam_beta1(0.9);
  t->set_adam_beta2(0.95);
  t->set_adam_eps(1e-8);
  t->set_sgd_momentum(0.8);
  t->set_clip_grad(1.0);
  t->set_precision(mt::v1::PRECISION_FP16);
  t->set_loss_scale(65536);
  t->set_initial_loss_scale(4294967296.0);
  t->set_min_loss_scale(1);
  t->set_loss_scale_window(1000);
  t->set_hysteresis(2);
  t->set_recompute_granularity(mt::v1::RECOMPUTE_GRANULARITY_FULL);
  t->set_recompute_method(mt::v1::RECOMPUTE_METHOD_BLOCK);
  t->set_recompute_num_layers(2);
  t->set_seed(18446744073709551615ull);
  t->set_accumulate_allreduce_grads_in_fp32(true);
  auto* d = s.mutable_data();
  for (auto* list : {d->mutable_data_path(), d->mutable_train_data_path(),
                     d->mutable_valid_data_path(), d->mutable_test_data_path()}) {
    auto* x = list->Add();
    x->set_weight(0.25);
    x->set_prefix("/data/x y/with: colon");
    auto* y = list->Add();
    y->set_weight(3);
    y->set_prefix("- dash");
  }
  d->set_split("969,30,1");
  d->mutable_tokenizer()->set_type(mt::v1::TOKENIZER_TYPE_GPT2_BPE);
  d->mutable_tokenizer()->set_vocab_file("true");
  d->mutable_tokenizer()->set_merge_file("123");
  d->set_data_cache_path("#not a comment");
  d->set_num_workers(0);
  auto* c = s.mutable_checkpoint();
  c->set_save_dir("");
  c->set_load_dir("Null");
  c->set_save_interval(1000);
  c->set_async_save(true);
  c->set_no_load_optim(true);
  c->set_no_load_rng(true);
  c->set_finetune(true);
  c->mutable_retention()->set_keep_last(3);
  c->mutable_retention()->set_keep_best(1);
  c->mutable_retention()->set_keep_every_steps(10000);
  s.mutable_evaluation()->set_eval_interval(0);
  s.mutable_evaluation()->set_eval_iters(0);
  s.mutable_logging()->set_log_interval(1);
  s.mutable_logging()->set_tensorboard_dir("/tb/\xc3\xa9t\xc3\xa9 \"quoted\" 'single'");
  s.mutable_restart()->set_max_restarts(0);
  s.mutable_resources()->set_device(mt::v1::DEVICE_KIND_CPU);
  s.mutable_resources()->add_nodes("a");
  s.mutable_resources()->add_nodes("~");
  s.mutable_resources()->add_nodes("");
  ExpectRoundTrip(s);
}

TEST(SpecYamlTest, RoundTripSingleDataPathWeights) {
  for (double w : {0.0, 1.0, 0.5}) {
    mt::v1::JobSpec s;
    auto* p = s.mutable_data()->add_data_path();
    p->set_weight(w);
    p->set_prefix("/d/a");
    ExpectRoundTrip(s);
  }
  mt::v1::JobSpec s;
  s.mutable_data()->add_data_path();  // an empty entry
  ExpectRoundTrip(s);
}

// yaml-cpp 0.7 never returned from these inputs (a 4-byte ",NaL" found by
// tests/fuzz/yaml_spec_fuzzer hung mtctl validate, growing memory); the spec is now read by
// libyaml (yaml_tree.h), which answers each with a syntax error.
TEST(YamlSpecTest, InputsThatHungTheOldReaderAreSyntaxErrors) {
  for (const char* yaml : {",NaL", ", a", " ,a", "#c\n,a", "---\n,a", "- a\n,b", "\"x\"\n,",
                           "\xef\xbb\xbf,a", "model:\n  num_layers: 2\n,x", "[a],", "[a] ,\nb",
                           "{a: 1},", "\"x\",", "'x',", "a: *b,c"}) {
    EXPECT_THAT(ParseYamlSpec(yaml), StatusIs(kInvalid, HasSubstr("YAML "))) << yaml;
  }
  EXPECT_THAT(ParseYamlSpec(std::string("\0\0\0,\0\0\0\xa5\x8b ", 10)),
              StatusIs(kInvalid, HasSubstr("control characters are not allowed")));
  EXPECT_THAT(ParseYamlSpec("&a\xff\xffZ,a]\n"), StatusIs(kInvalid, HasSubstr("at byte 2")));
  // Commas inside quotes, plain scalars, block scalars and brackets across lines are text.
  auto parsed = ParseYamlSpec(
      "name: |\n  ,a\ndata:\n  split: 969,30,1\n  data_path: [\n    0.5, a,\n    0.5, b]\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->spec.name(), ",a\n");
  EXPECT_EQ(parsed->spec.data().split(), "969,30,1");
  ASSERT_EQ(parsed->spec.data().data_path_size(), 2);
  EXPECT_EQ(parsed->spec.data().data_path(1).prefix(), "b");
}

// Every input of the fuzzer's corpus is answered (the corpus holds the old reader's hangs).
TEST(YamlSpecTest, EveryFuzzCorpusInputIsAnswered) {
  const std::string dir = std::string(MT_SOURCE_DIR) + "/tests/fuzz/corpus/yaml_spec_fuzzer";
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto parsed = ParseYamlSpec(text);
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), kInvalid) << entry.path() << ": " << parsed.status();
    }
    ++n;
  }
  EXPECT_GE(n, 10);
}

}  // namespace
}  // namespace mt::spec
