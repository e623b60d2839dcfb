#include "coordinator/jobs/straggler_tracker.h"

#include <algorithm>
#include <cmath>

namespace mt::coordinator {

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t n = values.size();
  std::nth_element(values.begin(), values.begin() + n / 2, values.end());
  const double upper = values[n / 2];
  if (n % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + n / 2);
  return (lower + upper) / 2;
}

StragglerTracker::StragglerTracker(int world_size, double threshold, int window)
    : threshold_(threshold),
      window_(std::max(window, 1)),
      times_(static_cast<size_t>(std::max(world_size, 0))),
      straggling_(times_.size(), false) {}

void StragglerTracker::Add(int rank, const std::vector<double>& seconds) {
  if (rank < 0 || rank >= static_cast<int>(times_.size())) return;
  std::deque<double>& t = times_[rank];
  for (double s : seconds) {
    if (!std::isfinite(s) || s < 0) continue;
    t.push_back(s);
    if (static_cast<int>(t.size()) > window_) t.pop_front();
  }
}

std::optional<double> StragglerTracker::OthersMedian(int rank) const {
  std::vector<double> medians;
  for (int r = 0; r < static_cast<int>(times_.size()); ++r) {
    const std::deque<double>& t = times_[r];
    if (r != rank && static_cast<int>(t.size()) == window_) {
      medians.push_back(Median({t.begin(), t.end()}));
    }
  }
  if (medians.empty()) return std::nullopt;
  return Median(std::move(medians));
}

std::optional<double> StragglerTracker::Ratio(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(times_.size())) return std::nullopt;
  const std::deque<double>& t = times_[rank];
  if (static_cast<int>(t.size()) < window_) return std::nullopt;
  const std::optional<double> others = OthersMedian(rank);
  if (!others.has_value()) return std::nullopt;
  const double mine = Median({t.begin(), t.end()});
  if (*others <= 0) return mine <= 0 ? 1.0 : std::optional<double>();
  return mine / *others;
}

std::vector<StragglerTracker::Change> StragglerTracker::Update() {
  std::vector<Change> changes;
  for (int r = 0; r < static_cast<int>(times_.size()); ++r) {
    const std::optional<double> ratio = Ratio(r);
    const bool now = ratio.has_value() && *ratio > threshold_;
    if (now != straggling_[r]) {
      straggling_[r] = now;
      changes.push_back({r, now, ratio.value_or(0)});
    }
  }
  return changes;
}

}  // namespace mt::coordinator
