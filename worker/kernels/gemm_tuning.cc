#include "worker/kernels/gemm_tuning.h"

#include <algorithm>
#include <atomic>

namespace mt::kernels {
namespace {

std::atomic<bool>& TuningOn() {
  static std::atomic<bool> on{true};
  return on;
}

std::atomic<int>& Candidates() {
  static std::atomic<int> candidates{kDefaultGemmTuneCandidates};
  return candidates;
}

std::atomic<bool>& WorkspaceOn() {
  static std::atomic<bool> on{false};
  return on;
}

}  // namespace

void SetGemmTuning(bool on) { TuningOn().store(on); }
bool GemmTuning() { return TuningOn().load(); }

void SetGemmTuneCandidates(int candidates) {
  Candidates().store(std::clamp(candidates, 1, kMaxGemmTuneCandidates));
}
int GemmTuneCandidates() { return Candidates().load(); }

void SetGemmWorkspace(bool on) { WorkspaceOn().store(on); }
bool GemmWorkspace() { return WorkspaceOn().load(); }

}  // namespace mt::kernels
