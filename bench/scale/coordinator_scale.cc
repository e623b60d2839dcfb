// coordinator_scale: one real mt-coordinator under the load of issue 5's scale requirement.
//
// Starts mt-coordinator on loopback with its own state directory, registers --workers
// simulated GPU workers (--gpus_per_node per node, so gpu_index 0..7), heartbeats each of them
// once per second (spread evenly over the second, one connection per worker), fills every
// worker with 8-rank jobs that stay SCHEDULED (simulated workers never open
// StreamAssignments), then queues PENDING jobs behind them up to each --queue_sizes mark and
// measures, client-side (absl::Now around each RPC):
//   heartbeat   p50/p99 of every heartbeat in each window (quiet, submit, list, decide)
//   submit      SubmitJob of one more job onto a queue of that size
//   list        ListJobs page_size 100: all jobs, and states=[PENDING] (queue positions)
//   decide      a scheduling decision: the ReportRankExit that frees the last worker of a
//               finished job; the coordinator's pass then places the queue's head on them
// plus the coordinator's CPU (utime+stime from /proc/<pid>/stat over each window) and memory
// (VmRSS, VmHWM from /proc/<pid>/status). Targets: p99 < 20 ms, memory < 500 MiB.
//
// Not thread-safe beyond what main() sets up; a benchmark binary, not a library.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cli/daemon.h"
#include "common/rpc/worker_credential.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/grpcpp.h"
#include "mt/v1/client_service.grpc.pb.h"
#include "mt/v1/worker_service.grpc.pb.h"

ABSL_FLAG(std::string, coordinator, "",
          "mt-coordinator binary; default: mt-coordinator beside this binary.");
ABSL_FLAG(int, workers, 1000, "Simulated workers (GPU slots).");
ABSL_FLAG(int, gpus_per_node, 8, "Workers per simulated node (gpu_index 0..N-1).");
ABSL_FLAG(int, job_world, 8, "Ranks per job (data parallel).");
ABSL_FLAG(std::string, queue_sizes, "1000,10000,100000",
          "PENDING queue lengths at which to measure, ascending.");
ABSL_FLAG(int, heartbeat_threads, 8, "Client threads sending heartbeats.");
ABSL_FLAG(int, connections, 0, "gRPC connections the workers share; 0 = one per worker.");
ABSL_FLAG(int, fill_threads, 4, "Client threads filling the queue between marks.");
ABSL_FLAG(double, quiet_seconds, 5, "Heartbeats-only window at each mark.");
ABSL_FLAG(int, submits, 200, "Timed submits at each mark.");
ABSL_FLAG(int, lists, 100, "Timed ListJobs calls of each kind at each mark.");
ABSL_FLAG(int, decisions, 20, "Timed scheduling decisions at each mark.");
ABSL_FLAG(double, budget_seconds, 900,
          "Stop filling the queue after this long; later marks are reported as not reached.");
ABSL_FLAG(std::string, lost_after, "10s", "--lost_after given to the coordinator.");
ABSL_FLAG(bool, keep_state, false, "Keep the coordinator's temporary directory.");

namespace {

using Clk = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "coordinator_scale: %s\n", msg.c_str());
  std::exit(1);
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// --- The coordinator process ----------------------------------------------------------------

struct ProcStats {
  double cpu_seconds = 0;  // utime + stime
  double rss_mib = 0;      // VmRSS
  double hwm_mib = 0;      // VmHWM (peak RSS)
};

ProcStats ReadProc(pid_t pid) {
  ProcStats s;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  if (paren != std::string::npos) {
    std::vector<std::string> f = absl::StrSplit(line.substr(paren + 2), ' ');
    // After "pid (comm) " the fields start at 3 (state); utime is 14, stime 15.
    double ut = 0, st = 0;
    if (f.size() > 13 && absl::SimpleAtod(f[11], &ut) && absl::SimpleAtod(f[12], &st)) {
      s.cpu_seconds = (ut + st) / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
  }
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  while (std::getline(status, line)) {
    double kb = 0;
    absl::string_view v = line;
    if (absl::ConsumePrefix(&v, "VmRSS:")) {
      v = absl::StripAsciiWhitespace(absl::StripSuffix(absl::StripAsciiWhitespace(v), "kB"));
      if (absl::SimpleAtod(v, &kb)) s.rss_mib = kb / 1024;
    } else if (absl::ConsumePrefix(&v, "VmHWM:")) {
      v = absl::StripAsciiWhitespace(absl::StripSuffix(absl::StripAsciiWhitespace(v), "kB"));
      if (absl::SimpleAtod(v, &kb)) s.hwm_mib = kb / 1024;
    }
  }
  return s;
}

double SelfCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

std::string SelfDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, n);
  return path.substr(0, path.rfind('/'));
}

pid_t StartCoordinator(const std::string& binary, const std::string& dir, std::string* address) {
  const std::string addr_file = dir + "/address";
  const std::string log = dir + "/coordinator.log";
  std::vector<std::string> args = {binary,
                                   "--listen=127.0.0.1:0",
                                   "--state_dir=" + dir + "/state",
                                   "--address_file=" + addr_file,
                                   "--metrics_port=0",
                                   "--lost_after=" + absl::GetFlag(FLAGS_lost_after)};
  const pid_t pid = fork();
  if (pid < 0) Die("fork failed");
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stderr);
    (void)f;
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    std::fprintf(stderr, "exec %s failed\n", binary.c_str());
    _exit(127);
  }
  for (int i = 0; i < 600; ++i) {
    std::ifstream in(addr_file);
    std::string a;
    if (in && std::getline(in, a) && !a.empty()) {
      *address = a;
      return pid;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) Die("mt-coordinator exited at start; see " + log);
    absl::SleepFor(absl::Milliseconds(50));
  }
  kill(pid, SIGKILL);
  Die("mt-coordinator wrote no address in 30 s; see " + log);
}

// --- Latency samples --------------------------------------------------------------------------

struct Stats {
  size_t n = 0;
  double p50 = 0, p99 = 0, max = 0;
};

Stats Summarize(std::vector<double> v) {
  Stats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
  };
  s.p50 = at(0.50);
  s.p99 = at(0.99);
  s.max = v.back();
  return s;
}

// Heartbeats are tagged with the window ("phase") they were sent in.
std::atomic<int> g_phase{0};
std::mutex g_phase_mu;
std::vector<std::string> g_phase_names = {"start"};

int NewPhase(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_phase_mu);
  g_phase_names.push_back(name);
  const int id = static_cast<int>(g_phase_names.size()) - 1;
  g_phase.store(id);
  return id;
}

struct HeartbeatLog {
  std::vector<std::pair<int, float>> samples;  // (phase, ms)
  int64_t unknown = 0, errors = 0;
  double max_lag_ms = 0;  // how late a heartbeat left against its slot
};

// --- The load -----------------------------------------------------------------------------------

struct RunningJob {
  std::string id;
  int attempt = 0;
  std::vector<std::string> rank_workers;
};

std::string JobSpecText(int world) {
  return absl::StrCat(
      "name: 'scale' model { num_layers: 2 hidden_size: 64 num_attention_heads: 4 "
      "seq_length: 64 } parallel { tensor_model_parallel_size: 1 data_parallel_size: ",
      world, " } training { micro_batch_size: 1 global_batch_size: ", world,
      " train_iters: 10 lr: 0.0001 } data { data_path { weight: 1 prefix: '/bench/x' } "
      "tokenizer { vocab_file: '/bench/v.json' merge_file: '/bench/m.txt' } } "
      "resources { device: DEVICE_KIND_GPU }");
}

void SetDeadline(grpc::ClientContext* ctx, int seconds) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

struct Row {
  std::string what;
  int64_t queued = 0;
  Stats s;
};

struct Window {
  std::string name;
  int64_t queued = 0;
  double seconds = 0;
  double cpu_pct = 0;  // coordinator CPU, % of one core
  double rss_mib = 0;
};

}  // namespace

int main(int argc, char** argv) {
  mt::cli::ParseFlags(argc, argv,
                      "coordinator_scale: 1,000 simulated workers and a growing job queue "
                      "against one mt-coordinator; prints latency percentiles, CPU and memory.");
  const int num_workers = absl::GetFlag(FLAGS_workers);
  const int per_node = absl::GetFlag(FLAGS_gpus_per_node);
  const int world = absl::GetFlag(FLAGS_job_world);
  if (num_workers <= 0 || per_node <= 0 || world <= 0 || num_workers % world != 0) {
    Die("--workers must be a positive multiple of --job_world");
  }
  std::vector<int64_t> marks;
  for (absl::string_view m : absl::StrSplit(absl::GetFlag(FLAGS_queue_sizes), ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(m, &v) || v <= 0) Die("bad --queue_sizes");
    marks.push_back(v);
  }
  // One descriptor per worker connection on both sides.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  std::string binary = absl::GetFlag(FLAGS_coordinator);
  if (binary.empty()) binary = SelfDir() + "/mt-coordinator";
  char tmpl[] = "/tmp/mt-scale-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die("mkdtemp failed");
  const std::string dir = tmpl;
  std::string address;
  const pid_t pid = StartCoordinator(binary, dir, &address);
  std::printf("coordinator %s (pid %d) on %s, state in %s\n", binary.c_str(), pid, address.c_str(),
              dir.c_str());
  std::fflush(stdout);
  const absl::Time bench_start = absl::Now();
  const double self_cpu_start = SelfCpuSeconds();

  // Connections: one per worker unless told otherwise; a local subchannel pool keeps channels
  // with the same target from sharing one TCP connection.
  int nconn = absl::GetFlag(FLAGS_connections);
  if (nconn <= 0) nconn = num_workers;
  std::vector<std::unique_ptr<mt::v1::WorkerService::Stub>> wstubs;
  for (int i = 0; i < nconn; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("bench.conn", i);
    wstubs.push_back(mt::v1::WorkerService::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
  }
  auto client_channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto client = mt::v1::ClientService::NewStub(client_channel);
  auto wstub = [&](int worker) { return wstubs[worker % nconn].get(); };

  // Register.
  std::vector<std::string> worker_ids(num_workers);
  // Each worker's session (sent as rpc::kWorkerSessionHeader on its later calls), by id.
  std::map<std::string, std::string> session_of;
  std::vector<double> register_ms;
  for (int i = 0; i < num_workers; ++i) {
    mt::v1::RegisterRequest req;
    req.mutable_resources()->set_node(absl::StrCat("sim-node-", i / per_node));
    req.mutable_resources()->set_gpu_index(i % per_node);
    req.mutable_resources()->set_device_name("simulated");
    req.mutable_resources()->set_memory_bytes(int64_t{80} << 30);
    req.mutable_resources()->set_cpu_cores(8);
    req.set_version("coordinator_scale");
    mt::v1::RegisterResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 30);
    const absl::Time t0 = absl::Now();
    grpc::Status s = wstub(i)->Register(&ctx, req, &resp);
    register_ms.push_back(Ms(absl::Now() - t0));
    if (!s.ok()) Die(absl::StrCat("Register: ", s.error_message()));
    worker_ids[i] = resp.worker_id();
    session_of[resp.worker_id()] = resp.session();
  }

  // Heartbeats: worker i's slot is i/N of the way into each second.
  const int hb_threads = std::max(1, absl::GetFlag(FLAGS_heartbeat_threads));
  std::vector<HeartbeatLog> hb_logs(hb_threads);
  std::atomic<bool> stop{false};
  std::vector<std::thread> hb;
  const Clk::time_point hb_start = Clk::now() + std::chrono::milliseconds(100);
  for (int t = 0; t < hb_threads; ++t) {
    hb.emplace_back([&, t] {
      HeartbeatLog& log = hb_logs[t];
      log.samples.reserve(1 << 17);
      for (int64_t round = 0; !stop.load(); ++round) {
        for (int i = t; i < num_workers && !stop.load(); i += hb_threads) {
          const Clk::time_point due = hb_start + std::chrono::seconds(round) +
                                      std::chrono::microseconds(int64_t{1000000} * i / num_workers);
          std::this_thread::sleep_until(due);
          const double lag = std::chrono::duration<double, std::milli>(Clk::now() - due).count();
          log.max_lag_ms = std::max(log.max_lag_ms, lag);
          mt::v1::HeartbeatRequest req;
          req.set_worker_id(worker_ids[i]);
          mt::v1::HeartbeatResponse resp;
          grpc::ClientContext ctx;
          ctx.AddMetadata(mt::rpc::kWorkerSessionHeader, session_of.at(worker_ids[i]));
          SetDeadline(&ctx, 10);
          const int phase = g_phase.load();
          const absl::Time t0 = absl::Now();
          grpc::Status s = wstub(i)->Heartbeat(&ctx, req, &resp);
          const double ms = Ms(absl::Now() - t0);
          if (!s.ok()) {
            ++log.errors;
          } else {
            if (!resp.known()) ++log.unknown;
            log.samples.emplace_back(phase, static_cast<float>(ms));
          }
        }
      }
    });
  }

  // The job every submit sends.
  mt::v1::JobSpec spec;
  if (!google::protobuf::TextFormat::ParseFromString(JobSpecText(world), &spec)) {
    Die("bad built-in job spec");
  }
  std::mutex jobs_mu;  // guards pending_ids (fill threads append)
  std::deque<std::string> pending_ids;
  std::deque<RunningJob> running;

  auto submit = [&](double* ms) -> mt::v1::Job {
    mt::v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    mt::v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 60);
    const absl::Time t0 = absl::Now();
    grpc::Status s = client->SubmitJob(&ctx, req, &resp);
    if (ms != nullptr) *ms = Ms(absl::Now() - t0);
    if (!s.ok()) Die(absl::StrCat("SubmitJob: ", s.error_message()));
    return resp.job();
  };
  auto to_running = [](const mt::v1::Job& job) {
    RunningJob r;
    r.id = job.id();
    r.attempt = job.attempt();
    r.rank_workers.resize(job.placement_size());
    for (const auto& p : job.placement()) r.rank_workers[p.coordinates().rank()] = p.worker_id();
    return r;
  };
  auto cluster = [&]() {
    mt::v1::ClusterInfo info;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 60);
    grpc::Status s = client->GetClusterInfo(&ctx, mt::v1::GetClusterInfoRequest(), &info);
    if (!s.ok()) Die(absl::StrCat("GetClusterInfo: ", s.error_message()));
    return info;
  };

  std::vector<Row> rows;
  std::vector<Window> windows;
  auto window = [&](const std::string& name, int64_t queued, auto&& body) {
    NewPhase(absl::StrCat("q", queued, "/", name));
    const ProcStats a = ReadProc(pid);
    const absl::Time t0 = absl::Now();
    body();
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
    const ProcStats b = ReadProc(pid);
    Window w;
    w.name = name;
    w.queued = queued;
    w.seconds = secs;
    w.cpu_pct = secs > 0 ? 100.0 * (b.cpu_seconds - a.cpu_seconds) / secs : 0;
    w.rss_mib = b.rss_mib;
    windows.push_back(w);
  };

  // Warm-up: heartbeats only, then every worker busy with a job that stays SCHEDULED.
  absl::SleepFor(absl::Seconds(2));
  NewPhase("fill-cluster");
  for (int j = 0; j < num_workers / world; ++j) {
    mt::v1::Job job = submit(nullptr);
    if (job.state() != mt::v1::JOB_STATE_SCHEDULED) {
      Die(absl::StrCat(job.id(), " was not placed: ", job.reason()));
    }
    running.push_back(to_running(job));
  }
  {
    mt::v1::ClusterInfo info = cluster();
    if (info.workers_busy() != num_workers) {
      Die(absl::StrCat("expected ", num_workers, " busy workers, got ", info.workers_busy()));
    }
  }

  const absl::Time budget_end = bench_start + absl::Seconds(absl::GetFlag(FLAGS_budget_seconds));
  std::vector<std::string> notes;
  for (int64_t mark : marks) {
    // Fill the queue to `mark`, several submitters at once.
    NewPhase(absl::StrCat("fill-", mark));
    const absl::Time fill_start = absl::Now();
    const int64_t before = static_cast<int64_t>(pending_ids.size());
    std::atomic<int64_t> remaining{mark - before};
    std::atomic<bool> out_of_time{false};
    std::vector<std::thread> fillers;
    for (int f = 0; f < std::max(1, absl::GetFlag(FLAGS_fill_threads)); ++f) {
      fillers.emplace_back([&] {
        while (remaining.fetch_sub(1) > 0) {
          if (absl::Now() > budget_end) {
            out_of_time = true;
            return;
          }
          mt::v1::Job job = submit(nullptr);
          std::lock_guard<std::mutex> lock(jobs_mu);
          pending_ids.push_back(job.id());
        }
      });
    }
    for (auto& f : fillers) f.join();
    {
      // Fill threads may finish out of order; FIFO order is by id.
      std::lock_guard<std::mutex> lock(jobs_mu);
      std::sort(pending_ids.begin(), pending_ids.end(),
                [](const std::string& a, const std::string& b) {
                  return a.size() != b.size() ? a.size() < b.size() : a < b;
                });
    }
    const double fill_s = absl::ToDoubleSeconds(absl::Now() - fill_start);
    const int64_t queued = static_cast<int64_t>(pending_ids.size());
    const int64_t added = queued - before;
    notes.push_back(absl::StrCat(
        "filled ", before, " -> ", queued, " pending in ", absl::StrFormat("%.1f", fill_s), " s (",
        absl::StrFormat("%.0f", added / std::max(fill_s, 1e-9)), " submits/s, ",
        absl::GetFlag(FLAGS_fill_threads), " client threads)"));
    mt::v1::ClusterInfo info = cluster();
    if (info.jobs_pending() != queued) {
      Die(absl::StrCat("coordinator reports ", info.jobs_pending(), " pending, bench expects ",
                       queued));
    }
    if (out_of_time) {
      notes.push_back(absl::StrCat(
          "mark ", mark, " not reached within --budget_seconds: measured at ", queued, " pending"));
    }

    window("quiet", queued,
           [&] { absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_quiet_seconds))); });

    std::vector<double> sub;
    window("submit", queued, [&] {
      for (int i = 0; i < absl::GetFlag(FLAGS_submits); ++i) {
        double ms = 0;
        mt::v1::Job job = submit(&ms);
        sub.push_back(ms);
        pending_ids.push_back(job.id());
      }
    });
    rows.push_back({"submit", queued, Summarize(sub)});

    std::vector<double> list_all, list_pending;
    window("list", queued, [&] {
      for (int i = 0; i < absl::GetFlag(FLAGS_lists); ++i) {
        for (bool pending_only : {false, true}) {
          mt::v1::ListJobsRequest req;
          req.set_page_size(100);
          if (pending_only) req.add_states(mt::v1::JOB_STATE_PENDING);
          mt::v1::ListJobsResponse resp;
          grpc::ClientContext ctx;
          SetDeadline(&ctx, 60);
          const absl::Time t0 = absl::Now();
          grpc::Status s = client->ListJobs(&ctx, req, &resp);
          (pending_only ? list_pending : list_all).push_back(Ms(absl::Now() - t0));
          if (!s.ok()) Die(absl::StrCat("ListJobs: ", s.error_message()));
          if (resp.jobs_size() != 100) Die("ListJobs returned a short page");
          if (pending_only && resp.jobs(99).queue_position() != 99) {
            Die(absl::StrCat("queue_position of the 100th pending job is ",
                             resp.jobs(99).queue_position()));
          }
        }
      }
    });
    rows.push_back({"list all, page 100", queued, Summarize(list_all)});
    rows.push_back({"list pending, page 100", queued, Summarize(list_pending)});

    // Scheduling decisions: the oldest running job finishes rank by rank; the exit report that
    // frees its last worker runs the pass that places the queue's head on the freed workers.
    std::vector<double> decide, exits;
    int misses = 0;
    window("decide", queued, [&] {
      for (int d = 0; d < absl::GetFlag(FLAGS_decisions); ++d) {
        RunningJob job = running.front();
        running.pop_front();
        for (size_t r = 0; r < job.rank_workers.size(); ++r) {
          mt::v1::RankExitReport req;
          req.set_worker_id(job.rank_workers[r]);
          req.set_job_id(job.id);
          req.set_attempt(job.attempt);
          req.set_rank(static_cast<int>(r));
          req.set_outcome(mt::v1::RANK_OUTCOME_SUCCEEDED);
          mt::v1::RankExitResponse resp;
          grpc::ClientContext ctx;
          ctx.AddMetadata(mt::rpc::kWorkerSessionHeader, session_of.at(job.rank_workers[r]));
          SetDeadline(&ctx, 60);
          const absl::Time t0 = absl::Now();
          grpc::Status s = wstubs[0]->ReportRankExit(&ctx, req, &resp);
          const double ms = Ms(absl::Now() - t0);
          if (!s.ok()) Die(absl::StrCat("ReportRankExit: ", s.error_message()));
          (r + 1 == job.rank_workers.size() ? decide : exits).push_back(ms);
        }
        const std::string head = pending_ids.front();
        mt::v1::GetJobRequest get;
        get.set_job_id(head);
        mt::v1::Job placed;
        grpc::ClientContext ctx;
        SetDeadline(&ctx, 60);
        grpc::Status s = client->GetJob(&ctx, get, &placed);
        if (!s.ok()) Die(absl::StrCat("GetJob: ", s.error_message()));
        if (placed.state() != mt::v1::JOB_STATE_SCHEDULED) {
          ++misses;
          continue;
        }
        pending_ids.pop_front();
        running.push_back(to_running(placed));
      }
    });
    rows.push_back({"decide (last rank exit + pass)", static_cast<int64_t>(pending_ids.size()),
                    Summarize(decide)});
    rows.push_back(
        {"rank exit, not last", static_cast<int64_t>(pending_ids.size()), Summarize(exits)});
    if (misses > 0) {
      notes.push_back(absl::StrCat("q", queued, ": ", misses,
                                   " decisions did not place the queue's head (FAIL)"));
    }
    if (out_of_time) break;
  }

  NewPhase("end");
  stop = true;
  for (auto& t : hb) t.join();
  const ProcStats end = ReadProc(pid);
  const double wall = absl::ToDoubleSeconds(absl::Now() - bench_start);
  const double self_cpu = SelfCpuSeconds() - self_cpu_start;

  // Heartbeats by window.
  std::map<int, std::vector<double>> hb_by_phase;
  std::vector<double> hb_all_marks;
  int64_t unknown = 0, errors = 0;
  double max_lag = 0;
  for (const auto& log : hb_logs) {
    unknown += log.unknown;
    errors += log.errors;
    max_lag = std::max(max_lag, log.max_lag_ms);
    for (const auto& [phase, ms] : log.samples) hb_by_phase[phase].push_back(ms);
  }

  std::printf("\n%-34s %8s %7s %9s %9s %9s\n", "operation", "queued", "n", "p50 ms", "p99 ms",
              "max ms");
  auto print = [](const std::string& what, int64_t queued, const Stats& s) {
    std::printf("%-34s %8lld %7zu %9.3f %9.3f %9.3f\n", what.c_str(),
                static_cast<long long>(queued), s.n, s.p50, s.p99, s.max);
  };
  print("register", 0, Summarize(register_ms));
  for (const auto& [phase, v] : hb_by_phase) {
    const std::string& name = g_phase_names[phase];
    int64_t q = 0;
    if (name.rfind("q", 0) == 0) {
      const size_t slash = name.find('/');
      (void)absl::SimpleAtoi(name.substr(1, slash - 1), &q);
      print("heartbeat during " + name.substr(slash + 1), q, Summarize(v));
    } else if (name == "fill-cluster") {
      // 125 jobs placed one by one on 1,000 idle workers.
      print("heartbeat during cluster fill", 0, Summarize(v));
    } else if (name.rfind("fill-", 0) == 0) {
      // Filling: --fill_threads submitters flat out; the queue grows towards the mark.
      (void)absl::SimpleAtoi(name.substr(5), &q);
      print("heartbeat during fill (to mark)", q, Summarize(v));
    }
  }
  for (const auto& r : rows) print(r.what, r.queued, r.s);

  std::printf("\n%-10s %8s %9s %13s %10s\n", "window", "queued", "seconds", "coord CPU %",
              "RSS MiB");
  for (const auto& w : windows) {
    std::printf("%-10s %8lld %9.2f %13.1f %10.1f\n", w.name.c_str(),
                static_cast<long long>(w.queued), w.seconds, w.cpu_pct, w.rss_mib);
  }
  std::printf(
      "\ncoordinator: %.1f s CPU over %.1f s (%.1f%% of one core), RSS %.1f MiB, "
      "peak RSS (VmHWM) %.1f MiB\n",
      end.cpu_seconds, wall, 100 * end.cpu_seconds / wall, end.rss_mib, end.hwm_mib);
  std::printf("bench client: %.1f s CPU (%.1f%% of one core), on the same cores\n", self_cpu,
              100 * self_cpu / wall);
  std::printf(
      "heartbeats: %d workers on %d nodes, %d connections, %d threads; "
      "max send lag %.1f ms, %lld unknown, %lld errors\n",
      num_workers, (num_workers + per_node - 1) / per_node, nconn, hb_threads, max_lag,
      static_cast<long long>(unknown), static_cast<long long>(errors));
  for (const auto& n : notes) std::printf("note: %s\n", n.c_str());

  // Targets (issue 5): p99 < 20 ms for heartbeat, submit and list; memory < 500 MiB.
  bool ok = errors == 0 && unknown == 0;
  for (const auto& [phase, v] : hb_by_phase) {
    if (g_phase_names[phase].rfind("q", 0) == 0 && Summarize(v).p99 >= 20) ok = false;
  }
  for (const auto& r : rows) {
    if (r.what.rfind("rank exit", 0) != 0 && r.s.p99 >= 20) ok = false;
  }
  if (end.hwm_mib >= 500) ok = false;
  std::printf("targets (p99 < 20 ms, peak RSS < 500 MiB, no lost heartbeats): %s\n",
              ok ? "met" : "NOT met");

  kill(pid, SIGTERM);
  int status = 0;
  for (int i = 0; i < 100 && waitpid(pid, &status, WNOHANG) == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (waitpid(pid, &status, WNOHANG) == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  if (!absl::GetFlag(FLAGS_keep_state)) {
    const std::string cmd = "rm -rf '" + dir + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  } else {
    std::printf("state and coordinator.log kept in %s\n", dir.c_str());
  }
  return ok ? 0 : 3;
}
