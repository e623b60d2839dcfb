// For tests: the ranks of a tp x pp x dp layout in one process, one thread per rank, their
// process groups over one c10d::HashStore (as process_groups_test.cc builds them).
// Header-only; link mt_parallel, mt_job_layout and mt_spec.
#ifndef MT_WORKER_PARALLEL_RANK_THREADS_TESTING_H_
#define MT_WORKER_PARALLEL_RANK_THREADS_TESTING_H_

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "common/layout/job_layout.h"
#include "common/spec/defaults.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/parallel/process_groups.h"

namespace mt::parallel::testing {

inline mt::v1::Layout LayoutOf(int tp, int pp, int dp, int num_layers = 4) {
  mt::v1::JobSpec spec;
  spec.mutable_model()->set_num_layers(num_layers);
  spec.mutable_parallel()->set_tensor_model_parallel_size(tp);
  spec.mutable_parallel()->set_pipeline_model_parallel_size(pp);
  spec.mutable_parallel()->set_data_parallel_size(dp);
  spec.mutable_training()->set_micro_batch_size(1);
  spec.mutable_training()->set_global_batch_size(dp);
  mt::spec::ApplyDefaults(&spec);
  auto layout = mt::layout::JobLayout(spec, tp * pp * dp);
  if (!layout.ok()) return mt::v1::Layout();
  return *layout;
}

// Runs fn(rank, groups) on one thread per rank and joins them; `backend` "gloo" (CPU) or
// "nccl" (rank r's tensors on cuda:r), `timeout` the groups' collective timeout. Returns one
// string per rank:
// empty when its groups were built and fn returned, else what went wrong (a failed group
// creation, or an exception fn threw). Assertions inside fn report through gtest as usual.
// Every rank's groups live until all threads are done: a rank whose fn returns at once must
// not close its Gloo pairs while a slower rank still completes its handshakes with them (that
// rank then failed with "Connection closed by peer", once in a full run).
inline std::vector<std::string> RunRanks(
    const mt::v1::Layout& layout,
    const std::function<void(int rank, std::shared_ptr<ProcessGroups> groups)>& fn,
    const std::string& backend = "gloo",
    std::chrono::milliseconds timeout = std::chrono::milliseconds(60000)) {
  const int world = layout.world_size();
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::string> errors(world);
  std::vector<std::shared_ptr<ProcessGroups>> alive(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      auto groups = ProcessGroups::Create(layout, rank, store, backend, timeout);
      if (!groups.ok()) {
        errors[rank] = groups.status().ToString();
        return;
      }
      alive[rank] = *groups;
      try {
        fn(rank, *groups);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  alive.clear();
  if (world == 0) errors.push_back("the layout did not build");
  return errors;
}

}  // namespace mt::parallel::testing

#endif  // MT_WORKER_PARALLEL_RANK_THREADS_TESTING_H_
