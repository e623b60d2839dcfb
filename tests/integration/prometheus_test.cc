// Observability against the real thing: a real cluster (coordinator + 2 CPU workers + trainer
// processes) trains a tiny GPT while Debian's Prometheus, started with deploy/prometheus.yml
// (only its addresses and intervals replaced), finds the workers through the coordinator's
// HTTP service discovery and scrapes everything. The job runs tensor parallelism over the two
// workers. Then:
//   - every panel query of dashboards/*.json returns data from Prometheus's HTTP API, and the
//     dashboards' variable queries find the job and the node;
//   - `promtool check metrics` reports nothing on every endpoint, during and after the run;
//   - each worker's endpoint shows its rank's time in TP all-reduces;
//   - every exposed mt_ metric is in docs/metrics.md and every documented one is exposed;
//   - the rank that speaks for the job wrote TensorBoard events (read back, CRCs checked);
//   - `mtctl top` shows the job and the workers;
//   - after the job, its series leave the workers' endpoints (no unbounded job label).
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/dashboard_util.h"
#include "tests/testutil/cluster.h"
#include "tests/testutil/http.h"
#include "tests/testutil/job_fixture.h"
#include "worker/metrics/event_file.h"

namespace mt {
namespace {

using google::protobuf::Value;
using ::testing::HasSubstr;
using testutil::CommandResult;

const std::string kSrc = MT_SOURCE_DIR;

std::string FindProgram(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

const Value& Field(const Value& v, const std::string& name) {
  static const Value kNull;
  const auto& f = v.struct_value().fields();
  auto it = f.find(name);
  return it == f.end() ? kNull : it->second;
}

// "mt_rank_step" from lines "# TYPE mt_rank_step gauge".
std::set<std::string> MetricNames(const std::string& exposition) {
  std::set<std::string> names;
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (absl::ConsumePrefix(&line, "# TYPE ")) {
      names.insert(std::string(line.substr(0, line.find(' '))));
    }
  }
  return names;
}

// Runs `argv` on a pseudo-terminal for `run_for`, then sends SIGINT and collects what it drew
// until it exits. Returns the output and sets `*exit_code` (-signal when killed).
std::string RunOnTerminal(const std::vector<std::string>& argv, absl::Duration run_for,
                          int* exit_code) {
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) return "";
  if (pid == 0) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  std::string out;
  bool interrupted = false;
  const absl::Time interrupt_at = absl::Now() + run_for;
  const absl::Time give_up = interrupt_at + absl::Seconds(10);
  while (absl::Now() < give_up) {
    if (!interrupted && absl::Now() >= interrupt_at) {
      ::kill(pid, SIGINT);
      interrupted = true;
    }
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(master, buf, sizeof(buf));
    if (n <= 0) break;  // EIO once the child is gone
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  return out;
}

// The coordinator, the dataset (data_) and two workers "w0", "w1" of JobFixture.
class PrometheusTest : public testutil::JobFixture {
 protected:
  void SetUp() override {
    prometheus_bin_ = FindProgram("prometheus");
    promtool_bin_ = FindProgram("promtool");
    ASSERT_FALSE(prometheus_bin_.empty()) << "Debian's prometheus is needed: deploy/setup.sh";
    ASSERT_FALSE(promtool_bin_.empty()) << "promtool (package prometheus): deploy/setup.sh";
    ASSERT_NO_FATAL_FAILURE(JobFixture::SetUp());
    ASSERT_NO_FATAL_FAILURE(StartWorkers(2, {"--metrics_linger=1s"}));
    CommandResult info = cluster_.Mtctl({"info", "-o", "json"});
    ASSERT_EQ(info.exit_code, 0) << info.err;
    auto parsed = testutil::ParseJson(info.out);
    ASSERT_TRUE(parsed.ok()) << info.out;
    const std::string url = Field(*parsed, "metrics_url").string_value();
    ASSERT_TRUE(absl::StartsWith(url, "http://") && absl::EndsWith(url, "/metrics")) << info.out;
    coordinator_metrics_ = url.substr(7, url.size() - 7 - 8);
    EXPECT_EQ(Field(*parsed, "metrics_sd_url").string_value(),
              "http://" + coordinator_metrics_ + "/sd");
  }

  void TearDown() override {
    if (prometheus_.pid() > 0) prometheus_.Signal(SIGTERM);
  }

  // deploy/prometheus.yml with the coordinator's real address and 1 s intervals.
  void StartPrometheus() {
    auto shipped = ReadFile(kSrc + "/deploy/prometheus.yml");
    ASSERT_TRUE(shipped.ok());
    std::string config = *shipped;
    ASSERT_EQ(absl::StrReplaceAll({{"127.0.0.1:9400", coordinator_metrics_}}, &config), 2)
        << "deploy/prometheus.yml should name the coordinator twice (target and /sd)";
    ASSERT_GE(absl::StrReplaceAll({{"15s", "1s"}}, &config), 3)
        << "scrape, evaluation and service-discovery intervals";
    const std::string dir = cluster_.dir() + "/prometheus";
    ASSERT_TRUE(WriteFileAtomically(dir + ".yml", config).ok());
    prometheus_address_ = absl::StrCat("127.0.0.1:", FreePort());
    ASSERT_TRUE(
        prometheus_
            .Start({prometheus_bin_, "--config.file=" + dir + ".yml", "--storage.tsdb.path=" + dir,
                    "--web.listen-address=" + prometheus_address_, "--log.level=warn"},
                   cluster_.dir() + "/prometheus.log")
            .ok());
    ASSERT_TRUE(testutil::WaitFor(
        [&] {
          auto r = testutil::HttpGet(prometheus_address_, "/-/ready", absl::Seconds(2));
          return r.ok() && r->status == 200;
        },
        absl::Seconds(60)))
        << cluster_.Log("prometheus.log");
  }

  // The data of an instant query, or an empty list.
  google::protobuf::ListValue Query(const std::string& promql) {
    auto r = testutil::HttpGet(prometheus_address_,
                               "/api/v1/query?query=" + testutil::UrlEncode(promql));
    if (!r.ok() || r->status != 200) {
      ADD_FAILURE() << promql << ": " << (r.ok() ? r->body : std::string(r.status().message()));
      return {};
    }
    auto v = testutil::ParseJson(r->body);
    if (!v.ok() || Field(*v, "status").string_value() != "success") {
      ADD_FAILURE() << promql << ": " << r->body;
      return {};
    }
    return Field(Field(*v, "data"), "result").list_value();
  }

  std::vector<std::string> Endpoints() {
    std::vector<std::string> out = {coordinator_metrics_};
    auto workers = cluster_.ListWorkers();
    EXPECT_TRUE(workers.ok());
    if (!workers.ok()) return out;
    for (const auto& w : workers->workers()) {
      EXPECT_FALSE(w.metrics_address().empty()) << w.id();
      out.push_back(w.metrics_address());
    }
    return out;
  }

  // promtool check metrics on every endpoint; returns the union of the metric names.
  std::set<std::string> PromtoolCheckEveryEndpoint(const std::string& when) {
    std::set<std::string> names;
    for (const std::string& endpoint : Endpoints()) {
      auto r = testutil::HttpGet(endpoint, "/metrics");
      if (!r.ok()) {
        ADD_FAILURE() << endpoint << ": " << r.status();
        continue;
      }
      EXPECT_EQ(r->status, 200);
      const std::string file = cluster_.dir() + "/scrape.txt";
      EXPECT_TRUE(WriteFileAtomically(file, r->body).ok());
      auto check =
          testutil::RunCommand({"/bin/sh", "-c", promtool_bin_ + " check metrics < " + file});
      if (!check.ok()) {
        ADD_FAILURE() << "promtool: " << check.status();
        continue;
      }
      EXPECT_EQ(check->exit_code, 0) << when << " " << endpoint << "\n" << check->out << check->err;
      EXPECT_EQ(check->out + check->err, "") << when << " " << endpoint;
      const std::set<std::string> here = MetricNames(r->body);
      names.insert(here.begin(), here.end());
    }
    return names;
  }

  std::string prometheus_bin_, promtool_bin_;
  std::string coordinator_metrics_;
  std::string prometheus_address_;
  testutil::Subprocess prometheus_;
};

TEST_F(PrometheusTest, EveryDashboardQueryReturnsDataFromARealRun) {
  ASSERT_NO_FATAL_FAILURE(StartPrometheus());
  const std::string tensorboard = cluster_.dir() + "/tb";
  const std::string yaml = absl::StrCat(
      "name: observed\n",
      "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 2, seq_length: 16,\n"
      "        hidden_dropout: 0.0, attention_dropout: 0.0}\n"
      "parallel: {tp: 2, pp: 1, dp: 1}\n",
      "training: {micro_batch_size: 2, global_batch_size: 8, train_iters: 1000000, lr: 3.0e-3,\n"
      "           lr_warmup_iters: 2, seed: 7}\n",
      "data:\n  data_path: ", data_, "\n  split: \"90,10,0\"\n",
      "  tokenizer: {vocab_file: /unused/vocab.json, merge_file: /unused/merges.txt}\n",
      "evaluation: {eval_interval: 20, eval_iters: 1}\n",
      "logging: {log_interval: 10, tensorboard_dir: ", tensorboard, "}\n");
  const std::string job = Submit(yaml, "job.yaml");
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(cluster_.WaitForState(job, mt::v1::JOB_STATE_RUNNING, absl::Minutes(2)))
      << cluster_.Log("w0.log");

  // Prometheus has found both workers and seen an evaluation, and a few scrapes passed.
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        return Query(absl::StrCat("mt_rank_validation_loss{job=\"", job, "\"}")).values_size() ==
                   2 &&
               Query("up{job=\"mt-workers\"} == 1").values_size() == 2 &&
               Query("up{job=\"mt-coordinator\"} == 1").values_size() == 1;
      },
      absl::Minutes(2)))
      << cluster_.Log("prometheus.log") << cluster_.Log("w0.log");
  absl::SleepFor(absl::Seconds(5));

  // Every panel's query, with the dashboard's variables set as Grafana would.
  const std::map<std::string, std::string> vars = {
      {"job", job}, {"node", "node0"}, {"__rate_interval", "1m"}, {"__interval", "15s"}};
  int queries = 0;
  for (const auto& [file, dashboard] : testutil::LoadDashboards(kSrc)) {
    for (const testutil::PanelQuery& q : testutil::PanelQueries(dashboard)) {
      const std::string promql = testutil::Substitute(q.expr, vars);
      EXPECT_GT(Query(promql).values_size(), 0)
          << file << " panel \"" << q.panel << "\" " << q.ref_id << " returns no data: " << promql;
      ++queries;
    }
  }
  EXPECT_GE(queries, 30);
  // The variables' label_values queries, through the label API Grafana uses.
  auto labels = [&](const std::string& label, const std::string& match) {
    auto r = testutil::HttpGet(
        prometheus_address_,
        absl::StrCat("/api/v1/label/", label, "/values?match[]=", testutil::UrlEncode(match)));
    std::set<std::string> values;
    if (!r.ok()) return values;
    auto v = testutil::ParseJson(r->body);
    if (!v.ok()) return values;
    const Value data = Field(*v, "data");  // a copy: GCC 13 warns on a reference here
    for (const Value& s : data.list_value().values()) values.insert(s.string_value());
    return values;
  };
  EXPECT_THAT(labels("job", "mt_rank_step"), ::testing::Contains(job));
  EXPECT_THAT(labels("node", absl::StrCat("mt_rank_step{job=\"", job, "\"}")),
              ::testing::Contains("node0"));
  EXPECT_THAT(labels("node", "mt_coordinator_workers"), ::testing::Contains("node0"));

  // Values that must be right, not just present.
  auto value = [&](const std::string& promql) {
    auto result = Query(promql);
    if (result.values_size() == 0) return -1.0;
    return std::stod(Field(result.values(0), "value").list_value().values(1).string_value());
  };
  EXPECT_EQ(value("mt_coordinator_workers{state=\"busy\"}"), 2);
  EXPECT_EQ(value("sum(mt_worker_busy)"), 2);
  EXPECT_EQ(value("mt_coordinator_jobs{state=\"running\"}"), 1);
  EXPECT_GT(value(absl::StrCat("min(mt_rank_step{job=\"", job, "\"})")), 20);
  EXPECT_GT(value(absl::StrCat("max(mt_rank_loss{job=\"", job, "\"})")), 0);
  EXPECT_GT(value(absl::StrCat("sum(mt_rank_communication_seconds_total{job=\"", job, "\"})")), 0)
      << "two tensor-parallel ranks all-reduce their activations";
  // Each rank's TP all-reduces, on its worker's own endpoint.
  const std::regex tp_series(
      R"(^mt_rank_communication_seconds_total\{collective="all_reduce",[^}]*group="tp",job=")" +
      job + R"(",[^}]*\} ([0-9.e+-]+)$)");
  int tp_ranks = 0;
  const std::vector<std::string> endpoints = Endpoints();
  for (size_t i = 1; i < endpoints.size(); ++i) {  // [0] is the coordinator's
    auto r = testutil::HttpGet(endpoints[i], "/metrics");
    ASSERT_TRUE(r.ok()) << endpoints[i] << ": " << r.status();
    for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
      std::smatch m;
      const std::string l(line);
      if (!std::regex_search(l, m, tp_series)) continue;
      EXPECT_GT(std::stod(m[1]), 0) << l;
      ++tp_ranks;
    }
  }
  EXPECT_EQ(tp_ranks, 2) << "one all_reduce/tp series per rank, with time";
  EXPECT_EQ(value("mt_coordinator_scheduling_latency_seconds_count"), 1);
  EXPECT_GT(value("sum(mt_coordinator_rpc_duration_seconds_count{method=\"Heartbeat\"})"), 0);

  // promtool, docs.
  std::set<std::string> exposed = PromtoolCheckEveryEndpoint("during the run");
  auto docs = ReadFile(kSrc + "/docs/metrics.md");
  ASSERT_TRUE(docs.ok());
  std::set<std::string> documented;
  const std::regex row(R"(^\| `(mt_[a-z0-9_]+)` \|)");
  for (absl::string_view line : absl::StrSplit(*docs, '\n')) {
    std::smatch m;
    const std::string l(line);
    if (std::regex_search(l, m, row)) documented.insert(m[1]);
  }
  for (const std::string& name : exposed) {
    if (!absl::StartsWith(name, "mt_")) continue;
    EXPECT_TRUE(documented.count(name) > 0) << name << " is not in docs/metrics.md";
  }
  for (const std::string& name : documented) {
    EXPECT_TRUE(exposed.count(name) > 0) << "docs/metrics.md lists " << name << ", not exposed";
  }

  // mtctl top: a snapshot when not on a terminal, JSON with -o json.
  CommandResult top = cluster_.Mtctl({"top"});
  EXPECT_EQ(top.exit_code, 0) << top.err;
  EXPECT_THAT(top.out, HasSubstr(job));
  EXPECT_THAT(top.out, HasSubstr("RUNNING"));
  EXPECT_THAT(top.out, HasSubstr("node0"));
  EXPECT_THAT(top.out, HasSubstr("BUSY"));
  CommandResult top_json = cluster_.Mtctl({"top", "-o", "json"});
  EXPECT_EQ(top_json.exit_code, 0) << top_json.err;
  auto snapshot = testutil::ParseJson(top_json.out);
  ASSERT_TRUE(snapshot.ok()) << top_json.out;
  const Value jobs = Field(Field(*snapshot, "jobs"), "jobs");
  ASSERT_EQ(jobs.list_value().values_size(), 1) << top_json.out;
  EXPECT_EQ(Field(jobs.list_value().values(0), "id").string_value(), job);
  EXPECT_EQ(Field(Field(*snapshot, "workers"), "workers").list_value().values_size(), 2);

  // On a terminal: redrawn in place (cursor home, lines cleared), cursor back after Ctrl-C.
  int top_code = -1;
  const std::string live = RunOnTerminal({testutil::BinDir() + "/mtctl", "top", "--interval=200ms",
                                          "--coordinator=" + cluster_.address()},
                                         absl::Seconds(2), &top_code);
  EXPECT_EQ(top_code, 0) << live;
  size_t frames = 0;
  for (size_t at = live.find("\033[Hmt top"); at != std::string::npos;
       at = live.find("\033[Hmt top", at + 1)) {
    ++frames;
  }
  EXPECT_GE(frames, 3u) << "a frame every 200 ms for 2 s";
  EXPECT_THAT(live, HasSubstr("\033[K"));
  EXPECT_THAT(live, HasSubstr(job));
  EXPECT_TRUE(absl::StrContains(live.substr(live.size() > 20 ? live.size() - 20 : 0), "\033[?25h"))
      << "the cursor is shown again on the way out";

  // TensorBoard: the reporting rank (rank 0 here) wrote Megatron's scalars.
  const std::vector<std::string> files = worker::metrics::ListEventFiles(tensorboard);
  ASSERT_EQ(files.size(), 1u) << "one event file, from the rank that speaks for the job";

  CommandResult cancel = cluster_.Mtctl({"cancel", job});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  ASSERT_TRUE(cluster_.WaitForIdleWorkers(2, absl::Seconds(20)));
  auto events = worker::metrics::ReadEventFile(files[0]);
  ASSERT_TRUE(events.ok()) << events.status();
  std::map<std::string, int> tags;
  for (const auto& e : *events) {
    for (const auto& v : e.summary().value()) ++tags[v.tag()];
  }
  EXPECT_GT(tags["lm loss"], 20);
  EXPECT_GT(tags["learning-rate"], 20);
  EXPECT_GT(tags["lm loss validation"], 0);
  EXPECT_GT(tags["tokens-per-second"], 20);

  // After the run: the job's series go (after --metrics-linger=1s), the endpoints stay clean.
  EXPECT_TRUE(testutil::WaitFor(
      [&] {
        for (const std::string& endpoint : Endpoints()) {
          auto r = testutil::HttpGet(endpoint, "/metrics");
          if (!r.ok() || absl::StrContains(r->body, "job=\"" + job + "\"")) return false;
        }
        return true;
      },
      absl::Seconds(20)));
  PromtoolCheckEveryEndpoint("after the run");
  EXPECT_TRUE(testutil::WaitFor(
      [&] { return value("mt_coordinator_jobs_finished_total{state=\"cancelled\"}") == 1; },
      absl::Seconds(10)));
}

}  // namespace
}  // namespace mt
