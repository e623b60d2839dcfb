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
#include "common/base/errors.h"
#include "common/base/files.h"
#include "common/base/paths.h"
#include "common/base/status_macros.h"
#include "common/checkpoint/file_writer.h"
#include "common/checkpoint/safetensors.h"
#include "google/protobuf/util/json_util.h"

namespace mt::checkpoint {
namespace {

constexpr uint64_t kMaxManifestBytes = 512ull << 20;

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

std::string ShardFileName(int tp_rank, int pp_rank, int index, int count) {
  if (count <= 1) return ShardFileName(tp_rank, pp_rank);
  return absl::StrFormat("mp_rank_%02d_%03d-%05d-of-%05d.safetensors", tp_rank, pp_rank, index + 1,
                         count);
}

std::vector<std::vector<size_t>> SplitIntoFiles(const std::vector<uint64_t>& sizes,
                                                int64_t max_file_bytes) {
  std::vector<std::vector<size_t>> groups;
  if (sizes.empty()) return groups;
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s;
  uint64_t target = total;
  if (max_file_bytes > 0) {
    const uint64_t bound = static_cast<uint64_t>(max_file_bytes);
    const uint64_t files = std::max<uint64_t>(1, (total + bound - 1) / bound);
    target = (total + files - 1) / files;  // <= bound
  }
  uint64_t in_group = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (groups.empty() || (in_group > 0 && in_group + sizes[i] > target)) {
      groups.emplace_back();
      in_group = 0;
    }
    groups.back().push_back(i);
    in_group += sizes[i];
  }
  return groups;
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
        absl::StrCat(path, ": not a checkpoint manifest (not JSON of mt.v1.CheckpointManifest)"));
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
  if (!PathExists(path)) return absl::NotFoundError(absl::StrCat("no ", path));
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
    if (step >= 0 && PathExists(JoinPath(JoinPath(save_dir, name), kManifestFile))) {
      steps.push_back(step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

VerifiedFiles ReadAndVerifyCheckpointFiles(const std::string& dir,
                                           const mt::v1::CheckpointManifest& manifest,
                                           const VerifyOptions& options) {
  VerifiedFiles out;
  const int n = manifest.files_size();
  // Which files to keep, decided up front so that the bound holds whatever the threads do.
  std::vector<bool> keep(n, false);
  int64_t kept_bytes = 0;
  for (int i = 0; i < n && options.keep != nullptr; ++i) {
    const auto& f = manifest.files(i);
    if (options.keep(f) && kept_bytes + f.size_bytes() <= options.max_keep_bytes) {
      keep[i] = true;
      kept_bytes += f.size_bytes();
    }
  }
  std::vector<std::string> problem(n);
  std::vector<FileBytes> bytes(n);
  std::vector<int64_t> read(n, 0);
  std::set<std::string> listed;
  for (const auto& f : manifest.files()) listed.insert(f.path());
  // Largest first: the threads take the next file as they finish, so the last one started
  // is a small one (the load waits for the slowest thread).
  std::vector<size_t> order(n);
  for (int i = 0; i < n; ++i) order[i] = static_cast<size_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return manifest.files(static_cast<int>(a)).size_bytes() >
           manifest.files(static_cast<int>(b)).size_bytes();
  });
  (void)RunParallel(n, options.threads > 0 ? options.threads : DefaultIoThreads(), [&](size_t k) {
    const size_t i = order[k];
    const auto& f = manifest.files(static_cast<int>(i));
    if (absl::Status v = ValidateRelativePath(f.path(), "files.path"); !v.ok()) {
      problem[i] = std::string(v.message());
      return absl::OkStatus();
    }
    const std::string path = JoinPath(dir, f.path());
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      problem[i] = absl::StrCat(f.path(), ": missing");
      return absl::OkStatus();
    }
    if (st.st_size != f.size_bytes()) {
      problem[i] =
          absl::StrCat(f.path(), ": size ", st.st_size, ", manifest says ", f.size_bytes());
      return absl::OkStatus();
    }
    ReadObserver observer;
    if (keep[i] && options.observe != nullptr) {
      observer = [&options, &f](uint64_t offset, absl::string_view data) {
        options.observe(f, offset, data);
      };
    }
    auto digest = DigestFile(path, keep[i] ? &bytes[i] : nullptr, observer);
    if (!digest.ok()) {
      problem[i] = absl::StrCat(f.path(), ": ", digest.status().message());
      return absl::OkStatus();
    }
    read[i] = digest->size;
    if (digest->sha256 != f.sha256()) {
      problem[i] = absl::StrCat(f.path(), ": sha256 mismatch");
    } else if (digest->size != f.size_bytes()) {
      problem[i] =
          absl::StrCat(f.path(), ": size ", digest->size, ", manifest says ", f.size_bytes());
    }
    return absl::OkStatus();
  });
  for (int i = 0; i < n; ++i) {
    out.bytes_read += read[i];
    if (!problem[i].empty()) {
      out.problems.push_back(std::move(problem[i]));
    } else if (keep[i] && bytes[i].data != nullptr) {
      if (out.kept == nullptr) out.kept = std::make_shared<InMemoryFiles>();
      out.kept->Add(manifest.files(i).path(), std::move(bytes[i]));
    }
  }
  for (const auto& t : manifest.tensors()) {
    if (!listed.count(t.file())) {
      out.problems.push_back(absl::StrCat(t.name(), ": its file ", t.file(), " is not listed"));
      break;
    }
  }
  if (!out.problems.empty()) out.kept.reset();
  return out;
}

std::vector<std::string> VerifyCheckpointFiles(const std::string& dir,
                                               const mt::v1::CheckpointManifest& manifest,
                                               int threads) {
  VerifyOptions options;
  options.threads = threads;
  return ReadAndVerifyCheckpointFiles(dir, manifest, options).problems;
}

std::vector<ShardFile> ShardResult::AllFiles() const {
  std::vector<ShardFile> out;
  if (!file.empty()) out.push_back({file, size, sha256});
  out.insert(out.end(), files.begin(), files.end());
  return out;
}

// "ok\t<rank>" then "\t<file>\t<size>\t<sha256>" per file; "error\t<rank>\t<message>".
std::string SerializeShardResult(const ShardResult& r) {
  if (!r.ok) return absl::StrCat("error\t", r.rank, "\t", r.error);
  std::string out = absl::StrCat("ok\t", r.rank);
  const std::vector<ShardFile> files = r.AllFiles();
  // A rank that wrote nothing: one empty file name, as version 1 sent it.
  if (files.empty()) absl::StrAppend(&out, "\t\t0\t");
  for (const ShardFile& f : files)
    absl::StrAppend(&out, "\t", f.file, "\t", f.size, "\t", f.sha256);
  return out;
}

absl::StatusOr<ShardResult> ParseShardResult(const std::string& s) {
  ShardResult r;
  if (absl::StartsWith(s, "error\t")) {
    std::vector<std::string> parts = absl::StrSplit(s, absl::MaxSplits('\t', 2));
    if (parts.size() == 3 && absl::SimpleAtoi(parts[1], &r.rank)) {
      r.ok = false;
      r.error = parts[2];
      return r;
    }
  }
  std::vector<std::string> parts = absl::StrSplit(s, '\t');
  if (parts.size() >= 5 && (parts.size() - 2) % 3 == 0 && parts[0] == "ok" &&
      absl::SimpleAtoi(parts[1], &r.rank)) {
    r.ok = true;
    for (size_t i = 2; i < parts.size(); i += 3) {
      ShardFile f;
      f.file = parts[i];
      f.sha256 = parts[i + 2];
      if (!absl::SimpleAtoi(parts[i + 1], &f.size)) {
        return absl::InvalidArgumentError(
            absl::StrCat("not a shard result: size \"", parts[i + 1], "\""));
      }
      if (f.file.empty()) continue;  // a rank that wrote nothing
      MT_RETURN_IF_ERROR(ValidateRelativePath(f.file, "shard file"));
      r.files.push_back(std::move(f));
    }
    return r;
  }
  return absl::InvalidArgumentError(absl::StrCat("not a shard result: \"", s.substr(0, 80), "\""));
}

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? absl::OkStatus() : ErrnoStatus("stat", path, errno);
  }
  if (S_ISDIR(st.st_mode)) {
    for (const std::string& name : ListDir(path)) (void)RemoveTree(JoinPath(path, name));
    if (::rmdir(path.c_str()) != 0) return ErrnoStatus("removing", path, errno);
    return absl::OkStatus();
  }
  if (::unlink(path.c_str()) != 0) return ErrnoStatus("removing", path, errno);
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
    for (const ShardFile& file : r.AllFiles()) {
      if (file.file.empty() || !seen.insert(file.file).second) continue;
      const std::string path = JoinPath(partial_dir, file.file);
      auto index = ReadSafetensorsIndex(path);
      if (!index.ok()) return fail(index.status());
      mt::v1::CheckpointFile* f = base.add_files();
      f->set_path(file.file);
      f->set_size_bytes(file.size);
      f->set_sha256(file.sha256);
      const int tp_rank = MetaInt(index->metadata, "tp_rank", 0);
      const int tp_size = MetaInt(index->metadata, "tp_size", 1);
      const int pp_rank = MetaInt(index->metadata, "pp_rank", 0);
      for (const SafetensorsEntry& e : index->tensors) {
        mt::v1::ManifestTensor* t = base.add_tensors();
        t->set_name(e.name);
        t->set_file(file.file);
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
  }
  // Files of an earlier, killed attempt at this save (temporaries, shards no rank wrote now).
  for (const std::string& name : ListDir(partial_dir)) {
    if (!seen.count(name)) (void)RemoveTree(JoinPath(partial_dir, name));
  }
  if (absl::Status s = WriteManifest(partial_dir, base); !s.ok()) return fail(s);
  if (absl::Status s = FsyncDirectory(partial_dir); !s.ok()) return fail(s);
  const std::string final_dir = JoinPath(save_dir, IterationDirName(base.step()));
  if (PathExists(final_dir)) {
    // A checkpoint of this step from an earlier attempt (one that was found damaged, or
    // that `latest` never pointed at): moved aside, then removed.
    const std::string trash =
        JoinPath(save_dir, absl::StrCat(".trash-", ::getpid(), "-", IterationDirName(base.step())));
    if (::rename(final_dir.c_str(), trash.c_str()) != 0) {
      return fail(ErrnoStatus("moving aside", final_dir, errno));
    }
    (void)RemoveTree(trash);
  }
  if (::rename(partial_dir.c_str(), final_dir.c_str()) != 0) {
    return fail(ErrnoStatus("renaming to", final_dir, errno));
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
  ChooseOptions options;
  options.verify = verify;
  return ChooseCheckpoint(path, options);
}

absl::StatusOr<LoadChoice> ChooseCheckpoint(const std::string& path, const ChooseOptions& options) {
  MT_RETURN_IF_ERROR(ValidatePath(path, "checkpoint path"));
  // Reads and checks one candidate; fills c's files and bytes.
  auto verify = [&](const std::string& dir, const mt::v1::CheckpointManifest& manifest,
                    LoadChoice* c) -> std::vector<std::string> {
    if (!options.verify) return {};
    VerifyOptions v;
    v.threads = options.threads;
    v.max_keep_bytes = options.max_keep_bytes;
    if (options.keep != nullptr) {
      v.keep = [&](const mt::v1::CheckpointFile& f) { return options.keep(manifest, f); };
    }
    if (options.observe != nullptr) {
      v.observe = [&](const mt::v1::CheckpointFile& f, uint64_t offset, absl::string_view data) {
        options.observe(dir, f, offset, data);
      };
    }
    VerifiedFiles files = ReadAndVerifyCheckpointFiles(dir, manifest, v);
    c->files = std::move(files.kept);
    c->bytes_read += files.bytes_read;
    return files.problems;
  };
  if (PathExists(JoinPath(path, kManifestFile))) {
    LoadChoice c;
    c.dir = path;
    MT_ASSIGN_OR_RETURN(c.manifest, ReadManifest(path));
    std::vector<std::string> problems = verify(path, c.manifest, &c);
    if (!problems.empty()) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", path, " is damaged: ", absl::StrJoin(problems, "; ")));
    }
    return c;
  }
  if (!IsDirectory(path)) {
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
    std::vector<std::string> problems = verify(dir, *manifest, &c);
    if (!problems.empty()) {
      c.problems.push_back(
          absl::StrCat(IterationDirName(*it), ": ", absl::StrJoin(problems, "; ")));
      continue;
    }
    c.dir = dir;
    c.manifest = *std::move(manifest);
    return c;
  }
  c.files.reset();
  if (c.problems.empty()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", path));
  }
  return absl::DataLossError(
      absl::StrCat("no loadable checkpoint in ", path, ": ", absl::StrJoin(c.problems, "; ")));
}

}  // namespace mt::checkpoint
