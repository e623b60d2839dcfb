// StepGraph on a GPU (label `gpu`; skips without CUDA or a CUDA LibTorch): the random state of
// a captured step. Each replay draws its dropout masks from the default CUDA generator's seed as
// it is at the replay, exactly as the eager step from that seed draws them, and leaves the
// generator where the eager step leaves it; the capture's warm-up step changes nothing.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/step_graph.h"

namespace mt::engine {
namespace {

// What one step gives: the loss, the weight's gradient and the generator's next draw.
struct Drawn {
  torch::Tensor loss, grad, next;
};

TEST(StepGraphGpuTest, EachReplayDrawsTheEagerMasksOfItsSeed) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!StepGraph::Available()) GTEST_SKIP() << "this build's LibTorch has no CUDA";
  const torch::Device cuda(torch::kCUDA, 0);
  torch::manual_seed(7);
  torch::Tensor w = torch::randn({256, 256}, cuda).div_(16).requires_grad_(true);
  const torch::Tensor x = torch::randn({64, 256}, cuda);
  // Two dropouts (two draws from the generator) around a matmul, then backward.
  auto step = [&](const torch::Tensor& sample) {
    torch::Tensor h = torch::dropout(torch::matmul(sample, w), 0.5, /*train=*/true);
    torch::Tensor loss = torch::dropout(torch::tanh(h), 0.3, /*train=*/true).square().mean();
    loss.backward();
    return loss.detach();
  };
  auto zero_grad = [&] {
    w.mutable_grad().reset();
    return absl::OkStatus();
  };
  auto eager = [&](uint64_t seed) {
    torch::manual_seed(seed);
    zero_grad().IgnoreError();
    Drawn d;
    d.loss = step(x).clone();
    d.grad = w.grad().clone();
    d.next = torch::rand({8}, cuda);
    return d;
  };
  StepGraph graph(cuda, {w});
  auto replay = [&](uint64_t seed) {
    torch::manual_seed(seed);
    zero_grad().IgnoreError();
    auto loss = graph.Run(x, step, zero_grad);
    EXPECT_TRUE(loss.ok()) << loss.status();
    Drawn d;
    d.loss = loss.ok() ? loss->clone() : torch::Tensor();
    d.grad = w.grad().clone();
    d.next = torch::rand({8}, cuda);
    return d;
  };
  std::vector<Drawn> replays;
  for (const uint64_t seed : {11u, 12u, 13u, 11u}) {
    const Drawn want = eager(seed);
    const Drawn got = replay(seed);  // the first call captures
    ASSERT_TRUE(got.loss.defined());
    ASSERT_TRUE(graph.captured());
    // The same masks: the same values up to the matmul's summation order (1e-5 relative).
    EXPECT_NEAR(got.loss.item<double>(), want.loss.item<double>(), 1e-5 * want.loss.item<double>())
        << "seed " << seed;
    EXPECT_TRUE(torch::allclose(got.grad, want.grad, 1e-4, 1e-6)) << "seed " << seed;
    // The generator advanced as far as the eager step advanced it.
    EXPECT_TRUE(torch::equal(got.next, want.next)) << "seed " << seed;
    replays.push_back(got);
  }
  EXPECT_EQ(graph.replays(), 4);
  // Each seed its own masks (other masks zero other gradient terms: far outside 1e-2), and the
  // same seed the same masks again, bit for bit.
  EXPECT_FALSE(torch::allclose(replays[1].grad, replays[0].grad, 1e-2, 1e-4));
  EXPECT_FALSE(torch::allclose(replays[2].grad, replays[1].grad, 1e-2, 1e-4));
  EXPECT_TRUE(torch::equal(replays[3].grad, replays[0].grad));
  EXPECT_TRUE(torch::equal(replays[3].loss, replays[0].loss));
}

}  // namespace
}  // namespace mt::engine
