// The trainer's side of the job's rendezvous: a key-value space shared by the ranks of one
// attempt of one job, served by the coordinator (WorkerService.Rendezvous*). Rank 0 publishes
// the address of the collective store it serves; the others read it.
// Thread-safe (gRPC stubs are).
#ifndef MT_WORKER_PARALLEL_RENDEZVOUS_CLIENT_H_
#define MT_WORKER_PARALLEL_RENDEZVOUS_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "mt/v1/worker_service.grpc.pb.h"

namespace mt::parallel {

class RendezvousClient {
 public:
  // `channel` to the coordinator (common/rpc/dial.h: token and TLS); `rank` and its
  // `credential` (mt.v1.Assignment's rank_credential) go with every call: the coordinator
  // answers a rank only about its own job's attempt.
  RendezvousClient(std::shared_ptr<grpc::Channel> channel, std::string job_id, int attempt,
                   int rank, std::string credential);

  absl::Status Set(const std::string& key, const std::string& value);
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout);
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);

 private:
  // Sets the deadline and the rank credential of one call.
  void Prepare(grpc::ClientContext* context, absl::Time deadline) const;

  std::unique_ptr<mt::v1::WorkerService::Stub> stub_;
  const std::string job_id_;
  const int attempt_;
  const int rank_;
  const std::string credential_;
};

}  // namespace mt::parallel

#endif  // MT_WORKER_PARALLEL_RENDEZVOUS_CLIENT_H_
