#include "coordinator/scheduler/scheduler.h"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/plan.h"

namespace mt::coordinator {

void Scheduler::Dequeue(QueueKey key) {
  queue_.Remove(key);
  planned_.erase(key.id);
}

void Scheduler::Pass(PlacementTarget* target) {
  // The capacity snapshot is taken when a job needs a plan and again whenever the pool moved
  // on (e.g. after this pass placed a job).
  std::optional<WorkerCapacity> capacity;
  std::optional<QueueKey> after;
  while (std::optional<QueueKey> key = queue_.Next(after)) {
    after = key;
    const uint64_t version = pool_->capacity_version();
    if (auto p = planned_.find(key->id); p != planned_.end() && p->second.version == version) {
      // Planned at this very capacity: still unplaceable, and its reason says so already.
      if (p->second.blocks) break;
      continue;
    }
    if (!capacity.has_value() || capacity->version != version) {
      capacity = pool_->SnapshotCapacity();
    }
    const mt::v1::Job& job = target->PendingJob(key->id);
    absl::StatusOr<mt::v1::PlanJobResponse> plan = PlanOnWorkers(job.spec(), capacity->idle);
    if (!plan.ok()) {
      target->OnUnplannable(key->id, plan.status());
      continue;
    }
    if (!plan->placeable()) {
      const int needed = plan->layout().world_size();
      target->OnWaiting(key->id, absl::StrCat("waiting for ", needed, " free workers (",
                                              capacity->idle.size(), " free): ", plan->reason()));
      const bool blocks = needed <= capacity->live;
      planned_[key->id] = Planned{capacity->version, blocks};
      if (blocks) break;  // it fits the cluster: keep its place, block the rest
      continue;           // larger than the cluster: let smaller jobs by
    }
    const std::string job_id = job.id();
    if (!Claim(job_id, *plan)) break;  // a worker went away meanwhile: next pass
    if (!target->OnPlaced(key->id, *plan).ok()) Unclaim(job_id, *plan);
  }
}

bool Scheduler::Claim(const std::string& job_id, const mt::v1::PlanJobResponse& plan) {
  std::vector<std::string> taken;
  for (const auto& p : plan.placement()) {
    if (!pool_->Assign(p.worker_id(), job_id, p.coordinates().rank()).ok()) {
      for (const auto& w : taken) pool_->Release(w, job_id);
      return false;
    }
    taken.push_back(p.worker_id());
  }
  return true;
}

void Scheduler::Unclaim(const std::string& job_id, const mt::v1::PlanJobResponse& plan) {
  for (const auto& p : plan.placement()) pool_->Release(p.worker_id(), job_id);
}

}  // namespace mt::coordinator
