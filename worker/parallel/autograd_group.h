// How a tensor-parallel autograd function keeps its process group for its backward pass: the
// group rides in the autograd context as a capsule, which keeps the c10d object alive as long
// as the graph. Used by tensor_parallel.cc and tp_overlap.cc; internal to worker/parallel.
#ifndef MT_WORKER_PARALLEL_AUTOGRAD_GROUP_H_
#define MT_WORKER_PARALLEL_AUTOGRAD_GROUP_H_

#include <ATen/core/ivalue.h>
#include <torch/autograd.h>

#include <utility>

#include "worker/parallel/process_groups.h"

namespace mt::parallel::internal {

struct GroupRef : torch::CustomClassHolder {
  GroupHandle handle;
};

// Saves `g` in the context (forward).
inline void SaveGroup(torch::autograd::AutogradContext* ctx, const GroupHandle& g) {
  auto ref = c10::make_intrusive<GroupRef>();
  ref->handle = g;
  ctx->saved_data["group"] = c10::IValue::make_capsule(std::move(ref));
}

// The group SaveGroup saved (backward): hold the pointer while its handle is used.
inline c10::intrusive_ptr<GroupRef> SavedGroup(torch::autograd::AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<GroupRef>(ctx->saved_data["group"].toCapsule());
}

}  // namespace mt::parallel::internal

#endif  // MT_WORKER_PARALLEL_AUTOGRAD_GROUP_H_
