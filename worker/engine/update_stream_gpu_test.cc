// The update stream (update_stream.h) on a GPU (label `gpu`; skips without CUDA): a wait for a
// part orders the current stream after that part's update, eagerly and from inside a CUDA graph,
// where each replay must wait for the update queued last before it (not the one at capture).
// The side stream's work starts with a spin kernel (at::cuda::sleep, ~50 ms), so that a missing
// or stale wait reads the value from before the update.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <memory>

#if defined(MT_ENGINE_WITH_CUDA) && MT_ENGINE_WITH_CUDA && __has_include(<ATen/cuda/Sleep.h>)
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/cuda/Sleep.h>

#include "worker/kernels/graph_capture.h"
#define MT_HAVE_CUDA_SLEEP 1
#endif

#include "common/base/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/engine/update_stream.h"

namespace mt::engine {
namespace {

#ifdef MT_HAVE_CUDA_SLEEP
constexpr int64_t kSpinCycles = 100'000'000;  // ~50 ms at ~2 GHz

TEST(UpdateStreamGpuTest, WaitPartOrdersTheCurrentStreamAfterThatPart) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  MT_ASSERT_OK_AND_ASSIGN(auto stream, UpdateStream::Create(torch::Device("cuda:0"), 2));
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  torch::Tensor a = torch::zeros({1024}, options), b = torch::zeros({1024}, options);
  stream->Run(
      [&](int64_t part) {
        at::cuda::sleep(kSpinCycles);
        (part == 0 ? a : b).fill_(static_cast<double>(part + 1));
      },
      {});
  EXPECT_EQ(stream->runs(), 1);
  stream->WaitPart(0);
  const torch::Tensor a_seen = a.clone();
  stream->WaitPart(7);  // past the last part: the last one
  const torch::Tensor b_seen = b.clone();
  torch::cuda::synchronize();
  EXPECT_EQ(a_seen.min().item<float>(), 1.0f);
  EXPECT_EQ(a_seen.max().item<float>(), 1.0f);
  EXPECT_EQ(b_seen.min().item<float>(), 2.0f);
  EXPECT_EQ(b_seen.max().item<float>(), 2.0f);
}

TEST(UpdateStreamGpuTest, ACapturedWaitWaitsForTheUpdateQueuedBeforeEachReplay) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  MT_ASSERT_OK_AND_ASSIGN(auto stream, UpdateStream::Create(torch::Device("cuda:0"), 1));
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  torch::Tensor weights = torch::zeros({4096}, options);
  torch::Tensor seen;
  at::cuda::CUDAGraph graph;
  // Captured before any update was queued: the event has never been recorded.
  MT_ASSERT_OK(kernels::CaptureOnSideStream(
      graph, c10::cuda::current_device(), [] { return absl::OkStatus(); },
      [&] {
        stream->WaitPart(0);
        seen = weights * 1.0f;
      }));
  for (int step = 1; step <= 3; ++step) {
    stream->Run(
        [&](int64_t) {
          at::cuda::sleep(kSpinCycles);
          weights.fill_(static_cast<double>(step));
        },
        {weights});
    graph.replay();
    torch::cuda::synchronize();
    EXPECT_EQ(seen.min().item<float>(), static_cast<float>(step)) << "replay " << step;
    EXPECT_EQ(seen.max().item<float>(), static_cast<float>(step)) << "replay " << step;
  }
}
#endif

TEST(UpdateStreamGpuTest, CreateChecksItsArguments) {
  if (!UpdateStream::Available()) GTEST_SKIP() << "not a CUDA build";
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  EXPECT_FALSE(UpdateStream::Create(torch::Device("cuda:0"), 0).ok());
  EXPECT_FALSE(UpdateStream::Create(torch::Device("cuda:0"), 4097).ok());
  const auto cpu = UpdateStream::Create(torch::Device("cpu"), 1);
  ASSERT_FALSE(cpu.ok());
  EXPECT_NE(cpu.status().message().find("not a GPU"), std::string::npos) << cpu.status();
  MT_EXPECT_OK(UpdateStream::Create(torch::Device("cuda:0"), 4096).status());
}

}  // namespace
}  // namespace mt::engine
