#include "coordinator/checkpoints/catalog.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/confine.h"
#include "common/base/errors.h"
#include "common/base/files.h"
#include "common/base/logging.h"
#include "common/base/paths.h"
#include "common/base/status_macros.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_writer.h"
#include "common/checkpoint/hf_gpt2.h"
#include "common/checkpoint/manifest_check.h"
#include "common/checkpoint/reshard.h"
#include "coordinator/checkpoints/checkpoint_state.h"
#include "coordinator/checkpoints/retention.h"
#include "coordinator/jobs/job_state.h"
#include "google/protobuf/util/time_util.h"

namespace mt::coordinator {
namespace {

using google::protobuf::util::TimeUtil;
using mt::v1::Checkpoint;

constexpr int kDefaultChunk = 1 << 20;
constexpr int kMinChunk = 4 << 10;
constexpr int kMaxChunk = 4 << 20;

// "/a/b/" -> "/a/b".
std::string Clean(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string Base(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Short(mt::v1::CheckpointState s) {
  std::string name = mt::v1::CheckpointState_Name(s);
  const std::string prefix = "CHECKPOINT_STATE_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

bool Usable(mt::v1::CheckpointState s) {
  return s == mt::v1::CHECKPOINT_STATE_COMPLETE || s == mt::v1::CHECKPOINT_STATE_VERIFIED;
}

// Moves `c` to `to` when the state table allows it.
absl::Status MoveTo(Checkpoint* c, mt::v1::CheckpointState to) {
  MT_RETURN_IF_ERROR(CheckCheckpointTransition(c->state(), to));
  c->set_state(to);
  return absl::OkStatus();
}

// The entry a committed manifest describes.
Checkpoint FromManifest(const mt::v1::CheckpointManifest& m, const std::string& dir,
                        absl::Time now) {
  Checkpoint c;
  c.set_job_id(m.job_id());
  c.set_step(m.step());
  c.set_consumed_samples(m.has_trainer() ? m.trainer().consumed_samples() : m.consumed_samples());
  c.set_loss(m.loss());
  c.set_validation_loss(m.validation_loss());
  *c.mutable_layout() = m.layout();
  c.set_directory(dir);
  int64_t size = 0;
  for (const auto& f : m.files()) {
    *c.add_files() = f;
    size += f.size_bytes();
  }
  c.set_size_bytes(size);
  c.set_state(mt::v1::CHECKPOINT_STATE_COMPLETE);
  if (m.has_create_time()) {
    *c.mutable_create_time() = m.create_time();
  } else {
    *c.mutable_create_time() = TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(now));
  }
  c.set_format_version(m.format_version());
  return c;
}

// The checkpoint's own check of its files: sizes and SHA-256 against the catalog (which
// copied them from the manifest at registration), and the manifest itself for mt ones.
std::vector<std::string> CheckFiles(const Checkpoint& c) {
  std::vector<std::string> problems;
  if (!PathExists(c.directory())) {
    problems.push_back(absl::StrCat(c.directory(), ": directory is missing"));
    return problems;
  }
  if (c.format_version() > 0) {
    auto manifest = checkpoint::ReadManifest(c.directory());
    if (!manifest.ok()) {
      problems.push_back(
          absl::StrCat(checkpoint::kManifestFile, ": ", manifest.status().message()));
    }
  }
  mt::v1::CheckpointManifest expected;
  for (const auto& f : c.files()) *expected.add_files() = f;
  for (std::string& p : checkpoint::VerifyCheckpointFiles(c.directory(), expected)) {
    problems.push_back(std::move(p));
  }
  return problems;
}

// OK when a save of `job` at `step` that has not committed may still commit: its job has not
// ended and `step` is past the save directory's `latest` (a running attempt saves only past
// the checkpoint it resumed from, which is at most `latest`). A report failing this is late:
// the job restarted, ended, or retention already removed that save. A save re-run below
// `latest` (an attempt that fell back to an older checkpoint) is registered at its commit.
absl::Status CheckSaveInFlight(const mt::v1::Job& job, const std::string& save_dir, int64_t step) {
  if (IsTerminal(job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat(job.id(), " has ended (", mt::v1::JobState_Name(job.state()),
                     "); its save at step ", step, " never committed and is not registered"));
  }
  absl::StatusOr<int64_t> latest = checkpoint::ReadLatest(save_dir);
  if (latest.ok() && step <= *latest) {
    return absl::FailedPreconditionError(absl::StrCat(
        "late report of ", job.id(), "'s save at step ", step, ": ", save_dir,
        " already holds a committed checkpoint at step ", *latest, "; not registered"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateAbsolutePath(const std::string& path, const std::string& field) {
  MT_RETURN_IF_ERROR(ValidatePath(path, field));
  if (path.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", absl::CHexEscape(path), "' is relative; give an absolute path"));
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat(field, ": '", absl::CHexEscape(path),
                                                     "' contains '..'; give the path without it"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CheckpointCatalog>> CheckpointCatalog::Create(Store* store,
                                                                             CheckpointJobs* jobs,
                                                                             const Clock* clock,
                                                                             AllowedRoots roots) {
  if (store == nullptr || jobs == nullptr || clock == nullptr) {
    return absl::InvalidArgumentError("CheckpointCatalog needs a store, jobs and a clock");
  }
  return std::unique_ptr<CheckpointCatalog>(
      new CheckpointCatalog(store, jobs, clock, std::move(roots)));
}

void CheckpointCatalog::Fill(Checkpoint* c,
                             const std::vector<CheckpointJobs::Active>& active) const {
  c->clear_loading_job_ids();
  if (c->state() == mt::v1::CHECKPOINT_STATE_DELETED) return;
  const std::string dir = Clean(c->directory());
  for (const auto& job : active) {
    if (job.load_dir.empty()) continue;
    const std::string load = Clean(job.load_dir);
    if (load == dir || (c->is_latest() && load == Parent(dir))) {
      c->add_loading_job_ids(job.job_id);
    }
  }
}

absl::StatusOr<Checkpoint> CheckpointCatalog::OnCheckpointReport(const mt::v1::RankReport& report) {
  const mt::v1::CheckpointReport& r = report.checkpoint();
  MT_ASSIGN_OR_RETURN(mt::v1::Job job, jobs_->GetJob(report.job_id()));
  const std::string save_dir = Clean(job.spec().checkpoint().save_dir());
  if (save_dir.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(job.id(), " has no checkpoint.save_dir but reported a save"));
  }
  MT_RETURN_IF_ERROR(ValidateAbsolutePath(r.directory(), "checkpoint.directory"));
  const std::string dir = Clean(r.directory());
  if (Parent(dir) != save_dir || checkpoint::ParseIterationDirName(Base(dir)) != r.step()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint.directory ", dir, " is not ", save_dir, "/",
        checkpoint::IterationDirName(r.step()), " (the job's save_dir and the reported step)"));
  }

  absl::MutexLock lock(&mu_);
  MT_ASSIGN_OR_RETURN(std::optional<Checkpoint> existing, store_->FindCheckpointByDirectory(dir));
  absl::StatusOr<mt::v1::CheckpointManifest> manifest = checkpoint::ReadManifest(dir);
  if (!manifest.ok()) {
    if (!absl::IsNotFound(manifest.status())) return manifest.status();
    if (existing.has_value()) return *existing;
    // A settled save gets no WRITING entry: nothing would ever complete it.
    MT_RETURN_IF_ERROR(CheckSaveInFlight(job, save_dir, r.step()));
    // Not committed yet: rank 0 commits once every rank has written its shard.
    return CreateWritingLocked(job, r, dir);
  }
  if (existing.has_value() && existing->state() != mt::v1::CHECKPOINT_STATE_WRITING &&
      existing->create_time().seconds() == manifest->create_time().seconds() &&
      existing->create_time().nanos() == manifest->create_time().nanos()) {
    return *existing;  // another rank's report of a save already registered
  }
  MT_ASSIGN_OR_RETURN(Checkpoint c, UpsertCommittedLocked(job, *manifest, dir, existing));
  MT_RETURN_IF_ERROR(RegisterMissedSavesLocked(job, save_dir, c.step()));
  MT_RETURN_IF_ERROR(RetireAbandonedWritingLocked(job.id(), save_dir, c.step()));
  MT_RETURN_IF_ERROR(RefreshLatestLocked(job.id(), save_dir));
  if (absl::Status s = ApplyRetentionLocked(job, save_dir); !s.ok()) {
    MT_LOG(WARNING) << "retention of " << job.id() << ": " << s.message();
  }
  return store_->GetCheckpoint(c.id());
}

absl::StatusOr<Checkpoint> CheckpointCatalog::CreateWritingLocked(const mt::v1::Job& job,
                                                                  const mt::v1::CheckpointReport& r,
                                                                  const std::string& dir) {
  Checkpoint c;
  c.set_job_id(job.id());
  c.set_step(r.step());
  c.set_directory(dir);
  c.set_size_bytes(r.size_bytes());
  c.set_loss(std::nan(""));
  c.set_validation_loss(std::nan(""));
  MT_RETURN_IF_ERROR(MoveTo(&c, mt::v1::CHECKPOINT_STATE_WRITING));
  *c.mutable_create_time() = TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(clock_->Now()));
  return store_->CreateCheckpoint(c);
}

absl::StatusOr<Checkpoint> CheckpointCatalog::UpsertCommittedLocked(
    const mt::v1::Job& job, const mt::v1::CheckpointManifest& m, const std::string& dir,
    const std::optional<Checkpoint>& known) {
  Checkpoint e = FromManifest(m, dir, clock_->Now());
  e.set_job_id(job.id());
  if (known.has_value()) {
    MT_RETURN_IF_ERROR(CheckCheckpointTransition(known->state(), e.state()));
    e.set_id(known->id());
    MT_RETURN_IF_ERROR(store_->UpdateCheckpoint(e));
  } else {
    MT_ASSIGN_OR_RETURN(e, store_->CreateCheckpoint(e));
  }
  MT_LOG(INFO) << "checkpoint " << e.id() << " of " << job.id() << " at step " << e.step()
               << " registered: " << dir << " (" << e.size_bytes() << " bytes)";
  return e;
}

absl::Status CheckpointCatalog::RegisterMissedSavesLocked(const mt::v1::Job& job,
                                                          const std::string& save_dir,
                                                          int64_t reported_step) {
  for (int64_t step : checkpoint::ListCheckpointSteps(save_dir)) {
    if (step == reported_step) continue;
    const std::string other = absl::StrCat(save_dir, "/", checkpoint::IterationDirName(step));
    MT_ASSIGN_OR_RETURN(std::optional<Checkpoint> known, store_->FindCheckpointByDirectory(other));
    if (known.has_value() && known->state() != mt::v1::CHECKPOINT_STATE_WRITING) continue;
    absl::StatusOr<mt::v1::CheckpointManifest> m = checkpoint::ReadManifest(other);
    if (!m.ok() || m->job_id() != job.id()) continue;
    MT_RETURN_IF_ERROR(UpsertCommittedLocked(job, *m, other, known).status());
  }
  return absl::OkStatus();
}

absl::Status CheckpointCatalog::RetireAbandonedWritingLocked(const std::string& job_id,
                                                             const std::string& save_dir,
                                                             int64_t committed_step) {
  MT_ASSIGN_OR_RETURN(std::vector<Checkpoint> all, store_->ListCheckpoints(job_id));
  for (Checkpoint& other : all) {
    if (other.state() == mt::v1::CHECKPOINT_STATE_WRITING && other.step() < committed_step &&
        Parent(other.directory()) == save_dir &&
        !PathExists(other.directory() + "/" + checkpoint::kManifestFile)) {
      MT_RETURN_IF_ERROR(MoveTo(&other, mt::v1::CHECKPOINT_STATE_DELETED));
      MT_RETURN_IF_ERROR(store_->UpdateCheckpoint(other));
    }
  }
  return absl::OkStatus();
}

int CheckpointCatalog::ResolveStaleWriting() {
  std::vector<std::string> to_verify;
  int settled = 0;
  {
    absl::MutexLock lock(&mu_);
    // The WRITING entries only: this runs every ~10 s, and the catalog keeps every entry of
    // every job (DELETED ones too); reading it all made the coordinator's heap grow with it
    // (issue 19's chaos soak: +3.8 MiB for an idle coordinator over 1,453 entries).
    absl::StatusOr<std::vector<Checkpoint>> writing =
        store_->ListCheckpointsInState(mt::v1::CHECKPOINT_STATE_WRITING);
    if (!writing.ok()) {
      MT_LOG(WARNING) << "settling WRITING checkpoints: " << writing.status().message();
      return 0;
    }
    for (Checkpoint& c : *writing) {
      absl::StatusOr<mt::v1::Job> job = jobs_->GetJob(c.job_id());
      const std::string save_dir = Parent(Clean(c.directory()));
      if (job.ok() && CheckSaveInFlight(*job, save_dir, c.step()).ok()) continue;
      absl::StatusOr<bool> committed = SettleWritingLocked(&c);
      if (!committed.ok()) {
        MT_LOG(WARNING) << "settling " << c.id() << ": " << committed.status().message();
        continue;
      }
      ++settled;
      if (*committed) to_verify.push_back(c.id());
      if (job.ok()) (void)RefreshLatestLocked(job->id(), save_dir);
    }
  }
  // Hashing runs outside the lock (Verify takes it only to record the result).
  for (const std::string& id : to_verify) {
    if (absl::Status s = Verify(id).status(); !s.ok()) {
      MT_LOG(WARNING) << "verifying settled checkpoint " << id << ": " << s.message();
    }
  }
  return settled;
}

absl::StatusOr<bool> CheckpointCatalog::SettleWritingLocked(Checkpoint* c) {
  absl::StatusOr<mt::v1::CheckpointManifest> m = checkpoint::ReadManifest(c->directory());
  if (m.ok() && m->job_id() == c->job_id() && m->step() == c->step()) {
    Checkpoint e = FromManifest(*m, c->directory(), clock_->Now());
    e.set_id(c->id());
    MT_RETURN_IF_ERROR(CheckCheckpointTransition(c->state(), e.state()));
    MT_RETURN_IF_ERROR(store_->UpdateCheckpoint(e));
    MT_LOG(INFO) << "checkpoint " << c->id() << " of " << c->job_id() << " at step " << c->step()
                 << " was left WRITING; its manifest is committed: verifying its files";
    *c = std::move(e);
    return true;
  }
  // Never committed: the partial files go, unless the directory holds a committed checkpoint
  // that is not this entry's (another job's or another step's manifest).
  if (absl::IsNotFound(m.status()) && PathExists(c->directory())) {
    MT_RETURN_IF_ERROR(checkpoint::RemoveTree(c->directory()));
  }
  MT_RETURN_IF_ERROR(MoveTo(c, mt::v1::CHECKPOINT_STATE_DELETED));
  MT_RETURN_IF_ERROR(store_->UpdateCheckpoint(*c));
  MT_LOG(INFO) << "checkpoint " << c->id() << " of " << c->job_id() << " at step " << c->step()
               << " was left WRITING and never committed: removed";
  return false;
}

absl::Status CheckpointCatalog::RefreshLatestLocked(const std::string& job_id,
                                                    const std::string& save_dir) {
  absl::StatusOr<int64_t> latest = checkpoint::ReadLatest(save_dir);
  const int64_t latest_step = latest.ok() ? *latest : -1;
  MT_ASSIGN_OR_RETURN(std::vector<Checkpoint> all, store_->ListCheckpoints(job_id));
  for (Checkpoint& c : all) {
    if (Parent(c.directory()) != save_dir) continue;
    const bool want = c.step() == latest_step && c.state() != mt::v1::CHECKPOINT_STATE_DELETED &&
                      c.state() != mt::v1::CHECKPOINT_STATE_WRITING;
    if (c.is_latest() != want) {
      c.set_is_latest(want);
      MT_RETURN_IF_ERROR(store_->UpdateCheckpoint(c));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckpointCatalog::RemoveLocked(Checkpoint* c, const std::string& why) {
  // The directory came from the catalog, but it is about to be removed recursively: check it
  // once more.
  MT_RETURN_IF_ERROR(ValidateAbsolutePath(c->directory(), "directory"));
  if (Clean(c->directory()) == "/") {
    return absl::InternalError("refusing to remove /");
  }
  if (c->imported()) {
    std::vector<std::string> names = {checkpoint::kManifestFile};
    for (const auto& f : c->files()) names.push_back(f.path());
    for (const std::string& name : names) {
      MT_RETURN_IF_ERROR(ValidateRelativePath(name, "files.path"));
      const std::string path = absl::StrCat(c->directory(), "/", name);
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        return ErrnoStatus("removing", path, errno);
      }
    }
    if (::rmdir(c->directory().c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY &&
        errno != EEXIST) {
      return ErrnoStatus("removing", c->directory(), errno);
    }
  } else if (PathExists(c->directory())) {
    MT_RETURN_IF_ERROR(checkpoint::RemoveTree(c->directory()));
  }
  const bool was_latest = c->is_latest();
  MT_RETURN_IF_ERROR(MoveTo(c, mt::v1::CHECKPOINT_STATE_DELETED));
  c->set_is_latest(false);
  c->clear_loading_job_ids();
  MT_RETURN_IF_ERROR(store_->UpdateCheckpoint(*c));
  MT_LOG(INFO) << "checkpoint " << c->id() << " (" << c->directory() << ") deleted: " << why;
  if (!was_latest) return absl::OkStatus();

  // `latest` must name a checkpoint that exists: the newest usable one left, or none.
  const std::string save_dir = Parent(Clean(c->directory()));
  MT_ASSIGN_OR_RETURN(std::vector<Checkpoint> all, store_->ListCheckpoints(c->job_id()));
  int64_t newest = -1;
  for (const Checkpoint& other : all) {
    if (Parent(other.directory()) == save_dir && Usable(other.state()) && other.step() > newest) {
      newest = other.step();
    }
  }
  if (newest >= 0) {
    MT_RETURN_IF_ERROR(checkpoint::WriteLatest(save_dir, newest));
  } else {
    const std::string pointer = absl::StrCat(save_dir, "/", checkpoint::kLatestFile);
    if (::unlink(pointer.c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus("removing", pointer, errno);
    }
  }
  return RefreshLatestLocked(c->job_id(), save_dir);
}

absl::Status CheckpointCatalog::ApplyRetentionLocked(const mt::v1::Job& job,
                                                     const std::string& save_dir) {
  const mt::v1::RetentionPolicy& policy = job.spec().checkpoint().retention();
  if (policy.keep_last() <= 0) return absl::OkStatus();
  MT_ASSIGN_OR_RETURN(std::vector<Checkpoint> all, store_->ListCheckpoints(job.id()));
  const std::vector<CheckpointJobs::Active> active = jobs_->ActiveJobs();
  std::vector<RetentionCandidate> candidates;
  std::vector<Checkpoint*> entries;
  for (Checkpoint& c : all) {
    if (Parent(c.directory()) != save_dir) continue;
    if (c.state() == mt::v1::CHECKPOINT_STATE_DELETED ||
        c.state() == mt::v1::CHECKPOINT_STATE_WRITING) {
      continue;
    }
    Fill(&c, active);
    RetentionCandidate rc;
    rc.id = c.id();
    rc.step = c.step();
    rc.validation_loss = c.validation_loss();
    rc.is_latest = c.is_latest();
    rc.in_use = c.loading_job_ids_size() > 0;
    candidates.push_back(rc);
    entries.push_back(&c);
  }
  const std::vector<std::string> doomed = SelectForDeletion(candidates, policy);
  for (Checkpoint* c : entries) {
    if (std::find(doomed.begin(), doomed.end(), c->id()) == doomed.end()) continue;
    MT_RETURN_IF_ERROR(RemoveLocked(
        c,
        absl::StrCat("retention (keep_last ", policy.keep_last(), ", keep_best ",
                     policy.keep_best(), ", keep_every_steps ", policy.keep_every_steps(), ")")));
  }
  return absl::OkStatus();
}

absl::StatusOr<mt::v1::ListCheckpointsResponse> CheckpointCatalog::List(
    const mt::v1::ListCheckpointsRequest& request) {
  if (!request.job_id().empty()) MT_RETURN_IF_ERROR(ParseJobId(request.job_id()).status());
  if (request.page_size() < 0 || request.page_size() > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size must be 0..1000 (0 = 100), got ", request.page_size()));
  }
  const int size = request.page_size() == 0 ? 100 : request.page_size();
  int64_t offset = 0;
  if (!request.page_token().empty() &&
      (!absl::SimpleAtoi(request.page_token(), &offset) || offset < 0)) {
    return absl::InvalidArgumentError("page_token is not one this server issued");
  }
  MT_ASSIGN_OR_RETURN(std::vector<Checkpoint> all, store_->ListCheckpoints(request.job_id()));
  std::vector<Checkpoint> matching;
  for (Checkpoint& c : all) {
    if (request.states_size() > 0 && std::find(request.states().begin(), request.states().end(),
                                               c.state()) == request.states().end()) {
      continue;
    }
    matching.push_back(std::move(c));
  }
  const std::vector<CheckpointJobs::Active> active = jobs_->ActiveJobs();
  mt::v1::ListCheckpointsResponse response;
  for (int64_t i = offset; i < static_cast<int64_t>(matching.size()) && i < offset + size; ++i) {
    Checkpoint* c = response.add_checkpoints();
    *c = std::move(matching[i]);
    Fill(c, active);
  }
  if (offset + size < static_cast<int64_t>(matching.size())) {
    response.set_next_page_token(std::to_string(offset + size));
  }
  response.set_total_count(static_cast<int64_t>(matching.size()));
  return response;
}

absl::StatusOr<Checkpoint> CheckpointCatalog::Get(const std::string& checkpoint_id) {
  MT_ASSIGN_OR_RETURN(Checkpoint c, store_->GetCheckpoint(checkpoint_id));
  Fill(&c, jobs_->ActiveJobs());
  return c;
}

absl::StatusOr<Checkpoint> CheckpointCatalog::Delete(const std::string& checkpoint_id) {
  MT_RETURN_IF_ERROR(ParseCheckpointId(checkpoint_id).status());
  absl::MutexLock lock(&mu_);
  MT_ASSIGN_OR_RETURN(Checkpoint c, store_->GetCheckpoint(checkpoint_id));
  if (c.state() == mt::v1::CHECKPOINT_STATE_DELETED) return c;
  const std::vector<CheckpointJobs::Active> active = jobs_->ActiveJobs();
  Fill(&c, active);
  if (c.loading_job_ids_size() > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        checkpoint_id, " is being loaded by ", absl::StrJoin(c.loading_job_ids(), ", "),
        "; delete it after that job ends (or cancel it)"));
  }
  if (c.state() == mt::v1::CHECKPOINT_STATE_WRITING) {
    // Only a live job can still commit it; once the job ended, the save is dead.
    for (const auto& job : active) {
      if (job.job_id == c.job_id()) {
        return absl::FailedPreconditionError(
            absl::StrCat(checkpoint_id, " is still being written by ", c.job_id(),
                         "; once that job ends, a save it never committed can be deleted"));
      }
    }
  }
  if (c.is_latest()) {
    for (const auto& job : active) {
      if (job.job_id == c.job_id()) {
        return absl::FailedPreconditionError(absl::StrCat(
            checkpoint_id, " is the latest checkpoint of ", c.job_id(), ", which is still ",
            absl::AsciiStrToLower(mt::v1::JobState_Name(job.state).substr(10)),
            ": a restart would resume from it; delete it after the job ends"));
      }
    }
  }
  MT_RETURN_IF_ERROR(RemoveLocked(&c, "deleted by a client"));
  return c;
}

absl::StatusOr<mt::v1::VerifyCheckpointResponse> CheckpointCatalog::Verify(
    const std::string& checkpoint_id) {
  MT_ASSIGN_OR_RETURN(Checkpoint c, store_->GetCheckpoint(checkpoint_id));
  if (c.state() == mt::v1::CHECKPOINT_STATE_DELETED ||
      c.state() == mt::v1::CHECKPOINT_STATE_WRITING) {
    return absl::FailedPreconditionError(
        absl::StrCat(checkpoint_id, " is ", Short(c.state()), "; there is nothing to verify"));
  }
  // Hash without the lock: files can be large.
  const std::vector<std::string> problems = CheckFiles(c);
  mt::v1::VerifyCheckpointResponse response;
  {
    absl::MutexLock lock(&mu_);
    MT_ASSIGN_OR_RETURN(c, store_->GetCheckpoint(checkpoint_id));
    if (c.state() != mt::v1::CHECKPOINT_STATE_DELETED) {
      MT_RETURN_IF_ERROR(MoveTo(&c, problems.empty() ? mt::v1::CHECKPOINT_STATE_VERIFIED
                                                     : mt::v1::CHECKPOINT_STATE_CORRUPT));
      MT_RETURN_IF_ERROR(store_->UpdateCheckpoint(c));
    }
  }
  if (!problems.empty()) {
    MT_LOG(WARNING) << "checkpoint " << checkpoint_id
                    << " is corrupt: " << absl::StrJoin(problems, "; ");
  }
  Fill(&c, jobs_->ActiveJobs());
  *response.mutable_checkpoint() = c;
  response.set_ok(problems.empty());
  for (const std::string& p : problems) response.add_problems(p);
  return response;
}

namespace {

// What a download sends: manifest.json first where the checkpoint has one (so that the copy is
// a directory --load accepts), then the catalog's files.
absl::StatusOr<std::vector<mt::v1::CheckpointFile>> DownloadFiles(const Checkpoint& c) {
  std::vector<mt::v1::CheckpointFile> files;
  if (c.format_version() > 0) {
    const std::string path = absl::StrCat(c.directory(), "/", checkpoint::kManifestFile);
    MT_ASSIGN_OR_RETURN(checkpoint::FileDigest digest, checkpoint::DigestFile(path));
    mt::v1::CheckpointFile& f = files.emplace_back();
    f.set_path(checkpoint::kManifestFile);
    f.set_size_bytes(digest.size);
    f.set_sha256(digest.sha256);
  }
  for (const auto& f : c.files()) files.push_back(f);
  return files;
}

// Opens `relative` in the checkpoint directory `dir` for reading: only a regular file that
// resolves inside it, so that a symbolic link placed in a checkpoint cannot stream some other
// file of the coordinator's machine (O_NOFOLLOW: nor one swapped in after the check).
absl::StatusOr<int> OpenInside(const std::string& dir, const std::string& relative) {
  MT_RETURN_IF_ERROR(ValidateRelativePath(relative, "files.path"));
  MT_RETURN_IF_ERROR(CheckStaysInside(dir, relative, "files.path"));
  const std::string path = absl::StrCat(dir, "/", relative);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus("opening", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file; not sent"));
  }
  return fd;
}

// Sends the file open on `fd` as chunks of buffer->size() bytes, the first carrying `f` (an
// empty file is one empty chunk); returns the bytes sent.
absl::StatusOr<int64_t> StreamFile(
    int fd, const mt::v1::CheckpointFile& f, const std::string& path, std::string* buffer,
    const std::function<bool(const mt::v1::DownloadCheckpointChunk&)>& write) {
  int64_t offset = 0;
  for (bool first = true;; first = false) {
    ssize_t n;
    do {
      n = ::read(fd, buffer->data(), buffer->size());
    } while (n < 0 && errno == EINTR);
    if (n < 0) return ErrnoStatus("reading", path, errno);
    if (n == 0 && !first) break;
    mt::v1::DownloadCheckpointChunk out;
    if (first) *out.mutable_file() = f;
    out.set_offset(offset);
    out.set_data(buffer->data(), static_cast<size_t>(n));
    if (!write(out)) return absl::CancelledError("the client stopped reading the download");
    offset += n;
    if (n == 0) break;  // an empty file: its one chunk is sent
  }
  return offset;
}

}  // namespace

absl::Status CheckpointCatalog::Download(
    const mt::v1::DownloadCheckpointRequest& request,
    const std::function<bool(const mt::v1::DownloadCheckpointChunk&)>& write) {
  const int chunk = request.chunk_bytes() == 0 ? kDefaultChunk : request.chunk_bytes();
  if (chunk < kMinChunk || chunk > kMaxChunk) {
    return absl::InvalidArgumentError(absl::StrCat("chunk_bytes must be ", kMinChunk, "..",
                                                   kMaxChunk, " (0 = 1 MiB), got ",
                                                   request.chunk_bytes()));
  }
  MT_ASSIGN_OR_RETURN(Checkpoint c, store_->GetCheckpoint(request.checkpoint_id()));
  if (c.state() == mt::v1::CHECKPOINT_STATE_DELETED ||
      c.state() == mt::v1::CHECKPOINT_STATE_WRITING) {
    return absl::FailedPreconditionError(absl::StrCat(
        request.checkpoint_id(), " is ", Short(c.state()), "; only written checkpoints download"));
  }
  MT_ASSIGN_OR_RETURN(const std::vector<mt::v1::CheckpointFile> files, DownloadFiles(c));
  std::string buffer(static_cast<size_t>(chunk), '\0');
  for (const mt::v1::CheckpointFile& f : files) {
    MT_ASSIGN_OR_RETURN(const int fd, OpenInside(c.directory(), f.path()));
    const std::string path = absl::StrCat(c.directory(), "/", f.path());
    absl::StatusOr<int64_t> sent = StreamFile(fd, f, path, &buffer, write);
    ::close(fd);
    MT_RETURN_IF_ERROR(sent.status());
    if (*sent != f.size_bytes()) {
      return absl::DataLossError(absl::StrCat(path, " has ", *sent, " bytes, the catalog says ",
                                              f.size_bytes(), "; verify ", c.id()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<mt::v1::ExportCheckpointResponse> CheckpointCatalog::Export(
    const mt::v1::ExportCheckpointRequest& request) {
  MT_RETURN_IF_ERROR(ParseCheckpointId(request.checkpoint_id()).status());
  if (request.format() != mt::v1::EXPORT_FORMAT_UNSPECIFIED &&
      request.format() != mt::v1::EXPORT_FORMAT_HF) {
    return absl::InvalidArgumentError(
        absl::StrCat("format ", static_cast<int>(request.format()), " is not known; use HF"));
  }
  MT_RETURN_IF_ERROR(ValidateAbsolutePath(request.output_dir(), "output_dir"));
  MT_RETURN_IF_ERROR(roots_.Check(request.output_dir(), "output_dir"));
  checkpoint::DType dtype = checkpoint::DType::kF32;
  if (request.dtype() == "float16") {
    dtype = checkpoint::DType::kF16;
  } else if (request.dtype() == "bfloat16") {
    dtype = checkpoint::DType::kBF16;
  } else if (!request.dtype().empty() && request.dtype() != "float32") {
    return absl::InvalidArgumentError(absl::StrCat("dtype '", absl::CHexEscape(request.dtype()),
                                                   "': choose float32, float16 or bfloat16"));
  }
  const std::string out = Clean(request.output_dir());
  if (PathExists(out)) {
    return absl::AlreadyExistsError(
        absl::StrCat("output_dir ", out, " exists; give a new directory"));
  }
  if (!PathExists(Parent(out))) {
    return absl::FailedPreconditionError(
        absl::StrCat("output_dir: the parent directory ", Parent(out), " does not exist"));
  }
  MT_ASSIGN_OR_RETURN(Checkpoint c, store_->GetCheckpoint(request.checkpoint_id()));
  if (!Usable(c.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat(request.checkpoint_id(), " is ", Short(c.state()),
                     "; only COMPLETE or VERIFIED checkpoints export"));
  }
  MT_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::TensorSource> source,
                      checkpoint::OpenAnySource(c.directory()));
  // The export copies the job's tokenizer files: they must lie where this coordinator may read.
  const mt::v1::TokenizerSpec& tokenizer = source->manifest().spec().data().tokenizer();
  if (PathExists(tokenizer.vocab_file())) {
    MT_RETURN_IF_ERROR(roots_.Check(tokenizer.vocab_file(), "data.tokenizer.vocab_file"));
  }
  if (PathExists(tokenizer.merge_file())) {
    MT_RETURN_IF_ERROR(roots_.Check(tokenizer.merge_file(), "data.tokenizer.merge_file"));
  }
  MT_ASSIGN_OR_RETURN(std::vector<mt::v1::CheckpointFile> files,
                      checkpoint::ExportHfGpt2(*source, out, dtype));
  mt::v1::ExportCheckpointResponse response;
  response.set_output_dir(out);
  for (auto& f : files) *response.add_files() = std::move(f);
  MT_LOG(INFO) << "checkpoint " << c.id() << " exported to " << out;
  return response;
}

absl::StatusOr<Checkpoint> CheckpointCatalog::Import(
    const mt::v1::ImportCheckpointRequest& request) {
  MT_RETURN_IF_ERROR(ValidateAbsolutePath(request.directory(), "directory"));
  MT_RETURN_IF_ERROR(roots_.Check(request.directory(), "directory"));
  if (!request.job_id().empty()) MT_RETURN_IF_ERROR(jobs_->GetJob(request.job_id()).status());
  const std::string dir = Clean(request.directory());
  if (!IsDirectory(dir)) {
    return absl::NotFoundError(absl::StrCat("directory ", dir, " does not exist"));
  }
  Checkpoint c;
  if (PathExists(absl::StrCat(dir, "/", checkpoint::kManifestFile))) {
    MT_RETURN_IF_ERROR(CheckStaysInside(dir, checkpoint::kManifestFile, "directory"));
    MT_ASSIGN_OR_RETURN(mt::v1::CheckpointManifest manifest, checkpoint::ReadManifest(dir));
    // The files first (no link out of the directory), then their hashes, then the tensors
    // the manifest describes against the shards' own headers.
    std::vector<std::string> problems = checkpoint::CheckManifestFilesInside(dir, manifest);
    if (problems.empty()) problems = checkpoint::VerifyCheckpointFiles(dir, manifest);
    if (problems.empty()) problems = checkpoint::CheckManifestTensors(dir, manifest);
    if (!problems.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, " does not verify: ", absl::StrJoin(problems, "; ")));
    }
    c = FromManifest(manifest, dir, clock_->Now());
  } else if (checkpoint::LooksLikeHfGpt2(dir)) {
    // Opening checks every tensor's name and shape.
    MT_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::TensorSource> source,
                        checkpoint::OpenHfGpt2Source(dir));
    *c.mutable_layout() = source->manifest().layout();
    c.set_directory(dir);
    c.set_loss(std::nan(""));
    c.set_validation_loss(std::nan(""));
    int64_t size = 0;
    for (const char* name : {"config.json", "model.safetensors"}) {
      MT_ASSIGN_OR_RETURN(checkpoint::FileDigest d,
                          checkpoint::DigestFile(absl::StrCat(dir, "/", name)));
      mt::v1::CheckpointFile* f = c.add_files();
      f->set_path(name);
      f->set_size_bytes(d.size);
      f->set_sha256(d.sha256);
      size += d.size;
    }
    c.set_size_bytes(size);
    c.set_format_version(0);
    *c.mutable_create_time() = TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(clock_->Now()));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "directory ", dir,
        " holds neither manifest.json (an mt checkpoint) nor config.json + model.safetensors "
        "(Hugging Face GPT-2)"));
  }
  c.set_job_id(request.job_id());
  c.set_imported(true);
  c.set_state(mt::v1::CHECKPOINT_STATE_UNSPECIFIED);
  MT_RETURN_IF_ERROR(MoveTo(&c, mt::v1::CHECKPOINT_STATE_VERIFIED));
  c.set_is_latest(false);

  absl::MutexLock lock(&mu_);
  MT_ASSIGN_OR_RETURN(std::optional<Checkpoint> existing, store_->FindCheckpointByDirectory(dir));
  if (existing.has_value()) {
    return absl::AlreadyExistsError(
        absl::StrCat(dir, " is already in the catalog as ", existing->id()));
  }
  MT_ASSIGN_OR_RETURN(c, store_->CreateCheckpoint(c));
  MT_LOG(INFO) << "checkpoint " << c.id() << " imported from " << dir;
  return c;
}

}  // namespace mt::coordinator
