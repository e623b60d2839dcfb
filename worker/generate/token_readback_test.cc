// TokenReadback on the CPU: Wait returns the tokens of the last Enqueue, later changes to the
// tensor do not reach them, and a tensor of another size or dtype is refused. Its CUDA path (a
// pinned copy behind the stream's work) is in decode_graph_gpu_test.cc.
#include "worker/generate/token_readback.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace mt::generate {
namespace {

std::vector<int64_t> Values(const int64_t* p, int64_t n) { return std::vector<int64_t>(p, p + n); }

TEST(TokenReadbackTest, WaitGivesTheTokensOfTheLastEnqueue) {
  TokenReadback readback(3, torch::Device(torch::kCPU));
  torch::Tensor tokens = torch::tensor({7, 11, 13}, torch::kLong);
  readback.Enqueue(tokens);
  tokens.fill_(-1);  // after Enqueue: not what Wait returns
  EXPECT_EQ(Values(readback.Wait(), 3), (std::vector<int64_t>{7, 11, 13}));
  // [n, 1], as a decode step's input holds them.
  readback.Enqueue(torch::tensor({2, 3, 5}, torch::kLong).view({3, 1}));
  EXPECT_EQ(Values(readback.Wait(), 3), (std::vector<int64_t>{2, 3, 5}));
}

TEST(TokenReadbackTest, RefusesTokensOfAnotherCountOrDtype) {
  TokenReadback readback(2, torch::Device(torch::kCPU));
  EXPECT_THROW(readback.Enqueue(torch::tensor({1, 2, 3}, torch::kLong)), c10::Error);
  EXPECT_THROW(readback.Enqueue(torch::tensor({1, 2}, torch::kInt)), c10::Error);
}

}  // namespace
}  // namespace mt::generate
