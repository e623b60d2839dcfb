// The overlapped sequence-parallel linears (tp_overlap.h) over real Gloo groups (one thread
// per rank) against the unfused mappings of tensor_parallel.h followed or preceded by a plain
// linear: forward and every gradient. fp64, so the only difference (the ring's summation
// order) stays below 1e-12.
#include "worker/parallel/tp_overlap.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "worker/parallel/dist.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/rank_threads_testing.h"
#include "worker/parallel/tensor_parallel.h"

namespace mt::parallel::tp_overlap_test {
namespace {

constexpr int64_t kB = 2, kS = 12, kH = 10, kO = 6;
constexpr double kTolerance = 1e-12;

torch::Tensor Rand(at::IntArrayRef shape, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randn(shape, gen, torch::kDouble);
}

double MaxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a - b).abs().max().item<double>();
}

// A leaf that requires grad, and a second leaf with the same values for the reference.
std::pair<torch::Tensor, torch::Tensor> Twins(const torch::Tensor& t) {
  return {t.clone().requires_grad_(true), t.clone().requires_grad_(true)};
}

class TpOverlapTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  }
  void Run(const std::function<void(int rank, const GroupHandle& tp)>& fn) {
    for (const std::string& e : testing::RunRanks(
             testing::LayoutOf(GetParam(), 1, 1),
             [&](int rank, std::shared_ptr<ProcessGroups> g) { fn(rank, g->tp()); })) {
      EXPECT_EQ(e, "");
    }
  }
};

TEST_P(TpOverlapTest, AllGatherLinearIsGatherThenLinear) {
  const int n = GetParam();
  Run([n](int r, const GroupHandle& g) {
    const int64_t c = kS / n;
    auto [x, x_ref] = Twins(Rand({kB, c, kH}, 10 + r));
    auto [w, w_ref] = Twins(Rand({kO, kH}, 20 + r));  // this rank's column shard
    auto [b, b_ref] = Twins(Rand({kO}, 30 + r));
    const torch::Tensor y = AllGatherLinear(x, w, b, &g);
    const torch::Tensor y_ref =
        torch::nn::functional::linear(GatherFromSequenceParallelRegion(x_ref, &g), w_ref, b_ref);
    EXPECT_LE(MaxDiff(y, y_ref), kTolerance);

    const torch::Tensor dy = Rand({kB, kS, kO}, 40 + r);
    y.backward(dy);
    y_ref.backward(dy);
    EXPECT_LE(MaxDiff(x.grad(), x_ref.grad()), kTolerance);
    EXPECT_LE(MaxDiff(w.grad(), w_ref.grad()), kTolerance);
    EXPECT_LE(MaxDiff(b.grad(), b_ref.grad()), kTolerance);
  });
}

TEST_P(TpOverlapTest, AllGatherLinearWithoutBiasAndAStridedInput) {
  const int n = GetParam();
  Run([n](int r, const GroupHandle& g) {
    const int64_t c = kS / n;
    // [b, c, h] as a transposed view of [b, h, c]: not contiguous.
    auto [base, base_ref] = Twins(Rand({kB, kH, c}, 50 + r));
    auto [w, w_ref] = Twins(Rand({kO, kH}, 60 + r));
    const torch::Tensor y = AllGatherLinear(base.transpose(1, 2), w, {}, &g);
    const torch::Tensor y_ref =
        torch::matmul(GatherFromSequenceParallelRegion(base_ref.transpose(1, 2), &g), w_ref.t());
    EXPECT_LE(MaxDiff(y, y_ref), kTolerance);
    const torch::Tensor dy = Rand({kB, kS, kO}, 70 + r);
    y.backward(dy);
    y_ref.backward(dy);
    EXPECT_LE(MaxDiff(base.grad(), base_ref.grad()), kTolerance);
    EXPECT_LE(MaxDiff(w.grad(), w_ref.grad()), kTolerance);
  });
}

TEST_P(TpOverlapTest, LinearReduceScatterIsLinearThenReduceScatter) {
  const int n = GetParam();
  Run([n](int r, const GroupHandle& g) {
    auto [x, x_ref] = Twins(Rand({kB, kS, kH}, 80 + r));  // this rank's row-shard input
    auto [w, w_ref] = Twins(Rand({kO, kH}, 90 + r));
    const torch::Tensor y = LinearReduceScatter(x, w, &g);
    const torch::Tensor y_ref =
        ReduceScatterToSequenceParallelRegion(torch::matmul(x_ref, w_ref.t()), &g);
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{kB, kS / n, kO}));
    EXPECT_LE(MaxDiff(y, y_ref), kTolerance);

    const torch::Tensor dy = Rand({kB, kS / n, kO}, 100 + r);
    y.backward(dy);
    y_ref.backward(dy);
    EXPECT_LE(MaxDiff(x.grad(), x_ref.grad()), kTolerance);
    EXPECT_LE(MaxDiff(w.grad(), w_ref.grad()), kTolerance);
  });
}

// The sum itself, not only agreement with the other path: chunk r of sum_q x_q w_q^T.
TEST_P(TpOverlapTest, LinearReduceScatterSumsEveryRanksProduct) {
  const int n = GetParam();
  Run([n](int r, const GroupHandle& g) {
    const int64_t c = kS / n;
    const torch::Tensor y =
        LinearReduceScatter(Rand({kB, kS, kH}, 80 + r), Rand({kO, kH}, 90 + r), &g);
    torch::Tensor want = torch::zeros({kB, kS, kO}, torch::kDouble);
    for (int q = 0; q < n; ++q)
      want += torch::matmul(Rand({kB, kS, kH}, 80 + q), Rand({kO, kH}, 90 + q).t());
    EXPECT_LE(MaxDiff(y, want.narrow(1, r * c, c)), kTolerance);
  });
}

TEST_P(TpOverlapTest, ASequenceTheGroupDoesNotDivideIsAnErrorOnEveryRank) {
  const int n = GetParam();
  Run([n](int r, const GroupHandle& g) {
    const torch::Tensor x = Rand({kB, kS * n + 1, kH}, 1 + r);
    try {
      LinearReduceScatter(x, Rand({kO, kH}, 2), &g);
      ADD_FAILURE() << "no error";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("not divisible by the tp/"), std::string::npos)
          << e.what();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, TpOverlapTest, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "tp" + std::to_string(info.param);
                         });

TEST(TpOverlapNoGroupTest, WithoutAGroupTheyArePlainLinears) {
  const torch::Tensor x = Rand({kB, kS, kH}, 1);
  const torch::Tensor w = Rand({kO, kH}, 2);
  const torch::Tensor b = Rand({kO}, 3);
  EXPECT_TRUE(torch::allclose(AllGatherLinear(x, w, b, nullptr),
                              torch::nn::functional::linear(x, w, b), 0, kTolerance));
  EXPECT_TRUE(
      torch::allclose(LinearReduceScatter(x, w, nullptr), torch::matmul(x, w.t()), 0, kTolerance));
}

}  // namespace
}  // namespace mt::parallel::tp_overlap_test
