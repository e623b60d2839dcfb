#include "coordinator/checkpoints/retention.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace mt::coordinator {

std::vector<std::string> SelectForDeletion(const std::vector<RetentionCandidate>& candidates,
                                           const mt::v1::RetentionPolicy& policy) {
  if (policy.keep_last() <= 0) return {};
  std::set<size_t> keep;
  std::vector<size_t> order(candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;

  // Newest first.
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return candidates[a].step > candidates[b].step; });
  for (size_t i = 0; i < order.size() && i < static_cast<size_t>(policy.keep_last()); ++i) {
    keep.insert(order[i]);
  }

  if (policy.keep_best() > 0) {
    std::vector<size_t> scored;
    for (size_t i : order) {
      if (!std::isnan(candidates[i].validation_loss)) scored.push_back(i);
    }
    // Stable over newest-first order: equal losses keep the newer step.
    std::stable_sort(scored.begin(), scored.end(), [&](size_t a, size_t b) {
      return candidates[a].validation_loss < candidates[b].validation_loss;
    });
    for (size_t i = 0; i < scored.size() && i < static_cast<size_t>(policy.keep_best()); ++i) {
      keep.insert(scored[i]);
    }
  }

  std::vector<std::string> out;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const RetentionCandidate& c = candidates[i];
    const bool every = policy.keep_every_steps() > 0 && c.step % policy.keep_every_steps() == 0;
    if (keep.count(i) > 0 || every || c.is_latest || c.in_use) continue;
    out.push_back(c.id);
  }
  return out;
}

}  // namespace mt::coordinator
