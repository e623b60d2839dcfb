// The tokenizer and generation files of a Hugging Face export, from the real GPT-2 BPE files
// (MT_ASSET_DIR, fetched by deploy/setup.sh): copied byte for byte, configs that name them, and
// refusals of files that are not a vocabulary of the model's size.
#include "common/checkpoint/hf_tokenizer_files.h"

#include <sys/stat.h>

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
    for (const char* sub : {"/a", "/b", "/c"}) ASSERT_EQ(::mkdir((out_ + sub).c_str(), 0755), 0);
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

std::vector<std::string> Paths(const std::vector<mt::v1::CheckpointFile>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(f.path());
  return out;
}

TEST_F(HfTokenizerFilesTest, LeavesOutFilesThatDoNotFitTheModelAndRefusesNonBpeFiles) {
  // Another vocabulary size than the model's: no tokenizer files, the generation config only.
  mt::v1::ManifestModel small = Gpt2Model();
  small.set_vocab_size(128);
  MT_ASSERT_OK_AND_ASSIGN(auto files, WriteHfTokenizerFiles(small, tokenizer_, out_ + "/a"));
  EXPECT_EQ(Paths(files), std::vector<std::string>{"generation_config.json"});
  EXPECT_FALSE(PathExists(out_ + "/a/vocab.json"));
  // Placeholders of a job on synthetic tokens: the same.
  mt::v1::TokenizerSpec other = tokenizer_;
  other.set_vocab_file("/unused/vocab.json");
  MT_ASSERT_OK_AND_ASSIGN(files, WriteHfTokenizerFiles(Gpt2Model(), other, out_ + "/b"));
  EXPECT_EQ(Paths(files), std::vector<std::string>{"generation_config.json"});
  // A file that is not a vocabulary (what a spec could name to read something else) is refused
  // without quoting it.
  other.set_vocab_file(out_ + "/notes.txt");
  std::ofstream(other.vocab_file()) << "{\"secret-token\": 0}";
  const absl::Status refused = WriteHfTokenizerFiles(Gpt2Model(), other, out_ + "/c").status();
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr(other.vocab_file() + " and merge_file")));
  EXPECT_THAT(std::string(refused.message()), ::testing::Not(HasSubstr("secret")));
  EXPECT_FALSE(PathExists(out_ + "/c/vocab.json"));
}

}  // namespace
}  // namespace mt::checkpoint
