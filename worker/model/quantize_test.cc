// Int8 weight-only inference on the CPU: the quantization's values, Int8Linear's dequantized
// path against a double-precision reference, and a quantized model against the same model
// given the dequantized weights (the GPU kernel has its own test, int8_linear_gpu_test.cc).
#include "worker/model/quantize.h"

#include <torch/torch.h>

#include <memory>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/kernels/int8_linear.h"
#include "worker/model/tiny_config_for_test.h"

namespace mt::model {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<GptModel> MakeShardedModel(const GptConfig& c, const ModelShard& shard = {}) {
  ModelBuildOptions build;
  build.seed = 7;
  auto model = GptModel::Create(c, shard, build);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

TEST(QuantizeInt8Test, ScalesAndValuesPerOutputChannel) {
  const torch::Tensor w =
      torch::tensor({{1.0f, -2.0f, 0.5f}, {0.0f, 0.0f, 0.0f}, {127.0f, 63.4f, -127.0f}});
  const kernels::Int8Weight q = kernels::QuantizeInt8(w);
  ASSERT_EQ(q.q.scalar_type(), torch::kChar);
  ASSERT_EQ(q.scale.scalar_type(), torch::kFloat);
  EXPECT_FLOAT_EQ(q.scale[0].item<float>(), 2.0f / 127.0f);
  EXPECT_FLOAT_EQ(q.scale[1].item<float>(), 1.0f);  // a zero row
  EXPECT_FLOAT_EQ(q.scale[2].item<float>(), 1.0f);
  // 1 / (2/127) = 63.5 rounds to even (64); 0.5 / (2/127) = 31.75 -> 32.
  const std::vector<int> expected = {64, -127, 32, 0, 0, 0, 127, 63, -127};
  const torch::Tensor flat = q.q.flatten().to(torch::kInt);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(flat[i].item<int>(), expected[i]) << "element " << i;
}

TEST(QuantizeInt8Test, DequantizedWeightIsWithinHalfAStepOfTheOriginal) {
  torch::manual_seed(3);
  const torch::Tensor w = torch::randn({64, 48}) * torch::rand({64, 1}) * 3;
  const kernels::Int8Weight q = kernels::QuantizeInt8(w);
  EXPECT_LE(q.q.to(torch::kInt).abs().max().item<int>(), 127);
  const torch::Tensor err = (kernels::DequantizeInt8(q, torch::kFloat) - w).abs();
  const torch::Tensor bound = q.scale.unsqueeze(1) * 0.5 * (1 + 1e-5);
  EXPECT_TRUE(err.le(bound).all().item<bool>()) << "max error " << err.max().item<float>();
  // Each row's largest magnitude maps to +-127 exactly.
  EXPECT_TRUE(q.q.to(torch::kInt).abs().amax(1).eq(127).all().item<bool>());
}

TEST(QuantizeInt8Test, LinearMatchesADoublePrecisionReference) {
  torch::manual_seed(5);
  const kernels::Int8Weight q = kernels::QuantizeInt8(torch::randn({24, 32}));
  const torch::Tensor x = torch::randn({3, 5, 32});
  const torch::Tensor bias = torch::randn({24});
  const torch::Tensor wd = q.q.to(torch::kDouble) * q.scale.to(torch::kDouble).unsqueeze(1);
  const torch::Tensor ref = torch::matmul(x.to(torch::kDouble), wd.t()) + bias.to(torch::kDouble);
  const torch::Tensor y = kernels::Int8Linear(x, q, bias);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{3, 5, 24}));
  EXPECT_LT((y.to(torch::kDouble) - ref).abs().max().item<double>(), 1e-5);
  const torch::Tensor g = kernels::Int8Linear(x, q, bias, /*gelu=*/true);
  const torch::Tensor gref = torch::gelu(ref, "tanh");
  EXPECT_LT((g.to(torch::kDouble) - gref).abs().max().item<double>(), 1e-5);
  const torch::Tensor nob = kernels::Int8Linear(x, q, torch::Tensor());
  EXPECT_LT((nob.to(torch::kDouble) - (ref - bias.to(torch::kDouble))).abs().max().item<double>(),
            1e-5);
}

TEST(QuantizeInt8LinearsTest, ModelComputesWithTheDequantizedWeights) {
  const GptConfig c = TinyConfig();
  std::shared_ptr<GptModel> quantized = MakeShardedModel(c);
  std::shared_ptr<GptModel> reference = MakeShardedModel(c);
  const int64_t bytes_before = ModelBytes(*quantized);
  MT_ASSERT_OK(QuantizeInt8Linears(*quantized));
  // The reference takes the dequantized weights, fp32, in place of its own.
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < quantized->decoder->layers.size(); ++i) {
      auto& ql = *quantized->decoder->layers[i];
      auto& rl = *reference->decoder->layers[i];
      rl.self_attention->linear_qkv->weight.copy_(
          kernels::DequantizeInt8(ql.self_attention->linear_qkv->int8, torch::kFloat));
      rl.self_attention->linear_proj->weight.copy_(
          kernels::DequantizeInt8(ql.self_attention->linear_proj->int8, torch::kFloat));
      rl.mlp->linear_fc1->weight.copy_(
          kernels::DequantizeInt8(ql.mlp->linear_fc1->int8, torch::kFloat));
      rl.mlp->linear_fc2->weight.copy_(
          kernels::DequantizeInt8(ql.mlp->linear_fc2->int8, torch::kFloat));
      EXPECT_EQ(ql.mlp->linear_fc1->weight.numel(), 0);
    }
  }
  quantized->eval();
  reference->eval();
  torch::manual_seed(9);
  const torch::Tensor tokens = torch::randint(c.vocab_size, {2, 16}, torch::kLong);
  torch::NoGradGuard no_grad;
  const torch::Tensor a = quantized->forward(tokens);
  const torch::Tensor b = reference->forward(tokens);
  EXPECT_LT((a - b).abs().max().item<float>(), 1e-5);
  // And they are not the unquantized model's logits.
  const torch::Tensor original = MakeShardedModel(c)->forward(tokens);
  EXPECT_GT((a - original).abs().max().item<float>(), 1e-4);
  // Per layer 12 h^2 fp32 weights become 12 h^2 int8 values and 3h + h + 4h + h fp32 scales.
  const int64_t h = c.hidden_size;
  const int64_t saved_per_layer = 12 * h * h * 4 - (12 * h * h + 9 * h * 4);
  EXPECT_EQ(bytes_before - ModelBytes(*quantized), c.num_layers * saved_per_layer);
}

TEST(QuantizeInt8LinearsTest, RefusesATensorParallelPartAndASecondQuantization) {
  const GptConfig c = TinyConfig();
  ModelShard shard;
  shard.tp_size = 2;
  std::shared_ptr<GptModel> part = MakeShardedModel(c, shard);
  const absl::Status tp = QuantizeInt8Linears(*part);
  EXPECT_EQ(tp.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(tp.message(), HasSubstr("one device"));
  std::shared_ptr<GptModel> whole = MakeShardedModel(c);
  MT_ASSERT_OK(QuantizeInt8Linears(*whole));
  const absl::Status again = QuantizeInt8Linears(*whole);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.message(), HasSubstr("already quantized"));
}

}  // namespace
}  // namespace mt::model
