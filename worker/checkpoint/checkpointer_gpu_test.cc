// Checkpoints of a trainer on a GPU (label `gpu`; skips without CUDA): the async save's
// snapshot goes through the pinned host buffer (Prepare) while training goes on, the shard is
// split over several files, and a fresh GPU trainer loaded from it (one pass, from the verified
// bytes in memory) holds exactly the state of the saved step, tensor by tensor (tolerance 0:
// bytes are copied, never computed).
#include <torch/cuda.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/base/status_matchers.h"
#include "gtest/gtest.h"
#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/subprocess.h"
#include "tests/testutil/tiny_spec.h"
#include "worker/checkpoint/checkpointer.h"
#include "worker/checkpoint/trainer_state.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/trainer.h"

namespace mt::checkpoint {
namespace {

constexpr int64_t kSeq = 32;
constexpr int64_t kVocab = 500;

mt::v1::JobSpec Spec() {
  testutil::TinySpecOptions o;
  o.hidden_size = 128;
  o.seq_length = kSeq;
  o.vocab_size = kVocab;
  o.micro_batch_size = 4;
  o.train_iters = 10;
  o.lr_warmup_iters = 2;
  o.seed = 99;
  o.precision = mt::v1::PRECISION_BF16;
  mt::v1::JobSpec spec = testutil::TinyGptSpec(o);
  spec.mutable_evaluation()->set_eval_interval(0);
  spec.mutable_logging()->set_log_interval(100);
  return spec;
}

std::unique_ptr<engine::Trainer> MakeTrainer(const mt::v1::JobSpec& spec, int64_t consumed) {
  engine::TrainerOptions o;
  o.device = "cuda";
  o.log_progress = false;
  auto train = engine::TokenSequenceSource::Create(
      engine::SyntheticTokens(8192, spec.model().vocab_size(), 3), spec.model().seq_length(),
      consumed);
  EXPECT_TRUE(train.ok());
  auto t = engine::Trainer::Create(spec, o, std::move(*train), nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::map<std::string, torch::Tensor> HostState(engine::Trainer& t) {
  std::map<std::string, torch::Tensor> out;
  absl::StatusOr<std::vector<StateTensor>> tensors = CollectTensors(t);
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  if (!tensors.ok()) return out;
  for (StateTensor& s : *tensors) out[s.name] = s.tensor.to(torch::kCPU).clone();
  return out;
}

TEST(CheckpointerGpuTest, AsyncSaveFromTheGpuLoadsBackExactly) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const mt::v1::JobSpec spec = Spec();
  const std::string dir = testutil::MakeTempDir("ckgpu");
  ASSERT_FALSE(dir.empty());
  auto t = MakeTrainer(spec, 0);
  ASSERT_NE(t, nullptr);
  for (int i = 0; i < 3; ++i) MT_ASSERT_OK(t->Step().status());
  const std::map<std::string, torch::Tensor> at3 = HostState(*t);

  LocalExchange exchange;
  CheckpointerOptions o;
  o.save_dir = dir;
  o.async_save = true;
  o.job_id = "gpu";
  o.spec = spec;
  o.max_file_bytes = 1 << 20;  // several files
  MT_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Create(o, &exchange));
  MT_ASSERT_OK(ckpt->Prepare(*t));
  MT_ASSERT_OK(ckpt->Save(*t, std::nan(""), std::nan("")));
  for (int i = 0; i < 2; ++i) MT_ASSERT_OK(t->Step().status());  // changes the live state
  ckpt->Wait();
  auto done = ckpt->TakeFinished();
  ASSERT_EQ(done.size(), 1u);
  MT_ASSERT_OK(done[0].status);
  EXPECT_GT(done[0].files, 1);

  LoadOptions load;
  load.keep_own_files = true;
  MT_ASSERT_OK_AND_ASSIGN(std::optional<LoadChoice> choice, ChooseLoad(dir, load));
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->manifest.step(), 3);
  EXPECT_TRUE(std::isfinite(choice->manifest.loss()));  // read from the device at the save
  ASSERT_NE(choice->files, nullptr);
  auto fresh = MakeTrainer(spec, choice->manifest.trainer().consumed_samples());
  ASSERT_NE(fresh, nullptr);
  // stage_device "auto": the files were copied to the GPU while read; the restore copies every
  // tensor device to device.
  ASSERT_NE(choice->attachment, nullptr);
  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenLoadSource(*choice));
  RestoreStats stats;
  RestoreOptions restore;
  restore.stats = &stats;
  MT_ASSERT_OK(RestoreTrainer(*fresh, *source, restore));
  EXPECT_GT(stats.from_staged, 0);
  EXPECT_EQ(stats.from_memory + stats.from_assembled, 0);
  EXPECT_EQ(fresh->iteration(), 3);
  const std::map<std::string, torch::Tensor> loaded = HostState(*fresh);
  ASSERT_EQ(loaded.size(), at3.size());
  for (const auto& [name, want] : at3) {
    ASSERT_TRUE(loaded.count(name)) << name;
    EXPECT_TRUE(torch::equal(loaded.at(name), want)) << name;
  }
}

// GPT-2 124M's state (1.74 GB: weights, fp32 master, moments) with one short sequence a step:
// the async snapshot's device-to-host copies (on a stream of their own, ~40 ms) are still
// running when the next step's update would start, so the update has to wait for them (the
// optimizer fence). The checkpoint holds exactly the saved step's state (without the fence
// the update of the step after the save changes tensors the copies have not reached yet).
TEST(CheckpointerGpuTest, OverlappedSnapshotHoldsTheSavedStepWhileTrainingGoesOn) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  mt::v1::JobSpec spec = Spec();
  spec.mutable_model()->set_num_layers(12);
  spec.mutable_model()->set_hidden_size(768);
  spec.mutable_model()->set_num_attention_heads(12);
  spec.mutable_model()->set_vocab_size(50257);
  spec.mutable_model()->set_hidden_dropout(0);
  spec.mutable_model()->set_attention_dropout(0);
  spec.mutable_training()->set_micro_batch_size(1);
  spec.mutable_training()->set_global_batch_size(1);
  const std::string dir = testutil::MakeTempDir("ckgpu");
  ASSERT_FALSE(dir.empty());
  auto t = MakeTrainer(spec, 0);
  ASSERT_NE(t, nullptr);
  for (int i = 0; i < 2; ++i) MT_ASSERT_OK(t->Step().status());
  const std::map<std::string, torch::Tensor> at2 = HostState(*t);

  LocalExchange exchange;
  CheckpointerOptions o;
  o.save_dir = dir;
  o.async_save = true;
  o.job_id = "gpu";
  o.spec = spec;
  MT_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Create(o, &exchange));
  MT_ASSERT_OK(ckpt->Prepare(*t));
  MT_ASSERT_OK(ckpt->Save(*t, 1.0, 1.0));
  for (int i = 0; i < 3; ++i) MT_ASSERT_OK(t->Step().status());  // changes the live state
  ckpt->Wait();
  auto done = ckpt->TakeFinished();
  ASSERT_EQ(done.size(), 1u);
  MT_ASSERT_OK(done[0].status);

  LoadOptions load;
  load.keep_own_files = true;
  MT_ASSERT_OK_AND_ASSIGN(std::optional<LoadChoice> choice, ChooseLoad(dir, load));
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->manifest.step(), 2);
  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenLoadSource(*choice));
  auto fresh = MakeTrainer(spec, choice->manifest.trainer().consumed_samples());
  ASSERT_NE(fresh, nullptr);
  MT_ASSERT_OK(RestoreTrainer(*fresh, *source, RestoreOptions()));
  const std::map<std::string, torch::Tensor> loaded = HostState(*fresh);
  ASSERT_EQ(loaded.size(), at2.size());
  int differ = 0;
  for (const auto& [name, want] : at2) {
    ASSERT_TRUE(loaded.count(name)) << name;
    if (!torch::equal(loaded.at(name), want)) {
      ++differ;
      ADD_FAILURE() << name << " differs from the state of the saved step";
    }
  }
  EXPECT_EQ(differ, 0);
}

// The newest checkpoint's last file is damaged after its other files were staged on the GPU:
// the load falls back to the previous checkpoint and the trainer holds exactly its state.
TEST(CheckpointerGpuTest, DamagedNewestFallsBackToExactlyThePreviousOnTheGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const mt::v1::JobSpec spec = Spec();
  const std::string dir = testutil::MakeTempDir("ckgpu");
  ASSERT_FALSE(dir.empty());
  auto t = MakeTrainer(spec, 0);
  ASSERT_NE(t, nullptr);
  LocalExchange exchange;
  CheckpointerOptions o;
  o.save_dir = dir;
  o.job_id = "gpu";
  o.spec = spec;
  o.max_file_bytes = 1 << 20;
  MT_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Create(o, &exchange));
  for (int i = 0; i < 2; ++i) MT_ASSERT_OK(t->Step().status());
  const std::map<std::string, torch::Tensor> at2 = HostState(*t);
  MT_ASSERT_OK(ckpt->Save(*t, 1.0, 1.0));
  for (int i = 0; i < 2; ++i) MT_ASSERT_OK(t->Step().status());
  MT_ASSERT_OK(ckpt->Save(*t, 1.0, 1.0));
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m, ReadManifest(dir + "/iter_0000004"));
  ASSERT_GT(m.files_size(), 1);
  {
    const std::string path = dir + "/iter_0000004/" + m.files(m.files_size() - 1).path();
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
  auto fresh = MakeTrainer(spec, choice->manifest.trainer().consumed_samples());
  ASSERT_NE(fresh, nullptr);
  MT_ASSERT_OK(fresh->Step().status());  // moved away from any checkpoint's state
  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenLoadSource(*choice));
  RestoreStats stats;
  RestoreOptions restore;
  restore.stats = &stats;
  MT_ASSERT_OK(RestoreTrainer(*fresh, *source, restore));
  EXPECT_GT(stats.from_staged, 0);
  EXPECT_EQ(fresh->iteration(), 2);
  const std::map<std::string, torch::Tensor> loaded = HostState(*fresh);
  ASSERT_EQ(loaded.size(), at2.size());
  for (const auto& [name, want] : at2) {
    ASSERT_TRUE(loaded.count(name)) << name;
    EXPECT_TRUE(torch::equal(loaded.at(name), want)) << name;
  }
}

}  // namespace
}  // namespace mt::checkpoint
