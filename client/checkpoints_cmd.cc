// mtctl checkpoints list | describe | verify | delete | download | export | import
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/format.h"
#include "client/rpc.h"
#include "client/verbs.h"
#include "common/base/files.h"
#include "common/base/status_macros.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_writer.h"

ABSL_FLAG(std::string, dtype, "",
          "checkpoints export: weights' data type, float32 (default), float16 or bfloat16.");

namespace mt::client {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(30);
// Verify, export and import read or write whole checkpoints on the coordinator's side.
constexpr absl::Duration kLongTimeout = absl::Hours(1);

std::string LayoutText(const mt::v1::Layout& l) {
  return absl::StrCat("tp", std::max(1, l.tensor_model_parallel_size()), " pp",
                      std::max(1, l.pipeline_model_parallel_size()), " dp",
                      std::max(1, l.data_parallel_size()));
}

// Paths given on the command line are the user's; the coordinator wants them absolute.
std::string Absolute(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char buf[4096];
  if (::getcwd(buf, sizeof(buf)) == nullptr) return path;
  return absl::StrCat(buf, "/", path);
}

absl::Status Usage(absl::string_view text) { return absl::InvalidArgumentError(text); }

void PrintCheckpoint(const mt::v1::Checkpoint& c) {
  std::cout << "id:          " << c.id() << "\n"
            << "job:         " << (c.job_id().empty() ? "(imported)" : c.job_id()) << "\n"
            << "state:       " << StateName(c.state()) << (c.is_latest() ? "  (latest)" : "")
            << "\n"
            << "step:        " << c.step() << "\n"
            << "samples:     " << c.consumed_samples() << "\n"
            << "loss:        " << Number(c.loss()) << "  validation " << Number(c.validation_loss())
            << "\n"
            << "layout:      " << LayoutText(c.layout()) << "  world " << c.layout().world_size()
            << "\n"
            << "directory:   " << c.directory() << "\n"
            << "size:        " << BinaryBytes(c.size_bytes()) << "\n"
            << "created:     " << LocalTime(c.create_time()) << "\n"
            << "format:      "
            << (c.format_version() == 0 ? std::string("Hugging Face GPT-2")
                                        : absl::StrCat("mt-checkpoint v", c.format_version()))
            << "\n";
  if (c.loading_job_ids_size() > 0) {
    std::cout << "loaded by:   " << absl::StrJoin(c.loading_job_ids(), ", ") << "\n";
  }
  if (c.evaluations_size() > 0) {
    std::vector<std::vector<std::string>> evals;
    for (const auto& e : c.evaluations()) {
      evals.push_back({"  " + e.job_id(), LocalTime(e.time()), absl::StrFormat("%.6f", e.loss()),
                       absl::StrFormat("%.4f", e.perplexity()), absl::StrCat(e.tokens()),
                       absl::StrCat(e.data_path(), " (", e.split(), ")",
                                    e.quantize().empty() ? "" : ", " + e.quantize() + " weights")});
    }
    std::cout << "evaluations:\n"
              << FormatTable({"  JOB", "TIME", "LOSS", "PERPLEXITY", "TOKENS", "DATA (SPLIT)"},
                             evals);
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& f : c.files())
    rows.push_back({f.path(), BinaryBytes(f.size_bytes()), f.sha256()});
  std::cout << "files:\n"
            << FormatTable({"  PATH", "SIZE", "SHA256"}, [&] {
                 for (auto& r : rows) r[0] = "  " + r[0];
                 return rows;
               }());
}

int List(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.size() > 1) return Fail(Usage("usage: mtctl checkpoints list [JOB_ID]"));
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::ListCheckpointsRequest request;
  if (!args.empty()) request.set_job_id(args[0]);
  auto all = ListAll(stub->get(), &Stub::ListCheckpoints, request, kTimeout);
  if (!all.ok()) return Fail(all.status());
  if (options.output != OutputFormat::kTable) {
    PrintStructured(*all, options.output);
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : all->checkpoints()) {
    rows.push_back({c.id(), c.job_id().empty() ? "-" : c.job_id(), absl::StrCat(c.step()),
                    StateName(c.state()) + (c.is_latest() ? "*" : ""), Number(c.loss()),
                    Number(c.validation_loss()), LayoutText(c.layout()),
                    BinaryBytes(c.size_bytes()), LocalTime(c.create_time()), c.directory()});
  }
  std::cout << FormatTable(
      {"ID", "JOB", "STEP", "STATE", "LOSS", "VAL LOSS", "LAYOUT", "SIZE", "CREATED", "DIRECTORY"},
      rows);
  if (std::any_of(all->checkpoints().begin(), all->checkpoints().end(),
                  [](const mt::v1::Checkpoint& c) { return c.is_latest(); })) {
    std::cout << "(* = the job's latest)\n";
  }
  return kExitOk;
}

int Describe(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.size() != 1) return Fail(Usage("usage: mtctl checkpoints describe CHECKPOINT_ID"));
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::GetCheckpointRequest request;
  request.set_checkpoint_id(args[0]);
  mt::v1::Checkpoint c;
  absl::Status s = Call(stub->get(), &Stub::GetCheckpoint, request, &c, kTimeout);
  if (!s.ok()) return Fail(s);
  if (options.output != OutputFormat::kTable) {
    PrintStructured(c, options.output);
  } else {
    PrintCheckpoint(c);
  }
  return kExitOk;
}

int Verify(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.size() != 1) return Fail(Usage("usage: mtctl checkpoints verify CHECKPOINT_ID"));
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::VerifyCheckpointRequest request;
  request.set_checkpoint_id(args[0]);
  mt::v1::VerifyCheckpointResponse response;
  absl::Status s = Call(stub->get(), &Stub::VerifyCheckpoint, request, &response, kLongTimeout);
  if (!s.ok()) return Fail(s);
  if (options.output != OutputFormat::kTable) {
    PrintStructured(response, options.output);
  } else if (response.ok()) {
    std::cout << response.checkpoint().id() << " VERIFIED: " << response.checkpoint().files_size()
              << " files, " << BinaryBytes(response.checkpoint().size_bytes()) << "\n";
  } else {
    std::cout << response.checkpoint().id() << " CORRUPT:\n";
    for (const auto& p : response.problems()) std::cout << "  " << p << "\n";
  }
  return response.ok() ? kExitOk : kExitFailed;
}

int Delete(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.empty()) return Fail(Usage("usage: mtctl checkpoints delete CHECKPOINT_ID ..."));
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  int code = kExitOk;
  for (const std::string& id : args) {
    mt::v1::DeleteCheckpointRequest request;
    request.set_checkpoint_id(id);
    mt::v1::Checkpoint c;
    absl::Status s = Call(stub->get(), &Stub::DeleteCheckpoint, request, &c, absl::Minutes(5));
    if (!s.ok()) {
      code = Fail(s);
      continue;
    }
    if (options.output != OutputFormat::kTable) {
      PrintStructured(c, options.output);
    } else {
      std::cout << c.id() << " " << StateName(c.state()) << "\n";
    }
  }
  return code;
}

// Writes the files of a download stream under a destination directory, hashing each as its
// bytes arrive, and checks every file's size and sha256 against what the server announced.
// The server names the files: a name that would leave the destination is refused.
class DownloadSink {
 public:
  explicit DownloadSink(std::string dest) : dest_(std::move(dest)) {}
  ~DownloadSink() { CloseFile(); }
  DownloadSink(const DownloadSink&) = delete;
  DownloadSink& operator=(const DownloadSink&) = delete;

  // Takes one chunk: a chunk that names a file finishes the previous file and starts it.
  absl::Status Take(const mt::v1::DownloadCheckpointChunk& chunk) {
    if (chunk.has_file()) {
      MT_RETURN_IF_ERROR(FinishFile());
      MT_RETURN_IF_ERROR(StartFile(chunk.file()));
    }
    if (fd_ < 0 || chunk.offset() != received_) {
      return absl::DataLossError("the download stream is out of order");
    }
    MT_RETURN_IF_ERROR(WriteAll(fd_, chunk.data(), file_.path()));
    sha_->Update(chunk.data().data(), chunk.data().size());
    received_ += static_cast<int64_t>(chunk.data().size());
    total_received_ += static_cast<int64_t>(chunk.data().size());
    return absl::OkStatus();
  }

  // Finishes the last file; call once the stream ended well.
  absl::Status Finish() { return FinishFile(); }

  int64_t total_received() const { return total_received_; }
  const std::vector<mt::v1::CheckpointFile>& files() const { return files_; }
  // Files whose size or sha256 differ from the announced ones, one line each.
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  absl::Status StartFile(const mt::v1::CheckpointFile& file) {
    MT_RETURN_IF_ERROR(ValidateRelativePath(file.path(), "downloaded file path"));
    const std::string path = absl::StrCat(dest_, "/", file.path());
    MT_RETURN_IF_ERROR(MakeDirectories(path.substr(0, path.rfind('/'))));
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("creating ", path, ": ", std::strerror(errno)));
    }
    file_ = file;
    received_ = 0;
    sha_ = std::make_unique<checkpoint::Sha256>();
    files_.push_back(file);
    return absl::OkStatus();
  }

  absl::Status FinishFile() {
    if (fd_ < 0) return absl::OkStatus();
    const bool synced = ::fsync(fd_) == 0;
    CloseFile();
    if (!synced) return absl::DataLossError(absl::StrCat("writing ", file_.path(), " failed"));
    const std::string sha = sha_->HexDigest();
    if (received_ != file_.size_bytes()) {
      problems_.push_back(
          absl::StrCat(file_.path(), ": ", received_, " bytes, expected ", file_.size_bytes()));
    } else if (sha != file_.sha256()) {
      problems_.push_back(absl::StrCat(file_.path(), ": sha256 ", sha, " != ", file_.sha256()));
    }
    return absl::OkStatus();
  }

  void CloseFile() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  const std::string dest_;
  mt::v1::CheckpointFile file_;  // the file being written
  int fd_ = -1;
  int64_t received_ = 0;
  std::unique_ptr<checkpoint::Sha256> sha_;
  int64_t total_received_ = 0;
  std::vector<mt::v1::CheckpointFile> files_;
  std::vector<std::string> problems_;
};

// A download's progress bar on stderr: redrawn in place at most every 100 ms on a terminal,
// a line every 2 s otherwise.
class DownloadProgress {
 public:
  DownloadProgress(std::string id, int64_t total)
      : id_(std::move(id)),
        total_(std::max<int64_t>(1, total)),
        tty_(::isatty(STDERR_FILENO) != 0),
        start_(absl::Now()) {}

  void Draw(int64_t received, bool final) {
    const absl::Time now = absl::Now();
    if (!final && now - last_draw_ < absl::Milliseconds(tty_ ? 100 : 2000)) return;
    last_draw_ = now;
    const double f = std::min(1.0, static_cast<double>(received) / total_);
    const double secs = std::max(1e-3, absl::ToDoubleSeconds(now - start_));
    std::fprintf(stderr, "%s%s %s %5.1f%%  %s  %s/s%s", tty_ ? "\r" : "", id_.c_str(),
                 Bar(f, 30).c_str(), 100 * f, BinaryBytes(received).c_str(),
                 BinaryBytes(received / secs).c_str(), tty_ && !final ? "" : "\n");
  }

 private:
  const std::string id_;
  const int64_t total_;
  const bool tty_;
  const absl::Time start_;
  absl::Time last_draw_ = absl::InfinitePast();
};

// Streams a checkpoint's files into `sink`, drawing progress; cancels the stream on a failure.
absl::Status ReceiveCheckpoint(Stub* stub, const mt::v1::Checkpoint& meta, DownloadSink* sink) {
  mt::v1::DownloadCheckpointRequest request;
  request.set_checkpoint_id(meta.id());
  grpc::ClientContext context;
  auto reader = stub->DownloadCheckpoint(&context, request);
  DownloadProgress progress(meta.id(), meta.size_bytes());
  mt::v1::DownloadCheckpointChunk chunk;
  while (reader->Read(&chunk)) {
    if (absl::Status s = sink->Take(chunk); !s.ok()) {
      context.TryCancel();
      (void)reader->Finish();
      return s;
    }
    progress.Draw(sink->total_received(), /*final=*/false);
  }
  MT_RETURN_IF_ERROR(rpc::FromGrpcStatus(reader->Finish()));
  MT_RETURN_IF_ERROR(sink->Finish());
  progress.Draw(sink->total_received(), /*final=*/true);
  return absl::OkStatus();
}

int Download(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.size() != 2) {
    return Fail(Usage("usage: mtctl checkpoints download CHECKPOINT_ID DEST_DIR"));
  }
  const std::string dest = args[1];
  struct stat st;
  if (::stat(dest.c_str(), &st) == 0) {
    return Fail(absl::AlreadyExistsError(
        absl::StrCat(dest, " exists; give a new directory to download into")));
  }
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::Checkpoint meta;
  mt::v1::GetCheckpointRequest get;
  get.set_checkpoint_id(args[0]);
  if (absl::Status s = Call(stub->get(), &Stub::GetCheckpoint, get, &meta, kTimeout); !s.ok()) {
    return Fail(s);
  }
  if (absl::Status s = MakeDirectories(dest); !s.ok()) return Fail(s);
  DownloadSink sink(dest);
  if (absl::Status s = ReceiveCheckpoint(stub->get(), meta, &sink); !s.ok()) {
    // The destination is new (checked above): a broken stream leaves nothing in it, so the
    // same command can run again. Files that arrived whole but fail their checksum (below) stay
    // for inspection.
    if (absl::Status r = checkpoint::RemoveTree(dest); !r.ok()) {
      std::fprintf(stderr, "mtctl: removing the partial download: %s\n",
                   std::string(r.message()).c_str());
    }
    return Fail(s);
  }
  if (!sink.problems().empty()) {
    for (const auto& p : sink.problems()) std::fprintf(stderr, "mtctl: %s\n", p.c_str());
    return Fail(
        absl::DataLossError(absl::StrCat(sink.problems().size(), " of ", sink.files().size(),
                                         " files failed the checksum check in ", dest)));
  }
  if (options.output != OutputFormat::kTable) {
    mt::v1::ExportCheckpointResponse out;  // the same shape: a directory and its files
    out.set_output_dir(dest);
    for (const auto& f : sink.files()) *out.add_files() = f;
    PrintStructured(out, options.output);
  } else {
    std::cout << "downloaded " << meta.id() << " to " << dest << ": " << sink.files().size()
              << " files, " << BinaryBytes(sink.total_received()) << ", every sha256 checked\n";
  }
  return kExitOk;
}

int Export(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.size() != 2) {
    return Fail(Usage(
        "usage: mtctl checkpoints export CHECKPOINT_ID OUTPUT_DIR [--dtype float16|bfloat16]"));
  }
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::ExportCheckpointRequest request;
  request.set_checkpoint_id(args[0]);
  request.set_output_dir(Absolute(args[1]));
  request.set_format(mt::v1::EXPORT_FORMAT_HF);
  request.set_dtype(absl::GetFlag(FLAGS_dtype));
  mt::v1::ExportCheckpointResponse response;
  absl::Status s = Call(stub->get(), &Stub::ExportCheckpoint, request, &response, kLongTimeout);
  if (!s.ok()) return Fail(s);
  if (options.output != OutputFormat::kTable) {
    PrintStructured(response, options.output);
  } else {
    std::cout << "exported " << args[0] << " to " << response.output_dir() << " (Hugging Face "
              << "GPT-2):\n";
    for (const auto& f : response.files()) {
      std::cout << "  " << f.path() << "  " << BinaryBytes(f.size_bytes()) << "\n";
    }
  }
  return kExitOk;
}

int Import(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.empty() || args.size() > 2) {
    return Fail(Usage("usage: mtctl checkpoints import DIRECTORY [JOB_ID]"));
  }
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::ImportCheckpointRequest request;
  request.set_directory(Absolute(args[0]));
  if (args.size() == 2) request.set_job_id(args[1]);
  mt::v1::Checkpoint c;
  absl::Status s = Call(stub->get(), &Stub::ImportCheckpoint, request, &c, kLongTimeout);
  if (!s.ok()) return Fail(s);
  if (options.output != OutputFormat::kTable) {
    PrintStructured(c, options.output);
  } else {
    std::cout << c.id() << "\n";
  }
  return kExitOk;
}

}  // namespace

int RunCheckpoints(const std::vector<std::string>& args, const GlobalOptions& options) {
  static const std::map<std::string, int (*)(const std::vector<std::string>&, const GlobalOptions&)>
      kSub = {{"list", &List},     {"describe", &Describe}, {"verify", &Verify},
              {"delete", &Delete}, {"download", &Download}, {"export", &Export},
              {"import", &Import}};
  if (args.empty() || kSub.find(args[0]) == kSub.end()) {
    return Fail(
        Usage("usage: mtctl checkpoints list|describe|verify|delete|download|export|import ...; "
              "`mtctl checkpoints --help` explains each"));
  }
  return kSub.at(args[0])(std::vector<std::string>(args.begin() + 1, args.end()), options);
}

}  // namespace mt::client
