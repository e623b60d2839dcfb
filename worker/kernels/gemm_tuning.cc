#include "worker/kernels/gemm_tuning.h"

#include <atomic>

namespace mt::kernels {
namespace {

std::atomic<bool>& TuningOn() {
  static std::atomic<bool> on{true};
  return on;
}

}  // namespace

void SetGemmTuning(bool on) { TuningOn().store(on); }
bool GemmTuning() { return TuningOn().load(); }

}  // namespace mt::kernels
