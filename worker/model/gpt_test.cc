// The GPT model on the CPU: initial loss, gradients against finite differences, causality,
// initialisation statistics, activation recomputation and the attention backends.
#include "worker/model/gpt.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/utils.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/recompute.h"
#include "worker/model/tiny_config_for_test.h"

namespace mt::model {
namespace {

std::shared_ptr<GptModel> MakeModel(const GptConfig& c, uint64_t seed = 1) {
  torch::manual_seed(seed);
  auto model = GptModel::Create(c);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

torch::Tensor RandomTokens(int64_t b, int64_t s, int64_t vocab, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(vocab, {b, s}, torch::kLong);
}

TEST(GptModelTest, ParameterNamesAndCountFollowMegatron) {
  for (bool untie : {false, true}) {
    GptConfig c = TinyConfig();
    c.untie_embeddings_and_output_weights = untie;
    auto model = MakeModel(c);
    int64_t total = 0;
    std::set<std::string> names;
    for (const auto& p : model->named_parameters()) {
      names.insert(p.key());
      total += p.value().numel();
    }
    EXPECT_EQ(total, CountParameters(c));
    EXPECT_TRUE(names.count("embedding.word_embeddings.weight"));
    EXPECT_TRUE(names.count("embedding.position_embeddings.weight"));
    EXPECT_TRUE(names.count("decoder.layers.1.self_attention.linear_qkv.weight"));
    EXPECT_TRUE(names.count("decoder.layers.1.self_attention.linear_proj.bias"));
    EXPECT_TRUE(names.count("decoder.layers.0.input_layernorm.weight"));
    EXPECT_TRUE(names.count("decoder.layers.0.pre_mlp_layernorm.bias"));
    EXPECT_TRUE(names.count("decoder.layers.0.mlp.linear_fc1.weight"));
    EXPECT_TRUE(names.count("decoder.layers.0.mlp.linear_fc2.weight"));
    EXPECT_TRUE(names.count("decoder.final_layernorm.weight"));
    EXPECT_EQ(names.count("output_layer.weight"), untie ? 1u : 0u);
    EXPECT_EQ(names.size(), untie ? 29u : 28u);
  }
}

TEST(GptModelTest, InitialisationFollowsMegatron) {
  GptConfig c = TinyConfig();
  c.hidden_size = 128;
  c.num_attention_heads = 4;
  c.num_layers = 8;
  c.init_method_std = 0.02;
  c.Resolve();
  auto model = MakeModel(c);
  const double scaled = 0.02 / std::sqrt(2.0 * 8);
  for (const auto& p : model->named_parameters()) {
    const std::string& name = p.key();
    const torch::Tensor& t = p.value();
    const bool is_bias = name.size() > 5 && name.substr(name.size() - 5) == ".bias";
    if (name.find("layernorm") != std::string::npos) {
      EXPECT_TRUE(torch::equal(t, is_bias ? torch::zeros_like(t) : torch::ones_like(t))) << name;
    } else if (is_bias) {
      EXPECT_TRUE(torch::equal(t, torch::zeros_like(t))) << name;
    } else {
      const bool output_proj = name.find("linear_proj") != std::string::npos ||
                               name.find("linear_fc2") != std::string::npos;
      const double want = output_proj ? scaled : 0.02;
      // Five standard errors of the sample std (want / sqrt(2n)) and mean (want / sqrt(n)):
      // 4K to 16K samples per matrix.
      const double n = static_cast<double>(t.numel());
      EXPECT_NEAR(t.std().item<double>(), want, 5.0 * want / std::sqrt(2.0 * n)) << name;
      EXPECT_NEAR(t.mean().item<double>(), 0.0, 5.0 * want / std::sqrt(n)) << name;
    }
  }
  EXPECT_EQ(model->output_weight().data_ptr(),
            model->embedding->word_embeddings->weight.data_ptr());  // tied
}

// With a tiny init std the logits are ~0, so the loss is ln(padded vocabulary) = ln(128).
TEST(GptModelTest, InitialLossIsLnVocab) {
  GptConfig c = TinyConfig();
  c.init_method_std = 0.002;
  auto model = MakeModel(c);
  const torch::Tensor sample = RandomTokens(8, c.seq_length + 1, c.vocab_size, 7);
  const double loss = model->LossOnSample(sample).item<double>();
  const double want = std::log(128.0);
  EXPECT_NEAR(loss, want, 0.01 * want);
  // Default std 0.02 as well (the margin is smaller but still within 1%).
  c.init_method_std = 0.02;
  auto model2 = MakeModel(c);
  EXPECT_NEAR(model2->LossOnSample(sample).item<double>(), want, 0.01 * want);
}

// fused_lm_head and fused_layernorm on the CPU take the eager fallbacks: the same loss and
// gradients as the default path (fp64: 1e-12).
TEST(GptModelTest, FusedHeadAndLayerNormFallbacksMatchDefault) {
  GptConfig c = TinyConfig();
  const torch::Tensor sample = RandomTokens(3, c.seq_length + 1, c.vocab_size, 5);
  auto run = [&](bool fused) {
    c.fused_lm_head = fused;
    c.fused_layernorm = fused;
    auto model = MakeModel(c);
    model->to(torch::kDouble);
    const torch::Tensor loss = model->LossOnSample(sample);
    loss.backward();
    std::vector<torch::Tensor> out{loss.detach()};
    for (const auto& p : model->named_parameters()) out.push_back(p.value().grad());
    return out;
  };
  const auto want = run(false);
  const auto got = run(true);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-12, 1e-12)) << "tensor " << i;
  }
}

// GptConfig::fold_linear_bias: the output projection's and fc2's biases added by the next
// LayerNorm (the eager fallback here) give the loss and gradients of the biases in the GEMMs
// (fp64: 1e-12), with the fused and the unfused MLP and with full recomputation. (A pipeline
// stage's end, where the pending sum is made by an add: GptShardTest.ChainedStages*.)
TEST(GptModelTest, FoldedLinearBiasesGiveTheSameLossAndGradients) {
  for (const bool fused_mlp : {true, false}) {
    for (const bool recompute : {false, true}) {
      GptConfig c = TinyConfig();
      c.fused_mlp = fused_mlp;
      if (recompute) {
        c.recompute_granularity = RecomputeGranularity::kFull;
        c.recompute_method = RecomputeMethod::kUniform;
        c.recompute_num_layers = 1;
      }
      const torch::Tensor sample = RandomTokens(3, c.seq_length + 1, c.vocab_size, 7);
      auto run = [&](bool fold) {
        c.fold_linear_bias = fold;
        auto model = MakeModel(c, 3);
        model->to(torch::kDouble);
        {  // biases away from their zero initialisation, so that a lost bias shows
          torch::NoGradGuard no_grad;
          for (auto& p : model->parameters()) p.add_(0.1 * torch::randn_like(p));
        }
        EXPECT_EQ(model->decoder->layers[0]->FoldsLinearBias(), fold);
        const torch::Tensor loss = model->LossOnSample(sample);
        loss.backward();
        std::map<std::string, torch::Tensor> out{{"loss", loss.detach()}};
        for (const auto& p : model->named_parameters()) out[p.key()] = p.value().grad();
        return out;
      };
      torch::manual_seed(11);
      const auto want = run(false);
      torch::manual_seed(11);
      const auto got = run(true);
      ASSERT_EQ(got.size(), want.size());
      for (const auto& [name, w] : want) {
        ASSERT_TRUE(got.at(name).defined()) << name;
        EXPECT_TRUE(torch::allclose(got.at(name), w, 1e-12, 1e-12))
            << name << " fused_mlp " << fused_mlp << " recompute " << recompute;
      }
      // The biases' gradients are not zero: the test can tell a dropped bias.
      EXPECT_GT(
          want.at("decoder.layers.0.self_attention.linear_proj.bias").abs().max().item<double>(),
          1e-6);
      EXPECT_GT(want.at("decoder.layers.1.mlp.linear_fc2.bias").abs().max().item<double>(), 1e-6);
    }
  }
}

// The fold applies in training mode only, with fused_layernorm and without hidden dropout; the
// eval-mode forward is the same with the switch on or off, bit for bit.
TEST(GptModelTest, LinearBiasesFoldOnlyInTrainingWithoutDropout) {
  GptConfig c = TinyConfig();
  auto model = MakeModel(c);
  EXPECT_TRUE(model->decoder->layers[1]->FoldsLinearBias());
  model->eval();
  EXPECT_FALSE(model->decoder->layers[1]->FoldsLinearBias());
  const torch::Tensor tokens = RandomTokens(2, c.seq_length, c.vocab_size, 3);
  torch::NoGradGuard no_grad;
  const torch::Tensor folded_eval = model->forward(tokens);
  c.fold_linear_bias = false;
  auto plain = MakeModel(c);
  plain->eval();
  EXPECT_TRUE(torch::equal(plain->forward(tokens), folded_eval));

  GptConfig dropout = TinyConfig();
  dropout.hidden_dropout = 0.1;
  EXPECT_FALSE(MakeModel(dropout)->decoder->layers[0]->FoldsLinearBias());
  GptConfig unfused = TinyConfig();
  unfused.fused_layernorm = false;
  EXPECT_FALSE(MakeModel(unfused)->decoder->layers[0]->FoldsLinearBias());
}

// GptConfig::fused_dropout_add: the hidden dropout applied by the next LayerNorm to x + bias, the
// biases folded with it. On the CPU the LayerNorm falls back to LibTorch's dropout, which draws
// the same masks in the same order as the unfused model's (the attention's, then the MLP's, layer
// by layer; no attention dropout here), so the loss and every gradient equal the unfused run's
// (fp64, 1e-12). In eval mode nothing is dropped or folded, and the loss differs from the
// training-mode one (the masks apply).
TEST(GptModelTest, FusedDropoutAddGivesTheUnfusedLossAndGradients) {
  GptConfig c = TinyConfig();
  c.hidden_dropout = 0.2;
  c.attention_dropout = 0.0;
  const torch::Tensor sample = RandomTokens(3, c.seq_length + 1, c.vocab_size, 9);
  auto run = [&](bool fused, bool train) {
    c.fused_dropout_add = fused;
    auto model = MakeModel(c, 3);
    model->to(torch::kDouble);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.add_(0.1 * torch::randn_like(p));
    }
    if (!train) model->eval();
    const auto& layer = model->decoder->layers[0];
    EXPECT_EQ(layer->FoldsLinearBias(), fused && train);
    EXPECT_EQ(layer->FusedDropout(), fused && train ? 0.2 : 0.0);
    torch::manual_seed(21);
    const torch::Tensor loss = model->LossOnSample(sample);
    std::map<std::string, torch::Tensor> out{{"loss", loss.detach()}};
    if (train) {
      loss.backward();
      for (const auto& p : model->named_parameters()) out[p.key()] = p.value().grad();
    }
    return out;
  };
  torch::manual_seed(11);
  const auto want = run(false, true);
  torch::manual_seed(11);
  const auto got = run(true, true);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.at(name).defined()) << name;
    EXPECT_TRUE(torch::allclose(got.at(name), w, 1e-12, 1e-12))
        << name << " " << (got.at(name) - w).abs().max().item<double>() << " of "
        << w.abs().max().item<double>();
  }
  torch::manual_seed(11);
  const auto eval_fused = run(true, false);
  torch::manual_seed(11);
  const auto eval_plain = run(false, false);
  EXPECT_TRUE(torch::equal(eval_fused.at("loss"), eval_plain.at("loss")));
  EXPECT_GT((eval_fused.at("loss") - want.at("loss")).abs().item<double>(), 1e-6);
}

TEST(GptModelTest, LogitsAreCausal) {
  auto model = MakeModel(TinyConfig());
  torch::NoGradGuard no_grad;
  torch::Tensor tokens = RandomTokens(2, 16, 128, 3);
  const torch::Tensor before = model->forward(tokens);
  tokens.index_put_({torch::indexing::Slice(), 10},
                    (tokens.index({0, 10}).item<int64_t>() + 1) % 128);
  const torch::Tensor after = model->forward(tokens);
  using torch::indexing::Slice;
  EXPECT_TRUE(
      torch::equal(before.index({Slice(), Slice(0, 10)}), after.index({Slice(), Slice(0, 10)})));
  EXPECT_FALSE(
      torch::allclose(before.index({Slice(), Slice(10)}), after.index({Slice(), Slice(10)})));
}

// Central differences in float64 on a sample of elements of every parameter tensor, with the
// weights perturbed away from their structured initial values (LayerNorm = 1, biases = 0).
// Error budget: truncation ~h^2 = 1e-12, rounding ~1e-16 * loss / h ~ 1e-9, hence
// |fd - autograd| <= 1e-5 * |autograd| + 1e-8.
TEST(GptModelTest, GradientsMatchFiniteDifferencesInFloat64) {
  for (bool untie : {false, true}) {
    GptConfig c = TinyConfig();
    c.num_layers = 2;
    c.hidden_size = 8;
    c.num_attention_heads = 2;
    c.seq_length = 5;
    c.vocab_size = 11;
    c.make_vocab_size_divisible_by = 16;  // padded vocabulary 16: padded rows are tested too
    c.init_method_std = 0.2;
    c.untie_embeddings_and_output_weights = untie;
    c.Resolve();
    auto model = MakeModel(c, 5);
    model->to(torch::kDouble);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.add_(0.1 * torch::randn_like(p));
    }
    const torch::Tensor sample = RandomTokens(3, c.seq_length + 1, c.vocab_size, 11);
    torch::Tensor loss = model->LossOnSample(sample);
    loss.backward();

    auto loss_at = [&] {
      torch::NoGradGuard no_grad;
      return model->LossOnSample(sample).item<double>();
    };
    const double h = 1e-6;
    int checked = 0;
    torch::manual_seed(99);
    for (const auto& p : model->named_parameters()) {
      torch::Tensor w = p.value();
      const torch::Tensor grad = w.grad().reshape({-1});
      torch::Tensor flat = w.detach().view({-1});
      std::vector<int64_t> picks = {0, flat.numel() - 1};
      for (int i = 0; i < 3; ++i)
        picks.push_back(torch::randint(flat.numel(), {1}).item<int64_t>());
      for (int64_t idx : picks) {
        const double orig = flat[idx].item<double>();
        flat[idx] = orig + h;
        const double up = loss_at();
        flat[idx] = orig - h;
        const double down = loss_at();
        flat[idx] = orig;
        const double fd = (up - down) / (2 * h);
        const double g = grad[idx].item<double>();
        EXPECT_NEAR(fd, g, 1e-5 * std::abs(g) + 1e-8) << p.key() << "[" << idx << "]";
        ++checked;
      }
    }
    EXPECT_GE(checked, 5 * (untie ? 29 : 28));
  }
}

TEST(GptModelTest, DropoutIsActiveInTrainingOnly) {
  GptConfig c = TinyConfig();
  c.hidden_dropout = 0.1;
  c.attention_dropout = 0.1;
  auto model = MakeModel(c);
  const torch::Tensor sample = RandomTokens(4, 17, 128, 3);
  torch::NoGradGuard no_grad;
  torch::manual_seed(1);
  const double a = model->LossOnSample(sample).item<double>();
  torch::manual_seed(2);
  const double b = model->LossOnSample(sample).item<double>();
  torch::manual_seed(1);
  const double a2 = model->LossOnSample(sample).item<double>();
  EXPECT_NE(a, b);
  EXPECT_EQ(a, a2);
  model->eval();
  torch::manual_seed(1);
  const double e1 = model->LossOnSample(sample).item<double>();
  torch::manual_seed(2);
  const double e2 = model->LossOnSample(sample).item<double>();
  EXPECT_EQ(e1, e2);
}

struct RecomputeCase {
  const char* name;
  RecomputeGranularity granularity;
  RecomputeMethod method;
  int64_t num_layers;
  int want_units;    // recompute nodes in the graph
  int want_softmax;  // attention softmax nodes kept in the graph (activations held)
};

// Autograd nodes reachable from `root` named `what` or containing "::what".
int CountNodes(const torch::Tensor& root, const std::string& what) {
  std::set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack = {root.grad_fn().get()};
  int count = 0;
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    const std::string name = node->name();  // e.g. CppNode<mt::model::...::RecomputeFunction>
    if (name == what || name.find("::" + what) != std::string::npos) ++count;
    for (const auto& edge : node->next_edges()) stack.push_back(edge.function.get());
  }
  return count;
}

// Loss and every gradient with recomputation equal those without it, with dropout on: the
// recomputed forward must reproduce the dropout masks (the RNG state is replayed) and must
// leave the RNG stream where the plain forward leaves it. fp32; tolerance 1e-6 (absolute on
// the loss, max-abs on gradients).
TEST(RecomputeTest, SameLossAndGradientsWithDropout) {
  GptConfig c = TinyConfig();
  c.num_layers = 3;
  c.hidden_dropout = 0.1;
  c.attention_dropout = 0.1;
  c.Resolve();
  auto model = MakeModel(c, 21);
  const torch::Tensor sample = RandomTokens(4, c.seq_length + 1, c.vocab_size, 4);

  auto run = [&](const RecomputeCase& rc, double* loss, double* next_random) {
    model->SetRecompute(rc.granularity, rc.method, rc.num_layers);
    model->zero_grad();
    torch::manual_seed(1234);
    torch::Tensor l = model->LossOnSample(sample);
    EXPECT_EQ(CountNodes(l, "RecomputeFunction"), rc.want_units) << rc.name;
    EXPECT_EQ(CountNodes(l, "SoftmaxBackward0"), rc.want_softmax) << rc.name;
    l.backward();
    *loss = l.item<double>();
    *next_random = torch::rand({1}).item<double>();  // the RNG stream after the step
    std::map<std::string, torch::Tensor> grads;
    for (const auto& p : model->named_parameters()) grads[p.key()] = p.value().grad().clone();
    return grads;
  };

  double ref_loss = 0, ref_next = 0;
  const auto ref = run({"none", RecomputeGranularity::kNone, RecomputeMethod::kUniform, 1, 0, 3},
                       &ref_loss, &ref_next);
  const RecomputeCase cases[] = {
      // 3 layers: uniform groups of k (ceil(3 / k) units); block: the first k layers.
      {"full uniform 1", RecomputeGranularity::kFull, RecomputeMethod::kUniform, 1, 3, 0},
      {"full uniform 2", RecomputeGranularity::kFull, RecomputeMethod::kUniform, 2, 2, 0},
      {"full uniform 3", RecomputeGranularity::kFull, RecomputeMethod::kUniform, 3, 1, 0},
      {"full block 1", RecomputeGranularity::kFull, RecomputeMethod::kBlock, 1, 1, 2},
      {"full block 3", RecomputeGranularity::kFull, RecomputeMethod::kBlock, 3, 3, 0},
      {"selective", RecomputeGranularity::kSelective, RecomputeMethod::kUniform, 1, 3, 0},
  };
  for (const RecomputeCase& rc : cases) {
    double loss = 0, next = 0;
    const auto grads = run(rc, &loss, &next);
    EXPECT_NEAR(loss, ref_loss, 1e-6) << rc.name;
    EXPECT_EQ(next, ref_next) << rc.name << ": recomputation moved the RNG stream";
    for (const auto& [name, g] : ref) {
      ASSERT_TRUE(grads.at(name).defined()) << rc.name << " " << name;
      EXPECT_LE((grads.at(name) - g).abs().max().item<double>(), 1e-6) << rc.name << " " << name;
    }
  }
}

// Without replaying the RNG, the recomputed dropout masks differ and so do the gradients: the
// check above is not vacuous.
TEST(RecomputeTest, WithoutRngReplayGradientsDiffer) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({64, 64}, torch::requires_grad());
  const torch::Tensor w = torch::randn({64, 64}, torch::requires_grad());
  auto fn = [&w](const std::vector<torch::Tensor>& in) {
    return torch::dropout(torch::matmul(in[0], w), 0.5, true);
  };
  auto grad_of_x = [&](bool preserve) {
    torch::manual_seed(10);
    torch::Tensor y = RecomputeInBackward(fn, {x}, {w}, preserve);
    torch::manual_seed(77);  // the backward runs with another RNG state
    y.sum().backward();
    torch::Tensor g = x.grad().clone();
    x.mutable_grad().reset();
    w.mutable_grad().reset();
    return g;
  };
  torch::manual_seed(10);
  torch::Tensor y = fn({x});
  y.sum().backward();
  const torch::Tensor reference = x.grad().clone();
  x.mutable_grad().reset();
  w.mutable_grad().reset();
  EXPECT_TRUE(torch::allclose(grad_of_x(true), reference, 1e-6, 1e-6));
  EXPECT_FALSE(torch::allclose(grad_of_x(false), reference, 1e-6, 1e-6));
}

TEST(AttentionTest, FusedEqualsMathOnCpu) {
  if (!FusedAttentionAvailable()) {
    GTEST_SKIP() << "at::scaled_dot_product_attention needs LibTorch >= 2.0; this is "
                 << TORCH_VERSION;
  }
  torch::manual_seed(0);
  auto opts = torch::TensorOptions().dtype(torch::kFloat);
  const torch::Tensor q = torch::randn({2, 4, 16, 8}, opts);
  const torch::Tensor k = torch::randn({2, 4, 16, 8}, opts);
  const torch::Tensor v = torch::randn({2, 4, 16, 8}, opts);
  const torch::Tensor math = CausalAttention(q, k, v, 0.0, false, AttentionBackend::kMath);
  const torch::Tensor fused = CausalAttention(q, k, v, 0.0, false, AttentionBackend::kFused);
  EXPECT_LE((math - fused).abs().max().item<double>(), 1e-5);
  // The whole model, with both backends.
  GptConfig c = TinyConfig();
  auto model = MakeModel(c);
  const torch::Tensor sample = RandomTokens(4, 17, 128, 3);
  const double l_math = model->LossOnSample(sample).item<double>();
  model->SetAttentionBackend(AttentionBackend::kFused);
  const double l_fused = model->LossOnSample(sample).item<double>();
  EXPECT_NEAR(l_math, l_fused, 1e-5);
}

TEST(AttentionTest, FusedBackendUnavailableIsAnError) {
  if (FusedAttentionAvailable()) GTEST_SKIP() << "fused attention is available here";
  GptConfig c = TinyConfig();
  c.attention_backend = AttentionBackend::kFused;
  EXPECT_THAT(GptModel::Create(c),
              ::mt::testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                      ::testing::HasSubstr("LibTorch >= 2.0")));
}

// The pinned fused kernels (cuDNN's, flash) run on CUDA devices only: a CPU model asking for
// them is refused at Create, naming the backend and the way out.
TEST(AttentionTest, PinnedKernelOnTheCpuIsAnError) {
  for (AttentionBackend backend : {AttentionBackend::kCudnn, AttentionBackend::kFlash}) {
    GptConfig c = TinyConfig();
    c.attention_backend = backend;
    const char* name = backend == AttentionBackend::kCudnn ? "cudnn" : "flash";
    EXPECT_THAT(
        GptModel::Create(c),
        ::mt::testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                ::testing::AllOf(::testing::HasSubstr(name),
                                                 ::testing::HasSubstr("--attention auto"))));
  }
}

TEST(AttentionTest, MathPathMatchesExplicitLoop) {
  // softmax over j <= i of q_i . k_j / sqrt(d), then the weighted sum of v_j.
  torch::manual_seed(1);
  auto opts = torch::TensorOptions().dtype(torch::kDouble);
  const torch::Tensor q = torch::randn({1, 1, 5, 3}, opts);
  const torch::Tensor k = torch::randn({1, 1, 5, 3}, opts);
  const torch::Tensor v = torch::randn({1, 1, 5, 3}, opts);
  const torch::Tensor out = CausalAttention(q, k, v, 0.0, false, AttentionBackend::kMath);
  for (int64_t i = 0; i < 5; ++i) {
    std::vector<double> w;
    double z = 0;
    for (int64_t j = 0; j <= i; ++j) {
      w.push_back(std::exp((q[0][0][i] * k[0][0][j]).sum().item<double>() / std::sqrt(3.0)));
      z += w.back();
    }
    for (int64_t d = 0; d < 3; ++d) {
      double want = 0;
      for (int64_t j = 0; j <= i; ++j) want += w[j] / z * v[0][0][j][d].item<double>();
      EXPECT_NEAR(out[0][0][i][d].item<double>(), want, 1e-12);
    }
  }
}

}  // namespace
}  // namespace mt::model
