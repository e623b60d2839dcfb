#include "worker/parallel/dist.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/net/address.h"
#include "worker/parallel/process_groups.h"

namespace mt::parallel {
namespace {

class ProcessGroupCollectives : public Collectives {
 public:
  explicit ProcessGroupCollectives(std::shared_ptr<ProcessGroups> groups)
      : groups_(std::move(groups)),
        world_(groups_->world()),
        dp_(groups_->dp()),
        dp_rank_(groups_->dp_rank()),
        dp_size_(groups_->dp().size),
        backend_is_cuda_(groups_->is_cuda()) {}

  int dp_size() const override { return dp_size_; }
  int dp_rank() const override { return dp_rank_; }

  absl::StatusOr<double> AverageScalar(double value) override {
    if (dp_size_ == 1) return value;
    MT_ASSIGN_OR_RETURN(double sum, Reduce(dp_, value, c10d::ReduceOp::SUM));
    return sum / dp_size_;
  }

  absl::StatusOr<double> MaxScalarOverWorld(double value) override {
    if (world_.group == nullptr) return value;
    return Reduce(world_, value, c10d::ReduceOp::MAX);
  }

 private:
  absl::StatusOr<double> Reduce(const GroupHandle& group, double value,
                                c10d::ReduceOp::RedOpType op) {
    std::vector<at::Tensor> t;
    // The scalar lives on the device the backend expects (NCCL: CUDA).
    auto options = torch::TensorOptions().dtype(torch::kFloat64);
    if (backend_is_cuda_) options = options.device(torch::kCUDA);
    t.push_back(torch::full({1}, value, options));
    c10d::AllreduceOptions opts;
    opts.reduceOp = op;
    CommStats::Span span = StartComm(group, Collective::kAllReduce, t[0]);
    MT_RETURN_IF_ERROR(Wait(group.group->allreduce(t, opts), "scalar all-reduce"));
    span.Finish();
    return t[0].item<double>();
  }

  std::shared_ptr<ProcessGroups> groups_;
  const GroupHandle& world_;  // groups_'s
  const GroupHandle& dp_;
  const int dp_rank_;
  const int dp_size_;
  const bool backend_is_cuda_;
};

std::chrono::milliseconds Millis(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// Rank 0: serves the store on a free port (of MT_RANK_PORT_RANGE when given) and publishes
// advertise_host:port in the rendezvous.
absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> ServeStore(int world, const DistOptions& options,
                                                              RendezvousClient* rendezvous) {
  const net::PortRange& range = options.network.store_ports;
  const int first = range.empty() ? 0 : range.first;
  const int last = range.empty() ? 0 : range.last;
  std::string last_error;
  for (int port = first; port <= last; ++port) {
    try {
      c10d::TCPStoreOptions o;
      o.port = static_cast<uint16_t>(port);  // 0 = any free port
      o.isServer = true;
      o.numWorkers = world;
      o.waitWorkers = false;
      o.timeout = Millis(options.timeout);
      auto tcp = c10::make_intrusive<c10d::TCPStore>(options.network.advertise_host, o);
      const std::string address = net::JoinHostPort(options.network.advertise_host, tcp->getPort());
      MT_RETURN_IF_ERROR(rendezvous->Set("c10d_store", address));
      MT_LOG(INFO) << "rank 0 serves the collective store at " << address;
      return tcp;
    } catch (const c10::Error& e) {
      last_error = e.what_without_backtrace();
    } catch (const std::exception& e) {
      last_error = e.what();
    }
  }
  return absl::UnavailableError(
      range.empty()
          ? absl::StrCat("rank 0 cannot serve the collective store: ", last_error)
          : absl::StrCat("rank 0 cannot serve the collective store on any port of ", range.first,
                         "-", range.last, " (--rank-port-range): ", last_error));
}

// The store address rank 0 published.
absl::StatusOr<net::HostPort> PublishedStoreAddress(const DistOptions& options,
                                                    RendezvousClient* rendezvous) {
  MT_ASSIGN_OR_RETURN(auto values, rendezvous->Get({"c10d_store"}, options.timeout));
  absl::StatusOr<net::HostPort> address = net::ParseHostPort(values[0], "the store address");
  if (!address.ok()) return absl::DataLossError(std::string(address.status().message()));
  return *address;
}

// A client connection to the store at `address`, failing within connect_timeout with the rank,
// the address and the port when it cannot be reached.
absl::StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(int rank, int world,
                                                             const DistOptions& options,
                                                             const net::HostPort& address) {
  try {
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(address.port);
    o.isServer = false;
    o.numWorkers = world;
    o.timeout = Millis(std::min(options.timeout, options.connect_timeout));
    auto tcp = c10::make_intrusive<c10d::TCPStore>(address.host, o);
    tcp->setTimeout(Millis(options.timeout));
    return c10::intrusive_ptr<c10d::Store>(tcp);
  } catch (const std::exception& e) {
    const c10::Error* c10 = dynamic_cast<const c10::Error*>(&e);
    return absl::UnavailableError(absl::StrCat(
        "rank ", rank, " cannot reach rank 0's collective store at ", address.host, " port ",
        address.port, " within ", absl::FormatDuration(options.connect_timeout),
        " (is that address reachable from this host? mt-worker --interface and "
        "--advertise-address choose it): ",
        c10 != nullptr ? c10->what_without_backtrace() : e.what()));
  }
}

}  // namespace

bool HasBackend(const std::string& backend) {
#if MT_HAVE_GLOO
  if (backend == "gloo") return true;
#endif
#if MT_HAVE_NCCL
  if (backend == "nccl") return true;
#endif
  return false;
}

std::unique_ptr<Collectives> MakeCollectives(std::shared_ptr<ProcessGroups> groups,
                                             int64_t bucket_elements) {
  if (groups->world_size() <= 1) return std::make_unique<LocalCollectives>();
  (void)bucket_elements;  // the optimizer buckets the gradients (optimizer.h)
  return std::make_unique<ProcessGroupCollectives>(std::move(groups));
}

absl::StatusOr<Distributed> InitDistributed(const mt::v1::Layout& layout, int rank,
                                            RendezvousClient* rendezvous,
                                            const DistOptions& options) {
  const int world = layout.world_size();
  Distributed out;
  if (world <= 1) {
    out.groups = ProcessGroups::Single(options.backend);
    out.collectives = std::make_unique<LocalCollectives>();
    return out;
  }
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " outside world ", world));
  }
  const auto timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout));
  c10::intrusive_ptr<c10d::Store> store;
  // Saves meet in the same store over a connection of their own (checkpoint/store_exchange.h),
  // so that an async save waiting on a background thread never blocks the training thread's
  // use of the store.
  if (rank == 0) {
    MT_ASSIGN_OR_RETURN(auto served, ServeStore(world, options, rendezvous));
    store = served;
    const net::HostPort self{options.network.advertise_host, served->getPort()};
    MT_ASSIGN_OR_RETURN(out.save_store, ConnectStore(rank, world, options, self));
  } else {
    MT_ASSIGN_OR_RETURN(const net::HostPort address, PublishedStoreAddress(options, rendezvous));
    MT_ASSIGN_OR_RETURN(store, ConnectStore(rank, world, options, address));
    MT_ASSIGN_OR_RETURN(out.save_store, ConnectStore(rank, world, options, address));
  }
  MT_ASSIGN_OR_RETURN(out.groups, ProcessGroups::Create(layout, rank, store, options.backend,
                                                        timeout, options.network));
  out.collectives = MakeCollectives(out.groups, options.bucket_elements);
  return out;
}

}  // namespace mt::parallel
