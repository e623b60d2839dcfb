// Save and load of a tiny GPT's whole training state on the CPU: exact resume, async saves,
// weights-only loads, damaged checkpoints.
#include "worker/checkpoint/checkpointer.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/base/status_matchers.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/reshard.h"
#include "common/checkpoint/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/subprocess.h"
#include "tests/testutil/tiny_spec.h"
#include "worker/checkpoint/trainer_state.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/trainer.h"
#include "worker/model/gpt.h"

namespace mt::checkpoint {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kSeq = 16;
constexpr int64_t kVocab = 100;  // padded to 128

mt::v1::JobSpec TinySpec(mt::v1::Precision precision = mt::v1::PRECISION_FP32) {
  testutil::TinySpecOptions o;
  o.seq_length = kSeq;
  o.vocab_size = kVocab;
  o.train_iters = 10;
  o.lr_warmup_iters = 3;
  o.precision = precision;
  mt::v1::JobSpec spec = testutil::TinyGptSpec(o);
  // Dropout on: the resumed run must draw the same masks.
  spec.mutable_model()->set_hidden_dropout(0.1);
  spec.mutable_model()->set_attention_dropout(0.1);
  spec.mutable_training()->set_lr_decay_style(mt::v1::LR_DECAY_STYLE_COSINE);
  spec.mutable_evaluation()->set_eval_interval(3);
  spec.mutable_evaluation()->set_eval_iters(1);
  spec.mutable_logging()->set_log_interval(100);
  return spec;
}

std::unique_ptr<engine::Trainer> MakeTrainer(const mt::v1::JobSpec& spec,
                                             int64_t consumed_samples = 0,
                                             bool sync_every_step = true,
                                             bool evaluation_only = false) {
  engine::TrainerOptions o;
  o.evaluation_only = evaluation_only;
  o.log_progress = false;
  o.attention_backend = "math";
  o.sync_every_step = sync_every_step;  // losses of every step are compared
  auto train = engine::TokenSequenceSource::Create(engine::SyntheticTokens(4096, kVocab, 7), kSeq,
                                                   consumed_samples);
  auto valid = engine::TokenSequenceSource::Create(engine::SyntheticTokens(4096, kVocab, 8), kSeq);
  EXPECT_TRUE(train.ok() && valid.ok());
  auto t = engine::Trainer::Create(spec, o, std::move(*train), std::move(*valid));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// Runs until `until`, evaluating as the spec says; returns (train losses, valid losses).
std::pair<std::vector<double>, std::vector<double>> TrainTo(engine::Trainer& t, int64_t until) {
  std::vector<double> losses, valid;
  while (t.iteration() < until) {
    auto m = t.Step();
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) break;
    losses.push_back(m->loss);
    if (t.iteration() % t.plan().eval_interval == 0) {
      auto e = t.Evaluate();
      EXPECT_TRUE(e.ok());
      valid.push_back(e->loss);
    }
  }
  return {losses, valid};
}

std::unique_ptr<Checkpointer> MakeCheckpointer(const std::string& dir, const mt::v1::JobSpec& spec,
                                               SaveExchange* exchange, bool async = false,
                                               int64_t max_file_bytes = int64_t{256} << 20) {
  CheckpointerOptions o;
  o.save_dir = dir;
  o.async_save = async;
  o.max_file_bytes = max_file_bytes;
  o.io_threads = 2;
  o.job_id = "j-1";
  o.spec = spec;
  o.layout.set_world_size(1);
  o.layout.set_tensor_model_parallel_size(1);
  o.layout.set_pipeline_model_parallel_size(1);
  o.layout.set_data_parallel_size(1);
  auto c = Checkpointer::Create(o, exchange);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

// Resumes from `dir` the way a rank does: pick (every file read and verified once, this rank's
// kept in memory), rebuild the data at the saved position, load from the kept files.
std::unique_ptr<engine::Trainer> Resume(const std::string& dir, const mt::v1::JobSpec& spec,
                                        RestoreOptions options = {}) {
  LoadOptions load;
  load.keep_own_files = true;
  load.io_threads = 2;
  auto choice = ChooseLoad(dir, load);
  EXPECT_TRUE(choice.ok() && choice->has_value()) << choice.status();
  const auto& c = **choice;
  // A world of one keeps every file: the restore reads none from the disk.
  EXPECT_NE(c.files, nullptr);
  if (c.files != nullptr) {
    EXPECT_EQ(c.files->size(), static_cast<size_t>(c.manifest.files_size()));
  }
  const bool weights_only = options.weights_only || !c.manifest.has_trainer();
  auto t = MakeTrainer(spec, weights_only ? 0 : c.manifest.trainer().consumed_samples());
  auto source = OpenLoadSource(c);
  EXPECT_TRUE(source.ok()) << source.status();
  absl::Status s = RestoreTrainer(*t, **source, options);
  EXPECT_TRUE(s.ok()) << s;
  return t;
}

class ExactResumeTest : public ::testing::TestWithParam<mt::v1::Precision> {};

// N steps straight and N/2 + save + a fresh trainer + load + N/2 give the same losses, bit for
// bit (training and validation; dropout on; warmup and cosine decay crossing the save).
TEST_P(ExactResumeTest, SplitRunMatchesStraightRunBitForBit) {
  const mt::v1::JobSpec spec = TinySpec(GetParam());
  auto straight = MakeTrainer(spec);
  auto [losses, valid] = TrainTo(*straight, 10);
  ASSERT_EQ(losses.size(), 10u);

  const std::string dir = testutil::MakeTempDir("ckpt");
  LocalExchange exchange;
  auto first = MakeTrainer(spec);
  auto [losses_a, valid_a] = TrainTo(*first, 5);
  {
    auto ckpt = MakeCheckpointer(dir, spec, &exchange);
    MT_ASSERT_OK(ckpt->Save(*first, losses_a.back(), valid_a.back()));
    auto done = ckpt->TakeFinished();
    ASSERT_EQ(done.size(), 1u);
    EXPECT_TRUE(done[0].committed);
    EXPECT_GT(done[0].bytes, 0);
  }
  first.reset();
  auto resumed = Resume(dir, spec);
  EXPECT_EQ(resumed->iteration(), 5);
  EXPECT_EQ(resumed->consumed_samples(), 20);
  auto [losses_b, valid_b] = TrainTo(*resumed, 10);
  losses_a.insert(losses_a.end(), losses_b.begin(), losses_b.end());
  valid_a.insert(valid_a.end(), valid_b.begin(), valid_b.end());
  ASSERT_EQ(losses_a.size(), losses.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    EXPECT_EQ(losses_a[i], losses[i]) << "step " << i + 1;  // exact: tolerance 0
  }
  EXPECT_EQ(valid_a, valid);
}

INSTANTIATE_TEST_SUITE_P(Precisions, ExactResumeTest,
                         ::testing::Values(mt::v1::PRECISION_FP32, mt::v1::PRECISION_BF16),
                         [](const auto& info) {
                           return info.param == mt::v1::PRECISION_BF16 ? "bf16" : "fp32";
                         });

TEST(CheckpointerTest, ManifestDescribesTheState) {
  const mt::v1::JobSpec spec = TinySpec(mt::v1::PRECISION_BF16);
  const std::string dir = testutil::MakeTempDir("ckpt");
  LocalExchange exchange;
  auto t = MakeTrainer(spec);
  TrainTo(*t, 3);
  auto ckpt = MakeCheckpointer(dir, spec, &exchange);
  MT_ASSERT_OK(ckpt->Save(*t, 2.5, 2.75));
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m, ReadManifest(dir + "/iter_0000003"));
  EXPECT_EQ(m.step(), 3);
  EXPECT_EQ(m.consumed_samples(), 12);
  EXPECT_EQ(m.loss(), 2.5);
  EXPECT_EQ(m.job_id(), "j-1");
  EXPECT_EQ(m.model().padded_vocab_size(), 128);
  EXPECT_EQ(m.trainer().optimizer_steps(), 3);
  EXPECT_EQ(m.trainer().optimizer(), "adamw");
  EXPECT_EQ(m.trainer().seed(), 1234u);
  EXPECT_EQ(m.trainer().valid_consumed_samples(), 4);  // one evaluation of one batch
  EXPECT_EQ(m.spec().model().hidden_size(), 32);
  std::map<std::string, std::string> dtypes;
  for (const auto& tensor : m.tensors()) dtypes[tensor.name()] = tensor.dtype();
  EXPECT_EQ(dtypes["model.decoder.layers.1.mlp.linear_fc1.weight"], "BF16");
  EXPECT_EQ(dtypes["optimizer.master.decoder.layers.1.mlp.linear_fc1.weight"], "F32");
  EXPECT_EQ(dtypes["optimizer.exp_avg_sq.embedding.word_embeddings.weight"], "F32");
  EXPECT_EQ(dtypes["rng.cpu"], "U8");
  MT_ASSERT_OK_AND_ASSIGN(int64_t latest, ReadLatest(dir));
  EXPECT_EQ(latest, 3);
  // Saving the same step again is a no-op.
  MT_ASSERT_OK(ckpt->Save(*t, 2.5, 2.75));
  EXPECT_EQ(ckpt->TakeFinished().size(), 1u);
}

// Async save: the state is snapshotted at the call; training on does not change what is saved.
TEST(CheckpointerTest, AsyncSaveWritesTheSnapshotWhileTrainingGoesOn) {
  const mt::v1::JobSpec spec = TinySpec();
  const std::string dir = testutil::MakeTempDir("ckpt");
  LocalExchange exchange;
  auto t = MakeTrainer(spec);
  TrainTo(*t, 4);
  torch::Tensor before = t->model().named_parameters()["decoder.final_layernorm.weight"].clone();
  auto ckpt = MakeCheckpointer(dir, spec, &exchange, /*async=*/true);
  MT_ASSERT_OK(ckpt->Prepare(*t));  // the host buffer up front, as a run does
  MT_ASSERT_OK(ckpt->Save(*t, 1.0, 1.0));
  TrainTo(*t, 6);                          // overlaps the write
  MT_ASSERT_OK(ckpt->Save(*t, 1.0, 1.0));  // waits for the first: one in flight
  ckpt->Wait();
  auto done = ckpt->TakeFinished();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].step, 4);
  EXPECT_EQ(done[1].step, 6);
  MT_EXPECT_OK(done[0].status);
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m, ReadManifest(dir + "/iter_0000004"));
  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenCheckpointSource(dir + "/iter_0000004", m));
  MT_ASSERT_OK_AND_ASSIGN(HostTensor saved, source->Full("model.decoder.final_layernorm.weight"));
  ASSERT_EQ(saved.nbytes(), static_cast<size_t>(before.nbytes()));
  EXPECT_EQ(std::memcmp(saved.data.data(), before.data_ptr(), saved.nbytes()), 0);
  MT_ASSERT_OK_AND_ASSIGN(int64_t latest, ReadLatest(dir));
  EXPECT_EQ(latest, 6);
  // The second save reused the first one's host buffer: it holds step 6's state.
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m6, ReadManifest(dir + "/iter_0000006"));
  MT_ASSERT_OK_AND_ASSIGN(auto source6, OpenCheckpointSource(dir + "/iter_0000006", m6));
  MT_ASSERT_OK_AND_ASSIGN(HostTensor saved6, source6->Full("model.decoder.final_layernorm.weight"));
  torch::Tensor now = t->model().named_parameters()["decoder.final_layernorm.weight"];
  EXPECT_FALSE(torch::equal(now, before));
  EXPECT_EQ(std::memcmp(saved6.data.data(), now.data_ptr(), saved6.nbytes()), 0);
}

// --finetune / --no-load-optim: weights only; iteration 0 and a fresh optimizer.
TEST(CheckpointerTest, WeightsOnlyLoadsStartAfresh) {
  const mt::v1::JobSpec spec = TinySpec();
  const std::string dir = testutil::MakeTempDir("ckpt");
  LocalExchange exchange;
  auto t = MakeTrainer(spec);
  TrainTo(*t, 3);
  MT_ASSERT_OK(MakeCheckpointer(dir, spec, &exchange)->Save(*t, 1.0, 1.0));
  RestoreOptions weights_only;
  weights_only.weights_only = true;
  auto tuned = Resume(dir, spec, weights_only);
  EXPECT_EQ(tuned->iteration(), 0);
  EXPECT_EQ(tuned->consumed_samples(), 0);
  EXPECT_EQ(tuned->optimizer().step_count(), 0);
  EXPECT_EQ(tuned->optimizer().exp_avg().abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(
      torch::equal(tuned->model().named_parameters()["decoder.layers.0.mlp.linear_fc1.weight"],
                   t->model().named_parameters()["decoder.layers.0.mlp.linear_fc1.weight"]));
}

// A trainer built for evaluation only (no optimizer) takes a checkpoint's weights, whatever
// the restore options ask, and evaluates as a full trainer given the same weights; it has no
// training state to save, and its save is refused before any file is written.
TEST(CheckpointerTest, AnEvaluationOnlyTrainerRestoresTheWeightsAndRefusesToSave) {
  const mt::v1::JobSpec spec = TinySpec(mt::v1::PRECISION_BF16);
  const std::string dir = testutil::MakeTempDir("ckpt");
  LocalExchange exchange;
  auto t = MakeTrainer(spec);
  TrainTo(*t, 3);
  MT_ASSERT_OK(MakeCheckpointer(dir, spec, &exchange)->Save(*t, 1.0, 1.0));
  MT_ASSERT_OK_AND_ASSIGN(LoadChoice c, ChooseCheckpoint(dir));
  auto eval = MakeTrainer(spec, 0, true, /*evaluation_only=*/true);
  ASSERT_FALSE(eval->has_optimizer());
  {
    MT_ASSERT_OK_AND_ASSIGN(auto source, OpenCheckpointSource(c.dir, c.manifest));
    MT_ASSERT_OK(RestoreTrainer(*eval, *source, {}));  // not weights_only: forced
  }
  EXPECT_EQ(eval->iteration(), 0);
  const auto want = t->model().named_parameters();
  for (const auto& [name, param] : eval->Parameters()) {
    EXPECT_TRUE(torch::equal(param, want[name])) << name;
  }
  RestoreOptions weights_only;
  weights_only.weights_only = true;
  auto full = MakeTrainer(spec);
  {
    MT_ASSERT_OK_AND_ASSIGN(auto source, OpenCheckpointSource(c.dir, c.manifest));
    MT_ASSERT_OK(RestoreTrainer(*full, *source, weights_only));
  }
  MT_ASSERT_OK_AND_ASSIGN(engine::EvalMetrics a, eval->Evaluate());
  MT_ASSERT_OK_AND_ASSIGN(engine::EvalMetrics b, full->Evaluate());
  EXPECT_EQ(a.loss, b.loss);
  const std::string other = testutil::MakeTempDir("ckpt-eval");
  EXPECT_THAT(MakeCheckpointer(other, spec, &exchange)->Save(*eval, 1.0, 1.0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("evaluation only")));
  EXPECT_TRUE(std::filesystem::is_empty(other));
}

// A checkpoint of another model shape is refused naming the tensor.
TEST(CheckpointerTest, ShapeMismatchIsAnError) {
  const mt::v1::JobSpec spec = TinySpec();
  const std::string dir = testutil::MakeTempDir("ckpt");
  LocalExchange exchange;
  auto t = MakeTrainer(spec);
  MT_ASSERT_OK(MakeCheckpointer(dir, spec, &exchange)->Save(*t, 1.0, 1.0));
  mt::v1::JobSpec wider = spec;
  wider.mutable_model()->set_hidden_size(64);
  auto other = MakeTrainer(wider);
  MT_ASSERT_OK_AND_ASSIGN(LoadChoice c, ChooseCheckpoint(dir));
  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenCheckpointSource(c.dir, c.manifest));
  EXPECT_THAT(RestoreTrainer(*other, *source, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.embedding")));
}

// A shard split into many small files (version 2): every file is listed with its own size
// and SHA-256, the load reads each once into memory, and the resumed run's losses are those of
// the straight run, bit for bit.
TEST(CheckpointerTest, ShardSplitOverFilesResumesExactly) {
  const mt::v1::JobSpec spec = TinySpec(mt::v1::PRECISION_BF16);
  auto straight = MakeTrainer(spec);
  auto [losses, valid] = TrainTo(*straight, 8);
  const std::string dir = testutil::MakeTempDir("ckpt");
  LocalExchange exchange;
  auto first = MakeTrainer(spec);
  TrainTo(*first, 4);
  {
    auto ckpt = MakeCheckpointer(dir, spec, &exchange, /*async=*/false, /*max_file_bytes=*/16384);
    MT_ASSERT_OK(ckpt->Save(*first, 1.0, 1.0));
    auto done = ckpt->TakeFinished();
    ASSERT_EQ(done.size(), 1u);
    EXPECT_GT(done[0].files, 4);
  }
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m, ReadManifest(dir + "/iter_0000004"));
  EXPECT_EQ(m.format_version(), 2);
  ASSERT_GT(m.files_size(), 4);
  int64_t total = 0;
  for (int i = 0; i < m.files_size(); ++i) {
    EXPECT_EQ(m.files(i).path(), ShardFileName(0, 0, i, m.files_size()));
    MT_ASSERT_OK_AND_ASSIGN(SafetensorsIndex index,
                            ReadSafetensorsIndex(dir + "/iter_0000004/" + m.files(i).path()));
    EXPECT_EQ(index.file_size, static_cast<uint64_t>(m.files(i).size_bytes()));
    // Data within the bound, or a single tensor over it.
    EXPECT_TRUE(index.file_size - index.data_start <= 16384 || index.tensors.size() == 1)
        << m.files(i).path();
    total += m.files(i).size_bytes();
  }
  LoadOptions load;
  load.keep_own_files = true;
  MT_ASSERT_OK_AND_ASSIGN(std::optional<LoadChoice> choice, ChooseLoad(dir, load));
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->bytes_read, total);
  ASSERT_NE(choice->files, nullptr);
  EXPECT_EQ(choice->files->bytes(), total);

  auto resumed = Resume(dir, spec);
  auto [losses_b, valid_b] = TrainTo(*resumed, 8);
  ASSERT_EQ(losses_b.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(losses_b[i], losses[4 + i]) << "step " << 5 + i;
}

// One damaged file of a split shard: the load reports it and takes the previous checkpoint.
TEST(CheckpointerTest, ADamagedFileOfASplitShardFallsBack) {
  const mt::v1::JobSpec spec = TinySpec();
  const std::string dir = testutil::MakeTempDir("ckpt");
  LocalExchange exchange;
  auto t = MakeTrainer(spec);
  auto ckpt = MakeCheckpointer(dir, spec, &exchange, /*async=*/false, /*max_file_bytes=*/16384);
  TrainTo(*t, 2);
  MT_ASSERT_OK(ckpt->Save(*t, 1.0, 1.0));
  TrainTo(*t, 4);
  MT_ASSERT_OK(ckpt->Save(*t, 1.0, 1.0));
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m, ReadManifest(dir + "/iter_0000004"));
  ASSERT_GT(m.files_size(), 2);
  const std::string victim = m.files(1).path();
  {
    const std::string path = dir + "/iter_0000004/" + victim;
    FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, -3, SEEK_END);
    const int c = std::fgetc(f);
    std::fseek(f, -3, SEEK_END);
    std::fputc(c ^ 0x01, f);
    std::fclose(f);
  }
  LoadOptions load;
  load.keep_own_files = true;
  MT_ASSERT_OK_AND_ASSIGN(std::optional<LoadChoice> choice, ChooseLoad(dir, load));
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->manifest.step(), 2);
  ASSERT_EQ(choice->problems.size(), 1u);
  EXPECT_THAT(choice->problems[0], HasSubstr(victim + ": sha256 mismatch"));
  auto resumed = Resume(dir, spec);
  EXPECT_EQ(resumed->iteration(), 2);
}

// Every tensor of a trainer's checkpointed state, cloned (contiguous, on the CPU).
std::vector<StateTensor> StateOf(engine::Trainer& t) {
  auto tensors = CollectTensors(t);
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  std::vector<StateTensor> out;
  if (!tensors.ok()) return out;
  for (const StateTensor& s : *tensors) {
    out.push_back({s.name, s.tensor.detach().to(torch::kCPU).contiguous().clone(), s.split_dim});
  }
  return out;
}

// Bit for bit (memcmp of the bytes: -0.0 and NaN payloads count).
void ExpectSameState(const std::vector<StateTensor>& got, const std::vector<StateTensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].name, want[i].name);
    ASSERT_EQ(got[i].tensor.scalar_type(), want[i].tensor.scalar_type()) << got[i].name;
    ASSERT_EQ(got[i].tensor.sizes(), want[i].tensor.sizes()) << got[i].name;
    EXPECT_EQ(
        std::memcmp(got[i].tensor.data_ptr(), want[i].tensor.data_ptr(), got[i].tensor.nbytes()), 0)
        << got[i].name << " differs";
  }
}

// Flips one bit near the end of `path`.
void FlipBit(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr) << path;
  std::fseek(f, -3, SEEK_END);
  const int c = std::fgetc(f);
  std::fseek(f, -3, SEEK_END);
  std::fputc(c ^ 0x01, f);
  std::fclose(f);
}

// The load path of a GPU rank, with the CPU standing in for the device: the kept files are
// copied block by block to the staging device while they are read, and the restore takes every
// tensor from those copies (none assembled, none from host memory); the restored state equals
// the saved one bit for bit (16-bit weights, fp32 masters, moments), and training continues
// with the straight run's losses.
TEST(CheckpointerTest, StagedLoadRestoresEveryTensorFromTheDeviceCopyExactly) {
  const mt::v1::JobSpec spec = TinySpec(mt::v1::PRECISION_BF16);
  auto straight = MakeTrainer(spec);
  auto [losses, valid] = TrainTo(*straight, 6);
  const std::string dir = testutil::MakeTempDir("ckpt");
  LocalExchange exchange;
  auto first = MakeTrainer(spec);
  TrainTo(*first, 3);
  const std::vector<StateTensor> saved = StateOf(*first);
  MT_ASSERT_OK(MakeCheckpointer(dir, spec, &exchange, false, 16384)->Save(*first, 1.0, 1.0));

  LoadOptions load;
  load.keep_own_files = true;
  load.io_threads = 2;
  load.stage_device = "cpu";
  MT_ASSERT_OK_AND_ASSIGN(std::optional<LoadChoice> choice, ChooseLoad(dir, load));
  ASSERT_TRUE(choice.has_value());
  auto staged = std::dynamic_pointer_cast<const StagedFiles>(choice->attachment);
  ASSERT_NE(staged, nullptr);
  EXPECT_EQ(staged->bytes(), choice->files->bytes());  // every kept file, whole
  auto resumed = MakeTrainer(spec, choice->manifest.trainer().consumed_samples());
  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenLoadSource(*choice));
  ASSERT_NE(dynamic_cast<StagedSource*>(source.get()), nullptr);
  RestoreStats stats;
  RestoreOptions options;
  options.stats = &stats;
  MT_ASSERT_OK(RestoreTrainer(*resumed, *source, options));
  EXPECT_GT(stats.from_staged, 0);
  EXPECT_EQ(stats.from_memory, 0);
  EXPECT_EQ(stats.from_assembled, 0);
  ExpectSameState(StateOf(*resumed), saved);
  auto [losses_b, valid_b] = TrainTo(*resumed, 6);
  ASSERT_EQ(losses_b.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(losses_b[i], losses[3 + i]) << "step " << 4 + i;

  // Without staging the same bytes come from host memory, straight into place.
  load.stage_device = "";
  MT_ASSERT_OK_AND_ASSIGN(choice, ChooseLoad(dir, load));
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->attachment, nullptr);
  auto plain = MakeTrainer(spec, choice->manifest.trainer().consumed_samples());
  MT_ASSERT_OK_AND_ASSIGN(source, OpenLoadSource(*choice));
  stats = {};
  MT_ASSERT_OK(RestoreTrainer(*plain, *source, options));
  EXPECT_EQ(stats.from_staged, 0);
  EXPECT_GT(stats.from_memory, 0);
  EXPECT_EQ(stats.from_assembled, 0);
  ExpectSameState(StateOf(*plain), saved);
}

// The newest checkpoint's LAST file is damaged (the one read last): its other files were
// already read and copied to the staging device when the damage shows. The load falls back to
// the previous checkpoint, and the trainer ends with exactly that checkpoint's state (every
// tensor, bit for bit, and its counters): nothing of the damaged one reaches it. With no valid
// checkpoint left the choice fails before any trainer is touched.
TEST(CheckpointerTest, DamagedLastFileOfTheNewestLoadsExactlyThePrevious) {
  const mt::v1::JobSpec spec = TinySpec(mt::v1::PRECISION_BF16);
  const std::string dir = testutil::MakeTempDir("ckpt");
  LocalExchange exchange;
  auto t = MakeTrainer(spec);
  auto ckpt = MakeCheckpointer(dir, spec, &exchange, /*async=*/false, /*max_file_bytes=*/16384);
  TrainTo(*t, 2);
  const std::vector<StateTensor> at2 = StateOf(*t);
  const int64_t consumed2 = t->consumed_samples();
  MT_ASSERT_OK(ckpt->Save(*t, 1.0, 1.0));
  TrainTo(*t, 4);
  MT_ASSERT_OK(ckpt->Save(*t, 1.0, 1.0));
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m4, ReadManifest(dir + "/iter_0000004"));
  ASSERT_GT(m4.files_size(), 2);
  const std::string victim = m4.files(m4.files_size() - 1).path();
  FlipBit(dir + "/iter_0000004/" + victim);

  LoadOptions load;
  load.keep_own_files = true;
  load.io_threads = 2;
  load.stage_device = "cpu";
  MT_ASSERT_OK_AND_ASSIGN(std::optional<LoadChoice> choice, ChooseLoad(dir, load));
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->manifest.step(), 2);
  ASSERT_EQ(choice->problems.size(), 1u);
  EXPECT_THAT(choice->problems[0], HasSubstr(victim + ": sha256 mismatch"));
  ASSERT_NE(choice->attachment, nullptr);
  // A trainer that has moved on (as a restarted rank's fresh one differs too): every tensor
  // must be overwritten with step 2's.
  auto resumed = MakeTrainer(spec, choice->manifest.trainer().consumed_samples());
  TrainTo(*resumed, 1);
  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenLoadSource(*choice));
  RestoreStats stats;
  RestoreOptions options;
  options.stats = &stats;
  MT_ASSERT_OK(RestoreTrainer(*resumed, *source, options));
  EXPECT_GT(stats.from_staged, 0);
  EXPECT_EQ(stats.from_memory + stats.from_assembled, 0);
  ExpectSameState(StateOf(*resumed), at2);
  EXPECT_EQ(resumed->iteration(), 2);
  EXPECT_EQ(resumed->consumed_samples(), consumed2);

  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m2, ReadManifest(dir + "/iter_0000002"));
  FlipBit(dir + "/iter_0000002/" + m2.files(m2.files_size() - 1).path());
  EXPECT_THAT(ChooseLoad(dir, load).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("no loadable checkpoint")));
}

// Without sync_every_step a step's loss stays on the device except at log steps; a save at
// such a step passes NaN and the manifest still gets the step's real loss (read at the save),
// equal to what a trainer that reads every step reports for it.
TEST(CheckpointerTest, ManifestRecordsTheLossOfANonLogStep) {
  const mt::v1::JobSpec spec = TinySpec();  // log_interval 100
  auto reference = MakeTrainer(spec, 0, /*sync_every_step=*/true);
  auto [losses, valid] = TrainTo(*reference, 3);
  ASSERT_TRUE(std::isfinite(losses[2]));

  auto lazy = MakeTrainer(spec, 0, /*sync_every_step=*/false);
  double step3 = 0;
  for (int i = 0; i < 3; ++i) {
    MT_ASSERT_OK_AND_ASSIGN(engine::StepMetrics m, lazy->Step());
    step3 = m.loss;
    if (lazy->iteration() % lazy->plan().eval_interval == 0) {
      MT_ASSERT_OK(lazy->Evaluate().status());
    }
  }
  ASSERT_TRUE(std::isnan(step3)) << "step 3 is not a log step: its loss was not read";
  const std::string dir = testutil::MakeTempDir("ckpt");
  LocalExchange exchange;
  MT_ASSERT_OK(MakeCheckpointer(dir, spec, &exchange)->Save(*lazy, step3, std::nan("")));
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m, ReadManifest(dir + "/iter_0000003"));
  EXPECT_EQ(m.loss(), losses[2]);  // exact: the same computation on the CPU
  // Read once; asking again gives the same value without another read.
  MT_ASSERT_OK_AND_ASSIGN(double again, lazy->LastStepLoss());
  EXPECT_EQ(again, losses[2]);
  // The next log-interval mean still counts every step once.
  auto next = lazy->Step();
  MT_ASSERT_OK(next.status());
  EXPECT_TRUE(std::isnan(next->loss));
  MT_ASSERT_OK_AND_ASSIGN(double step4, lazy->LastStepLoss());
  auto [more, more_valid] = TrainTo(*reference, 4);
  EXPECT_EQ(step4, more[0]);
}

}  // namespace
}  // namespace mt::checkpoint
