#include "common/checkpoint/hf_gpt2.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/paths.h"
#include "common/base/status_matchers.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_writer.h"
#include "common/checkpoint/reshard.h"
#include "common/checkpoint/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::checkpoint::hf_gpt2_test {
namespace {

using ::mt::testing::StatusIs;

using ::testing::HasSubstr;

constexpr int64_t kLayers = 2, kHidden = 8, kHeads = 2, kVocab = 50, kPadded = 64, kPos = 16;

HostTensor Random(std::vector<int64_t> shape, std::mt19937* rng) {
  HostTensor t = ZerosTensor(DType::kF32, std::move(shape));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  float* p = reinterpret_cast<float*>(t.data.data());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = normal(*rng);
  return t;
}

float At(const HostTensor& t, int64_t i) {
  float f;
  std::memcpy(&f, t.data.data() + 4 * i, 4);
  return f;
}

// A one-shard, tp=1 mt checkpoint of a tiny GPT-2 with random weights.
std::map<std::string, HostTensor> WriteTinyCheckpoint(const std::string& dir) {
  std::mt19937 rng(7);
  std::map<std::string, HostTensor> w;
  w["model.embedding.word_embeddings.weight"] = Random({kPadded, kHidden}, &rng);
  w["model.embedding.position_embeddings.weight"] = Random({kPos, kHidden}, &rng);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = absl::StrCat("model.decoder.layers.", l, ".");
    w[p + "input_layernorm.weight"] = Random({kHidden}, &rng);
    w[p + "input_layernorm.bias"] = Random({kHidden}, &rng);
    w[p + "self_attention.linear_qkv.weight"] = Random({3 * kHidden, kHidden}, &rng);
    w[p + "self_attention.linear_qkv.bias"] = Random({3 * kHidden}, &rng);
    w[p + "self_attention.linear_proj.weight"] = Random({kHidden, kHidden}, &rng);
    w[p + "self_attention.linear_proj.bias"] = Random({kHidden}, &rng);
    w[p + "pre_mlp_layernorm.weight"] = Random({kHidden}, &rng);
    w[p + "pre_mlp_layernorm.bias"] = Random({kHidden}, &rng);
    w[p + "mlp.linear_fc1.weight"] = Random({4 * kHidden, kHidden}, &rng);
    w[p + "mlp.linear_fc1.bias"] = Random({4 * kHidden}, &rng);
    w[p + "mlp.linear_fc2.weight"] = Random({kHidden, 4 * kHidden}, &rng);
    w[p + "mlp.linear_fc2.bias"] = Random({kHidden}, &rng);
  }
  w["model.decoder.final_layernorm.weight"] = Random({kHidden}, &rng);
  w["model.decoder.final_layernorm.bias"] = Random({kHidden}, &rng);
  std::vector<TensorView> views;
  for (const auto& [name, t] : w) views.push_back(ViewOf(name, t));
  auto d = WriteSafetensors(JoinPath(dir, ShardFileName(0, 0)), views,
                            {{"format", kShardFormatName}, {"tp_rank", "0"}, {"tp_size", "1"}});
  EXPECT_TRUE(d.ok()) << d.status();
  mt::v1::CheckpointManifest m;
  m.set_format(kFormatName);
  m.set_format_version(kFormatVersion);
  m.set_step(3);
  auto* model = m.mutable_model();
  model->set_num_layers(kLayers);
  model->set_hidden_size(kHidden);
  model->set_num_attention_heads(kHeads);
  model->set_ffn_hidden_size(4 * kHidden);
  model->set_kv_channels(kHidden / kHeads);
  model->set_max_position_embeddings(kPos);
  model->set_vocab_size(kVocab);
  model->set_padded_vocab_size(kPadded);
  model->set_layernorm_epsilon(1e-5);
  for (const auto& [name, t] : w) {
    auto* mt = m.add_tensors();
    mt->set_name(name);
    mt->set_file(ShardFileName(0, 0));
    mt->set_dtype("F32");
    for (int64_t s : t.shape) {
      mt->add_shape(s);
      mt->add_full_shape(s);
    }
    mt->set_split_dim(-1);
    mt->set_tp_size(1);
  }
  auto* f = m.add_files();
  f->set_path(ShardFileName(0, 0));
  f->set_size_bytes(d->size);
  f->set_sha256(d->sha256);
  EXPECT_TRUE(WriteManifest(dir, m).ok());
  return w;
}

TEST(HfGpt2Test, ExportUsesHuggingFaceNamesAndLayouts) {
  const std::string ckpt = testutil::MakeTempDir("hf");
  auto ours = WriteTinyCheckpoint(ckpt);
  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenAnySource(ckpt));
  const std::string out = testutil::MakeTempDir("hf") + "/hf";
  MT_ASSERT_OK_AND_ASSIGN(auto files, ExportHfGpt2(*source, out, DType::kF32));
  // The weights, the config and the generation config (the job named no tokenizer files).
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[2].path(), "generation_config.json");
  MT_ASSERT_OK_AND_ASSIGN(std::string generation, ReadFile(out + "/generation_config.json"));
  EXPECT_THAT(generation, HasSubstr("\"eos_token_id\": 50256"));
  EXPECT_THAT(generation, HasSubstr("\"do_sample\": false"));
  EXPECT_FALSE(PathExists(out + "/vocab.json"));
  EXPECT_TRUE(LooksLikeHfGpt2(out));
  MT_ASSERT_OK_AND_ASSIGN(SafetensorsIndex index, ReadSafetensorsIndex(out + "/model.safetensors"));
  EXPECT_EQ(index.tensors.size(), 2u + 12u * kLayers + 2u);
  EXPECT_EQ(index.metadata.at("format"), "pt");
  const SafetensorsEntry* wte = index.Find("transformer.wte.weight");
  ASSERT_NE(wte, nullptr);
  EXPECT_EQ(wte->shape, (std::vector<int64_t>{kVocab, kHidden}));  // padding dropped
  const SafetensorsEntry* attn = index.Find("transformer.h.1.attn.c_attn.weight");
  ASSERT_NE(attn, nullptr);
  ASSERT_EQ(attn->shape, (std::vector<int64_t>{kHidden, 3 * kHidden}));  // Conv1D: [in, out]
  MT_ASSERT_OK_AND_ASSIGN(HostTensor c_attn,
                          ReadSafetensorsTensor(out + "/model.safetensors", index, *attn));
  // Their output column p*h + head*d + j is our row head*3d + p*d + j.
  const HostTensor& qkv = ours["model.decoder.layers.1.self_attention.linear_qkv.weight"];
  const int64_t d = kHidden / kHeads;
  for (int64_t head = 0; head < kHeads; ++head) {
    for (int64_t p = 0; p < 3; ++p) {
      for (int64_t j = 0; j < d; ++j) {
        for (int64_t in = 0; in < kHidden; ++in) {
          const int64_t col = p * kHidden + head * d + j;
          const int64_t row = head * 3 * d + p * d + j;
          ASSERT_EQ(At(c_attn, in * 3 * kHidden + col), At(qkv, row * kHidden + in));
        }
      }
    }
  }
  MT_ASSERT_OK_AND_ASSIGN(std::string config, ReadFile(out + "/config.json"));
  EXPECT_THAT(config, HasSubstr("\"n_embd\": 8"));
  EXPECT_THAT(config, HasSubstr("\"vocab_size\": 50"));
  EXPECT_THAT(config, HasSubstr("\"activation_function\": \"gelu_pytorch_tanh\""));
  // The directory exists now: a second export there is refused.
  EXPECT_THAT(ExportHfGpt2(*source, out, DType::kF32), StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST(HfGpt2Test, ExportThenImportGivesIdenticalWeights) {
  const std::string ckpt = testutil::MakeTempDir("hf");
  auto ours = WriteTinyCheckpoint(ckpt);
  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenAnySource(ckpt));
  const std::string hf = testutil::MakeTempDir("hf") + "/hf";
  MT_ASSERT_OK(ExportHfGpt2(*source, hf, DType::kF32).status());
  const std::string imported = testutil::MakeTempDir("hf") + "/imported";
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m, ImportHfGpt2(hf, imported));
  EXPECT_FALSE(m.has_trainer());
  EXPECT_EQ(m.model().num_layers(), kLayers);
  EXPECT_EQ(m.model().vocab_size(), kVocab);
  MT_ASSERT_OK_AND_ASSIGN(LoadChoice choice, ChooseCheckpoint(imported));
  MT_ASSERT_OK_AND_ASSIGN(auto back, OpenCheckpointSource(choice.dir, choice.manifest));
  for (const auto& [name, t] : ours) {
    MT_ASSERT_OK_AND_ASSIGN(HostTensor b, back->Full(name));
    if (IsVocabPadded(name)) {
      MT_ASSERT_OK_AND_ASSIGN(HostTensor unpadded, ResizeRows(t, kVocab));
      EXPECT_EQ(b.data, unpadded.data) << name;
      // Loaded for a model padded to 64 rows: the real rows, then zeros.
      SliceRequest req;
      req.shape = t.shape;
      MT_ASSERT_OK_AND_ASSIGN(HostTensor repadded, back->Slice(name, req));
      EXPECT_EQ(repadded.data.substr(0, unpadded.data.size()), unpadded.data);
    } else {
      EXPECT_EQ(b.shape, t.shape) << name;
      EXPECT_EQ(b.data, t.data) << name;
    }
  }
}

TEST(HfGpt2Test, Bfloat16ExportAndConfigErrors) {
  const std::string ckpt = testutil::MakeTempDir("hf");
  WriteTinyCheckpoint(ckpt);
  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenAnySource(ckpt));
  const std::string hf = testutil::MakeTempDir("hf") + "/hf";
  MT_ASSERT_OK(ExportHfGpt2(*source, hf, DType::kBF16).status());
  MT_ASSERT_OK_AND_ASSIGN(SafetensorsIndex index, ReadSafetensorsIndex(hf + "/model.safetensors"));
  EXPECT_EQ(index.tensors[0].dtype, DType::kBF16);
  MT_ASSERT_OK_AND_ASSIGN(std::string config, ReadFile(hf + "/config.json"));
  EXPECT_THAT(config, HasSubstr("bfloat16"));

  MT_ASSERT_OK(WriteFileAtomically(hf + "/config.json", R"({"model_type": "llama"})"));
  EXPECT_THAT(OpenHfGpt2Source(hf),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("only gpt2")));
  MT_ASSERT_OK(WriteFileAtomically(hf + "/config.json", R"({"n_embd": 8, "n_head": 3})"));
  EXPECT_THAT(OpenHfGpt2Source(hf),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n_layer")));
}

// Issue 20 §4, on the path tests/fuzz/hf_config_fuzzer drives: sizes in config.json were trusted
// before the weights were looked at (n_layer 50000000 built 600 million name mappings; the QKV row
// order had 3 * n_embd entries whatever the tensor held).
TEST(HfGpt2Test, ConfigSizesAreCheckedAgainstTheWeightsBeforeAllocating) {
  const std::string ckpt = testutil::MakeTempDir("hf");
  WriteTinyCheckpoint(ckpt);
  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenAnySource(ckpt));
  const std::string hf = testutil::MakeTempDir("hf") + "/hf";
  MT_ASSERT_OK(ExportHfGpt2(*source, hf, DType::kF32).status());
  MT_ASSERT_OK_AND_ASSIGN(const SafetensorsIndex index,
                          ReadSafetensorsIndex(hf + "/model.safetensors"));
  int64_t layers = 0;
  while (index.Find(absl::StrCat("transformer.h.", layers, ".ln_1.weight")) != nullptr) ++layers;
  ASSERT_GT(layers, 0);

  MT_ASSERT_OK(WriteFileAtomically(
      hf + "/config.json",
      absl::StrCat(R"({"n_layer": )", layers + 1, R"(, "n_embd": 8, "n_head": 2})")));
  // Refused when opened, before any mapping is built: the config describes more than the
  // weights hold (common/checkpoint/hf_gpt2.cc CheckConfigAgainstWeights).
  EXPECT_THAT(
      OpenHfGpt2Source(hf),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat("n_layer ", layers + 1, " needs 12 tensors a layer"))));
  MT_ASSERT_OK(WriteFileAtomically(
      hf + "/config.json",
      absl::StrCat(R"({"n_layer": )", layers, R"(, "n_embd": 1000, "n_head": 2})")));
  EXPECT_THAT(OpenHfGpt2Source(hf),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the config does not describe these weights")));
}

}  // namespace
}  // namespace mt::checkpoint::hf_gpt2_test
