#include "worker/metrics/event_file.h"

#include <string>

#include "common/base/files.h"
#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"
#include "worker/metrics/tensorboard_logger.h"

namespace mt::worker::metrics {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::StartsWith;

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

TEST(EventFileTest, WritesAVersionEventThenScalarsThatReadBack) {
  const std::string dir = testutil::MakeTempDir("tb") + "/nested/run";
  MT_ASSERT_OK_AND_ASSIGN(auto writer, EventFileWriter::Create(dir, kStart));
  EXPECT_THAT(writer->path(), StartsWith(dir + "/events.out.tfevents.1700000000."));
  writer->AddScalar("lm loss", 3.25, 10, kStart + absl::Seconds(1));
  writer->AddScalar("learning-rate", 1e-4, 10, kStart + absl::Seconds(1));
  // Nothing reaches the file before a flush but the version event.
  MT_ASSERT_OK_AND_ASSIGN(auto events, ReadEventFile(writer->path()));
  ASSERT_THAT(events, SizeIs(1));
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_DOUBLE_EQ(events[0].wall_time(), 1'700'000'000.0);
  MT_ASSERT_OK(writer->Flush());
  MT_ASSERT_OK_AND_ASSIGN(events, ReadEventFile(writer->path()));
  ASSERT_THAT(events, SizeIs(3));
  EXPECT_EQ(events[1].step(), 10);
  EXPECT_DOUBLE_EQ(events[1].wall_time(), 1'700'000'001.0);
  ASSERT_EQ(events[1].summary().value_size(), 1);
  EXPECT_EQ(events[1].summary().value(0).tag(), "lm loss");
  EXPECT_FLOAT_EQ(events[1].summary().value(0).simple_value(), 3.25f);
  EXPECT_EQ(events[2].summary().value(0).tag(), "learning-rate");
  EXPECT_FLOAT_EQ(events[2].summary().value(0).simple_value(), 1e-4f);
  EXPECT_THAT(ListEventFiles(dir), ::testing::ElementsAre(writer->path()));
}

TEST(EventFileTest, ACorruptFileIsReportedWithItsPath) {
  const std::string dir = testutil::MakeTempDir("tb");
  MT_ASSERT_OK_AND_ASSIGN(auto writer, EventFileWriter::Create(dir, kStart));
  writer->AddScalar("x", 1, 1, kStart);
  MT_ASSERT_OK(writer->Flush());
  MT_ASSERT_OK_AND_ASSIGN(std::string bytes, ReadFile(writer->path()));
  bytes[bytes.size() - 6] ^= 0x01;
  const std::string broken = dir + "/events.out.tfevents.broken";
  MT_ASSERT_OK(WriteFileAtomically(broken, bytes));
  EXPECT_THAT(ReadEventFile(broken).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(broken)));
}

TEST(EventFileTest, AnUnwritableDirectoryNamesTheSpecField) {
  EXPECT_THAT(
      EventFileWriter::Create("/proc/mt-no-such/tb", kStart).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("logging.tensorboard_dir")));
}

TEST(TensorBoardLoggerTest, WritesMegatronsTagsPerStepAndEvaluation) {
  const std::string dir = testutil::MakeTempDir("tb");
  TensorBoardOptions options;
  options.world_size = 2;
  options.flops_per_token = 6e6;
  options.global_batch_size = 8;
  options.flush_every = absl::Hours(1);
  MT_ASSERT_OK_AND_ASSIGN(auto logger, TensorBoardLogger::Create(dir, options, kStart));
  engine::StepMetrics m;
  m.iteration = 3;
  m.consumed_samples = 24;
  m.loss = 5.5;
  m.learning_rate = 2e-3;
  m.grad_norm = 1.25;
  m.loss_scale = 1024;
  m.seconds = 0.5;
  m.tokens_per_second = 1e6;
  logger->OnStep(m, kStart);
  m.iteration = 4;
  m.grad_norm = std::numeric_limits<double>::infinity();  // skipped: no grad-norm point
  logger->OnStep(m, kStart);
  engine::MemoryStats mem;
  mem.allocated_bytes = 100;
  mem.reserved_bytes = 200;
  mem.peak_allocated_bytes = 150;
  logger->OnMemory(mem, 4, kStart);
  engine::EvalMetrics e;
  e.iteration = 4;
  e.loss = 4.0;
  e.perplexity = 54.6;
  logger->OnEval(e, 32, kStart);  // flushes at once
  MT_ASSERT_OK_AND_ASSIGN(auto events, ReadEventFile(logger->path()));
  std::map<std::string, std::vector<std::pair<int64_t, float>>> by_tag;
  for (const auto& ev : events) {
    for (const auto& v : ev.summary().value())
      by_tag[v.tag()].push_back({ev.step(), v.simple_value()});
  }
  using P = std::pair<int64_t, float>;
  EXPECT_THAT(by_tag["lm loss"], ::testing::ElementsAre(P{3, 5.5f}, P{4, 5.5f}));
  EXPECT_THAT(by_tag["lm loss vs samples"], ::testing::ElementsAre(P{24, 5.5f}, P{24, 5.5f}));
  EXPECT_THAT(by_tag["learning-rate"], ::testing::ElementsAre(P{3, 2e-3f}, P{4, 2e-3f}));
  EXPECT_THAT(by_tag["grad-norm"], ::testing::ElementsAre(P{3, 1.25f}));
  EXPECT_THAT(by_tag["loss-scale"], ::testing::ElementsAre(P{3, 1024.f}, P{4, 1024.f}));
  EXPECT_THAT(by_tag["batch-size"], ::testing::ElementsAre(P{3, 8.f}, P{4, 8.f}));
  EXPECT_THAT(by_tag["iteration-time"], ::testing::ElementsAre(P{3, 0.5f}, P{4, 0.5f}));
  EXPECT_THAT(by_tag["tokens-per-second"], ::testing::ElementsAre(P{3, 1e6f}, P{4, 1e6f}));
  // 1e6 tokens/s * 6e6 FLOP/token / 2 GPUs = 3 TFLOP/s per GPU.
  EXPECT_THAT(by_tag["throughput"], ::testing::ElementsAre(P{3, 3.f}, P{4, 3.f}));
  EXPECT_EQ(by_tag.count("mfu"), 0u);  // unknown peak
  EXPECT_THAT(by_tag["mem-allocated-bytes"], ::testing::ElementsAre(P{4, 100.f}));
  EXPECT_THAT(by_tag["mem-reserved-bytes"], ::testing::ElementsAre(P{4, 200.f}));
  EXPECT_THAT(by_tag["mem-max-allocated-bytes"], ::testing::ElementsAre(P{4, 150.f}));
  EXPECT_THAT(by_tag["lm loss validation"], ::testing::ElementsAre(P{4, 4.f}));
  EXPECT_THAT(by_tag["lm loss validation vs samples"], ::testing::ElementsAre(P{32, 4.f}));
  EXPECT_THAT(by_tag["lm loss validation ppl"], ::testing::ElementsAre(P{4, 54.6f}));
}

}  // namespace
}  // namespace mt::worker::metrics
