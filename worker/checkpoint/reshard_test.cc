// Resharding at the tensor level: a checkpoint written under one (TP, PP, DP) layout, with the
// rank slices the sharding table (worker/model/sharding.h) prescribes, read back for every
// rank of another layout. Each rank must get exactly its slice of the whole tensor, with the
// vocabulary re-padded for its TP size (real rows kept, new padding rows zero).
#include "common/checkpoint/reshard.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/paths.h"
#include "common/base/status_matchers.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"
#include "worker/model/gpt_config.h"
#include "worker/model/sharding.h"

namespace mt::checkpoint::reshard_test {
namespace {

constexpr int64_t kLayers = 4, kHidden = 8, kFfn = 32, kPos = 16, kVocab = 50, kDivisible = 8;

struct Layout {
  int tp, pp, dp;
};

// Parameter names and full shapes (unpadded vocabulary rows = kVocab; padded per layout).
std::map<std::string, std::vector<int64_t>> Params(int64_t padded_vocab) {
  std::map<std::string, std::vector<int64_t>> p = {
      {"embedding.word_embeddings.weight", {padded_vocab, kHidden}},
      {"embedding.position_embeddings.weight", {kPos, kHidden}},
      {"decoder.final_layernorm.weight", {kHidden}},
      {"decoder.final_layernorm.bias", {kHidden}},
  };
  for (int l = 0; l < kLayers; ++l) {
    const std::string n = absl::StrCat("decoder.layers.", l, ".");
    p[n + "input_layernorm.weight"] = {kHidden};
    p[n + "self_attention.linear_qkv.weight"] = {3 * kHidden, kHidden};
    p[n + "self_attention.linear_qkv.bias"] = {3 * kHidden};
    p[n + "self_attention.linear_proj.weight"] = {kHidden, kHidden};
    p[n + "self_attention.linear_proj.bias"] = {kHidden};
    p[n + "mlp.linear_fc1.weight"] = {kFfn, kHidden};
    p[n + "mlp.linear_fc2.weight"] = {kHidden, kFfn};
  }
  return p;
}

// The pipeline stage holding a parameter (layers split evenly; embedding first, final norm
// last). -1 for the tied output copy, which lives on the last stage as output_layer.weight.
int StageOf(const std::string& param, int pp) {
  const int64_t layer = model::LayerIndexOf(param);
  if (layer >= 0) return static_cast<int>(layer / (kLayers / pp));
  if (param.rfind("embedding.", 0) == 0) return 0;
  return pp - 1;
}

// Stage `stage`'s tensor names: model weights and their Adam moments.
std::vector<std::string> StageNames(int stage, int pp, int64_t padded) {
  std::vector<std::string> out;
  for (const auto& [param, shape] : Params(padded)) {
    if (StageOf(param, pp) != stage) continue;
    out.push_back("model." + param);
    out.push_back("optimizer.exp_avg." + param);
  }
  if (pp > 1 && stage == pp - 1) out.push_back("model.output_layer.weight");  // tied copy
  return out;
}

std::string ParamOf(const std::string& name) {
  if (name.rfind("model.", 0) == 0) return name.substr(6);
  return name.substr(name.find('.', 10) + 1);  // optimizer.<state>.<param>
}

HostTensor Random(std::vector<int64_t> shape, std::mt19937* rng) {
  HostTensor t = ZerosTensor(DType::kF32, std::move(shape));
  std::uniform_real_distribution<float> u(-1, 1);
  float* p = reinterpret_cast<float*>(t.data.data());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(*rng);
  return t;
}

// The whole tensors as layout `from` pads them.
std::map<std::string, HostTensor> FullState(int64_t padded) {
  std::mt19937 rng(99);
  std::map<std::string, HostTensor> full;
  for (const auto& [param, shape] : Params(padded)) {
    full["model." + param] = Random(shape, &rng);
    full["optimizer.exp_avg." + param] = Random(shape, &rng);
  }
  full["model.output_layer.weight"] = full["model.embedding.word_embeddings.weight"];
  return full;
}

HostTensor Cut(const HostTensor& full, int split, int rank, int size) {
  if (split < 0) return full;
  const int64_t part = full.shape[split] / size;
  auto s = SliceAlong(full, split, part * rank, part);
  EXPECT_TRUE(s.ok());
  return *s;
}

// Writes the checkpoint as the ranks of `a` would: one shard per (tp, pp), DP rank 0 only.
std::string WriteCheckpoint(const Layout& a, const std::map<std::string, HostTensor>& full,
                            int64_t padded) {
  const std::string dir = testutil::MakeTempDir("reshard");
  const std::string partial = JoinPath(dir, PartialDirName(7, 0));
  EXPECT_EQ(::mkdir(partial.c_str(), 0755), 0);
  std::vector<ShardResult> results;
  int rank = 0;
  for (int pp = 0; pp < a.pp; ++pp) {
    for (int dp = 0; dp < a.dp; ++dp) {
      for (int tp = 0; tp < a.tp; ++tp, ++rank) {
        ShardResult r;
        r.rank = rank;
        r.ok = true;
        if (dp != 0) {
          results.push_back(r);
          continue;
        }
        std::vector<HostTensor> slices;
        std::vector<std::string> names = StageNames(pp, a.pp, padded);
        std::map<std::string, std::string> meta = {{"format", kShardFormatName},
                                                   {"tp_rank", std::to_string(tp)},
                                                   {"tp_size", std::to_string(a.tp)},
                                                   {"pp_rank", std::to_string(pp)}};
        for (const std::string& name : names) {
          const int split = model::TensorParallelSplitDim(ParamOf(name));
          slices.push_back(Cut(full.at(name), split, tp, a.tp));
          if (split >= 0) meta["split." + name] = std::to_string(split);
        }
        std::vector<TensorView> views;
        for (size_t i = 0; i < names.size(); ++i) views.push_back(ViewOf(names[i], slices[i]));
        r.file = ShardFileName(tp, pp);
        auto d = WriteSafetensors(JoinPath(partial, r.file), views, meta);
        EXPECT_TRUE(d.ok()) << d.status();
        r.size = d->size;
        r.sha256 = d->sha256;
        results.push_back(r);
      }
    }
  }
  mt::v1::CheckpointManifest base;
  base.set_step(7);
  base.mutable_model()->set_vocab_size(kVocab);
  base.mutable_model()->set_padded_vocab_size(padded);
  auto m = CommitCheckpoint(dir, partial, base, results);
  EXPECT_TRUE(m.ok()) << m.status();
  return JoinPath(dir, IterationDirName(7));
}

class ReshardTest : public ::testing::TestWithParam<std::pair<Layout, Layout>> {};

TEST_P(ReshardTest, EveryRankOfTheNewLayoutGetsItsSlice) {
  const auto [a, b] = GetParam();
  const int64_t padded_a = model::PaddedVocabSize(kVocab, kDivisible, a.tp);
  const int64_t padded_b = model::PaddedVocabSize(kVocab, kDivisible, b.tp);
  const auto full = FullState(padded_a);
  const std::string dir = WriteCheckpoint(a, full, padded_a);
  MT_ASSERT_OK_AND_ASSIGN(LoadChoice choice, ChooseCheckpoint(dir));
  EXPECT_EQ(choice.manifest.files_size(), a.tp * a.pp);
  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenCheckpointSource(choice.dir, choice.manifest));
  int checked = 0;
  for (int pp = 0; pp < b.pp; ++pp) {
    for (int tp = 0; tp < b.tp; ++tp) {
      // Every DP replica of (tp, pp) loads the same slices.
      for (const std::string& name : StageNames(pp, b.pp, padded_b)) {
        const int split = model::TensorParallelSplitDim(ParamOf(name));
        HostTensor whole = full.at(name);
        if (IsVocabPadded(name)) {
          MT_ASSERT_OK_AND_ASSIGN(HostTensor real, ResizeRows(whole, kVocab));
          MT_ASSERT_OK_AND_ASSIGN(whole, ResizeRows(real, padded_b));  // zero padding rows
        }
        const HostTensor want = Cut(whole, split, tp, b.tp);
        SliceRequest req;
        req.split_dim = split;
        req.tp_rank = tp;
        req.tp_size = b.tp;
        req.shape = want.shape;
        MT_ASSERT_OK_AND_ASSIGN(HostTensor got, source->Slice(name, req));
        ASSERT_EQ(got.shape, want.shape) << name;
        if (IsVocabPadded(name)) {
          // Real vocabulary rows exactly; padding rows are the writer's or zero, never used.
          const int64_t rows = want.shape[0];
          const int64_t real_rows = std::clamp<int64_t>(kVocab - tp * rows, 0, rows);
          const size_t real =
              static_cast<size_t>(real_rows) * want.data.size() / static_cast<size_t>(rows);
          ASSERT_EQ(std::memcmp(got.data.data(), want.data.data(), real), 0) << name;
        } else {
          ASSERT_EQ(got.data, want.data) << name << " tp " << tp << " pp " << pp;
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 60);
}

INSTANTIATE_TEST_SUITE_P(IssueLayouts, ReshardTest,
                         ::testing::Values(std::make_pair(Layout{2, 2, 1}, Layout{1, 1, 2}),
                                           std::make_pair(Layout{1, 1, 1}, Layout{4, 1, 1}),
                                           std::make_pair(Layout{2, 1, 2}, Layout{1, 2, 1}),
                                           std::make_pair(Layout{1, 2, 1}, Layout{2, 2, 2})),
                         [](const auto& info) {
                           const Layout a = info.param.first;
                           const Layout b = info.param.second;
                           return absl::StrCat("tp", a.tp, "pp", a.pp, "dp", a.dp, "_to_tp", b.tp,
                                               "pp", b.pp, "dp", b.dp);
                         });

}  // namespace
}  // namespace mt::checkpoint::reshard_test
