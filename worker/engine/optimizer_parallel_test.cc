// The optimizer across ranks, in one process: one thread per rank over one c10d::HashStore and
// Gloo (as worker/parallel/process_groups_test.cc). Data parallelism (plain, overlapped
// reduction, distributed optimizer, overlapped parameter gather) against one rank, the global
// gradient norm over the model-parallel group, a skip decided on one rank reaching all, the
// forward waiting for the parameter gathers bucket by bucket, and the bytes each rank holds on
// the real TP/PP shards.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/base/status_matchers.h"
#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/tiny_spec.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/data_sources.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/trainer.h"
#include "worker/model/gpt.h"
#include "worker/model/sharding.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/rank_threads_testing.h"

namespace mt::engine {
namespace {

using parallel::ProcessGroups;

constexpr int64_t kSeq = 16;
constexpr int64_t kVocab = 128;

// Ranks of a real job are processes; here they are threads sharing LibTorch's default
// generator, which seeds and draws the initial weights. Rank threads build their models one at
// a time under this lock so that every rank gets the weights its seed says.
std::mutex& RngMutex() {
  static std::mutex mu;
  return mu;
}

using parallel::testing::LayoutOf;

// Runs fn(rank, groups) on one thread per rank of `layout`, Gloo over one HashStore
// (parallel/rank_threads_testing.h); a rank whose groups or fn failed fails the test.
void RunRanks(const mt::v1::Layout& layout,
              const std::function<void(int, std::shared_ptr<ProcessGroups>)>& fn) {
  for (const std::string& e :
       parallel::testing::RunRanks(layout, fn, "gloo", std::chrono::milliseconds(120000))) {
    EXPECT_EQ(e, "");
  }
}

mt::v1::JobSpec TinySpec() {
  testutil::TinySpecOptions o;
  o.seq_length = kSeq;
  o.vocab_size = kVocab;
  o.global_batch_size = 8;
  o.lr = 3e-3;
  o.seed = 99;
  o.zero_dropout = true;
  o.constant_lr = true;
  mt::v1::JobSpec spec = testutil::TinyGptSpec(o);
  auto* t = spec.mutable_training();
  // As in trainer_test's accumulation test: eps 1e-6 keeps Adam's update Lipschitz in the
  // gradient, so summation-order noise is not amplified at near-zero gradients.
  t->set_adam_eps(1e-6);
  t->set_clip_grad(0.5);  // clipping acts on some steps
  spec.mutable_evaluation()->set_eval_interval(0);
  spec.mutable_logging()->set_log_interval(1000);
  // ~30K parameters: about 15 buckets, so buckets start during backward one by one.
  spec.mutable_parallel()->set_ddp_bucket_size(2000);
  return spec;
}

TrainerOptions Quiet() {
  TrainerOptions o;
  o.log_progress = false;
  o.attention_backend = "math";
  o.sync_every_step = true;
  return o;
}

// Two global batches of 8 samples, repeated: the loss falls within a few steps.
std::unique_ptr<BatchSource> Tokens(int dp_rank, int dp_size) {
  auto s = TokenSequenceSource::Create(SyntheticTokens(2 * 8 * kSeq, kVocab, 5), kSeq);
  EXPECT_TRUE(s.ok());
  std::unique_ptr<BatchSource> source = std::move(*s);
  if (dp_size == 1) return source;
  return std::make_unique<DataParallelSlice>(std::move(source), dp_rank, dp_size);
}

// The losses of `steps` steps of `spec` on one rank.
std::vector<double> SingleRankLosses(const mt::v1::JobSpec& spec, int steps) {
  auto trainer = Trainer::Create(spec, Quiet(), Tokens(0, 1), nullptr);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  std::vector<double> out;
  for (int i = 0; i < steps && trainer.ok(); ++i) {
    auto m = (*trainer)->Step();
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) break;
    out.push_back(m->loss);
  }
  return out;
}

struct DpCase {
  const char* name;
  int dp;
  bool distributed_optimizer;
  bool overlap_grad_reduce;
  bool overlap_param_gather;
  int steps;
};

// DP ranks over the same global batch give the single rank's losses within 1e-5 relative (fp32:
// only the order of the gradient sums differs), and every rank ends with the same weights.
class DataParallelTest : public ::testing::TestWithParam<DpCase> {};

TEST_P(DataParallelTest, GivesTheSingleRankLosses) {
  if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  const DpCase c = GetParam();
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_train_iters(c.steps);
  const std::vector<double> want = SingleRankLosses(spec, c.steps);
  ASSERT_EQ(want.size(), static_cast<size_t>(c.steps));

  spec.mutable_parallel()->set_data_parallel_size(c.dp);
  spec.mutable_parallel()->set_use_distributed_optimizer(c.distributed_optimizer);
  spec.mutable_parallel()->set_overlap_grad_reduce(c.overlap_grad_reduce);
  spec.mutable_parallel()->set_overlap_param_gather(c.overlap_param_gather);
  std::vector<std::vector<double>> losses(c.dp);
  std::vector<torch::Tensor> weights(c.dp);
  RunRanks(LayoutOf(1, 1, c.dp), [&](int rank, std::shared_ptr<ProcessGroups> groups) {
    TrainerOptions o = Quiet();
    std::unique_ptr<parallel::Collectives> collectives = parallel::MakeCollectives(groups, 0);
    o.collectives = collectives.get();
    o.groups = groups;
    auto trainer = [&] {
      std::lock_guard<std::mutex> lock(RngMutex());
      return Trainer::Create(spec, o, Tokens(groups->dp_rank(), c.dp), nullptr);
    }();
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    EXPECT_EQ((*trainer)->plan().num_micro_batches, 4 / c.dp);
    EXPECT_GT((*trainer)->optimizer().buckets().size(), 5u);
    for (int i = 0; i < c.steps; ++i) {
      auto m = (*trainer)->Step();
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_FALSE(m->skipped);
      losses[rank].push_back(m->loss);
      // With overlap every bucket starts from a hook during backward (every parameter gets a
      // gradient); without, all start after it.
      EXPECT_EQ((*trainer)->optimizer().buckets_started_in_backward(),
                c.overlap_grad_reduce ? (*trainer)->optimizer().buckets().size() : 0u);
    }
    MT_EXPECT_OK((*trainer)->optimizer().WaitForParameters());
    weights[rank] = (*trainer)->optimizer().model_params().clone();
  });
  for (int r = 0; r < c.dp; ++r) {
    ASSERT_EQ(losses[r].size(), want.size()) << "rank " << r;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(losses[r][i], want[i], 1e-5 * want[i])
          << c.name << " rank " << r << " step " << i + 1;
    }
    EXPECT_TRUE(torch::equal(weights[r], weights[0])) << c.name << " rank " << r;
  }
  EXPECT_LT(want.back(), want.front());  // it trained
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, DataParallelTest,
    ::testing::Values(DpCase{"dp2", 2, false, false, false, 6},
                      DpCase{"dp2_overlap", 2, false, true, false, 6},
                      DpCase{"dp2_distopt", 2, true, false, false, 6},
                      DpCase{"dp4_overlap", 4, false, true, false, 6},
                      DpCase{"dp4_distopt_overlap", 4, true, true, true, 6},
                      // The gate layout (1,1,4) with the distributed optimizer: 20 steps.
                      DpCase{"dp4_distopt_20_steps", 4, true, false, false, 20}),
    [](const ::testing::TestParamInfo<DpCase>& info) { return std::string(info.param.name); });

// bf16 with DP: the reduction runs on fp32 master gradients (folded per bucket by the hooks
// during backward with overlap); the losses follow the single rank's within bf16 noise (2e-2).
TEST(DataParallelBf16Test, OverlappedDistributedOptimizerFollowsOneRank) {
  if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_precision(mt::v1::PRECISION_BF16);
  spec.mutable_training()->set_train_iters(4);
  const std::vector<double> want = SingleRankLosses(spec, 4);
  ASSERT_EQ(want.size(), 4u);
  spec.mutable_parallel()->set_data_parallel_size(2);
  spec.mutable_parallel()->set_use_distributed_optimizer(true);
  spec.mutable_parallel()->set_overlap_grad_reduce(true);
  std::vector<std::vector<double>> losses(2);
  RunRanks(LayoutOf(1, 1, 2), [&](int rank, std::shared_ptr<ProcessGroups> groups) {
    TrainerOptions o = Quiet();
    auto collectives = parallel::MakeCollectives(groups, 0);
    o.collectives = collectives.get();
    o.groups = groups;
    auto trainer = [&] {
      std::lock_guard<std::mutex> lock(RngMutex());
      return Trainer::Create(spec, o, Tokens(groups->dp_rank(), 2), nullptr);
    }();
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    EXPECT_TRUE((*trainer)->optimizer().has_fp32_master_grads());
    for (int i = 0; i < 4; ++i) {
      auto m = (*trainer)->Step();
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_EQ((*trainer)->optimizer().buckets_started_in_backward(),
                (*trainer)->optimizer().buckets().size());
      losses[rank].push_back(m->loss);
    }
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(losses[r].size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(losses[r][i], want[i], 2e-2 * want[i]) << i;
  }
}

// --overlap-param-gather with the distributed optimizer (DP 2): Step leaves the all-gathers
// running and the next forward waits for each bucket just before the first part of the
// model that uses it (embedding = part 0, layer i = part 1 + i, final LayerNorm = part 3):
// from the second step on, the waits come part by part in forward order, the first one with
// later buckets still in flight, and every bucket is waited for exactly once by the end of
// the forward. The losses are exactly those of the run that waits for all gathers in Step.
TEST(ParamGatherOverlapTest, TheForwardWaitsBucketByBucket) {
  if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  constexpr int kSteps = 4;
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_train_iters(kSteps);
  spec.mutable_parallel()->set_data_parallel_size(2);
  spec.mutable_parallel()->set_use_distributed_optimizer(true);
  std::map<bool, std::vector<std::vector<double>>> losses;
  for (bool overlap : {false, true}) {
    spec.mutable_parallel()->set_overlap_param_gather(overlap);
    losses[overlap].resize(2);
    RunRanks(LayoutOf(1, 1, 2), [&](int rank, std::shared_ptr<ProcessGroups> groups) {
      TrainerOptions o = Quiet();
      auto collectives = parallel::MakeCollectives(groups, 0);
      o.collectives = collectives.get();
      o.groups = groups;
      auto trainer = [&] {
        std::lock_guard<std::mutex> lock(RngMutex());
        return Trainer::Create(spec, o, Tokens(groups->dp_rank(), 2), nullptr);
      }();
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      const MixedPrecisionOptimizer& opt = (*trainer)->optimizer();
      const int buckets = static_cast<int>(opt.buckets().size());
      ASSERT_GT(buckets, 5);
      EXPECT_EQ((*trainer)->model().num_forward_parts(), 4);
      for (int i = 0; i < kSteps; ++i) {
        auto m = (*trainer)->Step();
        ASSERT_TRUE(m.ok()) << m.status();
        losses[overlap][rank].push_back(m->loss);
        const auto& waits = opt.last_gather_waits();
        if (!overlap || i == 0) {
          EXPECT_TRUE(waits.empty()) << "step " << i + 1;
          continue;
        }
        ASSERT_GT(waits.size(), 1u) << "step " << i + 1 << ": all buckets waited for at once";
        EXPECT_EQ(waits.front().part, 0);
        EXPECT_GT(waits.front().still_pending, 0);  // the embedding ran before they were done
        EXPECT_EQ(waits.back().still_pending, 0);
        int waited = 0;
        for (size_t k = 0; k < waits.size(); ++k) {
          if (k > 0) {
            EXPECT_GT(waits[k].part, waits[k - 1].part);
          }
          EXPECT_GT(waits[k].buckets, 0);
          waited += waits[k].buckets;
        }
        EXPECT_EQ(waited, buckets) << "step " << i + 1;
      }
    });
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(losses[true][r].size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(losses[false][r].size(), static_cast<size_t>(kSteps));
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_EQ(losses[true][r][i], losses[false][r][i]) << "rank " << r << " step " << i + 1;
    }
  }
}

std::shared_ptr<model::GptModel> TinyModel(uint64_t seed) {
  std::lock_guard<std::mutex> lock(RngMutex());
  model::GptConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = kSeq;
  c.vocab_size = kVocab;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  c.attention_backend = model::AttentionBackend::kMath;
  c.Resolve();
  torch::manual_seed(seed);
  auto m = model::GptModel::Create(c);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

// An inf on one DP rank's gradients skips the step on every rank, with and without the
// distributed optimizer: weights, moments and t stay as they were everywhere.
TEST(DataParallelSkipTest, AnInfOnOneRankSkipsEverywhere) {
  if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  for (bool distributed : {false, true}) {
    RunRanks(LayoutOf(1, 1, 2), [&](int rank, std::shared_ptr<ProcessGroups> groups) {
      auto model = TinyModel(3);
      OptimizerParallelConfig p;
      p.groups = groups;
      p.use_distributed_optimizer = distributed;
      p.bucket_elements = 3000;
      auto opt = MixedPrecisionOptimizer::Create(OptimizerConfig{}, *model, p);
      ASSERT_TRUE(opt.ok()) << opt.status();
      MixedPrecisionOptimizer& o = **opt;
      const torch::Tensor x = [&] {
        std::lock_guard<std::mutex> lock(RngMutex());
        torch::manual_seed(10 + rank);
        return torch::randint(kVocab, {2, kSeq + 1}, torch::kLong);
      }();
      MT_ASSERT_OK(o.ZeroGrad());
      model->LossOnSample(x).backward();
      MT_ASSERT_OK_AND_ASSIGN(const OptimizerStepResult first, o.Step(1e-3, 1.0));
      ASSERT_FALSE(first.skipped());
      const torch::Tensor weights = o.model_params().clone();
      const torch::Tensor m1 = o.exp_avg().clone();
      MT_ASSERT_OK(o.ZeroGrad());
      model->LossOnSample(x).backward();
      if (rank == 1) {
        torch::NoGradGuard no_grad;
        model->decoder->layers[0]
            ->as<model::TransformerLayer>()
            ->mlp->linear_fc2->weight.mutable_grad()[1][2] = std::numeric_limits<float>::infinity();
      }
      MT_ASSERT_OK_AND_ASSIGN(const OptimizerStepResult r, o.Step(1e-3, 1.0));
      EXPECT_TRUE(r.skipped()) << "rank " << rank << " distributed " << distributed;
      EXPECT_FALSE(std::isfinite(r.grad_norm()));
      EXPECT_EQ(o.step_count(), 1);
      EXPECT_TRUE(torch::equal(o.model_params(), weights)) << "rank " << rank;
      EXPECT_TRUE(torch::equal(o.exp_avg(), m1)) << "rank " << rank;
    });
  }
}

// A gradient the caller changes after backward (as sequence parallelism sums replicas over TP)
// is marked late: with overlap_grad_reduce its bucket starts only in ReduceGradients, after the
// change, so the DP sum includes it. Each rank adds rank + 1 to the final LayerNorm's gradient
// between backward and Step; the weights after the step equal those of the same run without
// overlap (the same sums, bucket by bucket: bit for bit), on both ranks.
TEST(DataParallelLateGradientTest, LateGradientsWaitForTheCaller) {
  if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  const std::string late = "decoder.final_layernorm.weight";
  std::map<bool, std::vector<torch::Tensor>> weights;
  for (bool overlap : {false, true}) {
    weights[overlap].resize(2);
    RunRanks(LayoutOf(1, 1, 2), [&](int rank, std::shared_ptr<ProcessGroups> groups) {
      auto model = TinyModel(8);
      OptimizerParallelConfig p;
      p.groups = groups;
      p.overlap_grad_reduce = overlap;
      p.bucket_elements = 2000;
      p.late_gradient = [&](const std::string& n) { return n == late; };
      auto opt = MixedPrecisionOptimizer::Create(OptimizerConfig{}, *model, p);
      ASSERT_TRUE(opt.ok()) << opt.status();
      MixedPrecisionOptimizer& o = **opt;
      const torch::Tensor x = [&] {
        std::lock_guard<std::mutex> lock(RngMutex());
        torch::manual_seed(20 + rank);
        return torch::randint(kVocab, {2, kSeq + 1}, torch::kLong);
      }();
      MT_ASSERT_OK(o.ZeroGrad());
      o.BeginMicroBatch(/*last=*/true);
      model->LossOnSample(x).backward();
      o.FinishMicroBatch();
      if (overlap) {
        EXPECT_GT(o.buckets_started_in_backward(), 0u);
        EXPECT_LT(o.buckets_started_in_backward(), o.buckets().size());  // the late one waits
      }
      {
        torch::NoGradGuard no_grad;
        for (const auto& slot : o.slots()) {
          if (slot.name == late) o.SlotGradient(slot).add_(rank + 1.0);
        }
      }
      MT_ASSERT_OK_AND_ASSIGN(const OptimizerStepResult r, o.Step(1e-2, 1.0));
      EXPECT_FALSE(r.skipped());
      weights[overlap][rank] = o.model_params().clone();
    });
  }
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(torch::equal(weights[true][rank], weights[false][rank])) << "rank " << rank;
    EXPECT_TRUE(torch::equal(weights[true][rank], weights[true][0])) << "rank " << rank;
  }
}

// A module holding the named parameters given (shapes chosen by the test).
struct Params : torch::nn::Module {
  explicit Params(const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes) {
    for (const auto& [name, shape] : shapes) {
      // Module parameter names cannot contain '.': register under an escaped name and rename
      // through named_parameters' keys is not possible, so nest modules along the dots.
      torch::nn::Module* owner = this;
      std::string rest = name;
      size_t dot;
      while ((dot = rest.find('.')) != std::string::npos) {
        const std::string part = rest.substr(0, dot);
        rest = rest.substr(dot + 1);
        std::shared_ptr<torch::nn::Module> child;
        for (const auto& c : owner->named_children()) {
          if (c.key() == part) child = c.value();
        }
        if (child == nullptr) child = owner->register_module(part, std::make_shared<Params>());
        owner = child.get();
      }
      owner->register_parameter(rest, torch::zeros(shape));
    }
  }
  Params() = default;
};

// The global norm over a model-parallel group (TP 2 x PP 2): each rank holds its TP half of a
// column-parallel weight and the word embedding (vocabulary-split; the last stage's copy of the
// tied embedding is named a duplicate), and a full copy of a replicated LayerNorm weight. The
// norm counts every TP half once, each stage's LayerNorm once (TP rank 0) and the embedding
// once (first stage): 1e-6 relative. Then a NaN in a gradient left out of the norm (the
// LayerNorm on TP rank 1) still skips the step on all four ranks.
TEST(GlobalNormTest, CountsReplicatedAndSharedParametersOnce) {
  if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  const mt::v1::Layout layout = LayoutOf(2, 2, 1);
  // Gradient values per (tp, pp): qkv = tp + 2*pp + 1, layernorm = pp + 5 (same on both TP
  // ranks), embedding = tp + 7 (same on both stages).
  const int64_t qkv = 96 * 32 / 2, ln = 32, emb = 128 * 32 / 2;
  double want = 0;
  for (int tp = 0; tp < 2; ++tp) {
    for (int pp = 0; pp < 2; ++pp) want += qkv * std::pow(tp + 2 * pp + 1, 2);
  }
  for (int pp = 0; pp < 2; ++pp) want += ln * std::pow(pp + 5, 2);
  for (int tp = 0; tp < 2; ++tp) want += emb * std::pow(tp + 7, 2);
  want = std::sqrt(want);
  for (bool poison : {false, true}) {
    RunRanks(layout, [&](int rank, std::shared_ptr<ProcessGroups> groups) {
      const int tp = groups->tp_rank(), pp = groups->pp_rank();
      const std::string layer = pp == 0 ? "decoder.layers.0" : "decoder.layers.2";
      Params module({{layer + ".self_attention.linear_qkv.weight", {48, 32}},
                     {layer + ".input_layernorm.weight", {32}},
                     {"embedding.word_embeddings.weight", {64, 32}}});
      OptimizerParallelConfig p;
      p.groups = groups;
      p.norm_duplicate = [&](const std::string& name) {
        return name == "embedding.word_embeddings.weight" && !groups->is_first_stage();
      };
      OptimizerConfig c;
      c.kind = OptimizerConfig::Kind::kSgd;
      c.sgd_momentum = 0.0;
      c.weight_decay = 0.0;
      c.clip_grad = 0.0;
      auto opt = MixedPrecisionOptimizer::Create(c, module, p);
      ASSERT_TRUE(opt.ok()) << opt.status();
      MT_ASSERT_OK((*opt)->ZeroGrad());
      {
        torch::NoGradGuard no_grad;
        for (auto& item : module.named_parameters()) {
          const std::string& n = item.key();
          double v = tp + 7;
          if (n.find("linear_qkv") != std::string::npos) v = tp + 2 * pp + 1;
          if (n.find("layernorm") != std::string::npos) v = pp + 5;
          item.value().mutable_grad().fill_(v);
          if (poison && tp == 1 && n.find("layernorm") != std::string::npos) {
            item.value().mutable_grad()[3] = std::nan("");
          }
        }
      }
      for (const auto& slot : (*opt)->slots()) {
        const bool replicated = slot.name.find("layernorm") != std::string::npos;
        const bool duplicate = slot.name.find("word_embeddings") != std::string::npos && pp == 1;
        EXPECT_EQ(slot.counted_in_norm, !(replicated && tp == 1) && !duplicate) << slot.name;
      }
      MT_ASSERT_OK_AND_ASSIGN(const OptimizerStepResult r, (*opt)->Step(1e-3, 1.0));
      if (poison) {
        EXPECT_TRUE(r.skipped()) << "rank " << rank;
      } else {
        EXPECT_FALSE(r.skipped());
        EXPECT_NEAR(r.grad_norm(), want, 1e-6 * want) << "rank " << rank;
      }
    });
  }
}

// Bytes per rank on the real shards: every rank of (TP, PP, DP) builds its own GptModel part
// (ModelShard: its TP shard of its stage's layers, the embedding on the first stage, the final
// LayerNorm and the tied embedding's copy on the last), bf16 with 2 micro-batches per step (fp32
// master gradients: 2 + 2 + 4 + 4 + 8 = 20 bytes per element between steps), and the
// optimizer over it. Against the (1,1,1) model, exactly (no tolerance):
//   parameters of rank (tp, pp) = layers' split parameters / (TP * PP) + layers' replicated
//     parameters (LayerNorms, row-parallel biases) / PP + on the first stage the word embedding
//     / TP and the whole position embedding + on the last stage the final LayerNorm and, when
//     it is not the first, the tied word embedding's copy / TP;
//   each split tensor is 1/TP of the (1,1,1) one, each replicated one whole;
//   bytes = 2 (weights) + 2 (gradients) + 4 (fp32 gradients) for each element of the padded
//     buffer (each tensor aligned to 64 elements, the one bucket to 64 * DP with the
//     distributed optimizer), and 4 (master) + 8 (moments) for each element of this rank's
//     1/DP of it with the distributed optimizer (of all of it without).
// The vocabulary (256, padded to a multiple of 128 * TP) is the same at TP 1 and 2.
struct MemoryLayout {
  int tp, pp, dp;
  bool distributed_optimizer;
};

model::GptConfig MemoryConfig() {
  model::GptConfig c;
  c.num_layers = 4;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = kSeq;
  c.vocab_size = 256;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  c.attention_backend = model::AttentionBackend::kMath;
  return c;
}

class MemoryTest : public ::testing::TestWithParam<MemoryLayout> {};

TEST_P(MemoryTest, BytesPerRankFollowTheSplit) {
  if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  const MemoryLayout l = GetParam();
  model::ModelBuildOptions build;
  build.seed = 4;
  build.dtype = torch::kBFloat16;
  OptimizerConfig opt_config;
  opt_config.num_micro_batches = 2;

  // The (1,1,1) totals by kind.
  MT_ASSERT_OK_AND_ASSIGN(auto whole, model::GptModel::Create(MemoryConfig(), {}, build));
  std::map<std::string, int64_t> whole_numel;
  int64_t layer_split = 0, layer_replicated = 0, word = 0, position = 0, final_ln = 0;
  for (const auto& item : whole->named_parameters()) {
    const std::string& name = item.key();
    const int64_t n = item.value().numel();
    whole_numel[name] = n;
    const bool split = model::TensorParallelSplit(name) != model::TpSplit::kReplicated;
    if (model::LayerIndexOf(name) >= 0) {
      (split ? layer_split : layer_replicated) += n;
    } else if (name == "embedding.word_embeddings.weight") {
      word = n;
    } else if (name == "embedding.position_embeddings.weight") {
      position = n;
    } else if (name.rfind("decoder.final_layernorm.", 0) == 0) {
      final_ln += n;
    } else {
      ADD_FAILURE() << "unexpected parameter " << name;
    }
  }
  ASSERT_EQ(layer_split % (l.tp * l.pp), 0);
  ASSERT_EQ(word % l.tp, 0);
  MT_ASSERT_OK_AND_ASSIGN(auto whole_opt, MixedPrecisionOptimizer::Create(opt_config, *whole, {}));
  const int64_t whole_params = layer_split + layer_replicated + word + position + final_ln;
  EXPECT_EQ(whole_opt->num_parameters(), whole_params);
  const auto w = whole_opt->memory_bytes();
  const int64_t whole_padded = whole_opt->model_params().numel();
  EXPECT_EQ(w.params + w.grads + w.master_grads + w.master_params + w.optimizer_state,
            20 * whole_padded);

  const int world = l.tp * l.pp * l.dp;
  std::vector<int64_t> state_bytes(world, 0), params_of(world, 0);
  RunRanks(LayoutOf(l.tp, l.pp, l.dp), [&](int rank, std::shared_ptr<ProcessGroups> groups) {
    const int tp = groups->tp_rank(), pp = groups->pp_rank();
    const bool first = pp == 0, last = pp == l.pp - 1;
    model::ModelShard shard;
    shard.tp_size = l.tp;
    shard.tp_rank = tp;  // no TP group: this model never runs forward
    for (int64_t layer : groups->layout().stage_layers(pp).layers()) shard.layers.push_back(layer);
    shard.pre_process = first;
    shard.post_process = last;
    MT_ASSERT_OK_AND_ASSIGN(auto model, model::GptModel::Create(MemoryConfig(), shard, build));
    OptimizerParallelConfig p;
    p.groups = groups;
    p.use_distributed_optimizer = l.distributed_optimizer;
    p.bucket_elements = int64_t{1} << 40;  // one bucket: its padding is the only one
    MT_ASSERT_OK_AND_ASSIGN(auto opt, MixedPrecisionOptimizer::Create(opt_config, *model, p));

    // Parameters: each tensor 1/TP of the whole or whole, and the rank's total by kind.
    int64_t aligned = 0;
    for (const auto& slot : opt->slots()) {
      const std::string whole_name = slot.name == model::GptModel::kSharedOutputWeightName
                                         ? "embedding.word_embeddings.weight"
                                         : slot.name;
      ASSERT_TRUE(whole_numel.count(whole_name)) << slot.name;
      const bool split = model::TensorParallelSplit(slot.name) != model::TpSplit::kReplicated;
      EXPECT_EQ(slot.numel * (split ? l.tp : 1), whole_numel.at(whole_name)) << slot.name;
      aligned += (slot.numel + 63) / 64 * 64;
    }
    const int64_t expect = layer_split / (l.tp * l.pp) + layer_replicated / l.pp +
                           (first ? word / l.tp + position : 0) +
                           (last ? final_ln + (first ? 0 : word / l.tp) : 0);
    EXPECT_EQ(opt->num_parameters(), expect) << "rank " << rank;
    params_of[rank] = opt->num_parameters();

    // Bytes.
    const bool shard_state = l.distributed_optimizer && l.dp > 1;
    const int64_t align = 64 * (shard_state ? l.dp : 1);
    const int64_t padded = (aligned + align - 1) / align * align;
    ASSERT_EQ(opt->model_params().numel(), padded) << "rank " << rank;
    const int64_t local = shard_state ? padded / l.dp : padded;
    const auto m = opt->memory_bytes();
    EXPECT_EQ(m.params, 2 * padded) << "rank " << rank;
    EXPECT_EQ(m.grads, 2 * padded) << "rank " << rank;
    EXPECT_EQ(m.master_grads, 4 * padded) << "rank " << rank;
    EXPECT_EQ(m.master_params, 4 * local) << "rank " << rank;
    EXPECT_EQ(m.optimizer_state, 8 * local) << "rank " << rank;
    EXPECT_EQ(m.temporary, 0) << "rank " << rank;
    int64_t covered = 0;
    for (const auto& s : opt->segments()) covered += s.numel;
    EXPECT_EQ(covered, local) << "rank " << rank;
    state_bytes[rank] = m.master_params + m.optimizer_state;
  });

  // Over all ranks: the split parameters once per stage over TP, the replicated ones TP times,
  // the tied embedding twice with PP > 1; everything DP times. The optimizer state of a DP
  // group sums to one copy of its stage's (padded) state with the distributed optimizer.
  int64_t sum = 0;
  for (int64_t n : params_of) sum += n;
  const int64_t copies = l.pp > 1 ? word : 0;
  EXPECT_EQ(sum,
            l.dp * (layer_split + word + copies + l.tp * (layer_replicated + position + final_ln)));
  if (l.distributed_optimizer) {
    // Ranks dp r of one (tp, pp) are tp + tp_size * (dp + dp_size * pp) (DESIGN.md §4).
    for (int pp = 0; pp < l.pp; ++pp) {
      for (int tp = 0; tp < l.tp; ++tp) {
        const int r0 = tp + l.tp * (l.dp * pp);
        for (int dp = 1; dp < l.dp; ++dp) {
          EXPECT_EQ(state_bytes[tp + l.tp * (dp + l.dp * pp)], state_bytes[r0]);
        }
      }
    }
  }
  if (l.tp == 1 && l.pp == 1) {
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(params_of[r], whole_params);
      EXPECT_EQ(state_bytes[r] * l.dp,
                (4 + 8) * ((whole_padded + 64 * l.dp - 1) / (64 * l.dp) * (64 * l.dp)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, MemoryTest,
                         ::testing::Values(MemoryLayout{2, 2, 1, false},
                                           MemoryLayout{2, 2, 2, true},
                                           MemoryLayout{1, 1, 4, true}),
                         [](const ::testing::TestParamInfo<MemoryLayout>& info) {
                           const MemoryLayout& l = info.param;
                           return "tp" + std::to_string(l.tp) + "pp" + std::to_string(l.pp) + "dp" +
                                  std::to_string(l.dp) + (l.distributed_optimizer ? "distopt" : "");
                         });

}  // namespace
}  // namespace mt::engine
