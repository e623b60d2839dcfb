// For the job manager's unit tests (restart, reconnect, generate): a JobManager over a real
// Store (SQLite) and WorkerRegistry and a fake clock, with CPU workers registered. Header-only;
// the including test links mt_coordinator_lib, mt_testutil and GoogleTest.
#ifndef MT_COORDINATOR_JOBS_JOB_MANAGER_TESTING_H_
#define MT_COORDINATOR_JOBS_JOB_MANAGER_TESTING_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/store/store.h"
#include "coordinator/workers/registry.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::coordinator {

class JobManagerTestBase : public ::testing::Test {
 protected:
  // A new state directory (named after `name`), the manager (with `o`; its coordinator address
  // is set), and `workers` CPU workers on nodes n0, n1, ...: their ids in workers_, what the
  // registry issued them in issued_.
  void SetUpManager(const std::string& name, int workers, JobManagerOptions o = {}) {
    dir_ = testutil::MakeTempDir(name);
    auto store = Store::Open(dir_ + "/state");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    registry_ = std::make_unique<WorkerRegistry>(&clock_, absl::Seconds(10));
    o.coordinator_address = "localhost:1";
    auto jobs = JobManager::Create(store_.get(), registry_.get(), &clock_, o);
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    jobs_ = std::move(*jobs);
    for (int i = 0; i < workers; ++i) {
      WorkerRegistry::Issued issued;
      auto w = registry_->Register(CpuWorker(i), &issued);
      ASSERT_TRUE(w.ok()) << w.status();
      workers_.push_back(w->id());
      issued_[w->id()] = issued;
    }
  }

  // A registration of a one-core CPU worker with 1 GiB on node n<node>.
  static mt::v1::RegisterRequest CpuWorker(int node) {
    mt::v1::RegisterRequest r;
    r.mutable_resources()->set_node(absl::StrCat("n", node));
    r.mutable_resources()->set_gpu_index(-1);
    r.mutable_resources()->set_device_name("cpu");
    r.mutable_resources()->set_memory_bytes(int64_t{1} << 30);
    r.mutable_resources()->set_cpu_cores(1);
    return r;
  }

  FakeClock clock_;
  std::string dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<JobManager> jobs_;
  std::vector<std::string> workers_;
  std::map<std::string, WorkerRegistry::Issued> issued_;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_JOBS_JOB_MANAGER_TESTING_H_
