#include "common/checkpoint/manifest_check.h"

#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/confine.h"
#include "common/base/paths.h"
#include "common/checkpoint/host_tensor.h"
#include "common/checkpoint/safetensors.h"

namespace mt::checkpoint {
namespace {

std::string Dims(const google::protobuf::RepeatedField<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

// What is wrong with one tensor's own fields (full_shape against shape, split and TP).
std::string CheckTensorFields(const mt::v1::ManifestTensor& t) {
  const int rank = t.shape_size();
  if (t.full_shape_size() != rank) {
    return absl::StrCat("tensor ", t.name(), ": full_shape ", Dims(t.full_shape()), " and shape ",
                        Dims(t.shape()), " differ in rank");
  }
  if (t.split_dim() < -1 || t.split_dim() >= rank || t.tp_size() < 0 || t.tp_rank() < 0 ||
      t.tp_rank() >= std::max(1, t.tp_size())) {
    return absl::StrCat("tensor ", t.name(), ": split_dim ", t.split_dim(), ", tp_rank ",
                        t.tp_rank(), ", tp_size ", t.tp_size(), " do not fit its shape ",
                        Dims(t.shape()));
  }
  const int64_t tp = std::max(1, t.tp_size());
  for (int d = 0; d < rank; ++d) {
    const int64_t want = d == t.split_dim() ? t.shape(d) * tp : t.shape(d);
    if (t.full_shape(d) != want) {
      return absl::StrCat("tensor ", t.name(), ": full_shape ", Dims(t.full_shape()),
                          " does not follow from shape ", Dims(t.shape()), ", split_dim ",
                          t.split_dim(), " and tp_size ", tp);
    }
  }
  return "";
}

bool SameShape(const google::protobuf::RepeatedField<int64_t>& a, const std::vector<int64_t>& b) {
  return static_cast<size_t>(a.size()) == b.size() && std::equal(b.begin(), b.end(), a.begin());
}

}  // namespace

std::vector<std::string> CheckManifestFilesInside(const std::string& dir,
                                                  const mt::v1::CheckpointManifest& manifest) {
  std::vector<std::string> problems;
  for (const mt::v1::CheckpointFile& f : manifest.files()) {
    if (absl::Status s = CheckStaysInside(dir, f.path(), "manifest files.path"); !s.ok()) {
      problems.push_back(std::string(s.message()));
    }
  }
  return problems;
}

std::vector<std::string> CheckManifestTensors(const std::string& dir,
                                              const mt::v1::CheckpointManifest& manifest) {
  std::vector<std::string> problems;
  std::map<std::string, SafetensorsIndex> shards;
  for (const mt::v1::CheckpointFile& f : manifest.files()) {
    if (!absl::EndsWith(f.path(), ".safetensors")) continue;
    auto index = ReadSafetensorsIndex(JoinPath(dir, f.path()));
    if (!index.ok()) {
      problems.push_back(absl::StrCat(f.path(), ": ", index.status().message()));
      continue;
    }
    shards.emplace(f.path(), *std::move(index));
  }
  std::set<std::pair<std::string, std::string>> described;  // (file, tensor)
  for (const mt::v1::ManifestTensor& t : manifest.tensors()) {
    described.emplace(t.file(), t.name());
    if (std::string p = CheckTensorFields(t); !p.empty()) {
      problems.push_back(std::move(p));
      continue;
    }
    auto shard = shards.find(t.file());
    if (shard == shards.end()) {
      problems.push_back(absl::StrCat("tensor ", t.name(), ": its file ", t.file(),
                                      " is not a listed, readable .safetensors file"));
      continue;
    }
    const SafetensorsEntry* e = shard->second.Find(t.name());
    if (e == nullptr) {
      problems.push_back(absl::StrCat("tensor ", t.name(), ": not in ", t.file()));
    } else if (t.dtype() != DTypeName(e->dtype) || !SameShape(t.shape(), e->shape)) {
      problems.push_back(absl::StrCat("tensor ", t.name(), ": the manifest says ", t.dtype(),
                                      Dims(t.shape()), ", ", t.file(), " holds ",
                                      DTypeName(e->dtype), ShapeString(e->shape)));
    }
  }
  for (const auto& [file, index] : shards) {
    for (const SafetensorsEntry& e : index.tensors) {
      if (!described.count({file, e.name})) {
        problems.push_back(absl::StrCat(file, " holds ", e.name, ", which the manifest lacks"));
      }
    }
  }
  return problems;
}

}  // namespace mt::checkpoint
