// The update stream where this build has no CUDA (the CPU builds CI runs): Create says why and
// names the fix, and the optimizer's overlap_update is left off (optimizer_test.cc checks the
// update is the one in the step). update_stream_gpu_test.cc tests the stream itself.
#include "worker/engine/update_stream.h"

#include <torch/torch.h>

#include "gtest/gtest.h"

namespace mt::engine {
namespace {

TEST(UpdateStreamTest, CreateNeedsACudaBuildAndAGpu) {
  const auto on_cpu = UpdateStream::Create(torch::Device("cpu"), 4);
  ASSERT_FALSE(on_cpu.ok());
  if (UpdateStream::Available()) {
    EXPECT_EQ(on_cpu.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(on_cpu.status().message().find("cpu is not a GPU"), std::string::npos)
        << on_cpu.status();
    return;
  }
  EXPECT_EQ(on_cpu.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(on_cpu.status().message().find("this build's LibTorch has no CUDA"), std::string::npos)
      << on_cpu.status();
  EXPECT_FALSE(UpdateStream::Create(torch::Device("cuda:0"), 4).ok());
}

}  // namespace
}  // namespace mt::engine
