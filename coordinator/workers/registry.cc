#include "coordinator/workers/registry.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
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
  if (!absl::ConsumePrefix(&digits, "w-") || !absl::SimpleAtoi(digits, &n) || n <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_id '", id.substr(0, 64), "' is not a worker id (like w-3)"));
  }
  return n;
}

WorkerRegistry::WorkerRegistry(const Clock* clock, absl::Duration lost_after)
    : clock_(clock), lost_after_(lost_after) {}

absl::StatusOr<mt::v1::Worker> WorkerRegistry::Register(const mt::v1::RegisterRequest& request) {
  if (absl::Status s = ValidateResources(request.resources()); !s.ok()) return s;
  if (request.metrics_address().size() > 512 || request.version().size() > 128) {
    return absl::InvalidArgumentError("metrics_address or version is too long");
  }
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  int64_t id = 0;
  if (!request.worker_id().empty()) {
    auto parsed = ParseWorkerId(request.worker_id());
    if (!parsed.ok()) return parsed.status();
    id = *parsed;
    // An id we never issued (e.g. after the state was wiped) is taken over as is, so the
    // daemon keeps its identity; the counter moves past it.
    if (id >= next_id_) next_id_ = id + 1;
  } else {
    if (workers_.size() >= static_cast<size_t>(kMaxWorkers)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the coordinator already knows ", kMaxWorkers, " workers"));
    }
    id = next_id_++;
  }
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
