#include "worker/parallel/process_groups.h"

#include <torch/torch.h>

#include <algorithm>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

absl::StatusOr<c10::intrusive_ptr<Group>> MakeGroup(const std::string& backend,
                                                    c10::intrusive_ptr<c10d::Store> store,
                                                    int group_rank, int group_size,
                                                    std::chrono::milliseconds timeout,
                                                    const RankNetwork& network) {
  try {
    if (backend == "gloo") {
#if MT_HAVE_GLOO
      auto opts = c10d::ProcessGroupGloo::Options::create();
      opts->timeout = timeout;
      // Bound where the worker chose (never the host name's address, which may be loopback).
      for (const std::string& name : network.gloo_interfaces) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
      }
      if (opts->devices.empty() && !network.gloo_address.empty()) {
        opts->devices.push_back(
            c10d::ProcessGroupGloo::createDeviceForHostname(network.gloo_address));
      }
      if (opts->devices.empty()) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
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

// The group of `groups` that holds `rank` (index in *index), or an empty handle (rank -1)
// when none does.
GroupHandle Find(const google::protobuf::RepeatedPtrField<mt::v1::RankGroup>& groups, int rank,
                 const std::string& kind) {
  GroupHandle h;
  h.rank = -1;
  h.size = 0;
  for (int g = 0; g < groups.size(); ++g) {
    const auto& ranks = groups[g].ranks();
    auto it = std::find(ranks.begin(), ranks.end(), rank);
    if (it == ranks.end()) continue;
    h.name = absl::StrCat(kind, "/", g);
    h.ranks.assign(ranks.begin(), ranks.end());
    h.rank = static_cast<int>(it - ranks.begin());
    h.size = ranks.size();
    return h;
  }
  return h;
}

}  // namespace

absl::Status Wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
  try {
    work->wait();
  } catch (const c10::Error& e) {
    return absl::UnavailableError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
  }
  return absl::OkStatus();
}

std::shared_ptr<ProcessGroups> ProcessGroups::Single(const std::string& backend) {
  std::shared_ptr<ProcessGroups> g(new ProcessGroups());
  g->backend_ = backend;
  g->layout_.set_world_size(1);
  g->layout_.set_tensor_model_parallel_size(1);
  g->layout_.set_context_parallel_size(1);
  g->layout_.set_pipeline_model_parallel_size(1);
  g->layout_.set_data_parallel_size(1);
  g->layout_.set_num_micro_batches(1);
  for (GroupHandle* h :
       {&g->world_, &g->tp_, &g->pp_, &g->dp_, &g->embedding_, &g->model_parallel_}) {
    h->ranks = {0};
    h->rank = 0;
    h->size = 1;
  }
  g->world_.name = "world";
  g->tp_.name = "tp/0";
  g->pp_.name = "pp/0";
  g->dp_.name = "dp/0";
  g->embedding_.name = "embedding/0";
  g->model_parallel_.name = "mp/0";
  g->AttachCommStats();
  return g;
}

void ProcessGroups::AttachCommStats() {
  for (const auto& [h, kind] : {std::pair<GroupHandle*, CommGroup>{&world_, CommGroup::kWorld},
                                {&tp_, CommGroup::kTp},
                                {&pp_, CommGroup::kPp},
                                {&dp_, CommGroup::kDp},
                                {&embedding_, CommGroup::kEmbedding},
                                {&model_parallel_, CommGroup::kModelParallel}}) {
    h->comm_stats = comm_stats_;
    h->comm_group = kind;
  }
}

absl::StatusOr<std::shared_ptr<ProcessGroups>> ProcessGroups::Create(
    const mt::v1::Layout& layout, int rank, c10::intrusive_ptr<c10d::Store> store,
    const std::string& backend, std::chrono::milliseconds timeout, const RankNetwork& network) {
  const int world = layout.world_size();
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " outside world ", world));
  }
  std::shared_ptr<ProcessGroups> g(new ProcessGroups());
  g->layout_ = layout;
  g->backend_ = backend;
  g->rank_ = rank;
  g->world_.name = "world";
  g->world_.rank = rank;
  g->world_.size = world;
  for (int r = 0; r < world; ++r) g->world_.ranks.push_back(r);
  g->tp_ = Find(layout.tensor_groups(), rank, "tp");
  g->pp_ = Find(layout.pipeline_groups(), rank, "pp");
  g->dp_ = Find(layout.data_groups(), rank, "dp");
  g->embedding_ = Find(layout.embedding_groups(), rank, "embedding");
  g->model_parallel_ = Find(layout.model_parallel_groups(), rank, "mp");
  for (const auto& [handle, what] : {std::pair<GroupHandle*, const char*>{&g->tp_, "tensor"},
                                     {&g->pp_, "pipeline"},
                                     {&g->dp_, "data"},
                                     {&g->model_parallel_, "model-parallel"}}) {
    if (!handle->member()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the layout puts rank ", rank, " in no ", what, "-parallel group"));
    }
  }
  // Groups are created in one fixed order on every rank (c10d needs matching order only
  // within a group; the fixed order keeps NCCL communicator creation deterministic).
  for (GroupHandle* h :
       {&g->world_, &g->tp_, &g->pp_, &g->dp_, &g->embedding_, &g->model_parallel_}) {
    if (!h->member() || h->size <= 1) continue;
    // The same ranks in the same order as the world: share its communicator.
    if (h != &g->world_ && h->ranks == g->world_.ranks && g->world_.group) {
      h->group = g->world_.group;
      continue;
    }
    auto group = MakeGroup(backend, c10::make_intrusive<c10d::PrefixStore>(h->name, store), h->rank,
                           h->size, timeout, network);
    if (!group.ok()) {
      // Which rank, which group: the cause names the address and port it could not reach.
      return absl::Status(
          group.status().code(),
          absl::StrCat("rank ", rank, " in ", h->name, " group [", absl::StrJoin(h->ranks, ","),
                       "]: ", group.status().message()));
    }
    h->group = *std::move(group);
  }
  g->AttachCommStats();
  MT_LOG(INFO) << "rank " << rank << " joined world " << world << " (" << backend << "): tp ["
               << absl::StrJoin(g->tp_.ranks, ",") << "] pp [" << absl::StrJoin(g->pp_.ranks, ",")
               << "] dp [" << absl::StrJoin(g->dp_.ranks, ",") << "]";
  return g;
}

}  // namespace mt::parallel
