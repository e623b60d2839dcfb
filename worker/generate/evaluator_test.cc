// A trained tiny GPT saved as a real checkpoint, loaded back for inference: the same logits as
// the trainer's model, the same validation loss as the trainer's own evaluation on the same
// batches, and a clear error for a path without a checkpoint.
#include "worker/generate/evaluator.h"

#include <ATen/ATen.h>

#include <cmath>
#include <memory>
#include <string>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/subprocess.h"
#include "tests/testutil/tiny_spec.h"
#include "worker/checkpoint/checkpointer.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/trainer.h"
#include "worker/generate/inference_model.h"
#include "worker/model/gpt.h"

namespace mt::generate::evaluator_test {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kSeq = 16;
constexpr int64_t kVocab = 100;  // padded to 128

std::unique_ptr<engine::BatchSource> ValidSource() {
  auto s = engine::TokenSequenceSource::Create(engine::SyntheticTokens(4096, kVocab, 8), kSeq);
  EXPECT_TRUE(s.ok());
  return std::move(*s);
}

// Trains 6 steps (eval 3 micro-batches of 2) and saves into `dir`.
std::unique_ptr<engine::Trainer> TrainAndSave(const std::string& dir) {
  testutil::TinySpecOptions o;
  o.seq_length = kSeq;
  o.vocab_size = kVocab;
  o.train_iters = 6;
  mt::v1::JobSpec spec = testutil::TinyGptSpec(o);
  spec.mutable_evaluation()->set_eval_iters(3);
  spec.mutable_training()->set_global_batch_size(2);  // one micro-batch of 2 per step
  engine::TrainerOptions to;
  to.log_progress = false;
  to.attention_backend = "math";
  auto train = engine::TokenSequenceSource::Create(engine::SyntheticTokens(4096, kVocab, 7), kSeq);
  EXPECT_TRUE(train.ok());
  auto t = engine::Trainer::Create(spec, to, std::move(*train), ValidSource());
  EXPECT_TRUE(t.ok()) << t.status();
  for (int i = 0; i < 6; ++i) EXPECT_TRUE((*t)->Step().ok());
  checkpoint::LocalExchange exchange;
  checkpoint::CheckpointerOptions co;
  co.save_dir = dir;
  co.job_id = "j-eval";
  co.spec = spec;
  co.io_threads = 1;
  auto c = checkpoint::Checkpointer::Create(co, &exchange);
  EXPECT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->Save(**t, NAN, NAN).ok());
  return std::move(*t);
}

TEST(EvaluatorTest, LoadedCheckpointEvaluatesLikeTheTrainer) {
  const std::string dir = testutil::MakeTempDir("eval");
  std::unique_ptr<engine::Trainer> trainer = TrainAndSave(dir);
  ASSERT_NE(trainer, nullptr);
  InferenceModelOptions io;
  io.attention = "math";
  MT_ASSERT_OK_AND_ASSIGN(InferenceModel loaded, LoadInferenceModel(dir, io));
  EXPECT_EQ(loaded.manifest.step(), 6);
  EXPECT_EQ(loaded.model->config().vocab_size, kVocab);

  // The same function: logits of the loaded model equal the trainer's model's.
  torch::NoGradGuard no_grad;
  model::GptModel& trained = trainer->model();
  trained.eval();
  const torch::Tensor tokens = torch::randint(0, kVocab, {2, kSeq}, torch::kLong);
  EXPECT_TRUE(torch::allclose(loaded.model->forward(tokens), trained.forward(tokens), 0, 1e-6));
  trained.train();

  // The trainer's evaluation (3 micro-batches of 2 from the start of the validation source)
  // against the evaluator on a fresh source with the same tokens: equal within 1e-6.
  MT_ASSERT_OK_AND_ASSIGN(engine::EvalMetrics theirs, trainer->Evaluate());
  std::unique_ptr<engine::BatchSource> source = ValidSource();
  MT_ASSERT_OK_AND_ASSIGN(EvalResult ours, EvaluateLoss(*loaded.model, *source, 2, 3));
  EXPECT_NEAR(ours.loss, theirs.loss, 1e-6);
  EXPECT_NEAR(ours.perplexity, theirs.perplexity, 1e-5 * theirs.perplexity);
  EXPECT_EQ(ours.batches, 3);
  EXPECT_EQ(ours.tokens, 3 * 2 * kSeq);
  // Random tokens: no model does much better than the uniform guess, ln(100) = 4.6.
  EXPECT_TRUE(std::isfinite(ours.loss));
  EXPECT_NEAR(ours.loss, std::log(100.0), 1.0);
}

TEST(EvaluatorTest, BadInput) {
  EXPECT_THAT(LoadInferenceModel("/nonexistent/ckpt", {}).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/ckpt")));
  const std::string empty = testutil::MakeTempDir("empty");
  EXPECT_THAT(LoadInferenceModel(empty, {}).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no checkpoint")));
  InferenceModelOptions bad;
  bad.dtype = "int4";
  EXPECT_THAT(LoadInferenceModel(empty, bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--dtype")));
  bad = {};
  bad.device = "tpu";
  EXPECT_THAT(LoadInferenceModel(empty, bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--device")));

  model::GptConfig c;
  c.num_layers = 1;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.seq_length = 8;
  c.vocab_size = 50;
  auto gpt = model::GptModel::Create(c.Resolve());
  ASSERT_TRUE(gpt.ok());
  // Samples longer than the model's positions, and token ids beyond its vocabulary.
  auto long_source = engine::TokenSequenceSource::Create(engine::SyntheticTokens(1000, 50, 1), 16);
  ASSERT_TRUE(long_source.ok());
  EXPECT_THAT(EvaluateLoss(**gpt, **long_source, 2, 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--context-length")));
  auto wide = engine::TokenSequenceSource::Create(engine::SyntheticTokens(1000, 100, 1), 8);
  ASSERT_TRUE(wide.ok());
  EXPECT_THAT(EvaluateLoss(**gpt, **wide, 2, 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--data-path")));
  EXPECT_THAT(EvaluateLoss(**gpt, **wide, 0, 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--micro-batch-size")));
}

}  // namespace
}  // namespace mt::generate::evaluator_test
