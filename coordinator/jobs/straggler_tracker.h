// Straggler detection for one attempt of one job: pure.
//
// In synchronous data parallelism every rank's step takes as long as the slowest rank's, so
// the tracker compares compute times: each step's time less its collectives and data wait
// (reported by the ranks' beacons, worker/report/progress_beacon.h). For each rank it keeps
// the last `window` compute times; a rank's ratio is the median of its window over the median
// of the other ranks' medians (ranks with a full window only; at least one other). Leaving the
// rank out is what makes the ratio its slowdown: with two ranks, a median that included the
// straggler was the mean of both, so a rank 5x as slow read 2 x 5 / 6 = 1.67 and no ratio
// could pass 2 (issue 19). A rank is a straggler
// while its ratio exceeds `threshold` (restart.straggler_threshold) with a full window: the
// window makes it persistent, not one slow step.
//
// Thread-compatible: the job manager calls it under its lock.
#ifndef MT_COORDINATOR_JOBS_STRAGGLER_TRACKER_H_
#define MT_COORDINATOR_JOBS_STRAGGLER_TRACKER_H_

#include <deque>
#include <optional>
#include <vector>

namespace mt::coordinator {

// The median of `values` (the mean of the middle two for an even count); 0 when empty.
double Median(std::vector<double> values);

class StragglerTracker {
 public:
  StragglerTracker(int world_size, double threshold, int window);

  // More compute times of `rank`'s steps, oldest first (ignored when out of range; negative
  // and non-finite values are dropped).
  void Add(int rank, const std::vector<double>& seconds);
  // The rank's ratio to the other ranks' median; nullopt until it and one other rank have a
  // full window.
  std::optional<double> Ratio(int rank) const;

  // A rank that started or stopped being a straggler.
  struct Change {
    int rank = 0;
    bool straggling = false;
    double ratio = 0;
  };
  // The changes since the previous call.
  std::vector<Change> Update();

  double threshold() const { return threshold_; }
  int window() const { return window_; }

 private:
  // The median of the full windows' medians of every rank but `rank`; nullopt when no other
  // rank has a full window.
  std::optional<double> OthersMedian(int rank) const;

  const double threshold_;
  const int window_;
  std::vector<std::deque<double>> times_;
  std::vector<bool> straggling_;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_JOBS_STRAGGLER_TRACKER_H_
