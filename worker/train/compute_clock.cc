#include "worker/train/compute_clock.h"

#include <algorithm>

namespace mt::train {

void ComputeClock::OnActivity(engine::Activity activity, TimePoint now) {
  if (computing_) seconds_ += std::chrono::duration<double>(now - since_).count();
  computing_ = activity == engine::Activity::kForward || activity == engine::Activity::kBackward;
  since_ = now;
}

double ComputeClock::Take(double blocking_comm_seconds, TimePoint now) {
  if (computing_) {
    seconds_ += std::chrono::duration<double>(now - since_).count();
    since_ = now;
  }
  const double compute = std::max(0.0, seconds_ - std::max(0.0, blocking_comm_seconds));
  seconds_ = 0;
  return compute;
}

bool ComputeClock::BlocksThePasses(const std::string& group) {
  return group == "tp" || group == "pp" || group == "embedding";
}

}  // namespace mt::train
