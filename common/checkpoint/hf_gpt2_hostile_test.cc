// Hostile Hugging Face directories (issue #20): links out of the directory, files that are no
// safetensors, configs that do not describe the weights. Errors must refuse them early, never
// quote a file's bytes, and never allocate what the config merely claims.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status_matchers.h"
#include "common/checkpoint/hf_gpt2.h"
#include "common/checkpoint/reshard.h"
#include "common/checkpoint/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::checkpoint::hf_hostile_test {
namespace {

using ::mt::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kLayers = 2, kHidden = 8, kHeads = 2, kVocab = 50, kPos = 16;

mt::v1::ManifestModel TinyModel() {
  mt::v1::ManifestModel m;
  m.set_num_layers(kLayers);
  m.set_hidden_size(kHidden);
  m.set_num_attention_heads(kHeads);
  m.set_ffn_hidden_size(4 * kHidden);
  m.set_max_position_embeddings(kPos);
  m.set_vocab_size(kVocab);
  m.set_layernorm_epsilon(1e-5);
  return m;
}

// A valid Hugging Face GPT-2 directory of TinyModel() (zero weights) with `layers` layers in
// the weights; config.json says TinyModel().
std::string WriteHfDir(int64_t layers = kLayers) {
  const std::string dir = testutil::MakeTempDir("hfhostile") + "/hf";
  EXPECT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const int64_t h = kHidden, f = 4 * kHidden;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"transformer.wte.weight", {kVocab, h}}, {"transformer.wpe.weight", {kPos, h}}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = absl::StrCat("transformer.h.", l, ".");
    for (const char* wb : {"weight", "bias"}) {
      const bool w = std::string(wb) == "weight";
      shapes.push_back({p + "ln_1." + wb, {h}});
      shapes.push_back({p + "ln_2." + wb, {h}});
      shapes.push_back({p + "attn.c_attn." + wb,
                        w ? std::vector<int64_t>{h, 3 * h} : std::vector<int64_t>{3 * h}});
      shapes.push_back(
          {p + "attn.c_proj." + wb, w ? std::vector<int64_t>{h, h} : std::vector<int64_t>{h}});
      shapes.push_back(
          {p + "mlp.c_fc." + wb, w ? std::vector<int64_t>{h, f} : std::vector<int64_t>{f}});
      shapes.push_back(
          {p + "mlp.c_proj." + wb, w ? std::vector<int64_t>{f, h} : std::vector<int64_t>{h}});
    }
  }
  shapes.push_back({"transformer.ln_f.weight", {h}});
  shapes.push_back({"transformer.ln_f.bias", {h}});
  std::vector<HostTensor> tensors;
  for (const auto& [name, shape] : shapes) tensors.push_back(ZerosTensor(DType::kF32, shape));
  std::vector<TensorView> views;
  for (size_t i = 0; i < shapes.size(); ++i) views.push_back(ViewOf(shapes[i].first, tensors[i]));
  EXPECT_TRUE(WriteSafetensors(dir + "/model.safetensors", views, {}).ok());
  EXPECT_TRUE(
      WriteFileAtomically(dir + "/config.json", HfGpt2ConfigJson(TinyModel(), DType::kF32)).ok());
  return dir;
}

void WriteConfig(const std::string& dir, const std::string& config) {
  ASSERT_TRUE(WriteFileAtomically(dir + "/config.json", config).ok());
}

std::string Config(int64_t layers, int64_t hidden, int64_t vocab) {
  return absl::StrCat(R"({"model_type": "gpt2", "n_layer": )", layers, R"(, "n_embd": )", hidden,
                      R"(, "n_head": 2, "n_positions": 16, "vocab_size": )", vocab, "}");
}

// Peak resident set size of this process since the last ResetPeakRss, in bytes.
int64_t PeakRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}
bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  return static_cast<bool>(out);
}

TEST(HfGpt2HostileTest, TheWellFormedDirectoryOpens) {
  const std::string dir = WriteHfDir();
  MT_EXPECT_OK(OpenHfGpt2Source(dir).status());
}

TEST(HfGpt2HostileTest, WeightsLinkedOutOfTheDirectoryAreRefusedWithoutReadingThem) {
  const std::string dir = WriteHfDir();
  const std::string secret = testutil::MakeTempDir("hfsecret") + "/shadow";
  ASSERT_TRUE(WriteFileAtomically(secret, "TOPSECRETroot:$y$j9T$hash::0:99999:7:::\n").ok());
  ASSERT_EQ(::unlink((dir + "/model.safetensors").c_str()), 0);
  ASSERT_EQ(::symlink(secret.c_str(), (dir + "/model.safetensors").c_str()), 0);
  EXPECT_THAT(OpenHfGpt2Source(dir),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("leads outside"), Not(HasSubstr("TOPSECRET")))));
  // The config likewise.
  const std::string dir2 = WriteHfDir();
  ASSERT_EQ(::unlink((dir2 + "/config.json").c_str()), 0);
  ASSERT_EQ(::symlink(secret.c_str(), (dir2 + "/config.json").c_str()), 0);
  EXPECT_THAT(OpenHfGpt2Source(dir2),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("config.json")));
}

TEST(HfGpt2HostileTest, ErrorsNeverQuoteTheFilesBytes) {
  const std::string dir = WriteHfDir();
  // Not a safetensors file at all: its first 8 bytes, read as the header length, are the
  // secret's; neither they nor their value as a number may appear.
  const std::string secret = "TOPSECRTroot:$y$j9T$hash::0:99999:7:::\n";
  uint64_t as_length = 0;
  for (int i = 7; i >= 0; --i) as_length = (as_length << 8) | static_cast<uint8_t>(secret[i]);
  ASSERT_TRUE(WriteFileAtomically(dir + "/model.safetensors", secret).ok());
  auto opened = OpenHfGpt2Source(dir);
  EXPECT_THAT(opened, StatusIs(absl::StatusCode::kDataLoss,
                               AllOf(Not(HasSubstr("TOPSECRT")), Not(HasSubstr("root")),
                                     Not(HasSubstr(absl::StrCat(as_length))))));
  // A plausible length, then bytes that are no JSON.
  std::string fake(8, '\0');
  fake[0] = 16;
  fake += "TOPSECRET-{[:,\"x";
  ASSERT_TRUE(WriteFileAtomically(dir + "/model.safetensors", fake).ok());
  EXPECT_THAT(OpenHfGpt2Source(dir),
              StatusIs(absl::StatusCode::kDataLoss, Not(HasSubstr("TOPSECRET"))));
  // A config.json that is no JSON.
  ASSERT_TRUE(WriteFileAtomically(dir + "/config.json", "TOPSECRET password=hunter2 {").ok());
  EXPECT_THAT(OpenHfGpt2Source(dir),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("config.json is not a JSON object"),
                             Not(HasSubstr("TOPSECRET")), Not(HasSubstr("hunter2")))));
}

TEST(HfGpt2HostileTest, AHugeLayerCountIsRefusedByTheSizeCheckWithoutAllocating) {
  const std::string dir = WriteHfDir();
  WriteConfig(dir, Config(50000000, kHidden, kVocab));
  ASSERT_TRUE(ResetPeakRss()) << "/proc/self/clear_refs";
  const int64_t before = PeakRssBytes();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(OpenHfGpt2Source(dir),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("n_layer 50000000 needs 12 tensors a layer")));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);
  EXPECT_LT(PeakRssBytes() - before, int64_t{32} << 20);
  // Few layers but huge ones: refused by the bytes the file holds.
  WriteConfig(dir, Config(1, 1 << 20, kVocab));
  EXPECT_THAT(OpenHfGpt2Source(dir), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("bytes of data: the config does not "
                                                        "describe these weights")));
  EXPECT_LT(PeakRssBytes() - before, int64_t{32} << 20);
}

TEST(HfGpt2HostileTest, MoreOrFewerLayersThanTheWeightsHoldAreRefused) {
  // The weights hold 2 layers plus spare tensors enough to pass the count bound for 3.
  const std::string dir = WriteHfDir(/*layers=*/2);
  WriteConfig(dir, Config(3, kHidden, kVocab));
  EXPECT_THAT(OpenHfGpt2Source(dir), StatusIs(absl::StatusCode::kInvalidArgument));
  const std::string three = WriteHfDir(/*layers=*/3);
  WriteConfig(three, Config(2, kHidden, kVocab));
  // config says 2 but the weights hold 3 layers: "holds layer 2".
  EXPECT_THAT(OpenHfGpt2Source(three),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("holds layer 2 but config.json says n_layer 2")));
  const std::string dir3 = WriteHfDir(/*layers=*/3);
  WriteConfig(dir3, Config(4, kHidden, kVocab));
  EXPECT_THAT(OpenHfGpt2Source(dir3),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n_layer 4")));
}

TEST(HfGpt2HostileTest, ShapesMustMatchTheConfig) {
  const std::string dir = WriteHfDir();
  WriteConfig(dir, Config(kLayers, kHidden, kVocab - 10));
  EXPECT_THAT(OpenHfGpt2Source(dir),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("transformer.wte.weight is F32[50, 8]; config.json implies a "
                                 "float tensor of shape [40, 8]")));
}

}  // namespace
}  // namespace mt::checkpoint::hf_hostile_test
