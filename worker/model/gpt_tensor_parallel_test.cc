// The tensor-parallel GPT (one thread per TP rank over real Gloo groups) against the one-device
// model with the same seed: the same loss on every rank and, per parameter, this rank's slice
// of the one-device gradient; with and without sequence parallelism, tied and untied, TP 2
// and 4, with full recomputation (collectives rerun inside backward), and with the sequence-
// parallel communication overlapped (--tp-comm-overlap, parallel/tp_overlap.h). fp32, no dropout;
// tolerance 1e-5 relative (the same math, sums split over ranks in another order).
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "worker/model/gpt.h"
#include "worker/model/sharding.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/rank_threads_testing.h"
#include "worker/parallel/tensor_parallel.h"

namespace mt::model {
namespace {

// 2 layers, hidden 64, 4 heads, seq 16, vocabulary 512 = a multiple of 128 * 4 (every TP size
// here pads it to the same 512).
GptConfig TinyConfig(bool untie) {
  GptConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 16;
  c.vocab_size = 512;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  c.attention_backend = AttentionBackend::kMath;
  c.untie_embeddings_and_output_weights = untie;
  return c.Resolve();
}

constexpr uint64_t kSeed = 42;

torch::Tensor Sample(const GptConfig& c) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(9);
  return torch::randint(c.vocab_size, {3, c.seq_length + 1}, gen, torch::kLong);
}

struct Reference {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;
};

Reference OneDevice(const GptConfig& c, const torch::Tensor& sample) {
  ModelBuildOptions o;
  o.seed = kSeed;
  auto model = GptModel::Create(c, {}, o);
  EXPECT_TRUE(model.ok()) << model.status();
  const torch::Tensor loss = (*model)->LossOnSample(sample);
  loss.backward();
  Reference ref;
  ref.loss = loss.item<double>();
  for (const auto& p : (*model)->named_parameters()) ref.grads[p.key()] = p.value().grad();
  return ref;
}

torch::Tensor SliceOf(const std::string& name, const torch::Tensor& full, int rank, int size) {
  const TpSplit split = TensorParallelSplit(name);
  if (split == TpSplit::kReplicated) return full;
  const int64_t dim = split == TpSplit::kDim0 ? 0 : 1;
  const int64_t part = full.size(dim) / size;
  return full.narrow(dim, rank * part, part);
}

// (tp, sequence parallel, untied, full recompute, tp comm overlap)
using Case = std::tuple<int, bool, bool, bool, bool>;

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const auto [tp, sp, untie, recompute, overlap] = info.param;
  return "tp" + std::to_string(tp) + (sp ? "_sp" : "") + (untie ? "_untied" : "_tied") +
         (recompute ? "_recompute" : "") + (overlap ? "_overlap" : "");
}

class GptTensorParallelTest : public ::testing::TestWithParam<Case> {};

TEST_P(GptTensorParallelTest, SameLossAndGradientsAsOneDevice) {
  if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  const auto [tp, sp, untie, recompute, overlap] = GetParam();
  GptConfig c = TinyConfig(untie);
  if (recompute) {
    c.recompute_granularity = RecomputeGranularity::kFull;
    c.recompute_num_layers = 1;
  }
  const torch::Tensor sample = Sample(c);
  const Reference ref = OneDevice(c, sample);

  const auto errors = parallel::testing::RunRanks(
      parallel::testing::LayoutOf(tp, 1, 1, c.num_layers),
      [&](int rank, std::shared_ptr<parallel::ProcessGroups> groups) {
        ModelShard shard;
        shard.tp_size = tp;
        shard.tp_rank = groups->tp_rank();
        shard.tp_group = std::shared_ptr<const parallel::GroupHandle>(groups, &groups->tp());
        shard.sequence_parallel = sp;
        shard.tp_comm_overlap = overlap;
        ModelBuildOptions o;
        o.seed = kSeed;
        auto model = GptModel::Create(c, shard, o);
        ASSERT_TRUE(model.ok()) << model.status();
        GptModel& m = **model;
        const torch::Tensor loss = m.LossOnSample(sample);
        loss.backward();
        EXPECT_NEAR(loss.item<double>(), ref.loss, 1e-5 * ref.loss) << "rank " << rank;
        // Sequence parallelism: replicated parameters hold a part of their gradient.
        ASSERT_TRUE(
            parallel::AllReduceCoalesced(m.SequenceParallelGradients(), shard.group()).ok());
        EXPECT_EQ(m.SequenceParallelParameterNames().empty(), !sp);
        for (const auto& p : m.named_parameters()) {
          const torch::Tensor want = SliceOf(p.key(), ref.grads.at(p.key()), shard.tp_rank, tp);
          ASSERT_EQ(p.value().grad().sizes(), want.sizes()) << p.key();
          const double scale = want.abs().max().item<double>() + 1e-12;
          EXPECT_LE((p.value().grad() - want).abs().max().item<double>(), 1e-5 * scale)
              << p.key() << " rank " << rank;
        }
        // No rank holds the full logits: forward() returns this rank's vocabulary shard.
        torch::NoGradGuard no_grad;
        EXPECT_EQ(m.forward(sample.narrow(1, 0, c.seq_length)).size(-1),
                  c.padded_vocab_size() / tp);
      });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, GptTensorParallelTest,
    ::testing::Values(Case{2, false, false, false, false}, Case{2, false, true, false, false},
                      Case{2, true, false, false, false}, Case{2, true, true, false, false},
                      Case{4, false, false, false, false}, Case{4, true, true, false, false},
                      Case{2, true, false, true, false}, Case{4, false, true, true, false},
                      Case{2, true, false, false, true}, Case{4, true, true, false, true},
                      Case{2, true, true, true, true}),
    CaseName);

}  // namespace
}  // namespace mt::model
