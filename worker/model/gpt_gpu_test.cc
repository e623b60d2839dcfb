// GPU checks of the sharded model API (label `gpu`; skips without CUDA):
// - a model built directly on the device in bf16 holds exactly the CPU fp32 weights rounded
//   to bf16, and its loss is the fp32 loss within bf16 tolerance (2e-2 relative);
// - fused_lm_head gives the default head's loss and gradients (bf16 tolerances there);
// - fused_layernorm gives LibTorch's LayerNorm's loss and gradients (fp32 and bf16);
// - fused_mlp gives the unfused MLP's loss and gradients (fp32 and bf16);
// - fused_qkv gives LibTorch's split's loss and gradients (fp32 and bf16);
// - pipeline stages chained on the device give the whole model's loss (the same kernels:
//   1e-3 relative);
// - the vocabulary-parallel cross entropy (no group: one rank) on CUDA is the full cross
//   entropy, forward and backward (fp32, 1e-5);
// - with two GPUs and NCCL: a TP=2 model, with and without sequence parallelism, over a real
//   NCCL group (one thread per GPU) gives the one-GPU loss and gradient slices in fp32
//   (1e-4 relative: GPU reductions run in another order).
#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "worker/model/gpt.h"
#include "worker/model/sharding.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/rank_threads_testing.h"
#include "worker/parallel/tensor_parallel.h"

namespace mt::model {
namespace {

#define MT_SKIP_WITHOUT_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

GptConfig SmallConfig() {
  GptConfig c;
  c.num_layers = 4;
  c.hidden_size = 128;
  c.num_attention_heads = 4;
  c.seq_length = 64;
  c.vocab_size = 1024;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  return c.Resolve();
}

std::shared_ptr<GptModel> Build(const GptConfig& c, const ModelShard& shard, torch::Device device,
                                torch::ScalarType dtype) {
  ModelBuildOptions o;
  o.seed = 11;
  o.device = device;
  o.dtype = dtype;
  auto m = GptModel::Create(c, shard, o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : nullptr;
}

torch::Tensor Sample(const GptConfig& c) {
  torch::manual_seed(3);
  return torch::randint(c.vocab_size, {4, c.seq_length + 1}, torch::kLong);
}

TEST(GptGpuTest, BuildsOnTheDeviceInBf16WithTheCpuWeights) {
  MT_SKIP_WITHOUT_GPU();
  const GptConfig c = SmallConfig();
  auto cpu = Build(c, {}, torch::kCPU, torch::kFloat);
  auto gpu = Build(c, {}, torch::kCUDA, torch::kBFloat16);
  std::map<std::string, torch::Tensor> ref;
  for (const auto& p : cpu->named_parameters()) ref[p.key()] = p.value();
  for (const auto& p : gpu->named_parameters()) {
    ASSERT_TRUE(p.value().is_cuda()) << p.key();
    ASSERT_EQ(p.value().scalar_type(), torch::kBFloat16) << p.key();
    EXPECT_TRUE(torch::equal(p.value().cpu(), ref.at(p.key()).to(torch::kBFloat16))) << p.key();
  }
  const torch::Tensor sample = Sample(c);
  const double want = cpu->LossOnSample(sample).item<double>();
  const torch::Tensor loss = gpu->LossOnSample(sample.to(torch::kCUDA));
  EXPECT_NEAR(loss.item<double>(), want, 2e-2 * want);
  loss.backward();
  for (const auto& p : gpu->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
  }
}

// fused_lm_head (the output layer and the loss in one node, kernels::FusedLinearCrossEntropy)
// against the default path (linear, then the fused cross entropy) on the same bf16 model: loss
// within 1e-3 relative, every gradient within 2e-2 relative + 1e-3 x its largest entry (both
// round the logits' gradient to bf16; they differ in where the incoming gradient is applied).
TEST(GptGpuTest, FusedLmHeadMatchesTheDefaultHead) {
  MT_SKIP_WITHOUT_GPU();
  const torch::Tensor sample = Sample(SmallConfig()).to(torch::kCUDA);
  auto run = [&](bool fused) {
    GptConfig c = SmallConfig();
    c.fused_lm_head = fused;
    auto m = Build(c, {}, torch::kCUDA, torch::kBFloat16);
    const torch::Tensor loss = m->LossOnSample(sample);
    (loss * 1024.0).backward();
    std::map<std::string, torch::Tensor> out{{"loss", loss.detach().to(torch::kFloat)}};
    for (const auto& p : m->named_parameters()) out[p.key()] = p.value().grad().to(torch::kFloat);
    return out;
  };
  const auto want = run(false);
  const auto got = run(true);
  EXPECT_NEAR(got.at("loss").item<double>(), want.at("loss").item<double>(),
              1e-3 * want.at("loss").item<double>());
  for (const auto& [name, w] : want) {
    if (name == "loss") continue;
    const torch::Tensor& g = got.at(name);
    const double scale = w.abs().max().item<double>();
    const double excess = ((g - w).abs() - (2e-2 * w.abs() + 1e-3 * scale)).max().item<double>();
    EXPECT_LE(excess, 0.0) << name;
  }
}

// The loss on `sample` and every parameter's gradient (as fp32) of a model of config `c`.
std::map<std::string, torch::Tensor> LossAndGradients(const GptConfig& c, torch::ScalarType dtype,
                                                      const torch::Tensor& sample) {
  auto m = Build(c, {}, torch::kCUDA, dtype);
  const torch::Tensor loss = m->LossOnSample(sample);
  loss.backward();
  std::map<std::string, torch::Tensor> out{{"loss", loss.detach().to(torch::kFloat)}};
  for (const auto& p : m->named_parameters()) out[p.key()] = p.value().grad().to(torch::kFloat);
  return out;
}

// A fused path (`use(&config, true)`) against the unfused one on the same model: fp32 loss
// within 1e-5 relative and every gradient within 1e-3 relative + 1e-4 x the tensor's largest
// entry (sums in another order); bf16 loss within 1e-2 relative.
void ExpectFusedMatchesUnfused(const std::function<void(GptConfig*, bool)>& use,
                               const GptConfig& base = SmallConfig()) {
  const torch::Tensor sample = Sample(base).to(torch::kCUDA);
  auto run = [&](bool fused, torch::ScalarType dtype) {
    GptConfig c = base;
    use(&c, fused);
    return LossAndGradients(c, dtype, sample);
  };
  const auto want = run(false, torch::kFloat);
  const auto got = run(true, torch::kFloat);
  const double l = want.at("loss").item<double>();
  EXPECT_NEAR(got.at("loss").item<double>(), l, 1e-5 * l);
  for (const auto& [name, w] : want) {
    if (name == "loss") continue;
    const double scale = w.abs().max().item<double>();
    const torch::Tensor& g = got.at(name);
    EXPECT_LE(((g - w).abs() - (1e-3 * w.abs() + 1e-4 * scale)).max().item<double>(), 0.0) << name;
  }
  const double l16 = run(false, torch::kBFloat16).at("loss").item<double>();
  EXPECT_NEAR(run(true, torch::kBFloat16).at("loss").item<double>(), l16, 1e-2 * l16);
}

// fused_layernorm (kernels::FusedLayerNorm / FusedAddLayerNorm) against LibTorch's LayerNorm
// and add.
TEST(GptGpuTest, FusedLayerNormMatchesLibTorchs) {
  MT_SKIP_WITHOUT_GPU();
  ExpectFusedMatchesUnfused([](GptConfig* c, bool fused) { c->fused_layernorm = fused; });
}

// fused_mlp (kernels::FusedMlp: bias + GELU and their gradients in cuBLASLt epilogues) against
// the unfused MLP.
TEST(GptGpuTest, FusedMlpMatchesTheUnfusedMlp) {
  MT_SKIP_WITHOUT_GPU();
  ExpectFusedMatchesUnfused([](GptConfig* c, bool fused) { c->fused_mlp = fused; });
}

// fused_qkv (kernels::QkvHeads: the QKV projection's gradient gathered with its bias sums)
// against LibTorch's split, with and without selective recomputation (the kernel test checks
// the node bit for bit; here the attention's backward may add in another order between runs).
TEST(GptGpuTest, FusedQkvMatchesTheSplit) {
  MT_SKIP_WITHOUT_GPU();
  for (RecomputeGranularity recompute :
       {RecomputeGranularity::kNone, RecomputeGranularity::kSelective}) {
    GptConfig base = SmallConfig();
    base.recompute_granularity = recompute;
    ExpectFusedMatchesUnfused([](GptConfig* c, bool fused) { c->fused_qkv = fused; }, base);
  }
}

TEST(GptGpuTest, ChainedStagesOnTheDeviceGiveTheWholeModelsLoss) {
  MT_SKIP_WITHOUT_GPU();
  const GptConfig c = SmallConfig();
  auto whole = Build(c, {}, torch::kCUDA, torch::kBFloat16);
  ModelShard first;
  first.layers = {0, 1};
  first.post_process = false;
  ModelShard last;
  last.layers = {2, 3};
  last.pre_process = false;
  auto a = Build(c, first, torch::kCUDA, torch::kBFloat16);
  auto b = Build(c, last, torch::kCUDA, torch::kBFloat16);
  const torch::Tensor sample = Sample(c).to(torch::kCUDA);
  const int64_t s = c.seq_length;
  torch::NoGradGuard no_grad;
  const double want = whole->LossOnSample(sample).item<double>();
  const torch::Tensor hidden = a->ForwardStage(sample.narrow(1, 0, s), torch::Tensor());
  EXPECT_EQ(hidden.scalar_type(), torch::kBFloat16);
  const double got = b->ForwardStage(hidden, sample.narrow(1, 1, s)).item<double>();
  EXPECT_NEAR(got, want, 1e-3 * want);
}

TEST(GptGpuTest, VocabParallelCrossEntropyOnTheDevice) {
  MT_SKIP_WITHOUT_GPU();
  torch::manual_seed(5);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  const torch::Tensor logits = (torch::randn({64, 512}, opts) * 3).requires_grad_(true);
  const torch::Tensor targets = torch::randint(512, {64}, opts.dtype(torch::kLong));
  const torch::Tensor want = torch::nn::functional::cross_entropy(
      logits, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  want.sum().backward();
  const torch::Tensor want_grad = logits.grad().clone();
  const torch::Tensor x = logits.detach().clone().requires_grad_(true);
  const torch::Tensor got = parallel::VocabParallelCrossEntropy(x, targets, 0, nullptr);
  EXPECT_LE((got - want.detach()).abs().max().item<double>(), 1e-5);
  got.sum().backward();
  EXPECT_LE((x.grad() - want_grad).abs().max().item<double>(), 1e-5);
}

class GptTwoGpuTest : public ::testing::TestWithParam<bool> {};

TEST_P(GptTwoGpuTest, TensorParallelOverNcclMatchesOneGpu) {
  MT_SKIP_WITHOUT_GPU();
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  if (!parallel::HasBackend("nccl")) GTEST_SKIP() << "no NCCL in this build";
  const bool sp = GetParam();
  GptConfig c = SmallConfig();
  c.attention_backend = AttentionBackend::kMath;
  const torch::Tensor sample = Sample(c);
  auto ref_model = Build(c, {}, torch::Device(torch::kCUDA, 0), torch::kFloat);
  const torch::Tensor ref_loss = ref_model->LossOnSample(sample.to(torch::Device(torch::kCUDA, 0)));
  ref_loss.backward();
  std::map<std::string, torch::Tensor> ref_grads;
  for (const auto& p : ref_model->named_parameters()) ref_grads[p.key()] = p.value().grad().cpu();
  const double want = ref_loss.item<double>();

  const auto errors = parallel::testing::RunRanks(
      parallel::testing::LayoutOf(2, 1, 1, c.num_layers),
      [&](int rank, std::shared_ptr<parallel::ProcessGroups> groups) {
        const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(rank));
        ModelShard shard;
        shard.tp_size = 2;
        shard.tp_rank = groups->tp_rank();
        shard.tp_group = std::shared_ptr<const parallel::GroupHandle>(groups, &groups->tp());
        shard.sequence_parallel = sp;
        auto m = Build(c, shard, device, torch::kFloat);
        ASSERT_NE(m, nullptr);
        const torch::Tensor loss = m->LossOnSample(sample.to(device));
        loss.backward();
        EXPECT_NEAR(loss.item<double>(), want, 1e-4 * want) << "rank " << rank;
        ASSERT_TRUE(
            parallel::AllReduceCoalesced(m->SequenceParallelGradients(), shard.group()).ok());
        for (const auto& p : m->named_parameters()) {
          torch::Tensor full = ref_grads.at(p.key());
          const TpSplit split = TensorParallelSplit(p.key());
          if (split != TpSplit::kReplicated) {
            const int64_t dim = split == TpSplit::kDim0 ? 0 : 1;
            const int64_t part = full.size(dim) / 2;
            full = full.narrow(dim, shard.tp_rank * part, part);
          }
          const double scale = full.abs().max().item<double>() + 1e-12;
          EXPECT_LE((p.value().grad().cpu() - full).abs().max().item<double>(), 1e-4 * scale)
              << p.key() << " rank " << rank;
        }
      },
      "nccl");
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

INSTANTIATE_TEST_SUITE_P(SequenceParallel, GptTwoGpuTest, ::testing::Bool());

}  // namespace
}  // namespace mt::model
