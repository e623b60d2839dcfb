// The tiny GPT of the model and engine tests (test-only, header-only): 2 layers, hidden 32,
// 4 heads, seq 16, vocabulary 128 (already a multiple of 128, so the padded vocabulary is 128
// too), no dropout, the math attention.
#ifndef MT_WORKER_MODEL_TINY_CONFIG_FOR_TEST_H_
#define MT_WORKER_MODEL_TINY_CONFIG_FOR_TEST_H_

#include "worker/model/gpt_config.h"

namespace mt::model {

inline GptConfig TinyConfig() {
  GptConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = 16;
  c.vocab_size = 128;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  c.attention_backend = AttentionBackend::kMath;
  return c.Resolve();
}

}  // namespace mt::model

#endif  // MT_WORKER_MODEL_TINY_CONFIG_FOR_TEST_H_
