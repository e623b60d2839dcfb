// Per-worker queues of commands (assign, stop) on their way to the worker daemons: JobManager
// pushes as it decides, each worker's StreamAssignments call takes them. Commands pushed while
// no stream is open wait for the next one, so a worker that reconnects misses nothing.
//
// Thread-safe: one mutex of its own, so that a stream waiting for commands never holds up the
// job manager. Commands for one worker come out in the order they were pushed.
#ifndef MT_COORDINATOR_WORKERS_MAILBOXES_H_
#define MT_COORDINATOR_WORKERS_MAILBOXES_H_

#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "mt/v1/worker_service.pb.h"

namespace mt::coordinator {

class WorkerMailboxes {
 public:
  void Push(const std::string& worker_id, mt::v1::WorkerCommand command);
  // Pushes an assign command unless an assignment of the same job and attempt waits already
  // (a re-sent assignment); returns whether it pushed.
  bool PushAssignmentOnce(const std::string& worker_id, mt::v1::WorkerCommand command);
  // Everything queued for the worker, waiting up to `timeout` for something; empty when none
  // came (or after Shutdown).
  std::vector<mt::v1::WorkerCommand> Take(const std::string& worker_id, absl::Duration timeout);
  // Drops what waits for a worker that was declared lost: it re-registers and is told afresh.
  void Forget(const std::string& worker_id);
  // Wakes every waiting Take; later ones return at once.
  void Shutdown();

 private:
  absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::deque<mt::v1::WorkerCommand>> boxes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_WORKERS_MAILBOXES_H_
