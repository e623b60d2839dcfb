#include "worker/checkpoint/checkpointer.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/durations.h"
#include "common/base/errors.h"
#include "common/base/logging.h"
#include "common/base/paths.h"
#include "common/base/status_macros.h"
#include "common/checkpoint/file_writer.h"
#include "common/checkpoint/hf_gpt2.h"
#include "common/checkpoint/safetensors.h"
#include "google/protobuf/util/time_util.h"
#include "worker/engine/optimizer.h"

#if defined(MT_CHECKPOINT_WITH_CUDA) && MT_CHECKPOINT_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace mt::checkpoint {
namespace {

using Clock = std::chrono::steady_clock;

// Files are split further than max_file_bytes to give every I/O thread one, down to this size.
constexpr int64_t kMinParallelFileBytes = int64_t{64} << 20;

absl::Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus("creating", path, errno);
  }
  return absl::OkStatus();
}

// Copies the blocks of the kept files to a device as the verification reads them (LoadOptions::
// stage_device). Candidates are tried one after another: a block of another directory drops
// the copies of the previous one. A failure (device memory) only leaves that file unstaged: the
// restore then takes it from host memory. Thread-safe (one reading thread per file).
class Stager {
 public:
  Stager(torch::Device device, int64_t max_bytes) : device_(device), max_bytes_(max_bytes) {}

  void Observe(const std::string& dir, const mt::v1::CheckpointFile& f, uint64_t offset,
               absl::string_view bytes) {
    torch::Tensor dst;
    {
      absl::MutexLock lock(&mu_);
      if (dir != dir_) {
        files_.clear();
        bytes_ = 0;
        dir_ = dir;
      }
      if (offset == 0 && !files_.count(f.path()) && bytes_ + f.size_bytes() <= max_bytes_) {
        try {
          files_[f.path()] = torch::empty(
              {f.size_bytes()}, torch::TensorOptions().dtype(torch::kByte).device(device_));
          bytes_ += f.size_bytes();
        } catch (const c10::Error& e) {
          MT_LOG(WARNING) << "checkpoint load: no device copy of " << f.path()
                          << " (restored from host memory): " << e.what_without_backtrace();
        }
      }
      auto it = files_.find(f.path());
      if (it == files_.end()) return;
      dst = it->second;
    }
    try {
      torch::NoGradGuard no_grad;
      const int64_t n = static_cast<int64_t>(bytes.size());
      dst.narrow(0, static_cast<int64_t>(offset), n)
          .copy_(torch::from_blob(const_cast<char*>(bytes.data()), {n}, torch::kByte));
    } catch (const c10::Error& e) {
      MT_LOG(WARNING) << "checkpoint load: copying " << f.path() << " to " << device_
                      << " failed (restored from host memory): " << e.what_without_backtrace();
      absl::MutexLock lock(&mu_);
      if (dir == dir_ && files_.erase(f.path()) > 0) bytes_ -= f.size_bytes();
    }
  }

  // The copies of `dir`'s files (null when none); the stager holds nothing afterwards.
  std::shared_ptr<const StagedFiles> Take(const std::string& dir) {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<const StagedFiles> out;
    if (dir == dir_ && !files_.empty()) out = std::make_shared<StagedFiles>(std::move(files_));
    files_.clear();
    bytes_ = 0;
    return out;
  }

 private:
  const torch::Device device_;
  const int64_t max_bytes_;
  absl::Mutex mu_;
  std::string dir_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, torch::Tensor> files_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// LoadOptions::stage_device; std::nullopt for none.
absl::StatusOr<std::optional<torch::Device>> StageDevice(const std::string& name) {
  if (name.empty()) return std::optional<torch::Device>();
  if (name == "auto") {
    if (!torch::cuda::is_available()) return std::optional<torch::Device>();
    return std::optional<torch::Device>(torch::Device(torch::kCUDA, 0));
  }
  try {
    return std::optional<torch::Device>(torch::Device(name));
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("LoadOptions.stage_device \"", name,
                                                   "\": ", e.what_without_backtrace(),
                                                   " (use auto, cpu, cuda or cuda:N)"));
  }
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

// The host copy of one rank's state: every tensor at a 64-byte aligned offset of one buffer
// (pinned for GPU tensors), reused by the next save.
struct Checkpointer::Snapshot {
  struct Entry {
    std::string name;
    int split = -1;
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    size_t offset = 0;
    size_t nbytes = 0;
  };
  int64_t step = 0;
  std::vector<Entry> entries;
  torch::Tensor buffer;  // uint8; undefined until the first snapshot
  bool pinned = false;
  mt::v1::CheckpointManifest base;  // rank 0's manifest fields
  Clock::time_point start;
  double snapshot_seconds = 0;
  // An overlapped snapshot (async save on a GPU): the copies run on a stream of their own.
  // `wait_copies` blocks the calling thread until they are done (the writer, before it reads
  // the buffer); `fence`, given to the optimizer, makes the training stream wait for them
  // before the next update. Both null when the copies were waited for in TakeSnapshot.
  std::function<void()> wait_copies;
  std::function<void()> fence;
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

absl::Status Checkpointer::TakeSnapshot(const std::vector<StateTensor>& tensors, Snapshot& s,
                                        bool copy, bool overlap) {
  s.entries.clear();
  s.wait_copies = nullptr;
  s.fence = nullptr;
  try {
    torch::NoGradGuard no_grad;
    size_t total = 0;
    bool on_gpu = false;
    for (const StateTensor& t : tensors) {
      Snapshot::Entry e;
      e.name = t.name;
      e.split = t.split_dim;
      MT_ASSIGN_OR_RETURN(e.dtype, ToDType(t.tensor.scalar_type()));
      e.shape = t.tensor.sizes().vec();
      e.nbytes = static_cast<size_t>(t.tensor.numel()) * t.tensor.element_size();
      e.offset = total;
      total += (e.nbytes + 63) / 64 * 64;
      on_gpu = on_gpu || t.tensor.is_cuda();
      s.entries.push_back(std::move(e));
    }
    // Pinned memory lets the device-to-host copies run at the bus's speed; allocating it is
    // slow, hence the reuse (the model's state keeps its size) and Prepare.
    if (!s.buffer.defined() || static_cast<size_t>(s.buffer.numel()) < total ||
        s.pinned != on_gpu) {
      s.buffer = torch::Tensor();
      s.buffer = torch::empty({static_cast<int64_t>(std::max<size_t>(total, 64))},
                              torch::TensorOptions().dtype(torch::kByte).pinned_memory(on_gpu));
      s.pinned = on_gpu;
    }
    if (!copy) {
      s.entries.clear();
      return absl::OkStatus();
    }
    bool queued = false;
#if defined(MT_CHECKPOINT_WITH_CUDA) && MT_CHECKPOINT_WITH_CUDA
    // Overlapped: the copies go on a stream of their own once the training stream's work so
    // far (the step that made this state) is done, and run during the next step's forward and
    // backward; the next update waits for them (the fence), not the training thread.
    std::optional<c10::cuda::CUDAStreamGuard> side;
    int device = -1;
    if (overlap && s.pinned) {
      for (const StateTensor& t : tensors) {
        if (!t.tensor.is_cuda()) continue;
        if (device >= 0 && t.tensor.get_device() != device) {
          device = -2;  // several devices: copy and wait as without overlap
          break;
        }
        device = t.tensor.get_device();
      }
    }
    if (device >= 0) {
      const auto index = static_cast<c10::DeviceIndex>(device);
      at::cuda::CUDAEvent ready;
      ready.record(c10::cuda::getCurrentCUDAStream(index));
      c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, index);
      ready.block(stream);
      side.emplace(stream);
    }
#endif
    for (size_t i = 0; i < tensors.size(); ++i) {
      const torch::Tensor& src = tensors[i].tensor;
      // A view of the buffer (not from_blob: the pinned allocator tracks the asynchronous
      // copies into its blocks through the buffer's storage); offsets are 64-byte aligned.
      torch::Tensor dst = s.buffer
                              .narrow(0, static_cast<int64_t>(s.entries[i].offset),
                                      static_cast<int64_t>(s.entries[i].nbytes))
                              .view(src.scalar_type())
                              .view(src.sizes());
      // Device tensors into the pinned buffer: queued without waiting, one synchronisation
      // below (or, overlapped, none here); the copies are done before training changes the
      // state.
      const bool async = s.pinned && src.is_cuda();
      dst.copy_(src, /*non_blocking=*/async);
      queued = queued || async;
#if defined(MT_CHECKPOINT_WITH_CUDA) && MT_CHECKPOINT_WITH_CUDA
      // A temporary (the distributed optimizer's gathered state) freed when Save returns keeps
      // its memory until the side stream has read it.
      if (side.has_value() && async) src.record_stream(side->current_stream());
#endif
    }
#if defined(MT_CHECKPOINT_WITH_CUDA) && MT_CHECKPOINT_WITH_CUDA
    if (side.has_value()) {
      auto done = std::make_shared<at::cuda::CUDAEvent>();
      done->record(side->current_stream());
      side.reset();
      const auto index = static_cast<c10::DeviceIndex>(device);
      s.wait_copies = [done] { done->synchronize(); };
      s.fence = [done, index] { done->block(c10::cuda::getCurrentCUDAStream(index)); };
      return absl::OkStatus();
    }
#endif
    if (queued) torch::cuda::synchronize();
  } catch (const c10::Error& e) {
    s.entries.clear();
    return absl::InternalError(
        absl::StrCat("checkpoint snapshot at step ", s.step, ": ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status Checkpointer::Prepare(engine::Trainer& trainer) {
  Wait();
  // Every rank: with the distributed optimizer the DP group gathers the optimizer state.
  MT_ASSIGN_OR_RETURN(std::vector<StateTensor> tensors, CollectTensors(trainer));
  if (!writes_shard_) return absl::OkStatus();
  if (snapshot_ == nullptr) snapshot_ = std::make_shared<Snapshot>();
  return TakeSnapshot(tensors, *snapshot_, /*copy=*/false, /*overlap=*/false);
}

absl::Status Checkpointer::Save(engine::Trainer& trainer, double loss, double validation_loss) {
  Wait();  // at most one save in flight; its buffer is free afterwards
  const int64_t step = trainer.iteration();
  if (step == last_step_) return absl::OkStatus();
  if (std::isnan(loss)) {
    // A step whose loss stayed on the device (not a log step): the manifest gets the real one.
    MT_ASSIGN_OR_RETURN(loss, trainer.LastStepLoss());
  }
  if (snapshot_ == nullptr) snapshot_ = std::make_shared<Snapshot>();
  Snapshot& snapshot = *snapshot_;
  snapshot.start = Clock::now();
  snapshot.step = step;
  snapshot.entries.clear();
  // Rank 0's manifest fields first: they read the device (Adam's t), and a read from the device
  // queued behind the snapshot's device-to-host copies would wait for all of them.
  snapshot.base.Clear();
  if (rank_ == 0) {
    mt::v1::CheckpointManifest& m = snapshot.base;
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
  // Every rank: with the distributed optimizer the DP group gathers the optimizer state.
  auto tensors = CollectTensors(trainer);
  if (!tensors.ok()) {
    return absl::Status(tensors.status().code(), absl::StrCat("checkpoint snapshot at step ", step,
                                                              ": ", tensors.status().message()));
  }
  if (writes_shard_) {
    MT_RETURN_IF_ERROR(TakeSnapshot(*tensors, snapshot, /*copy=*/true,
                                    /*overlap=*/options_.async_save && options_.overlap_snapshot));
    if (snapshot.fence != nullptr) trainer.optimizer().AddUpdateFence(std::move(snapshot.fence));
  }
  snapshot.snapshot_seconds = SecondsSince(snapshot.start);
  last_step_ = step;
  if (options_.async_save) {
    worker_ = std::thread([this, s = snapshot_] {
      // Linux: nice is per thread, and the I/O threads Write starts inherit it.
      if (options_.background_nice > 0) {
        (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)),
                            options_.background_nice);
      }
      if (s->wait_copies != nullptr) s->wait_copies();  // the snapshot's copies are done
      SaveInfo info = Write(*s);
      absl::MutexLock lock(&mu_);
      finished_.push_back(std::move(info));
    });
    return absl::OkStatus();
  }
  SaveInfo info = Write(snapshot);
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
    std::vector<uint64_t> sizes;
    int64_t total = 0;
    for (const Snapshot::Entry& e : s.entries) {
      sizes.push_back(e.nbytes);
      total += static_cast<int64_t>(e.nbytes);
    }
    // At least one file per I/O thread once the files are big enough to be worth it.
    const int threads = options_.io_threads > 0 ? options_.io_threads : DefaultIoThreads();
    int64_t bound = options_.max_file_bytes;
    if (bound > 0) {
      bound = std::min(bound, std::max(kMinParallelFileBytes, (total + threads - 1) / threads));
    }
    const std::vector<std::vector<size_t>> groups = SplitIntoFiles(sizes, bound);
    const int count = static_cast<int>(groups.size());
    std::vector<ShardFile> files(groups.size());
    const char* base = s.buffer.defined() ? static_cast<const char*>(s.buffer.data_ptr()) : nullptr;
    absl::Status status = MakeDir(partial);
    if (status.ok()) {
      status = RunParallel(groups.size(), threads, [&](size_t g) -> absl::Status {
        std::map<std::string, std::string> meta = {
            {"format", kShardFormatName},
            {"format_version", std::to_string(kFormatVersion)},
            {"tp_rank", std::to_string(tp)},
            {"tp_size", std::to_string(tp_size)},
            {"pp_rank", std::to_string(pp)},
            {"step", std::to_string(s.step)},
            {"rank", std::to_string(rank_)},
            {"file_index", std::to_string(g)},
            {"file_count", std::to_string(count)}};
        std::vector<TensorView> views;
        for (size_t i : groups[g]) {
          const Snapshot::Entry& e = s.entries[i];
          TensorView v;
          v.name = e.name;
          v.dtype = e.dtype;
          v.shape = e.shape;
          v.data = base + e.offset;
          v.nbytes = e.nbytes;
          views.push_back(std::move(v));
          if (e.split >= 0) meta["split." + e.name] = std::to_string(e.split);
        }
        files[g].file = ShardFileName(tp, pp, static_cast<int>(g), count);
        MT_ASSIGN_OR_RETURN(FileDigest digest,
                            WriteSafetensors(JoinPath(partial, files[g].file), views, meta));
        files[g].size = digest.size;
        files[g].sha256 = digest.sha256;
        return absl::OkStatus();
      });
    }
    if (status.ok()) {
      result.files = std::move(files);
      for (const ShardFile& f : result.files) info.bytes += f.size;
      info.files = count;
    } else {
      result.ok = false;
      result.error = std::string(status.message());
      info.status = status;
    }
  }
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
                 << info.directory << " (" << info.bytes << " bytes in " << info.files
                 << " files from this rank, " << info.seconds << " s, snapshot "
                 << info.snapshot_seconds << " s)";
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

absl::StatusOr<std::optional<LoadChoice>> ChooseLoad(const std::string& path,
                                                     const LoadOptions& options) {
  if (LooksLikeHfGpt2(path)) {
    MT_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> source, OpenHfGpt2Source(path));
    LoadChoice c;
    c.dir = path;
    c.manifest = source->manifest();
    struct stat st;
    if (::stat(JoinPath(path, "model.safetensors").c_str(), &st) == 0) c.bytes_read = st.st_size;
    return std::optional<LoadChoice>(std::move(c));
  }
  ChooseOptions choose;
  choose.threads = options.io_threads;
  choose.max_keep_bytes = options.max_keep_bytes;
  if (options.keep_own_files) {
    choose.keep = [&options](const mt::v1::CheckpointManifest& m, const mt::v1::CheckpointFile& f) {
      // Same TP and PP sizes: this rank restores exactly the tensors of its (tp, pp) files.
      if (std::max(1, m.layout().tensor_model_parallel_size()) != std::max(1, options.tp_size) ||
          std::max(1, m.layout().pipeline_model_parallel_size()) != std::max(1, options.pp_size)) {
        return false;
      }
      for (const auto& t : m.tensors()) {
        if (t.file() == f.path()) {
          return t.tp_rank() == options.tp_rank && t.pp_rank() == options.pp_rank;
        }
      }
      return false;
    };
  }
  std::shared_ptr<Stager> stager;
  if (options.keep_own_files) {
    MT_ASSIGN_OR_RETURN(std::optional<torch::Device> device, StageDevice(options.stage_device));
    if (device.has_value() && options.max_stage_bytes > 0) {
      stager = std::make_shared<Stager>(*device, options.max_stage_bytes);
      choose.observe = [stager](const std::string& dir, const mt::v1::CheckpointFile& f,
                                uint64_t offset, absl::string_view bytes) {
        stager->Observe(dir, f, offset, bytes);
      };
    }
  }
  auto choice = ChooseCheckpoint(path, choose);
  if (absl::IsNotFound(choice.status())) return std::optional<LoadChoice>();
  if (!choice.ok()) return choice.status();
  if (stager != nullptr && choice->files != nullptr) {
    choice->attachment = stager->Take(choice->dir);
  }
  for (const std::string& p : choice->problems) {
    MT_LOG(WARNING) << "checkpoint skipped: " << p;
  }
  return std::optional<LoadChoice>(*std::move(choice));
}

absl::StatusOr<std::unique_ptr<TensorSource>> OpenLoadSource(const LoadChoice& choice) {
  if (LooksLikeHfGpt2(choice.dir)) return OpenHfGpt2Source(choice.dir);
  MT_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> source,
                      OpenCheckpointSource(choice.dir, choice.manifest, choice.files));
  auto staged = std::dynamic_pointer_cast<const StagedFiles>(choice.attachment);
  if (staged == nullptr || choice.files == nullptr) return source;
  return std::unique_ptr<TensorSource>(new StagedSource(std::move(source), std::move(staged)));
}

}  // namespace mt::checkpoint
