// Process groups for one rank of a job, built from the job's layout (common/layout) and
// bootstrapped through the job's rendezvous: rank 0 serves a c10d TCPStore and publishes its
// address under "c10d_store"; every rank connects to it, and each group (world, DP, ...) is a
// ProcessGroup over a PrefixStore named after the group. Gloo on CPU, NCCL on GPU: always
// LibTorch's c10d, never a home-made collective.
//
// Thread-compatible: one training thread uses a Distributed.
#ifndef MT_WORKER_PARALLEL_DIST_H_
#define MT_WORKER_PARALLEL_DIST_H_

#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mt/v1/job.pb.h"
#include "worker/parallel/collectives.h"
#include "worker/parallel/rank_network.h"
#include "worker/parallel/rendezvous_client.h"

namespace mt::parallel {

struct DistOptions {
  // "gloo" (CPU tensors) or "nccl" (CUDA tensors).
  std::string backend = "gloo";
  // How long ranks wait for each other (store connection, group creation, collectives).
  absl::Duration timeout = absl::Minutes(10);
  // Gradient bucket size in elements (ParallelSpec.ddp_bucket_size).
  int64_t bucket_elements = 40'000'000;
  // Addresses, interfaces and ports (rank_network.h; the worker's choice).
  RankNetwork network;
  // How long a rank tries to reach rank 0's store before it fails naming the address: an
  // unreachable address fails in seconds, not after `timeout`.
  absl::Duration connect_timeout = absl::Seconds(30);
};

class ProcessGroups;  // process_groups.h (c10d; LibTorch translation units only)

// What a rank of a job gets from InitDistributed.
struct Distributed {
  std::shared_ptr<ProcessGroups> groups;     // every group of this rank
  std::unique_ptr<Collectives> collectives;  // the DP view the trainer uses
  // A connection of its own to the job's store (rank 0's TCPStore), for the checkpoint's save
  // exchange (checkpoint/store_exchange.h), which waits on a background thread: a save needs
  // the ranks of the job only, never the coordinator. Null for a world of one.
  c10::intrusive_ptr<c10d::Store> save_store;
};

// Builds the groups and the collectives the training step uses. With a world of one it
// returns ProcessGroups::Single and LocalCollectives without touching the rendezvous.
absl::StatusOr<Distributed> InitDistributed(const mt::v1::Layout& layout, int rank,
                                            RendezvousClient* rendezvous,
                                            const DistOptions& options);

// The collectives of the DP group of `groups` (LocalCollectives for a world of one).
std::unique_ptr<Collectives> MakeCollectives(std::shared_ptr<ProcessGroups> groups,
                                             int64_t bucket_elements);

// Which backends this build has ("gloo", "nccl").
bool HasBackend(const std::string& backend);

}  // namespace mt::parallel

#endif  // MT_WORKER_PARALLEL_DIST_H_
