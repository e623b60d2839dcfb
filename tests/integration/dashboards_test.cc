// What Grafana needs of dashboards/*.json and deploy/grafana/provisioning: unique uids, a
// data source on every panel, target and variable (the provisioned one), variables that exist,
// and the panels the issue asks for. That every query returns data is prometheus_test.cc's job.
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "common/base/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/dashboard_util.h"
#include "yaml-cpp/yaml.h"

namespace mt {
namespace {

using google::protobuf::Value;

const std::string kSrc = MT_SOURCE_DIR;

const Value& Field(const Value& v, const std::string& name) {
  static const Value kNull;
  const auto& f = v.struct_value().fields();
  auto it = f.find(name);
  return it == f.end() ? kNull : it->second;
}

std::string ProvisionedUid() {
  YAML::Node y = YAML::LoadFile(kSrc + "/deploy/grafana/provisioning/datasources/mt.yaml");
  return y["datasources"][0]["uid"].as<std::string>();
}

void ExpectDatasource(const Value& holder, const std::string& where, const std::string& uid) {
  const Value& ds = Field(holder, "datasource");
  EXPECT_EQ(Field(ds, "type").string_value(), "prometheus") << where;
  EXPECT_EQ(Field(ds, "uid").string_value(), uid) << where;
}

const std::set<std::string>& Builtins() {
  static const auto* s = new std::set<std::string>{
      "__rate_interval", "__interval", "__interval_ms", "__range",     "__range_s",
      "__range_ms",      "__from",     "__to",          "__dashboard", "__name"};
  return *s;
}

TEST(DashboardsTest, GrafanaCanLoadThem) {
  const auto dashboards = testutil::LoadDashboards(kSrc);
  ASSERT_EQ(dashboards.size(), 2u) << "dashboards/job.json and dashboards/cluster.json";
  const std::string uid = ProvisionedUid();
  EXPECT_EQ(uid, "mt-prometheus");
  std::set<std::string> uids;
  for (const auto& [file, d] : dashboards) {
    SCOPED_TRACE(file);
    ASSERT_TRUE(d.has_struct_value()) << "not a JSON object";
    const std::string duid = Field(d, "uid").string_value();
    EXPECT_FALSE(duid.empty());
    EXPECT_LE(duid.size(), 40u);  // Grafana's limit
    EXPECT_TRUE(uids.insert(duid).second) << "duplicate uid " << duid;
    EXPECT_FALSE(Field(d, "title").string_value().empty());
    EXPECT_GT(Field(d, "schemaVersion").number_value(), 30);
    // Variables: named, with the data source, their own queries referring only to earlier ones.
    std::set<std::string> defined;
    for (const Value& v : Field(Field(d, "templating"), "list").list_value().values()) {
      const std::string name = Field(v, "name").string_value();
      EXPECT_FALSE(name.empty());
      ExpectDatasource(v, "variable " + name, uid);
      const std::string query = Field(Field(v, "query"), "query").string_value();
      EXPECT_TRUE(absl::StartsWith(query, "label_values(")) << query;
      for (const std::string& ref : testutil::VariableReferences(query)) {
        EXPECT_TRUE(defined.count(ref) > 0 || Builtins().count(ref) > 0)
            << "variable " << name << " refers to $" << ref << " before it exists";
      }
      EXPECT_TRUE(defined.insert(name).second) << "variable " << name << " twice";
    }
    std::set<double> ids;
    const Value& panels = Field(d, "panels");
    ASSERT_GT(panels.list_value().values_size(), 0);
    for (const Value& p : panels.list_value().values()) {
      const std::string title = Field(p, "title").string_value();
      EXPECT_FALSE(title.empty());
      EXPECT_TRUE(ids.insert(Field(p, "id").number_value()).second) << "panel id twice: " << title;
      ExpectDatasource(p, "panel " + title, uid);
      const Value& grid = Field(p, "gridPos");
      EXPECT_GT(Field(grid, "w").number_value(), 0) << title;
      EXPECT_LE(Field(grid, "x").number_value() + Field(grid, "w").number_value(), 24) << title;
      std::set<std::string> refs;
      ASSERT_GT(Field(p, "targets").list_value().values_size(), 0) << title;
      for (const Value& t : Field(p, "targets").list_value().values()) {
        ExpectDatasource(t, "target of " + title, uid);
        EXPECT_TRUE(refs.insert(Field(t, "refId").string_value()).second) << title;
        const std::string expr = Field(t, "expr").string_value();
        EXPECT_FALSE(expr.empty()) << title;
        for (const std::string& ref : testutil::VariableReferences(expr + " " + title)) {
          EXPECT_TRUE(defined.count(ref) > 0 || Builtins().count(ref) > 0)
              << title << ": $" << ref << " is not a variable of the dashboard";
        }
      }
    }
  }
}

TEST(DashboardsTest, HaveThePanelsAndVariablesOperatorsNeed) {
  const auto dashboards = testutil::LoadDashboards(kSrc);
  auto exprs = [&](const std::string& file) {
    std::string all;
    for (const auto& q : testutil::PanelQueries(dashboards.at(file))) all += q.expr + "\n";
    return all;
  };
  auto variables = [&](const std::string& file) {
    std::set<std::string> names;
    for (const Value& v :
         Field(Field(dashboards.at(file), "templating"), "list").list_value().values()) {
      names.insert(Field(v, "name").string_value());
    }
    return names;
  };
  const std::string job = exprs("job.json");
  for (const char* metric :
       {"mt_rank_loss", "mt_rank_validation_loss", "mt_rank_learning_rate", "mt_rank_tokens_total",
        "mt_rank_model_flops_utilization_ratio", "mt_rank_step_seconds_bucket",
        "mt_rank_memory_allocated_bytes", "mt_rank_communication_seconds_total",
        "mt_rank_data_wait_seconds_total", "mt_rank_checkpoint_save_seconds",
        "mt_rank_checkpoint_load_seconds", "mt_rank_attempt"}) {
    EXPECT_TRUE(absl::StrContains(job, metric)) << "job dashboard lacks " << metric;
  }
  EXPECT_TRUE(absl::StrContains(job, "histogram_quantile(0.5,"));
  EXPECT_TRUE(absl::StrContains(job, "histogram_quantile(0.99,"));
  EXPECT_THAT(variables("job.json"), ::testing::ElementsAre("job", "node"));
  const std::string cluster = exprs("cluster.json");
  for (const char* metric :
       {"mt_coordinator_workers", "mt_coordinator_jobs", "mt_coordinator_queue_length",
        "mt_coordinator_scheduling_latency_seconds_bucket",
        "mt_coordinator_rpc_duration_seconds_bucket"}) {
    EXPECT_TRUE(absl::StrContains(cluster, metric)) << "cluster dashboard lacks " << metric;
  }
  EXPECT_THAT(variables("cluster.json"), ::testing::Contains("node"));
}

TEST(DashboardsTest, ProvisioningPointsAtTheDashboards) {
  YAML::Node y = YAML::LoadFile(kSrc + "/deploy/grafana/provisioning/dashboards/mt.yaml");
  EXPECT_EQ(y["apiVersion"].as<int>(), 1);
  EXPECT_EQ(y["providers"][0]["type"].as<std::string>(), "file");
  EXPECT_FALSE(y["providers"][0]["options"]["path"].as<std::string>().empty());
}

TEST(DashboardUtilTest, FindsAndSubstitutesEveryVariableSyntax) {
  const std::string text = "a{job=\"$job\",node=~\"${node:regex}\"}[$__rate_interval] [[old]] $5";
  EXPECT_THAT(testutil::VariableReferences(text),
              ::testing::ElementsAre("5", "__rate_interval", "job", "node", "old"));
  EXPECT_EQ(testutil::Substitute(text, {{"job", "j-1"}, {"node", ".*"}, {"__rate_interval", "1m"}}),
            "a{job=\"j-1\",node=~\".*\"}[1m] [[old]] $5");
}

}  // namespace
}  // namespace mt
