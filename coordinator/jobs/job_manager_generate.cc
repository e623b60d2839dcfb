// JobManager: the text of generation jobs on its way to their GenerateText streams.
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/jobs/job_state.h"

namespace mt::coordinator {

void JobManager::AppendGenerated(JobEntry* entry, const mt::v1::RankReport& report) {
  const mt::v1::Job& job = entry->job;
  // Only the rank of the job's current attempt, from the worker that holds it.
  if (!job.spec().inference().has_generate() || entry->generated_released ||
      report.attempt() != job.attempt() || report.rank() != 0 || entry->ranks.empty() ||
      entry->ranks[0].worker_id != report.worker_id()) {
    return;
  }
  const int64_t bytes = static_cast<int64_t>(report.generated().text().size());
  if (entry->generated_bytes + bytes > kMaxGeneratedBytes) {
    MT_LOG(WARNING) << job.id() << ": generated text beyond " << kMaxGeneratedBytes
                    << " bytes dropped";
    return;
  }
  entry->generated_bytes += bytes;
  entry->generated.push_back(report.generated());
}

absl::StatusOr<JobManager::GeneratedSince> JobManager::WaitForGenerated(const std::string& job_id,
                                                                        size_t cursor,
                                                                        absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  MT_ASSIGN_OR_RETURN(JobEntry * entry, Find(job_id));
  const int64_t id = entry->id;
  // Looked up again after every wait: the job may be deleted meanwhile.
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = jobs_.find(id);
    return shutdown_ || it == jobs_.end() || it->second->generated.size() > cursor ||
           IsTerminal(it->second->job.state());
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  MT_ASSIGN_OR_RETURN(entry, Find(job_id));
  GeneratedSince out;
  if (cursor < entry->generated.size()) {
    out.texts.assign(entry->generated.begin() + static_cast<std::ptrdiff_t>(cursor),
                     entry->generated.end());
  }
  out.state = entry->job.state();
  out.reason = entry->job.reason();
  return out;
}

void JobManager::ReleaseGenerated(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<JobEntry*> entry = Find(job_id);
  if (!entry.ok()) return;
  (*entry)->generated.clear();
  (*entry)->generated.shrink_to_fit();
  (*entry)->generated_bytes = 0;
  (*entry)->generated_released = true;
}

}  // namespace mt::coordinator
