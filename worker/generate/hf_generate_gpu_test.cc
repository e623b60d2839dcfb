// Greedy decoding against transformers on our Hugging Face export (label gpu: the GPU
// machine's python3 has torch and transformers; elsewhere the python half skips). A tiny GPT
// with GPT-2's vocabulary (2 layers, hidden 64, 32 positions) trains 5 steps on the CPU in fp32,
// is saved and exported with ExportHfGpt2, tokenizer files included (the job names GPT-2's BPE
// files from MT_ASSET_DIR). Then:
//   1. here: the export loaded back as an inference model (LoadInferenceModel on the HF
//      directory) decodes greedily to exactly the tokens the trained model gives;
//   2. tests/gpu/hf_generate_check.py: transformers' GPT2LMHeadModel.generate (greedy, fp32,
//      CPU) gives the same tokens, and pipeline("text-generation", model=DIR) -- with no file
//      but the export's -- continues the prompt text with their text.
// The lead runs it on the GPU machine: ctest --test-dir BUILD -R HfGenerate --output-on-failure
#include <stdio.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/paths.h"
#include "common/base/status_matchers.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/hf_gpt2.h"
#include "common/checkpoint/reshard.h"
#include "common/tokenizer/gpt2_bpe_tokenizer.h"
#include "gtest/gtest.h"
#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/subprocess.h"
#include "tests/testutil/tiny_spec.h"
#include "worker/checkpoint/checkpointer.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/trainer.h"
#include "worker/generate/generator.h"
#include "worker/generate/inference_model.h"
#include "worker/model/gpt.h"

namespace mt::generate {
namespace {

constexpr int64_t kSeq = 32;
constexpr int64_t kVocab = 50257;
constexpr int64_t kNew = 12;
constexpr char kPrompt[] = "Call me Ishmael. Some years ago";

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

mt::v1::JobSpec Spec(const std::string& assets) {
  testutil::TinySpecOptions o;
  o.hidden_size = 64;
  o.seq_length = kSeq;
  o.vocab_size = kVocab;
  o.train_iters = 5;
  o.lr = 1e-2;
  o.zero_dropout = true;
  o.constant_lr = true;
  mt::v1::JobSpec spec = testutil::TinyGptSpec(o);
  // Spread logits: greedy choices far from ties between two implementations.
  spec.mutable_model()->set_init_method_std(0.3);
  spec.mutable_data()->mutable_tokenizer()->set_vocab_file(assets + "/gpt2-vocab.json");
  spec.mutable_data()->mutable_tokenizer()->set_merge_file(assets + "/gpt2-merges.txt");
  spec.mutable_evaluation()->set_eval_interval(0);
  spec.mutable_logging()->set_log_interval(100);
  return spec;
}

std::vector<int32_t> Greedy(model::GptModel& m, const std::vector<int32_t>& prompt) {
  GenerateOptions o;
  o.max_new_tokens = kNew;
  o.sampling.temperature = 0.0;
  auto r = Generate(m, prompt, o, [](absl::Span<const int32_t>) { return std::string(); });
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->samples[0].tokens : std::vector<int32_t>{};
}

TEST(HfGenerateTest, TransformersGreedyAndPipelineAgreeWithOurs) {
  const char* env = std::getenv("MT_ASSET_DIR");
  const std::string assets = env != nullptr ? env : MT_ASSET_DIR;
  auto tokenizer =
      tokenizer::Gpt2BpeTokenizer::Create(assets + "/gpt2-vocab.json", assets + "/gpt2-merges.txt");
  if (!tokenizer.ok()) GTEST_SKIP() << "no GPT-2 BPE files: " << tokenizer.status();
  const mt::v1::JobSpec spec = Spec(assets);
  engine::TrainerOptions to;
  to.log_progress = false;
  to.attention_backend = "math";
  auto data = engine::TokenSequenceSource::Create(engine::SyntheticTokens(4096, kVocab, 3), kSeq);
  ASSERT_TRUE(data.ok());
  MT_ASSERT_OK_AND_ASSIGN(auto trainer,
                          engine::Trainer::Create(spec, to, std::move(*data), nullptr));
  MT_ASSERT_OK(trainer->Train());
  const std::string dir = testutil::MakeTempDir("hf_generate");
  checkpoint::LocalExchange exchange;
  checkpoint::CheckpointerOptions co;
  co.save_dir = JoinPath(dir, "ckpt");
  co.job_id = "j-hfgen";
  co.spec = spec;
  MT_ASSERT_OK_AND_ASSIGN(auto ckpt, checkpoint::Checkpointer::Create(co, &exchange));
  MT_ASSERT_OK(ckpt->Save(*trainer, 0.0, 0.0));
  MT_ASSERT_OK_AND_ASSIGN(checkpoint::LoadChoice choice, checkpoint::ChooseCheckpoint(co.save_dir));
  MT_ASSERT_OK_AND_ASSIGN(auto tensors, checkpoint::OpenAnySource(choice.dir));
  const std::string hf = JoinPath(dir, "hf");
  MT_ASSERT_OK(checkpoint::ExportHfGpt2(*tensors, hf, checkpoint::DType::kF32).status());
  ASSERT_TRUE(PathExists(hf + "/vocab.json") && PathExists(hf + "/tokenizer_config.json"));

  // 1. The export, loaded back, decodes as the trained model does.
  const std::vector<int32_t> prompt = (*tokenizer)->Encode(kPrompt);
  const std::vector<int32_t> ours = Greedy(trainer->model(), prompt);
  ASSERT_EQ(ours.size(), static_cast<size_t>(kNew));
  InferenceModelOptions io;
  io.attention = "math";
  MT_ASSERT_OK_AND_ASSIGN(InferenceModel from_hf, LoadInferenceModel(hf, io));
  EXPECT_EQ(Greedy(*from_hf.model, prompt), ours);

  // 2. transformers on the export.
  const std::string expected = JoinPath(dir, "expected.json");
  std::ofstream(expected) << "{\"prompt_text\": \"" << kPrompt << "\", \"prompt\": ["
                          << absl::StrJoin(prompt, ", ") << "], \"generated\": ["
                          << absl::StrJoin(ours, ", ") << "]}\n";
  const char* python_env = std::getenv("MT_PYTHON");
  const std::string python = python_env != nullptr && python_env[0] ? python_env : "python3";
  const char* peer = std::getenv("MT_PEER_LD_LIBRARY_PATH");
  const std::string py = absl::StrCat(
      peer != nullptr ? absl::StrCat("LD_LIBRARY_PATH=", Quote(peer), " ") : "", Quote(python));
  std::string out;
  const int rc = Shell(
      absl::StrCat(py, " ", Quote(std::string(MT_SOURCE_DIR) + "/tests/gpu/hf_generate_check.py"),
                   " --hf-dir ", Quote(hf), " --expected ", Quote(expected)),
      &out);
  std::cout << out;
  if (rc == 77) GTEST_SKIP() << out;
  EXPECT_EQ(rc, 0) << out;
}

}  // namespace
}  // namespace mt::generate
