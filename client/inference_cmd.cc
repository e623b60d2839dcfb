// mtctl eval | generate: one-rank jobs from a checkpoint (docs/inference.md), through the
// coordinator's EvaluateCheckpoint and GenerateText calls.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/format.h"
#include "client/rpc.h"
#include "client/verbs.h"
#include "common/base/files.h"
#include "common/spec/inference.h"
#include "common/spec/validate.h"

// Integers and numbers are strings here so that "not given" (empty) differs from any value;
// the coordinator checks them (common/spec/inference.h) and names the flag.
ABSL_FLAG(std::string, data_path, "", "eval: dataset prefix (PREFIX.bin/.idx).");
ABSL_FLAG(std::string, split, "", "eval: train,valid,test document weights (969,30,1).");
ABSL_FLAG(std::string, eval_iters, "", "eval: iterations (one micro-batch per DP rank) (100).");
ABSL_FLAG(bool, all, false, "eval: every sample of the validation split once.");
ABSL_FLAG(std::string, micro_batch_size, "", "eval: samples per micro-batch (the checkpoint's).");
ABSL_FLAG(std::string, context_length, "", "eval: tokens per sample (the checkpoint's).");
ABSL_FLAG(std::string, tensor_model_parallel_size, "",
          "eval/generate: ranks each layer is split over (1; the checkpoint is resharded).");
ABSL_FLAG(std::string, pipeline_model_parallel_size, "",
          "eval: pipeline stages the layers are split into (1).");
ABSL_FLAG(std::string, data_parallel_size, "",
          "eval: ranks that split every batch (1; an iteration is a micro-batch per rank).");
ABSL_FLAG(bool, wait, false, "eval: wait for the result and print it.");
ABSL_FLAG(std::string, device, "auto", "eval/generate: auto, cpu or gpu workers.");
ABSL_FLAG(std::string, prompt, "", "generate: the prompt text.");
ABSL_FLAG(std::string, prompt_file, "", "generate: a file holding the prompt.");
ABSL_FLAG(std::string, max_new_tokens, "", "generate: tokens per sample (64).");
ABSL_FLAG(std::string, temperature, "", "generate: sampling temperature (1.0; 0 = greedy).");
ABSL_FLAG(std::string, top_k, "", "generate: sample among the K likeliest (0 = all).");
ABSL_FLAG(std::string, top_p, "", "generate: nucleus sampling mass (1.0).");
ABSL_FLAG(std::string, seed, "", "generate: sampling seed (1234).");
ABSL_FLAG(std::string, stop, "", "generate: stop text (never printed).");
ABSL_FLAG(std::string, n, "", "generate: samples (1).");
ABSL_FLAG(std::string, quantize, "",
          "eval/generate: none, or int8 (the layers' linear weights as int8).");

namespace mt::client {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(30);

// A path given here, absolute and normalized as the coordinator wants it (the rules of
// spec::ResolveRelativePaths); as given when that fails (the coordinator then names the problem).
std::string Absolute(const std::string& path) {
  char buf[4096];
  if (path.empty() || ::getcwd(buf, sizeof(buf)) == nullptr) return path;
  mt::v1::JobSpec holder;
  holder.mutable_checkpoint()->set_load_dir(path);
  if (!spec::ResolveRelativePaths(&holder, buf).ok()) return path;
  return holder.checkpoint().load_dir();
}

// CHECKPOINT: a catalog id as given, a directory made absolute.
std::string CheckpointArg(const std::string& arg) {
  return arg.rfind("c-", 0) == 0 ? arg : Absolute(arg);
}

absl::Status IntFlag(const char* flag, const std::string& text, int64_t* out) {
  if (!absl::SimpleAtoi(text, out)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " \"", text, "\": want an integer"));
  }
  return absl::OkStatus();
}

absl::Status NumberFlag(const char* flag, const std::string& text, double* out) {
  if (!absl::SimpleAtod(text, out)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " \"", text, "\": want a number"));
  }
  return absl::OkStatus();
}

absl::StatusOr<mt::v1::DeviceKind> DeviceFlag() {
  const std::string d = absl::GetFlag(FLAGS_device);
  if (d == "auto") return mt::v1::DEVICE_KIND_AUTO;
  if (d == "cpu") return mt::v1::DEVICE_KIND_CPU;
  if (d == "gpu") return mt::v1::DEVICE_KIND_GPU;
  return absl::InvalidArgumentError(absl::StrCat("--device \"", d, "\": want auto, cpu or gpu"));
}

absl::StatusOr<mt::v1::EvalTask> EvalTaskFromFlags() {
  mt::v1::EvalTask t;
  t.set_data_path(Absolute(absl::GetFlag(FLAGS_data_path)));
  t.set_split(absl::GetFlag(FLAGS_split));
  t.set_all(absl::GetFlag(FLAGS_all));
  int64_t v = 0;
  if (const std::string s = absl::GetFlag(FLAGS_eval_iters); !s.empty()) {
    MT_RETURN_IF_ERROR(IntFlag("--eval-iters", s, &v));
    t.set_eval_iters(v);
  }
  if (const std::string s = absl::GetFlag(FLAGS_micro_batch_size); !s.empty()) {
    MT_RETURN_IF_ERROR(IntFlag("--micro-batch-size", s, &v));
    t.set_micro_batch_size(v);
  }
  if (const std::string s = absl::GetFlag(FLAGS_context_length); !s.empty()) {
    MT_RETURN_IF_ERROR(IntFlag("--context-length", s, &v));
    t.set_context_length(v);
  }
  const std::pair<const char*, const absl::Flag<std::string>*> sizes[] = {
      {"--tensor-model-parallel-size", &FLAGS_tensor_model_parallel_size},
      {"--pipeline-model-parallel-size", &FLAGS_pipeline_model_parallel_size},
      {"--data-parallel-size", &FLAGS_data_parallel_size}};
  int64_t layout[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    const std::string s = absl::GetFlag(*sizes[i].second);
    if (s.empty()) continue;
    MT_RETURN_IF_ERROR(IntFlag(sizes[i].first, s, &v));
    MT_RETURN_IF_ERROR(spec::ValidateEvalParallelSize(sizes[i].first, v));
    layout[i] = v;
  }
  t.set_tensor_model_parallel_size(static_cast<int32_t>(layout[0]));
  t.set_pipeline_model_parallel_size(static_cast<int32_t>(layout[1]));
  t.set_data_parallel_size(static_cast<int32_t>(layout[2]));
  t.set_quantize(absl::GetFlag(FLAGS_quantize));
  // The coordinator checks again (with the checkpoint's positions); this answers without a call.
  MT_RETURN_IF_ERROR(spec::ValidateEvalTask(t, int64_t{1} << 30));
  return t;
}

absl::StatusOr<std::string> PromptFromFlags() {
  const std::string text = absl::GetFlag(FLAGS_prompt);
  const std::string file = absl::GetFlag(FLAGS_prompt_file);
  if (text.empty() == file.empty()) {
    return absl::InvalidArgumentError("give exactly one of --prompt TEXT and --prompt-file FILE");
  }
  if (!text.empty()) return text;
  absl::StatusOr<std::string> read = ReadFile(file, spec::kMaxPromptBytes);
  if (!read.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--prompt-file: ", read.status().message()));
  }
  return read;
}

absl::StatusOr<mt::v1::GenerateTask> GenerateTaskFromFlags() {
  mt::v1::GenerateTask t;
  MT_ASSIGN_OR_RETURN(*t.mutable_prompt(), PromptFromFlags());
  int64_t i = 0;
  double d = 0;
  if (const std::string s = absl::GetFlag(FLAGS_max_new_tokens); !s.empty()) {
    MT_RETURN_IF_ERROR(IntFlag("--max-new-tokens", s, &i));
    t.set_max_new_tokens(i);
  }
  if (const std::string s = absl::GetFlag(FLAGS_temperature); !s.empty()) {
    MT_RETURN_IF_ERROR(NumberFlag("--temperature", s, &d));
    t.set_temperature(d);
  }
  if (const std::string s = absl::GetFlag(FLAGS_top_k); !s.empty()) {
    MT_RETURN_IF_ERROR(IntFlag("--top-k", s, &i));
    t.set_top_k(i);
  }
  if (const std::string s = absl::GetFlag(FLAGS_top_p); !s.empty()) {
    MT_RETURN_IF_ERROR(NumberFlag("--top-p", s, &d));
    t.set_top_p(d);
  }
  if (const std::string s = absl::GetFlag(FLAGS_seed); !s.empty()) {
    MT_RETURN_IF_ERROR(IntFlag("--seed", s, &i));
    if (i < 0) return absl::InvalidArgumentError(absl::StrCat("--seed ", i, ": want >= 0"));
    t.set_seed(static_cast<uint64_t>(i));
  }
  t.set_stop(absl::GetFlag(FLAGS_stop));
  if (const std::string s = absl::GetFlag(FLAGS_n); !s.empty()) {
    MT_RETURN_IF_ERROR(IntFlag("-n", s, &i));
    t.set_num_samples(i);
  }
  if (const std::string s = absl::GetFlag(FLAGS_tensor_model_parallel_size); !s.empty()) {
    MT_RETURN_IF_ERROR(IntFlag("--tensor-model-parallel-size", s, &i));
    MT_RETURN_IF_ERROR(spec::ValidateEvalParallelSize("--tensor-model-parallel-size", i));
    t.set_tensor_model_parallel_size(static_cast<int32_t>(i));
  }
  // Generation splits the model over TP ranks only: a PP or DP size would be ignored.
  for (const auto& [flag, value] :
       {std::pair<const char*, std::string>{"--pipeline-model-parallel-size",
                                            absl::GetFlag(FLAGS_pipeline_model_parallel_size)},
        std::pair<const char*, std::string>{"--data-parallel-size",
                                            absl::GetFlag(FLAGS_data_parallel_size)}}) {
    if (!value.empty() && value != "1") {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " ", value,
                       ": generation splits the model over tensor-parallel ranks only; give "
                       "--tensor-model-parallel-size"));
    }
  }
  t.set_quantize(absl::GetFlag(FLAGS_quantize));
  MT_RETURN_IF_ERROR(spec::ValidateGenerateTask(t));
  return t;
}

// Waits until the job ends; returns it as it ended.
absl::StatusOr<mt::v1::Job> WaitForEnd(Stub* stub, const std::string& job_id) {
  // The job's watch stream (what `mtctl watch` reads) ends when the job does; then the whole
  // job, spec included, in one read.
  mt::v1::WatchJobRequest watch;
  watch.set_job_id(job_id);
  grpc::ClientContext context;
  auto reader = stub->WatchJob(&context, watch);
  mt::v1::JobUpdate update;
  while (reader->Read(&update)) {
  }
  MT_RETURN_IF_ERROR(rpc::FromGrpcStatus(reader->Finish()));
  mt::v1::GetJobRequest request;
  request.set_job_id(job_id);
  mt::v1::Job job;
  MT_RETURN_IF_ERROR(Call(stub, &Stub::GetJob, request, &job, kTimeout));
  return job;
}

int PrintEvalResult(const mt::v1::Job& job, OutputFormat format) {
  const mt::v1::Progress& p = job.progress();
  const mt::v1::InferenceSpec& inf = job.spec().inference();
  if (job.state() != mt::v1::JOB_STATE_SUCCEEDED) {
    std::fprintf(stderr, "mtctl: eval job %s %s: %s\n", job.id().c_str(),
                 StateName(job.state()).c_str(), job.reason().c_str());
    return kExitFailed;
  }
  if (format == OutputFormat::kTable) {
    std::cout << "job=" << job.id() << " checkpoint="
              << (inf.checkpoint_id().empty() ? inf.checkpoint_dir() : inf.checkpoint_id())
              << " step=" << p.validation_step()
              << absl::StrFormat(" loss=%.6f", p.validation_loss())
              << absl::StrFormat(" perplexity=%.4f", p.validation_perplexity())
              << " tokens=" << p.evaluated_tokens() << "\n";
    return kExitOk;
  }
  JsonValue v = JsonValue::Object();
  v.Set("job", JsonValue::Str(job.id()))
      .Set("checkpoint", JsonValue::Str(inf.checkpoint_id()))
      .Set("directory", JsonValue::Str(inf.checkpoint_dir()))
      .Set("step", JsonValue::Int(p.validation_step()))
      .Set("loss", JsonValue::Num(p.validation_loss(), 9))
      .Set("perplexity", JsonValue::Num(p.validation_perplexity(), 9))
      .Set("tokens", JsonValue::Int(p.evaluated_tokens()));
  v.Print(format);
  return kExitOk;
}

// A sample's end: its JSON line, its YAML document, the text of one of several samples, or the
// newline after the one sample streamed live.
void PrintSampleEnd(const std::string& job_id, const mt::v1::GeneratedText& t,
                    const std::string& text, bool live, OutputFormat format) {
  if (format == OutputFormat::kJson) {
    // One object per line (JSON Lines), as each sample ends.
    std::printf(
        "{\"job\": %s, \"sample\": %d, \"text\": %s, \"tokens\": %lld, "
        "\"finish_reason\": %s}\n",
        JsonString(job_id).c_str(), t.sample(), JsonString(text).c_str(),
        static_cast<long long>(t.tokens()), JsonString(t.finish_reason()).c_str());
  } else if (format == OutputFormat::kYaml) {
    JsonValue v = JsonValue::Object();
    v.Set("job", JsonValue::Str(job_id))
        .Set("sample", JsonValue::Int(t.sample()))
        .Set("text", JsonValue::Str(text))
        .Set("tokens", JsonValue::Int(t.tokens()))
        .Set("finish_reason", JsonValue::Str(t.finish_reason()));
    std::printf("---\n");
    v.Print(format);
  } else if (!live) {
    std::printf("--- sample %d ---\n%s\n", t.sample(), text.c_str());
  } else {
    std::printf("\n");
  }
}

}  // namespace

int RunEval(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.size() != 1) {
    return Fail(absl::InvalidArgumentError(
        "usage: mtctl eval CHECKPOINT --data-path PREFIX ... (`mtctl eval --help`)"));
  }
  absl::StatusOr<mt::v1::EvalTask> task = EvalTaskFromFlags();
  if (!task.ok()) return Fail(task.status());
  absl::StatusOr<mt::v1::DeviceKind> device = DeviceFlag();
  if (!device.ok()) return Fail(device.status());
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::EvaluateCheckpointRequest request;
  request.set_checkpoint(CheckpointArg(args[0]));
  *request.mutable_eval() = *task;
  request.set_device(*device);
  request.set_request_id(
      absl::StrCat("mtctl-eval-", ::getpid(), "-", absl::ToUnixNanos(absl::Now())));
  mt::v1::SubmitJobResponse response;
  absl::Status status = Call(stub->get(), &Stub::EvaluateCheckpoint, request, &response, kTimeout);
  if (!status.ok()) return Fail(status);
  if (!absl::GetFlag(FLAGS_wait)) {
    if (options.output != OutputFormat::kTable) {
      PrintStructured(response.job(), options.output);
    } else {
      std::cout << response.job().id() << "\n";
    }
    return kExitOk;
  }
  absl::StatusOr<mt::v1::Job> job = WaitForEnd(stub->get(), response.job().id());
  if (!job.ok()) return Fail(job.status());
  return PrintEvalResult(*job, options.output);
}

int RunGenerate(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (args.size() != 1) {
    return Fail(absl::InvalidArgumentError(
        "usage: mtctl generate CHECKPOINT --prompt TEXT ... (`mtctl generate --help`)"));
  }
  absl::StatusOr<mt::v1::GenerateTask> task = GenerateTaskFromFlags();
  if (!task.ok()) return Fail(task.status());
  absl::StatusOr<mt::v1::DeviceKind> device = DeviceFlag();
  if (!device.ok()) return Fail(device.status());
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::GenerateTextRequest request;
  request.set_checkpoint(CheckpointArg(args[0]));
  *request.mutable_generate() = *task;
  request.set_device(*device);
  // No deadline: the stream lasts as long as the generation; closing it cancels the job.
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<mt::v1::GenerateTextResponse>> reader =
      (*stub)->GenerateText(&context, request);
  const bool live = options.output == OutputFormat::kTable && !task->has_num_samples();
  std::string job_id;
  std::map<int32_t, std::string> texts;
  mt::v1::GenerateTextResponse message;
  while (reader->Read(&message)) {
    if (!message.job_id().empty()) {
      job_id = message.job_id();
      std::fprintf(stderr, "mtctl: generation job %s\n", job_id.c_str());
    }
    if (!message.has_text()) continue;
    const mt::v1::GeneratedText& t = message.text();
    if (live) {
      std::fwrite(t.text().data(), 1, t.text().size(), stdout);
      std::fflush(stdout);
    } else {
      texts[t.sample()] += t.text();
    }
    if (!t.done()) continue;
    PrintSampleEnd(job_id, t, texts[t.sample()], live, options.output);
    std::fflush(stdout);
    std::fprintf(stderr, "mtctl: sample %d: %lld tokens, finished by %s\n", t.sample(),
                 static_cast<long long>(t.tokens()), t.finish_reason().c_str());
  }
  const absl::Status status = rpc::FromGrpcStatus(reader->Finish());
  if (!status.ok()) return Fail(status);
  return kExitOk;
}

void PrintInferenceTask(const mt::v1::Job& job) {
  const mt::v1::InferenceSpec& inf = job.spec().inference();
  const std::string checkpoint =
      inf.checkpoint_id().empty()
          ? inf.checkpoint_dir()
          : absl::StrCat(inf.checkpoint_id(), " (", inf.checkpoint_dir(), ")");
  if (inf.has_eval()) {
    std::cout << "eval of      " << checkpoint << "\n"
              << "  data       " << inf.eval().data_path() << " split " << inf.eval().split()
              << "\n";
    const mt::v1::Progress& p = job.progress();
    if (job.state() == mt::v1::JOB_STATE_SUCCEEDED) {
      std::cout << "  result     "
                << absl::StrFormat("loss %.6f, perplexity %.4f", p.validation_loss(),
                                   p.validation_perplexity())
                << ", " << p.evaluated_tokens() << " tokens, step " << p.validation_step() << "\n";
    }
  } else if (inf.has_generate()) {
    const mt::v1::GenerateTask& g = inf.generate();
    std::cout << "generate of  " << checkpoint << "\n"
              << "  prompt     " << g.prompt().size() << " bytes, "
              << (g.has_num_samples() ? g.num_samples() : 1) << " sample(s), "
              << (g.has_max_new_tokens() ? g.max_new_tokens() : 64) << " new tokens at most\n";
  }
}

}  // namespace mt::client
