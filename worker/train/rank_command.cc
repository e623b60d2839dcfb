#include "worker/train/rank_command.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/rpc/dial.h"
#include "common/spec/defaults.h"
#include "mt/v1/worker_service.pb.h"
#include "worker/checkpoint/checkpointer.h"
#include "worker/checkpoint/store_exchange.h"
#include "worker/engine/cpu_process.h"
#include "worker/engine/data_sources.h"
#include "worker/engine/trainer.h"
#include "worker/parallel/collectives.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/rendezvous_client.h"
#include "worker/report/report_channel.h"
#include "worker/train/inference_rank.h"
#include "worker/train/pipe_reporter.h"
#include "worker/train/session.h"

namespace mt::train {
namespace {

// Set from the signal handler; the session polls it between steps. A signal handler can reach
// nothing else.
std::atomic<int> g_stop_signal{0};

void OnStopSignal(int sig) { g_stop_signal.store(sig); }

constexpr double kH200PeakBf16 = 989e12;

int Fail(const absl::Status& status, absl::string_view what) {
  // The daemon puts the log's last line into the job's failure reason: make it the cause.
  std::fprintf(stderr, "mt-train: %s: %s\n", std::string(what).c_str(),
               std::string(status.message()).c_str());
  std::fflush(stderr);
  return 1;
}

// The assignment file named by --assignment; empty after a usage message.
std::string AssignmentPath(const std::vector<std::string>& args) {
  std::string path;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--assignment" && i + 1 < args.size()) {
      path = args[++i];
    } else if (args[i].rfind("--assignment=", 0) == 0) {
      path = args[i].substr(13);
    } else {
      std::fprintf(stderr, "mt-train: unknown argument '%s'; usage: mt-train --assignment FILE\n",
                   args[i].c_str());
      return "";
    }
  }
  if (path.empty()) std::fprintf(stderr, "mt-train: usage: mt-train --assignment FILE\n");
  return path;
}

// What the log's last line says when the session failed at `stage`.
std::string StageLabel(SessionStage stage, const std::string& load_dir) {
  switch (stage) {
    case SessionStage::kChooseCheckpoint:
      return "choosing the checkpoint to load";
    case SessionStage::kData:
      return "data";
    case SessionStage::kBuildTrainer:
      return "building the trainer";
    case SessionStage::kRestore:
      return absl::StrCat("loading ", load_dir);
    case SessionStage::kCheckpointer:
      return "checkpoint.save_dir";
    case SessionStage::kPrepareSave:
      return "checkpoint host buffer";
    case SessionStage::kReporter:
      return "TensorBoard";
    case SessionStage::kTraining:
      return "training";
    case SessionStage::kSave:
    case SessionStage::kNone:
      break;
  }
  return "saving the checkpoint";
}

// restart.distributed_timeout_minutes (the default for an older coordinator's spec).
absl::Duration CollectiveTimeout(const mt::v1::JobSpec& spec) {
  const int minutes = spec.restart().distributed_timeout_minutes();
  return absl::Minutes(minutes > 0 ? minutes : spec::kDefaultDistributedTimeoutMinutes);
}

// For tests only (tests/integration/hang_jobs_test.cc, a straggler end to end):
// MT_TEST_SLOW_RANK="RANK:MS" makes every forward pass of rank RANK MS milliseconds longer, as a
// slower machine would. Unset (always, outside that test) or another rank: no delay.
absl::Duration TestSlowdown(int rank) {
  const char* v = std::getenv("MT_TEST_SLOW_RANK");
  std::pair<std::string, std::string> parts =
      absl::StrSplit(v == nullptr ? "" : v, absl::MaxSplits(':', 1));
  int slow_rank = -1;
  int ms = 0;
  if (!absl::SimpleAtoi(parts.first, &slow_rank) || !absl::SimpleAtoi(parts.second, &ms) ||
      slow_rank != rank || ms <= 0 || ms > 10'000) {
    return absl::ZeroDuration();
  }
  MT_LOG(WARNING) << "MT_TEST_SLOW_RANK: every forward pass of this rank is " << ms
                  << " ms longer (a test's straggler)";
  return absl::Milliseconds(ms);
}

// The trainer's runtime options for this rank.
engine::TrainerOptions RankTrainerOptions(const mt::v1::JobSpec& spec,
                                          const mt::v1::Assignment& assignment,
                                          const parallel::Distributed& distributed) {
  const bool gpu = assignment.gpu_index() >= 0;
  engine::TrainerOptions options;
  // The daemon sets CUDA_VISIBLE_DEVICES to the rank's GPU: it is device 0 here.
  options.device = gpu ? "cuda:0" : "cpu";
  options.collectives = distributed.collectives.get();
  options.groups = distributed.groups;
  options.num_devices = assignment.layout().world_size();
  // TensorBoard records every step's loss (Megatron's default interval of 1): read it back.
  options.sync_every_step = !spec.logging().tensorboard_dir().empty();
  const bool sixteen_bit = spec.training().precision() == mt::v1::PRECISION_BF16 ||
                           spec.training().precision() == mt::v1::PRECISION_FP16;
  options.peak_flops_per_second = gpu && sixteen_bit ? kH200PeakBf16 : 0.0;
  if (const char* peak = std::getenv("MT_PEAK_TFLOPS"); peak != nullptr) {
    options.peak_flops_per_second = std::atof(peak) * 1e12;
  }
  return options;
}

// The session's configuration for this rank of the job.
SessionConfig RankSessionConfig(const mt::v1::JobSpec& spec, const mt::v1::Assignment& assignment,
                                const parallel::Distributed& distributed) {
  const mt::v1::Layout& layout = assignment.layout();
  const mt::v1::RankCoordinates& at = assignment.coordinates();
  SessionConfig c;
  c.spec = spec;
  // What to start from: a restart's checkpoint, else --load (none = from scratch).
  c.load_path =
      !assignment.resume_from().empty() ? assignment.resume_from() : spec.checkpoint().load_dir();
  c.load.keep_own_files = true;  // verified once, restored from memory
  c.load.tp_rank = at.tp();
  c.load.pp_rank = at.pp();
  c.load.tp_size = std::max(1, layout.tensor_model_parallel_size());
  c.load.pp_size = std::max(1, layout.pipeline_model_parallel_size());
  // A GPU rank's files go to its GPU as they are read (its only device: CUDA_VISIBLE_DEVICES);
  // a CPU rank on a GPU machine must not start CUDA.
  c.load.stage_device = assignment.gpu_index() >= 0 ? "cuda:0" : "";
  c.restore.tp_rank = at.tp();
  c.restore.tp_size = c.load.tp_size;
  const int dp_rank = distributed.collectives->dp_rank();
  const int dp_size = distributed.collectives->dp_size();
  c.make_data = [spec, dp_rank, dp_size](int64_t consumed) {
    return engine::DataSourcesFromSpec(spec, consumed, dp_rank, dp_size);
  };
  c.trainer = RankTrainerOptions(spec, assignment, distributed);
  c.checkpointer.job_id = assignment.job_id();
  c.checkpointer.attempt = assignment.attempt();
  c.checkpointer.layout = layout;
  c.checkpointer.coordinates = at;
  // The checkpoint's gather waits as long as the hang detector lets a save take.
  const int save_load = spec.restart().save_load_timeout_seconds();
  c.checkpointer.gather_timeout =
      absl::Seconds(save_load > 0 ? save_load : spec::kDefaultSaveLoadTimeoutSeconds);
  c.stop_signal = [] { return g_stop_signal.load(); };
  return c;
}

// Joins the job's process groups: the rendezvous through the coordinator (the client kept in
// *rendezvous), the backend for the rank's device, the network the daemon names. Resolves the
// spec's global batch for the DP size (an older coordinator's assignment may leave it open;
// idempotent otherwise). Errors say which step failed.
absl::StatusOr<parallel::Distributed> JoinProcessGroups(
    mt::v1::JobSpec* spec, const mt::v1::Assignment& assignment,
    std::unique_ptr<parallel::RendezvousClient>* rendezvous) {
  // The daemon's token file and TLS files (MT_TOKEN_FILE, MT_TLS_*); it already checked that
  // the token does not travel in plaintext off loopback.
  rpc::DialOptions dial;
  dial.address = assignment.coordinator_address();
  if (const char* tf = std::getenv("MT_TOKEN_FILE"); tf != nullptr) dial.token_file = tf;
  dial.tls = rpc::ClientTlsFromEnvironment();
  dial.insecure_allow_plaintext = true;
  auto channel = rpc::Dial(dial);
  if (!channel.ok()) return Annotate(channel.status(), "MT_TOKEN_FILE / MT_TLS_*");
  const int rank = assignment.coordinates().rank();
  *rendezvous = std::make_unique<parallel::RendezvousClient>(
      *std::move(channel), assignment.job_id(), assignment.attempt(), rank,
      assignment.rank_credential());
  parallel::DistOptions dist;
  dist.backend = assignment.gpu_index() >= 0 ? "nccl" : "gloo";
  if (spec->parallel().ddp_bucket_size() > 0) {
    dist.bucket_elements = spec->parallel().ddp_bucket_size();
  }
  auto network = parallel::RankNetworkFromEnvironment(
      [](const char* name) { return std::getenv(name); }, assignment.coordinator_address());
  if (!network.ok()) return Annotate(network.status(), "the rank's network");
  dist.network = *std::move(network);
  dist.timeout = CollectiveTimeout(*spec);
  auto distributed = parallel::InitDistributed(assignment.layout(), rank, rendezvous->get(), dist);
  if (!distributed.ok()) return Annotate(distributed.status(), "joining the process groups");
  MT_RETURN_IF_ERROR(Annotate(spec::ResolveForLayout(spec, distributed->collectives->dp_size()),
                              "the assignment's spec"));
  return distributed;
}

}  // namespace

int RunRankCommand(const std::vector<std::string>& args) {
  const std::string path = AssignmentPath(args);
  if (path.empty()) return 2;
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  auto bytes = ReadFile(path, 64 << 20);
  if (!bytes.ok()) return Fail(bytes.status(), "reading the assignment");
  mt::v1::Assignment assignment;
  mt::v1::JobSpec spec;
  if (!assignment.ParseFromString(*bytes) || !spec.ParseFromString(assignment.spec())) {
    return Fail(absl::DataLossError(path), "the assignment does not parse");
  }
  const int rank = assignment.coordinates().rank();
  const mt::v1::Layout& layout = assignment.layout();
  MT_LOG(INFO) << "rank " << rank << " of " << assignment.job_id() << " (attempt "
               << assignment.attempt() << "), world " << layout.world_size();
  // One writer: its copies share the lock that keeps the beacon's frames whole.
  const worker::ReportWriter writer = worker::ReportWriter::FromEnvironment();
  // A CPU rank, training or inference, computes with its slot's cores (the daemon's
  // MT_CPU_THREADS) and keeps its freed tensors in the heap.
  if (assignment.gpu_index() < 0) {
    const char* threads = std::getenv("MT_CPU_THREADS");
    engine::ConfigureCpuProcess(threads != nullptr ? std::atoi(threads) : 0);
  }
  if (spec.has_inference()) {
    std::unique_ptr<parallel::RendezvousClient> rendezvous;
    return RunInferenceRank(spec, assignment, writer, [&]() -> absl::StatusOr<RankPlace> {
      MT_ASSIGN_OR_RETURN(parallel::Distributed d,
                          JoinProcessGroups(&spec, assignment, &rendezvous));
      RankPlace place;
      place.session = RankSessionConfig(spec, assignment, d);
      place.distributed = std::move(d);
      return place;
    });
  }
  PipeReporter reporter(writer, spec, assignment);
  reporter.Phase(mt::v1::RANK_PHASE_STARTING);
  worker::ProgressBeacon beacon(writer);
  reporter.set_beacon(&beacon);

  std::unique_ptr<parallel::RendezvousClient> rendezvous;
  auto distributed = JoinProcessGroups(&spec, assignment, &rendezvous);
  if (!distributed.ok()) return Fail(distributed.status(), absl::StrCat("rank ", rank));

  SessionConfig config = RankSessionConfig(spec, assignment, *distributed);
  const absl::Duration slowdown = TestSlowdown(rank);
  config.trainer.on_activity = [&beacon, &reporter, slowdown](engine::Activity a, int64_t step) {
    beacon.Set(ToRankActivity(a), step);
    reporter.OnActivity(a);
    if (slowdown > absl::ZeroDuration() && a == engine::Activity::kForward) {
      absl::SleepFor(slowdown);
    }
  };
  // The ranks of a save meet in the job's own store, never the coordinator's (which may be
  // away while the job trains).
  std::optional<checkpoint::StoreExchange> exchange;
  if (distributed->save_store) {
    exchange.emplace(distributed->save_store);
    config.exchange = &*exchange;
  }
  const SessionResult result = RunSession(config, reporter);
  if (!result.status.ok())
    return Fail(result.status, StageLabel(result.failed_at, result.load_dir));
  if (const int sig = g_stop_signal.load();
      sig != 0 || result.iteration < result.train_iterations) {
    MT_LOG(INFO) << "stopped by signal " << sig << " at step " << result.iteration;
    return 128 + (sig != 0 ? sig : SIGTERM);
  }
  MT_LOG(INFO) << "rank " << rank << " finished " << result.iteration << " steps";
  return 0;
}

}  // namespace mt::train
