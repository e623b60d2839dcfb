// coordinator/plan.h, table-driven: the world a spec asks for, the automatic DP size, layouts,
// placement on free workers (device kind, nodes, TP groups inside a node) and the memory
// estimate against the formula written out by hand.
#include "coordinator/plan.h"

#include <string>
#include <vector>

#include "common/base/status_matchers.h"
#include "common/spec/defaults.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

struct Dims {
  int tp = 1, pp = 1, dp = 0, world = 0;
  int micro = 1, global = 0;
};
// Dims{} with the named fields set: TP, PP, DP, then world, micro and global batch.
Dims D(int tp, int pp, int dp, int world = 0, int micro = 1, int global = 0) {
  return Dims{tp, pp, dp, world, micro, global};
}

// A small valid spec: 2 layers, hidden 32, 2 heads, seq 16.
mt::v1::JobSpec Spec(const Dims& d) {
  mt::v1::JobSpec s;
  s.set_name("plan");
  s.mutable_model()->set_num_layers(2);
  s.mutable_model()->set_hidden_size(32);
  s.mutable_model()->set_num_attention_heads(2);
  s.mutable_model()->set_seq_length(16);
  s.mutable_parallel()->set_tensor_model_parallel_size(d.tp);
  s.mutable_parallel()->set_pipeline_model_parallel_size(d.pp);
  s.mutable_parallel()->set_data_parallel_size(d.dp);
  s.mutable_parallel()->set_world_size(d.world);
  s.mutable_training()->set_micro_batch_size(d.micro);
  s.mutable_training()->set_global_batch_size(d.global);
  s.mutable_training()->set_train_iters(10);
  s.mutable_training()->set_lr(1e-3);
  s.mutable_data()->add_data_path()->set_prefix("/data/x");
  s.mutable_data()->mutable_tokenizer()->set_vocab_file("/v.json");
  s.mutable_data()->mutable_tokenizer()->set_merge_file("/m.txt");
  spec::ApplyDefaults(&s);
  return s;
}

std::vector<mt::v1::Worker> Workers(const std::vector<std::string>& nodes, bool gpu) {
  std::vector<mt::v1::Worker> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    mt::v1::Worker w;
    w.set_id("w-" + std::to_string(i + 1));
    w.mutable_resources()->set_node(nodes[i]);
    w.mutable_resources()->set_gpu_index(gpu ? static_cast<int>(i) : -1);
    out.push_back(w);
  }
  return out;
}

TEST(PlanTest, RequestedWorld) {
  const struct {
    Dims dims;
    int want;
  } cases[] = {
      {D(1, 1, 0, /*world=*/6), 6}, {D(2, 2, 3), 12}, {D(2, 1, 0), 0},  // dp: auto
  };
  for (const auto& c : cases) EXPECT_EQ(RequestedWorld(Spec(c.dims)), c.want);
}

TEST(PlanTest, AutoWorldKeepsTheGlobalBatchDivisible) {
  const struct {
    Dims dims;
    int free_slots;
    int want;
  } cases[] = {
      {D(1, 1, 0, 0, /*micro=*/1, /*global=*/0), 7, 7},   // no global batch: every slot
      {D(1, 1, 0, 0, /*micro=*/2, /*global=*/12), 7, 6},  // 12 % (2*6) == 0
      {D(1, 1, 0, 0, /*micro=*/2, /*global=*/8), 7, 4},   // 2*5, 2*6, 2*7 do not divide 8
      {D(2, 1, 0, 0, /*micro=*/1, /*global=*/4), 7, 4},   // TP 2: DP 3 does not divide, DP 2
      {D(4, 1, 0), 3, 0},                                 // not one replica
  };
  for (const auto& c : cases) {
    EXPECT_EQ(AutoWorld(Spec(c.dims), c.free_slots), c.want)
        << "tp " << c.dims.tp << " micro " << c.dims.micro << " global " << c.dims.global;
  }
}

TEST(PlanTest, ComputeLayoutNamesTheMismatch) {
  auto layout = ComputeLayout(Spec(D(2, 2, 2)), 8);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->world_size(), 8);
  EXPECT_EQ(layout->tensor_model_parallel_size(), 2);
  EXPECT_EQ(layout->pipeline_model_parallel_size(), 2);
  EXPECT_EQ(layout->data_parallel_size(), 2);
  EXPECT_FALSE(ComputeLayout(Spec(D(2, 1, 0, /*world=*/5)), 5).ok());
}

TEST(PlanTest, PlacesTensorGroupsInsideANode) {
  auto plan = PlanOnWorkers(Spec(D(2, 1, 2)), Workers({"b", "a", "b", "a"}, /*gpu=*/false));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->placeable()) << plan->reason();
  ASSERT_EQ(plan->placement_size(), 4);
  for (int r = 0; r < 4; r += 2) {
    EXPECT_EQ(plan->placement(r).node(), plan->placement(r + 1).node()) << "rank " << r;
    EXPECT_EQ(plan->placement(r).coordinates().tp(), 0);
    EXPECT_EQ(plan->placement(r + 1).coordinates().tp(), 1);
  }
  EXPECT_GT(plan->estimated_state_bytes_per_rank(), 0);
}

TEST(PlanTest, NotPlaceableSaysWhy) {
  auto plan = PlanOnWorkers(Spec(D(1, 1, 4)), Workers({"a", "a"}, false));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->placeable());
  EXPECT_FALSE(plan->reason().empty());
  EXPECT_EQ(plan->layout().world_size(), 4);
}

TEST(PlanTest, AutoDpWithNoWorkersShowsDp1) {
  auto plan = PlanOnWorkers(Spec(D(2, 1, 0)), {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->placeable());
  EXPECT_EQ(plan->layout().world_size(), 2);
  ASSERT_EQ(plan->warnings_size(), 1);
  EXPECT_THAT(plan->warnings(0), HasSubstr("showing the layout for DP=1"));
}

TEST(PlanTest, DeviceKindAndNodesPickTheWorkers) {
  std::vector<mt::v1::Worker> workers = Workers({"a", "a"}, /*gpu=*/true);
  for (const auto& w : Workers({"c", "c", "c"}, false)) {
    workers.push_back(w);
    workers.back().set_id("w-c" + w.id());
  }
  const struct {
    mt::v1::DeviceKind device;
    int dp;
    std::string node;
    bool placeable;
    bool on_gpu;
  } cases[] = {
      {mt::v1::DEVICE_KIND_AUTO, 2, "", true, true},   // GPUs when they hold the job
      {mt::v1::DEVICE_KIND_AUTO, 3, "", true, false},  // else CPU workers
      {mt::v1::DEVICE_KIND_GPU, 3, "", false, true},   // GPUs or nothing
      {mt::v1::DEVICE_KIND_CPU, 1, "", true, false},
      {mt::v1::DEVICE_KIND_CPU, 1, "a", false, false},  // node a has no CPU workers
  };
  for (const auto& c : cases) {
    mt::v1::JobSpec spec = Spec(D(1, 1, c.dp));
    spec.mutable_resources()->set_device(c.device);
    if (!c.node.empty()) spec.mutable_resources()->add_nodes(c.node);
    auto plan = PlanOnWorkers(spec, workers);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->placeable(), c.placeable) << c.device << " dp " << c.dp;
    if (plan->placeable()) {
      EXPECT_EQ(plan->placement(0).gpu_index() >= 0, c.on_gpu) << c.device << " dp " << c.dp;
    }
  }
}

TEST(PlanTest, InvalidSpecIsAnError) {
  mt::v1::JobSpec spec = Spec(D(1, 1, 1));
  spec.mutable_model()->set_num_attention_heads(3);  // 32 is not divisible by 3
  EXPECT_THAT(PlanOnWorkers(spec, Workers({"a"}, false)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PlanTest, MemoryEstimateFollowsMegatronsAccounting) {
  // h 32, 2 layers, ffn 4h = 128, vocab 1000 padded to 1024 (128 * TP 1), 16 positions.
  // Per layer: 4h^2 + 4h + 2h*ffn + ffn + h + 4h = 12704. Total: 2 * 12704 + (1024 + 16) * 32
  // + 2h = 58752 parameters.
  constexpr int64_t kParams = 58752;
  mt::v1::JobSpec spec = Spec(D(1, 1, 2));
  spec.mutable_model()->set_vocab_size(1000);
  spec.mutable_model()->set_make_vocab_size_divisible_by(128);
  spec.mutable_model()->set_max_position_embeddings(16);
  mt::v1::Layout layout = *ComputeLayout(spec, 2);
  const struct {
    mt::v1::Precision precision;
    bool distributed;
    int64_t want;
  } cases[] = {
      {mt::v1::PRECISION_FP32, false, kParams * (8 + 8)},
      {mt::v1::PRECISION_BF16, false, kParams * (4 + 12)},
      {mt::v1::PRECISION_FP16, true, kParams * 4 + kParams * 12 / 2},  // optimizer over DP 2
      {mt::v1::PRECISION_FP32, true, kParams * 8 + kParams * 8 / 2},
  };
  for (const auto& c : cases) {
    spec.mutable_training()->set_precision(c.precision);
    spec.mutable_parallel()->set_use_distributed_optimizer(c.distributed);
    EXPECT_EQ(EstimateStateBytesPerRank(spec, layout), c.want)
        << c.precision << " distributed " << c.distributed;
  }
}

TEST(PlanTest, ActivationEstimateFollowsKorthikanti) {
  // s 16, b 1, h 32, a 2, 2 layers, vocab 1000 padded to 1024 (x TP); sbh = 512.
  // No recompute, TP 1: per layer sbh*(10 + 24) + 5*a*s*s*b = 17408 + 2560 = 19968 (bf16).
  // Logits (fp32): 4*s*b*1024/t = 65536 (t 1), 32768 (t 2).
  const struct {
    Dims dims;
    mt::v1::Precision precision;
    mt::v1::RecomputeGranularity recompute;
    bool sequence_parallel;
    int64_t want;
  } cases[] = {
      {D(1, 1, 2), mt::v1::PRECISION_BF16, mt::v1::RECOMPUTE_GRANULARITY_NONE, false,
       2 * 19968 + 65536},
      {D(1, 1, 2), mt::v1::PRECISION_FP32, mt::v1::RECOMPUTE_GRANULARITY_NONE, false,
       2 * 2 * 19968 + 65536},
      {D(1, 1, 2), mt::v1::PRECISION_BF16, mt::v1::RECOMPUTE_GRANULARITY_SELECTIVE, false,
       2 * 17408 + 65536},
      {D(1, 1, 2), mt::v1::PRECISION_BF16, mt::v1::RECOMPUTE_GRANULARITY_FULL, false,
       2 * 1024 + 65536},
      // PP 2, 4 micro-batches: stage 0 holds 1 layer x min(2, 4) micro-batches.
      {D(1, 2, 1, 0, 1, 4), mt::v1::PRECISION_BF16, mt::v1::RECOMPUTE_GRANULARITY_NONE, false,
       2 * 19968 + 65536},
      // TP 2 with SP: 34*sbh/2 + 5*a*s*s*b/2 = 8704 + 1280 per layer.
      {D(2, 1, 1), mt::v1::PRECISION_BF16, mt::v1::RECOMPUTE_GRANULARITY_NONE, true,
       2 * 9984 + 32768},
  };
  for (const auto& c : cases) {
    mt::v1::JobSpec spec = Spec(c.dims);
    spec.mutable_model()->set_vocab_size(1000);
    spec.mutable_model()->set_make_vocab_size_divisible_by(128);
    spec.mutable_training()->set_precision(c.precision);
    spec.mutable_training()->set_recompute_granularity(c.recompute);
    spec.mutable_parallel()->set_sequence_parallel(c.sequence_parallel);
    const int world = c.dims.tp * c.dims.pp * std::max(1, c.dims.dp);
    MT_ASSERT_OK_AND_ASSIGN(mt::v1::Layout layout, ComputeLayout(spec, world));
    EXPECT_EQ(EstimateActivationBytesPerRank(spec, layout), c.want)
        << c.precision << " recompute " << c.recompute << " tp " << c.dims.tp;
  }
}

TEST(PlanTest, MemoryAdmissionRefusesWithTheNumbers) {
  mt::v1::JobSpec spec = Spec(D(1, 1, 1));
  std::vector<mt::v1::Worker> workers = Workers({"a", "b"}, /*gpu=*/false);
  for (auto& w : workers) w.mutable_resources()->set_memory_bytes(64 << 10);  // 64 KiB
  const absl::Status refused = CheckMemoryFits(spec, workers);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("no CPU worker can hold a rank of this job")));
  EXPECT_THAT(refused.message(), HasSubstr("the largest has 0.00 GiB"));
  EXPECT_THAT(refused.message(), HasSubstr("activations "));
  EXPECT_THAT(refused.message(), HasSubstr("parallel.use_distributed_optimizer"));
  workers[1].mutable_resources()->set_memory_bytes(int64_t{1} << 30);
  EXPECT_TRUE(CheckMemoryFits(spec, workers).ok());  // one worker is enough
  workers[1].mutable_resources()->set_memory_bytes(0);
  EXPECT_TRUE(CheckMemoryFits(spec, workers).ok());  // not known yet: no judgement
  EXPECT_TRUE(CheckMemoryFits(spec, {}).ok());       // no workers: the job waits
}

// The small spec as a generation job: prompt "hello" (5 bytes), 4 new tokens, 2 samples.
mt::v1::JobSpec GenerationSpec(int tp, const std::string& quantize = "") {
  mt::v1::JobSpec spec = Spec(D(tp, 1, 1));
  spec.mutable_model()->set_vocab_size(1000);
  spec.mutable_model()->set_make_vocab_size_divisible_by(128);
  spec.mutable_model()->set_max_position_embeddings(16);
  mt::v1::GenerateTask* g = spec.mutable_inference()->mutable_generate();
  g->set_prompt("hello");
  g->set_max_new_tokens(4);
  g->set_num_samples(2);
  g->set_quantize(quantize);
  return spec;
}

TEST(PlanTest, InferenceEstimateCountsWeightsCacheAndLogits) {
  // The model of MemoryEstimateFollowsMegatronsAccounting: 58752 parameters, of which the
  // layers' linear weights 2 * (4h^2 + 2h * 4h) = 24576; ffn 128, padded vocabulary 1024.
  // Generation: 2 samples over min(16, 5 + 4) = 9 positions.
  constexpr int64_t kParams = 58752, kLinear = 24576;
  const struct {
    const char* what;
    mt::v1::JobSpec spec;
    int tp;
    bool gpu;
    int64_t weights, kv_cache, activations;
  } cases[] = {
      // KV: 2 * layers 2 * samples 2 * 9 * h 32 * 2 bytes. Logits 3 * 4 * 2 * 1024; one
      // layer: 2 * 9 * (4h + ffn) * 2.
      {"generate, GPU", GenerationSpec(1), 1, true, kParams * 2, 4608, 24576 + 9216},
      // fp32, and the attention's scores 4 * 2 samples * 2 heads * 9 * 9.
      {"generate, CPU", GenerationSpec(1), 1, false, kParams * 4, 9216, 24576 + 18432 + 1296},
      {"generate int8, GPU", GenerationSpec(1, "int8"), 1, true, kLinear + (kParams - kLinear) * 2,
       4608, 24576 + 9216},
      // TP 2: half the weights and the cache; the gathered logits stay whole; one layer
      // 2 * 9 * (4h + ffn / 2) * 2.
      {"generate TP 2, GPU", GenerationSpec(2), 2, true, kParams, 2304, 24576 + 6912},
  };
  for (const auto& c : cases) {
    MT_ASSERT_OK_AND_ASSIGN(mt::v1::Layout layout, ComputeLayout(c.spec, c.tp));
    EXPECT_TRUE(HoldsWeightsOnly(c.spec)) << c.what;
    const InferenceBytes got = EstimateInferenceBytesPerRank(c.spec, layout, c.gpu);
    EXPECT_EQ(got.weights, c.weights) << c.what;
    EXPECT_EQ(got.kv_cache, c.kv_cache) << c.what;
    EXPECT_EQ(got.activations, c.activations) << c.what;
    EXPECT_EQ(got.total(), c.weights + c.kv_cache + c.activations) << c.what;
  }
  // An evaluation on one rank: micro-batch 2 of 8 tokens; the logits and their log-softmax
  // 2 * 4 * 2 * 8 * 1024, one layer 2 * 8 * (4h + ffn) * 2; no cache.
  mt::v1::JobSpec eval = GenerationSpec(1);
  eval.mutable_inference()->mutable_eval()->set_micro_batch_size(2);
  eval.mutable_inference()->mutable_eval()->set_context_length(8);
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::Layout one, ComputeLayout(eval, 1));
  ASSERT_TRUE(HoldsWeightsOnly(eval));
  const InferenceBytes got = EstimateInferenceBytesPerRank(eval, one, /*gpu=*/true);
  EXPECT_EQ(got.weights, kParams * 2);
  EXPECT_EQ(got.kv_cache, 0);
  EXPECT_EQ(got.activations, 131072 + 8192);
}

TEST(PlanTest, InferenceJobsHoldWeightsOnly) {
  mt::v1::JobSpec training = Spec(D(1, 1, 2));
  EXPECT_FALSE(HoldsWeightsOnly(training));
  mt::v1::JobSpec eval = training;
  eval.mutable_inference()->mutable_eval()->set_data_path("/data/x");
  // The sharded evaluation builds the engine without an optimizer.
  EXPECT_TRUE(HoldsWeightsOnly(eval));
  EXPECT_TRUE(HoldsWeightsOnly(GenerationSpec(2)));
}

// An evaluation over several ranks holds its shard in the job's training precision on a GPU
// (its engine runs in it), where a one-rank one picks bf16; fp32 on a CPU either way.
TEST(PlanTest, AShardedEvaluationsWeightsAreInTheTrainingPrecision) {
  constexpr int64_t kParams = 58752;  // InferenceEstimateCountsWeightsCacheAndLogits's model
  mt::v1::JobSpec eval = GenerationSpec(2);
  eval.mutable_inference()->clear_generate();
  eval.mutable_inference()->mutable_eval()->set_data_path("/data/x");
  eval.mutable_inference()->mutable_eval()->set_micro_batch_size(2);
  eval.mutable_inference()->mutable_eval()->set_context_length(8);
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::Layout tp2, ComputeLayout(eval, 2));
  ASSERT_EQ(tp2.world_size(), 2);
  eval.mutable_training()->set_precision(mt::v1::PRECISION_BF16);
  EXPECT_EQ(EstimateInferenceBytesPerRank(eval, tp2, /*gpu=*/true).weights, kParams);  // 2 B / 2
  eval.mutable_training()->set_precision(mt::v1::PRECISION_FP32);
  EXPECT_EQ(EstimateInferenceBytesPerRank(eval, tp2, /*gpu=*/true).weights, 2 * kParams);
  EXPECT_EQ(EstimateInferenceBytesPerRank(eval, tp2, /*gpu=*/false).weights, 2 * kParams);
}

// A generation job is admitted by what it holds, not by a training rank's state: a worker too
// small for the training accounting (weights, gradients, Adam) runs it; one too small for its
// weights and cache refuses it, naming the generation flags.
TEST(PlanTest, GenerationAdmissionCountsWeightsAndCacheNotTrainingState) {
  mt::v1::JobSpec spec = GenerationSpec(1);
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::Layout layout, ComputeLayout(spec, 1));
  const int64_t inference = EstimateInferenceBytesPerRank(spec, layout, /*gpu=*/true).total();
  mt::v1::JobSpec as_training = spec;
  as_training.clear_inference();
  const int64_t training = EstimateStateBytesPerRank(as_training, layout) +
                           EstimateActivationBytesPerRank(as_training, layout);
  ASSERT_LT(inference, training);
  std::vector<mt::v1::Worker> gpus = Workers({"a"}, /*gpu=*/true);
  gpus[0].mutable_resources()->set_memory_bytes(inference);
  EXPECT_TRUE(CheckMemoryFits(spec, gpus).ok());
  EXPECT_THAT(CheckMemoryFits(as_training, gpus), StatusIs(absl::StatusCode::kFailedPrecondition));
  gpus[0].mutable_resources()->set_memory_bytes(inference - 1);
  const absl::Status refused = CheckMemoryFits(spec, gpus);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("no GPU worker can hold a rank of this generation job")));
  EXPECT_THAT(refused.message(), HasSubstr("KV cache "));
  EXPECT_THAT(refused.message(), HasSubstr("--tensor-model-parallel-size"));
  EXPECT_THAT(refused.message(), HasSubstr("--quantize int8"));
  EXPECT_THAT(refused.message(), HasSubstr("-n or --max-new-tokens"));
}

TEST(PlanTest, NotPlaceableNamesTheSlotKind) {
  auto cpu = PlanOnWorkers(Spec(D(1, 1, 4)), Workers({"a", "a"}, false));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->reason(), "world 4 needs 4 free CPU slots, only 2 given");
  mt::v1::JobSpec gpu_spec = Spec(D(1, 1, 4));
  gpu_spec.mutable_resources()->set_device(mt::v1::DEVICE_KIND_GPU);
  auto gpu = PlanOnWorkers(gpu_spec, Workers({"a", "a"}, true));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->reason(), "world 4 needs 4 free GPU slots, only 2 given");
}

}  // namespace
}  // namespace mt::coordinator
