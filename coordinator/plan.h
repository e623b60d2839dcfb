// Layout and placement of a job on a set of free workers. Pure functions: no I/O, no state;
// the scheduler and the PlanJob RPC both call them.
#ifndef MT_COORDINATOR_PLAN_H_
#define MT_COORDINATOR_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "mt/v1/client_service.pb.h"
#include "mt/v1/job.pb.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::coordinator {

// The layout of a defaulted, validated spec for a world size. `world` is the spec's own when
// it fixes one (world_size, or an explicit data_parallel_size); otherwise the caller's choice.
absl::StatusOr<mt::v1::Layout> ComputeLayout(const mt::v1::JobSpec& spec, int world);

// The world size a spec asks for, or 0 when it leaves DP to the scheduler (dp: auto and no
// world_size). Requires a defaulted spec.
int RequestedWorld(const mt::v1::JobSpec& spec);

// For dp: auto with no world size: the largest world that fits `free_slots` and keeps the
// global batch divisible by micro_batch * DP; 0 when not even one model replica fits.
int AutoWorld(const mt::v1::JobSpec& spec, int free_slots);

// Bytes per rank for parameters, gradients and optimizer state (fp32 master weights and two
// Adam moments), following Megatron's accounting; an estimate for planning only.
int64_t EstimateStateBytesPerRank(const mt::v1::JobSpec& spec, const mt::v1::Layout& layout);

// True when a rank of `spec` loads the checkpoint's weights only, with no
// gradients or optimizer state: an inference job (generation, or evaluation on any layout: a
// sharded one builds the training engine without an optimizer, worker/train/sharded_eval.h).
bool HoldsWeightsOnly(const mt::v1::JobSpec& spec);

// What such a rank holds at its peak, in bytes; an estimate for planning.
struct InferenceBytes {
  int64_t weights = 0;      // its shard in the rank's dtype (fp32 on a CPU; on a GPU bf16, or
                            // for an evaluation over several ranks the job's training
                            // precision, which its engine runs); the layers' linear weights
                            // in a byte under --quantize int8
  int64_t kv_cache = 0;     // generation: keys and values of every layer for the samples over
                            // min(positions, prompt bytes + --max-new-tokens), 1 / TP of them
  int64_t activations = 0;  // fp32 logits (every position for an evaluation, the last for
                            // generation), one layer's tensors, and a CPU's attention scores
  int64_t total() const { return weights + kv_cache + activations; }
};
InferenceBytes EstimateInferenceBytesPerRank(const mt::v1::JobSpec& spec,
                                             const mt::v1::Layout& layout, bool gpu);

// Bytes of activations a rank keeps for the backward pass at its peak (the first pipeline
// stage, holding min(PP, micro-batches) micro-batches of its layers), after Korthikanti et al.
// 2022 ("Reducing Activation Recomputation in Large Transformer Models"), per layer and
// micro-batch of b sequences of s tokens (s / CP per rank), hidden h, a heads, TP t, in half
// precision (doubled in fp32):
//   no recompute     s*b*h*(10 + 24/t + 5*a*s/(h*t))   (34/t instead of 10 + 24/t with SP)
//   selective        s*b*h*(10 + 24/t)                 (34/t with SP)
//   full             2*s*b*h                           (/t with SP)
// plus the fp32 logits of one micro-batch, 4*s*b*padded_vocab/t. An estimate for planning.
int64_t EstimateActivationBytesPerRank(const mt::v1::JobSpec& spec, const mt::v1::Layout& layout);

// Admission: OK unless every live worker that could run the job reports its memory and none
// has enough for one rank (state + activations, for the largest DP the workers allow; a rank
// that holds weights only, EstimateInferenceBytesPerRank);
// FAILED_PRECONDITION with the numbers and the ways out then. No live worker of the job's
// kind, or one whose memory is not known yet (a GPU before its first rank), passes.
absl::Status CheckMemoryFits(const mt::v1::JobSpec& spec,
                             const std::vector<mt::v1::Worker>& live_workers);

// Defaults and validates `spec` (INVALID_ARGUMENT naming the field when it is wrong), picks
// the workers that fit its device kind, and returns its layout with a placement on them, or
// with placeable = false and the reason when the free workers cannot hold it now.
absl::StatusOr<mt::v1::PlanJobResponse> PlanOnWorkers(
    const mt::v1::JobSpec& spec, const std::vector<mt::v1::Worker>& free_workers);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_PLAN_H_
