#include "worker/model/generator_state.h"

#include <ATen/Context.h>

#include <mutex>

namespace mt::model {

at::Generator DefaultGenerator(c10::Device device) {
  return at::globalContext().defaultGenerator(device);
}

torch::Tensor GeneratorState(c10::Device device) {
  at::Generator gen = DefaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void SetGeneratorState(c10::Device device, const torch::Tensor& state) {
  at::Generator gen = DefaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

void SeedGenerator(c10::Device device, uint64_t seed) {
  at::Generator gen = DefaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
}

GeneratorStateGuard::GeneratorStateGuard(c10::Device device)
    : device_(device), saved_(GeneratorState(device)) {}

GeneratorStateGuard::~GeneratorStateGuard() { SetGeneratorState(device_, saved_); }

}  // namespace mt::model
