// The index of PENDING jobs in scheduling order: priority (highest first), then id (FIFO).
// Next() walks it by key, so a caller may add or remove jobs between steps; Position() counts
// the jobs ahead of one without visiting them one by one.
//
// Thread-compatible: its owner (Scheduler, under JobManager's mutex) serializes calls.
#ifndef MT_COORDINATOR_SCHEDULER_PENDING_QUEUE_H_
#define MT_COORDINATOR_SCHEDULER_PENDING_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>

namespace mt::coordinator {

// A job's place in the queue.
struct QueueKey {
  int priority = 0;
  int64_t id = 0;
  bool operator==(const QueueKey& o) const { return priority == o.priority && id == o.id; }
};

class PendingQueue {
 public:
  // Ids grow, so a new job goes to the back of its group in O(1); a job queued again (a
  // restart) goes back to its place by id.
  void Add(QueueKey key);
  void Remove(QueueKey key);
  // The job after `after` in scheduling order, the first when `after` is empty; nullopt at the
  // end. `after` need not be in the queue any more.
  std::optional<QueueKey> Next(const std::optional<QueueKey>& after) const;
  // Jobs ahead of `key`: all of higher priority, then those of its priority with lower ids.
  int64_t Position(QueueKey key) const;
  int64_t size() const { return size_; }

 private:
  // Ids by priority, each group in id order and never empty.
  std::map<int, std::deque<int64_t>, std::greater<int>> groups_;
  int64_t size_ = 0;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_SCHEDULER_PENDING_QUEUE_H_
