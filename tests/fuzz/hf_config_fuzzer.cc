// Fuzz target: the Hugging Face GPT-2 import (common/checkpoint/hf_gpt2): config.json from the
// input next to a small valid model.safetensors; a source that opens is read tensor by tensor.
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/hf_gpt2.h"
#include "common/checkpoint/reshard.h"
#include "common/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// A GPT-2 of 1 layer, hidden 4, 2 heads, 8 positions, vocabulary 8, in fp32.
void WriteWeights(const std::string& path) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"transformer.wte.weight", {8, 4}},
      {"transformer.wpe.weight", {8, 4}},
      {"transformer.h.0.ln_1.weight", {4}},
      {"transformer.h.0.ln_1.bias", {4}},
      {"transformer.h.0.attn.c_attn.weight", {4, 12}},
      {"transformer.h.0.attn.c_attn.bias", {12}},
      {"transformer.h.0.attn.c_proj.weight", {4, 4}},
      {"transformer.h.0.attn.c_proj.bias", {4}},
      {"transformer.h.0.ln_2.weight", {4}},
      {"transformer.h.0.ln_2.bias", {4}},
      {"transformer.h.0.mlp.c_fc.weight", {4, 16}},
      {"transformer.h.0.mlp.c_fc.bias", {16}},
      {"transformer.h.0.mlp.c_proj.weight", {16, 4}},
      {"transformer.h.0.mlp.c_proj.bias", {4}},
      {"transformer.ln_f.weight", {4}},
      {"transformer.ln_f.bias", {4}}};
  static std::vector<float> zeros(64, 0.5f);
  std::vector<mt::checkpoint::TensorView> views;
  for (const auto& [name, shape] : shapes) {
    mt::checkpoint::TensorView v;
    v.name = name;
    v.shape = shape;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    v.data = zeros.data();
    v.nbytes = static_cast<size_t>(n) * sizeof(float);
    views.push_back(v);
  }
  if (!mt::checkpoint::WriteSafetensors(path, views, {}).ok()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = mt::fuzz::ScratchDir() + "/hf";
  static const bool made = [&] {
    mkdir(dir.c_str(), 0700);
    WriteWeights(dir + "/model.safetensors");
    return true;
  }();
  (void)made;
  mt::fuzz::WriteBytes(dir + "/config.json", mt::fuzz::AsView(data, size));
  auto source = mt::checkpoint::OpenHfGpt2Source(dir);
  if (!source.ok()) return 0;
  for (const std::string& name : (*source)->Names()) (void)(*source)->Full(name);
  return 0;
}
