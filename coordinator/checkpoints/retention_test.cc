#include "coordinator/checkpoints/retention.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

using ::testing::ElementsAreArray;

const double kNaN = std::nan("");

struct Case {
  std::string name;
  int keep_last;
  int keep_best;
  int64_t keep_every;
  std::vector<RetentionCandidate> candidates;
  std::vector<std::string> deleted;
};

// Ten saves every 10 steps, c1 (step 10) .. c10 (step 100), the last one `latest`.
std::vector<RetentionCandidate> TenSaves(std::vector<double> losses = {}) {
  std::vector<RetentionCandidate> out;
  for (int i = 1; i <= 10; ++i) {
    RetentionCandidate c;
    c.id = "c" + std::to_string(i);
    c.step = 10 * i;
    c.validation_loss = losses.empty() ? kNaN : losses[i - 1];
    c.is_latest = i == 10;
    out.push_back(c);
  }
  return out;
}

std::vector<RetentionCandidate> With(std::vector<RetentionCandidate> v, int index, bool latest,
                                     bool in_use) {
  v[index].is_latest = latest;
  v[index].in_use = in_use;
  return v;
}

TEST(RetentionTest, Table) {
  const std::vector<double> losses = {5.0, 4.0, 2.5, 3.0, 2.0, 2.2, kNaN, 2.1, 2.4, 2.3};
  const std::vector<Case> cases = {
      {"off_keeps_all", 0, 0, 0, TenSaves(), {}},
      {"off_even_with_best_and_every", 0, 3, 20, TenSaves(losses), {}},
      {"keep_last_3", 3, 0, 0, TenSaves(), {"c1", "c2", "c3", "c4", "c5", "c6", "c7"}},
      {"keep_last_larger_than_count", 20, 0, 0, TenSaves(), {}},
      {"keep_last_1_latest_is_newest",
       1,
       0,
       0,
       TenSaves(),
       {"c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"}},
      // Best by validation loss: 2.0 (c5), 2.1 (c8), 2.2 (c6); NaN (c7) never counts.
      {"keep_last_2_best_3", 2, 3, 0, TenSaves(losses), {"c1", "c2", "c3", "c4", "c7"}},
      {"best_ignores_nan", 1, 9, 0, TenSaves(losses), {"c7"}},
      {"every_40_steps", 2, 0, 40, TenSaves(), {"c1", "c2", "c3", "c5", "c6", "c7"}},
      {"all_three", 1, 1, 50, TenSaves(losses), {"c1", "c2", "c3", "c4", "c6", "c7", "c8", "c9"}},
      // `latest` is not the newest step (a job resumed from an older one): still kept.
      {"latest_older_kept",
       2,
       0,
       0,
       With(With(TenSaves(), 9, false, false), 3, true, false),
       {"c1", "c2", "c3", "c5", "c6", "c7", "c8"}},
      {"in_use_kept",
       2,
       0,
       0,
       With(TenSaves(), 0, false, true),
       {"c2", "c3", "c4", "c5", "c6", "c7", "c8"}},
      {"empty", 3, 1, 10, {}, {}},
      // Equal losses: the newer step wins the single best slot.
      {"tie_goes_to_newer",
       1,
       1,
       0,
       {{"a", 10, 1.0, false, false}, {"b", 20, 1.0, false, false}, {"c", 30, 9.0, true, false}},
       {"a"}},
  };
  for (const Case& c : cases) {
    mt::v1::RetentionPolicy policy;
    policy.set_keep_last(c.keep_last);
    policy.set_keep_best(c.keep_best);
    policy.set_keep_every_steps(c.keep_every);
    EXPECT_THAT(SelectForDeletion(c.candidates, policy), ElementsAreArray(c.deleted)) << c.name;
  }
}

}  // namespace
}  // namespace mt::coordinator
