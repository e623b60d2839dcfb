// All-reduce bus bandwidth through our process groups (worker/parallel/process_groups.h, c10d
// NCCL on GPUs, Gloo on CPUs): one process per rank, started by run_allreduce.sh next to the
// PyTorch peer (torch_allreduce.py) so the two are compared in the same run.
//
//   allreduce_bench --rank R --world N --master HOST:PORT [--sizes_mib 1,16,128,1024]
//                   [--iters 20] [--warmup 5] [--backend nccl|gloo]
//
// Rank 0 serves the c10d TCPStore on PORT. Each rank uses GPU R (nccl). One JSON line per size
// on rank 0's stdout: {"impl":"mt","bytes":...,"seconds_per_op":...,"busbw_gbps":...}, where
// bus bandwidth = bytes / time * 2 (N - 1) / N (NCCL's convention for all-reduce).
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/cli/help_version.h"
#include "common/layout/job_layout.h"
#include "common/spec/defaults.h"
#include "worker/parallel/process_groups.h"

#if MT_HAVE_CUDA_RUNTIME
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace {

int Usage(const char* why) {
  std::fprintf(stderr,
               "allreduce_bench: %s\nusage: allreduce_bench --rank R --world N --master HOST:PORT "
               "[--sizes_mib 1,16,128,1024] [--iters 20] [--warmup 5] [--backend nccl|gloo]\n",
               why);
  return 2;
}

int Run(int argc, char** argv) {
  int rank = -1, world = 0, iters = 20, warmup = 5;
  std::string master, backend = "nccl", sizes = "1,16,128,1024";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* v = argv[i + 1];
    bool ok = true;
    if (flag == "--rank")
      ok = absl::SimpleAtoi(v, &rank);
    else if (flag == "--world")
      ok = absl::SimpleAtoi(v, &world);
    else if (flag == "--iters")
      ok = absl::SimpleAtoi(v, &iters);
    else if (flag == "--warmup")
      ok = absl::SimpleAtoi(v, &warmup);
    else if (flag == "--master")
      master = v;
    else if (flag == "--backend")
      backend = v;
    else if (flag == "--sizes_mib")
      sizes = v;
    else
      return Usage(("unknown flag " + flag).c_str());
    if (!ok) return Usage(("bad value for " + flag).c_str());
  }
  if (rank < 0 || world < 1 || rank >= world) return Usage("--rank and --world are required");
  const size_t colon = master.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(master.substr(colon + 1), &port)) {
    return Usage("--master must be HOST:PORT");
  }
  const bool cuda = backend == "nccl";
#if MT_HAVE_CUDA_RUNTIME
  if (cuda) c10::cuda::set_device(rank);
#endif
  const auto timeout = std::chrono::milliseconds(120000);
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = rank == 0;
  o.numWorkers = world;
  o.waitWorkers = false;
  o.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(master.substr(0, colon), o);

  mt::v1::JobSpec spec;
  spec.mutable_model()->set_num_layers(1);
  spec.mutable_parallel()->set_data_parallel_size(world);
  spec.mutable_training()->set_micro_batch_size(1);
  spec.mutable_training()->set_global_batch_size(world);
  mt::spec::ApplyDefaults(&spec);
  auto layout = mt::layout::JobLayout(spec, world);
  if (!layout.ok()) return Usage(std::string(layout.status().message()).c_str());
  auto groups = mt::parallel::ProcessGroups::Create(*layout, rank, store, backend, timeout);
  if (!groups.ok()) {
    std::fprintf(stderr, "allreduce_bench: %s\n", groups.status().ToString().c_str());
    return 1;
  }
  const mt::parallel::GroupHandle& g = (*groups)->world();
  auto options = torch::TensorOptions().dtype(torch::kFloat32);
  if (cuda) options = options.device(torch::Device(torch::kCUDA, rank));
  for (absl::string_view s : absl::StrSplit(sizes, ',')) {
    double mib = 0;
    if (!absl::SimpleAtod(s, &mib) || mib <= 0) return Usage("bad --sizes_mib");
    const int64_t bytes = static_cast<int64_t>(mib * (1 << 20));
    std::vector<at::Tensor> t = {torch::ones({bytes / 4}, options)};
    auto sync = [&] {
      if (cuda) torch::cuda::synchronize(rank);
    };
    for (int i = 0; i < warmup; ++i) g.group->allreduce(t)->wait();
    sync();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) g.group->allreduce(t)->wait();
    sync();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
    const double busbw = bytes / seconds * 2.0 * (world - 1) / world / 1e9;
    if (rank == 0) {
      std::printf(
          "{\"impl\": \"mt\", \"backend\": \"%s\", \"world\": %d, \"bytes\": %lld, "
          "\"seconds_per_op\": %.9f, \"busbw_gbps\": %.3f}\n",
          backend.c_str(), world, static_cast<long long>(bytes), seconds, busbw);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

constexpr char kUsage[] =
    "usage: allreduce_bench --rank R --world N --master HOST:PORT [--sizes_mib 1,16,128,1024]\n"
    "                       [--iters 20] [--warmup 5] [--backend nccl|gloo]\n"
    "All-reduce bus bandwidth through mt's process groups, one process per rank (run_allreduce.sh\n"
    "starts them next to the PyTorch peer); one JSON line per size on rank 0's stdout.\n";

int main(int argc, char** argv) {
  if (mt::cli::AnswerHelpOrVersion(argc, argv, "allreduce_bench", kUsage)) return 0;
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 1;
  }
}
