#include "worker/checkpoint/store_exchange.h"

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace mt::checkpoint {
namespace {

// c10d reports failures (a lost connection, a timeout) as exceptions.
absl::Status StoreError(absl::string_view what, const std::exception& e) {
  return absl::UnavailableError(absl::StrCat(what, " through the job's store: ", e.what()));
}

}  // namespace

std::string StoreExchange::Key(int64_t step, int rank) {
  return absl::StrCat("mt/save/", step, "/", rank);
}

absl::Status StoreExchange::Publish(int64_t step, int rank, const std::string& result) {
  try {
    store_->set(Key(step, rank), std::vector<uint8_t>(result.begin(), result.end()));
  } catch (const std::exception& e) {
    return StoreError(absl::StrCat("publishing rank ", rank, "'s result of save ", step), e);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> StoreExchange::Gather(int64_t step, int world_size,
                                                               absl::Duration timeout) {
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(Key(step, r));
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Milliseconds(2);
  try {
    while (!store_->check(keys)) {
      if (absl::Now() >= deadline) {
        std::vector<int> missing;
        for (int r = 0; r < world_size; ++r) {
          if (!store_->check({keys[r]})) missing.push_back(r);
        }
        return absl::DeadlineExceededError(absl::StrCat("ranks ", absl::StrJoin(missing, ", "),
                                                        " did not report save ", step, " within ",
                                                        absl::FormatDuration(timeout)));
      }
      absl::SleepFor(std::min(pause, deadline - absl::Now()));
      pause = std::min(pause * 2, absl::Milliseconds(100));
    }
    std::vector<std::string> out;
    for (const std::string& key : keys) {
      const std::vector<uint8_t> value = store_->get(key);
      out.emplace_back(value.begin(), value.end());
      store_->deleteKey(key);
    }
    return out;
  } catch (const std::exception& e) {
    return StoreError(absl::StrCat("gathering save ", step), e);
  }
}

}  // namespace mt::checkpoint
