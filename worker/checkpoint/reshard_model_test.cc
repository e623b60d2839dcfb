// Resharding with real models: a tiny GPT trained under one (TP, PP, DP) layout, its ranks as
// threads over Gloo (one c10d::HashStore), saves through the Checkpointer at step 3 and goes
// on for 3 more steps; ranks of another layout load that checkpoint (RestoreTrainer) and
//   (a) compute the same logits on a fixed input: each layout's logits are gathered over PP
//       (stage by stage) and TP (the vocabulary shards side by side) to the whole [b, s, V];
//       fp32; tolerance 1e-5 of the largest logit where the TP size changes (the row-parallel
//       layers then sum their partial products in another order and the matmuls split their
//       inner dimension differently: a few float32 ulps), exact where it does not (the same
//       kernels on the same weights: PP and DP do not change the forward's arithmetic);
//   (b) train on with the losses of the first layout's own next 3 steps: 1e-5 relative where
//       the layout changes (2e-4 in bf16, see kBf16LossTol) (the gradient sums over TP/DP run in
//       another order; Adam, the LR schedule across warmup and cosine decay, clipping and the data
//       position all carry over), bit for bit for the same layout (the distributed optimizer's
//       exact resume);
//   (c) saved again at once under the new layout, hold every tensor of the first checkpoint
//       bit for bit (weights, fp32 master weights, Adam moments: the state round-trips through
//       any layout and through the distributed optimizer's gather and scatter).
// The vocabulary (90, padded to 96 by every TP size here with make_vocab_size_divisible_by 8)
// keeps the padding alike across layouts; VocabPaddingChange shows what a change of padding
// does (FORMAT.md, "Resharding").
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_matchers.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/reshard.h"
#include "common/spec/defaults.h"
#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/subprocess.h"
#include "tests/testutil/tiny_spec.h"
#include "worker/checkpoint/checkpointer.h"
#include "worker/checkpoint/trainer_state.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/data_sources.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/trainer.h"
#include "worker/model/gpt.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/rank_threads_testing.h"

namespace mt::checkpoint {
namespace {

constexpr int64_t kSeq = 16;
constexpr int64_t kVocab = 90;  // padded to 96 under TP 1, 2 and 4 (multiples of 8 * tp)
constexpr int kSaveStep = 3;
constexpr int kMoreSteps = 3;
constexpr double kLogitTol = 1e-5;  // of the largest |logit|, where the TP size changes
constexpr double kLossTol = 1e-5;   // relative, where the layout changes (fp32)
// bf16, where the layout changes: the reordered fp32 gradient sums move the fp32 master
// weights by float32 ulps, which now and then flips a bf16 rounding of a weight (one bf16 ulp
// = 2^-8 relative); measured 4e-5 on the case below.
constexpr double kBf16LossTol = 2e-4;

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  bool distributed_optimizer = false;
};

std::string NameOf(const Layout& l) {
  return absl::StrCat("tp", l.tp, "pp", l.pp, "dp", l.dp,
                      l.distributed_optimizer ? "_distopt" : "");
}

mt::v1::JobSpec Spec(const Layout& l, mt::v1::Precision precision, int64_t vocab) {
  testutil::TinySpecOptions o;
  o.num_layers = 4;
  o.seq_length = kSeq;
  o.vocab_size = vocab;
  o.micro_batch_size = 1;
  o.train_iters = kSaveStep + kMoreSteps;
  o.lr = 1e-2;
  o.lr_warmup_iters = 2;
  o.precision = precision;
  o.zero_dropout = true;  // the rank threads share one default generator
  mt::v1::JobSpec spec = testutil::TinyGptSpec(o);
  spec.mutable_model()->set_make_vocab_size_divisible_by(8);
  auto* p = spec.mutable_parallel();
  p->set_tensor_model_parallel_size(l.tp);
  p->set_pipeline_model_parallel_size(l.pp);
  p->set_data_parallel_size(l.dp);
  p->set_use_distributed_optimizer(l.distributed_optimizer);
  p->set_ddp_bucket_size(4096);  // ~13 buckets: ZeRO-1 segments cut parameters apart
  spec.mutable_training()->set_lr_decay_style(mt::v1::LR_DECAY_STYLE_COSINE);
  spec.mutable_training()->set_clip_grad(1.0);
  spec.mutable_evaluation()->set_eval_interval(0);
  spec.mutable_logging()->set_log_interval(100);
  mt::spec::ApplyDefaults(&spec);
  return spec;
}

// The training data of DP rank `dp_rank`, from global sample `consumed` on.
std::unique_ptr<engine::BatchSource> Source(int64_t vocab, int64_t consumed, int dp_rank,
                                            int dp_size) {
  auto s =
      engine::TokenSequenceSource::Create(engine::SyntheticTokens(8192, vocab, 11), kSeq, consumed);
  EXPECT_TRUE(s.ok()) << s.status();
  std::unique_ptr<engine::BatchSource> source = std::move(*s);
  if (dp_size == 1) return source;
  return std::make_unique<engine::DataParallelSlice>(std::move(source), dp_rank, dp_size);
}

// Model creation draws from the default generator, which the rank threads share.
std::mutex& RngMutex() {
  static std::mutex mu;
  return mu;
}

// Tensors handed between rank threads by key: a stage's output to the next stage, the last
// stage's logit shards to the test. Thread-safe.
class Board {
 public:
  void Put(const std::string& key, torch::Tensor t) {
    std::lock_guard<std::mutex> lock(mu_);
    items_[key] = std::move(t);
    cv_.notify_all();
  }
  // Waits up to 60 s; undefined when nothing came.
  torch::Tensor Get(const std::string& key) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(60), [&] { return items_.count(key) > 0; });
    auto it = items_.find(key);
    return it == items_.end() ? torch::Tensor() : it->second;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, torch::Tensor> items_;
};

// Every rank: its stage's forward on `tokens` [b, s] (TP collectives inside), the input from
// the previous stage of its own (dp, tp) through `board`; the last stage puts its vocabulary
// shard of the logits under "<tag>/dp<d>/logits<tp>".
void ShareLogits(engine::Trainer& trainer, const parallel::ProcessGroups& g,
                 const torch::Tensor& tokens, Board& board, const std::string& tag) {
  torch::NoGradGuard no_grad;
  model::GptModel& m = trainer.model();
  const std::string where = absl::StrCat(tag, "/dp", g.dp_rank(), "/tp", g.tp_rank(), "/stage");
  torch::Tensor x = m.shard().pre_process ? m.embedding->forward(tokens)
                                          : board.Get(absl::StrCat(where, g.pp_rank() - 1));
  ASSERT_TRUE(x.defined()) << "no input from stage " << g.pp_rank() - 1;
  x = m.decoder->forward(x);
  if (!m.shard().post_process) {
    board.Put(absl::StrCat(where, g.pp_rank()), x);
    return;
  }
  board.Put(absl::StrCat(tag, "/dp", g.dp_rank(), "/logits", g.tp_rank()),
            torch::nn::functional::linear(x, m.output_weight()).to(torch::kFloat).clone());
}

// The whole logits [b, s, vocab] of DP replica 0 (real vocabulary only).
torch::Tensor GatherLogits(Board& board, const std::string& tag, int tp, int64_t vocab) {
  std::vector<torch::Tensor> shards;
  for (int r = 0; r < tp; ++r) {
    torch::Tensor s = board.Get(absl::StrCat(tag, "/dp0/logits", r));
    if (!s.defined()) return s;
    shards.push_back(s);
  }
  return torch::cat(shards, -1).narrow(-1, 0, vocab);
}

torch::Tensor FixedTokens(int64_t vocab) {
  std::vector<int64_t> t = engine::SyntheticTokens(2 * kSeq, vocab, 99);
  return torch::tensor(t, torch::kLong).view({2, kSeq});
}

mt::v1::RankCoordinates CoordinatesOf(const parallel::ProcessGroups& g) {
  mt::v1::RankCoordinates c;
  c.set_rank(g.rank());
  c.set_tp(g.tp_rank());
  c.set_pp(g.pp_rank());
  c.set_dp(g.dp_rank());
  return c;
}

std::unique_ptr<engine::Trainer> MakeTrainer(const mt::v1::JobSpec& spec,
                                             std::shared_ptr<parallel::ProcessGroups> groups,
                                             parallel::Collectives* collectives, int64_t vocab,
                                             int64_t consumed) {
  engine::TrainerOptions o;
  o.log_progress = false;
  o.attention_backend = "math";
  o.sync_every_step = true;  // every step's loss is compared
  o.groups = groups;
  o.collectives = collectives;
  std::lock_guard<std::mutex> lock(RngMutex());
  auto t = engine::Trainer::Create(
      spec, o, Source(vocab, consumed, groups->dp_rank(), groups->dp().size), nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

absl::Status SaveNow(engine::Trainer& trainer, const std::string& dir, const mt::v1::JobSpec& spec,
                     const mt::v1::Layout& layout, const parallel::ProcessGroups& g,
                     SaveExchange* exchange, double loss) {
  CheckpointerOptions o;
  o.save_dir = dir;
  o.job_id = "j-reshard";
  o.spec = spec;
  o.layout = layout;
  o.coordinates = CoordinatesOf(g);
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> c, Checkpointer::Create(o, exchange));
  return c->Save(trainer, loss, std::nan(""));
}

// What a layout's run saw (rank 0's view; every rank reports the same losses).
struct RunResult {
  std::vector<double> losses;  // after the save (A) or the load (B)
  torch::Tensor logits;        // at the save (A) or right after the load (B)
  int64_t iteration = -1, consumed = -1, optimizer_steps = -1;
};

// Layout A: kSaveStep steps, logits, save into `dir`, kMoreSteps more.
RunResult TrainAndSave(const Layout& a, mt::v1::Precision precision, int64_t vocab,
                       const std::string& dir) {
  const mt::v1::JobSpec spec = Spec(a, precision, vocab);
  const mt::v1::Layout layout = parallel::testing::LayoutOf(a.tp, a.pp, a.dp);
  const torch::Tensor tokens = FixedTokens(vocab);
  LocalExchange exchange;
  Board board;
  std::vector<std::vector<double>> losses(a.tp * a.pp * a.dp);
  const auto errors = parallel::testing::RunRanks(
      layout, [&](int rank, std::shared_ptr<parallel::ProcessGroups> groups) {
        auto collectives = parallel::MakeCollectives(groups, 0);
        auto t = MakeTrainer(spec, groups, collectives.get(), vocab, 0);
        ASSERT_NE(t, nullptr);
        double loss = 0;
        for (int i = 0; i < kSaveStep; ++i) {
          MT_ASSERT_OK_AND_ASSIGN(engine::StepMetrics m, t->Step());
          loss = m.loss;
        }
        ShareLogits(*t, *groups, tokens, board, "a");
        MT_ASSERT_OK(SaveNow(*t, dir, spec, layout, *groups, &exchange, loss));
        for (int i = 0; i < kMoreSteps; ++i) {
          MT_ASSERT_OK_AND_ASSIGN(engine::StepMetrics m, t->Step());
          losses[rank].push_back(m.loss);
        }
      });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  RunResult r;
  r.losses = losses[0];
  r.logits = GatherLogits(board, "a", a.tp, vocab);
  return r;
}

// Layout B: load `dir`'s latest checkpoint, logits, save into `resaved` at once, kMoreSteps.
RunResult LoadAndTrain(const Layout& b, mt::v1::Precision precision, int64_t vocab,
                       const std::string& dir, const std::string& resaved) {
  const mt::v1::JobSpec spec = Spec(b, precision, vocab);
  const mt::v1::Layout layout = parallel::testing::LayoutOf(b.tp, b.pp, b.dp);
  const torch::Tensor tokens = FixedTokens(vocab);
  RunResult r;
  auto choice = ChooseLoad(dir);
  EXPECT_TRUE(choice.ok() && choice->has_value()) << choice.status();
  if (!choice.ok() || !choice->has_value()) return r;
  const LoadChoice load = **choice;
  LocalExchange exchange;
  Board board;
  std::vector<RunResult> runs(b.tp * b.pp * b.dp);
  const auto errors = parallel::testing::RunRanks(
      layout, [&](int rank, std::shared_ptr<parallel::ProcessGroups> groups) {
        auto collectives = parallel::MakeCollectives(groups, 0);
        auto t = MakeTrainer(spec, groups, collectives.get(), vocab,
                             load.manifest.trainer().consumed_samples());
        ASSERT_NE(t, nullptr);
        MT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<TensorSource> source, OpenAnySource(load.dir));
        RestoreOptions restore;
        restore.tp_rank = groups->tp_rank();
        restore.tp_size = groups->tp().size;
        MT_ASSERT_OK(RestoreTrainer(*t, *source, restore));
        runs[rank].iteration = t->iteration();
        runs[rank].consumed = t->consumed_samples();
        runs[rank].optimizer_steps = t->optimizer().step_count();
        ShareLogits(*t, *groups, tokens, board, "b");
        MT_ASSERT_OK(SaveNow(*t, resaved, spec, layout, *groups, &exchange, 0.0));
        for (int i = 0; i < kMoreSteps; ++i) {
          MT_ASSERT_OK_AND_ASSIGN(engine::StepMetrics m, t->Step());
          runs[rank].losses.push_back(m.loss);
        }
      });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  r = runs[0];
  r.logits = GatherLogits(board, "b", b.tp, vocab);
  return r;
}

// Every tensor of checkpoint `a` is in `b` with the same bits (the real vocabulary rows of
// the padded ones). rng.cpu is left out: the rank threads share one process-wide generator,
// which the other ranks' steps reseed while rank 0 snapshots it.
void ExpectSameState(const std::string& a_dir, const std::string& b_dir, int64_t vocab) {
  MT_ASSERT_OK_AND_ASSIGN(LoadChoice a, ChooseCheckpoint(a_dir));
  MT_ASSERT_OK_AND_ASSIGN(LoadChoice b, ChooseCheckpoint(b_dir));
  MT_ASSERT_OK_AND_ASSIGN(auto sa, OpenCheckpointSource(a.dir, a.manifest));
  MT_ASSERT_OK_AND_ASSIGN(auto sb, OpenCheckpointSource(b.dir, b.manifest));
  std::vector<std::string> names = sa->Names();
  for (const std::string& n : sb->Names()) names.push_back(n);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  int compared = 0, optimizer = 0;
  for (const std::string& name : names) {
    if (name == "rng.cpu") continue;
    MT_ASSERT_OK_AND_ASSIGN(HostTensor ta, sa->Full(name));
    MT_ASSERT_OK_AND_ASSIGN(HostTensor tb, sb->Full(name));
    if (IsVocabPadded(name)) {
      MT_ASSERT_OK_AND_ASSIGN(ta, ResizeRows(ta, vocab));
      MT_ASSERT_OK_AND_ASSIGN(tb, ResizeRows(tb, vocab));
    }
    ASSERT_EQ(ta.dtype, tb.dtype) << name;
    ASSERT_EQ(ta.shape, tb.shape) << name;
    EXPECT_TRUE(ta.data == tb.data) << name << " differs after the round trip";
    ++compared;
    if (name.rfind("optimizer.", 0) == 0) ++optimizer;
  }
  EXPECT_GT(compared, 100);
  EXPECT_GT(optimizer, 2 * compared / 3 - 1);  // the moments (and 16-bit masters) are there
}

double MaxAbs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

struct Case {
  Layout a, b;
  mt::v1::Precision precision = mt::v1::PRECISION_FP32;
};

class ReshardModelTest : public ::testing::TestWithParam<Case> {};

TEST_P(ReshardModelTest, LoadsWithTheSameLogitsAndTrainsOn) {
  if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  at::set_num_threads(1);
  const Case c = GetParam();
  const bool same_layout = c.a.tp == c.b.tp && c.a.pp == c.b.pp && c.a.dp == c.b.dp &&
                           c.a.distributed_optimizer == c.b.distributed_optimizer;
  const std::string dir = testutil::MakeTempDir("reshard_model");
  const RunResult a = TrainAndSave(c.a, c.precision, kVocab, dir);
  ASSERT_EQ(a.losses.size(), static_cast<size_t>(kMoreSteps));
  ASSERT_TRUE(a.logits.defined());
  const std::string resaved = testutil::MakeTempDir("reshard_model");
  const RunResult b = LoadAndTrain(c.b, c.precision, kVocab, dir, resaved);
  EXPECT_EQ(b.iteration, kSaveStep);
  EXPECT_EQ(b.consumed, kSaveStep * 4);
  EXPECT_EQ(b.optimizer_steps, kSaveStep);

  // (a) The logits.
  ASSERT_TRUE(b.logits.defined());
  ASSERT_EQ(b.logits.sizes(), a.logits.sizes());
  const double scale = MaxAbs(a.logits);
  const double diff = MaxAbs(b.logits - a.logits);
  EXPECT_GT(scale, 0.1);
  if (c.a.tp == c.b.tp) {
    EXPECT_EQ(diff, 0.0) << "same TP size: the same arithmetic";
  } else {
    EXPECT_LE(diff, kLogitTol * scale) << "largest |logit| " << scale;
  }
  // (b) Training continues.
  ASSERT_EQ(b.losses.size(), a.losses.size());
  double loss_diff = 0;
  for (size_t i = 0; i < a.losses.size(); ++i) {
    loss_diff = std::max(loss_diff, std::abs(b.losses[i] - a.losses[i]) / a.losses[i]);
  }
  std::cout << "logits: max |diff| " << diff << " (largest |logit| " << scale
            << "); losses after the load: max relative diff " << loss_diff << " (first "
            << a.losses.front() << ", last " << a.losses.back() << ")\n";
  for (size_t i = 0; i < a.losses.size(); ++i) {
    if (same_layout) {
      EXPECT_EQ(b.losses[i], a.losses[i]) << "step " << kSaveStep + 1 + i;  // bit for bit
    } else {
      const double tol = c.precision == mt::v1::PRECISION_BF16 ? kBf16LossTol : kLossTol;
      EXPECT_NEAR(b.losses[i], a.losses[i], tol * a.losses[i]) << "step " << kSaveStep + 1 + i;
    }
  }
  // (c) The state round-trips.
  ExpectSameState(dir, resaved, kVocab);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ReshardModelTest,
    ::testing::Values(
        // The three.
        Case{{2, 2, 1}, {1, 1, 2}}, Case{{1, 1, 1}, {4, 1, 1}}, Case{{2, 1, 2}, {1, 2, 1}},
        // The distributed optimizer: exact resume on its own layout, fp32 and bf16 (the fp32
        // master weights are gathered and scattered), and to other DP sizes, with and without.
        Case{{1, 1, 4, true}, {1, 1, 4, true}},
        Case{{1, 1, 4, true}, {1, 1, 4, true}, mt::v1::PRECISION_BF16},
        Case{{1, 1, 4, true}, {1, 1, 2, true}}, Case{{1, 1, 4, true}, {1, 1, 1, false}},
        Case{{1, 2, 1}, {2, 1, 2, true}},
        // bf16 into a pipeline: the last stage's copy of the tied embedding takes its fp32
        // master weights from the embedding's.
        Case{{1, 1, 2, true}, {1, 2, 1}, mt::v1::PRECISION_BF16}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(NameOf(info.param.a), "_to_", NameOf(info.param.b),
                          info.param.precision == mt::v1::PRECISION_BF16 ? "_bf16" : "");
    });

// A TP change that changes the vocabulary padding (100 tokens: 104 rows under TP 1, 128 under
// TP 4): the real tokens' logits stay the same (within the TP tolerance), but the padding rows
// take part in the softmax (as in Megatron) and the loader cuts or zero-fills them, so the
// loss is not the same function any more and training does not continue identically. FORMAT.md
// says so; a job that means to change TP keeps the padded size alike through
// make_vocab_size_divisible_by.
TEST(ReshardModelTest, VocabPaddingChangeKeepsTheRealLogitsButNotTheLoss) {
  if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  at::set_num_threads(1);
  constexpr int64_t kOddVocab = 100;
  const std::string dir = testutil::MakeTempDir("reshard_model");
  const RunResult a = TrainAndSave({1, 1, 1}, mt::v1::PRECISION_FP32, kOddVocab, dir);
  const RunResult b = LoadAndTrain({4, 1, 1}, mt::v1::PRECISION_FP32, kOddVocab, dir,
                                   testutil::MakeTempDir("reshard_model"));
  ASSERT_TRUE(a.logits.defined() && b.logits.defined());
  ASSERT_EQ(a.logits.size(-1), kOddVocab);
  EXPECT_LE(MaxAbs(b.logits - a.logits), kLogitTol * MaxAbs(a.logits));
  ASSERT_EQ(b.losses.size(), a.losses.size());
  ASSERT_FALSE(a.losses.empty());
  EXPECT_GT(std::abs(b.losses[0] - a.losses[0]), 1e-4 * a.losses[0])
      << "the padding rows (trained under TP 1, zero under TP 4) no longer count alike";
}

}  // namespace
}  // namespace mt::checkpoint
