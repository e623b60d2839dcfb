#include "worker/parallel/dist.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"

#if MT_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if MT_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace mt::parallel {
namespace {

// LibTorch 2.x splits the process group into a ProcessGroup and its Backend; the backends
// carry the collectives we call. 1.13 has only ProcessGroup.
#if TORCH_VERSION_MAJOR >= 2
using Group = c10d::Backend;
#else
using Group = c10d::ProcessGroup;
#endif

std::vector<int> GroupOf(const google::protobuf::RepeatedPtrField<mt::v1::RankGroup>& groups,
                         int rank, int* index) {
  for (int g = 0; g < groups.size(); ++g) {
    const auto& ranks = groups[g].ranks();
    auto it = std::find(ranks.begin(), ranks.end(), rank);
    if (it != ranks.end()) {
      *index = g;
      return {ranks.begin(), ranks.end()};
    }
  }
  *index = -1;
  return {};
}

absl::StatusOr<c10::intrusive_ptr<Group>> MakeGroup(const std::string& backend,
                                                    c10::intrusive_ptr<c10d::Store> store,
                                                    int group_rank, int group_size,
                                                    std::chrono::milliseconds timeout) {
  try {
    if (backend == "gloo") {
#if MT_HAVE_GLOO
      auto opts = c10d::ProcessGroupGloo::Options::create();
      opts->timeout = timeout;
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      return c10::make_intrusive<c10d::ProcessGroupGloo>(store, group_rank, group_size, opts);
#else
      return absl::FailedPreconditionError(
          "this build has no Gloo (the CUDA LibTorch ships no Gloo headers): run CPU ranks "
          "with a build against the distribution's LibTorch");
#endif
    }
    if (backend == "nccl") {
#if MT_HAVE_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, group_rank, group_size, opts);
#else
      return absl::FailedPreconditionError("this build has no NCCL: GPU ranks need a CUDA build");
#endif
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown backend '", backend, "'"));
  } catch (const c10::Error& e) {
    return absl::UnavailableError(
        absl::StrCat("creating a ", backend, " group: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("creating a ", backend, " group: ", e.what()));
  }
}

absl::Status Wait(const c10::intrusive_ptr<c10d::Work>& work, absl::string_view what) {
  try {
    work->wait();
  } catch (const c10::Error& e) {
    return absl::UnavailableError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
  }
  return absl::OkStatus();
}

class ProcessGroupCollectives : public Collectives {
 public:
  ProcessGroupCollectives(c10::intrusive_ptr<Group> world, c10::intrusive_ptr<Group> dp,
                          int dp_rank, int dp_size, int64_t bucket_elements)
      : world_(std::move(world)),
        dp_(std::move(dp)),
        dp_rank_(dp_rank),
        dp_size_(dp_size),
        bucket_elements_(std::max<int64_t>(1, bucket_elements)) {}

  int dp_size() const override { return dp_size_; }
  int dp_rank() const override { return dp_rank_; }

  absl::Status AverageGradients(const std::vector<at::Tensor>& grads) override {
    if (dp_size_ == 1) return absl::OkStatus();
    const absl::Time start = absl::Now();
    // Buckets of consecutive same-dtype gradients, flattened, all-reduced, divided, copied
    // back: one collective per bucket instead of one per tensor.
    size_t i = 0;
    while (i < grads.size()) {
      std::vector<at::Tensor> bucket;
      int64_t elements = 0;
      const auto dtype = grads[i].scalar_type();
      while (i < grads.size() && grads[i].scalar_type() == dtype &&
             (bucket.empty() || elements + grads[i].numel() <= bucket_elements_)) {
        bucket.push_back(grads[i]);
        elements += grads[i].numel();
        ++i;
      }
      if (bucket.size() == 1 && bucket[0].is_contiguous()) {
        // A flat gradient buffer's view: reduce it in place, no copies.
        std::vector<at::Tensor> inplace = {bucket[0]};
        c10d::AllreduceOptions opts;
        opts.reduceOp = c10d::ReduceOp::SUM;
        MT_RETURN_IF_ERROR(Wait(dp_->allreduce(inplace, opts), "gradient all-reduce"));
        try {
          bucket[0].div_(static_cast<double>(dp_size_));
        } catch (const c10::Error& e) {
          return absl::InternalError(
              absl::StrCat("averaging gradients: ", e.what_without_backtrace()));
        }
        continue;
      }
      std::vector<at::Tensor> flat;
      try {
        std::vector<at::Tensor> views;
        for (const auto& g : bucket) views.push_back(g.reshape({-1}));
        flat.push_back(torch::cat(views));
      } catch (const c10::Error& e) {
        return absl::InternalError(
            absl::StrCat("flattening gradients: ", e.what_without_backtrace()));
      }
      c10d::AllreduceOptions opts;
      opts.reduceOp = c10d::ReduceOp::SUM;
      MT_RETURN_IF_ERROR(Wait(dp_->allreduce(flat, opts), "gradient all-reduce"));
      try {
        flat[0].div_(static_cast<double>(dp_size_));
        int64_t offset = 0;
        for (const auto& g : bucket) {
          const int64_t n = g.numel();
          g.copy_(flat[0].narrow(0, offset, n).view_as(g));
          offset += n;
        }
      } catch (const c10::Error& e) {
        return absl::InternalError(
            absl::StrCat("unflattening gradients: ", e.what_without_backtrace()));
      }
    }
    comm_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
    return absl::OkStatus();
  }

  absl::StatusOr<double> AverageScalar(double value) override {
    if (dp_size_ == 1) return value;
    MT_ASSIGN_OR_RETURN(double sum, Reduce(dp_, value, c10d::ReduceOp::SUM));
    return sum / dp_size_;
  }

  absl::StatusOr<double> MaxScalarOverWorld(double value) override {
    if (world_ == nullptr) return value;
    return Reduce(world_, value, c10d::ReduceOp::MAX);
  }

  double TakeCommunicationSeconds() override {
    double s = comm_seconds_;
    comm_seconds_ = 0;
    return s;
  }

 private:
  absl::StatusOr<double> Reduce(const c10::intrusive_ptr<Group>& group, double value,
                                c10d::ReduceOp::RedOpType op) {
    const absl::Time start = absl::Now();
    std::vector<at::Tensor> t;
    // The scalar lives on the device the backend expects (NCCL: CUDA).
    auto options = torch::TensorOptions().dtype(torch::kFloat64);
    if (backend_is_cuda_) options = options.device(torch::kCUDA);
    t.push_back(torch::full({1}, value, options));
    c10d::AllreduceOptions opts;
    opts.reduceOp = op;
    MT_RETURN_IF_ERROR(Wait(group->allreduce(t, opts), "scalar all-reduce"));
    comm_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
    return t[0].item<double>();
  }

 public:
  bool backend_is_cuda_ = false;

 private:
  c10::intrusive_ptr<Group> world_;
  c10::intrusive_ptr<Group> dp_;
  const int dp_rank_;
  const int dp_size_;
  const int64_t bucket_elements_;
  double comm_seconds_ = 0;
};

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

absl::StatusOr<std::unique_ptr<Collectives>> InitDistributed(const mt::v1::Layout& layout, int rank,
                                                             RendezvousClient* rendezvous,
                                                             const DistOptions& options) {
  const int world = layout.world_size();
  if (world <= 1) return std::make_unique<LocalCollectives>();
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " outside world ", world));
  }
  const auto timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout));
  c10::intrusive_ptr<c10d::Store> store;
  try {
    if (rank == 0) {
      c10d::TCPStoreOptions o;
      o.port = 0;  // any free port; published below
      o.isServer = true;
      o.numWorkers = world;
      o.waitWorkers = false;
      o.timeout = timeout;
      auto tcp = c10::make_intrusive<c10d::TCPStore>(AdvertiseHost(), o);
      const std::string address = absl::StrCat(AdvertiseHost(), ":", tcp->getPort());
      MT_RETURN_IF_ERROR(rendezvous->Set("c10d_store", address));
      MT_LOG(INFO) << "rank 0 serves the collective store at " << address;
      store = tcp;
    } else {
      MT_ASSIGN_OR_RETURN(auto values, rendezvous->Get({"c10d_store"}, options.timeout));
      const std::string& address = values[0];
      const size_t colon = address.rfind(':');
      int port = 0;
      if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
        return absl::DataLossError(absl::StrCat("bad store address '", address, "'"));
      }
      c10d::TCPStoreOptions o;
      o.port = static_cast<uint16_t>(port);
      o.isServer = false;
      o.numWorkers = world;
      o.timeout = timeout;
      store = c10::make_intrusive<c10d::TCPStore>(address.substr(0, colon), o);
    }
  } catch (const c10::Error& e) {
    return absl::UnavailableError(absl::StrCat("collective store: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("collective store: ", e.what()));
  }

  MT_ASSIGN_OR_RETURN(
      auto world_group,
      MakeGroup(options.backend, c10::make_intrusive<c10d::PrefixStore>("world", store), rank,
                world, timeout));
  int dp_index = -1;
  std::vector<int> dp_ranks = GroupOf(layout.data_groups(), rank, &dp_index);
  if (dp_ranks.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is in no data-parallel group"));
  }
  const int dp_rank =
      static_cast<int>(std::find(dp_ranks.begin(), dp_ranks.end(), rank) - dp_ranks.begin());
  c10::intrusive_ptr<Group> dp_group = world_group;
  if (static_cast<int>(dp_ranks.size()) != world) {
    MT_ASSIGN_OR_RETURN(dp_group, MakeGroup(options.backend,
                                            c10::make_intrusive<c10d::PrefixStore>(
                                                absl::StrCat("dp/", dp_index), store),
                                            dp_rank, static_cast<int>(dp_ranks.size()), timeout));
  }
  MT_LOG(INFO) << "rank " << rank << " joined world " << world << " (" << options.backend
               << "), data-parallel group [" << absl::StrJoin(dp_ranks, ",") << "]";
  auto c = std::make_unique<ProcessGroupCollectives>(
      world_group, dp_group, dp_rank, static_cast<int>(dp_ranks.size()), options.bucket_elements);
  c->backend_is_cuda_ = options.backend == "nccl";
  return c;
}

}  // namespace mt::parallel
