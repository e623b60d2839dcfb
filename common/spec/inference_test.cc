#include "common/spec/inference.h"

#include <string>
#include <vector>

#include "common/spec/validate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::spec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

mt::v1::CheckpointManifest TrainedManifest() {
  mt::v1::CheckpointManifest m;
  m.set_job_id("j-4");
  m.set_step(20);
  mt::v1::JobSpec* s = m.mutable_spec();
  s->set_name("train");
  s->mutable_model()->set_num_layers(2);
  s->mutable_model()->set_seq_length(16);
  s->mutable_parallel()->set_tensor_model_parallel_size(2);
  s->mutable_parallel()->set_pipeline_model_parallel_size(2);
  s->mutable_training()->set_micro_batch_size(2);
  s->mutable_training()->set_global_batch_size(16);
  s->mutable_checkpoint()->set_save_dir("/ckpt");
  s->mutable_logging()->set_tensorboard_dir("/tb");
  s->mutable_data()->add_data_path()->set_prefix("/train/corpus");
  m.mutable_model()->set_max_position_embeddings(32);
  return m;
}

TEST(InferenceSpecTest, EvalTaskErrorsNameTheFlag) {
  struct Case {
    std::string want;
    void (*edit)(mt::v1::EvalTask*);
  };
  const Case cases[] = {
      {"--data-path PREFIX is required", [](mt::v1::EvalTask* t) { t->clear_data_path(); }},
      {"--data-path \"rel\" must be absolute",
       [](mt::v1::EvalTask* t) { t->set_data_path("rel"); }},
      {"--eval-iters 0: want an integer in [1, ",
       [](mt::v1::EvalTask* t) { t->set_eval_iters(0); }},
      {"not both",
       [](mt::v1::EvalTask* t) {
         t->set_all(true);
         t->set_eval_iters(3);
       }},
      {"--micro-batch-size -1", [](mt::v1::EvalTask* t) { t->set_micro_batch_size(-1); }},
      {"--context-length 33: want an integer in [2, 32]",
       [](mt::v1::EvalTask* t) { t->set_context_length(33); }},
      {"--quantize \"int4\": want none or int8",
       [](mt::v1::EvalTask* t) { t->set_quantize("int4"); }},
      {"--tensor-model-parallel-size -1: want an integer in [1, 1024]",
       [](mt::v1::EvalTask* t) { t->set_tensor_model_parallel_size(-1); }},
      {"--pipeline-model-parallel-size 1025: want an integer in [1, 1024]",
       [](mt::v1::EvalTask* t) { t->set_pipeline_model_parallel_size(1025); }},
      {"--data-parallel-size -2: want an integer in [1, 1024]",
       [](mt::v1::EvalTask* t) { t->set_data_parallel_size(-2); }},
      {"--quantize int8 evaluates on one rank",
       [](mt::v1::EvalTask* t) {
         t->set_quantize("int8");
         t->set_data_parallel_size(2);
       }},
  };
  for (const Case& c : cases) {
    mt::v1::EvalTask t;
    t.set_data_path("/data/corpus");
    EXPECT_TRUE(ValidateEvalTask(t, 32).ok());
    c.edit(&t);
    const absl::Status s = ValidateEvalTask(t, 32);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.want;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.want));
  }
}

TEST(InferenceSpecTest, GenerateTaskErrorsNameTheFlag) {
  struct Case {
    std::string want;
    void (*edit)(mt::v1::GenerateTask*);
  };
  const Case cases[] = {
      {"--prompt TEXT", [](mt::v1::GenerateTask* t) { t->clear_prompt(); }},
      {"--prompt: ",
       [](mt::v1::GenerateTask* t) { t->set_prompt(std::string(kMaxPromptBytes + 1, 'x')); }},
      {"--max-new-tokens 0", [](mt::v1::GenerateTask* t) { t->set_max_new_tokens(0); }},
      {"-n 65", [](mt::v1::GenerateTask* t) { t->set_num_samples(65); }},
      {"--temperature -1", [](mt::v1::GenerateTask* t) { t->set_temperature(-1); }},
      {"--top-k -3", [](mt::v1::GenerateTask* t) { t->set_top_k(-3); }},
      {"--top-p 0:", [](mt::v1::GenerateTask* t) { t->set_top_p(0); }},
      {"--top-p 1.5", [](mt::v1::GenerateTask* t) { t->set_top_p(1.5); }},
      {"--quantize \"INT8\": want none or int8",
       [](mt::v1::GenerateTask* t) { t->set_quantize("INT8"); }},
      {"--tensor-model-parallel-size -1: want an integer in [1, 1024]",
       [](mt::v1::GenerateTask* t) { t->set_tensor_model_parallel_size(-1); }},
      {"--tensor-model-parallel-size 1025: want an integer in [1, 1024]",
       [](mt::v1::GenerateTask* t) { t->set_tensor_model_parallel_size(1025); }},
      {"--quantize int8 generates on one rank: give --quantize none, or "
       "--tensor-model-parallel-size 1",
       [](mt::v1::GenerateTask* t) {
         t->set_quantize("int8");
         t->set_tensor_model_parallel_size(2);
       }},
      {"--quantize \"int4\": want none or int8",
       [](mt::v1::GenerateTask* t) {
         t->set_quantize("int4");
         t->set_tensor_model_parallel_size(2);
       }},
  };
  for (const Case& c : cases) {
    mt::v1::GenerateTask t;
    t.set_prompt("Call me Ishmael.");
    EXPECT_TRUE(ValidateGenerateTask(t).ok());
    c.edit(&t);
    const absl::Status s = ValidateGenerateTask(t);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.want;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.want));
  }
}

TEST(InferenceSpecTest, EvalJobRunsOneRankOnTheTasksDataAndSavesNothing) {
  mt::v1::InferenceSpec inference;
  inference.set_checkpoint_id("c-7");
  inference.mutable_eval()->set_data_path("/valid/corpus");
  inference.mutable_eval()->set_eval_iters(6);
  inference.mutable_eval()->set_quantize("int8");
  auto spec = InferenceJobSpec(TrainedManifest(), "/ckpt/iter_0000020", inference, "eval", 5,
                               mt::v1::DEVICE_KIND_CPU);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->name(), "eval");
  EXPECT_EQ(spec->priority(), 5);
  EXPECT_EQ(spec->parallel().tensor_model_parallel_size(), 1);
  EXPECT_EQ(spec->parallel().pipeline_model_parallel_size(), 1);
  EXPECT_EQ(spec->parallel().data_parallel_size(), 1);
  EXPECT_EQ(spec->parallel().world_size(), 1);
  EXPECT_EQ(spec->training().global_batch_size(), 2);
  EXPECT_EQ(spec->checkpoint().save_dir(), "");
  EXPECT_EQ(spec->checkpoint().load_dir(), "/ckpt/iter_0000020");
  EXPECT_EQ(spec->logging().tensorboard_dir(), "");
  EXPECT_EQ(spec->restart().max_restarts(), 0);
  EXPECT_EQ(spec->resources().device(), mt::v1::DEVICE_KIND_CPU);
  ASSERT_EQ(spec->data().data_path_size(), 1);
  EXPECT_EQ(spec->data().data_path(0).prefix(), "/valid/corpus");
  EXPECT_EQ(spec->data().split(), "969,30,1");
  EXPECT_EQ(spec->inference().checkpoint_id(), "c-7");
  EXPECT_EQ(spec->inference().checkpoint_dir(), "/ckpt/iter_0000020");
  EXPECT_EQ(spec->inference().checkpoint_job_id(), "j-4");
  EXPECT_THAT(ListInferenceProblems(*spec), ::testing::IsEmpty());
  // What the rank reads is what the coordinator confines: a data path or checkpoint that
  // differs from the spec's checked fields is refused.
  mt::v1::JobSpec forged = *spec;
  forged.mutable_inference()->mutable_eval()->set_data_path("/elsewhere");
  forged.mutable_inference()->set_checkpoint_dir("/other");
  forged.mutable_parallel()->set_world_size(2);
  forged.mutable_checkpoint()->set_save_dir("/save");
  EXPECT_THAT(ListInferenceProblems(forged),
              ElementsAre(HasSubstr("the parallel sizes must be the task's (TP 1, PP 1, DP 1"),
                          HasSubstr("saves nothing"), HasSubstr("inference.checkpoint_dir"),
                          HasSubstr("inference.eval.data_path")));

  EXPECT_THAT(
      EvalCommandArgs(*spec, {"--device", "cpu"}),
      ElementsAre("/ckpt/iter_0000020", "--data-path", "/valid/corpus", "--split", "969,30,1",
                  "--eval-iters", "6", "--quantize", "int8", "--device", "cpu", "-o", "json"));
}

TEST(InferenceSpecTest, EvalJobTakesTheTasksLayoutAndGenerationOneRank) {
  mt::v1::InferenceSpec inference;
  mt::v1::EvalTask* eval = inference.mutable_eval();
  eval->set_data_path("/valid/corpus");
  eval->set_tensor_model_parallel_size(2);
  eval->set_pipeline_model_parallel_size(2);
  eval->set_data_parallel_size(3);
  EXPECT_EQ(EvalWorldSize(*eval), 12);
  auto spec = InferenceJobSpec(TrainedManifest(), "/ckpt/iter_0000020", inference, "eval", 0,
                               mt::v1::DEVICE_KIND_CPU);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->parallel().tensor_model_parallel_size(), 2);
  EXPECT_EQ(spec->parallel().pipeline_model_parallel_size(), 2);
  EXPECT_EQ(spec->parallel().data_parallel_size(), 3);
  EXPECT_EQ(spec->parallel().context_parallel_size(), 1);
  EXPECT_EQ(spec->parallel().world_size(), 12);
  EXPECT_EQ(spec->training().global_batch_size(), 2 * 3);  // a micro-batch per DP rank
  EXPECT_THAT(ListInferenceProblems(*spec), ::testing::IsEmpty());
  // Another layout than the task's is refused: the placement must be the one checked.
  mt::v1::JobSpec forged = *spec;
  forged.mutable_parallel()->set_tensor_model_parallel_size(1);
  EXPECT_THAT(ListInferenceProblems(forged),
              ElementsAre(HasSubstr("the parallel sizes must be the task's (TP 2, PP 2, DP 3")));

  // The ranks split the checkpoint's padded vocabulary as it is: TP must divide it.
  mt::v1::CheckpointManifest padded = TrainedManifest();
  padded.mutable_model()->set_padded_vocab_size(50304);
  eval->set_tensor_model_parallel_size(5);
  auto refused =
      InferenceJobSpec(padded, "/ckpt/iter_0000020", inference, "eval", 0, mt::v1::DEVICE_KIND_CPU);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("--tensor-model-parallel-size 5: the checkpoint's vocabulary of 50304 rows "
                        "(padded) does not split evenly over 5 ranks"));
  eval->set_tensor_model_parallel_size(4);
  EXPECT_TRUE(
      InferenceJobSpec(padded, "/ckpt/iter_0000020", inference, "eval", 0, mt::v1::DEVICE_KIND_CPU)
          .ok());

  mt::v1::InferenceSpec generate;
  generate.mutable_generate()->set_prompt("Call me");
  auto one = InferenceJobSpec(TrainedManifest(), "/ckpt/iter_0000020", generate, "g", 0,
                              mt::v1::DEVICE_KIND_CPU);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->parallel().world_size(), 1);
  EXPECT_EQ(one->parallel().tensor_model_parallel_size(), 1);
  forged = *one;
  forged.mutable_parallel()->set_tensor_model_parallel_size(2);
  forged.mutable_parallel()->set_world_size(2);
  EXPECT_THAT(ListInferenceProblems(forged),
              ElementsAre(HasSubstr("the parallel sizes must be the task's (TP 1, PP 1, DP 1; a "
                                    "generation job's PP and DP are 1)")));
}

TEST(InferenceSpecTest, GenerationJobTakesTheTasksTensorParallelSize) {
  mt::v1::CheckpointManifest manifest = TrainedManifest();
  manifest.mutable_model()->set_num_attention_heads(4);
  manifest.mutable_model()->set_padded_vocab_size(50304);
  mt::v1::InferenceSpec inference;
  mt::v1::GenerateTask* g = inference.mutable_generate();
  g->set_prompt("Call me");
  g->set_tensor_model_parallel_size(2);
  // The task's TP size alone: a generation job has no PP or DP.
  const mt::v1::ParallelSpec layout = InferenceLayout(inference);
  EXPECT_EQ(layout.tensor_model_parallel_size(), 2);
  EXPECT_EQ(layout.pipeline_model_parallel_size(), 1);
  EXPECT_EQ(layout.data_parallel_size(), 1);
  EXPECT_EQ(layout.context_parallel_size(), 1);
  EXPECT_EQ(layout.world_size(), 2);

  auto spec = InferenceJobSpec(manifest, "/ckpt/iter_0000020", inference, "generate", 0,
                               mt::v1::DEVICE_KIND_CPU);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->parallel().tensor_model_parallel_size(), 2);
  EXPECT_EQ(spec->parallel().pipeline_model_parallel_size(), 1);  // the checkpoint's was 2
  EXPECT_EQ(spec->parallel().data_parallel_size(), 1);
  EXPECT_EQ(spec->parallel().world_size(), 2);
  EXPECT_EQ(spec->inference().generate().tensor_model_parallel_size(), 2);
  EXPECT_THAT(ListInferenceProblems(*spec), ::testing::IsEmpty());
  // The rank's command is the local one's: no TP flag (the rank takes its place from its
  // process groups).
  EXPECT_THAT(
      GenerateCommandArgs(*spec, {"--device", "cpu"}),
      ElementsAre("/ckpt/iter_0000020", "--prompt=Call me", "--device", "cpu", "-o", "json"));
  // Another layout than the task's is refused, PP and DP included.
  mt::v1::JobSpec forged = *spec;
  forged.mutable_parallel()->set_tensor_model_parallel_size(1);
  forged.mutable_parallel()->set_world_size(1);
  EXPECT_THAT(ListInferenceProblems(forged),
              ElementsAre(HasSubstr("the parallel sizes must be the task's (TP 2, PP 1, DP 1")));
  forged = *spec;
  forged.mutable_parallel()->set_data_parallel_size(2);
  forged.mutable_parallel()->set_world_size(4);
  EXPECT_THAT(ListInferenceProblems(forged),
              ElementsAre(HasSubstr("the parallel sizes must be the task's (TP 2, PP 1, DP 1")));
  // A forged task is checked as the API checks it.
  forged = *spec;
  forged.mutable_inference()->mutable_generate()->set_quantize("int8");
  EXPECT_THAT(ListInferenceProblems(forged),
              ElementsAre(HasSubstr("--quantize int8 generates on one rank")));

  // The ranks split the heads and the padded vocabulary as the checkpoint has them.
  g->set_tensor_model_parallel_size(3);  // divides 50304, not 4 heads
  auto refused = InferenceJobSpec(manifest, "/ckpt/iter_0000020", inference, "generate", 0,
                                  mt::v1::DEVICE_KIND_CPU);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_EQ(refused.status().message(),
            "--tensor-model-parallel-size 3: the checkpoint's 4 attention heads do not split "
            "evenly over 3 ranks; give a divisor of 4");
  manifest.mutable_model()->set_num_attention_heads(6);
  manifest.mutable_model()->set_padded_vocab_size(50260);  // 4 x 12565; not a multiple of 3
  refused = InferenceJobSpec(manifest, "/ckpt/iter_0000020", inference, "generate", 0,
                             mt::v1::DEVICE_KIND_CPU);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("--tensor-model-parallel-size 3: the checkpoint's vocabulary of 50260 "
                        "rows (padded) does not split evenly over 3 ranks"));
  g->set_tensor_model_parallel_size(2);
  EXPECT_TRUE(InferenceJobSpec(manifest, "/ckpt/iter_0000020", inference, "generate", 0,
                               mt::v1::DEVICE_KIND_CPU)
                  .ok());
  // Without heads in the manifest, the training spec's.
  manifest.mutable_model()->clear_num_attention_heads();
  manifest.mutable_spec()->mutable_model()->set_num_attention_heads(3);
  refused = InferenceJobSpec(manifest, "/ckpt/iter_0000020", inference, "generate", 0,
                             mt::v1::DEVICE_KIND_CPU);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("--tensor-model-parallel-size 2: the checkpoint's 3 attention heads"));
  // int8 past one rank never reaches the layout.
  g->set_quantize("int8");
  refused = InferenceJobSpec(TrainedManifest(), "/ckpt/iter_0000020", inference, "generate", 0,
                             mt::v1::DEVICE_KIND_CPU);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("--quantize int8 generates on one rank"));
}

TEST(InferenceSpecTest, GenerateArgsCarryEveryFlagGiven) {
  mt::v1::InferenceSpec inference;
  mt::v1::GenerateTask* g = inference.mutable_generate();
  g->set_prompt("-dash first");
  g->set_temperature(0);
  g->set_top_p(0.9);
  g->set_num_samples(2);
  g->set_stop("\n\n");
  g->set_quantize("none");  // the default: no flag
  auto spec = InferenceJobSpec(TrainedManifest(), "/ckpt/iter_0000020", inference, "generate", 0,
                               mt::v1::DEVICE_KIND_AUTO);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_THAT(
      GenerateCommandArgs(*spec, {}),
      ElementsAre("/ckpt/iter_0000020", "--prompt=-dash first", "--temperature", "0", "--top-p",
                  "0.90000000000000002", "--stop=\n\n", "-n", "2", "-o", "json"));
}

// A prompt is text, not a name: shell syntax and newlines are fine there (and only there).
TEST(InferenceSpecTest, PromptAndStopAreFreeText) {
  mt::v1::InferenceSpec inference;
  inference.mutable_generate()->set_prompt("a; b | c > d $(e)\n`f`");
  inference.mutable_generate()->set_stop("\n;");
  auto spec = InferenceJobSpec(TrainedManifest(), "/ckpt/iter_0000020", inference, "generate", 0,
                               mt::v1::DEVICE_KIND_AUTO);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  for (const std::string& problem : ListSpecProblems(*spec)) {
    EXPECT_THAT(problem, ::testing::Not(HasSubstr("inference.generate"))) << problem;
  }
  spec->set_name("bad;name");
  EXPECT_THAT(ListSpecProblems(*spec), ::testing::Contains(HasSubstr("name")));
}

TEST(InferenceSpecTest, ACheckpointWithoutASpecIsRefused) {
  mt::v1::CheckpointManifest m;
  mt::v1::InferenceSpec inference;
  inference.mutable_generate()->set_prompt("a");
  auto spec = InferenceJobSpec(m, "/hf", inference, "generate", 0, mt::v1::DEVICE_KIND_AUTO);
  EXPECT_TRUE(absl::IsFailedPrecondition(spec.status()));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("mt-worker eval|generate"));
}

}  // namespace
}  // namespace mt::spec
