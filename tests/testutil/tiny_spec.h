// Tiny GPT job specs for unit tests of the trainer and its parts: the fields every such test
// sets, written once. A test sets what is particular to it (evaluation, logging, parallelism,
// optimizer) on the spec it gets back. Thread-safe free function; no state.
#ifndef MT_TESTS_TESTUTIL_TINY_SPEC_H_
#define MT_TESTS_TESTUTIL_TINY_SPEC_H_

#include <cstdint>
#include <optional>

#include "mt/v1/job_spec.pb.h"

namespace mt::testutil {

// Each field is set on the spec as given; the ones marked "0: unset" are left out at 0.
struct TinySpecOptions {
  int num_layers = 2;
  int hidden_size = 32;
  int num_attention_heads = 4;
  int seq_length = 16;
  int vocab_size = 128;
  int micro_batch_size = 2;
  int global_batch_size = 4;  // 0: unset (spec::ResolveForLayout sets it)
  int64_t train_iters = 0;    // 0: unset
  double lr = 1e-3;
  int64_t lr_warmup_iters = 0;          // 0: unset
  std::optional<uint64_t> seed = 1234;  // nullopt: unset (the trainer's default)
  mt::v1::Precision precision = mt::v1::PRECISION_UNSPECIFIED;  // UNSPECIFIED: unset
  bool zero_dropout = false;  // hidden and attention dropout 0 (deterministic losses)
  bool constant_lr = false;   // lr_decay_style constant
};

mt::v1::JobSpec TinyGptSpec(const TinySpecOptions& options = {});

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_TINY_SPEC_H_
