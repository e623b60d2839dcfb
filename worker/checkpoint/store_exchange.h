// The save exchange of a job's ranks over the job's own key-value store (rank 0's c10d
// TCPStore, parallel/dist.h Distributed::save_store): every rank sets "mt/save/<step>/<rank>" to
// its shard result, rank 0 waits for all of them, reads them and deletes them. The coordinator
// plays no part: a coordinator outage that spans a save does not fail it (the coordinator
// learns of the save from rank 0's report, which the worker daemon delivers when it is back).
//
// Gather polls the store (check) rather than blocking in c10d's wait, so that it can name the
// ranks missing at the deadline and never holds the store's connection for long.
// Thread-safe as the store is (c10d's TCPStore serialises its calls); give it a connection of
// its own when other threads use the store (an async save gathers on a background thread).
#ifndef MT_WORKER_CHECKPOINT_STORE_EXCHANGE_H_
#define MT_WORKER_CHECKPOINT_STORE_EXCHANGE_H_

#include <cstdint>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/checkpoint/checkpointer.h"

namespace mt::checkpoint {

class StoreExchange : public SaveExchange {
 public:
  explicit StoreExchange(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  absl::Status Publish(int64_t step, int rank, const std::string& result) override;
  absl::StatusOr<std::vector<std::string>> Gather(int64_t step, int world_size,
                                                  absl::Duration timeout) override;

  static std::string Key(int64_t step, int rank);

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace mt::checkpoint

#endif  // MT_WORKER_CHECKPOINT_STORE_EXCHANGE_H_
