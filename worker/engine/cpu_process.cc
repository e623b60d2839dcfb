#include "worker/engine/cpu_process.h"

#include <ATen/Parallel.h>
#include <malloc.h>

namespace mt::engine {

void ConfigureCpuProcess(int threads) {
  if (threads > 0) at::set_num_threads(threads);
  // Setting either value turns off malloc's moving threshold; both are set together.
  mallopt(M_MMAP_THRESHOLD, kHostHeapBlockBytes);
  mallopt(M_TRIM_THRESHOLD, kHostHeapKeepBytes);
}

}  // namespace mt::engine
