#include "worker/train/generate_command.h"

#include <sys/stat.h>

#include <cstdio>
#include <limits>
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/files.h"
#include "common/base/json.h"
#include "common/base/paths.h"
#include "common/base/status_macros.h"
#include "common/tokenizer/gpt2_bpe_tokenizer.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/generate/generator.h"
#include "worker/generate/inference_model.h"
#include "worker/model/gpt.h"
#include "worker/train/command_args.h"

namespace mt::train {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr uint64_t kMaxPromptBytes = 16 << 20;

constexpr char kUsage[] =
    "usage: mt-worker generate CHECKPOINT (--prompt TEXT | --prompt-file FILE)\n"
    "         [--max-new-tokens N (64)] [--temperature T (1.0; 0 = greedy)] [--top-k K (0 = all)]\n"
    "         [--top-p P (1.0)] [--seed S (1234)] [--stop TEXT] [-n SAMPLES (1)]\n"
    "         [--device cpu|cuda[:N]] [--dtype auto|fp32|bf16|fp16] [--attention auto|math|fused]\n"
    "         [--quantize none|int8] [--vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt]\n"
    "         [-o text|json] [--no-cuda-graph]\n"
    "CHECKPOINT: a save directory (latest good checkpoint), a checkpoint or a Hugging Face dir.\n"
    "On CUDA the decode step is replayed from a CUDA graph; --no-cuda-graph runs it eagerly.\n"
    "--quantize int8: the transformer layers' linear weights as int8 (per output channel).\n";

bool IsFile(const std::string& path) {
  struct stat st;
  return !path.empty() && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// --vocab-file/--merge-file, else the job spec's tokenizer files, else the checkpoint's own.
absl::StatusOr<std::unique_ptr<tokenizer::Gpt2BpeTokenizer>> OpenTokenizer(
    const CommandArgs& args, const generate::InferenceModel& loaded) {
  std::string vocab = args.Get("--vocab-file", "");
  std::string merges = args.Get("--merge-file", "");
  if (vocab.empty() != merges.empty()) {
    return absl::InvalidArgumentError("--vocab-file and --merge-file go together");
  }
  if (vocab.empty()) {
    const mt::v1::TokenizerSpec& t = loaded.manifest.spec().data().tokenizer();
    if (IsFile(t.vocab_file()) && IsFile(t.merge_file())) {
      vocab = t.vocab_file();
      merges = t.merge_file();
    } else if (IsFile(JoinPath(loaded.dir, "vocab.json")) &&
               IsFile(JoinPath(loaded.dir, "merges.txt"))) {
      vocab = JoinPath(loaded.dir, "vocab.json");
      merges = JoinPath(loaded.dir, "merges.txt");
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "no tokenizer: the checkpoint's job names no readable tokenizer files and ", loaded.dir,
          " has no vocab.json/merges.txt; give --vocab-file and --merge-file"));
    }
  }
  return tokenizer::Gpt2BpeTokenizer::Create(vocab, merges);
}

absl::StatusOr<generate::GenerateOptions> OptionsFrom(const CommandArgs& args, int32_t eod) {
  generate::GenerateOptions o;
  MT_ASSIGN_OR_RETURN(o.max_new_tokens, args.Int("--max-new-tokens", 64, 1, 1 << 20));
  MT_ASSIGN_OR_RETURN(o.num_samples, args.Int("-n", 1, 1, 4096));
  MT_ASSIGN_OR_RETURN(o.sampling.temperature, args.Double("--temperature", 1.0));
  MT_ASSIGN_OR_RETURN(o.sampling.top_k, args.Int("--top-k", 0, std::numeric_limits<int64_t>::min(),
                                                 std::numeric_limits<int64_t>::max()));
  MT_ASSIGN_OR_RETURN(o.sampling.top_p, args.Double("--top-p", 1.0));
  MT_ASSIGN_OR_RETURN(int64_t seed,
                      args.Int("--seed", 1234, 0, std::numeric_limits<int64_t>::max()));
  o.sampling.seed = static_cast<uint64_t>(seed);
  o.stop = args.Get("--stop", "");
  o.eod = eod;
  o.cuda_graph = args.switches.count("--no-cuda-graph") == 0;
  MT_RETURN_IF_ERROR(generate::ValidateGenerate(o));
  return o;
}

absl::StatusOr<std::string> PromptFrom(const CommandArgs& args) {
  if (args.Has("--prompt") == args.Has("--prompt-file")) {
    return absl::InvalidArgumentError("give exactly one of --prompt TEXT and --prompt-file FILE");
  }
  if (args.Has("--prompt")) return args.Get("--prompt", "");
  absl::StatusOr<std::string> text = ReadFile(args.Get("--prompt-file", ""), kMaxPromptBytes);
  if (!text.ok())
    return absl::InvalidArgumentError(absl::StrCat("--prompt-file: ", text.status().message()));
  return text;
}

std::string Json(const generate::InferenceModel& loaded, const generate::GenerateResult& r) {
  std::string samples;
  for (const generate::GeneratedSample& s : r.samples) {
    absl::StrAppend(&samples, samples.empty() ? "" : ",", "{\"text\":", JsonQuote(s.text),
                    ",\"tokens\":", s.tokens.size(),
                    ",\"finish_reason\":", JsonQuote(s.finish_reason), "}");
  }
  const double rate =
      r.decode_seconds > 0
          ? (r.generated_tokens - static_cast<double>(r.samples.size())) / r.decode_seconds
          : 0.0;
  return absl::StrFormat(
      "{\"checkpoint\":%s,\"step\":%d,\"prompt_tokens\":%d,\"generated_tokens\":%d,"
      "\"time_to_first_token_seconds\":%.6f,\"decode_seconds\":%.6f,\"decode_tokens_per_second\":"
      "%.3f,\"samples\":[%s]}",
      JsonQuote(loaded.dir), loaded.manifest.step(), r.prompt_tokens, r.generated_tokens,
      r.prefill_seconds, r.decode_seconds, rate, samples);
}

// -o text: the samples not streamed, one after the other; the timings on stderr.
void PrintText(const generate::GenerateResult& r, bool streamed) {
  for (size_t i = 0; i < r.samples.size() && !streamed; ++i) {
    std::printf("--- sample %zu ---\n%s\n", i, r.samples[i].text.c_str());
  }
  if (streamed) std::printf("\n");
  std::fflush(stdout);  // the text ends before the timings, also where stdout is a pipe or file
  std::fprintf(stderr,
               "mt-worker generate: %zu sample(s), %lld prompt tokens, %lld generated, first token "
               "%.3f s, decode %.3f s\n",
               r.samples.size(), static_cast<long long>(r.prompt_tokens),
               static_cast<long long>(r.generated_tokens), r.prefill_seconds, r.decode_seconds);
}

const std::set<std::string>& ValueFlags() {
  static const auto* flags =
      new std::set<std::string>{"--prompt",   "--prompt-file", "--max-new-tokens", "--temperature",
                                "--top-k",    "--top-p",       "--seed",           "--stop",
                                "-n",         "--device",      "--dtype",          "--attention",
                                "--quantize", "--vocab-file",  "--merge-file",     "-o"};
  return *flags;
}

const std::set<std::string>& Switches() {
  static const auto* switches = new std::set<std::string>{"--no-cuda-graph"};
  return *switches;
}

int Fail(int code, const absl::Status& s) {
  std::fprintf(stderr, "mt-worker generate: %s\n", std::string(s.message()).c_str());
  if (code == kExitUsage && absl::IsInvalidArgument(s)) std::fputs(kUsage, stderr);
  return code;
}

}  // namespace

const char* GenerateCommandUsage() { return kUsage; }

absl::StatusOr<GenerateRun> GenerateFromArgs(const std::vector<std::string>& argv,
                                             const generate::TextCallback& on_text,
                                             bool* usage_error,
                                             const generate::TensorParallelPlace& tp) {
  *usage_error = true;
  MT_ASSIGN_OR_RETURN(CommandArgs args, ParseCommandArgs(argv, ValueFlags(), Switches()));
  if (args.positional.size() != 1) return absl::InvalidArgumentError("give one CHECKPOINT");
  MT_RETURN_IF_ERROR(OutputFormatFrom(args).status());
  MT_ASSIGN_OR_RETURN(std::string prompt, PromptFrom(args));
  // The sampling flags are checked before the (slow) load.
  MT_RETURN_IF_ERROR(OptionsFrom(args, -1).status());
  GenerateRun run;
  generate::InferenceModelOptions model = InferenceOptionsFrom(args);
  model.tp = tp;
  MT_ASSIGN_OR_RETURN(run.loaded, generate::LoadInferenceModel(args.positional[0], model));
  MT_ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Gpt2BpeTokenizer> tok,
                      OpenTokenizer(args, run.loaded));
  const tokenizer::Gpt2BpeTokenizer& t = *tok;
  MT_ASSIGN_OR_RETURN(generate::GenerateOptions options, OptionsFrom(args, t.eod()));
  absl::StatusOr<generate::GenerateResult> r = generate::Generate(
      *run.loaded.model, t.Encode(prompt), options,
      [&t](absl::Span<const int32_t> tokens) { return t.Decode(tokens); }, on_text);
  if (!r.ok()) {
    *usage_error = absl::IsInvalidArgument(r.status());
    return r.status();
  }
  run.result = *std::move(r);
  *usage_error = false;
  return run;
}

int RunGenerateCommand(const std::vector<std::string>& argv) {
  absl::StatusOr<CommandArgs> args = ParseCommandArgs(argv, ValueFlags(), Switches());
  if (!args.ok()) return Fail(kExitUsage, args.status());
  if (args->switches.count("--help") > 0) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  absl::StatusOr<std::string> format = OutputFormatFrom(*args);
  if (!format.ok()) return Fail(kExitUsage, format.status());
  // One sample streams as it comes (-o text); an -n the generation refuses is reported there.
  const absl::StatusOr<int64_t> samples = args->Int("-n", 1, 1, 4096);
  const bool stream = *format == "text" && samples.ok() && *samples == 1;
  generate::TextCallback on_text;
  if (stream) {
    on_text = [](int64_t, absl::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
  }
  bool usage_error = false;
  absl::StatusOr<GenerateRun> run = GenerateFromArgs(argv, on_text, &usage_error);
  if (!run.ok()) return Fail(usage_error ? kExitUsage : kExitFailed, run.status());
  if (*format == "json") {
    std::printf("%s\n", Json(run->loaded, run->result).c_str());
  } else {
    PrintText(run->result, stream);
  }
  return kExitOk;
}

}  // namespace mt::train
