// Reading the Grafana dashboards of dashboards/ for the tests: their JSON, the queries of
// every panel, and Grafana's variable syntax. Not thread-safe (plain functions on values).
#ifndef MT_TESTS_INTEGRATION_DASHBOARD_UTIL_H_
#define MT_TESTS_INTEGRATION_DASHBOARD_UTIL_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/struct.pb.h"

namespace mt::testutil {

struct PanelQuery {
  std::string dashboard;  // uid
  std::string panel;      // title
  std::string ref_id;
  std::string expr;
};

// Parses a JSON document (any value at the top).
absl::StatusOr<google::protobuf::Value> ParseJson(const std::string& text);
// Every dashboards/*.json of the source tree, by file name.
std::map<std::string, google::protobuf::Value> LoadDashboards(const std::string& source_dir);
// Every target expression of every panel (rows' nested panels included).
std::vector<PanelQuery> PanelQueries(const google::protobuf::Value& dashboard);
// The variables a string refers to: $name, ${name}, ${name:format}, [[name]].
std::set<std::string> VariableReferences(const std::string& text);
// Replaces every reference by its value; a name without a value stays as written.
std::string Substitute(const std::string& text, const std::map<std::string, std::string>& values);

}  // namespace mt::testutil

#endif  // MT_TESTS_INTEGRATION_DASHBOARD_UTIL_H_
