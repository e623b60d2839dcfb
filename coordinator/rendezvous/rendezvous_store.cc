#include "coordinator/rendezvous/rendezvous_store.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"

namespace mt::coordinator {

absl::Status RendezvousStore::CheckKey(const std::string& key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("key must be 1..", kMaxKeyBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::CheckValue(const std::string& value) {
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value must be at most ", kMaxValueBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::CheckKeys(const std::vector<std::string>& keys) {
  if (keys.empty() || keys.size() > kMaxKeysPerGet) {
    return absl::InvalidArgumentError(absl::StrCat("keys: give 1..", kMaxKeysPerGet, " keys"));
  }
  return absl::OkStatus();
}

std::string RendezvousStore::SpaceKey(const std::string& job_id, int attempt) {
  return absl::StrCat(job_id, "/", attempt);
}

absl::Status RendezvousStore::Set(const std::string& job_id, int attempt, const std::string& key,
                                  const std::string& value) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (absl::Status s = CheckValue(value); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  Space& space = spaces_[SpaceKey(job_id, attempt)];
  if (space.size() >= kMaxKeysPerSpace && !space.contains(key)) {
    return absl::ResourceExhaustedError("too many rendezvous keys for one job");
  }
  if (store_ != nullptr) {
    if (absl::Status s = store_->PutRendezvousKey(job_id, attempt, key, value); !s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("keeping rendezvous key ", key, ": ", s.message()));
    }
  }
  space[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RendezvousStore::Get(const std::string& job_id,
                                                              int attempt,
                                                              const std::vector<std::string>& keys,
                                                              absl::Duration timeout) {
  if (absl::Status s = CheckKeys(keys); !s.ok()) return s;
  const std::string space_key = SpaceKey(job_id, attempt);
  absl::MutexLock lock(&mu_);
  auto all_there = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (shutdown_) return true;
    auto it = spaces_.find(space_key);
    if (it == spaces_.end()) return false;
    for (const auto& k : keys) {
      if (!it->second.contains(k)) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all_there), timeout) || shutdown_) {
    std::vector<std::string> missing;
    auto it = spaces_.find(space_key);
    for (const auto& k : keys) {
      if (it == spaces_.end() || !it->second.contains(k)) missing.push_back(k);
    }
    return absl::DeadlineExceededError(absl::StrCat("rendezvous keys missing after ",
                                                    absl::FormatDuration(timeout), ": ",
                                                    absl::StrJoin(missing, ", ")));
  }
  std::vector<std::string> values;
  values.reserve(keys.size());
  const Space& space = spaces_.at(space_key);
  for (const auto& k : keys) values.push_back(space.at(k));
  return values;
}

absl::StatusOr<int64_t> RendezvousStore::Add(const std::string& job_id, int attempt,
                                             const std::string& key, int64_t delta) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  Space& space = spaces_[SpaceKey(job_id, attempt)];
  auto it = space.find(key);
  int64_t current = 0;
  if (it != space.end() && !it->second.empty() && !absl::SimpleAtoi(it->second, &current)) {
    return absl::FailedPreconditionError(absl::StrCat("key ", key, " does not hold an integer"));
  }
  if (it == space.end() && space.size() >= kMaxKeysPerSpace) {
    return absl::ResourceExhaustedError("too many rendezvous keys for one job");
  }
  current += delta;
  const std::string value = std::to_string(current);
  if (store_ != nullptr) {
    if (absl::Status s = store_->PutRendezvousKey(job_id, attempt, key, value); !s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("keeping rendezvous key ", key, ": ", s.message()));
    }
  }
  space[key] = value;
  return current;
}

void RendezvousStore::Drop(const std::string& job_id, int attempt) {
  absl::MutexLock lock(&mu_);
  spaces_.erase(SpaceKey(job_id, attempt));
  if (store_ != nullptr) {
    if (absl::Status s = store_->DropRendezvousSpace(job_id, attempt); !s.ok()) {
      MT_LOG(WARNING) << "removing the rendezvous keys of " << job_id << " attempt " << attempt
                      << ": " << s.message();
    }
  }
}

void RendezvousStore::Persist(Store* store) {
  absl::MutexLock lock(&mu_);
  store_ = store;
}

void RendezvousStore::Restore(const Store::RendezvousKey& kept) {
  absl::MutexLock lock(&mu_);
  spaces_[SpaceKey(kept.job_id, kept.attempt)][kept.key] = kept.value;
}

void RendezvousStore::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

}  // namespace mt::coordinator
