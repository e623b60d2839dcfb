// The default generator's state helpers on the CPU generator: a state read and set again gives
// the same draws; the guard puts the caller's state back after draws, a reseed and an exception.
#include "worker/model/generator_state.h"

#include <torch/torch.h>

#include <stdexcept>

#include "gtest/gtest.h"

namespace mt::model {
namespace {

const c10::Device kCpu(c10::kCPU);

torch::Tensor Draw() { return torch::rand({8}); }

TEST(GeneratorStateTest, ASetStateGivesTheDrawsThatFollowedItsRead) {
  SeedGenerator(kCpu, 123);
  const torch::Tensor state = GeneratorState(kCpu);
  const torch::Tensor first = Draw();
  const torch::Tensor second = Draw();
  ASSERT_FALSE(torch::equal(first, second));
  SetGeneratorState(kCpu, state);
  EXPECT_TRUE(torch::equal(Draw(), first));
  EXPECT_TRUE(torch::equal(Draw(), second));
}

TEST(GeneratorStateTest, TheStateIsACopy) {
  SeedGenerator(kCpu, 5);
  const torch::Tensor state = GeneratorState(kCpu);
  const torch::Tensor before = state.clone();
  Draw();
  EXPECT_TRUE(torch::equal(state, before));
}

TEST(GeneratorStateTest, SeedGeneratorIsManualSeed) {
  SeedGenerator(kCpu, 77);
  const torch::Tensor ours = Draw();
  torch::manual_seed(77);
  EXPECT_TRUE(torch::equal(Draw(), ours));
  SeedGenerator(kCpu, 78);
  EXPECT_FALSE(torch::equal(Draw(), ours));
}

TEST(GeneratorStateTest, TheGuardPutsBackTheStateAfterDrawsAndAReseed) {
  SeedGenerator(kCpu, 9);
  const torch::Tensor state = GeneratorState(kCpu);
  const torch::Tensor expected = Draw();
  SetGeneratorState(kCpu, state);
  {
    const GeneratorStateGuard guard(kCpu);
    EXPECT_TRUE(torch::equal(guard.saved(), state));
    Draw();
    SeedGenerator(kCpu, 1000);
    Draw();
  }
  EXPECT_TRUE(torch::equal(Draw(), expected));
}

TEST(GeneratorStateTest, TheGuardPutsBackTheStateWhenTheScopeThrows) {
  SeedGenerator(kCpu, 10);
  const torch::Tensor state = GeneratorState(kCpu);
  const torch::Tensor expected = Draw();
  SetGeneratorState(kCpu, state);
  try {
    const GeneratorStateGuard guard(kCpu);
    Draw();
    throw std::runtime_error("inside");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(torch::equal(Draw(), expected));
}

}  // namespace
}  // namespace mt::model
