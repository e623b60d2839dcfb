#include "worker/train/train_command.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/checkpoint/checkpoint_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"
#include "worker/kernels/gemm_tuning.h"
#include "worker/metrics/event_file.h"

namespace mt::train {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string WriteSpec(const std::string& name, const std::string& yaml) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << yaml;
  return path;
}

constexpr char kTinyYaml[] = R"(name: tiny
model:
  num_layers: 2
  hidden_size: 32
  num_attention_heads: 4
  seq_length: 16
  vocab_size: 128
training:
  micro_batch_size: 2
  global_batch_size: 4
  train_iters: 50
  lr: 1.0e-3
  lr_warmup_iters: 1
  lr_decay_style: cosine
evaluation:
  eval_interval: 2
  eval_iters: 1
logging:
  log_interval: 1
)";

TEST(TrainCommandTest, TrainsOnSyntheticData) {
  const std::string spec = WriteSpec("tiny.yaml", kTinyYaml);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int rc =
      RunTrainCommand({"--spec", spec, "--synthetic-data", "--train-iters=3", "--device", "cpu"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 0) << err;
  EXPECT_THAT(out, HasSubstr("iterations=3 loss="));
  EXPECT_THAT(out, HasSubstr("valid_loss="));
  EXPECT_THAT(err, HasSubstr("step 3/3 | loss"));
  EXPECT_THAT(err, HasSubstr("validation at step 2"));
}

TEST(TrainCommandTest, TensorBoardDirGetsMegatronsScalars) {
  const std::string spec = WriteSpec("tiny_tb.yaml", kTinyYaml);
  const std::string dir = testutil::MakeTempDir("train_command_tb");
  ASSERT_FALSE(dir.empty());  // a fresh directory: one run's file only
  ::testing::internal::CaptureStderr();
  const int rc = RunTrainCommand(
      {"--spec", spec, "--synthetic-data", "--train-iters=3", "--tensorboard-dir", dir});
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(rc, 0) << err;
  const std::vector<std::string> files = worker::metrics::ListEventFiles(dir);
  ASSERT_EQ(files.size(), 1u);
  auto events = worker::metrics::ReadEventFile(files[0]);
  ASSERT_TRUE(events.ok()) << events.status();
  std::vector<int64_t> loss_steps;
  int validation = 0;
  for (const auto& e : *events) {
    for (const auto& v : e.summary().value()) {
      if (v.tag() == "lm loss") loss_steps.push_back(e.step());
      validation += v.tag() == "lm loss validation";
    }
  }
  EXPECT_THAT(loss_steps, ::testing::ElementsAre(1, 2, 3));
  EXPECT_EQ(validation, 2);  // after step 2 and after the last
}

// The summary's value of `key` ("loss=2.345678 ..." -> "2.345678"); empty when absent.
std::string Field(const std::string& summary, const std::string& key) {
  const std::string needle = key + "=";
  size_t at = summary.rfind(needle, 0) == 0 ? 0 : summary.find(" " + needle);
  if (at == std::string::npos) return "";
  at = summary.find('=', at) + 1;
  return summary.substr(at, summary.find_first_of(" \n", at) - at);
}

struct RunResult {
  int rc;
  std::string out;
  std::string err;
};

RunResult RunCapturing(const std::vector<std::string>& args) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  RunResult r;
  r.rc = RunTrainCommand(args);
  r.out = ::testing::internal::GetCapturedStdout();
  r.err = ::testing::internal::GetCapturedStderr();
  return r;
}

// --save every 4 steps; a second run --load-ing the step-4 checkpoint ends with the first
// run's loss (printed to 6 decimals: equal, as fp32 on the CPU resumes bit for bit); --load and
// --save the same directory continue a run where it stopped.
TEST(TrainCommandTest, SavesLoadsAndResumesCheckpoints) {
  const std::string spec = WriteSpec("tiny-ckpt.yaml", kTinyYaml);
  const std::string a = ::testing::TempDir() + "/train-ckpt-a";
  const std::string b = ::testing::TempDir() + "/train-ckpt-b";
  for (const std::string& dir : {a, b}) {
    ASSERT_EQ(std::system(("rm -rf " + dir).c_str()), 0);
  }
  const std::vector<std::string> common = {"--spec", spec, "--synthetic-data", "--device", "cpu"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const RunResult straight =
      RunCapturing(with({"--train-iters=8", "--save", a, "--save-interval=4"}));
  ASSERT_EQ(straight.rc, 0) << straight.err;
  EXPECT_EQ(Field(straight.out, "checkpoints"), "2");
  EXPECT_EQ(checkpoint::ListCheckpointSteps(a), (std::vector<int64_t>{4, 8}));
  EXPECT_THAT(straight.err, HasSubstr("saved " + a + "/iter_0000004 ("));

  const RunResult resumed =
      RunCapturing(with({"--train-iters=8", "--load", a + "/iter_0000004", "--save", b}));
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr("(step 4)"));
  EXPECT_THAT(resumed.err, ::testing::Not(HasSubstr("step 1/8")));  // steps 5..8 only
  EXPECT_EQ(Field(resumed.out, "iterations"), "8");
  EXPECT_FALSE(Field(straight.out, "loss").empty());
  EXPECT_EQ(Field(resumed.out, "loss"), Field(straight.out, "loss"));
  EXPECT_EQ(checkpoint::ListCheckpointSteps(b), (std::vector<int64_t>{8}));  // the end's

  // Megatron's --load = --save: a longer run picks up at step 8.
  const RunResult more =
      RunCapturing(with({"--train-iters=12", "--load", a, "--save", a, "--save-interval=4"}));
  ASSERT_EQ(more.rc, 0) << more.err;
  EXPECT_THAT(more.err, HasSubstr("loading " + a + "/iter_0000008 (step 8)"));
  EXPECT_EQ(Field(more.out, "iterations"), "12");
  EXPECT_EQ(checkpoint::ListCheckpointSteps(a), (std::vector<int64_t>{4, 8, 12}));

  // An empty --load directory: from scratch.
  const RunResult fresh = RunCapturing(with({"--train-iters=2", "--load", b + "-none"}));
  EXPECT_EQ(fresh.rc, 0) << fresh.err;
  EXPECT_THAT(fresh.err, HasSubstr("training from scratch"));
}

TEST(TrainCommandTest, UsageAndSpecErrorsExitWithTwo) {
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunTrainCommand({}), 2);
  EXPECT_EQ(RunTrainCommand({"--spec"}), 2);
  EXPECT_EQ(RunTrainCommand({"--spec", "x.yaml", "--bogus"}), 2);
  EXPECT_EQ(RunTrainCommand({"--spec", "x.yaml", "--train-iters", "zero"}), 2);
  EXPECT_EQ(RunTrainCommand({"--spec", "x.yaml", "--save-interval", "-1"}), 2);
  EXPECT_EQ(RunTrainCommand({"--spec", ::testing::TempDir() + "/missing.yaml"}), 2);
  const std::string bad = WriteSpec("bad.yaml", "model: {num_layers: 2, hidden_sise: 3}\n");
  EXPECT_EQ(RunTrainCommand({"--spec", bad, "--synthetic-data"}), 2);
  // No data section and no --synthetic-data: a spec (or data-setup) error.
  const std::string spec = WriteSpec("tiny2.yaml", kTinyYaml);
  EXPECT_EQ(RunTrainCommand({"--spec", spec}), 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("--spec is required"));
  EXPECT_THAT(err, HasSubstr("unknown argument \"--bogus\""));
  EXPECT_THAT(err, HasSubstr("hidden_sise"));
  EXPECT_THAT(err, HasSubstr("--save-interval \"-1\": want an integer >= 0"));
}

// Two synthetic steps of `spec` with `extra` switches, expected to succeed; returns the stderr.
std::string TrainTwoSteps(const std::string& spec, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--spec", spec, "--synthetic-data", "--train-iters=2"};
  args.insert(args.end(), extra.begin(), extra.end());
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int rc = RunTrainCommand(args);
  ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 0) << err;
  return err;
}

// --mlp-gelu reaches the model (kAuto unless given; the description names any other), and a
// value that is not auto, epilogue or kernel is a usage error that names the field.
TEST(TrainCommandTest, MlpGeluReachesTheModel) {
  const std::string spec = WriteSpec("tiny3g.yaml", kTinyYaml);
  auto run = [&](const std::vector<std::string>& extra) { return TrainTwoSteps(spec, extra); };
  EXPECT_THAT(run({}), AllOf(HasSubstr(" mlp=fused"), Not(HasSubstr("mlp_gelu="))));
  EXPECT_THAT(run({"--mlp-gelu", "kernel"}), HasSubstr(" mlp=fused mlp_gelu=kernel"));
  EXPECT_THAT(run({"--mlp-gelu=epilogue"}), HasSubstr(" mlp=fused mlp_gelu=epilogue"));
  EXPECT_THAT(run({"--mlp-gelu", "auto"}), Not(HasSubstr("mlp_gelu=")));
  ::testing::internal::CaptureStderr();
  const int rc = RunTrainCommand(
      {"--spec", spec, "--synthetic-data", "--train-iters=2", "--mlp-gelu", "tanh"});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(rc, 0);
  EXPECT_THAT(err, HasSubstr("mlp_gelu \"tanh\" is not auto, epilogue or kernel"));
}

// The fused paths are on by default (the QKV gather off until measured on the GPU); each has a
// --no- and a -- switch; the model says what it runs.
TEST(TrainCommandTest, FusedSwitchesReachTheModel) {
  const std::string spec = WriteSpec("tiny3.yaml", kTinyYaml);
  auto run = [&](const std::vector<std::string>& extra) { return TrainTwoSteps(spec, extra); };
  const std::string defaults = run({});
  EXPECT_THAT(defaults, HasSubstr(" lm_head=fused mlp=fused layernorm=fused qkv=fused"));
  EXPECT_THAT(run({"--no-fused-qkv"}),
              AllOf(HasSubstr(" layernorm=fused"), Not(HasSubstr("qkv=fused"))));
  const std::string off =
      run({"--no-fused-mlp", "--no-fused-lm-head", "--no-fused-layernorm", "--no-fused-qkv"});
  EXPECT_THAT(off, Not(HasSubstr("lm_head=fused")));
  EXPECT_THAT(off, Not(HasSubstr("mlp=fused")));
  EXPECT_THAT(off, Not(HasSubstr("layernorm=fused")));
  EXPECT_THAT(off, Not(HasSubstr("qkv=fused")));
  EXPECT_THAT(run({"--no-fused-qkv", "--fused-qkv"}), HasSubstr(" qkv=fused"));
  EXPECT_THAT(defaults, HasSubstr(" embedding=fused"));
  EXPECT_THAT(run({"--no-fused-embedding"}),
              AllOf(HasSubstr(" qkv=fused"), Not(HasSubstr("embedding=fused"))));
  // The CUDA graph is on by default and reaches the trainer, which runs the CPU's step eagerly
  // and says why; --no-cuda-graph turns it off.
  const std::string no_gpu = "the step runs eagerly, not as a CUDA graph: the device is not a GPU";
  EXPECT_THAT(defaults, HasSubstr(no_gpu));
  EXPECT_THAT(run({"--no-cuda-graph", "--cuda-graph"}), HasSubstr(no_gpu));
  EXPECT_THAT(run({"--cuda-graph", "--no-cuda-graph"}),
              AllOf(HasSubstr("the step runs eagerly, not as a CUDA graph: turned off "
                              "(--no-cuda-graph)"),
                    Not(HasSubstr(no_gpu))));
  EXPECT_THAT(run({"--no-fused-layernorm", "--fused-layernorm"}), HasSubstr(" layernorm=fused"));
  // --[no-]overlap-optimizer is taken; the overlap needs CUDA, so on the CPU the update stays in
  // the step and the line that says otherwise is absent (TrainerGpuTest checks it applies).
  EXPECT_THAT(run({"--no-overlap-optimizer", "--overlap-optimizer"}),
              Not(HasSubstr("overlapping the next forward")));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunTrainCommand({"--spec", spec, "--overlap-optimizer=0"}), 2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("--overlap-optimizer takes no value"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunTrainCommand({"--spec", spec, "--fused-mlp=1"}), 2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("--fused-mlp takes no value"));
}

// --no-gemm-tuning reaches the process's setting (kernels::SetGemmTuning), which the trainer
// applies; without it the tuning is on.
TEST(TrainCommandTest, GemmTuningSwitchReachesTheKernels) {
  const std::string spec = WriteSpec("tiny4.yaml", kTinyYaml);
  auto run = [&](const std::vector<std::string>& extra) {
    TrainTwoSteps(spec, extra);
    return kernels::GemmTuning();
  };
  EXPECT_FALSE(run({"--no-gemm-tuning"}));
  EXPECT_TRUE(run({}));
  EXPECT_FALSE(run({"--gemm-tuning", "--no-gemm-tuning"}));
  EXPECT_TRUE(run({"--no-gemm-tuning", "--gemm-tuning"}));
}

// --gemm-workspace reaches the process's setting (kernels::SetGemmWorkspace), which the trainer
// applies; without it the GEMMs run without a workspace.
TEST(TrainCommandTest, GemmWorkspaceSwitchReachesTheKernels) {
  const std::string spec = WriteSpec("tiny4w.yaml", kTinyYaml);
  auto run = [&](const std::vector<std::string>& extra) {
    TrainTwoSteps(spec, extra);
    return kernels::GemmWorkspace();
  };
  EXPECT_TRUE(run({"--gemm-workspace"}));
  EXPECT_FALSE(run({}));
  EXPECT_TRUE(run({"--no-gemm-workspace", "--gemm-workspace"}));
  EXPECT_FALSE(run({"--gemm-workspace", "--no-gemm-workspace"}));
}

// --gemm-tune-candidates reaches the process's setting (kernels::SetGemmTuneCandidates);
// without it the default applies; a value outside 1 to 64 is a usage error naming the flag and
// the range, and leaves the setting as it was.
TEST(TrainCommandTest, GemmTuneCandidatesReachTheKernels) {
  const std::string spec = WriteSpec("tiny5.yaml", kTinyYaml);
  auto run = [&](const std::vector<std::string>& extra) {
    TrainTwoSteps(spec, extra);
    return kernels::GemmTuneCandidates();
  };
  EXPECT_EQ(run({"--gemm-tune-candidates", "32"}), 32);
  EXPECT_EQ(run({}), kernels::kDefaultGemmTuneCandidates);
  EXPECT_EQ(run({"--gemm-tune-candidates=1"}), 1);
  EXPECT_EQ(run({"--gemm-tune-candidates", "64"}), 64);
  for (const char* bad : {"0", "65", "-3", "many"}) {
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(RunTrainCommand({"--spec", spec, "--gemm-tune-candidates", bad}), 2) << bad;
    EXPECT_THAT(::testing::internal::GetCapturedStderr(),
                HasSubstr(std::string("--gemm-tune-candidates \"") + bad +
                          "\": want an integer from 1 to 64"));
    EXPECT_EQ(kernels::GemmTuneCandidates(), 64) << bad;
  }
  kernels::SetGemmTuneCandidates(kernels::kDefaultGemmTuneCandidates);
}

TEST(TrainCommandTest, Help) {
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(RunTrainCommand({"--help"}), 0);
  EXPECT_THAT(::testing::internal::GetCapturedStdout(), HasSubstr("usage: mt-worker train"));
}

}  // namespace
}  // namespace mt::train
