#include "worker/data/spec_data.h"

#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/spec/defaults.h"

namespace mt::data {
namespace {

Blend ToBlend(const google::protobuf::RepeatedPtrField<mt::v1::DataPath>& paths) {
  Blend blend;
  for (const mt::v1::DataPath& p : paths) blend.prefixes.push_back(p.prefix());
  if (paths.size() > 1) {
    for (const mt::v1::DataPath& p : paths) blend.weights.push_back(p.weight());
  }
  return blend;
}

}  // namespace

// The defaults come from common/spec/defaults.h, for specs that skipped spec::ApplyDefaults.
absl::StatusOr<GPTDataSetup> GPTDataSetupFromSpec(const mt::v1::JobSpec& spec) {
  GPTDataSetup s;
  const mt::v1::DataSpec& d = spec.data();
  if (d.data_path_size() > 0) {
    s.config.blend = ToBlend(d.data_path());
    s.config.split = d.split().empty() ? spec::kDefaultSplit : d.split();
  } else {
    if (d.train_data_path_size() > 0) s.config.blend_per_split[0] = ToBlend(d.train_data_path());
    if (d.valid_data_path_size() > 0) s.config.blend_per_split[1] = ToBlend(d.valid_data_path());
    if (d.test_data_path_size() > 0) s.config.blend_per_split[2] = ToBlend(d.test_data_path());
  }
  s.config.cache_dir = d.data_cache_path();
  s.config.seq_length = spec.model().seq_length();
  const uint64_t seed = spec.training().has_seed() ? spec.training().seed() : spec::kDefaultSeed;
  if (seed > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.seed ", seed, " is over 2^32 - 1, the range of Megatron's dataset RNG"));
  }
  s.config.seed = static_cast<uint32_t>(seed);
  s.num_workers = d.has_num_workers() ? d.num_workers() : spec::kDefaultNumWorkers;

  const mt::v1::TrainingSpec& t = spec.training();
  s.budget.train_iters = t.train_iters();
  s.budget.train_samples = t.train_samples();
  s.budget.global_batch_size = t.global_batch_size();
  const mt::v1::EvaluationSpec& e = spec.evaluation();
  s.budget.eval_interval = e.has_eval_interval() ? e.eval_interval() : spec::kDefaultEvalInterval;
  s.budget.eval_iters = e.has_eval_iters() ? e.eval_iters() : spec::kDefaultEvalIters;
  MT_ASSIGN_OR_RETURN(s.num_samples, TrainValidTestNumSamples(s.budget));
  return s;
}

}  // namespace mt::data
