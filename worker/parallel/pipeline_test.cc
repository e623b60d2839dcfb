// The pipeline executor over real Gloo send/recv, one thread per stage over a HashStore: a
// small fp64 network (embedding, 8 tanh layers, output projection, cross entropy) split into
// p = 2 and 4 stages, with and without interleaving (2 chunks) and --overlap-p2p-comm, gives
// the loss and every gradient of the same network run in one piece (relative 1e-12: fp64, the
// same operations in the same order per micro-batch).
#include "worker/parallel/pipeline.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <set>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "common/base/status_matchers.h"
#include "common/layout/job_layout.h"
#include "common/layout/layout.h"
#include "common/spec/defaults.h"
#include "gmock/gmock.h"
#include "worker/parallel/dist.h"

namespace mt::parallel {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kLayers = 8;
constexpr int kHidden = 6;
constexpr int kVocab = 11;
constexpr int kBatch = 2;
constexpr int kSeq = 5;
constexpr double kRelTol = 1e-12;

// The whole network's parameters, drawn from one seed.
struct Net {
  at::Tensor embedding;             // [V, H]
  std::vector<at::Tensor> weights;  // [H, H] per layer
  std::vector<at::Tensor> biases;   // [H]
  at::Tensor output;                // [H, V]

  static Net Make() {
    torch::manual_seed(1234);
    Net n;
    auto opts = at::TensorOptions().dtype(at::kDouble);
    n.embedding = at::randn({kVocab, kHidden}, opts);
    for (int l = 0; l < kLayers; ++l) {
      n.weights.push_back(at::randn({kHidden, kHidden}, opts) / std::sqrt(kHidden));
      n.biases.push_back(at::randn({kHidden}, opts) * 0.1);
    }
    n.output = at::randn({kHidden, kVocab}, opts);
    return n;
  }
  // A copy that owns leaf tensors requiring gradients.
  Net Leaves() const {
    Net n;
    n.embedding = embedding.clone().requires_grad_(true);
    for (int l = 0; l < kLayers; ++l) {
      n.weights.push_back(weights[l].clone().requires_grad_(true));
      n.biases.push_back(biases[l].clone().requires_grad_(true));
    }
    n.output = output.clone().requires_grad_(true);
    return n;
  }
  at::Tensor Layer(int l, const at::Tensor& x) const {
    return at::tanh(at::matmul(x, weights[l]) + biases[l]);
  }
  at::Tensor Loss(const at::Tensor& x, const at::Tensor& targets) const {
    return at::cross_entropy_loss(at::matmul(x, output).view({-1, kVocab}), targets.reshape({-1}));
  }
};

std::vector<PipelineMicroBatch> MicroBatches(int m) {
  torch::manual_seed(99);
  std::vector<PipelineMicroBatch> out;
  for (int i = 0; i < m; ++i) {
    at::Tensor sample = at::randint(0, kVocab, {kBatch, kSeq + 1}, at::kLong);
    out.push_back({sample.narrow(1, 0, kSeq), sample.narrow(1, 1, kSeq)});
  }
  return out;
}

struct Reference {
  double loss_sum = 0;
  Net grads;
};

// The network in one piece: (loss_m / m).backward() per micro-batch, in order.
Reference RunWhole(const Net& net, const std::vector<PipelineMicroBatch>& mbs) {
  Net leaves = net.Leaves();
  Reference r;
  for (const auto& mb : mbs) {
    at::Tensor x = at::embedding(leaves.embedding, mb.tokens);
    for (int l = 0; l < kLayers; ++l) x = leaves.Layer(l, x);
    at::Tensor loss = leaves.Loss(x, mb.targets);
    (loss / static_cast<double>(mbs.size())).backward();
    r.loss_sum += loss.item<double>();
  }
  r.grads.embedding = leaves.embedding.grad();
  for (int l = 0; l < kLayers; ++l) {
    r.grads.weights.push_back(leaves.weights[l].grad());
    r.grads.biases.push_back(leaves.biases[l].grad());
  }
  r.grads.output = leaves.output.grad();
  return r;
}

mt::v1::Layout PipelineLayout(int pp) {
  mt::v1::JobSpec spec;
  spec.mutable_model()->set_num_layers(kLayers);
  spec.mutable_parallel()->set_pipeline_model_parallel_size(pp);
  spec.mutable_parallel()->set_data_parallel_size(1);
  spec.mutable_training()->set_micro_batch_size(1);
  spec.mutable_training()->set_global_batch_size(1);
  mt::spec::ApplyDefaults(&spec);
  auto layout = mt::layout::JobLayout(spec, pp);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

void ExpectClose(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_TRUE(want.defined()) << what;
  const double scale = std::max(1e-30, want.abs().max().item<double>());
  EXPECT_LE((got - want).abs().max().item<double>() / scale, kRelTol) << what;
}

struct Case {
  int pp;
  int chunks;
  int micro_batches;
  bool overlap;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return absl::StrCat("pp", info.param.pp, "_v", info.param.chunks, "_m", info.param.micro_batches,
                      info.param.overlap ? "_overlap" : "");
}

class PipelineExecutorTest : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineExecutorTest, GivesTheLossAndGradientsOfTheWholeNetwork) {
  if (!HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  at::set_num_threads(1);
  const Case c = GetParam();
  const Net net = Net::Make();
  const std::vector<PipelineMicroBatch> mbs = MicroBatches(c.micro_batches);
  const Reference want = RunWhole(net, mbs);
  absl::StatusOr<std::vector<std::vector<int>>> stage_layers =
      mt::layout::StageLayers(kLayers, c.pp, c.chunks, {});
  ASSERT_TRUE(stage_layers.ok()) << stage_layers.status();
  const mt::v1::Layout layout = PipelineLayout(c.pp);
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::string> errors(c.pp);
  std::vector<double> losses(c.pp, -1), eval_losses(c.pp, -1);
  std::vector<Net> leaves(c.pp);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < c.pp; ++rank) {
    threads.emplace_back([&, rank] {
      auto fail = [&](const absl::Status& s) { errors[rank] = s.ToString(); };
      auto groups =
          ProcessGroups::Create(layout, rank, store, "gloo", std::chrono::milliseconds(60000));
      if (!groups.ok()) return fail(groups.status());
      const int stage = (*groups)->pp_rank();
      Net& mine = leaves[rank];
      mine = net.Leaves();  // every rank holds a copy; it only uses (and grads) its layers
      const std::vector<int>& layers = (*stage_layers)[stage];
      const int per_chunk = static_cast<int>(layers.size()) / c.chunks;
      const int last_vs = c.pp * c.chunks - 1;
      ChunkForward forward = [&](int chunk, const at::Tensor& input, const at::Tensor& targets) {
        const int vs = chunk * c.pp + stage;
        at::Tensor x = vs == 0 ? at::embedding(mine.embedding, input) : input;
        for (int i = chunk * per_chunk; i < (chunk + 1) * per_chunk; ++i) {
          x = mine.Layer(layers[i], x);
        }
        return vs == last_vs ? mine.Loss(x, targets) : x;
      };
      PipelineConfig config;
      config.num_micro_batches = c.micro_batches;
      config.num_chunks = c.chunks;
      config.activation_shape = {kBatch, kSeq, kHidden};
      config.activation_dtype = at::kDouble;
      config.overlap_p2p_comm = c.overlap;
      auto executor = PipelineExecutor::Create((*groups)->pp(), config);
      if (!executor.ok()) return fail(executor.status());
      // before_backward: once before every backward; `last` exactly once per chunk, on its
      // final backward of the step (no backward of that chunk follows it).
      int backwards = 0, befores = 0;
      std::vector<int> lasts(c.chunks, 0), after_last(c.chunks, 0);
      auto step = (*executor)->Train(
          forward, mbs, /*loss_scale=*/1.0, [&] { ++backwards; },
          [&](int chunk, bool last) {
            EXPECT_EQ(befores++, backwards);
            if (lasts[chunk] > 0) ++after_last[chunk];
            if (last) ++lasts[chunk];
          });
      if (!step.ok()) return fail(step.status());
      EXPECT_EQ(backwards, c.micro_batches * c.chunks);
      EXPECT_EQ(befores, backwards);
      EXPECT_EQ(lasts, std::vector<int>(c.chunks, 1));
      EXPECT_EQ(after_last, std::vector<int>(c.chunks, 0));
      EXPECT_GT(step->compute_seconds, 0.0);
      EXPECT_LE(step->compute_seconds, step->seconds);
      if (stage != c.pp - 1) {
        EXPECT_EQ(step->loss_sum, 0.0);
      }
      auto loss = (*executor)->BroadcastFromLastStage(step->loss_sum);
      if (!loss.ok()) return fail(loss.status());
      losses[rank] = *loss;
      auto eval = (*executor)->Evaluate(forward, mbs);
      if (!eval.ok()) return fail(eval.status());
      auto eval_loss = (*executor)->BroadcastFromLastStage(eval->loss_sum);
      if (!eval_loss.ok()) return fail(eval_loss.status());
      eval_losses[rank] = *eval_loss;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < c.pp; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
  for (int r = 0; r < c.pp; ++r) {
    EXPECT_NEAR(losses[r], want.loss_sum, kRelTol * want.loss_sum) << "rank " << r;
    EXPECT_NEAR(eval_losses[r], want.loss_sum, kRelTol * want.loss_sum) << "rank " << r;
  }
  // Each parameter's gradient from the stage that owns it; other stages never touch it.
  for (int stage = 0; stage < c.pp; ++stage) {
    const Net& got = leaves[stage];  // rank == stage with tp = dp = 1
    std::set<int> owned((*stage_layers)[stage].begin(), (*stage_layers)[stage].end());
    for (int l = 0; l < kLayers; ++l) {
      if (!owned.count(l)) {
        EXPECT_FALSE(got.weights[l].grad().defined()) << "stage " << stage << " layer " << l;
        continue;
      }
      ExpectClose(got.weights[l].grad(), want.grads.weights[l], absl::StrCat("weight ", l));
      ExpectClose(got.biases[l].grad(), want.grads.biases[l], absl::StrCat("bias ", l));
    }
    if (stage == 0) ExpectClose(got.embedding.grad(), want.grads.embedding, "embedding");
    if (stage == c.pp - 1) ExpectClose(got.output.grad(), want.grads.output, "output");
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineExecutorTest,
                         ::testing::Values(Case{1, 1, 3, false}, Case{2, 1, 3, false},
                                           Case{2, 1, 1, false}, Case{4, 1, 6, false},
                                           Case{4, 1, 6, true}, Case{2, 2, 4, false},
                                           Case{2, 2, 2, true}, Case{4, 2, 8, false},
                                           Case{4, 2, 4, true}),
                         CaseName);

TEST(PipelineExecutorCreate, RejectsWhatTheScheduleCannotRun) {
  GroupHandle single;
  single.ranks = {0};
  PipelineConfig config;
  config.num_micro_batches = 0;
  EXPECT_THAT(PipelineExecutor::Create(single, config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least one micro-batch")));
  config.num_micro_batches = 2;
  config.num_chunks = 2;
  EXPECT_THAT(PipelineExecutor::Create(single, config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("needs pipeline_model_parallel_size > 1")));
  GroupHandle two;
  two.ranks = {0, 1};
  two.size = 2;
  EXPECT_THAT(PipelineExecutor::Create(two, config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has no communicator")));
}

TEST(SumOverGroup, SumsEveryTensorOverTheGroup) {
  if (!HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  const mt::v1::Layout layout = PipelineLayout(2);
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(2);
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto groups =
          ProcessGroups::Create(layout, rank, store, "gloo", std::chrono::milliseconds(60000));
      if (!groups.ok()) {
        errors[rank] = groups.status().ToString();
        return;
      }
      // The embedding group of pp=2 is both stages.
      at::Tensor a = at::full({2, 3}, rank + 1.0, at::kFloat);
      at::Tensor b = at::full({4}, 10.0 * (rank + 1), at::kFloat);
      absl::Status s = SumOverGroup((*groups)->embedding(), {a, b}, "test sum");
      if (!s.ok()) {
        errors[rank] = s.ToString();
        return;
      }
      EXPECT_TRUE(at::equal(a, at::full({2, 3}, 3.0, at::kFloat)));
      EXPECT_TRUE(at::equal(b, at::full({4}, 30.0, at::kFloat)));
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace
}  // namespace mt::parallel
