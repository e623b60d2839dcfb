// mtctl submit | list | describe | watch | logs | cancel | delete
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
#include "client/format.h"
#include "client/rpc.h"
#include "client/spec_input.h"
#include "client/verbs.h"
#include "common/base/status_macros.h"
#include "common/rpc/grpc_status.h"
#include "mt/v1/client_service.grpc.pb.h"

ABSL_FLAG(std::string, from_checkpoint, "",
          "submit: start the job from this catalog checkpoint (sets checkpoint.load_dir).");
ABSL_FLAG(bool, no_save, false,
          "cancel: kill the ranks at once, without saving the step they stopped at.");
ABSL_FLAG(std::string, owner, "",
          "list: only the jobs of this owner (the NAME of the token that submitted them).");

namespace mt::client {
namespace {

// Every unary call of these verbs gets this long; a listing gets it per page.
constexpr absl::Duration kTimeout = absl::Seconds(30);

absl::StatusOr<mt::v1::Job> GetJob(Stub* stub, const std::string& id, bool events) {
  mt::v1::GetJobRequest request;
  request.set_job_id(id);
  request.set_include_events(events);
  mt::v1::Job job;
  MT_RETURN_IF_ERROR(Call(stub, &Stub::GetJob, request, &job, kTimeout));
  return job;
}

std::string ProgressLine(const mt::v1::Job& job) {
  const mt::v1::Progress& p = job.progress();
  std::string line = absl::StrCat(
      job.id(), " ", StateName(job.state()), " ",
      Bar(p.total_steps() > 0 ? static_cast<double>(p.step()) / p.total_steps() : 0.0, 24), " ",
      p.step(), "/", p.total_steps());
  if (p.step() > 0) {
    absl::StrAppend(&line, "  loss ", Number(p.loss()), "  ", TokenRate(p.tokens_per_second()),
                    p.no_progress_seconds() > 0 ? "  " : "  ETA ", EtaOrStall(p));
  }
  if (p.no_progress_seconds() > 0 && !p.no_progress_detail().empty()) {
    absl::StrAppend(&line, " (", p.no_progress_detail(), ")");
  }
  if (!std::isnan(p.validation_loss()) && p.validation_step() > 0) {
    absl::StrAppend(&line, "  val ", Number(p.validation_loss()), " (ppl ",
                    Number(p.validation_perplexity(), "%.1f"), ")");
  }
  return line;
}

// --from-checkpoint ID: the job loads that catalog entry (its directory becomes load_dir).
absl::Status ApplyFromCheckpoint(Stub* stub, const std::string& id, mt::v1::JobSpec* spec) {
  mt::v1::GetCheckpointRequest request;
  request.set_checkpoint_id(id);
  mt::v1::Checkpoint c;
  MT_RETURN_IF_ERROR(Call(stub, &Stub::GetCheckpoint, request, &c, kTimeout));
  if (c.state() != mt::v1::CHECKPOINT_STATE_COMPLETE &&
      c.state() != mt::v1::CHECKPOINT_STATE_VERIFIED) {
    return absl::FailedPreconditionError(
        absl::StrCat("--from-checkpoint ", id, " is ", StateName(c.state()),
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
  for (const auto& w : parsed->warnings) Notice(w);
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::SubmitJobRequest request;
  *request.mutable_spec() = parsed->spec;
  if (const std::string from = absl::GetFlag(FLAGS_from_checkpoint); !from.empty()) {
    absl::Status status = ApplyFromCheckpoint(stub->get(), from, request.mutable_spec());
    if (!status.ok()) return Fail(status);
  }
  // A retried submit (same process, same spec) must not create a second job.
  request.set_request_id(absl::StrCat("mtctl-", ::getpid(), "-", absl::ToUnixNanos(absl::Now())));
  mt::v1::SubmitJobResponse response;
  absl::Status status = Call(stub->get(), &Stub::SubmitJob, request, &response, kTimeout);
  if (!status.ok()) return Fail(status);
  for (const auto& w : response.warnings()) Notice(w);
  if (options.output != OutputFormat::kTable) {
    PrintStructured(response.job(), options.output);
  } else {
    std::cout << response.job().id() << "\n";
  }
  return kExitOk;
}

int RunList(const std::vector<std::string>& args, const GlobalOptions& options) {
  mt::v1::ListJobsRequest base;
  base.set_owner(absl::GetFlag(FLAGS_owner));
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
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  auto all = ListAll(stub->get(), &Stub::ListJobs, base, kTimeout);
  if (!all.ok()) return Fail(all.status());
  if (options.output != OutputFormat::kTable) {
    PrintStructured(*all, options.output);
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& j : all->jobs()) {
    const auto& l = j.layout();
    rows.push_back({j.id(), j.spec().name(), StateName(j.state()),
                    l.world_size() > 0 ? absl::StrCat(l.tensor_model_parallel_size(), "/",
                                                      l.pipeline_model_parallel_size(), "/",
                                                      l.data_parallel_size())
                                       : "-",
                    absl::StrCat(j.progress().step(), "/", j.progress().total_steps()),
                    j.progress().step() > 0 ? Number(j.progress().loss()) : "-",
                    LocalTime(j.create_time()), j.reason().substr(0, 60)});
  }
  std::cout << FormatTable({"ID", "NAME", "STATE", "TP/PP/DP", "STEP", "LOSS", "CREATED", "REASON"},
                           rows);
  return kExitOk;
}

int RunDescribe(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.size() != 1) return Fail(absl::InvalidArgumentError("usage: mtctl describe JOB_ID"));
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  auto job = GetJob(stub->get(), args[0], /*events=*/true);
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
            << "owner        " << (j.owner().empty() ? "-" : j.owner()) << "\n"
            << "state        " << StateName(j.state()) << " (" << j.reason() << ")\n"
            << "created      " << LocalTime(j.create_time()) << "   started "
            << LocalTime(j.start_time()) << "   ended " << LocalTime(j.end_time()) << "\n"
            << "model        " << m.num_layers() << " layers x " << m.hidden_size() << " hidden, "
            << m.num_attention_heads() << " heads, seq " << m.seq_length() << "\n"
            << "training     micro " << t.micro_batch_size() << ", global " << t.global_batch_size()
            << ", lr " << t.lr() << ", "
            << (t.train_iters() > 0 ? absl::StrCat(t.train_iters(), " iters")
                                    : absl::StrCat(t.train_samples(), " samples"))
            << "\n"
            << "progress     " << ProgressLine(j) << "\n";
  if (j.spec().has_inference()) PrintInferenceTask(j);
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
    rows.push_back(
        {LocalTime(e.time()), StateName(e.state()), absl::StrCat(e.attempt()), e.reason()});
  }
  std::cout << FormatTable({"  TIME", "STATE", "ATTEMPT", "REASON"}, rows);
  return kExitOk;
}

int RunWatch(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.size() != 1) return Fail(absl::InvalidArgumentError("usage: mtctl watch JOB_ID"));
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::WatchJobRequest request;
  request.set_job_id(args[0]);
  grpc::ClientContext context;
  auto reader = (*stub)->WatchJob(&context, request);
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
      std::fprintf(stderr, "%s %s: %s\n", last.id().c_str(),
                   StateName(update.event().state()).c_str(), update.event().reason().c_str());
    }
    // The live line redraws in place on a terminal, one line per update otherwise.
    std::fprintf(stderr, tty ? "\r\033[K%s" : "%s\n", ProgressLine(last).c_str());
  }
  if (tty) std::fprintf(stderr, "\n");
  absl::Status status = rpc::FromGrpcStatus(reader->Finish());
  if (!status.ok()) return Fail(status);
  if (options.output == OutputFormat::kTable) {
    const auto& p = last.progress();
    std::cout << last.id() << " " << StateName(last.state()) << ": " << last.reason() << "\n";
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
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::GetJobLogsResponse response;
  absl::Status status = Call(stub->get(), &Stub::GetJobLogs, request, &response, kTimeout);
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

// The answer of a call that returns a job: the job (-o json|yaml), or "ID STATE<suffix>".
int PrintJobResult(const absl::Status& status, const mt::v1::Job& job, absl::string_view suffix,
                   const GlobalOptions& options) {
  if (!status.ok()) return Fail(status);
  if (options.output != OutputFormat::kTable) {
    PrintStructured(job, options.output);
  } else {
    std::cout << job.id() << " " << StateName(job.state()) << suffix << "\n";
  }
  return kExitOk;
}

int RunCancel(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.empty() || args.size() > 2) {
    return Fail(absl::InvalidArgumentError("usage: mtctl cancel JOB_ID [REASON] [--no-save]"));
  }
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::CancelJobRequest request;
  request.set_job_id(args[0]);
  if (args.size() == 2) request.set_reason(args[1]);
  request.set_no_save(absl::GetFlag(FLAGS_no_save));
  mt::v1::Job job;
  return PrintJobResult(Call(stub->get(), &Stub::CancelJob, request, &job, kTimeout), job,
                        request.no_save() ? "" : " (the ranks save the step they stop at)",
                        options);
}

int RunDelete(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.size() != 1) return Fail(absl::InvalidArgumentError("usage: mtctl delete JOB_ID"));
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::DeleteJobRequest request;
  request.set_job_id(args[0]);
  mt::v1::Job job;
  return PrintJobResult(Call(stub->get(), &Stub::DeleteJob, request, &job, kTimeout), job,
                        " deleted", options);
}

}  // namespace mt::client
