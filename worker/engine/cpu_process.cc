#include "worker/engine/cpu_process.h"

#include <ATen/Parallel.h>
#include <malloc.h>

namespace mt::engine {
namespace {

// The size up to which glibc's malloc serves a block from its heap (its largest, 32 MiB),
// and how much free memory the heap's top may hold before it is returned to the system.
constexpr int kHostHeapBlockBytes = 32 << 20;
constexpr int kHostHeapKeepBytes = 512 << 20;

}  // namespace

void ConfigureCpuProcess(int threads) {
  if (threads > 0) at::set_num_threads(threads);
  // Setting either value turns off malloc's moving threshold; both are set together.
  mallopt(M_MMAP_THRESHOLD, kHostHeapBlockBytes);
  mallopt(M_TRIM_THRESHOLD, kHostHeapKeepBytes);
}

}  // namespace mt::engine
