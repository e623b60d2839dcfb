// Our Hugging Face GPT-2 export against transformers itself (label gpu: the GPU machine has
// transformers and torch for its python3; elsewhere the test skips). A tiny GPT (2 layers,
// hidden 64, 4 heads, 32 positions, vocabulary 1000 padded to 1024) trains 5 steps on the CPU
// in fp32 (so that biases and LayerNorms leave their initial values), is saved through the
// Checkpointer and exported with ExportHfGpt2 (what `mtctl checkpoints export --format hf`
// runs); our logits on a fixed input go to expected.safetensors (our safetensors writer), and
// tests/gpu/hf_logits_check.py loads the export with transformers' GPT2LMHeadModel and
// compares its logits with ours: max |theirs - ours| <= 5e-5 * max |ours| (fp32 on the CPU on
// both sides; the kernels differ -- their Conv1D addmm, their attention -- so a few ulps per
// layer, ~1e-6 relative, are expected; 5e-5 leaves a margin yet catches any mapping error, a
// transposed or mispermuted weight changing the logits by O(1)). Tied and untied output layer.
//
// The lead runs it on the GPU machine (tests/gpu/run.sh runs every gpu test):
//   ctest --test-dir BUILD -R HfExport --output-on-failure
// python3 is $MT_PYTHON (default python3), run with $MT_PEER_LD_LIBRARY_PATH as its library
// path when set (tests/gpu/run.sh sets both, as for tensorboard_check).
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/paths.h"
#include "common/base/status_matchers.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/hf_gpt2.h"
#include "common/checkpoint/reshard.h"
#include "common/checkpoint/safetensors.h"
#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/subprocess.h"
#include "tests/testutil/tiny_spec.h"
#include "worker/checkpoint/checkpointer.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/trainer.h"
#include "worker/model/gpt.h"

namespace mt::checkpoint {
namespace {

constexpr int64_t kSeq = 32;
constexpr int64_t kVocab = 1000;
constexpr double kTolerance = 5e-5;  // of the largest |logit| (file comment)

mt::v1::JobSpec Spec(bool untied) {
  testutil::TinySpecOptions o;
  o.hidden_size = 64;
  o.seq_length = kSeq;
  o.vocab_size = kVocab;
  o.train_iters = 5;
  o.lr = 1e-2;
  o.seed = 4321;
  o.zero_dropout = true;
  o.constant_lr = true;
  mt::v1::JobSpec spec = testutil::TinyGptSpec(o);
  spec.mutable_model()->set_max_position_embeddings(kSeq);
  spec.mutable_model()->set_untie_embeddings_and_output_weights(untied);
  spec.mutable_evaluation()->set_eval_interval(0);
  spec.mutable_logging()->set_log_interval(100);
  return spec;
}

// Runs `command` through /bin/sh; returns its exit status (-1 when it did not exit) and
// appends what it printed (stdout and stderr) to `output`.
int Shell(const std::string& command, std::string* output) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) output->append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class HfExportTest : public ::testing::TestWithParam<bool> {};

TEST_P(HfExportTest, TransformersGivesOurLogits) {
  const bool untied = GetParam();
  const char* python_env = std::getenv("MT_PYTHON");
  const std::string python = python_env != nullptr && python_env[0] ? python_env : "python3";
  const char* peer_env = std::getenv("MT_PEER_LD_LIBRARY_PATH");
  // python3 with the machine's own library path (the build's may shadow torch's libraries).
  const std::string py = absl::StrCat(
      peer_env != nullptr ? absl::StrCat("LD_LIBRARY_PATH=", Quote(peer_env), " ") : "",
      Quote(python));
  {
    std::string out;
    if (Shell(py + " -c 'import torch, transformers, safetensors'", &out) != 0) {
      GTEST_SKIP() << python << " cannot import torch, transformers and safetensors: " << out;
    }
  }

  // 1. Train and save.
  const mt::v1::JobSpec spec = Spec(untied);
  engine::TrainerOptions o;
  o.log_progress = false;
  o.attention_backend = "math";
  auto source = engine::TokenSequenceSource::Create(engine::SyntheticTokens(4096, kVocab, 3), kSeq);
  ASSERT_TRUE(source.ok()) << source.status();
  MT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<engine::Trainer> trainer,
                          engine::Trainer::Create(spec, o, std::move(*source), nullptr));
  MT_ASSERT_OK(trainer->Train());
  ASSERT_EQ(trainer->iteration(), 5);
  const std::string dir = testutil::MakeTempDir("hf_export");
  LocalExchange exchange;
  CheckpointerOptions co;
  co.save_dir = JoinPath(dir, "ckpt");
  co.job_id = "j-hf";
  co.spec = spec;
  co.layout.set_world_size(1);
  co.layout.set_tensor_model_parallel_size(1);
  co.layout.set_pipeline_model_parallel_size(1);
  co.layout.set_data_parallel_size(1);
  MT_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Create(co, &exchange));
  MT_ASSERT_OK(ckpt->Save(*trainer, 0.0, 0.0));

  // 2. Export, as `mtctl checkpoints export --format hf` does.
  MT_ASSERT_OK_AND_ASSIGN(LoadChoice choice, ChooseCheckpoint(co.save_dir));
  MT_ASSERT_OK_AND_ASSIGN(auto tensors, OpenAnySource(choice.dir));
  const std::string hf_dir = JoinPath(dir, "hf");
  MT_ASSERT_OK(ExportHfGpt2(*tensors, hf_dir, DType::kF32).status());

  // 3. Our logits on a fixed input (real vocabulary only: the export drops the padding).
  const std::vector<int64_t> ids = engine::SyntheticTokens(2 * kSeq, kVocab, 17);
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    model::GptModel& m = trainer->model();
    m.eval();
    const torch::Tensor input = torch::tensor(ids, torch::kLong).view({2, kSeq});
    logits = m.forward(input).narrow(-1, 0, kVocab).to(torch::kFloat).contiguous();
  }
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{2, kSeq, kVocab}));
  const std::string expected = JoinPath(dir, "expected.safetensors");
  std::vector<TensorView> views(2);
  views[0] = {"input_ids", DType::kI64, {2, kSeq}, ids.data(), ids.size() * sizeof(int64_t)};
  views[1] = {"logits", DType::kF32, logits.sizes().vec(), logits.data_ptr(),
              static_cast<size_t>(logits.nbytes())};
  MT_ASSERT_OK(WriteSafetensors(expected, views, {{"format", "pt"}}).status());

  // 4. transformers' logits on the same input.
  std::string out;
  const int rc = Shell(
      absl::StrCat(py, " ", Quote(std::string(MT_SOURCE_DIR) + "/tests/gpu/hf_logits_check.py"),
                   " --hf-dir ", Quote(hf_dir), " --expected ", Quote(expected), " --tolerance ",
                   kTolerance),
      &out);
  std::cout << out;  // the differences, for the log
  if (rc == 77) GTEST_SKIP() << out;
  EXPECT_EQ(rc, 0) << out;
}

INSTANTIATE_TEST_SUITE_P(OutputLayer, HfExportTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("untied") : std::string("tied");
                         });

}  // namespace
}  // namespace mt::checkpoint
