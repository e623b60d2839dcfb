#include "worker/daemon/worker_metrics.h"

#include <cmath>
#include <memory>
#include <string>

#include "common/metrics/metrics_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/parallel/comm_stats.h"

namespace mt::worker::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kRankLabels[] =
    "dp=\"1\",gpu=\"cpu\",job=\"j-4\",node=\"n1\",pp=\"0\",rank=\"1\",tp=\"0\"";

class WorkerMetricsTest : public ::testing::Test {
 protected:
  WorkerMetricsTest() {
    mt::v1::WorkerResources resources;
    resources.set_node("n1");
    resources.set_gpu_index(-1);
    resources.set_device_name("cpu");
    metrics_ = std::make_unique<WorkerMetrics>(registry_.get(), resources, "0.1.0", &clock_,
                                               absl::Seconds(30));
  }

  std::string Text() const { return mt::metrics::SerializeMetrics({registry_}); }
  std::string Series(const std::string& name) const { return name + "{" + kRankLabels + "} "; }
  // Labels sort by name: collective, dp, gpu, group, job ...
  static std::string Comm(const std::string& collective, const std::string& group) {
    return "mt_rank_communication_seconds_total{collective=\"" + collective +
           "\",dp=\"1\",gpu=\"cpu\",group=\"" + group +
           "\",job=\"j-4\",node=\"n1\",pp=\"0\",rank=\"1\",tp=\"0\"} ";
  }

  static mt::v1::Assignment Assignment(int attempt = 0) {
    mt::v1::Assignment a;
    a.set_job_id("j-4");
    a.set_attempt(attempt);
    a.mutable_coordinates()->set_rank(1);
    a.mutable_coordinates()->set_dp(1);
    return a;
  }

  static mt::v1::RankReport Report(int attempt = 0) {
    mt::v1::RankReport r;
    r.set_job_id("j-4");
    r.set_attempt(attempt);
    r.set_rank(1);
    r.set_phase(mt::v1::RANK_PHASE_TRAINING);
    return r;
  }

  FakeClock clock_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::unique_ptr<WorkerMetrics> metrics_;
};

TEST_F(WorkerMetricsTest, DaemonSeriesExistFromTheStart) {
  const std::string text = Text();
  EXPECT_THAT(text, HasSubstr("mt_worker_info{device=\"cpu\",gpu=\"cpu\",node=\"n1\","
                              "version=\"0.1.0\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("mt_worker_busy{gpu=\"cpu\",node=\"n1\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("mt_worker_ranks_ended_total{gpu=\"cpu\",node=\"n1\","
                              "outcome=\"failed\"} 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("mt_rank_step{")));
}

TEST_F(WorkerMetricsTest, TelemetryBecomesRankSeries) {
  metrics_->OnRankStarted(Assignment());
  EXPECT_THAT(Text(), HasSubstr("mt_worker_busy{gpu=\"cpu\",node=\"n1\"} 1\n"));
  EXPECT_THAT(Text(), HasSubstr(Series("mt_rank_step") + "0\n"));
  // Checkpoint and communication series exist before anything happened (zero).
  EXPECT_THAT(Text(), HasSubstr(Series("mt_rank_checkpoint_save_seconds_count") + "0\n"));
  EXPECT_THAT(Text(), HasSubstr(Comm("all_reduce", "dp") + "0\n"));

  mt::v1::RankReport r = Report();
  mt::v1::RankTelemetry* t = r.mutable_telemetry();
  t->set_step(12);
  t->set_loss(4.5);
  t->set_learning_rate(0.002);
  t->set_grad_norm(0.75);
  t->set_loss_scale(65536);
  t->set_skipped_steps(2);
  t->set_tokens_per_second(1000);
  t->set_mfu(0.25);
  t->set_memory_allocated_bytes(1000);
  t->set_memory_reserved_bytes(2000);
  t->set_memory_peak_bytes(1500);
  t->set_consumed_samples(96);
  t->add_step_seconds(0.02);  // bucket 0.025
  t->add_step_seconds(0.2);   // bucket 0.25
  t->set_tokens(256);
  t->set_data_wait_seconds(0.125);
  auto* c = t->add_communication();
  c->set_collective("all_reduce");
  c->set_group("dp");
  c->set_seconds(0.5);
  auto* odd = t->add_communication();
  odd->set_collective("made_up");
  odd->set_group("whatever");
  odd->set_seconds(0.25);
  metrics_->OnRankReport(r);
  // A second telemetry adds to the counters and the histogram.
  t->clear_communication();
  t->clear_step_seconds();
  t->add_step_seconds(0.02);
  t->set_skipped_steps(3);
  t->set_consumed_samples(104);
  metrics_->OnRankReport(r);

  const std::string text = Text();
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_step") + "12\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_loss") + "4.5\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_learning_rate") + "0.002\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_grad_norm") + "0.75\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_loss_scale") + "65536\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_skipped_steps_total") + "3\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_consumed_samples_total") + "104\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_tokens_per_second") + "1000\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_tokens_total") + "512\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_model_flops_utilization_ratio") + "0.25\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_memory_allocated_bytes") + "1000\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_memory_reserved_bytes") + "2000\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_memory_peak_bytes") + "1500\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_data_wait_seconds_total") + "0.25\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_step_seconds_count") + "3\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_step_seconds_sum") + "0.24\n"));
  EXPECT_THAT(text, HasSubstr("mt_rank_step_seconds_bucket{" + std::string(kRankLabels) +
                              ",le=\"0.025\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("mt_rank_step_seconds_bucket{" + std::string(kRankLabels) +
                              ",le=\"0.25\"} 3\n"));
  EXPECT_THAT(text, HasSubstr(Comm("all_reduce", "dp") + "0.5\n"));
  // Names outside the known sets do not become labels.
  EXPECT_THAT(text, HasSubstr(Comm("other", "other") + "0.25\n"));
  EXPECT_THAT(text, Not(HasSubstr("made_up")));
  EXPECT_THAT(text, Not(HasSubstr("mt_rank_validation_loss{")));
  EXPECT_THAT(text, HasSubstr("mt_worker_rank_reports_total{gpu=\"cpu\",node=\"n1\"} 2\n"));
}

// The daemon keeps every label value the rank's recorder produces (no "other" for them).
TEST_F(WorkerMetricsTest, EveryRecordedCollectiveAndGroupIsALabelValue) {
  metrics_->OnRankStarted(Assignment());
  mt::v1::RankReport r = Report();
  for (int c = 0; c < parallel::kNumCollectives; ++c) {
    for (int g = 0; g < parallel::kNumCommGroups; ++g) {
      auto* t = r.mutable_telemetry()->add_communication();
      t->set_collective(
          std::string(parallel::CollectiveName(static_cast<parallel::Collective>(c))));
      t->set_group(std::string(parallel::CommGroupName(static_cast<parallel::CommGroup>(g))));
      t->set_seconds(0.125);
      t->set_calls(1);
    }
  }
  metrics_->OnRankReport(r);
  const std::string text = Text();
  for (const auto& t : r.telemetry().communication()) {
    EXPECT_THAT(text, HasSubstr(Comm(t.collective(), t.group()) + "0.125\n"));
  }
  EXPECT_THAT(text, Not(HasSubstr("\"other\"")));
}

TEST_F(WorkerMetricsTest, ValidationLossAndCheckpointsFromTheirReports) {
  metrics_->OnRankStarted(Assignment());
  mt::v1::RankReport r = Report();
  r.mutable_progress()->set_validation_loss(std::nan(""));
  metrics_->OnRankReport(r);
  EXPECT_THAT(Text(), Not(HasSubstr("mt_rank_validation_loss{")));
  r.mutable_progress()->set_validation_loss(3.5);
  r.mutable_progress()->set_validation_step(20);
  r.mutable_checkpoint()->set_seconds(2);
  r.mutable_checkpoint()->set_size_bytes(4096);
  r.mutable_checkpoint_load()->set_seconds(0.3);
  r.mutable_checkpoint_load()->set_size_bytes(1024);
  metrics_->OnRankReport(r);
  const std::string text = Text();
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_validation_loss") + "3.5\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_checkpoint_save_seconds_sum") + "2\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_checkpoint_saved_bytes_total") + "4096\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_checkpoint_load_seconds_count") + "1\n"));
  EXPECT_THAT(text, HasSubstr(Series("mt_rank_checkpoint_loaded_bytes_total") + "1024\n"));
}

TEST_F(WorkerMetricsTest, AnEndedRanksSeriesLingerThenGo) {
  metrics_->OnRankStarted(Assignment());
  mt::v1::RankExitReport exit;
  exit.set_job_id("j-4");
  exit.set_rank(1);
  exit.set_outcome(mt::v1::RANK_OUTCOME_SUCCEEDED);
  metrics_->OnRankExited(exit);
  EXPECT_THAT(Text(), HasSubstr("mt_worker_busy{gpu=\"cpu\",node=\"n1\"} 0\n"));
  EXPECT_THAT(Text(), HasSubstr("outcome=\"succeeded\"} 1\n"));
  clock_.Advance(absl::Seconds(29));
  metrics_->OnTick();
  EXPECT_THAT(Text(), HasSubstr(Series("mt_rank_step")));
  clock_.Advance(absl::Seconds(1));
  metrics_->OnTick();
  EXPECT_EQ(metrics_->ranks_with_series(), 0);
  EXPECT_THAT(Text(), Not(HasSubstr("j-4")));
}

TEST_F(WorkerMetricsTest, ARestartOfTheSameRankStartsFreshSeries) {
  metrics_->OnRankStarted(Assignment(0));
  mt::v1::RankReport r = Report(0);
  r.mutable_telemetry()->set_tokens(100);
  metrics_->OnRankReport(r);
  mt::v1::RankExitReport exit;
  exit.set_job_id("j-4");
  exit.set_rank(1);
  exit.set_outcome(mt::v1::RANK_OUTCOME_FAILED);
  metrics_->OnRankExited(exit);
  metrics_->OnRankStarted(Assignment(1));
  EXPECT_THAT(Text(), HasSubstr(Series("mt_rank_tokens_total") + "0\n"));
  EXPECT_THAT(Text(), HasSubstr(Series("mt_rank_attempt") + "1\n"));
  // Reports of the old attempt change nothing.
  metrics_->OnRankReport(r);
  EXPECT_THAT(Text(), HasSubstr(Series("mt_rank_tokens_total") + "0\n"));
  EXPECT_EQ(metrics_->ranks_with_series(), 1);
}

}  // namespace
}  // namespace mt::worker::metrics
