#include "coordinator/jobs/job_manager.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/spec/defaults.h"
#include "common/spec/validate.h"
#include "coordinator/jobs/job_state.h"
#include "coordinator/jobs/load_fallback.h"
#include "coordinator/jobs/restart_policy.h"
#include "coordinator/jobs/save_dir.h"
#include "coordinator/plan.h"
#include "google/protobuf/util/time_util.h"

namespace mt::coordinator {
namespace {

using google::protobuf::util::TimeUtil;

constexpr size_t kMaxLogLines = 10000;

google::protobuf::Timestamp ToProto(absl::Time t) {
  return TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(t));
}

// Whether `p`, reported by the current attempt, is newer than what the job shows. An attempt
// resumed from step S trains from S + 1; one resumed from the final step trains nothing, and its
// empty progress (step 0, loss 0) must not replace the step and loss the job reached (found by
// the chaos soak: a worker killed just after the final save ended the job SUCCEEDED at step 0).
bool TrainedSinceResume(const mt::v1::Progress& p, const mt::v1::Job& job) {
  return job.resume_step() == 0 || p.step() > job.resume_step();
}

// A job resumed from its final step (the last save committed, then a rank or worker was lost)
// trains nothing more: what it reached is the checkpoint's step and losses, which its progress
// may not show (the reporter's last report can predate the save: found by the chaos soak).
void ProgressOfFinalCheckpoint(const mt::v1::CheckpointManifest& m, mt::v1::Job* job) {
  mt::v1::Progress* p = job->mutable_progress();
  if (p->total_steps() <= 0 || job->resume_step() < p->total_steps() ||
      m.step() != job->resume_step()) {
    return;
  }
  p->set_step(m.step());
  p->set_consumed_samples(m.consumed_samples());
  p->set_loss(m.loss());
  if (!std::isnan(m.validation_loss())) p->set_validation_loss(m.validation_loss());
}

bool HoldsRanks(mt::v1::JobState s) {
  return s == mt::v1::JOB_STATE_SCHEDULED || s == mt::v1::JOB_STATE_RUNNING ||
         s == mt::v1::JOB_STATE_RESTARTING;
}

std::string Outcome(mt::v1::RankOutcome o) {
  switch (o) {
    case mt::v1::RANK_OUTCOME_SUCCEEDED:
      return "succeeded";
    case mt::v1::RANK_OUTCOME_FAILED:
      return "failed";
    case mt::v1::RANK_OUTCOME_STOPPED:
      return "stopped";
    default:
      return "ended";
  }
}

// True when the request's state filter (empty: every state) takes `state`.
bool StateWanted(const mt::v1::ListJobsRequest& r, mt::v1::JobState state) {
  return r.states_size() == 0 ||
         std::find(r.states().begin(), r.states().end(), state) != r.states().end();
}

// True when `job` passes every filter of the request: its states, name prefix and owner.
bool Matches(const mt::v1::ListJobsRequest& r, const mt::v1::Job& job) {
  return StateWanted(r, job.state()) &&
         (r.name_prefix().empty() || absl::StartsWith(job.spec().name(), r.name_prefix())) &&
         (r.owner().empty() || job.owner() == r.owner());
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(Store* store,
                                                               WorkerRegistry* registry,
                                                               const Clock* clock,
                                                               JobManagerOptions options) {
  std::unique_ptr<JobManager> m(new JobManager(store, registry, clock, std::move(options)));
  MT_ASSIGN_OR_RETURN(std::vector<mt::v1::Job> jobs, store->AllJobs());
  absl::MutexLock lock(&m->mu_);
  for (mt::v1::Job& job : jobs) {
    MT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job.id()));
    auto entry = std::make_unique<JobEntry>();
    entry->ranks.resize(job.placement_size());
    for (int r = 0; r < job.placement_size(); ++r) {
      entry->ranks[r].worker_id = job.placement(r).worker_id();
    }
    entry->id = id;
    entry->job = std::move(job);
    // A restart in progress when the coordinator stopped: its ranks' exits may never come
    // again, so AdvanceRestarts moves it on after the stop grace.
    if (entry->job.state() == mt::v1::JOB_STATE_RESTARTING) {
      entry->restart_cause = entry->job.reason();
      entry->restart_since = clock->Now();
    }
    // Ranks that run on across the restart are watched again (hangs, stragglers), stalls
    // counting from now: without it a rank stalled across a restart was never found hung.
    if (HoldsRanks(entry->job.state())) m->StartHealth(entry.get());
    m->Reindex(*entry, mt::v1::JOB_STATE_UNSPECIFIED, entry->job.state());
    m->jobs_[id] = std::move(entry);
  }
  MT_RETURN_IF_ERROR(m->RestoreRendezvous());
  return m;
}

absl::Status JobManager::RestoreRendezvous() {
  MT_ASSIGN_OR_RETURN(std::vector<Store::RendezvousKey> kept, store_->AllRendezvousKeys());
  std::set<std::pair<std::string, int>> stale;
  int restored = 0;
  for (const Store::RendezvousKey& k : kept) {
    absl::StatusOr<JobEntry*> entry = Find(k.job_id);
    if (entry.ok() && (*entry)->job.attempt() == k.attempt && HoldsRanks((*entry)->job.state())) {
      rendezvous_.Restore(k);
      ++restored;
    } else {
      stale.insert({k.job_id, k.attempt});
    }
  }
  // Spaces of attempts that ended while the coordinator was away (or before it dropped them).
  for (const auto& [job_id, attempt] : stale) {
    MT_RETURN_IF_ERROR(store_->DropRendezvousSpace(job_id, attempt));
  }
  if (restored > 0) MT_LOG(INFO) << "restored " << restored << " rendezvous keys";
  rendezvous_.Persist(store_);
  return absl::OkStatus();
}

void JobManager::Reindex(const JobEntry& entry, mt::v1::JobState from, mt::v1::JobState to) {
  if (from == to) return;
  const int64_t id = entry.id;
  const int priority = entry.job.spec().priority();
  if (from != mt::v1::JOB_STATE_UNSPECIFIED) {
    auto c = state_counts_.find(from);
    if (c != state_counts_.end() && --c->second <= 0) state_counts_.erase(c);
  }
  ++state_counts_[to];
  if (from == mt::v1::JOB_STATE_PENDING) scheduler_.Dequeue({priority, id});
  if (to == mt::v1::JOB_STATE_PENDING) scheduler_.Enqueue({priority, id});
  if (HoldsRanks(from) && !HoldsRanks(to)) placed_.erase(id);
  if (!HoldsRanks(from) && HoldsRanks(to)) placed_.insert(id);
}

absl::StatusOr<JobManager::JobEntry*> JobManager::Find(const std::string& job_id) {
  MT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return it->second.get();
}

absl::Status JobManager::Persist(JobEntry* entry) {
  entry->job.set_queue_position(-1);
  *entry->job.mutable_update_time() = ToProto(clock_->Now());
  MT_RETURN_IF_ERROR(store_->UpdateJob(entry->job, std::nullopt));
  ++entry->version;
  return absl::OkStatus();
}

absl::Status JobManager::Transition(JobEntry* entry, mt::v1::JobState to,
                                    const std::string& reason) {
  MT_RETURN_IF_ERROR(CheckTransition(entry->job.state(), to));
  const absl::Time now = clock_->Now();
  mt::v1::Job next = entry->job;
  next.set_state(to);
  next.set_reason(reason);
  next.set_queue_position(-1);
  *next.mutable_update_time() = ToProto(now);
  if (to == mt::v1::JOB_STATE_RUNNING && !next.has_start_time()) {
    *next.mutable_start_time() = ToProto(now);
  }
  if (IsTerminal(to)) *next.mutable_end_time() = ToProto(now);
  mt::v1::JobEvent event;
  *event.mutable_time() = ToProto(now);
  event.set_state(to);
  event.set_reason(reason);
  event.set_attempt(next.attempt());
  MT_RETURN_IF_ERROR(store_->UpdateJob(next, event));
  const mt::v1::JobState from = entry->job.state();
  entry->job = std::move(next);
  entry->last_event = event;
  ++entry->version;
  Reindex(*entry, from, to);
  if (options_.observer != nullptr) options_.observer->OnJobTransition(entry->job, from, to, now);
  MT_LOG(INFO) << entry->job.id() << " -> " << ShortName(to) << ": " << reason;
  if (IsTerminal(to)) rendezvous_.Drop(entry->job.id(), entry->job.attempt());
  return absl::OkStatus();
}

absl::Status JobManager::RecordEvent(JobEntry* entry, const std::string& reason) {
  mt::v1::JobEvent event;
  *event.mutable_time() = ToProto(clock_->Now());
  event.set_state(entry->job.state());
  event.set_reason(reason);
  event.set_attempt(entry->job.attempt());
  MT_RETURN_IF_ERROR(store_->UpdateJob(entry->job, event));
  entry->last_event = event;
  ++entry->version;
  MT_LOG(WARNING) << entry->job.id() << ": " << reason;
  return absl::OkStatus();
}

absl::StatusOr<mt::v1::SubmitJobResponse> JobManager::Submit(const mt::v1::JobSpec& submitted,
                                                             const std::string& request_id,
                                                             const std::string& owner) {
  if (request_id.size() > 128) {
    return absl::InvalidArgumentError("request_id must be at most 128 characters");
  }
  mt::v1::JobSpec spec = submitted;
  spec::ApplyDefaults(&spec);
  MT_RETURN_IF_ERROR(spec::ValidateSpec(spec));
  MT_RETURN_IF_ERROR(spec::ValidateSubmittedPaths(spec));
  // The layout must exist for some world before the job is accepted (e.g. a batch that no DP
  // size divides is rejected now, not discovered at scheduling time).
  const int requested = RequestedWorld(spec);
  if (requested > 0) MT_RETURN_IF_ERROR(ComputeLayout(spec, requested).status());
  MT_RETURN_IF_ERROR(
      CheckMemoryFits(spec, registry_->List({mt::v1::WORKER_STATE_IDLE, mt::v1::WORKER_STATE_BUSY,
                                             mt::v1::WORKER_STATE_DRAINING},
                                            "")));

  // An idempotent retry of a submit that was stored answers with that job (below), not with a
  // conflict against itself.
  MT_ASSIGN_OR_RETURN(std::optional<mt::v1::Job> earlier, store_->FindByRequestId(request_id));

  absl::MutexLock lock(&mu_);
  if (jobs_.size() >= static_cast<size_t>(options_.max_jobs)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the coordinator holds ", options_.max_jobs, " jobs; delete old ones"));
  }
  if (!spec.checkpoint().save_dir().empty()) {  // one save_dir per live job
    for (const auto& [other_id, other] : jobs_) {
      if (IsTerminal(other->job.state())) continue;
      if (earlier.has_value() && earlier->id() == other->job.id()) continue;
      MT_RETURN_IF_ERROR(CheckSaveDirFree(spec.checkpoint().save_dir(), other->job));
    }
  }
  const absl::Time now = clock_->Now();
  mt::v1::Job job;
  *job.mutable_spec() = spec;
  job.set_owner(owner);
  job.set_state(mt::v1::JOB_STATE_PENDING);
  job.set_reason("submitted");
  *job.mutable_create_time() = ToProto(now);
  *job.mutable_update_time() = ToProto(now);
  job.mutable_progress()->set_validation_loss(std::nan(""));
  job.mutable_progress()->set_validation_perplexity(std::nan(""));
  mt::v1::JobEvent event;
  *event.mutable_time() = ToProto(now);
  event.set_state(mt::v1::JOB_STATE_PENDING);
  event.set_reason("submitted");
  MT_ASSIGN_OR_RETURN(mt::v1::Job stored, store_->CreateJob(job, request_id, event));
  MT_ASSIGN_OR_RETURN(int64_t id, ParseJobId(stored.id()));
  if (jobs_.find(id) == jobs_.end()) {
    auto entry = std::make_unique<JobEntry>();
    entry->id = id;
    entry->job = stored;
    entry->last_event = event;
    Reindex(*entry, mt::v1::JOB_STATE_UNSPECIFIED, entry->job.state());
    jobs_[id] = std::move(entry);
    MT_LOG(INFO) << stored.id() << " submitted (" << spec.name() << ")";
    ScheduleLocked();
  }
  mt::v1::SubmitJobResponse response;
  *response.mutable_job() = jobs_[id]->job;
  response.mutable_job()->set_queue_position(QueuePosition(*jobs_[id]));
  return response;
}

int64_t JobManager::QueuePosition(const JobEntry& entry) {
  if (entry.job.state() != mt::v1::JOB_STATE_PENDING) return -1;
  return scheduler_.QueuePosition({entry.job.spec().priority(), entry.id});
}

absl::StatusOr<mt::v1::Job> JobManager::Get(const std::string& job_id, bool include_events) {
  mt::v1::Job job;
  {
    absl::MutexLock lock(&mu_);
    MT_ASSIGN_OR_RETURN(JobEntry * entry, Find(job_id));
    job = entry->job;
    job.set_queue_position(QueuePosition(*entry));
  }
  if (include_events) {
    MT_ASSIGN_OR_RETURN(std::vector<mt::v1::JobEvent> events, store_->Events(job_id));
    for (auto& e : events) *job.add_events() = std::move(e);
  }
  return job;
}

absl::StatusOr<mt::v1::ListJobsResponse> JobManager::List(const mt::v1::ListJobsRequest& request) {
  if (request.page_size() < 0 || request.page_size() > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size must be 0..1000 (0 = 100), got ", request.page_size()));
  }
  if (request.owner().size() > 64) {
    return absl::InvalidArgumentError("owner: at most 64 characters (a token's NAME)");
  }
  const int size = request.page_size() == 0 ? 100 : request.page_size();
  int64_t after = 0;  // the page token is the last id of the previous page
  if (!request.page_token().empty() && !absl::SimpleAtoi(request.page_token(), &after)) {
    return absl::InvalidArgumentError("page_token is not one this server issued");
  }
  absl::MutexLock lock(&mu_);
  mt::v1::ListJobsResponse response;
  int64_t total = 0;
  if (request.name_prefix().empty() && request.owner().empty()) {
    // Only states: the total from the per-state counts, not from the whole map.
    for (const auto& [state, n] : state_counts_) {
      if (StateWanted(request, state)) total += n;
    }
  } else {
    for (const auto& [id, entry] : jobs_) total += Matches(request, entry->job) ? 1 : 0;
  }
  response.set_total_count(total);
  // The page: matching jobs from the token on, and a next token when one more matches.
  int64_t last = 0;
  for (auto it = jobs_.upper_bound(after); it != jobs_.end(); ++it) {
    const JobEntry& entry = *it->second;
    if (!Matches(request, entry.job)) continue;
    if (response.jobs_size() == size) {
      response.set_next_page_token(std::to_string(last));
      break;
    }
    mt::v1::Job* out = response.add_jobs();
    *out = entry.job;
    out->set_queue_position(QueuePosition(entry));
    last = it->first;
  }
  return response;
}

absl::StatusOr<mt::v1::Job> JobManager::Cancel(const std::string& job_id, const std::string& reason,
                                               const std::string& by, bool no_save) {
  if (reason.size() > 1024) return absl::InvalidArgumentError("reason: at most 1024 characters");
  absl::MutexLock lock(&mu_);
  MT_ASSIGN_OR_RETURN(JobEntry * entry, Find(job_id));
  if (IsTerminal(entry->job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat(job_id, " already ended (", ShortName(entry->job.state()), ")"));
  }
  const std::string who = by.empty() ? "" : absl::StrCat(" by '", by, "'");
  const std::string why = reason.empty()
                              ? absl::StrCat("cancelled", by.empty() ? " by a user" : who)
                              : absl::StrCat("cancelled", who, ": ", reason);
  const bool had_ranks = entry->job.state() != mt::v1::JOB_STATE_PENDING;
  MT_RETURN_IF_ERROR(Transition(entry, mt::v1::JOB_STATE_CANCELLED, why));
  if (had_ranks) {
    // The stop step is saved like a stop signal's: the ranks get the save's own timeout.
    const mt::v1::JobSpec& spec = entry->job.spec();
    const bool saves = !no_save && !spec.checkpoint().save_dir().empty();
    const int grace =
        options_.stop_grace_seconds + (saves ? spec.restart().save_load_timeout_seconds() : 0);
    entry->cancel_saves = saves;
    StopRanks(entry, why, grace, no_save);
  }
  ScheduleLocked();
  return entry->job;
}

absl::StatusOr<mt::v1::Job> JobManager::Delete(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  MT_ASSIGN_OR_RETURN(JobEntry * entry, Find(job_id));
  MT_RETURN_IF_ERROR(DeleteLocked(entry));
  mt::v1::Job gone = std::move(entry->job);
  jobs_.erase(entry->id);
  return gone;
}

absl::Status JobManager::DeleteLocked(JobEntry* entry) {
  const mt::v1::Job& job = entry->job;
  if (!IsTerminal(job.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        job.id(), " is ", ShortName(job.state()),
        "; only ended jobs are deleted: ", "stop it first (mtctl cancel ", job.id(), ")"));
  }
  for (const mt::v1::Worker& w :
       registry_->List({mt::v1::WORKER_STATE_BUSY, mt::v1::WORKER_STATE_DRAINING}, "")) {
    if (w.job_id() == job.id()) {
      return absl::FailedPreconditionError(absl::StrCat(job.id(), " still has rank ", w.rank(),
                                                        " stopping on ", w.id(),
                                                        "; retry once its ranks have exited"));
    }
  }
  MT_RETURN_IF_ERROR(store_->DeleteJob(job.id()));
  auto c = state_counts_.find(job.state());
  if (c != state_counts_.end() && --c->second <= 0) state_counts_.erase(c);
  if (options_.observer != nullptr) options_.observer->OnJobDeleted(job);
  MT_LOG(INFO) << job.id() << " deleted (" << ShortName(job.state()) << ")";
  return absl::OkStatus();
}

int JobManager::PruneEnded(int keep, absl::Duration max_age) {
  if (keep <= 0 && max_age <= absl::ZeroDuration()) return 0;
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  // Ended jobs, newest id first: the first `keep` stay.
  std::vector<int64_t> doomed;
  int ended = 0;
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    JobEntry* entry = it->second.get();
    if (!IsTerminal(entry->job.state())) continue;
    ++ended;
    const absl::Time end =
        absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(entry->job.end_time()));
    const bool too_many = keep > 0 && ended > keep;
    const bool too_old = max_age > absl::ZeroDuration() && now - end > max_age;
    if (too_many || too_old) doomed.push_back(it->first);
  }
  int deleted = 0;
  for (int64_t id : doomed) {
    if (absl::Status s = DeleteLocked(jobs_.at(id).get()); !s.ok()) {
      MT_LOG(DEBUG) << "retention: " << s.message();
      continue;
    }
    jobs_.erase(id);
    ++deleted;
  }
  return deleted;
}

absl::StatusOr<mt::v1::GetJobLogsResponse> JobManager::Logs(
    const mt::v1::GetJobLogsRequest& request) {
  if (request.tail_lines() < 0 || request.tail_lines() > static_cast<int>(kMaxLogLines)) {
    return absl::InvalidArgumentError("tail_lines must be 0..10000 (0 = 100)");
  }
  const size_t tail = request.tail_lines() == 0 ? 100 : request.tail_lines();
  absl::MutexLock lock(&mu_);
  MT_ASSIGN_OR_RETURN(JobEntry * entry, Find(request.job_id()));
  mt::v1::GetJobLogsResponse response;
  for (size_t r = 0; r < entry->ranks.size(); ++r) {
    if (request.ranks_size() > 0 && std::find(request.ranks().begin(), request.ranks().end(),
                                              static_cast<int>(r)) == request.ranks().end()) {
      continue;
    }
    mt::v1::RankLog* log = response.add_logs();
    log->set_rank(static_cast<int>(r));
    log->set_worker_id(entry->ranks[r].worker_id);
    const auto& lines = entry->ranks[r].log_tail;
    for (size_t i = lines.size() > tail ? lines.size() - tail : 0; i < lines.size(); ++i) {
      log->add_lines(lines[i]);
    }
  }
  return response;
}

absl::StatusOr<JobManager::Snapshot> JobManager::WaitForChange(const std::string& job_id,
                                                               uint64_t seen_version,
                                                               absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  MT_ASSIGN_OR_RETURN(JobEntry * entry, Find(job_id));
  const int64_t id = entry->id;
  // Looked up again after every wait: the job may be deleted meanwhile.
  auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = jobs_.find(id);
    return shutdown_ || it == jobs_.end() || it->second->version != seen_version;
  };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  MT_ASSIGN_OR_RETURN(entry, Find(job_id));
  Snapshot snapshot;
  snapshot.job = entry->job;
  snapshot.job.set_queue_position(QueuePosition(*entry));
  snapshot.version = entry->version;
  snapshot.last_event = entry->last_event;
  return snapshot;
}

std::map<mt::v1::JobState, int> JobManager::CountByState() {
  absl::MutexLock lock(&mu_);
  return state_counts_;
}

void JobManager::Schedule() {
  absl::MutexLock lock(&mu_);
  ScheduleLocked();
}

void JobManager::ScheduleLocked() {
  if (shutdown_) return;
  scheduler_.Pass(this);
}

const mt::v1::Job& JobManager::PendingJob(int64_t id) {
  mu_.AssertHeld();
  return jobs_.at(id)->job;
}

void JobManager::OnUnplannable(int64_t id, const absl::Status& error) {
  mu_.AssertHeld();
  // The spec was valid at submit; a plan error now means it can never run here.
  (void)Transition(jobs_.at(id).get(), mt::v1::JOB_STATE_FAILED,
                   absl::StrCat("cannot be planned: ", error.message()));
}

void JobManager::OnWaiting(int64_t id, const std::string& reason) {
  mu_.AssertHeld();
  JobEntry* entry = jobs_.at(id).get();
  if (entry->job.reason() == reason) return;
  entry->job.set_reason(reason);
  (void)Persist(entry);
}

absl::Status JobManager::OnPlaced(int64_t id, const mt::v1::PlanJobResponse& plan) {
  mu_.AssertHeld();
  JobEntry* entry = jobs_.at(id).get();
  mt::v1::Job& job = entry->job;
  const mt::v1::Job before = job;
  *job.mutable_layout() = plan.layout();
  *job.mutable_placement() = plan.placement();
  // What the layout decides is fixed now and stored with the job: ranks and the trainer read
  // it instead of deriving it again.
  absl::Status resolved =
      spec::ResolveForLayout(job.mutable_spec(), job.layout().data_parallel_size());
  if (!resolved.ok()) {
    job = before;
    OnUnplannable(id, resolved);
    return resolved;
  }
  if (job.progress().total_steps() == 0) {
    const mt::v1::TrainingSpec& t = job.spec().training();
    job.mutable_progress()->set_total_steps(
        t.train_iters() > 0 ? t.train_iters() : t.train_samples() / t.global_batch_size());
  }
  std::vector<std::string> workers;
  for (const auto& p : job.placement()) workers.push_back(p.worker_id());
  const std::string reason =
      absl::StrCat("placed ", job.placement_size(), " ranks on ", absl::StrJoin(workers, ","));
  if (absl::Status s = Transition(entry, mt::v1::JOB_STATE_SCHEDULED, reason); !s.ok()) {
    job = before;
    return s;
  }
  entry->ranks.assign(job.placement_size(), RankState{});
  for (int r = 0; r < job.placement_size(); ++r) {
    entry->ranks[r].worker_id = job.placement(r).worker_id();
  }
  StartHealth(entry);
  SendAssignments(job);
  return absl::OkStatus();
}

void JobManager::SendAssignments(const mt::v1::Job& job) {
  for (int r = 0; r < job.placement_size(); ++r) {
    Enqueue(job.placement(r).worker_id(), AssignCommand(job, r));
  }
}

mt::v1::WorkerCommand JobManager::AssignCommand(const mt::v1::Job& job, int rank) {
  const mt::v1::RankPlacement& p = job.placement(rank);
  mt::v1::WorkerCommand cmd;
  mt::v1::Assignment* a = cmd.mutable_assign();
  a->set_job_id(job.id());
  a->set_attempt(job.attempt());
  *a->mutable_coordinates() = p.coordinates();
  *a->mutable_layout() = job.layout();
  a->set_spec(job.spec().SerializeAsString());
  a->set_coordinator_address(coordinator_address_.empty() ? options_.coordinator_address
                                                          : coordinator_address_);
  a->set_gpu_index(p.gpu_index());
  a->set_resume_from(job.resume_from());
  for (const std::string& root : options_.allowed_roots) a->add_allowed_roots(root);
  if (options_.rank_credentials != nullptr) {
    a->set_rank_credential(
        options_.rank_credentials->Issue(job.id(), job.attempt(), p.coordinates().rank()));
  }
  return cmd;
}

void JobManager::Enqueue(const std::string& worker_id, mt::v1::WorkerCommand command) {
  mailboxes_.Push(worker_id, std::move(command));
}

std::vector<mt::v1::WorkerCommand> JobManager::TakeCommands(const std::string& worker_id,
                                                            absl::Duration timeout) {
  return mailboxes_.Take(worker_id, timeout);
}

void JobManager::ReleaseWorker(const std::string& worker_id, const std::string& job_id) {
  registry_->Release(worker_id, job_id);
}

void JobManager::StopRanks(JobEntry* entry, const std::string& reason, int grace_seconds,
                           bool no_save) {
  const mt::v1::Job& job = entry->job;
  for (size_t r = 0; r < entry->ranks.size(); ++r) {
    RankState& rank = entry->ranks[r];
    if (rank.outcome != mt::v1::RANK_OUTCOME_UNSPECIFIED) continue;  // already ended
    mt::v1::WorkerCommand cmd;
    mt::v1::StopOrder* stop = cmd.mutable_stop();
    stop->set_job_id(job.id());
    stop->set_attempt(job.attempt());
    stop->set_grace_seconds(grace_seconds > 0 ? grace_seconds : options_.stop_grace_seconds);
    stop->set_reason(reason);
    stop->set_no_save(no_save);
    Enqueue(rank.worker_id, std::move(cmd));
  }
}

void JobManager::RecordCancelOutcome(JobEntry* entry) {
  const bool asked = *entry->cancel_saves;
  entry->cancel_saves.reset();
  const mt::v1::Job& job = entry->job;
  const int64_t stop_step = job.progress().step();
  std::string what;
  if (!asked) {
    what = job.spec().checkpoint().save_dir().empty() ? "the job saves no checkpoints"
                                                      : "not saved (cancelled with no_save)";
  } else {
    // The save directory's `latest` moves last in a save (worker/checkpoint/FORMAT.md): it
    // names the stop step only when that save committed. A small file, read under the lock
    // once per cancelled job.
    const std::string save_dir = job.spec().checkpoint().save_dir();
    absl::StatusOr<int64_t> latest = checkpoint::ReadLatest(save_dir);
    if (latest.ok() && *latest == stop_step) {
      what = absl::StrCat("saved step ", stop_step, " to ", save_dir, "/",
                          checkpoint::IterationDirName(stop_step));
    } else {
      what = absl::StrCat("the stop step was not saved (",
                          latest.ok() ? absl::StrCat("latest checkpoint: step ", *latest)
                                      : std::string("no checkpoint"),
                          "; see the ranks' logs)");
    }
  }
  const std::string event =
      absl::StrCat("every rank stopped after the cancel at step ", stop_step, ": ", what);
  if (absl::Status s = RecordEvent(entry, event); !s.ok()) {
    MT_LOG(WARNING) << job.id() << ": recording the cancel's outcome: " << s.message();
  }
}

int JobManager::ReporterRank(const mt::v1::Layout& layout) {
  const int per_stage = layout.tensor_model_parallel_size() * layout.context_parallel_size() *
                        layout.data_parallel_size();
  return (layout.pipeline_model_parallel_size() - 1) * per_stage;
}

absl::Status JobManager::OnRankReport(const mt::v1::RankReport& report) {
  // Read before the lock (a file of the save directory); one rank speaks for the job.
  std::optional<std::string> fallback;
  if (report.has_checkpoint_load() && report.rank() == 0) {
    fallback = DescribeLoadFallback(report.checkpoint_load());
  }
  absl::MutexLock lock(&mu_);
  MT_ASSIGN_OR_RETURN(JobEntry * entry, Find(report.job_id()));
  mt::v1::Job& job = entry->job;
  // Text may come after the rank's exit report has ended the job (another call): kept then too.
  if (report.has_generated()) AppendGenerated(entry, report);
  if (report.attempt() != job.attempt() || IsTerminal(job.state())) return absl::OkStatus();
  if (report.rank() < 0 || report.rank() >= static_cast<int>(entry->ranks.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", report.rank(), " is not in ", job.id()));
  }
  RankState& rank = entry->ranks[report.rank()];
  if (rank.worker_id != report.worker_id()) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", report.rank(), " of ", job.id(),
                                                      " runs on ", rank.worker_id, ", not ",
                                                      report.worker_id()));
  }
  rank.missing_since = absl::InfinitePast();  // it runs: its worker has it
  if (report.activity() != mt::v1::RANK_ACTIVITY_UNSPECIFIED) OnBeacon(entry, report);
  if (report.phase() != mt::v1::RANK_PHASE_UNSPECIFIED) {
    rank.phase = report.phase();
    if (entry->hang != nullptr) entry->hang->OnPhase(report.rank(), report.phase(), clock_->Now());
  }
  if (fallback.has_value()) MT_RETURN_IF_ERROR(RecordEvent(entry, *fallback));
  if (report.has_checkpoint_save_failure() &&
      report.checkpoint_save_failure().step() != entry->failed_save_step) {
    const mt::v1::CheckpointSaveFailure& f = report.checkpoint_save_failure();
    entry->failed_save_step = f.step();
    ++save_failures_;
    MT_RETURN_IF_ERROR(RecordEvent(
        entry, absl::StrCat("checkpoint save of step ", f.step(), " failed on rank ", report.rank(),
                            " (", report.worker_id(), "): ", f.error())));
  }
  if (report.has_progress() && report.rank() == ReporterRank(job.layout()) &&
      TrainedSinceResume(report.progress(), job)) {
    const int64_t total = job.progress().total_steps();
    *job.mutable_progress() = report.progress();
    if (job.progress().total_steps() == 0) job.mutable_progress()->set_total_steps(total);
    (void)Persist(entry);
  }
  if (job.state() == mt::v1::JOB_STATE_SCHEDULED) {
    const bool all_training =
        std::all_of(entry->ranks.begin(), entry->ranks.end(), [](const RankState& r) {
          return r.phase == mt::v1::RANK_PHASE_TRAINING ||
                 r.phase == mt::v1::RANK_PHASE_EVALUATING ||
                 r.phase == mt::v1::RANK_PHASE_CHECKPOINTING;
        });
    if (all_training) {
      MT_RETURN_IF_ERROR(Transition(entry, mt::v1::JOB_STATE_RUNNING, "every rank is training"));
      if (entry->hang != nullptr) entry->hang->Rebase(clock_->Now());
    }
  }
  return absl::OkStatus();
}

absl::Status JobManager::OnRankExit(const mt::v1::RankExitReport& report) {
  absl::MutexLock lock(&mu_);
  MT_ASSIGN_OR_RETURN(JobEntry * entry, Find(report.job_id()));
  mt::v1::Job& job = entry->job;
  if (report.attempt() != job.attempt()) {
    // A late exit of an earlier attempt leaves a worker that the current one was placed on.
    if (!HoldsLiveRank(*entry, report.worker_id())) ReleaseWorker(report.worker_id(), job.id());
    ScheduleLocked();
    return absl::OkStatus();
  }
  if (report.rank() < 0 || report.rank() >= static_cast<int>(entry->ranks.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", report.rank(), " is not in ", job.id()));
  }
  RankState& rank = entry->ranks[report.rank()];
  if (rank.worker_id != report.worker_id()) {  // only the worker holding the rank ends it
    return absl::FailedPreconditionError(absl::StrCat("rank ", report.rank(), " of ", job.id(),
                                                      " runs on ", rank.worker_id, ", not ",
                                                      report.worker_id()));
  }
  if (entry->hang != nullptr) entry->hang->OnRankEnded(report.rank());
  rank.outcome = report.outcome();
  rank.message = report.message();
  rank.log_tail.assign(report.log_tail().begin(), report.log_tail().end());
  if (rank.log_tail.size() > kMaxLogLines) {
    rank.log_tail.erase(rank.log_tail.begin(), rank.log_tail.end() - kMaxLogLines);
  }
  ReleaseWorker(report.worker_id(), job.id());
  if (report.rank() == ReporterRank(job.layout()) && report.has_final_progress() &&
      TrainedSinceResume(report.final_progress(), job)) {
    const int64_t total = job.progress().total_steps();
    *job.mutable_progress() = report.final_progress();
    if (job.progress().total_steps() == 0) job.mutable_progress()->set_total_steps(total);
  }
  if (!IsTerminal(job.state())) {
    const bool active =
        job.state() == mt::v1::JOB_STATE_SCHEDULED || job.state() == mt::v1::JOB_STATE_RUNNING;
    if (report.outcome() == mt::v1::RANK_OUTCOME_FAILED && active) {
      const std::string why = absl::StrCat("rank ", report.rank(), " on ", report.worker_id(),
                                           " failed: ", report.message());
      MT_RETURN_IF_ERROR(FailOrRestart(entry, why));
    } else if (active &&
               std::all_of(entry->ranks.begin(), entry->ranks.end(), [](const RankState& r) {
                 return r.outcome == mt::v1::RANK_OUTCOME_SUCCEEDED;
               })) {
      MT_RETURN_IF_ERROR(
          Transition(entry, mt::v1::JOB_STATE_SUCCEEDED,
                     absl::StrCat("every rank finished (", entry->ranks.size(), " ranks)")));
    } else {
      (void)Persist(entry);
    }
  } else {
    ++entry->version;  // logs arrived for an ended job
    if (entry->cancel_saves.has_value() &&
        std::all_of(entry->ranks.begin(), entry->ranks.end(), [](const RankState& r) {
          return r.outcome != mt::v1::RANK_OUTCOME_UNSPECIFIED;
        })) {
      RecordCancelOutcome(entry);
    }
  }
  MT_LOG(INFO) << job.id() << " rank " << report.rank() << " " << Outcome(report.outcome())
               << " on " << report.worker_id() << (report.message().empty() ? "" : ": ")
               << report.message();
  ScheduleLocked();
  return absl::OkStatus();
}

void JobManager::OnWorkerLost(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  // Only jobs holding ranks can run on the worker; copied, as failing one unindexes it.
  const std::vector<int64_t> placed(placed_.begin(), placed_.end());
  // The node names the machine (or its cut link) to an operator; the id alone does not.
  const absl::StatusOr<mt::v1::Worker> worker = registry_->Get(worker_id);
  const std::string on_node =
      worker.ok() ? absl::StrCat(" on node ", worker->resources().node()) : "";
  for (int64_t id : placed) {
    std::unique_ptr<JobEntry>& entry = jobs_.at(id);
    for (size_t r = 0; r < entry->ranks.size(); ++r) {
      RankState& rank = entry->ranks[r];
      if (rank.worker_id != worker_id || rank.outcome != mt::v1::RANK_OUTCOME_UNSPECIFIED) continue;
      rank.outcome = mt::v1::RANK_OUTCOME_FAILED;
      rank.message = absl::StrCat("worker ", worker_id, " lost");
      const std::string why = absl::StrCat("worker ", worker_id, on_node, " running rank ", r,
                                           " was lost (no heartbeat for ",
                                           absl::FormatDuration(registry_->lost_after()), ")");
      // A RESTARTING job only learns that this rank has ended.
      (void)FailOrRestart(entry.get(), why);
      break;
    }
  }
  mailboxes_.Forget(worker_id);
  ScheduleLocked();
}

void JobManager::FailOrphans() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  bool changed = false;
  const std::vector<int64_t> placed(placed_.begin(), placed_.end());
  for (int64_t id : placed) {
    std::unique_ptr<JobEntry>& entry = jobs_.at(id);
    const mt::v1::JobState state = entry->job.state();
    if (state != mt::v1::JOB_STATE_SCHEDULED && state != mt::v1::JOB_STATE_RUNNING) continue;
    for (size_t r = 0; r < entry->ranks.size(); ++r) {
      const RankState& rank = entry->ranks[r];
      if (rank.outcome != mt::v1::RANK_OUTCOME_UNSPECIFIED) continue;
      auto w = registry_->Get(rank.worker_id);
      const bool running_it =
          w.ok() && w->job_id() == entry->job.id() &&
          (w->state() == mt::v1::WORKER_STATE_BUSY || w->state() == mt::v1::WORKER_STATE_DRAINING);
      // Gone from a worker that registered again, and no exit report came within the grace.
      const bool missing = rank.missing_since != absl::InfinitePast() &&
                           now - rank.missing_since > kMissingRankGrace;
      if (running_it && !missing) continue;
      const std::string why =
          running_it ? absl::StrCat("worker ", rank.worker_id, " registered again without rank ", r,
                                    " and no exit report came within ",
                                    absl::FormatDuration(kMissingRankGrace))
                     : absl::StrCat("worker ", rank.worker_id, " no longer runs rank ", r);
      entry->ranks[r].outcome = mt::v1::RANK_OUTCOME_FAILED;
      entry->ranks[r].message = why;
      changed = FailOrRestart(entry.get(), why).ok() || changed;
      break;
    }
  }
  if (changed) ScheduleLocked();
}

absl::Status JobManager::CheckAttemptLive(const std::string& job_id, int attempt) {
  MT_ASSIGN_OR_RETURN(JobEntry * entry, Find(job_id));
  if (IsTerminal(entry->job.state()) || entry->job.attempt() != attempt) {
    return absl::FailedPreconditionError(
        absl::StrCat(job_id, " attempt ", attempt, " is not running"));
  }
  return absl::OkStatus();
}

absl::Status JobManager::RendezvousSet(const std::string& job_id, int attempt,
                                       const std::string& key, const std::string& value) {
  MT_RETURN_IF_ERROR(RendezvousStore::CheckKey(key));
  MT_RETURN_IF_ERROR(RendezvousStore::CheckValue(value));
  // Under mu_, so that an attempt that just ended (and had its space dropped) cannot write.
  absl::MutexLock lock(&mu_);
  MT_RETURN_IF_ERROR(CheckAttemptLive(job_id, attempt));
  return rendezvous_.Set(job_id, attempt, key, value);
}

absl::StatusOr<std::vector<std::string>> JobManager::RendezvousGet(
    const std::string& job_id, int attempt, const std::vector<std::string>& keys,
    absl::Duration timeout) {
  MT_RETURN_IF_ERROR(RendezvousStore::CheckKeys(keys));
  {
    absl::MutexLock lock(&mu_);
    MT_RETURN_IF_ERROR(Find(job_id).status());
  }
  // Waits on the store's own mutex: the job manager goes on meanwhile.
  return rendezvous_.Get(job_id, attempt, keys, timeout);
}

absl::StatusOr<int64_t> JobManager::RendezvousAdd(const std::string& job_id, int attempt,
                                                  const std::string& key, int64_t delta) {
  MT_RETURN_IF_ERROR(RendezvousStore::CheckKey(key));
  absl::MutexLock lock(&mu_);
  MT_RETURN_IF_ERROR(CheckAttemptLive(job_id, attempt));
  return rendezvous_.Add(job_id, attempt, key, delta);
}

// --- Automatic restart (restart_policy.h) --------------------------------------------------

absl::Status JobManager::FailOrRestart(JobEntry* entry, const std::string& cause) {
  const mt::v1::JobState state = entry->job.state();
  if (state != mt::v1::JOB_STATE_SCHEDULED && state != mt::v1::JOB_STATE_RUNNING) {
    return absl::OkStatus();
  }
  const FailureDecision d = DecideOnFailure(entry->job, cause);
  MT_RETURN_IF_ERROR(Transition(
      entry, d.restart ? mt::v1::JOB_STATE_RESTARTING : mt::v1::JOB_STATE_FAILED, d.reason));
  if (d.restart) {
    entry->restart_cause = cause;
    entry->restart_since = clock_->Now();
  }
  StopRanks(entry, d.restart ? absl::StrCat("restarting the job: ", cause) : d.reason);
  return absl::OkStatus();
}

void JobManager::AdvanceRestarts() {
  struct Ready {
    int64_t id = 0;
    int attempt = 0;
    std::string save_dir;
  };
  std::vector<Ready> ready;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    // A rank that neither exits nor loses its worker (a hung daemon) does not block the
    // restart for ever; its slot stays taken until the worker releases it.
    const absl::Duration patience = absl::Seconds(options_.stop_grace_seconds + 30);
    for (int64_t id : placed_) {
      const JobEntry& e = *jobs_.at(id);
      if (e.job.state() != mt::v1::JOB_STATE_RESTARTING) continue;
      const bool all_ended = std::all_of(e.ranks.begin(), e.ranks.end(), [](const RankState& r) {
        return r.outcome != mt::v1::RANK_OUTCOME_UNSPECIFIED;
      });
      if (!all_ended && now - e.restart_since < patience) continue;
      ready.push_back({id, e.job.attempt(), e.job.spec().checkpoint().save_dir()});
    }
  }
  for (const Ready& r : ready) {
    // Outside the lock: verification re-reads (and hashes) every file of the checkpoint.
    std::optional<FoundCheckpoint> latest;
    mt::v1::CheckpointManifest manifest;
    std::string skipped;
    auto choice = checkpoint::ChooseCheckpoint(r.save_dir, /*verify=*/true);
    if (choice.ok()) {
      latest = FoundCheckpoint{choice->dir, choice->manifest.step()};
      manifest = choice->manifest;
      skipped = absl::StrJoin(choice->problems, "; ");
    } else if (!absl::IsNotFound(choice.status())) {
      skipped = std::string(choice.status().message());
    }
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(r.id);
    if (it == jobs_.end()) continue;
    JobEntry* entry = it->second.get();
    // Cancelled (or moved on) meanwhile.
    if (entry->job.state() != mt::v1::JOB_STATE_RESTARTING || entry->job.attempt() != r.attempt) {
      continue;
    }
    const RequeueDecision d = DecideRequeue(entry->job, entry->restart_cause, latest, skipped);
    if (!d.requeue) {
      (void)Transition(entry, mt::v1::JOB_STATE_FAILED, d.reason);
      continue;
    }
    const mt::v1::Job before = entry->job;
    entry->job.set_attempt(r.attempt + 1);
    entry->job.set_resume_from(d.resume_from);
    entry->job.set_resume_step(d.resume_step);
    ProgressOfFinalCheckpoint(manifest, &entry->job);
    entry->job.clear_placement();
    if (!Transition(entry, mt::v1::JOB_STATE_PENDING, d.reason).ok()) {
      entry->job = before;
      continue;
    }
    rendezvous_.Drop(entry->job.id(), r.attempt);
    entry->ranks.clear();
    entry->restart_cause.clear();
    ScheduleLocked();
  }
}

void JobManager::SetCoordinatorAddress(const std::string& address) {
  absl::MutexLock lock(&mu_);
  coordinator_address_ = address;
}

void JobManager::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
  }
  mailboxes_.Shutdown();
  rendezvous_.Shutdown();
}

std::vector<JobManager::CheckpointDirs> JobManager::ActiveCheckpointDirs() {
  absl::MutexLock lock(&mu_);
  std::vector<CheckpointDirs> out;
  for (const auto& [id, entry] : jobs_) {
    const mt::v1::Job& job = entry->job;
    if (IsTerminal(job.state())) continue;
    const mt::v1::CheckpointSpec& c = job.spec().checkpoint();
    if (c.load_dir().empty() && c.save_dir().empty()) continue;
    out.push_back({job.id(), job.state(), c.load_dir(), c.save_dir()});
  }
  return out;
}

}  // namespace mt::coordinator
