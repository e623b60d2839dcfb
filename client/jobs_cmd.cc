// mtctl submit | list | describe | watch | logs | cancel
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/spec_input.h"
#include "client/verbs.h"
#include "common/base/status_macros.h"
#include "common/rpc/grpc_status.h"
#include "google/protobuf/util/time_util.h"
#include "mt/v1/client_service.grpc.pb.h"

ABSL_FLAG(std::string, from_checkpoint, "",
          "submit: start the job from this catalog checkpoint (sets checkpoint.load_dir).");

namespace mt::client {
namespace {

using google::protobuf::util::TimeUtil;

std::string State(mt::v1::JobState s) {
  std::string name = mt::v1::JobState_Name(s);
  const std::string prefix = "JOB_STATE_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

std::string Time(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S",
                          absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(t)),
                          absl::LocalTimeZone());
}

std::string Eta(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return "-";
  return absl::FormatDuration(absl::Trunc(absl::Seconds(seconds), absl::Seconds(1)));
}

std::string Number(double v, const char* fmt = "%.4f") {
  if (std::isnan(v)) return "-";
  return absl::StrFormat(fmt, v);
}

std::string Rate(double tokens_per_second) {
  if (tokens_per_second >= 1e6) return absl::StrFormat("%.2fM tok/s", tokens_per_second / 1e6);
  if (tokens_per_second >= 1e3) return absl::StrFormat("%.1fK tok/s", tokens_per_second / 1e3);
  return absl::StrFormat("%.0f tok/s", tokens_per_second);
}

std::unique_ptr<mt::v1::ClientService::Stub> Stub(const GlobalOptions& options,
                                                  absl::Status* status) {
  auto channel = Connect(options);
  if (!channel.ok()) {
    *status = channel.status();
    return nullptr;
  }
  return mt::v1::ClientService::NewStub(*channel);
}

void SetDeadline(grpc::ClientContext* context, int seconds = 30) {
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

absl::StatusOr<mt::v1::Job> GetJob(mt::v1::ClientService::Stub* stub, const std::string& id,
                                   bool events) {
  mt::v1::GetJobRequest request;
  request.set_job_id(id);
  request.set_include_events(events);
  mt::v1::Job job;
  grpc::ClientContext context;
  SetDeadline(&context);
  absl::Status s = rpc::FromGrpcStatus(stub->GetJob(&context, request, &job));
  if (!s.ok()) return s;
  return job;
}

std::string Bar(int64_t step, int64_t total, int width = 24) {
  const double f = total > 0 ? std::min(1.0, static_cast<double>(step) / total) : 0.0;
  const int filled = static_cast<int>(f * width);
  return absl::StrCat("[", std::string(filled, '#'), std::string(width - filled, '.'), "]");
}

std::string ProgressLine(const mt::v1::Job& job) {
  const mt::v1::Progress& p = job.progress();
  std::string line =
      absl::StrCat(job.id(), " ", State(job.state()), " ", Bar(p.step(), p.total_steps()), " ",
                   p.step(), "/", p.total_steps());
  if (p.step() > 0) {
    absl::StrAppend(&line, "  loss ", Number(p.loss()), "  ", Rate(p.tokens_per_second()), "  ETA ",
                    Eta(p.eta_seconds()));
  }
  if (!std::isnan(p.validation_loss()) && p.validation_step() > 0) {
    absl::StrAppend(&line, "  val ", Number(p.validation_loss()), " (ppl ",
                    Number(p.validation_perplexity(), "%.1f"), ")");
  }
  return line;
}

// --from-checkpoint ID: the job loads that catalog entry (its directory becomes load_dir).
absl::Status ApplyFromCheckpoint(mt::v1::ClientService::Stub* stub, const std::string& id,
                                 mt::v1::JobSpec* spec) {
  mt::v1::GetCheckpointRequest request;
  request.set_checkpoint_id(id);
  mt::v1::Checkpoint c;
  grpc::ClientContext context;
  SetDeadline(&context);
  MT_RETURN_IF_ERROR(rpc::FromGrpcStatus(stub->GetCheckpoint(&context, request, &c)));
  if (c.state() != mt::v1::CHECKPOINT_STATE_COMPLETE &&
      c.state() != mt::v1::CHECKPOINT_STATE_VERIFIED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--from-checkpoint ", id, " is ", mt::v1::CheckpointState_Name(c.state()).substr(17),
        "; only COMPLETE or VERIFIED checkpoints can start a job"));
  }
  const std::string& load = spec->checkpoint().load_dir();
  if (!load.empty() && load != c.directory()) {
    return absl::InvalidArgumentError(absl::StrCat("--from-checkpoint ", id, " loads ",
                                                   c.directory(), " but the spec's load_dir is ",
                                                   load, "; give one of them"));
  }
  spec->mutable_checkpoint()->set_load_dir(c.directory());
  return absl::OkStatus();
}

int ExitForFinal(const mt::v1::Job& job) {
  switch (job.state()) {
    case mt::v1::JOB_STATE_SUCCEEDED:
      return kExitOk;
    default:
      return kExitFailed;
  }
}

}  // namespace

int RunSubmit(const std::vector<std::string>& args, const GlobalOptions& options) {
  auto parsed = ReadSpecArgs(args);
  if (!parsed.ok()) return Fail(parsed.status());
  for (const auto& w : parsed->warnings) std::fprintf(stderr, "mtctl: notice: %s\n", w.c_str());
  absl::Status status;
  auto stub = Stub(options, &status);
  if (stub == nullptr) return Fail(status);
  mt::v1::SubmitJobRequest request;
  *request.mutable_spec() = parsed->spec;
  if (const std::string from = absl::GetFlag(FLAGS_from_checkpoint); !from.empty()) {
    status = ApplyFromCheckpoint(stub.get(), from, request.mutable_spec());
    if (!status.ok()) return Fail(status);
  }
  // A retried submit (same process, same spec) must not create a second job.
  request.set_request_id(absl::StrCat("mtctl-", ::getpid(), "-", absl::ToUnixNanos(absl::Now())));
  mt::v1::SubmitJobResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  status = rpc::FromGrpcStatus(stub->SubmitJob(&context, request, &response));
  if (!status.ok()) return Fail(status);
  for (const auto& w : response.warnings()) std::fprintf(stderr, "mtctl: notice: %s\n", w.c_str());
  if (options.output != OutputFormat::kTable) {
    PrintStructured(response.job(), options.output);
  } else {
    std::cout << response.job().id() << "\n";
  }
  return kExitOk;
}

int RunList(const std::vector<std::string>& args, const GlobalOptions& options) {
  mt::v1::ListJobsRequest base;
  for (const auto& a : args) {
    mt::v1::JobState state;
    std::string upper = absl::StrCat("JOB_STATE_", a);
    for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (!mt::v1::JobState_Parse(upper, &state)) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("'", a,
                       "' is not a job state: pending, scheduled, running, restarting, succeeded, "
                       "failed, cancelled")));
    }
    base.add_states(state);
  }
  absl::Status status;
  auto stub = Stub(options, &status);
  if (stub == nullptr) return Fail(status);
  mt::v1::ListJobsResponse all;
  std::string token;
  do {
    mt::v1::ListJobsRequest request = base;
    request.set_page_size(1000);
    request.set_page_token(token);
    mt::v1::ListJobsResponse page;
    grpc::ClientContext context;
    SetDeadline(&context);
    status = rpc::FromGrpcStatus(stub->ListJobs(&context, request, &page));
    if (!status.ok()) return Fail(status);
    for (auto& j : *page.mutable_jobs()) *all.add_jobs() = std::move(j);
    all.set_total_count(page.total_count());
    token = page.next_page_token();
  } while (!token.empty());
  if (options.output != OutputFormat::kTable) {
    PrintStructured(all, options.output);
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& j : all.jobs()) {
    const auto& l = j.layout();
    rows.push_back({j.id(), j.spec().name(), State(j.state()),
                    l.world_size() > 0 ? absl::StrCat(l.tensor_model_parallel_size(), "/",
                                                      l.pipeline_model_parallel_size(), "/",
                                                      l.data_parallel_size())
                                       : "-",
                    absl::StrCat(j.progress().step(), "/", j.progress().total_steps()),
                    j.progress().step() > 0 ? Number(j.progress().loss()) : "-",
                    Time(j.create_time()), j.reason().substr(0, 60)});
  }
  std::cout << FormatTable({"ID", "NAME", "STATE", "TP/PP/DP", "STEP", "LOSS", "CREATED", "REASON"},
                           rows);
  return kExitOk;
}

int RunDescribe(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.size() != 1) return Fail(absl::InvalidArgumentError("usage: mtctl describe JOB_ID"));
  absl::Status status;
  auto stub = Stub(options, &status);
  if (stub == nullptr) return Fail(status);
  auto job = GetJob(stub.get(), args[0], /*events=*/true);
  if (!job.ok()) return Fail(job.status());
  if (options.output != OutputFormat::kTable) {
    PrintStructured(*job, options.output);
    return kExitOk;
  }
  const auto& j = *job;
  const auto& m = j.spec().model();
  const auto& t = j.spec().training();
  std::cout << "id           " << j.id() << "\n"
            << "name         " << j.spec().name() << "\n"
            << "state        " << State(j.state()) << " (" << j.reason() << ")\n"
            << "created      " << Time(j.create_time()) << "   started " << Time(j.start_time())
            << "   ended " << Time(j.end_time()) << "\n"
            << "model        " << m.num_layers() << " layers x " << m.hidden_size() << " hidden, "
            << m.num_attention_heads() << " heads, seq " << m.seq_length() << "\n"
            << "training     micro " << t.micro_batch_size() << ", global " << t.global_batch_size()
            << ", lr " << t.lr() << ", "
            << (t.train_iters() > 0 ? absl::StrCat(t.train_iters(), " iters")
                                    : absl::StrCat(t.train_samples(), " samples"))
            << "\n"
            << "progress     " << ProgressLine(j) << "\n";
  const auto& l = j.layout();
  if (l.world_size() > 0) {
    std::cout << "layout       world " << l.world_size() << " = tp "
              << l.tensor_model_parallel_size() << " x cp " << l.context_parallel_size() << " x pp "
              << l.pipeline_model_parallel_size() << " x dp " << l.data_parallel_size() << "\n";
    // The grid: one row per pipeline stage, ranks of each stage in dp-major order.
    const int per_stage = l.world_size() / std::max(1, l.pipeline_model_parallel_size());
    for (int s = 0; s < l.pipeline_model_parallel_size(); ++s) {
      std::vector<std::string> cells;
      for (int r = s * per_stage; r < (s + 1) * per_stage && r < j.placement_size(); ++r) {
        const auto& p = j.placement(r);
        cells.push_back(absl::StrCat(r, "@", p.worker_id()));
      }
      std::cout << "  stage " << s << "    " << absl::StrJoin(cells, "  ") << "\n";
    }
  }
  std::cout << "\nevents\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : j.events()) {
    rows.push_back({Time(e.time()), State(e.state()), absl::StrCat(e.attempt()), e.reason()});
  }
  std::cout << FormatTable({"  TIME", "STATE", "ATTEMPT", "REASON"}, rows);
  return kExitOk;
}

int RunWatch(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.size() != 1) return Fail(absl::InvalidArgumentError("usage: mtctl watch JOB_ID"));
  absl::Status status;
  auto stub = Stub(options, &status);
  if (stub == nullptr) return Fail(status);
  mt::v1::WatchJobRequest request;
  request.set_job_id(args[0]);
  grpc::ClientContext context;
  auto reader = stub->WatchJob(&context, request);
  mt::v1::JobUpdate update;
  mt::v1::Job last;
  std::string last_event;  // updates repeat the latest event; print each once
  const bool tty = ::isatty(STDERR_FILENO);
  while (reader->Read(&update)) {
    const bool had_spec = update.job().has_spec();
    if (had_spec) {
      last = update.job();
    } else {
      mt::v1::JobSpec spec = last.spec();
      last = update.job();
      *last.mutable_spec() = spec;
    }
    if (options.output == OutputFormat::kJson) {
      std::cout << ToJson(update) << std::flush;
      continue;
    }
    if (update.has_event() && update.event().state() != mt::v1::JOB_STATE_UNSPECIFIED &&
        update.event().SerializeAsString() != last_event) {
      last_event = update.event().SerializeAsString();
      if (tty) std::fprintf(stderr, "\r\033[K");
      std::fprintf(stderr, "%s %s: %s\n", last.id().c_str(), State(update.event().state()).c_str(),
                   update.event().reason().c_str());
    }
    // The live line redraws in place on a terminal, one line per update otherwise.
    std::fprintf(stderr, tty ? "\r\033[K%s" : "%s\n", ProgressLine(last).c_str());
  }
  if (tty) std::fprintf(stderr, "\n");
  status = rpc::FromGrpcStatus(reader->Finish());
  if (!status.ok()) return Fail(status);
  if (options.output == OutputFormat::kTable) {
    const auto& p = last.progress();
    std::cout << last.id() << " " << State(last.state()) << ": " << last.reason() << "\n";
    if (p.step() > 0) {
      std::cout << "final step " << p.step() << "  loss " << Number(p.loss());
      if (!std::isnan(p.validation_loss()) && p.validation_step() > 0) {
        std::cout << "  validation loss " << Number(p.validation_loss()) << "  perplexity "
                  << Number(p.validation_perplexity(), "%.2f");
      }
      std::cout << "\n";
    }
  }
  return ExitForFinal(last);
}

int RunLogs(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.empty()) return Fail(absl::InvalidArgumentError("usage: mtctl logs JOB_ID [RANK ...]"));
  mt::v1::GetJobLogsRequest request;
  request.set_job_id(args[0]);
  for (size_t i = 1; i < args.size(); ++i) {
    int rank;
    if (!absl::SimpleAtoi(args[i], &rank) || rank < 0) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("'", args[i], "' is not a rank")));
    }
    request.add_ranks(rank);
  }
  absl::Status status;
  auto stub = Stub(options, &status);
  if (stub == nullptr) return Fail(status);
  mt::v1::GetJobLogsResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  status = rpc::FromGrpcStatus(stub->GetJobLogs(&context, request, &response));
  if (!status.ok()) return Fail(status);
  if (options.output != OutputFormat::kTable) {
    PrintStructured(response, options.output);
    return kExitOk;
  }
  for (const auto& log : response.logs()) {
    std::cout << "==> rank " << log.rank() << " (" << log.worker_id() << ") <==\n";
    for (const auto& line : log.lines()) std::cout << line << "\n";
    if (log.lines_size() == 0) std::cout << "(no lines yet: logs arrive when the rank ends)\n";
  }
  return kExitOk;
}

int RunCancel(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.empty() || args.size() > 2) {
    return Fail(absl::InvalidArgumentError("usage: mtctl cancel JOB_ID [REASON]"));
  }
  absl::Status status;
  auto stub = Stub(options, &status);
  if (stub == nullptr) return Fail(status);
  mt::v1::CancelJobRequest request;
  request.set_job_id(args[0]);
  if (args.size() == 2) request.set_reason(args[1]);
  mt::v1::Job job;
  grpc::ClientContext context;
  SetDeadline(&context);
  status = rpc::FromGrpcStatus(stub->CancelJob(&context, request, &job));
  if (!status.ok()) return Fail(status);
  if (options.output != OutputFormat::kTable) {
    PrintStructured(job, options.output);
  } else {
    std::cout << job.id() << " " << State(job.state()) << "\n";
  }
  return kExitOk;
}

}  // namespace mt::client
