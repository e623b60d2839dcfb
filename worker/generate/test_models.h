// Small random GPTs for the decoding tests (test-only, header-only).
#ifndef MT_WORKER_GENERATE_TEST_MODELS_H_
#define MT_WORKER_GENERATE_TEST_MODELS_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "worker/model/gpt.h"

namespace mt::generate {

struct TinyGptOptions {
  int64_t layers = 2;
  int64_t hidden = 32;
  int64_t heads = 4;
  int64_t context = 32;
  int64_t vocab = 100;  // padded to 128: the padding must never be chosen
  model::AttentionBackend backend = model::AttentionBackend::kMath;
  torch::Device device = torch::Device(torch::kCPU);
  torch::ScalarType dtype = torch::kFloat;
};

// Seeded weights with a large init (std 0.2): the logits spread out, greedy choices are far from
// ties. In eval mode.
inline std::shared_ptr<model::GptModel> TinyGpt(const TinyGptOptions& t) {
  model::GptConfig c;
  c.num_layers = t.layers;
  c.hidden_size = t.hidden;
  c.num_attention_heads = t.heads;
  c.seq_length = t.context;
  c.vocab_size = t.vocab;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  c.attention_backend = t.backend;
  c.init_method_std = 0.2;
  model::ModelBuildOptions o;
  o.seed = 42;
  o.device = t.device;
  o.dtype = t.dtype;
  auto m = model::GptModel::Create(c.Resolve(), {}, o);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  (*m)->eval();
  return *m;
}

// One character per token: a real, reversible detokenizer for tests without BPE files.
inline std::string LetterText(absl::Span<const int32_t> ids) {
  std::string s;
  for (int32_t id : ids) s.push_back(static_cast<char>('a' + id % 26));
  return s;
}

}  // namespace mt::generate

#endif  // MT_WORKER_GENERATE_TEST_MODELS_H_
