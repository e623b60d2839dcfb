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

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/format.h"
#include "client/rpc.h"
#include "client/verbs.h"
#include "common/base/files.h"
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

// One file being written by a download, hashed as its bytes arrive.
struct Incoming {
  mt::v1::CheckpointFile file;
  int fd = -1;
  int64_t received = 0;
  std::unique_ptr<checkpoint::Sha256> sha;
};

absl::Status MakeDirs(const std::string& path) {
  std::string prefix;
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      prefix = path.substr(0, i);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::FailedPreconditionError(
            absl::StrCat("creating ", prefix, ": ", std::strerror(errno)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Finish(Incoming* in, std::vector<std::string>* problems) {
  if (in->fd < 0) return absl::OkStatus();
  const bool synced = ::fsync(in->fd) == 0;
  ::close(in->fd);
  in->fd = -1;
  if (!synced) return absl::DataLossError(absl::StrCat("writing ", in->file.path(), " failed"));
  const std::string sha = in->sha->HexDigest();
  if (in->received != in->file.size_bytes()) {
    problems->push_back(absl::StrCat(in->file.path(), ": ", in->received, " bytes, expected ",
                                     in->file.size_bytes()));
  } else if (sha != in->file.sha256()) {
    problems->push_back(absl::StrCat(in->file.path(), ": sha256 ", sha, " != ", in->file.sha256()));
  }
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
  {
    mt::v1::GetCheckpointRequest request;
    request.set_checkpoint_id(args[0]);
    absl::Status s = Call(stub->get(), &Stub::GetCheckpoint, request, &meta, kTimeout);
    if (!s.ok()) return Fail(s);
  }
  if (absl::Status s = MakeDirs(dest); !s.ok()) return Fail(s);

  mt::v1::DownloadCheckpointRequest request;
  request.set_checkpoint_id(args[0]);
  grpc::ClientContext context;
  auto reader = (*stub)->DownloadCheckpoint(&context, request);
  mt::v1::DownloadCheckpointChunk chunk;
  Incoming in;
  std::vector<std::string> problems;
  std::vector<mt::v1::CheckpointFile> files;
  int64_t total_received = 0;
  const int64_t total = std::max<int64_t>(1, meta.size_bytes());
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  absl::Time last_draw = absl::InfinitePast();
  const absl::Time start = absl::Now();
  auto draw = [&](bool final) {
    const absl::Time now = absl::Now();
    if (!final && now - last_draw < absl::Milliseconds(tty ? 100 : 2000)) return;
    last_draw = now;
    const double f = std::min(1.0, static_cast<double>(total_received) / total);
    const double secs = std::max(1e-3, absl::ToDoubleSeconds(now - start));
    std::fprintf(stderr, "%s%s %s %5.1f%%  %s  %s/s%s", tty ? "\r" : "", meta.id().c_str(),
                 Bar(f, 30).c_str(), 100 * f, BinaryBytes(total_received).c_str(),
                 BinaryBytes(total_received / secs).c_str(), tty && !final ? "" : "\n");
  };
  absl::Status failure;
  while (failure.ok() && reader->Read(&chunk)) {
    if (chunk.has_file()) {
      failure = Finish(&in, &problems);
      if (!failure.ok()) break;
      // The server names the files: never let a name leave the destination.
      failure = ValidateRelativePath(chunk.file().path(), "downloaded file path");
      if (!failure.ok()) break;
      const std::string path = absl::StrCat(dest, "/", chunk.file().path());
      const size_t slash = path.rfind('/');
      failure = MakeDirs(path.substr(0, slash));
      if (!failure.ok()) break;
      in = Incoming();
      in.file = chunk.file();
      in.sha = std::make_unique<checkpoint::Sha256>();
      in.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (in.fd < 0) {
        failure = absl::FailedPreconditionError(
            absl::StrCat("creating ", path, ": ", std::strerror(errno)));
        break;
      }
      files.push_back(chunk.file());
    }
    if (in.fd < 0 || chunk.offset() != in.received) {
      failure = absl::DataLossError("the download stream is out of order");
      break;
    }
    const std::string& data = chunk.data();
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::write(in.fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        failure = absl::FailedPreconditionError(
            absl::StrCat("writing ", in.file.path(), ": ", std::strerror(errno)));
        break;
      }
      done += static_cast<size_t>(n);
    }
    in.sha->Update(data.data(), data.size());
    in.received += static_cast<int64_t>(data.size());
    total_received += static_cast<int64_t>(data.size());
    draw(false);
  }
  if (!failure.ok()) {
    context.TryCancel();
    (void)reader->Finish();
    if (in.fd >= 0) ::close(in.fd);
    return Fail(failure);
  }
  absl::Status s = rpc::FromGrpcStatus(reader->Finish());
  if (s.ok()) s = Finish(&in, &problems);
  if (in.fd >= 0) ::close(in.fd);
  if (!s.ok()) return Fail(s);
  draw(true);
  if (!problems.empty()) {
    for (const auto& p : problems) std::fprintf(stderr, "mtctl: %s\n", p.c_str());
    return Fail(absl::DataLossError(absl::StrCat(problems.size(), " of ", files.size(),
                                                 " files failed the checksum check in ", dest)));
  }
  if (options.output != OutputFormat::kTable) {
    mt::v1::ExportCheckpointResponse out;  // the same shape: a directory and its files
    out.set_output_dir(dest);
    for (const auto& f : files) *out.add_files() = f;
    PrintStructured(out, options.output);
  } else {
    std::cout << "downloaded " << meta.id() << " to " << dest << ": " << files.size() << " files, "
              << BinaryBytes(total_received) << ", every sha256 checked\n";
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
