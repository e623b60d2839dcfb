#include "tests/testutil/rig_cluster.h"

#include <signal.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "google/protobuf/util/json_util.h"

namespace mt::testutil {

absl::StatusOr<std::unique_ptr<RigCluster>> RigCluster::Create(const std::string& bin_dir,
                                                               const RigClusterOptions& options) {
  absl::StatusOr<NetnsRig> rig =
      NetnsRig::Create(kFirstWorkerNode + options.worker_nodes, options.prefix);
  if (!rig.ok()) return rig.status();
  const std::string dir = MakeTempDir(options.prefix + "rig");
  if (dir.empty()) return absl::InternalError("cannot make a temporary directory");
  std::unique_ptr<RigCluster> c(new RigCluster(*std::move(rig), bin_dir, dir, options));
  c->token_file_ = dir + "/token";
  if (absl::Status s = WriteFileAtomically(c->token_file_, "rig-secret-0123456789abcdef\n");
      !s.ok()) {
    return s;
  }
  // TLS as an operator runs it off loopback (docs/security.md): tokens never cross the bridge
  // in clear text, and the ranks' rendezvous goes over TLS too.
  absl::StatusOr<TestCerts> certs = MakeTestCerts(
      dir, {NetnsRig::Address(kCoordinatorNode), NetnsRig::Address6(kCoordinatorNode)});
  if (!certs.ok()) return certs.status();
  c->certs_ = *std::move(certs);
  c->address_ = options.ipv6 ? "[" + NetnsRig::Address6(kCoordinatorNode) + "]:7070"
                             : NetnsRig::Address(kCoordinatorNode) + ":7070";
  return c;
}

RigCluster::~RigCluster() {
  // Daemons first (their namespaces go with rig_, the first member, destroyed last).
  workers_.clear();
  coordinator_.reset();
}

absl::Status RigCluster::StartCoordinator() {
  std::vector<std::string> argv = {bin_ + "/mt-coordinator",
                                   "--listen=" + address_,
                                   "--auth_token_file=" + token_file_,
                                   "--allowed_root=" + dir_,
                                   "--tls_cert=" + certs_.server_cert,
                                   "--tls_key=" + certs_.server_key,
                                   "--state_dir=" + dir_ + "/state",
                                   "--heartbeat_interval=200ms",
                                   "--lost_after=2s",
                                   "--stop_grace_seconds=5",
                                   "--metrics_port=-1"};
  argv.insert(argv.end(), options_.coordinator_flags.begin(), options_.coordinator_flags.end());
  coordinator_ = std::make_unique<Subprocess>();
  return coordinator_->Start(rig_.In(kCoordinatorNode, argv), dir_ + "/coordinator.log",
                             options_.coordinator_env);
}

std::string RigCluster::NodeName(int n) { return absl::StrCat("node", kFirstWorkerNode + n); }

std::string RigCluster::WorkerName(int n, int w) { return absl::StrCat(NodeName(n), "-w", w); }

std::string RigCluster::WorkDir(const std::string& worker) { return dir_ + "/" + worker; }

absl::Status RigCluster::StartWorker(int n, int w) {
  const std::string name = WorkerName(n, w);
  auto p = std::make_unique<Subprocess>();
  absl::Status s = p->Start(
      rig_.In(kFirstWorkerNode + n,
              {bin_ + "/mt-worker", "--coordinator=" + address_, "--token_file=" + token_file_,
               "--tls_ca=" + certs_.ca, "--node=" + NodeName(n), "--gpu=-1", "--cpu_cores=1",
               "--metrics_port=-1", "--rank_port_range=29500-29600",
               "--state_file=" + dir_ + "/" + name + ".id", "--work_dir=" + WorkDir(name)}),
      dir_ + "/" + name + ".log");
  workers_[name] = std::move(p);
  return s;
}

Subprocess* RigCluster::worker(const std::string& name) {
  auto it = workers_.find(name);
  return it == workers_.end() ? nullptr : it->second.get();
}

CommandResult RigCluster::Mtctl(std::vector<std::string> args, absl::Duration timeout) {
  args.insert(args.begin(), {bin_ + "/mtctl", "--coordinator=" + address_,
                             "--token_file=" + token_file_, "--tls_ca=" + certs_.ca});
  absl::StatusOr<CommandResult> r = RunCommand(rig_.In(kClientNode, args), timeout);
  return r.ok() ? *r : CommandResult{-1, "", std::string(r.status().message())};
}

int RigCluster::IdleWorkers() {
  const CommandResult r = Mtctl({"workers"});
  int idle = 0;
  for (size_t at = r.out.find("IDLE"); at != std::string::npos; at = r.out.find("IDLE", at + 1)) {
    ++idle;
  }
  return r.exit_code == 0 ? idle : -1;
}

absl::StatusOr<mt::v1::Job> RigCluster::Describe(const std::string& id) {
  const CommandResult r = Mtctl({"describe", id, "-o", "json"});
  if (r.exit_code != 0) return absl::UnavailableError(r.err);
  mt::v1::Job job;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(r.out, &job, options).ok()) {
    return absl::DataLossError(r.out);
  }
  return job;
}

bool RigCluster::WaitForState(const std::string& id, const std::string& state,
                              absl::Duration timeout) {
  return WaitFor(
      [&] {
        absl::StatusOr<mt::v1::Job> job = Describe(id);
        return job.ok() && mt::v1::JobState_Name(job->state()) == state;
      },
      timeout);
}

absl::StatusOr<std::string> RigCluster::Submit(const std::string& yaml, const std::string& file) {
  const std::string path = dir_ + "/" + file;
  if (absl::Status s = WriteFileAtomically(path, yaml); !s.ok()) return s;
  const CommandResult r = Mtctl({"submit", path, "-o", "json"});
  if (r.exit_code != 0) {
    const std::string message = absl::StrCat("mtctl submit exit ", r.exit_code, ": ", r.err);
    // mtctl's exit codes (client/common.h): 4 unavailable, 6 timeout.
    const bool again = r.exit_code == 4 || r.exit_code == 6 || r.exit_code < 0;
    return again ? absl::UnavailableError(message) : absl::InvalidArgumentError(message);
  }
  mt::v1::Job job;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(r.out, &job, options).ok() || job.id().empty()) {
    return absl::DataLossError(absl::StrCat("mtctl submit -o json printed no job: ", r.out));
  }
  return job.id();
}

std::string RigCluster::Log(const std::string& name, int lines) {
  absl::StatusOr<CommandResult> r =
      RunCommand({"/usr/bin/tail", "-n", absl::StrCat(lines), dir_ + "/" + name + ".log"});
  return r.ok() ? "\n--- " + name + ":\n" + r->out : "";
}

}  // namespace mt::testutil
