#include "coordinator/scheduler/pending_queue.h"

#include <algorithm>

namespace mt::coordinator {

void PendingQueue::Add(QueueKey key) {
  std::deque<int64_t>& ids = groups_[key.priority];
  if (ids.empty() || ids.back() < key.id) {
    ids.push_back(key.id);
  } else {
    auto it = std::lower_bound(ids.begin(), ids.end(), key.id);
    if (it != ids.end() && *it == key.id) return;  // already queued
    ids.insert(it, key.id);
  }
  ++size_;
}

void PendingQueue::Remove(QueueKey key) {
  auto group = groups_.find(key.priority);
  if (group == groups_.end()) return;
  std::deque<int64_t>& ids = group->second;
  auto it = std::lower_bound(ids.begin(), ids.end(), key.id);
  if (it == ids.end() || *it != key.id) return;
  ids.erase(it);
  --size_;
  if (ids.empty()) groups_.erase(group);
}

std::optional<QueueKey> PendingQueue::Next(const std::optional<QueueKey>& after) const {
  auto group = groups_.begin();
  if (after.has_value()) {
    group = groups_.lower_bound(after->priority);  // the first priority <= after's
    if (group != groups_.end() && group->first == after->priority) {
      const std::deque<int64_t>& ids = group->second;
      auto it = std::upper_bound(ids.begin(), ids.end(), after->id);
      if (it != ids.end()) return QueueKey{group->first, *it};
      ++group;
    }
  }
  if (group == groups_.end()) return std::nullopt;
  return QueueKey{group->first, group->second.front()};
}

int64_t PendingQueue::Position(QueueKey key) const {
  int64_t ahead = 0;
  for (const auto& [priority, ids] : groups_) {
    if (priority < key.priority) break;
    if (priority > key.priority) {
      ahead += static_cast<int64_t>(ids.size());
      continue;
    }
    ahead += std::lower_bound(ids.begin(), ids.end(), key.id) - ids.begin();
  }
  return ahead;
}

}  // namespace mt::coordinator
