// From a job spec (proto) to the data settings of worker/data: the GPT dataset configuration and
// the sample budget, with Megatron's flag semantics. The spec is expected to have passed
// mt::spec::ApplyDefaults and Validate; unset optional fields fall back to the same defaults.
#ifndef MT_WORKER_DATA_SPEC_DATA_H_
#define MT_WORKER_DATA_SPEC_DATA_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/data/gpt_dataset.h"
#include "worker/data/gpt_indices.h"

namespace mt::data {

struct GPTDataSetup {
  GPTDataConfig config;
  SampleBudget budget;
  std::array<int64_t, kNumSplits> num_samples = {0, 0, 0};  // TrainValidTestNumSamples(budget)
  int num_workers = 2;                                      // --num-workers
};

// data.data_path (+ split) or data.{train,valid,test}_data_path, model.seq_length,
// training.seed / batch sizes / train_iters or train_samples, evaluation.*. A single data path is
// Megatron's "--data-path PREFIX" (no blending); several are "--data-path w1 p1 w2 p2 ...".
absl::StatusOr<GPTDataSetup> GPTDataSetupFromSpec(const mt::v1::JobSpec& spec);

}  // namespace mt::data

#endif  // MT_WORKER_DATA_SPEC_DATA_H_
