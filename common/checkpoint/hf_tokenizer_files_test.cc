// The tokenizer and generation files of a Hugging Face export, from the real GPT-2 BPE files
// (MT_ASSET_DIR, fetched by deploy/setup.sh): copied byte for byte, configs that name them, and
// refusals of files that are not a vocabulary of the model's size.
#include "common/checkpoint/hf_tokenizer_files.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/base/files.h"
#include "common/base/paths.h"
#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::checkpoint {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

std::string AssetDir() {
  const char* env = std::getenv("MT_ASSET_DIR");
  return env != nullptr ? env : MT_ASSET_DIR;
}

mt::v1::ManifestModel Gpt2Model() {
  mt::v1::ManifestModel m;
  m.set_vocab_size(50257);
  m.set_max_position_embeddings(1024);
  return m;
}

class HfTokenizerFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_.set_vocab_file(AssetDir() + "/gpt2-vocab.json");
    tokenizer_.set_merge_file(AssetDir() + "/gpt2-merges.txt");
    if (!std::ifstream(tokenizer_.vocab_file()).good()) {
      GTEST_SKIP() << "no GPT-2 BPE files in " << AssetDir() << " (deploy/setup.sh)";
    }
    out_ = testutil::MakeTempDir("hftok");
  }
  mt::v1::TokenizerSpec tokenizer_;
  std::string out_;
};

TEST_F(HfTokenizerFilesTest, WritesTheTokenizerAndGenerationFiles) {
  MT_ASSERT_OK_AND_ASSIGN(auto files, WriteHfTokenizerFiles(Gpt2Model(), tokenizer_, out_));
  std::vector<std::string> names;
  for (const auto& f : files) {
    names.push_back(f.path());
    EXPECT_EQ(f.sha256().size(), 64u) << f.path();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"vocab.json", "merges.txt", "tokenizer_config.json",
                                             "special_tokens_map.json", "generation_config.json"}));
  // The BPE files byte for byte.
  MT_ASSERT_OK_AND_ASSIGN(std::string vocab, ReadFile(out_ + "/vocab.json"));
  MT_ASSERT_OK_AND_ASSIGN(std::string vocab_in, ReadFile(tokenizer_.vocab_file()));
  EXPECT_EQ(vocab, vocab_in);
  EXPECT_EQ(files[0].size_bytes(), static_cast<int64_t>(vocab_in.size()));
  MT_ASSERT_OK_AND_ASSIGN(std::string merges, ReadFile(out_ + "/merges.txt"));
  MT_ASSERT_OK_AND_ASSIGN(std::string merges_in, ReadFile(tokenizer_.merge_file()));
  EXPECT_EQ(merges, merges_in);
  MT_ASSERT_OK_AND_ASSIGN(std::string config, ReadFile(out_ + "/tokenizer_config.json"));
  EXPECT_THAT(config, HasSubstr("\"tokenizer_class\": \"GPT2Tokenizer\""));
  EXPECT_THAT(config, HasSubstr("\"model_max_length\": 1024"));
  EXPECT_THAT(config, HasSubstr("\"eos_token\": \"<|endoftext|>\""));
  MT_ASSERT_OK_AND_ASSIGN(std::string special, ReadFile(out_ + "/special_tokens_map.json"));
  EXPECT_THAT(special, HasSubstr("\"bos_token\": \"<|endoftext|>\""));
  MT_ASSERT_OK_AND_ASSIGN(std::string generation, ReadFile(out_ + "/generation_config.json"));
  EXPECT_THAT(generation, HasSubstr("\"eos_token_id\": 50256"));
  EXPECT_THAT(generation, HasSubstr("\"pad_token_id\": 50256"));
  EXPECT_THAT(generation, HasSubstr("\"max_new_tokens\": 64"));
}

TEST_F(HfTokenizerFilesTest, RefusesFilesThatDoNotFitTheModel) {
  mt::v1::ManifestModel small = Gpt2Model();
  small.set_vocab_size(128);
  EXPECT_THAT(WriteHfTokenizerFiles(small, tokenizer_, out_).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("has 50257 tokens but the model's vocabulary is 128")));
  // A file that is not a vocabulary (what a spec could name to read something else).
  mt::v1::TokenizerSpec other = tokenizer_;
  other.set_vocab_file(out_ + "/notes.txt");
  std::ofstream(other.vocab_file()) << "{\"secret-token\": 0}";
  const absl::Status refused = WriteHfTokenizerFiles(Gpt2Model(), other, out_).status();
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr(other.vocab_file() + " and merge_file")));
  EXPECT_THAT(std::string(refused.message()), ::testing::Not(HasSubstr("secret")));
  other.set_vocab_file(out_ + "/missing.json");
  EXPECT_THAT(WriteHfTokenizerFiles(Gpt2Model(), other, out_).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.json")));
  // Nothing but the generation config was ever written by the refused calls.
  EXPECT_FALSE(PathExists(out_ + "/vocab.json"));
}

}  // namespace
}  // namespace mt::checkpoint
