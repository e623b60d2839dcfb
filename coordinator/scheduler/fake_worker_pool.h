// An in-memory WorkerPool for tests: workers are added IDLE, Assign/Release flip them and
// move the version like the registry does, and a worker can be told to refuse Assign (a race
// lost to another claimant). Thread-compatible: tests drive it from one thread.
#ifndef MT_COORDINATOR_SCHEDULER_FAKE_WORKER_POOL_H_
#define MT_COORDINATOR_SCHEDULER_FAKE_WORKER_POOL_H_

#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/scheduler/worker_pool.h"

namespace mt::coordinator {

class FakeWorkerPool : public WorkerPool {
 public:
  // Adds an IDLE worker "w-<n>" on `node` (gpu_index -1 = a CPU worker); returns its id.
  std::string AddWorker(const std::string& node = "n0", int gpu_index = -1) {
    mt::v1::Worker w;
    w.set_id(absl::StrCat("w-", workers_.size() + 1));
    w.set_state(mt::v1::WORKER_STATE_IDLE);
    w.mutable_resources()->set_node(node);
    w.mutable_resources()->set_gpu_index(gpu_index);
    const std::string id = w.id();
    workers_[id] = std::move(w);
    ++version_;
    return id;
  }
  // Live workers that are neither idle nor known here (e.g. busy with jobs of no interest).
  void set_extra_live(int n) {
    extra_live_ = n;
    ++version_;
  }
  void RefuseAssign(const std::string& worker_id) { refuse_.insert(worker_id); }
  // The job a worker runs ("" when idle).
  std::string JobOf(const std::string& worker_id) const { return workers_.at(worker_id).job_id(); }
  int snapshots() const { return snapshots_; }

  WorkerCapacity SnapshotCapacity() const override {
    ++snapshots_;
    WorkerCapacity c;
    c.version = version_;
    c.live = extra_live_;
    for (const auto& [id, w] : workers_) {
      ++c.live;
      if (w.state() == mt::v1::WORKER_STATE_IDLE) c.idle.push_back(w);
    }
    return c;
  }
  uint64_t capacity_version() const override { return version_; }
  absl::Status Assign(const std::string& worker_id, const std::string& job_id, int) override {
    auto it = workers_.find(worker_id);
    if (it == workers_.end() || refuse_.count(worker_id) > 0 ||
        it->second.state() != mt::v1::WORKER_STATE_IDLE) {
      return absl::FailedPreconditionError(absl::StrCat(worker_id, " is not idle"));
    }
    it->second.set_state(mt::v1::WORKER_STATE_BUSY);
    it->second.set_job_id(job_id);
    ++version_;
    return absl::OkStatus();
  }
  void Release(const std::string& worker_id, const std::string& job_id) override {
    auto it = workers_.find(worker_id);
    if (it == workers_.end() || it->second.job_id() != job_id) return;
    it->second.set_state(mt::v1::WORKER_STATE_IDLE);
    it->second.clear_job_id();
    ++version_;
  }

 private:
  std::map<std::string, mt::v1::Worker> workers_;
  std::set<std::string> refuse_;
  int extra_live_ = 0;
  uint64_t version_ = 1;
  mutable int snapshots_ = 0;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_SCHEDULER_FAKE_WORKER_POOL_H_
