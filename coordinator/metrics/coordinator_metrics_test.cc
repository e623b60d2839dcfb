#include "coordinator/metrics/coordinator_metrics.h"

#include <memory>
#include <string>

#include "common/base/status_matchers.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/store/store.h"
#include "coordinator/workers/registry.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "tests/testutil/http.h"
#include "tests/testutil/subprocess.h"

namespace mt::coordinator {
namespace {

using google::protobuf::util::TimeUtil;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Text(const CoordinatorMetrics& m) { return metrics::SerializeMetrics({m.registry()}); }

google::protobuf::ListValue ParseList(const std::string& json) {
  google::protobuf::Value v;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &v).ok()) << json;
  return v.list_value();
}

TEST(ServiceDiscoveryTest, OneTargetGroupPerWorkerWithAnEndpoint) {
  mt::v1::Worker busy;
  busy.set_id("w-1");
  busy.mutable_resources()->set_node("n1");
  busy.mutable_resources()->set_gpu_index(3);
  busy.set_state(mt::v1::WORKER_STATE_BUSY);
  busy.set_metrics_address("n1:9401");
  busy.set_job_id("j-2");
  busy.set_rank(5);
  mt::v1::Worker idle;
  idle.set_id("w-2");
  idle.mutable_resources()->set_node("n\"2");
  idle.mutable_resources()->set_gpu_index(-1);
  idle.set_state(mt::v1::WORKER_STATE_IDLE);
  idle.set_metrics_address("n2:1234");
  mt::v1::Worker silent = idle;  // no endpoint: not a target
  silent.set_id("w-3");
  silent.clear_metrics_address();
  google::protobuf::ListValue list = ParseList(ServiceDiscoveryJson({busy, idle, silent}));
  ASSERT_EQ(list.values_size(), 2);
  const auto& first = list.values(0).struct_value().fields();
  ASSERT_EQ(first.at("targets").list_value().values_size(), 1);
  EXPECT_EQ(first.at("targets").list_value().values(0).string_value(), "n1:9401");
  const auto& labels = first.at("labels").struct_value().fields();
  EXPECT_EQ(labels.at("node").string_value(), "n1");
  EXPECT_EQ(labels.at("gpu").string_value(), "3");
  EXPECT_EQ(labels.at("worker").string_value(), "w-1");
  EXPECT_EQ(labels.at("__meta_mt_state").string_value(), "busy");
  EXPECT_EQ(labels.at("__meta_mt_job").string_value(), "j-2");
  EXPECT_EQ(labels.at("__meta_mt_rank").string_value(), "5");
  const auto& second = list.values(1).struct_value().fields().at("labels").struct_value().fields();
  EXPECT_EQ(second.at("node").string_value(), "n\"2");  // escaped, parses back
  EXPECT_EQ(second.at("gpu").string_value(), "cpu");
  EXPECT_EQ(second.at("__meta_mt_job").string_value(), "");
  EXPECT_EQ(second.at("__meta_mt_rank").string_value(), "");
  EXPECT_EQ(ServiceDiscoveryJson({}), "[]");
}

TEST(CoordinatorMetricsTest, RpcsByServiceMethodAndCodeWithBoundedNames) {
  CoordinatorMetrics m;
  m.ObserveRpc("/mt.v1.ClientService/SubmitJob", 0, 0.002);
  m.ObserveRpc("/mt.v1.ClientService/SubmitJob", 3, 0.0001);
  m.ObserveRpc("/attacker.Chosen/Name", 12, 1);
  const std::string text = Text(m);
  EXPECT_THAT(text, HasSubstr("mt_coordinator_rpc_duration_seconds_count{code=\"OK\","
                              "method=\"SubmitJob\",service=\"ClientService\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("mt_coordinator_rpc_duration_seconds_bucket{code=\"OK\","
                              "method=\"SubmitJob\",service=\"ClientService\",le=\"0.0025\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("mt_coordinator_rpc_duration_seconds_count{code="
                              "\"INVALID_ARGUMENT\",method=\"SubmitJob\",service=\"ClientService\"}"
                              " 1\n"));
  EXPECT_THAT(text, HasSubstr("{code=\"UNIMPLEMENTED\",method=\"other\",service=\"other\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("attacker")));
  EXPECT_EQ(GrpcCodeName(14), "UNAVAILABLE");
  EXPECT_EQ(GrpcCodeName(99), "UNKNOWN");
}

TEST(CoordinatorMetricsTest, TransitionsCountRestartsEndingsAndSchedulingLatency) {
  CoordinatorMetrics m;
  const absl::Time t0 = absl::FromUnixSeconds(1'700'000'000);
  mt::v1::Job job;
  job.set_id("j-1");
  *job.mutable_create_time() = TimeUtil::SecondsToTimestamp(1'700'000'000);
  // Submitted as PENDING (no transition seen): timed from create_time.
  m.OnJobTransition(job, mt::v1::JOB_STATE_PENDING, mt::v1::JOB_STATE_SCHEDULED,
                    t0 + absl::Seconds(3));
  m.OnJobTransition(job, mt::v1::JOB_STATE_SCHEDULED, mt::v1::JOB_STATE_RUNNING, t0);
  m.OnJobTransition(job, mt::v1::JOB_STATE_RUNNING, mt::v1::JOB_STATE_RESTARTING, t0);
  // Back in the queue at t0 + 100 s, placed 0.05 s later.
  m.OnJobTransition(job, mt::v1::JOB_STATE_RESTARTING, mt::v1::JOB_STATE_PENDING,
                    t0 + absl::Seconds(100));
  m.OnJobTransition(job, mt::v1::JOB_STATE_PENDING, mt::v1::JOB_STATE_SCHEDULED,
                    t0 + absl::Seconds(100) + absl::Milliseconds(50));
  m.OnJobTransition(job, mt::v1::JOB_STATE_SCHEDULED, mt::v1::JOB_STATE_FAILED, t0);
  const std::string text = Text(m);
  EXPECT_THAT(text, HasSubstr("mt_coordinator_job_restarts_total 1\n"));
  EXPECT_THAT(text, HasSubstr("mt_coordinator_jobs_finished_total{state=\"failed\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("mt_coordinator_jobs_finished_total{state=\"succeeded\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("mt_coordinator_scheduling_latency_seconds_count 2\n"));
  EXPECT_THAT(text, HasSubstr("mt_coordinator_scheduling_latency_seconds_bucket{le=\"0.1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("mt_coordinator_scheduling_latency_seconds_bucket{le=\"5\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("mt_coordinator_scheduling_latency_seconds_sum 3.05"));
}

TEST(CoordinatorMetricsTest, ServesClusterStateAndServiceDiscovery) {
  FakeClock clock;
  MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(testutil::MakeTempDir("cm")));
  WorkerRegistry registry(&clock, absl::Seconds(10));
  MT_ASSERT_OK_AND_ASSIGN(auto jobs, JobManager::Create(store.get(), &registry, &clock, {}));
  mt::v1::RegisterRequest request;
  request.mutable_resources()->set_node("n1");
  request.mutable_resources()->set_gpu_index(-1);
  request.set_metrics_address("127.0.0.1:5555");
  MT_ASSERT_OK(registry.Register(request).status());
  request.mutable_resources()->set_node("n2");
  request.clear_metrics_address();
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::Worker gone, registry.Register(request));
  MT_ASSERT_OK(registry.Deregister(gone.id()));

  CoordinatorMetrics m;
  EXPECT_EQ(m.metrics_url(), "");
  metrics::MetricsServerOptions options;
  options.port = 0;
  MT_ASSERT_OK(m.Serve(options, jobs.get(), &registry));
  const std::string url = m.metrics_url();
  ASSERT_THAT(url, ::testing::StartsWith("http://127.0.0.1:"));
  const std::string address = url.substr(7, url.size() - 7 - 8);
  EXPECT_EQ(m.sd_url(), "http://" + address + "/sd");
  MT_ASSERT_OK_AND_ASSIGN(testutil::HttpResult r, testutil::HttpGet(address, "/metrics"));
  EXPECT_THAT(r.body, HasSubstr("mt_coordinator_jobs{state=\"pending\"} 0\n"));
  EXPECT_THAT(r.body, HasSubstr("mt_coordinator_jobs{state=\"cancelled\"} 0\n"));
  EXPECT_THAT(r.body, HasSubstr("mt_coordinator_queue_length 0\n"));
  EXPECT_THAT(r.body, HasSubstr("mt_coordinator_workers{node=\"n1\",state=\"idle\"} 1\n"));
  EXPECT_THAT(r.body, HasSubstr("mt_coordinator_workers{node=\"n1\",state=\"lost\"} 0\n"));
  EXPECT_THAT(r.body, Not(HasSubstr("node=\"n2\"")));  // only a departed worker there
  EXPECT_THAT(r.body, HasSubstr("mt_coordinator_info{version="));
  EXPECT_THAT(r.body, HasSubstr("# TYPE mt_coordinator_checkpoint_save_failures_total counter\n"
                                "mt_coordinator_checkpoint_save_failures_total 0\n"));
  MT_ASSERT_OK_AND_ASSIGN(r, testutil::HttpGet(address, "/sd"));
  EXPECT_EQ(r.content_type, "application/json");
  google::protobuf::ListValue list = ParseList(r.body);
  ASSERT_EQ(list.values_size(), 1);
  EXPECT_EQ(
      list.values(0).struct_value().fields().at("targets").list_value().values(0).string_value(),
      "127.0.0.1:5555");
}

// `mtctl eval` results (docs/inference.md): the families are exposed before the first one,
// then one series per job whose checkpoint was evaluated, from the eval job's success.
TEST(CoordinatorMetricsTest, EvalResultsByTheJobThatSavedTheCheckpoint) {
  CoordinatorMetrics m;
  std::string text = metrics::SerializeMetrics(m.collectables());
  EXPECT_THAT(text, HasSubstr("# TYPE mt_checkpoint_eval_loss gauge\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE mt_checkpoint_eval_perplexity gauge\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE mt_checkpoint_eval_step gauge\n"));
  EXPECT_THAT(text, Not(HasSubstr("mt_checkpoint_eval_loss{")));
  mt::v1::Job job;
  job.set_id("j-9");
  job.mutable_spec()->mutable_inference()->set_checkpoint_job_id("j-2");
  job.mutable_spec()->mutable_inference()->mutable_eval()->set_data_path("/d");
  job.mutable_progress()->set_validation_loss(2.5);
  job.mutable_progress()->set_validation_perplexity(12.25);
  job.mutable_progress()->set_validation_step(40);
  job.mutable_progress()->set_evaluated_tokens(96);
  m.OnJobTransition(job, mt::v1::JOB_STATE_RUNNING, mt::v1::JOB_STATE_FAILED, absl::Now());
  EXPECT_THAT(metrics::SerializeMetrics(m.collectables()),
              Not(HasSubstr("mt_checkpoint_eval_loss{")));
  m.OnJobTransition(job, mt::v1::JOB_STATE_RUNNING, mt::v1::JOB_STATE_SUCCEEDED, absl::Now());
  text = metrics::SerializeMetrics(m.collectables());
  EXPECT_THAT(text, HasSubstr("mt_checkpoint_eval_loss{job=\"j-2\",weights=\"none\"} 2.5\n"));
  EXPECT_THAT(text,
              HasSubstr("mt_checkpoint_eval_perplexity{job=\"j-2\",weights=\"none\"} 12.25\n"));
  EXPECT_THAT(text, HasSubstr("mt_checkpoint_eval_step{job=\"j-2\",weights=\"none\"} 40\n"));
  EXPECT_THAT(text, HasSubstr("mt_checkpoint_eval_tokens_total 96\n"));
  // An int8 evaluation of the same checkpoint is a series of its own: it does not replace the
  // checkpoint's own loss.
  mt::v1::Job int8 = job;
  int8.set_id("j-10");
  int8.mutable_spec()->mutable_inference()->mutable_eval()->set_quantize("int8");
  int8.mutable_progress()->set_validation_loss(2.625);
  m.OnJobTransition(int8, mt::v1::JOB_STATE_RUNNING, mt::v1::JOB_STATE_SUCCEEDED, absl::Now());
  text = metrics::SerializeMetrics(m.collectables());
  EXPECT_THAT(text, HasSubstr("mt_checkpoint_eval_loss{job=\"j-2\",weights=\"none\"} 2.5\n"));
  EXPECT_THAT(text, HasSubstr("mt_checkpoint_eval_loss{job=\"j-2\",weights=\"int8\"} 2.625\n"));
  // A training job's success adds nothing.
  mt::v1::Job training;
  training.set_id("j-2");
  training.mutable_progress()->set_validation_loss(1.0);
  m.OnJobTransition(training, mt::v1::JOB_STATE_RUNNING, mt::v1::JOB_STATE_SUCCEEDED, absl::Now());
  EXPECT_THAT(metrics::SerializeMetrics(m.collectables()),
              HasSubstr("mt_checkpoint_eval_loss{job=\"j-2\",weights=\"none\"} 2.5\n"));
}

// A deleted job's series go with it (retention deletes jobs for good: series labelled by
// them would otherwise pile up for as long as the coordinator runs); others stay.
TEST(CoordinatorMetricsTest, DeletingAJobDropsItsEvalSeries) {
  CoordinatorMetrics m;
  struct Eval {
    std::string source, quantize;
    double loss;
  };
  for (const Eval& e : {Eval{"j-2", "", 2.5}, Eval{"j-2", "int8", 2.75}, Eval{"j-20", "", 3.5}}) {
    const std::string& source = e.source;
    const double loss = e.loss;
    mt::v1::Job eval;
    eval.set_id(source + "-eval");
    eval.mutable_spec()->mutable_inference()->set_checkpoint_job_id(source);
    eval.mutable_spec()->mutable_inference()->mutable_eval()->set_data_path("/d");
    eval.mutable_spec()->mutable_inference()->mutable_eval()->set_quantize(e.quantize);
    eval.mutable_progress()->set_validation_loss(loss);
    eval.mutable_progress()->set_validation_step(40);
    m.OnJobTransition(eval, mt::v1::JOB_STATE_RUNNING, mt::v1::JOB_STATE_SUCCEEDED, absl::Now());
  }
  mt::v1::Job training;
  training.set_id("j-2");
  training.set_state(mt::v1::JOB_STATE_SUCCEEDED);
  m.OnJobDeleted(training);
  const std::string text = metrics::SerializeMetrics(m.collectables());
  // Both of j-2's series (its own weights and int8) go; j-20's, whose id starts like it, stay.
  EXPECT_THAT(text, Not(HasSubstr("{job=\"j-2\"")));
  EXPECT_THAT(text, HasSubstr("mt_checkpoint_eval_loss{job=\"j-20\",weights=\"none\"} 3.5\n"));
  EXPECT_THAT(text, HasSubstr("mt_checkpoint_eval_step{job=\"j-20\",weights=\"none\"} 40\n"));
}

}  // namespace
}  // namespace mt::coordinator
