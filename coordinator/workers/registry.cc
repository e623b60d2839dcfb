#include "coordinator/workers/registry.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/status_macros.h"
#include "common/rpc/worker_credential.h"
#include "google/protobuf/util/time_util.h"

namespace mt::coordinator {
namespace {

using google::protobuf::util::TimeUtil;

google::protobuf::Timestamp ToProto(absl::Time t) {
  return TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(t));
}

absl::Status ValidateResources(const mt::v1::WorkerResources& r) {
  if (r.node().empty() || r.node().size() > WorkerRegistry::kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resources.node must be 1..", WorkerRegistry::kMaxNameBytes, " bytes (the host name)"));
  }
  for (char c : r.node()) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resources.node '", r.node(), "' may hold only letters, digits, '.', '-', '_'"));
    }
  }
  if (r.gpu_index() < -1 || r.gpu_index() > 1023) {
    return absl::InvalidArgumentError(
        absl::StrCat("resources.gpu_index must be -1 (CPU) or 0..1023, got ", r.gpu_index()));
  }
  if (r.memory_bytes() < 0) {
    return absl::InvalidArgumentError("resources.memory_bytes must be >= 0");
  }
  if (r.cpu_cores() < 0 || r.cpu_cores() > 4096) {
    return absl::InvalidArgumentError("resources.cpu_cores must be 0..4096");
  }
  if (r.device_name().size() > 256) {
    return absl::InvalidArgumentError("resources.device_name must be at most 256 bytes");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> ParseWorkerId(const std::string& id) {
  absl::string_view digits = id;
  int64_t n = 0;
  // SimpleAtoi refuses values past int64; the bound keeps the next id far from overflow.
  if (!absl::ConsumePrefix(&digits, "w-") || !absl::SimpleAtoi(digits, &n) || n <= 0 ||
      n > WorkerRegistry::kMaxWorkerId) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_id '", id.substr(0, 64), "' is not a worker id (w-1 .. w-",
                     WorkerRegistry::kMaxWorkerId,
                     "); remove the daemon's --state-file to register as a new worker"));
  }
  return n;
}

WorkerRegistry::WorkerRegistry(const Clock* clock, absl::Duration lost_after)
    : clock_(clock), lost_after_(lost_after) {}

absl::Status WorkerRegistry::Persist(Store* store) {
  MT_ASSIGN_OR_RETURN(std::vector<Store::WorkerIdentity> known, store->AllWorkerIdentities());
  absl::MutexLock lock(&mu_);
  for (const Store::WorkerIdentity& identity : known) {
    secrets_[identity.id].credential = identity.credential_sha256;
    next_id_ = std::max(next_id_, identity.id + 1);
  }
  store_ = store;
  return absl::OkStatus();
}

absl::Status WorkerRegistry::RecordIdentity(int64_t id, const std::string& credential_sha256) {
  if (store_ == nullptr) return absl::OkStatus();
  absl::Status s = store_->PutWorkerIdentity(id, credential_sha256);
  if (s.ok()) return s;
  return absl::UnavailableError(
      absl::StrCat("cannot record the identity of w-", id, ": ", s.message()));
}

absl::StatusOr<int64_t> WorkerRegistry::ClaimId(const mt::v1::RegisterRequest& request,
                                                absl::Time now, std::string* credential) {
  const std::string& presented = request.worker_credential();
  if (!presented.empty()) {
    MT_RETURN_IF_ERROR(rpc::CheckWorkerSecret(presented, "worker_credential"));
  }
  if (!request.session().empty()) {
    MT_RETURN_IF_ERROR(rpc::CheckWorkerSecret(request.session(), "session"));
  }
  const auto cap = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    if (workers_.size() < static_cast<size_t>(kMaxWorkers)) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat("the coordinator already knows ", kMaxWorkers,
                                                     " workers; restart it to forget GONE ones"));
  };
  if (request.worker_id().empty()) {
    MT_RETURN_IF_ERROR(cap());
    if (next_id_ > kMaxWorkerId) {
      return absl::ResourceExhaustedError(
          absl::StrCat("every worker id up to w-", kMaxWorkerId, " was issued"));
    }
    *credential = rpc::NewWorkerSecret();
    MT_RETURN_IF_ERROR(RecordIdentity(next_id_, rpc::HashWorkerSecret(*credential)));
    return next_id_++;
  }
  MT_ASSIGN_OR_RETURN(const int64_t id, ParseWorkerId(request.worker_id()));
  auto known = secrets_.find(id);
  if (known == secrets_.end()) {
    // An id this coordinator's store does not know (issued before identities were kept, or no
    // store): adopted with the credential the daemon kept, or a new one; the counter moves
    // past it.
    MT_RETURN_IF_ERROR(cap());
    *credential = presented.empty() ? rpc::NewWorkerSecret() : "";
    const std::string hash = rpc::HashWorkerSecret(presented.empty() ? *credential : presented);
    MT_RETURN_IF_ERROR(RecordIdentity(id, hash));
    if (id >= next_id_) next_id_ = id + 1;
    secrets_[id].credential = hash;
    return id;
  }
  if (!rpc::WorkerSecretMatches(presented, known->second.credential)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker ", request.worker_id(),
        ": the worker_credential does not match the one issued with this id (a copied or stale "
        "--state-file?); remove the state file to register as a new worker"));
  }
  auto registered = workers_.find(id);
  if (registered == workers_.end()) {
    // Known from the store, not registered since this coordinator started.
    MT_RETURN_IF_ERROR(cap());
    return id;
  }
  const mt::v1::Worker& w = registered->second;
  const bool live = w.state() == mt::v1::WORKER_STATE_IDLE ||
                    w.state() == mt::v1::WORKER_STATE_BUSY ||
                    w.state() == mt::v1::WORKER_STATE_DRAINING;
  const absl::Duration silent = now - last_seen_[id];
  if (live && silent <= lost_after_ &&
      !rpc::WorkerSecretMatches(request.session(), known->second.session) &&
      !rpc::WorkerSecretMatches(request.session(), known->second.previous_session)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "worker ", request.worker_id(), " is connected from another daemon (",
        mt::v1::WorkerState_Name(w.state()), ", last heartbeat ", absl::FormatDuration(silent),
        " ago); a restarted daemon is accepted once that one's heartbeats have stopped for ",
        absl::FormatDuration(lost_after_), "; a second daemon needs its own --state-file"));
  }
  return id;
}

absl::StatusOr<mt::v1::Worker> WorkerRegistry::Register(const mt::v1::RegisterRequest& request,
                                                        Issued* issued) {
  if (absl::Status s = ValidateResources(request.resources()); !s.ok()) return s;
  if (request.metrics_address().size() > 512 || request.version().size() > 128) {
    return absl::InvalidArgumentError("metrics_address or version is too long");
  }
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  std::string credential;
  MT_ASSIGN_OR_RETURN(const int64_t id, ClaimId(request, now, &credential));
  const std::string session = rpc::NewWorkerSecret();
  if (!credential.empty()) secrets_[id].credential = rpc::HashWorkerSecret(credential);
  secrets_[id].previous_session = std::move(secrets_[id].session);
  secrets_[id].session = rpc::HashWorkerSecret(session);
  if (issued != nullptr) *issued = {credential, session};
  mt::v1::Worker& w = workers_[id];
  const bool known = w.id().empty() == false;
  w.set_id(absl::StrCat("w-", id));
  *w.mutable_resources() = request.resources();
  w.set_metrics_address(request.metrics_address());
  w.set_version(request.version());
  if (!known) *w.mutable_register_time() = ToProto(now);
  *w.mutable_last_heartbeat_time() = ToProto(now);
  if (request.running_size() > 0) {
    w.set_state(mt::v1::WORKER_STATE_BUSY);
    w.set_job_id(request.running(0).job_id());
    w.set_rank(request.running(0).rank());
    w.set_reason("reconnected while running a rank");
  } else if (w.state() != mt::v1::WORKER_STATE_DRAINING) {
    w.set_state(mt::v1::WORKER_STATE_IDLE);
    w.clear_job_id();
    w.set_rank(0);
    w.set_reason(known ? "re-registered" : "registered");
  }
  last_seen_[id] = now;
  ++version_;
  return w;
}

absl::Status WorkerRegistry::Authenticate(const std::string& worker_id,
                                          const std::string& session) const {
  MT_ASSIGN_OR_RETURN(const int64_t id, ParseWorkerId(worker_id));
  absl::MutexLock lock(&mu_);
  auto it = secrets_.find(id);
  if (it == secrets_.end() || !workers_.contains(id)) {
    return absl::NotFoundError(absl::StrCat("worker ", worker_id, " is not registered"));
  }
  if (!rpc::WorkerSecretMatches(session, it->second.session)) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker ", worker_id, ": the call's ", rpc::kWorkerSessionHeader,
                     " is not the session of the worker's current registration; register again"));
  }
  return absl::OkStatus();
}

absl::Status WorkerRegistry::Heartbeat(const std::string& worker_id) {
  auto id = ParseWorkerId(worker_id);
  if (!id.ok()) return id.status();
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(*id);
  if (it == workers_.end() || it->second.state() == mt::v1::WORKER_STATE_LOST ||
      it->second.state() == mt::v1::WORKER_STATE_GONE) {
    return absl::NotFoundError(absl::StrCat("worker ", worker_id, " is not registered"));
  }
  last_seen_[*id] = now;
  *it->second.mutable_last_heartbeat_time() = ToProto(now);
  return absl::OkStatus();
}

absl::Status WorkerRegistry::Deregister(const std::string& worker_id) {
  auto id = ParseWorkerId(worker_id);
  if (!id.ok()) return id.status();
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(*id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", worker_id, " is not registered"));
  }
  it->second.set_state(mt::v1::WORKER_STATE_GONE);
  it->second.set_reason("deregistered");
  ++version_;
  return absl::OkStatus();
}

absl::StatusOr<mt::v1::Worker> WorkerRegistry::Drain(const std::string& worker_id) {
  auto id = ParseWorkerId(worker_id);
  if (!id.ok()) return id.status();
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(*id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", worker_id, " is not registered"));
  }
  mt::v1::Worker& w = it->second;
  if (w.state() != mt::v1::WORKER_STATE_IDLE && w.state() != mt::v1::WORKER_STATE_BUSY &&
      w.state() != mt::v1::WORKER_STATE_DRAINING) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", worker_id, " is ",
                                                      mt::v1::WorkerState_Name(w.state()),
                                                      "; only live workers drain"));
  }
  w.set_state(mt::v1::WORKER_STATE_DRAINING);
  w.set_reason("drained by an operator");
  ++version_;
  return w;
}

absl::StatusOr<mt::v1::Worker> WorkerRegistry::Get(const std::string& worker_id) const {
  auto id = ParseWorkerId(worker_id);
  if (!id.ok()) return id.status();
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(*id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", worker_id, " is not registered"));
  }
  return it->second;
}

absl::Status WorkerRegistry::Assign(const std::string& worker_id, const std::string& job_id,
                                    int rank) {
  auto id = ParseWorkerId(worker_id);
  if (!id.ok()) return id.status();
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(*id);
  if (it == workers_.end() || it->second.state() != mt::v1::WORKER_STATE_IDLE) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", worker_id, " is not idle"));
  }
  it->second.set_state(mt::v1::WORKER_STATE_BUSY);
  it->second.set_job_id(job_id);
  it->second.set_rank(rank);
  it->second.set_reason(absl::StrCat("running rank ", rank, " of ", job_id));
  ++version_;
  return absl::OkStatus();
}

void WorkerRegistry::Release(const std::string& worker_id, const std::string& job_id) {
  auto id = ParseWorkerId(worker_id);
  if (!id.ok()) return;
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(*id);
  if (it == workers_.end() || it->second.job_id() != job_id) return;
  it->second.clear_job_id();
  it->second.set_rank(0);
  ++version_;
  if (it->second.state() == mt::v1::WORKER_STATE_BUSY) {
    it->second.set_state(mt::v1::WORKER_STATE_IDLE);
    it->second.set_reason(absl::StrCat("finished its rank of ", job_id));
  }
}

std::vector<mt::v1::Worker> WorkerRegistry::List(const std::vector<mt::v1::WorkerState>& states,
                                                 const std::string& node) const {
  absl::MutexLock lock(&mu_);
  std::vector<mt::v1::Worker> out;
  for (const auto& [id, w] : workers_) {
    if (!node.empty() && w.resources().node() != node) continue;
    if (!states.empty()) {
      bool match = false;
      for (auto s : states) match = match || s == w.state();
      if (!match) continue;
    }
    out.push_back(w);
  }
  return out;
}

std::vector<std::string> WorkerRegistry::SweepLost() {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  std::vector<std::string> lost;
  for (auto& [id, w] : workers_) {
    if (w.state() == mt::v1::WORKER_STATE_LOST || w.state() == mt::v1::WORKER_STATE_GONE) continue;
    if (now - last_seen_[id] > lost_after_) {
      w.set_state(mt::v1::WORKER_STATE_LOST);
      w.set_reason(absl::StrCat("no heartbeat for ", absl::FormatDuration(now - last_seen_[id])));
      lost.push_back(w.id());
    }
  }
  if (!lost.empty()) ++version_;
  return lost;
}

WorkerRegistry::Capacity WorkerRegistry::SnapshotCapacity() const {
  absl::MutexLock lock(&mu_);
  Capacity c;
  c.version = version_;
  for (const auto& [id, w] : workers_) {
    if (w.state() == mt::v1::WORKER_STATE_IDLE) {
      ++c.live;
      c.idle.push_back(w);
    } else if (w.state() == mt::v1::WORKER_STATE_BUSY) {
      ++c.live;
    }
  }
  return c;
}

uint64_t WorkerRegistry::capacity_version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

namespace {

// The counter of `c` that workers in state `s` add to; nullptr for none.
int* CounterFor(WorkerCounts* c, mt::v1::WorkerState s) {
  switch (s) {
    case mt::v1::WORKER_STATE_IDLE:
      return &c->idle;
    case mt::v1::WORKER_STATE_BUSY:
      return &c->busy;
    case mt::v1::WORKER_STATE_DRAINING:
      return &c->draining;
    case mt::v1::WORKER_STATE_LOST:
      return &c->lost;
    case mt::v1::WORKER_STATE_GONE:
      return &c->gone;
    default:
      return nullptr;
  }
}

}  // namespace

WorkerCounts WorkerRegistry::Counts() const {
  static constexpr int WorkerCounts::*kFields[] = {&WorkerCounts::total, &WorkerCounts::idle,
                                                   &WorkerCounts::busy,  &WorkerCounts::draining,
                                                   &WorkerCounts::lost,  &WorkerCounts::gone};
  WorkerCounts c;
  for (const auto& [node, n] : CountsByNode()) {
    for (int WorkerCounts::*field : kFields) c.*field += n.*field;
  }
  return c;
}

std::map<std::string, WorkerCounts> WorkerRegistry::CountsByNode() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, WorkerCounts> by_node;
  for (const auto& [id, w] : workers_) {
    WorkerCounts& c = by_node[w.resources().node()];
    ++c.total;
    if (int* counter = CounterFor(&c, w.state()); counter != nullptr) ++*counter;
  }
  return by_node;
}

}  // namespace mt::coordinator
