#include "common/checkpoint/checkpoint_dir.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/files.h"
#include "common/base/status_macros.h"
#include "common/checkpoint/file_writer.h"
#include "common/checkpoint/safetensors.h"
#include "google/protobuf/util/json_util.h"

namespace mt::checkpoint {
namespace {

constexpr uint64_t kMaxManifestBytes = 512ull << 20;

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

int MetaInt(const std::map<std::string, std::string>& meta, const std::string& key, int dflt) {
  auto it = meta.find(key);
  int v = dflt;
  if (it == meta.end() || !absl::SimpleAtoi(it->second, &v)) return dflt;
  return v;
}

}  // namespace

std::string IterationDirName(int64_t step) { return absl::StrFormat("iter_%07d", step); }

int64_t ParseIterationDirName(const std::string& name) {
  absl::string_view rest = name;
  if (!absl::ConsumePrefix(&rest, "iter_") || rest.size() < 7) return -1;
  for (char c : rest) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return -1;
  }
  int64_t step = -1;
  if (!absl::SimpleAtoi(rest, &step)) return -1;
  return step;
}

std::string ShardFileName(int tp_rank, int pp_rank) {
  return absl::StrFormat("mp_rank_%02d_%03d.safetensors", tp_rank, pp_rank);
}

std::string PartialDirName(int64_t step, int attempt) {
  return absl::StrCat(".partial-", IterationDirName(step), "-a", attempt);
}

std::string ManifestToJson(const mt::v1::CheckpointManifest& manifest) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(manifest, &out, options);
  return out;
}

absl::StatusOr<mt::v1::CheckpointManifest> ReadManifest(const std::string& dir) {
  const std::string path = JoinPath(dir, kManifestFile);
  MT_ASSIGN_OR_RETURN(std::string text, ReadFile(path, kMaxManifestBytes));
  mt::v1::CheckpointManifest m;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // a newer minor writer may add fields
  auto s = google::protobuf::util::JsonStringToMessage(text, &m, options);
  if (!s.ok()) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a checkpoint manifest: ", s.message().ToString()));
  }
  if (m.format() != kFormatName) {
    return absl::DataLossError(
        absl::StrCat(path, ": format is \"", m.format(), "\", not \"", kFormatName, "\""));
  }
  if (m.format_version() > kFormatVersion || m.format_version() < 1) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": format version ", m.format_version(),
                                                      "; this mt reads 1..", kFormatVersion,
                                                      " (upgrade mt to load it)"));
  }
  for (const auto& f : m.files()) {
    if (absl::Status v = ValidateRelativePath(f.path(), "manifest files.path"); !v.ok()) {
      return absl::DataLossError(absl::StrCat(path, ": ", v.message()));
    }
  }
  return m;
}

absl::Status WriteManifest(const std::string& dir, const mt::v1::CheckpointManifest& manifest) {
  MT_ASSIGN_OR_RETURN(auto w, AtomicFileWriter::Create(JoinPath(dir, kManifestFile)));
  MT_RETURN_IF_ERROR(w->Append(ManifestToJson(manifest)));
  return w->Commit().status();
}

absl::StatusOr<int64_t> ReadLatest(const std::string& save_dir) {
  const std::string path = JoinPath(save_dir, kLatestFile);
  if (!Exists(path)) return absl::NotFoundError(absl::StrCat("no ", path));
  MT_ASSIGN_OR_RETURN(std::string text, ReadFile(path, 4096));
  int64_t step = -1;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &step) || step < 0) {
    return absl::DataLossError(absl::StrCat(path, " does not hold an iteration number"));
  }
  return step;
}

absl::Status WriteLatest(const std::string& save_dir, int64_t step) {
  return WriteFileAtomically(JoinPath(save_dir, kLatestFile), absl::StrCat(step, "\n"));
}

std::vector<int64_t> ListCheckpointSteps(const std::string& save_dir) {
  std::vector<int64_t> steps;
  for (const std::string& name : ListDir(save_dir)) {
    const int64_t step = ParseIterationDirName(name);
    if (step >= 0 && Exists(JoinPath(JoinPath(save_dir, name), kManifestFile))) {
      steps.push_back(step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<std::string> VerifyCheckpointFiles(const std::string& dir,
                                               const mt::v1::CheckpointManifest& manifest) {
  std::vector<std::string> problems;
  std::set<std::string> listed;
  for (const auto& f : manifest.files()) {
    listed.insert(f.path());
    if (absl::Status v = ValidateRelativePath(f.path(), "files.path"); !v.ok()) {
      problems.push_back(std::string(v.message()));
      continue;
    }
    const std::string path = JoinPath(dir, f.path());
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      problems.push_back(absl::StrCat(f.path(), ": missing"));
      continue;
    }
    if (st.st_size != f.size_bytes()) {
      problems.push_back(
          absl::StrCat(f.path(), ": size ", st.st_size, ", manifest says ", f.size_bytes()));
      continue;
    }
    auto digest = DigestFile(path);
    if (!digest.ok()) {
      problems.push_back(absl::StrCat(f.path(), ": ", digest.status().message()));
    } else if (digest->sha256 != f.sha256()) {
      problems.push_back(absl::StrCat(f.path(), ": sha256 mismatch"));
    }
  }
  for (const auto& t : manifest.tensors()) {
    if (!listed.count(t.file())) {
      problems.push_back(absl::StrCat(t.name(), ": its file ", t.file(), " is not listed"));
      break;
    }
  }
  return problems;
}

std::string SerializeShardResult(const ShardResult& r) {
  if (!r.ok) return absl::StrCat("error\t", r.rank, "\t", r.error);
  return absl::StrCat("ok\t", r.rank, "\t", r.file, "\t", r.size, "\t", r.sha256);
}

absl::StatusOr<ShardResult> ParseShardResult(const std::string& s) {
  std::vector<std::string> parts = absl::StrSplit(s, absl::MaxSplits('\t', 4));
  ShardResult r;
  if (parts.size() >= 3 && parts[0] == "error" && absl::SimpleAtoi(parts[1], &r.rank)) {
    r.ok = false;
    r.error = parts[2];
    for (size_t i = 3; i < parts.size(); ++i) absl::StrAppend(&r.error, "\t", parts[i]);
    return r;
  }
  if (parts.size() == 5 && parts[0] == "ok" && absl::SimpleAtoi(parts[1], &r.rank) &&
      absl::SimpleAtoi(parts[3], &r.size)) {
    r.ok = true;
    r.file = parts[2];
    r.sha256 = parts[4];
    if (!r.file.empty()) MT_RETURN_IF_ERROR(ValidateRelativePath(r.file, "shard file"));
    return r;
  }
  return absl::InvalidArgumentError(absl::StrCat("not a shard result: \"", s.substr(0, 80), "\""));
}

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? absl::OkStatus() : IoError("stat", path, errno);
  }
  if (S_ISDIR(st.st_mode)) {
    for (const std::string& name : ListDir(path)) (void)RemoveTree(JoinPath(path, name));
    if (::rmdir(path.c_str()) != 0) return IoError("removing", path, errno);
    return absl::OkStatus();
  }
  if (::unlink(path.c_str()) != 0) return IoError("removing", path, errno);
  return absl::OkStatus();
}

absl::StatusOr<mt::v1::CheckpointManifest> CommitCheckpoint(
    const std::string& save_dir, const std::string& partial_dir, mt::v1::CheckpointManifest base,
    const std::vector<ShardResult>& results) {
  auto fail = [&](absl::Status s) {
    (void)RemoveTree(partial_dir);
    return s;
  };
  std::vector<std::string> errors;
  for (const ShardResult& r : results) {
    if (!r.ok) errors.push_back(absl::StrCat("rank ", r.rank, ": ", r.error));
  }
  if (!errors.empty()) {
    return fail(absl::AbortedError(absl::StrCat("checkpoint at step ", base.step(),
                                                " not committed: ", absl::StrJoin(errors, "; "))));
  }
  base.set_format(kFormatName);
  base.set_format_version(kFormatVersion);
  base.clear_files();
  base.clear_tensors();
  std::set<std::string> seen;
  for (const ShardResult& r : results) {
    if (r.file.empty() || !seen.insert(r.file).second) continue;
    const std::string path = JoinPath(partial_dir, r.file);
    auto index = ReadSafetensorsIndex(path);
    if (!index.ok()) return fail(index.status());
    mt::v1::CheckpointFile* f = base.add_files();
    f->set_path(r.file);
    f->set_size_bytes(r.size);
    f->set_sha256(r.sha256);
    const int tp_rank = MetaInt(index->metadata, "tp_rank", 0);
    const int tp_size = MetaInt(index->metadata, "tp_size", 1);
    const int pp_rank = MetaInt(index->metadata, "pp_rank", 0);
    for (const SafetensorsEntry& e : index->tensors) {
      mt::v1::ManifestTensor* t = base.add_tensors();
      t->set_name(e.name);
      t->set_file(r.file);
      t->set_dtype(DTypeName(e.dtype));
      const int split = MetaInt(index->metadata, "split." + e.name, -1);
      t->set_split_dim(split);
      t->set_tp_rank(tp_rank);
      t->set_tp_size(tp_size);
      t->set_pp_rank(pp_rank);
      for (size_t d = 0; d < e.shape.size(); ++d) {
        t->add_shape(e.shape[d]);
        t->add_full_shape(static_cast<int>(d) == split ? e.shape[d] * tp_size : e.shape[d]);
      }
    }
  }
  // Files of an earlier, killed attempt at this save (temporaries, shards no rank wrote now).
  for (const std::string& name : ListDir(partial_dir)) {
    if (!seen.count(name)) (void)RemoveTree(JoinPath(partial_dir, name));
  }
  if (absl::Status s = WriteManifest(partial_dir, base); !s.ok()) return fail(s);
  if (absl::Status s = FsyncDirectory(partial_dir); !s.ok()) return fail(s);
  const std::string final_dir = JoinPath(save_dir, IterationDirName(base.step()));
  if (Exists(final_dir)) {
    // A checkpoint of this step from an earlier attempt (one that was found damaged, or
    // that `latest` never pointed at): moved aside, then removed.
    const std::string trash =
        JoinPath(save_dir, absl::StrCat(".trash-", ::getpid(), "-", IterationDirName(base.step())));
    if (::rename(final_dir.c_str(), trash.c_str()) != 0) {
      return fail(IoError("moving aside", final_dir, errno));
    }
    (void)RemoveTree(trash);
  }
  if (::rename(partial_dir.c_str(), final_dir.c_str()) != 0) {
    return fail(IoError("renaming to", final_dir, errno));
  }
  MT_RETURN_IF_ERROR(FsyncDirectory(save_dir));
  MT_RETURN_IF_ERROR(WriteLatest(save_dir, base.step()));
  // Leftovers of saves that died before their commit.
  for (const std::string& name : ListDir(save_dir)) {
    if (absl::StartsWith(name, ".partial-") || absl::StartsWith(name, ".trash-")) {
      (void)RemoveTree(JoinPath(save_dir, name));
    }
  }
  return base;
}

absl::StatusOr<LoadChoice> ChooseCheckpoint(const std::string& path, bool verify) {
  MT_RETURN_IF_ERROR(ValidatePath(path, "checkpoint path"));
  if (Exists(JoinPath(path, kManifestFile))) {
    LoadChoice c;
    c.dir = path;
    MT_ASSIGN_OR_RETURN(c.manifest, ReadManifest(path));
    if (verify) {
      std::vector<std::string> problems = VerifyCheckpointFiles(path, c.manifest);
      if (!problems.empty()) {
        return absl::DataLossError(
            absl::StrCat("checkpoint ", path, " is damaged: ", absl::StrJoin(problems, "; ")));
      }
    }
    return c;
  }
  if (!IsDir(path)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint directory ", path));
  }
  std::vector<int64_t> steps = ListCheckpointSteps(path);
  LoadChoice c;
  auto latest = ReadLatest(path);
  if (latest.ok()) {
    if (std::find(steps.begin(), steps.end(), *latest) == steps.end()) {
      c.problems.push_back(absl::StrCat(IterationDirName(*latest), " (latest): missing"));
    }
    steps.erase(std::remove_if(steps.begin(), steps.end(), [&](int64_t s) { return s > *latest; }),
                steps.end());
  } else if (!absl::IsNotFound(latest.status())) {
    c.problems.push_back(std::string(latest.status().message()));
  }
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string dir = JoinPath(path, IterationDirName(*it));
    auto manifest = ReadManifest(dir);
    if (!manifest.ok()) {
      c.problems.push_back(absl::StrCat(IterationDirName(*it), ": ", manifest.status().message()));
      continue;
    }
    std::vector<std::string> problems =
        verify ? VerifyCheckpointFiles(dir, *manifest) : std::vector<std::string>{};
    if (!problems.empty()) {
      c.problems.push_back(
          absl::StrCat(IterationDirName(*it), ": ", absl::StrJoin(problems, "; ")));
      continue;
    }
    c.dir = dir;
    c.manifest = *std::move(manifest);
    return c;
  }
  if (c.problems.empty()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", path));
  }
  return absl::DataLossError(
      absl::StrCat("no loadable checkpoint in ", path, ": ", absl::StrJoin(c.problems, "; ")));
}

}  // namespace mt::checkpoint
