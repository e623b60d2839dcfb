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
#include <sys/prctl.h>
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
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) Die("fork failed");
  if (pid == 0) {
    // The coordinator goes with the bench whatever way the bench exits (Die included).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);  // the bench is already gone
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

// Heartbeats are tagged with the window ("phase") they were sent in: main's thread starts
// phases, the heartbeat threads read the current one.
class Phases {
 public:
  int Start(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    names_.push_back(name);
    const int id = static_cast<int>(names_.size()) - 1;
    current_.store(id);
    return id;
  }
  int current() const { return current_.load(); }
  std::string name(int id) const {
    std::lock_guard<std::mutex> lock(mu_);
    return names_[id];
  }

 private:
  std::atomic<int> current_{0};
  mutable std::mutex mu_;
  std::vector<std::string> names_ = {"start"};
};

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

// --- Start-up -----------------------------------------------------------------------------------

struct Options {
  int workers = 0;
  int per_node = 0;
  int world = 0;
  std::vector<int64_t> marks;  // --queue_sizes
  int heartbeat_threads = 0;
  int connections = 0;
  int fill_threads = 0;
  double quiet_seconds = 0;
  int submits = 0;
  int lists = 0;
  int decisions = 0;
  double budget_seconds = 0;
  bool keep_state = false;
};

Options ParseOptions(int argc, char** argv) {
  mt::cli::ParseFlags(argc, argv,
                      "1,000 simulated workers and a growing job queue "
                      "against one mt-coordinator; prints latency percentiles, CPU and memory.",
                      "coordinator_scale.cc");
  Options o;
  o.workers = absl::GetFlag(FLAGS_workers);
  o.per_node = absl::GetFlag(FLAGS_gpus_per_node);
  o.world = absl::GetFlag(FLAGS_job_world);
  if (o.workers <= 0 || o.per_node <= 0 || o.world <= 0 || o.workers % o.world != 0) {
    Die("--workers must be a positive multiple of --job_world");
  }
  for (absl::string_view m : absl::StrSplit(absl::GetFlag(FLAGS_queue_sizes), ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(m, &v) || v <= 0) Die("bad --queue_sizes");
    o.marks.push_back(v);
  }
  o.heartbeat_threads = absl::GetFlag(FLAGS_heartbeat_threads);
  o.connections = absl::GetFlag(FLAGS_connections);
  o.fill_threads = absl::GetFlag(FLAGS_fill_threads);
  o.quiet_seconds = absl::GetFlag(FLAGS_quiet_seconds);
  o.submits = absl::GetFlag(FLAGS_submits);
  o.lists = absl::GetFlag(FLAGS_lists);
  o.decisions = absl::GetFlag(FLAGS_decisions);
  o.budget_seconds = absl::GetFlag(FLAGS_budget_seconds);
  o.keep_state = absl::GetFlag(FLAGS_keep_state);
  return o;
}

// One descriptor per worker connection on both sides.
void RaiseFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

struct Coordinator {
  pid_t pid = 0;
  std::string dir;  // temporary: state, address file and log
  std::string address;
};

Coordinator LaunchCoordinator() {
  std::string binary = absl::GetFlag(FLAGS_coordinator);
  if (binary.empty()) binary = SelfDir() + "/mt-coordinator";
  char tmpl[] = "/tmp/mt-scale-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die("mkdtemp failed");
  Coordinator c;
  c.dir = tmpl;
  c.pid = StartCoordinator(binary, c.dir, &c.address);
  std::printf("coordinator %s (pid %d) on %s, state in %s\n", binary.c_str(), c.pid,
              c.address.c_str(), c.dir.c_str());
  std::fflush(stdout);
  return c;
}

struct Connections {
  int count = 0;
  std::vector<std::unique_ptr<mt::v1::WorkerService::Stub>> workers;
  std::unique_ptr<mt::v1::ClientService::Stub> client;

  mt::v1::WorkerService::Stub* ForWorker(int worker) const { return workers[worker % count].get(); }
};

// Connections: one per worker unless told otherwise; a local subchannel pool keeps channels
// with the same target from sharing one TCP connection.
Connections Connect(const Options& o, const std::string& address) {
  Connections c;
  c.count = o.connections;
  if (c.count <= 0) c.count = o.workers;
  for (int i = 0; i < c.count; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("bench.conn", i);
    c.workers.push_back(mt::v1::WorkerService::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
  }
  auto client_channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  c.client = mt::v1::ClientService::NewStub(client_channel);
  return c;
}

struct Workers {
  std::vector<std::string> ids;
  // Each worker's session (sent as rpc::kWorkerSessionHeader on its later calls), by id.
  std::map<std::string, std::string> session_of;
  std::vector<double> register_ms;
};

Workers RegisterWorkers(const Options& o, const Connections& conns) {
  Workers w;
  w.ids.resize(o.workers);
  for (int i = 0; i < o.workers; ++i) {
    mt::v1::RegisterRequest req;
    req.mutable_resources()->set_node(absl::StrCat("sim-node-", i / o.per_node));
    req.mutable_resources()->set_gpu_index(i % o.per_node);
    req.mutable_resources()->set_device_name("simulated");
    req.mutable_resources()->set_memory_bytes(int64_t{80} << 30);
    req.mutable_resources()->set_cpu_cores(8);
    req.set_version("coordinator_scale");
    mt::v1::RegisterResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 30);
    const absl::Time t0 = absl::Now();
    grpc::Status s = conns.ForWorker(i)->Register(&ctx, req, &resp);
    w.register_ms.push_back(Ms(absl::Now() - t0));
    if (!s.ok()) Die(absl::StrCat("Register: ", s.error_message()));
    w.ids[i] = resp.worker_id();
    w.session_of[resp.worker_id()] = resp.session();
  }
  return w;
}

// --- Heartbeats ---------------------------------------------------------------------------------

// The heartbeat threads: worker i's slot is i/N of the way into each second.
struct Heartbeats {
  int threads = 0;
  int workers = 0;
  Clk::time_point start;
  std::vector<HeartbeatLog> logs;  // by thread
  std::atomic<bool> stop{false};
  std::vector<std::thread> senders;
};

void SendHeartbeat(int i, const Workers& w, const Connections& conns, const Phases& phases,
                   HeartbeatLog* log) {
  mt::v1::HeartbeatRequest req;
  req.set_worker_id(w.ids[i]);
  mt::v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  ctx.AddMetadata(mt::rpc::kWorkerSessionHeader, w.session_of.at(w.ids[i]));
  SetDeadline(&ctx, 10);
  const int phase = phases.current();
  const absl::Time t0 = absl::Now();
  grpc::Status s = conns.ForWorker(i)->Heartbeat(&ctx, req, &resp);
  const double ms = Ms(absl::Now() - t0);
  if (!s.ok()) {
    ++log->errors;
  } else {
    if (!resp.known()) ++log->unknown;
    log->samples.emplace_back(phase, static_cast<float>(ms));
  }
}

// Thread t: workers t, t + threads, ..., each at its slot of every second, until stopped.
void HeartbeatLoop(int t, const Workers& w, const Connections& conns, const Phases& phases,
                   Heartbeats* hb) {
  HeartbeatLog& log = hb->logs[t];
  log.samples.reserve(1 << 17);
  for (int64_t round = 0; !hb->stop.load(); ++round) {
    for (int i = t; i < hb->workers && !hb->stop.load(); i += hb->threads) {
      const Clk::time_point due = hb->start + std::chrono::seconds(round) +
                                  std::chrono::microseconds(int64_t{1000000} * i / hb->workers);
      std::this_thread::sleep_until(due);
      const double lag = std::chrono::duration<double, std::milli>(Clk::now() - due).count();
      log.max_lag_ms = std::max(log.max_lag_ms, lag);
      SendHeartbeat(i, w, conns, phases, &log);
    }
  }
}

void StartHeartbeats(const Options& o, const Workers& w, const Connections& conns,
                     const Phases& phases, Heartbeats* hb) {
  hb->threads = std::max(1, o.heartbeat_threads);
  hb->workers = o.workers;
  hb->logs.resize(hb->threads);
  hb->start = Clk::now() + std::chrono::milliseconds(100);
  for (int t = 0; t < hb->threads; ++t) {
    hb->senders.emplace_back(
        [t, &w, &conns, &phases, hb] { HeartbeatLoop(t, w, conns, phases, hb); });
  }
}

void StopHeartbeats(Heartbeats* hb) {
  hb->stop = true;
  for (auto& t : hb->senders) t.join();
}

// --- The measurements at each mark --------------------------------------------------------------

mt::v1::JobSpec ParseJobSpec(int world) {
  mt::v1::JobSpec spec;
  if (!google::protobuf::TextFormat::ParseFromString(JobSpecText(world), &spec)) {
    Die("bad built-in job spec");
  }
  return spec;
}

struct Jobs {
  std::mutex mu;  // guards pending_ids (fill threads append)
  std::deque<std::string> pending_ids;
  std::deque<RunningJob> running;
};

struct Results {
  std::vector<Row> rows;
  std::vector<Window> windows;
  std::vector<std::string> notes;
};

// What the measurements share; all owned by main.
struct Bench {
  const Options* opts;
  pid_t pid;  // the coordinator's
  const Connections* conns;
  const Workers* workers;
  const mt::v1::JobSpec* spec;  // the job every submit sends
  Phases* phases;
  Jobs* jobs;
  Results* results;
};

mt::v1::Job Submit(const Bench& b, double* ms) {
  mt::v1::SubmitJobRequest req;
  *req.mutable_spec() = *b.spec;
  mt::v1::SubmitJobResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 60);
  const absl::Time t0 = absl::Now();
  grpc::Status s = b.conns->client->SubmitJob(&ctx, req, &resp);
  if (ms != nullptr) *ms = Ms(absl::Now() - t0);
  if (!s.ok()) Die(absl::StrCat("SubmitJob: ", s.error_message()));
  return resp.job();
}

RunningJob ToRunning(const mt::v1::Job& job) {
  RunningJob r;
  r.id = job.id();
  r.attempt = job.attempt();
  r.rank_workers.resize(job.placement_size());
  for (const auto& p : job.placement()) r.rank_workers[p.coordinates().rank()] = p.worker_id();
  return r;
}

mt::v1::ClusterInfo Cluster(const Bench& b) {
  mt::v1::ClusterInfo info;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 60);
  grpc::Status s = b.conns->client->GetClusterInfo(&ctx, mt::v1::GetClusterInfoRequest(), &info);
  if (!s.ok()) Die(absl::StrCat("GetClusterInfo: ", s.error_message()));
  return info;
}

// Runs `body` as the window `name` at `queued` pending jobs, recording the coordinator's CPU and
// memory over it.
template <typename Body>
void TimeWindow(const Bench& b, const std::string& name, int64_t queued, Body&& body) {
  b.phases->Start(absl::StrCat("q", queued, "/", name));
  const ProcStats before = ReadProc(b.pid);
  const absl::Time t0 = absl::Now();
  body();
  const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
  const ProcStats after = ReadProc(b.pid);
  Window w;
  w.name = name;
  w.queued = queued;
  w.seconds = secs;
  w.cpu_pct = secs > 0 ? 100.0 * (after.cpu_seconds - before.cpu_seconds) / secs : 0;
  w.rss_mib = after.rss_mib;
  b.results->windows.push_back(w);
}

// Warm-up: heartbeats only, then every worker busy with a job that stays SCHEDULED.
void FillCluster(const Bench& b) {
  const int num_workers = b.opts->workers;
  absl::SleepFor(absl::Seconds(2));
  b.phases->Start("fill-cluster");
  for (int j = 0; j < num_workers / b.opts->world; ++j) {
    mt::v1::Job job = Submit(b, nullptr);
    if (job.state() != mt::v1::JOB_STATE_SCHEDULED) {
      Die(absl::StrCat(job.id(), " was not placed: ", job.reason()));
    }
    b.jobs->running.push_back(ToRunning(job));
  }
  mt::v1::ClusterInfo info = Cluster(b);
  if (info.workers_busy() != num_workers) {
    Die(absl::StrCat("expected ", num_workers, " busy workers, got ", info.workers_busy()));
  }
}

// Submits `count` jobs from --fill_threads threads at once, the pending ones in FIFO order;
// returns whether `budget_end` stopped them first.
bool SubmitConcurrently(const Bench& b, int64_t count, absl::Time budget_end) {
  Jobs& jobs = *b.jobs;
  std::atomic<int64_t> remaining{count};
  std::atomic<bool> out_of_time{false};
  std::vector<std::thread> fillers;
  for (int f = 0; f < std::max(1, b.opts->fill_threads); ++f) {
    fillers.emplace_back([&] {
      while (remaining.fetch_sub(1) > 0) {
        if (absl::Now() > budget_end) {
          out_of_time = true;
          return;
        }
        mt::v1::Job job = Submit(b, nullptr);
        std::lock_guard<std::mutex> lock(jobs.mu);
        jobs.pending_ids.push_back(job.id());
      }
    });
  }
  for (auto& f : fillers) f.join();
  {
    // Fill threads may finish out of order; FIFO order is by id.
    std::lock_guard<std::mutex> lock(jobs.mu);
    std::sort(jobs.pending_ids.begin(), jobs.pending_ids.end(),
              [](const std::string& a, const std::string& b) {
                return a.size() != b.size() ? a.size() < b.size() : a < b;
              });
  }
  return out_of_time;
}

struct Fill {
  int64_t queued = 0;  // pending jobs after the fill
  bool out_of_time = false;
};

// Fills the queue to `mark`, several submitters at once.
Fill FillQueue(const Bench& b, int64_t mark, absl::Time budget_end) {
  b.phases->Start(absl::StrCat("fill-", mark));
  const absl::Time fill_start = absl::Now();
  const int64_t before = static_cast<int64_t>(b.jobs->pending_ids.size());
  Fill fill;
  fill.out_of_time = SubmitConcurrently(b, mark - before, budget_end);
  const double fill_s = absl::ToDoubleSeconds(absl::Now() - fill_start);
  fill.queued = static_cast<int64_t>(b.jobs->pending_ids.size());
  const int64_t added = fill.queued - before;
  std::vector<std::string>& notes = b.results->notes;
  notes.push_back(absl::StrCat("filled ", before, " -> ", fill.queued, " pending in ",
                               absl::StrFormat("%.1f", fill_s), " s (",
                               absl::StrFormat("%.0f", added / std::max(fill_s, 1e-9)),
                               " submits/s, ", b.opts->fill_threads, " client threads)"));
  mt::v1::ClusterInfo info = Cluster(b);
  if (info.jobs_pending() != fill.queued) {
    Die(absl::StrCat("coordinator reports ", info.jobs_pending(), " pending, bench expects ",
                     fill.queued));
  }
  if (fill.out_of_time) {
    notes.push_back(absl::StrCat("mark ", mark,
                                 " not reached within --budget_seconds: measured at ", fill.queued,
                                 " pending"));
  }
  return fill;
}

void MeasureSubmits(const Bench& b, int64_t queued) {
  std::vector<double> sub;
  TimeWindow(b, "submit", queued, [&] {
    for (int i = 0; i < b.opts->submits; ++i) {
      double ms = 0;
      mt::v1::Job job = Submit(b, &ms);
      sub.push_back(ms);
      b.jobs->pending_ids.push_back(job.id());
    }
  });
  b.results->rows.push_back({"submit", queued, Summarize(sub)});
}

// One ListJobs of the first page of 100 (of the pending jobs only, or of all), timed and checked.
double TimedList(const Bench& b, bool pending_only) {
  mt::v1::ListJobsRequest req;
  req.set_page_size(100);
  if (pending_only) req.add_states(mt::v1::JOB_STATE_PENDING);
  mt::v1::ListJobsResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 60);
  const absl::Time t0 = absl::Now();
  grpc::Status s = b.conns->client->ListJobs(&ctx, req, &resp);
  const double ms = Ms(absl::Now() - t0);
  if (!s.ok()) Die(absl::StrCat("ListJobs: ", s.error_message()));
  if (resp.jobs_size() != 100) Die("ListJobs returned a short page");
  if (pending_only && resp.jobs(99).queue_position() != 99) {
    Die(absl::StrCat("queue_position of the 100th pending job is ",
                     resp.jobs(99).queue_position()));
  }
  return ms;
}

void MeasureLists(const Bench& b, int64_t queued) {
  std::vector<double> list_all, list_pending;
  TimeWindow(b, "list", queued, [&] {
    for (int i = 0; i < b.opts->lists; ++i) {
      for (bool pending_only : {false, true}) {
        (pending_only ? list_pending : list_all).push_back(TimedList(b, pending_only));
      }
    }
  });
  b.results->rows.push_back({"list all, page 100", queued, Summarize(list_all)});
  b.results->rows.push_back({"list pending, page 100", queued, Summarize(list_pending)});
}

// Reports every rank of `job` as exited, in rank order: the last report's time goes to
// `decide`, the others' to `exits`.
void FinishJob(const Bench& b, const RunningJob& job, std::vector<double>* decide,
               std::vector<double>* exits) {
  for (size_t r = 0; r < job.rank_workers.size(); ++r) {
    mt::v1::RankExitReport req;
    req.set_worker_id(job.rank_workers[r]);
    req.set_job_id(job.id);
    req.set_attempt(job.attempt);
    req.set_rank(static_cast<int>(r));
    req.set_outcome(mt::v1::RANK_OUTCOME_SUCCEEDED);
    mt::v1::RankExitResponse resp;
    grpc::ClientContext ctx;
    ctx.AddMetadata(mt::rpc::kWorkerSessionHeader, b.workers->session_of.at(job.rank_workers[r]));
    SetDeadline(&ctx, 60);
    const absl::Time t0 = absl::Now();
    grpc::Status s = b.conns->workers[0]->ReportRankExit(&ctx, req, &resp);
    const double ms = Ms(absl::Now() - t0);
    if (!s.ok()) Die(absl::StrCat("ReportRankExit: ", s.error_message()));
    (r + 1 == job.rank_workers.size() ? *decide : *exits).push_back(ms);
  }
}

// Whether the queue's head was placed; if so it moves from the queue to the running jobs.
bool TakePlacedHead(const Bench& b) {
  const std::string head = b.jobs->pending_ids.front();
  mt::v1::GetJobRequest get;
  get.set_job_id(head);
  mt::v1::Job placed;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 60);
  grpc::Status s = b.conns->client->GetJob(&ctx, get, &placed);
  if (!s.ok()) Die(absl::StrCat("GetJob: ", s.error_message()));
  if (placed.state() != mt::v1::JOB_STATE_SCHEDULED) return false;
  b.jobs->pending_ids.pop_front();
  b.jobs->running.push_back(ToRunning(placed));
  return true;
}

// Scheduling decisions: the oldest running job finishes rank by rank; the exit report that
// frees its last worker runs the pass that places the queue's head on the freed workers.
void MeasureDecisions(const Bench& b, int64_t queued) {
  std::vector<double> decide, exits;
  int misses = 0;
  TimeWindow(b, "decide", queued, [&] {
    for (int d = 0; d < b.opts->decisions; ++d) {
      RunningJob job = b.jobs->running.front();
      b.jobs->running.pop_front();
      FinishJob(b, job, &decide, &exits);
      if (!TakePlacedHead(b)) ++misses;
    }
  });
  const int64_t pending = static_cast<int64_t>(b.jobs->pending_ids.size());
  b.results->rows.push_back({"decide (last rank exit + pass)", pending, Summarize(decide)});
  b.results->rows.push_back({"rank exit, not last", pending, Summarize(exits)});
  if (misses > 0) {
    b.results->notes.push_back(absl::StrCat("q", queued, ": ", misses,
                                            " decisions did not place the queue's head (FAIL)"));
  }
}

// At each mark: fill the queue to it, then the windows quiet, submit, list and decide.
void MeasureMarks(const Bench& b, absl::Time bench_start) {
  const absl::Time budget_end = bench_start + absl::Seconds(b.opts->budget_seconds);
  for (int64_t mark : b.opts->marks) {
    const Fill fill = FillQueue(b, mark, budget_end);
    const int64_t queued = fill.queued;
    TimeWindow(b, "quiet", queued, [&] { absl::SleepFor(absl::Seconds(b.opts->quiet_seconds)); });
    MeasureSubmits(b, queued);
    MeasureLists(b, queued);
    MeasureDecisions(b, queued);
    if (fill.out_of_time) break;
  }
}

// --- The report ---------------------------------------------------------------------------------

struct HeartbeatTotals {
  std::map<int, std::vector<double>> by_phase;  // ms
  int64_t unknown = 0, errors = 0;
  double max_lag = 0;
};

HeartbeatTotals CollectHeartbeats(const Heartbeats& hb) {
  HeartbeatTotals t;
  for (const auto& log : hb.logs) {
    t.unknown += log.unknown;
    t.errors += log.errors;
    t.max_lag = std::max(t.max_lag, log.max_lag_ms);
    for (const auto& [phase, ms] : log.samples) t.by_phase[phase].push_back(ms);
  }
  return t;
}

void PrintRow(const std::string& what, int64_t queued, const Stats& s) {
  std::printf("%-34s %8lld %7zu %9.3f %9.3f %9.3f\n", what.c_str(), static_cast<long long>(queued),
              s.n, s.p50, s.p99, s.max);
}

// Latencies: register, heartbeats by window, then the measured operations.
void PrintLatencies(const Bench& b, const HeartbeatTotals& hb) {
  std::printf("\n%-34s %8s %7s %9s %9s %9s\n", "operation", "queued", "n", "p50 ms", "p99 ms",
              "max ms");
  PrintRow("register", 0, Summarize(b.workers->register_ms));
  for (const auto& [phase, v] : hb.by_phase) {
    const std::string name = b.phases->name(phase);
    int64_t q = 0;
    if (name.rfind("q", 0) == 0) {
      const size_t slash = name.find('/');
      (void)absl::SimpleAtoi(name.substr(1, slash - 1), &q);
      PrintRow("heartbeat during " + name.substr(slash + 1), q, Summarize(v));
    } else if (name == "fill-cluster") {
      // 125 jobs placed one by one on 1,000 idle workers.
      PrintRow("heartbeat during cluster fill", 0, Summarize(v));
    } else if (name.rfind("fill-", 0) == 0) {
      // Filling: --fill_threads submitters flat out; the queue grows towards the mark.
      (void)absl::SimpleAtoi(name.substr(5), &q);
      PrintRow("heartbeat during fill (to mark)", q, Summarize(v));
    }
  }
  for (const auto& r : b.results->rows) PrintRow(r.what, r.queued, r.s);
}

void PrintWindows(const std::vector<Window>& windows) {
  std::printf("\n%-10s %8s %9s %13s %10s\n", "window", "queued", "seconds", "coord CPU %",
              "RSS MiB");
  for (const auto& w : windows) {
    std::printf("%-10s %8lld %9.2f %13.1f %10.1f\n", w.name.c_str(),
                static_cast<long long>(w.queued), w.seconds, w.cpu_pct, w.rss_mib);
  }
}

// The coordinator's and the bench's CPU and memory over the whole run (`wall` seconds), the
// heartbeat set-up, and the notes.
void PrintUsage(const Bench& b, const Heartbeats& hb, const HeartbeatTotals& totals,
                const ProcStats& end, double wall, double self_cpu) {
  const int num_workers = b.opts->workers;
  const int per_node = b.opts->per_node;
  std::printf(
      "\ncoordinator: %.1f s CPU over %.1f s (%.1f%% of one core), RSS %.1f MiB, "
      "peak RSS (VmHWM) %.1f MiB\n",
      end.cpu_seconds, wall, 100 * end.cpu_seconds / wall, end.rss_mib, end.hwm_mib);
  std::printf("bench client: %.1f s CPU (%.1f%% of one core), on the same cores\n", self_cpu,
              100 * self_cpu / wall);
  std::printf(
      "heartbeats: %d workers on %d nodes, %d connections, %d threads; "
      "max send lag %.1f ms, %lld unknown, %lld errors\n",
      num_workers, (num_workers + per_node - 1) / per_node, b.conns->count, hb.threads,
      totals.max_lag, static_cast<long long>(totals.unknown),
      static_cast<long long>(totals.errors));
  for (const auto& n : b.results->notes) std::printf("note: %s\n", n.c_str());
}

// Targets (issue 5): p99 < 20 ms for heartbeat, submit and list; memory < 500 MiB.
bool TargetsMet(const Bench& b, const HeartbeatTotals& hb, const ProcStats& end) {
  bool ok = hb.errors == 0 && hb.unknown == 0;
  for (const auto& [phase, v] : hb.by_phase) {
    if (b.phases->name(phase).rfind("q", 0) == 0 && Summarize(v).p99 >= 20) ok = false;
  }
  for (const auto& r : b.results->rows) {
    if (r.what.rfind("rank exit", 0) != 0 && r.s.p99 >= 20) ok = false;
  }
  if (end.hwm_mib >= 500) ok = false;
  std::printf("targets (p99 < 20 ms, peak RSS < 500 MiB, no lost heartbeats): %s\n",
              ok ? "met" : "NOT met");
  return ok;
}

// Prints the whole report; returns whether the targets were met.
bool Report(const Bench& b, const Heartbeats& hb, const ProcStats& end, double wall,
            double self_cpu) {
  const HeartbeatTotals totals = CollectHeartbeats(hb);
  PrintLatencies(b, totals);
  PrintWindows(b.results->windows);
  PrintUsage(b, hb, totals, end, wall, self_cpu);
  return TargetsMet(b, totals, end);
}

// --- Shut-down ----------------------------------------------------------------------------------

void StopCoordinator(pid_t pid) {
  kill(pid, SIGTERM);
  int status = 0;
  for (int i = 0; i < 100 && waitpid(pid, &status, WNOHANG) == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (waitpid(pid, &status, WNOHANG) == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
}

void RemoveStateDir(const std::string& dir, bool keep_state) {
  if (!keep_state) {
    const std::string cmd = "rm -rf '" + dir + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  } else {
    std::printf("state and coordinator.log kept in %s\n", dir.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options opts = ParseOptions(argc, argv);
  RaiseFileLimit();
  const Coordinator coord = LaunchCoordinator();
  const absl::Time bench_start = absl::Now();
  const double self_cpu_start = SelfCpuSeconds();
  const Connections conns = Connect(opts, coord.address);
  const Workers workers = RegisterWorkers(opts, conns);
  Phases phases;
  Heartbeats hb;
  StartHeartbeats(opts, workers, conns, phases, &hb);

  const mt::v1::JobSpec spec = ParseJobSpec(opts.world);
  Jobs jobs;
  Results results;
  const Bench bench{&opts, coord.pid, &conns, &workers, &spec, &phases, &jobs, &results};
  FillCluster(bench);
  MeasureMarks(bench, bench_start);

  phases.Start("end");
  StopHeartbeats(&hb);
  const ProcStats end = ReadProc(coord.pid);
  const double wall = absl::ToDoubleSeconds(absl::Now() - bench_start);
  const double self_cpu = SelfCpuSeconds() - self_cpu_start;
  const bool ok = Report(bench, hb, end, wall, self_cpu);

  StopCoordinator(coord.pid);
  RemoveStateDir(coord.dir, opts.keep_state);
  return ok ? 0 : 3;
}
