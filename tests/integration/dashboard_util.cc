#include "tests/integration/dashboard_util.h"

#include <dirent.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "google/protobuf/util/json_util.h"

namespace mt::testutil {
namespace {

bool NameChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Calls `f(start, end, name)` for every reference in `text`.
template <typename F>
void ForEachReference(const std::string& text, F f) {
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '$' && i + 1 < text.size() && text[i + 1] == '{') {
      const size_t close = text.find('}', i);
      if (close != std::string::npos) {
        std::string name = text.substr(i + 2, close - i - 2);
        name = name.substr(0, name.find(':'));
        f(i, close + 1, name);
        i = close + 1;
        continue;
      }
    } else if (text[i] == '$' && i + 1 < text.size() && NameChar(text[i + 1])) {
      size_t end = i + 1;
      while (end < text.size() && NameChar(text[end])) ++end;
      f(i, end, text.substr(i + 1, end - i - 1));
      i = end;
      continue;
    } else if (text.compare(i, 2, "[[") == 0) {
      const size_t close = text.find("]]", i);
      if (close != std::string::npos) {
        std::string name = text.substr(i + 2, close - i - 2);
        f(i, close + 2, name.substr(0, name.find(':')));
        i = close + 2;
        continue;
      }
    }
    ++i;
  }
}

void Collect(const google::protobuf::Value& panels, const std::string& uid,
             std::vector<PanelQuery>* out) {
  for (const auto& p : panels.list_value().values()) {
    const auto& fields = p.struct_value().fields();
    auto title = fields.find("title");
    auto targets = fields.find("targets");
    if (targets != fields.end()) {
      for (const auto& t : targets->second.list_value().values()) {
        const auto& tf = t.struct_value().fields();
        PanelQuery q;
        q.dashboard = uid;
        q.panel = title != fields.end() ? title->second.string_value() : "";
        if (auto r = tf.find("refId"); r != tf.end()) q.ref_id = r->second.string_value();
        if (auto e = tf.find("expr"); e != tf.end()) q.expr = e->second.string_value();
        out->push_back(q);
      }
    }
    if (auto nested = fields.find("panels"); nested != fields.end()) {
      Collect(nested->second, uid, out);
    }
  }
}

}  // namespace

absl::StatusOr<google::protobuf::Value> ParseJson(const std::string& text) {
  google::protobuf::Value v;
  auto s = google::protobuf::util::JsonStringToMessage(text, &v);
  if (!s.ok()) return absl::InvalidArgumentError(std::string(s.message()));
  return v;
}

std::map<std::string, google::protobuf::Value> LoadDashboards(const std::string& source_dir) {
  std::map<std::string, google::protobuf::Value> out;
  const std::string dir = source_dir + "/dashboards";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (!absl::EndsWith(e->d_name, ".json")) continue;
    auto text = ReadFile(dir + "/" + e->d_name);
    if (!text.ok()) continue;
    auto v = ParseJson(*text);
    out[e->d_name] = v.ok() ? *v : google::protobuf::Value();
  }
  ::closedir(d);
  return out;
}

std::vector<PanelQuery> PanelQueries(const google::protobuf::Value& dashboard) {
  std::vector<PanelQuery> out;
  const auto& fields = dashboard.struct_value().fields();
  auto uid = fields.find("uid");
  auto panels = fields.find("panels");
  if (panels != fields.end()) {
    Collect(panels->second, uid != fields.end() ? uid->second.string_value() : "", &out);
  }
  return out;
}

std::set<std::string> VariableReferences(const std::string& text) {
  std::set<std::string> names;
  ForEachReference(text, [&](size_t, size_t, const std::string& name) { names.insert(name); });
  return names;
}

std::string Substitute(const std::string& text, const std::map<std::string, std::string>& values) {
  std::string out;
  size_t at = 0;
  ForEachReference(text, [&](size_t start, size_t end, const std::string& name) {
    auto it = values.find(name);
    if (it == values.end()) return;
    out.append(text, at, start - at);
    out += it->second;
    at = end;
  });
  out.append(text, at, std::string::npos);
  return out;
}

}  // namespace mt::testutil
