// Megatron's tensor-parallel mappings and the vocabulary-parallel cross entropy over real Gloo
// groups (one thread per rank), forward and backward, against the unsharded math on one
// thread. Every rank derives its inputs from fixed seeds, so each can compute the reference
// itself. Tolerances: 1e-6 (fp32 sums in another order); exact where nothing is summed.
#include "worker/parallel/tensor_parallel.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "worker/parallel/dist.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/rank_threads_testing.h"

namespace mt::parallel {
namespace {

torch::Tensor Rand(at::IntArrayRef shape, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randn(shape, gen, torch::kFloat);
}

double MaxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

class TensorParallelTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  }
  void Run(const std::function<void(int rank, const GroupHandle& tp)>& fn) {
    const int tp = GetParam();
    for (const std::string& e : testing::RunRanks(
             testing::LayoutOf(tp, 1, 1),
             [&](int rank, std::shared_ptr<ProcessGroups> g) { fn(rank, g->tp()); })) {
      EXPECT_EQ(e, "");
    }
  }
};

constexpr int64_t kB = 2, kS = 8, kH = 12;

TEST_P(TensorParallelTest, CopyToAndReduceFromRegion) {
  const int n = GetParam();
  Run([n](int r, const GroupHandle& g) {
    // Copy: identity forward; backward sums the ranks' gradients.
    const torch::Tensor x = Rand({kB, kS, kH}, 1).requires_grad_(true);
    const torch::Tensor y = CopyToTensorParallelRegion(x, &g);
    EXPECT_TRUE(torch::equal(y, x));
    y.backward(Rand({kB, kS, kH}, 100 + r));
    torch::Tensor want = torch::zeros({kB, kS, kH});
    for (int q = 0; q < n; ++q) want += Rand({kB, kS, kH}, 100 + q);
    EXPECT_LE(MaxDiff(x.grad(), want), 1e-6);

    // Reduce: sum forward; identity backward.
    const torch::Tensor a = Rand({kB, kS, kH}, 200 + r).requires_grad_(true);
    const torch::Tensor b = ReduceFromTensorParallelRegion(a, &g);
    torch::Tensor sum = torch::zeros({kB, kS, kH});
    for (int q = 0; q < n; ++q) sum += Rand({kB, kS, kH}, 200 + q);
    EXPECT_LE(MaxDiff(b, sum), 1e-6);
    const torch::Tensor grad = Rand({kB, kS, kH}, 300);
    b.backward(grad);
    EXPECT_TRUE(torch::equal(a.grad(), grad));
  });
}

TEST_P(TensorParallelTest, ScatterAndGatherAlongTheLastDimension) {
  const int n = GetParam();
  Run([n](int r, const GroupHandle& g) {
    const int64_t h = kH * n / 2 * 2;  // divisible by n
    const int64_t c = h / n;
    const torch::Tensor x = Rand({kB, kS, h}, 1).requires_grad_(true);
    const torch::Tensor y = ScatterToTensorParallelRegion(x, &g);
    EXPECT_TRUE(torch::equal(y, x.narrow(2, r * c, c)));
    y.backward(Rand({kB, kS, c}, 10 + r));
    std::vector<torch::Tensor> parts;
    for (int q = 0; q < n; ++q) parts.push_back(Rand({kB, kS, c}, 10 + q));
    EXPECT_TRUE(torch::equal(x.grad(), torch::cat(parts, 2)));

    const torch::Tensor part = Rand({kB, kS, c}, 20 + r).requires_grad_(true);
    const torch::Tensor full = GatherFromTensorParallelRegion(part, &g);
    std::vector<torch::Tensor> all;
    for (int q = 0; q < n; ++q) all.push_back(Rand({kB, kS, c}, 20 + q));
    EXPECT_TRUE(torch::equal(full, torch::cat(all, 2)));
    const torch::Tensor grad = Rand({kB, kS, h}, 30);
    full.backward(grad);
    EXPECT_TRUE(torch::equal(part.grad(), grad.narrow(2, r * c, c)));
  });
}

TEST_P(TensorParallelTest, SequenceParallelPairs) {
  const int n = GetParam();
  Run([n](int r, const GroupHandle& g) {
    const int64_t c = kS / n;
    // Scatter along the sequence: split forward, all-gather backward.
    const torch::Tensor x = Rand({kB, kS, kH}, 1).requires_grad_(true);
    const torch::Tensor y = ScatterToSequenceParallelRegion(x, &g);
    EXPECT_TRUE(torch::equal(y, x.narrow(1, r * c, c)));
    y.backward(Rand({kB, c, kH}, 40 + r));
    std::vector<torch::Tensor> parts;
    for (int q = 0; q < n; ++q) parts.push_back(Rand({kB, c, kH}, 40 + q));
    EXPECT_TRUE(torch::equal(x.grad(), torch::cat(parts, 1)));

    // Gather along the sequence: all-gather forward, reduce-scatter backward.
    const torch::Tensor part = Rand({kB, c, kH}, 50 + r).requires_grad_(true);
    const torch::Tensor full = GatherFromSequenceParallelRegion(part, &g);
    std::vector<torch::Tensor> all;
    for (int q = 0; q < n; ++q) all.push_back(Rand({kB, c, kH}, 50 + q));
    EXPECT_TRUE(torch::equal(full, torch::cat(all, 1)));
    full.backward(Rand({kB, kS, kH}, 60 + r));
    torch::Tensor grad_sum = torch::zeros({kB, kS, kH});
    for (int q = 0; q < n; ++q) grad_sum += Rand({kB, kS, kH}, 60 + q);
    EXPECT_LE(MaxDiff(part.grad(), grad_sum.narrow(1, r * c, c)), 1e-6);

    // Reduce-scatter along the sequence: forward sums and keeps the chunk, backward gathers.
    const torch::Tensor a = Rand({kB, kS, kH}, 70 + r).requires_grad_(true);
    const torch::Tensor b = ReduceScatterToSequenceParallelRegion(a, &g);
    torch::Tensor sum = torch::zeros({kB, kS, kH});
    for (int q = 0; q < n; ++q) sum += Rand({kB, kS, kH}, 70 + q);
    EXPECT_LE(MaxDiff(b, sum.narrow(1, r * c, c)), 1e-6);
    b.backward(Rand({kB, c, kH}, 80 + r));
    std::vector<torch::Tensor> grads;
    for (int q = 0; q < n; ++q) grads.push_back(Rand({kB, c, kH}, 80 + q));
    EXPECT_TRUE(torch::equal(a.grad(), torch::cat(grads, 1)));
  });
}

TEST_P(TensorParallelTest, VocabParallelCrossEntropyIsTheFullSoftmaxCrossEntropy) {
  const int n = GetParam();
  Run([n](int r, const GroupHandle& g) {
    const int64_t tokens = 24, vocab = 64 * n;
    const torch::Tensor logits = (Rand({tokens, vocab}, 1) * 3).requires_grad_(true);
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(2);
    const torch::Tensor targets = torch::randint(vocab, {tokens}, gen, torch::kLong);
    const torch::Tensor weights = Rand({tokens}, 3);  // a non-uniform upstream gradient

    const torch::Tensor want = torch::nn::functional::cross_entropy(
        logits, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    (want * weights).sum().backward();
    const torch::Tensor want_grad = logits.grad().clone();

    const auto [first, last] = VocabRange(vocab, r, n);
    const torch::Tensor shard = logits.detach().narrow(1, first, last - first).clone();
    shard.requires_grad_(true);
    const torch::Tensor got = VocabParallelCrossEntropy(shard, targets, first, &g);
    EXPECT_LE(MaxDiff(got, want.detach()), 1e-6);
    (got * weights).sum().backward();
    EXPECT_LE(MaxDiff(shard.grad(), want_grad.narrow(1, first, last - first)), 1e-6);
  });
}

TEST_P(TensorParallelTest, AllReduceCoalescedSumsEveryTensor) {
  const int n = GetParam();
  Run([n](int r, const GroupHandle& g) {
    std::vector<torch::Tensor> ts = {Rand({5}, 1 + r), Rand({3, 4}, 10 + r)};
    ASSERT_TRUE(AllReduceCoalesced(ts, &g).ok());
    torch::Tensor a = torch::zeros({5}), b = torch::zeros({3, 4});
    for (int q = 0; q < n; ++q) {
      a += Rand({5}, 1 + q);
      b += Rand({3, 4}, 10 + q);
    }
    EXPECT_LE(MaxDiff(ts[0], a), 1e-6);
    EXPECT_LE(MaxDiff(ts[1], b), 1e-6);
  });
}

TEST_P(TensorParallelTest, BroadcastGivesEveryRankTheRootsTensor) {
  const int n = GetParam();
  Run([n](int r, const GroupHandle& g) {
    // Token ids (int64), as decoding broadcasts them, from the last rank and from rank 0.
    const torch::Tensor from_last = torch::arange(5, torch::kLong) * 10 + (n - 1);
    torch::Tensor t = torch::arange(5, torch::kLong) * 10 + r;
    Broadcast(t, n - 1, &g);
    EXPECT_TRUE(torch::equal(t, from_last)) << "rank " << r;
    torch::Tensor f = Rand({3, 4}, 7 + r);
    Broadcast(f, 0, &g);
    EXPECT_TRUE(torch::equal(f, Rand({3, 4}, 7))) << "rank " << r;
  });
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, TensorParallelTest, ::testing::Values(1, 2, 4));

TEST(TensorParallelSingle, NullGroupIsTheIdentity) {
  const torch::Tensor x = Rand({2, 4, 6}, 1);
  for (auto* map : {&CopyToTensorParallelRegion, &ReduceFromTensorParallelRegion,
                    &ScatterToTensorParallelRegion, &GatherFromTensorParallelRegion,
                    &ScatterToSequenceParallelRegion, &GatherFromSequenceParallelRegion,
                    &ReduceScatterToSequenceParallelRegion}) {
    EXPECT_TRUE(map(x, nullptr).is_same(x));
  }
  const std::pair<int64_t, int64_t> range = VocabRange(512, 1, 4);
  EXPECT_EQ(range.first, 128);
  EXPECT_EQ(range.second, 256);
}

// The model-parallel RNG (one thread: the default generator is the process's).
TEST(TensorParallelRng, EachRankDrawsItsOwnMasksAndTheDefaultStreamMovesAlike) {
  auto draw = [](int rank) {
    return WithTensorParallelRng(torch::kCPU, rank, [] { return torch::rand({1000}); });
  };
  torch::manual_seed(5);
  const torch::Tensor rank0 = draw(0);
  const torch::Tensor next0 = torch::rand({8});
  torch::manual_seed(5);
  EXPECT_TRUE(torch::equal(draw(0), rank0));  // a rerun from the same state: the same masks
  torch::manual_seed(5);
  const torch::Tensor rank1 = draw(1);
  const torch::Tensor next1 = torch::rand({8});
  EXPECT_FALSE(torch::equal(rank0, rank1));  // another rank: other masks
  EXPECT_TRUE(torch::equal(next0, next1));   // the default stream moved the same way
  torch::manual_seed(5);
  EXPECT_FALSE(torch::equal(torch::rand({1000}), rank0));  // not the default stream itself
  torch::manual_seed(5);
  const torch::Tensor first = draw(0);
  EXPECT_FALSE(torch::equal(draw(0), first));  // consecutive calls draw new masks
}

}  // namespace
}  // namespace mt::parallel
