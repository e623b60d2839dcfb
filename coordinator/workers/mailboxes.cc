#include "coordinator/workers/mailboxes.h"

#include <iterator>
#include <utility>

namespace mt::coordinator {

void WorkerMailboxes::Push(const std::string& worker_id, mt::v1::WorkerCommand command) {
  absl::MutexLock lock(&mu_);
  boxes_[worker_id].push_back(std::move(command));
}

bool WorkerMailboxes::PushAssignmentOnce(const std::string& worker_id,
                                         mt::v1::WorkerCommand command) {
  absl::MutexLock lock(&mu_);
  std::deque<mt::v1::WorkerCommand>& box = boxes_[worker_id];
  const mt::v1::Assignment& a = command.assign();
  for (const mt::v1::WorkerCommand& queued : box) {
    if (queued.has_assign() && queued.assign().job_id() == a.job_id() &&
        queued.assign().attempt() == a.attempt()) {
      return false;
    }
  }
  box.push_back(std::move(command));
  return true;
}

std::vector<mt::v1::WorkerCommand> WorkerMailboxes::Take(const std::string& worker_id,
                                                         absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = boxes_.find(worker_id);
    return shutdown_ || (it != boxes_.end() && !it->second.empty());
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  std::vector<mt::v1::WorkerCommand> out;
  auto it = boxes_.find(worker_id);
  if (it != boxes_.end()) {
    out.assign(std::make_move_iterator(it->second.begin()),
               std::make_move_iterator(it->second.end()));
    it->second.clear();
  }
  return out;
}

void WorkerMailboxes::Forget(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  boxes_.erase(worker_id);
}

void WorkerMailboxes::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

}  // namespace mt::coordinator
