#include "worker/checkpoint/checkpointer.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/checkpoint/file_writer.h"
#include "common/checkpoint/hf_gpt2.h"
#include "common/checkpoint/safetensors.h"
#include "google/protobuf/util/time_util.h"

namespace mt::checkpoint {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

absl::Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return IoError("creating", path, errno);
  return absl::OkStatus();
}

}  // namespace

absl::Status LocalExchange::Publish(int64_t step, int rank, const std::string& result) {
  absl::MutexLock lock(&mu_);
  results_[{step, rank}] = result;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> LocalExchange::Gather(int64_t step, int world_size,
                                                               absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (int r = 0; r < world_size; ++r) {
      if (!results_.count({step, r})) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("ranks did not report save ", step, " within ",
                                                    absl::FormatDuration(timeout)));
  }
  std::vector<std::string> out;
  for (int r = 0; r < world_size; ++r) out.push_back(results_[{step, r}]);
  return out;
}

// Host copies of one rank's state, owned until written.
struct Checkpointer::Snapshot {
  int64_t step = 0;
  std::vector<std::string> names;
  std::vector<torch::Tensor> host;  // contiguous CPU tensors
  std::vector<int> splits;
  mt::v1::CheckpointManifest base;  // rank 0's manifest fields
  Clock::time_point start;
  double snapshot_seconds = 0;
};

Checkpointer::Checkpointer(CheckpointerOptions options, SaveExchange* exchange)
    : options_(std::move(options)), exchange_(exchange) {}

Checkpointer::~Checkpointer() { Wait(); }

absl::StatusOr<std::unique_ptr<Checkpointer>> Checkpointer::Create(CheckpointerOptions options,
                                                                   SaveExchange* exchange) {
  if (options.save_dir.empty()) return absl::InvalidArgumentError("checkpoint.save_dir is empty");
  if (exchange == nullptr) return absl::InvalidArgumentError("no save exchange");
  MT_RETURN_IF_ERROR(MakeDir(options.save_dir));
  std::unique_ptr<Checkpointer> c(new Checkpointer(std::move(options), exchange));
  const mt::v1::Layout& l = c->options_.layout;
  c->rank_ = c->options_.coordinates.rank();
  c->world_ = std::max(1, l.world_size());
  // One copy per (TP, PP) position: the first DP (and CP) replica writes it.
  c->writes_shard_ = c->options_.coordinates.dp() == 0 && c->options_.coordinates.cp() == 0;
  return c;
}

absl::Status Checkpointer::Save(engine::Trainer& trainer, double loss, double validation_loss) {
  Wait();
  const int64_t step = trainer.iteration();
  if (step == last_step_) return absl::OkStatus();
  auto snapshot = std::make_shared<Snapshot>();
  snapshot->start = Clock::now();
  snapshot->step = step;
  // Every rank: with the distributed optimizer the DP group gathers the optimizer state.
  auto tensors = CollectTensors(trainer);
  if (!tensors.ok()) {
    return absl::Status(tensors.status().code(), absl::StrCat("checkpoint snapshot at step ", step,
                                                              ": ", tensors.status().message()));
  }
  if (writes_shard_) {
    try {
      torch::NoGradGuard no_grad;
      for (StateTensor& t : *tensors) {
        snapshot->names.push_back(t.name);
        snapshot->splits.push_back(t.split_dim);
        // A copy even on the CPU: training goes on while an async save writes.
        snapshot->host.push_back(
            t.tensor.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous());
      }
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat("checkpoint snapshot at step ", step, ": ", e.what_without_backtrace()));
    }
  }
  if (rank_ == 0) {
    mt::v1::CheckpointManifest& m = snapshot->base;
    m.set_job_id(options_.job_id);
    m.set_attempt(options_.attempt);
    m.set_step(step);
    m.set_consumed_samples(trainer.consumed_samples());
    m.set_loss(loss);
    m.set_validation_loss(validation_loss);
    *m.mutable_spec() = options_.spec;
    *m.mutable_layout() = options_.layout;
    *m.mutable_model() = DescribeModel(trainer);
    *m.mutable_trainer() = CollectScalars(trainer);
    *m.mutable_create_time() = google::protobuf::util::TimeUtil::GetCurrentTime();
  }
  snapshot->snapshot_seconds = SecondsSince(snapshot->start);
  last_step_ = step;
  if (options_.async_save) {
    worker_ = std::thread([this, snapshot] {
      SaveInfo info = Write(*snapshot);
      absl::MutexLock lock(&mu_);
      finished_.push_back(std::move(info));
    });
    return absl::OkStatus();
  }
  SaveInfo info = Write(*snapshot);
  absl::Status status = info.status;
  absl::MutexLock lock(&mu_);
  finished_.push_back(std::move(info));
  return status;
}

SaveInfo Checkpointer::Write(Snapshot& s) {
  SaveInfo info;
  info.step = s.step;
  info.snapshot_seconds = s.snapshot_seconds;
  const std::string partial = JoinPath(options_.save_dir, PartialDirName(s.step, options_.attempt));
  info.directory = JoinPath(options_.save_dir, IterationDirName(s.step));
  ShardResult result;
  result.rank = rank_;
  result.ok = true;
  if (writes_shard_) {
    const int tp = options_.coordinates.tp();
    const int pp = options_.coordinates.pp();
    const int tp_size = std::max(1, options_.layout.tensor_model_parallel_size());
    std::map<std::string, std::string> meta = {
        {"format", kShardFormatName},    {"format_version", "1"},
        {"tp_rank", std::to_string(tp)}, {"tp_size", std::to_string(tp_size)},
        {"pp_rank", std::to_string(pp)}, {"step", std::to_string(s.step)},
        {"rank", std::to_string(rank_)}};
    std::vector<TensorView> views;
    absl::Status status = MakeDir(partial);
    for (size_t i = 0; status.ok() && i < s.names.size(); ++i) {
      auto dtype = ToDType(s.host[i].scalar_type());
      if (!dtype.ok()) {
        status = dtype.status();
        break;
      }
      TensorView v;
      v.name = s.names[i];
      v.dtype = *dtype;
      v.shape = s.host[i].sizes().vec();
      v.data = s.host[i].data_ptr();
      v.nbytes = s.host[i].nbytes();
      views.push_back(std::move(v));
      if (s.splits[i] >= 0) meta["split." + s.names[i]] = std::to_string(s.splits[i]);
    }
    result.file = ShardFileName(tp, pp);
    if (status.ok()) {
      auto digest = WriteSafetensors(JoinPath(partial, result.file), views, meta);
      if (digest.ok()) {
        result.size = digest->size;
        result.sha256 = digest->sha256;
        info.bytes = digest->size;
      } else {
        status = digest.status();
      }
    }
    if (!status.ok()) {
      result.ok = false;
      result.error = std::string(status.message());
      info.status = status;
    }
  }
  // Free the host copy before waiting for the others.
  s.host.clear();
  if (absl::Status p = exchange_->Publish(s.step, rank_, SerializeShardResult(result)); !p.ok()) {
    info.status = p;
  }
  if (rank_ == 0) {
    auto gathered = exchange_->Gather(s.step, world_, options_.gather_timeout);
    std::vector<ShardResult> results;
    absl::Status status = gathered.status();
    for (size_t r = 0; status.ok() && r < gathered->size(); ++r) {
      auto parsed = ParseShardResult((*gathered)[r]);
      if (!parsed.ok()) {
        status = parsed.status();
        break;
      }
      results.push_back(*std::move(parsed));
    }
    if (status.ok()) {
      status = CommitCheckpoint(options_.save_dir, partial, s.base, results).status();
    } else {
      (void)RemoveTree(partial);
    }
    info.committed = status.ok();
    if (!status.ok()) info.status = status;
  }
  info.seconds = SecondsSince(s.start);
  if (info.status.ok()) {
    MT_LOG(INFO) << "checkpoint: step " << s.step << (info.committed ? " committed to " : " in ")
                 << info.directory << " (" << info.bytes << " bytes from this rank, "
                 << info.seconds << " s)";
  } else {
    MT_LOG(ERROR) << "checkpoint at step " << s.step << " failed: " << info.status.message();
  }
  return info;
}

void Checkpointer::Wait() {
  if (worker_.joinable()) worker_.join();
}

std::vector<SaveInfo> Checkpointer::TakeFinished() {
  absl::MutexLock lock(&mu_);
  std::vector<SaveInfo> out = std::move(finished_);
  finished_.clear();
  return out;
}

absl::StatusOr<std::optional<LoadChoice>> ChooseLoad(const std::string& path) {
  if (LooksLikeHfGpt2(path)) {
    MT_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> source, OpenHfGpt2Source(path));
    LoadChoice c;
    c.dir = path;
    c.manifest = source->manifest();
    return std::optional<LoadChoice>(std::move(c));
  }
  auto choice = ChooseCheckpoint(path);
  if (absl::IsNotFound(choice.status())) return std::optional<LoadChoice>();
  if (!choice.ok()) return choice.status();
  for (const std::string& p : choice->problems) {
    MT_LOG(WARNING) << "checkpoint skipped: " << p;
  }
  return std::optional<LoadChoice>(*std::move(choice));
}

}  // namespace mt::checkpoint
