#include "worker/kernels/mlp_gelu_choice.h"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <vector>

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime_api.h>

#include "worker/kernels/gemm_lt_launch.h"
#endif

namespace mt::kernels {
namespace {

// device, dtype, rows, in, out
using ShapeKey = std::array<int64_t, 5>;

class ChoiceTable {
 public:
  bool Find(const ShapeKey& key, bool* kernel) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = choices_.find(key);
    if (it == choices_.end()) return false;
    *kernel = it->second;
    return true;
  }
  void Remember(const ShapeKey& key, bool kernel) {
    std::lock_guard<std::mutex> lock(mu_);
    choices_.emplace(key, kernel);
  }
  MlpGeluCounts Counts() const {
    std::lock_guard<std::mutex> lock(mu_);
    MlpGeluCounts counts;
    counts.shapes = choices_.size();
    for (const auto& [key, kernel] : choices_) counts.kernel += kernel;
    return counts;
  }

 private:
  mutable std::mutex mu_;
  std::map<ShapeKey, bool> choices_;
};

ChoiceTable& ProcessChoices() {
  static ChoiceTable* const table = new ChoiceTable();  // never destroyed: used until exit
  return *table;
}

#if MT_KERNELS_WITH_CUDA
// Events around one run of each path, after `flush` is overwritten (none where it is
// undefined): the median milliseconds of each over kMlpGeluRepeats, or false where a run or an
// event failed.
bool TimePaths(cudaStream_t stream, const torch::Tensor& flush,
               const std::array<absl::FunctionRef<bool()>, 2>& paths,
               std::array<float, 2>* median) {
  std::array<cudaEvent_t, 2> ev{nullptr, nullptr};
  if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess) {
    if (ev[0] != nullptr) cudaEventDestroy(ev[0]);
    return false;
  }
  std::array<std::vector<float>, 2> ms;
  bool ok = paths[0]() && paths[1]();  // warm-up: the GEMMs' own tuning happens here
  for (int r = 0; ok && r < kMlpGeluRepeats; ++r) {
    for (size_t p = 0; ok && p < 2; ++p) {
      if (flush.defined()) flush.fill_(r & 0xff);
      ok = cudaEventRecord(ev[0], stream) == cudaSuccess && paths[p]() &&
           cudaEventRecord(ev[1], stream) == cudaSuccess &&
           cudaEventSynchronize(ev[1]) == cudaSuccess;
      float t = 0;
      ok = ok && cudaEventElapsedTime(&t, ev[0], ev[1]) == cudaSuccess;
      ms[p].push_back(t);
    }
  }
  cudaEventDestroy(ev[1]);
  cudaEventDestroy(ev[0]);
  for (size_t p = 0; ok && p < 2; ++p) {
    std::nth_element(ms[p].begin(), ms[p].begin() + ms[p].size() / 2, ms[p].end());
    (*median)[p] = ms[p][ms[p].size() / 2];
  }
  return ok;
}

// L2FlushBytes() to overwrite between runs, or an undefined tensor where the size is unknown or
// the memory cannot be had.
torch::Tensor FlushBuffer(const torch::Tensor& like) {
  const size_t bytes = L2FlushBytes();
  if (bytes == 0) return torch::Tensor();
  try {
    return torch::empty({static_cast<int64_t>(bytes)}, like.options().dtype(torch::kByte));
  } catch (const c10::Error&) {  // out of memory: time without the flush
    return torch::Tensor();
  }
}
#endif

}  // namespace

bool GeluKernelFaster(const torch::Tensor& x, int64_t out, absl::FunctionRef<bool()> epilogue,
                      absl::FunctionRef<bool()> kernel) {
#if MT_KERNELS_WITH_CUDA
  const ShapeKey key{x.device().index(), static_cast<int64_t>(x.scalar_type()), x.size(0),
                     x.size(1), out};
  bool choice = false;
  if (ProcessChoices().Find(key, &choice)) return choice;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
  if (StreamCapturing(stream)) return false;
  std::array<float, 2> ms{};
  if (TimePaths(stream, FlushBuffer(x), {epilogue, kernel}, &ms)) {
    choice = ms[1] < (1.0f - kMlpGeluMargin) * ms[0];
  }
  ProcessChoices().Remember(key, choice);
  return choice;
#else
  (void)x, (void)out, (void)epilogue, (void)kernel;
  return false;
#endif
}

MlpGeluCounts MlpGeluSoFar() { return ProcessChoices().Counts(); }

}  // namespace mt::kernels
