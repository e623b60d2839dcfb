// The layout proto (proto/mt/v1/job.proto Layout) of a job: its parallel sizes, every rank
// group and the pipeline stages' layers, from a defaulted, validated JobSpec and a world size.
// The coordinator sends it with every assignment; worker tests build theirs with it too.
// Pure: no I/O.
#ifndef MT_COMMON_LAYOUT_JOB_LAYOUT_H_
#define MT_COMMON_LAYOUT_JOB_LAYOUT_H_

#include "absl/status/statusor.h"
#include "mt/v1/job.pb.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::layout {

// `world` is the spec's own when it fixes one (world_size, or an explicit data_parallel_size);
// otherwise the caller's choice. Errors name the spec field (e.g. a global batch that the
// micro-batch times DP does not divide).
absl::StatusOr<mt::v1::Layout> JobLayout(const mt::v1::JobSpec& spec, int world);

}  // namespace mt::layout

#endif  // MT_COMMON_LAYOUT_JOB_LAYOUT_H_
