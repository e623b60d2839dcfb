#include "tests/testutil/tiny_spec.h"

namespace mt::testutil {

mt::v1::JobSpec TinyGptSpec(const TinySpecOptions& o) {
  mt::v1::JobSpec spec;
  mt::v1::ModelSpec* m = spec.mutable_model();
  m->set_num_layers(o.num_layers);
  m->set_hidden_size(o.hidden_size);
  m->set_num_attention_heads(o.num_attention_heads);
  m->set_seq_length(o.seq_length);
  m->set_vocab_size(o.vocab_size);
  if (o.zero_dropout) {
    m->set_hidden_dropout(0.0);
    m->set_attention_dropout(0.0);
  }
  mt::v1::TrainingSpec* t = spec.mutable_training();
  t->set_micro_batch_size(o.micro_batch_size);
  if (o.global_batch_size != 0) t->set_global_batch_size(o.global_batch_size);
  if (o.train_iters != 0) t->set_train_iters(o.train_iters);
  t->set_lr(o.lr);
  if (o.lr_warmup_iters != 0) t->set_lr_warmup_iters(o.lr_warmup_iters);
  if (o.constant_lr) t->set_lr_decay_style(mt::v1::LR_DECAY_STYLE_CONSTANT);
  if (o.seed.has_value()) t->set_seed(*o.seed);
  if (o.precision != mt::v1::PRECISION_UNSPECIFIED) t->set_precision(o.precision);
  return spec;
}

}  // namespace mt::testutil
