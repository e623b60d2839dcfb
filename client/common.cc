#include "client/common.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rpc/auth.h"
#include "google/protobuf/util/json_util.h"
#include "yaml-cpp/yaml.h"

ABSL_FLAG(std::string, coordinator, "",
          "Coordinator host:port (default $MT_COORDINATOR, else 127.0.0.1:7070).");
ABSL_FLAG(std::string, token_file, "", "Bearer token file (default $MT_TOKEN_FILE).");
ABSL_FLAG(std::string, o, "table", "Output format: table, json or yaml.");

namespace mt::client {

absl::StatusOr<GlobalOptions> LoadGlobalOptions() {
  GlobalOptions g;
  g.coordinator = absl::GetFlag(FLAGS_coordinator);
  if (g.coordinator.empty()) {
    const char* env = std::getenv("MT_COORDINATOR");
    g.coordinator = env != nullptr && env[0] != '\0' ? env : "127.0.0.1:7070";
  }
  g.token_file = absl::GetFlag(FLAGS_token_file);
  if (g.token_file.empty()) {
    const char* env = std::getenv("MT_TOKEN_FILE");
    if (env != nullptr) g.token_file = env;
  }
  const std::string o = absl::GetFlag(FLAGS_o);
  if (o == "table") {
    g.output = OutputFormat::kTable;
  } else if (o == "json") {
    g.output = OutputFormat::kJson;
  } else if (o == "yaml") {
    g.output = OutputFormat::kYaml;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("-o ", o, ": choose table, json or yaml"));
  }
  return g;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const GlobalOptions& options) {
  std::string token;
  if (!options.token_file.empty()) {
    auto tokens = rpc::ReadTokenFile(options.token_file);
    if (!tokens.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file: ", tokens.status().message()));
    }
    token = tokens->front();
  }
  return rpc::MakeChannel(options.coordinator, token);
}

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return kExitUsage;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kUnavailable:
      return kExitUnavailable;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitUnauthenticated;
    case absl::StatusCode::kDeadlineExceeded:
      return kExitTimeout;
    default:
      return kExitFailed;
  }
}

int Fail(const absl::Status& status) {
  std::string hint;
  if (absl::IsUnavailable(status)) {
    hint = "\n  is mt-coordinator running there? set --coordinator or MT_COORDINATOR";
  } else if (absl::IsUnauthenticated(status)) {
    hint = "\n  the coordinator wants a bearer token: --token-file or MT_TOKEN_FILE";
  }
  std::fprintf(stderr, "mtctl: %s%s\n", std::string(status.message()).c_str(), hint.c_str());
  return ExitCodeFor(status);
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, opts);
  return out;
}

namespace {
// JSON is YAML: re-emit the JSON tree in block style.
void EmitYaml(const YAML::Node& node, YAML::Emitter* out) {
  if (node.IsMap()) {
    *out << YAML::BeginMap;
    for (const auto& kv : node) {
      *out << YAML::Key << kv.first.as<std::string>() << YAML::Value;
      EmitYaml(kv.second, out);
    }
    *out << YAML::EndMap;
  } else if (node.IsSequence()) {
    *out << YAML::BeginSeq;
    for (const auto& item : node) EmitYaml(item, out);
    *out << YAML::EndSeq;
  } else if (node.IsScalar()) {
    *out << node.as<std::string>();
  } else {
    *out << YAML::Null;
  }
}
}  // namespace

std::string ToYaml(const google::protobuf::Message& message) {
  YAML::Node tree = YAML::Load(ToJson(message));
  YAML::Emitter out;
  EmitYaml(tree, &out);
  return std::string(out.c_str()) + "\n";
}

void PrintStructured(const google::protobuf::Message& message, OutputFormat format) {
  std::cout << (format == OutputFormat::kYaml ? ToYaml(message) : ToJson(message));
  std::cout.flush();
}

std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size(), 0);
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t i = 0; i < cells.size(); ++i) {
      s += cells[i];
      if (i + 1 < cells.size()) s += std::string(width[i] - cells[i].size() + 2, ' ');
    }
    return s + "\n";
  };
  std::string out = line(header);
  for (const auto& row : rows) out += line(row);
  return out;
}

}  // namespace mt::client
