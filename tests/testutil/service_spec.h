// The smallest job spec a coordinator accepts, for tests of its services (submit, cancel, roles,
// ownership): DP left to the scheduler, global batch left to DP, data paths that are never read.
#ifndef MT_TESTS_TESTUTIL_SERVICE_SPEC_H_
#define MT_TESTS_TESTUTIL_SERVICE_SPEC_H_

#include <string>

#include "mt/v1/job_spec.pb.h"

namespace mt::testutil {

inline mt::v1::JobSpec ServiceJobSpec(const std::string& name) {
  mt::v1::JobSpec s;
  s.set_name(name);
  s.mutable_model()->set_num_layers(2);
  s.mutable_model()->set_hidden_size(32);
  s.mutable_model()->set_num_attention_heads(2);
  s.mutable_model()->set_seq_length(16);
  s.mutable_training()->set_micro_batch_size(2);
  s.mutable_training()->set_train_iters(7);
  s.mutable_training()->set_lr(1e-3);
  s.mutable_data()->add_data_path()->set_prefix("/data/x");
  s.mutable_data()->mutable_tokenizer()->set_vocab_file("/v.json");
  s.mutable_data()->mutable_tokenizer()->set_merge_file("/m.txt");
  return s;
}

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_SERVICE_SPEC_H_
