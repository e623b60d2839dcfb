// The default random generator's state of a device, read and written under the generator's
// lock: what recomputation, the step's CUDA graph, tensor parallelism's RNG and the checkpoint
// each need around the same two LibTorch calls.
//
// GeneratorStateGuard saves the state when it is made and puts it back when it goes out of
// scope, also when the scope is left by an exception: the code inside may draw, or even reseed,
// without the caller's random stream noticing.
//
// Thread-compatible: the generator is locked only while its state is read or written; a
// draw by another thread between the two is the caller's to prevent.
#ifndef MT_WORKER_MODEL_GENERATOR_STATE_H_
#define MT_WORKER_MODEL_GENERATOR_STATE_H_

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>
#include <torch/types.h>

#include <cstdint>

namespace mt::model {

// The default generator of `device` (the current CUDA device where its index is -1).
at::Generator DefaultGenerator(c10::Device device);

// Its state, a byte tensor on the CPU (a copy: later draws do not change it).
torch::Tensor GeneratorState(c10::Device device);

// Sets the state to one that GeneratorState read for the same kind of device.
void SetGeneratorState(c10::Device device, const torch::Tensor& state);

// Reseeds the generator, as torch.manual_seed does for one device.
void SeedGenerator(c10::Device device, uint64_t seed);

class GeneratorStateGuard {
 public:
  explicit GeneratorStateGuard(c10::Device device);
  ~GeneratorStateGuard();
  GeneratorStateGuard(const GeneratorStateGuard&) = delete;
  GeneratorStateGuard& operator=(const GeneratorStateGuard&) = delete;

  // The state saved at construction.
  const torch::Tensor& saved() const { return saved_; }

 private:
  c10::Device device_;
  torch::Tensor saved_;
};

}  // namespace mt::model

#endif  // MT_WORKER_MODEL_GENERATOR_STATE_H_
