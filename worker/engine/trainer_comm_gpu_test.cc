// The CUDA-event path of the communication recorder (worker/parallel/comm_stats.h) on NCCL
// (label `gpu`; skips without CUDA and NCCL):
//   - a world-of-one NCCL all-reduce queued behind a ~1 s spin kernel: Take() does not wait for
//     the device (nothing resolved, one span pending), and once the device is synchronised
//     ResolveCompleted() turns it into one call with a non-negative time;
//   - with 2 GPUs, a TP=2 training step (ranks as threads, rank r on cuda:r): every TP
//     all-reduce the model implies (4L + 4 per micro-batch, trainer_comm_test.cc) resolved at
//     the synchronised step with non-negative times, nothing left pending.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/layout/job_layout.h"
#include "common/spec/defaults.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/trainer.h"
#include "worker/parallel/comm_stats.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/rank_threads_testing.h"

#if defined(MT_ENGINE_WITH_CUDA) && MT_ENGINE_WITH_CUDA && MT_HAVE_NCCL && \
    __has_include(<ATen/cuda/Sleep.h>)
#define MT_COMM_GPU_TEST 1
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAFunctions.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#else
#define MT_COMM_GPU_TEST 0
#endif

namespace mt::engine {
namespace {

#define MT_SKIP_WITHOUT_NCCL()                                         \
  if (!MT_COMM_GPU_TEST) GTEST_SKIP() << "not a CUDA build with NCCL"; \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";  \
  if (!parallel::HasBackend("nccl")) GTEST_SKIP() << "no NCCL in this build"

TEST(CommStatsGpuTest, AWorldOfOneAllReduceResolvesOnlyOnceTheDeviceIsDone) {
  MT_SKIP_WITHOUT_NCCL();
#if MT_COMM_GPU_TEST
  c10::cuda::set_device(0);
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto options = c10d::ProcessGroupNCCL::Options::create();
  parallel::GroupHandle h;
  h.name = "tp/0";
  h.group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, 0, 1, options);
  h.ranks = {0};
  h.comm_stats = std::make_shared<parallel::CommStats>();
  h.comm_group = parallel::CommGroup::kTp;
  std::vector<at::Tensor> t = {torch::ones({1024}, torch::kCUDA)};
  // Warm-up: the communicator is created on the first collective.
  ASSERT_TRUE(parallel::Wait(h.group->allreduce(t), "warm-up").ok());
  torch::cuda::synchronize();

  at::cuda::sleep(int64_t{2'000'000'000});  // ~1 s at ~2 GHz, ahead of the all-reduce
  parallel::CommStats::Span span = parallel::StartComm(h, parallel::Collective::kAllReduce, t[0]);
  ASSERT_TRUE(parallel::Wait(h.group->allreduce(t), "all-reduce").ok());
  span.Finish();
  EXPECT_TRUE(h.comm_stats->Take().empty()) << "Take must not wait for the device";
  EXPECT_EQ(h.comm_stats->pending(), 1);
  h.comm_stats->ResolveCompleted();  // before the sync: still running, nothing resolves
  EXPECT_EQ(h.comm_stats->pending(), 1);

  torch::cuda::synchronize();
  h.comm_stats->ResolveCompleted();
  EXPECT_EQ(h.comm_stats->pending(), 0);
  const std::vector<parallel::CommTime> got = h.comm_stats->Take();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].collective, "all_reduce");
  EXPECT_EQ(got[0].group, "tp");
  EXPECT_EQ(got[0].calls, 1);
  EXPECT_GE(got[0].seconds, 0.0);
  EXPECT_LT(got[0].seconds, 10.0);
  EXPECT_DOUBLE_EQ(t[0][0].item<double>(), 1.0);  // a world of one sums one copy
#endif
}

[[maybe_unused]] mt::v1::JobSpec TensorParallelSpec() {
  mt::v1::JobSpec spec;
  auto* m = spec.mutable_model();
  m->set_num_layers(2);
  m->set_hidden_size(64);
  m->set_num_attention_heads(4);
  m->set_seq_length(32);
  m->set_vocab_size(256);
  m->set_hidden_dropout(0.0);
  m->set_attention_dropout(0.0);
  spec.mutable_parallel()->set_tensor_model_parallel_size(2);
  auto* t = spec.mutable_training();
  t->set_micro_batch_size(2);
  t->set_global_batch_size(4);  // 2 micro-batches
  t->set_train_iters(2);
  t->set_lr(1e-3);
  spec.mutable_evaluation()->set_eval_interval(0);
  spec.mutable_logging()->set_log_interval(1);
  mt::spec::ApplyDefaults(&spec);
  return spec;
}

TEST(CommStatsGpuTest, ATensorParallelStepOnTwoGpusResolvesEveryAllReduce) {
  MT_SKIP_WITHOUT_NCCL();
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
#if MT_COMM_GPU_TEST
  const mt::v1::JobSpec spec = TensorParallelSpec();
  auto layout = mt::layout::JobLayout(spec, 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const int64_t want_tp = 2 * (4 * 2 + 4);  // micro-batches * (4L + 4)
  const auto errors = parallel::testing::RunRanks(
      *layout,
      [&](int rank, std::shared_ptr<parallel::ProcessGroups> groups) {
        c10::cuda::set_device(static_cast<c10::DeviceIndex>(rank));
        TrainerOptions o;
        o.device = "cuda:" + std::to_string(rank);
        o.log_progress = false;
        o.sync_every_step = true;
        o.groups = groups;
        auto collectives = parallel::MakeCollectives(groups, 1 << 20);
        o.collectives = collectives.get();
        auto t = Trainer::Create(
            spec, o,
            [] {
              auto s = TokenSequenceSource::Create(SyntheticTokens(8192, 256, 3), 32);
              return std::move(*s);
            }(),
            nullptr);
        ASSERT_TRUE(t.ok()) << t.status();
        for (int step = 1; step <= 2; ++step) {
          auto m = (*t)->Step();
          ASSERT_TRUE(m.ok()) << m.status();
          ASSERT_TRUE(m->synced);
          EXPECT_EQ(groups->comm_stats()->pending(), 0) << "the synced step resolved them all";
          std::map<std::pair<std::string, std::string>, parallel::CommTime> got;
          for (const parallel::CommTime& c : (*t)->TakeCommunication()) {
            got[{c.collective, c.group}] = c;
            EXPECT_GE(c.seconds, 0.0) << c.collective << " " << c.group;
            EXPECT_LT(c.seconds, 60.0) << c.collective << " " << c.group;
          }
          ASSERT_EQ(got.count({"all_reduce", "tp"}), 1u) << "rank " << rank;
          const parallel::CommTime& tp = got[std::make_pair("all_reduce", "tp")];
          EXPECT_EQ(tp.calls, want_tp) << "rank " << rank;
          EXPECT_GT(tp.seconds, 0.0) << "rank " << rank;
          ASSERT_EQ(got.count({"all_reduce", "model_parallel"}), 1u) << "rank " << rank;
          EXPECT_EQ(got[std::make_pair("all_reduce", "model_parallel")].calls, 1)
              << "rank " << rank;
        }
      },
      "nccl");
  for (const std::string& e : errors) EXPECT_EQ(e, "");
#endif
}

}  // namespace
}  // namespace mt::engine
