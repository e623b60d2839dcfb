#include "client/verbs.h"

#include <cstdio>
#include <cstring>
#include <iostream>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/version.h"
#include "common/cli/daemon.h"

ABSL_FLAG(bool, megatron, false,
          "plan/validate: the spec is given as Megatron-LM pretrain_gpt.py flags after `--`.");

namespace mt::client {

const std::vector<Verb>& AllVerbs() {
  static const std::vector<Verb> verbs = {
      {"submit", "submit a job; prints its id",
       "mtctl submit JOB.yaml\n"
       "mtctl submit --megatron -- --num-layers 24 --hidden-size 1024 ... (pretrain_gpt.py "
       "flags)\n"
       "mtctl submit --from-checkpoint CHECKPOINT_ID JOB.yaml   start from a catalog entry\n\n"
       "The spec is checked locally first (exit 2 naming the field when it is wrong), relative\n"
       "paths are made absolute, and the job is queued. Prints the job id on stdout.",
       &RunSubmit},
      {"list", "list jobs (optionally only in some states)",
       "mtctl list [STATE ...]       e.g. mtctl list running pending\n"
       "mtctl list --owner NAME      only the jobs NAME's token submitted",
       &RunList},
      {"describe", "a job's spec summary, layout grid, placement and events",
       "mtctl describe JOB_ID", &RunDescribe},
      {"watch", "follow a job live until it ends",
       "mtctl watch JOB_ID\n\n"
       "A live line (step/total, loss, tokens/s, ETA) on stderr, state changes as they\n"
       "happen, and the final state and losses on stdout. Exit code 0 when the job\n"
       "succeeded, 1 otherwise.",
       &RunWatch},
      {"logs", "the last lines of each rank's trainer log", "mtctl logs JOB_ID [RANK ...]",
       &RunLogs},
      {"cancel", "stop every rank of a job and mark it cancelled",
       "mtctl cancel JOB_ID [REASON] [--no-save]\n\n"
       "The job is CANCELLED at once. Its ranks stop as on SIGTERM: every rank at the same\n"
       "step, which is saved to checkpoint.save_dir (within restart.save_load_timeout_seconds,\n"
       "then they are killed); `mtctl describe` shows the step saved once they have exited.\n"
       "--no-save kills the ranks at once, saving nothing.",
       &RunCancel},
      {"delete", "forget an ended job (its record, events and logs)",
       "mtctl delete JOB_ID\n\n"
       "Only ended jobs (succeeded, failed, cancelled) are deleted: cancel a live one first.\n"
       "Its checkpoints stay on disk and in `mtctl checkpoints`. The coordinator can also\n"
       "delete ended jobs by itself (--keep-ended-jobs, --ended-job-ttl).",
       &RunDelete},
      {"plan", "show the layout and placement a job would get (nothing is submitted)",
       "mtctl plan JOB.yaml\n"
       "mtctl plan --megatron -- --num-layers 24 --hidden-size 1024 ... \n\n"
       "Prints the TP/PP/DP groups, the layers of each pipeline stage, the estimated state\n"
       "per rank, and which worker and GPU each rank would land on now, or why the job\n"
       "cannot be placed. Exit code 1 when it cannot be placed.",
       &RunPlan},
      {"validate", "check a job spec locally and print it complete with defaults",
       "mtctl validate JOB.yaml\n"
       "mtctl validate --megatron -- --num-layers 24 ...\n\n"
       "Needs no coordinator. Exit code 2 and the field at fault when the spec is wrong.",
       &RunValidate},
      {"data", "prepare training data: preprocess, inspect, merge (Megatron formats)",
       "mtctl data preprocess --input FILE --output-prefix PREFIX --vocab-file F --merge-file F "
       "...\n"
       "mtctl data inspect PREFIX\n"
       "mtctl data merge --input PREFIX... --output-prefix PREFIX\n\n"
       "`mtctl data SUBCOMMAND --help` explains each.",
       &RunData, /*raw_args=*/true},
      {"checkpoints",
       "the checkpoint catalog: list, describe, verify, delete, download, export, "
       "import",
       "mtctl checkpoints list [JOB_ID]\n"
       "mtctl checkpoints describe CHECKPOINT_ID\n"
       "mtctl checkpoints verify CHECKPOINT_ID       re-hash every file (exit 1 when corrupt)\n"
       "mtctl checkpoints delete CHECKPOINT_ID ...  refuses a running job's latest and\n"
       "                                            checkpoints a job is loading\n"
       "mtctl checkpoints download CHECKPOINT_ID DEST_DIR   streamed, sha256 checked at the end\n"
       "                      (DEST_DIR new; removed again when the stream breaks)\n"
       "mtctl checkpoints export CHECKPOINT_ID OUTPUT_DIR [--dtype float16|bfloat16]\n"
       "                      Hugging Face GPT-2 (written by the coordinator, OUTPUT_DIR new)\n"
       "mtctl checkpoints import DIRECTORY [JOB_ID] a Hugging Face GPT-2 or mt checkpoint\n"
       "                                            directory, usable by --from-checkpoint\n\n"
       "Directories are on the coordinator's (shared) file system; relative ones are made\n"
       "absolute here. `mtctl submit --from-checkpoint ID job.yaml` starts a job from one.",
       &RunCheckpoints},
      {"workers", "list the worker daemons and their state", "mtctl workers [-o table|json|yaml]",
       &RunWorkers},
      {"info", "the coordinator's version and counts", "mtctl info [-o table|json|yaml]", &RunInfo},
      {"top", "a live view of running jobs and workers (step, loss, tokens/s, memory, state)",
       "mtctl top [--interval 2s] [-o table|json|yaml]\n\n"
       "On a terminal the view is redrawn in place every --interval until Ctrl-C. Piped, or\n"
       "with -o json / -o yaml, one snapshot is printed: {cluster, jobs, workers}.",
       &RunTop},
      {"eval", "evaluate a checkpoint's loss and perplexity on a dataset (an evaluation job)",
       "mtctl eval CHECKPOINT --data-path PREFIX [--split 969,30,1] [--eval-iters N (100) | "
       "--all]\n"
       "           [--micro-batch-size B] [--context-length S] [--quantize none|int8]\n"
       "           [--tensor-model-parallel-size T] [--pipeline-model-parallel-size P]\n"
       "           [--data-parallel-size D] [--device auto|cpu|gpu] [--wait]\n\n"
       "CHECKPOINT: a catalog id (`mtctl checkpoints list`) or a checkpoint or save directory.\n"
       "Evaluates the validation part of PREFIX.bin/.idx as --split divides it (0,1,0: all of\n"
       "it), as `mt-worker eval` does. Prints the job id; with --wait, waits and prints loss,\n"
       "perplexity and tokens evaluated (exit 1 when the job failed). The result is also kept\n"
       "on the checkpoint (`mtctl checkpoints describe`). --quantize int8: the layers' linear\n"
       "weights as int8, per output channel (docs/inference.md; one rank).\n"
       "T x P x D ranks (default 1 x 1 x 1), placed like a training job's: the checkpoint is\n"
       "resharded to T and P; each iteration is a micro-batch per DP rank (with D = 1 the\n"
       "samples of `mt-worker eval`; with D ranks those of its --micro-batch-size D x B).",
       &RunEval},
      {"generate", "stream text from a checkpoint (a generation job)",
       "mtctl generate CHECKPOINT (--prompt TEXT | --prompt-file FILE) [--max-new-tokens N (64)]\n"
       "           [--temperature T (1.0; 0 = greedy)] [--top-k K (0 = all)] [--top-p P (1.0)]\n"
       "           [--seed S (1234)] [--stop TEXT] [-n SAMPLES (1)] [--quantize none|int8]\n"
       "           [--tensor-model-parallel-size T] [--device auto|cpu|gpu]\n\n"
       "One sample streams to stdout as the worker produces it; several are printed each under\n"
       "a \"--- sample i ---\" line as each ends. The job id and finish reasons go to stderr.\n"
       "-o json: one JSON object per line and sample, as each sample ends: {job, sample, text,\n"
       "tokens, finish_reason}. Ctrl-C (the stream closed) cancels the job.\n"
       "--tensor-model-parallel-size T (default 1): T ranks, each holding 1/T of every layer (the\n"
       "checkpoint resharded; T must divide its attention heads and padded vocabulary), for a\n"
       "model that does not fit one GPU; the text is the one rank's (greedy: token for token).\n"
       "--quantize int8 runs on one rank only.",
       &RunGenerate},
  };
  return verbs;
}

namespace {

const char kGlobalHelp[] =
    "Global flags: --coordinator HOST:PORT (or $MT_COORDINATOR), --token-file FILE (or\n"
    "$MT_TOKEN_FILE), --tls-ca FILE (or $MT_TLS_CA; --tls-cert/--tls-key for mutual TLS),\n"
    "--insecure-allow-plaintext, -o table|json|yaml.\n"
    "Results go to stdout, errors and notices to stderr.\n"
    "Exit codes: 0 ok, 1 failed, 2 bad usage or invalid input, 3 not found,\n"
    "4 coordinator unreachable, 5 not authenticated, 6 timed out.\n";

std::string TopUsage() {
  std::string s = "mtctl: submit and watch GPT training jobs on an mt cluster.\n\nVerbs:\n";
  for (const Verb& v : AllVerbs())
    absl::StrAppend(&s, "  ", v.name, std::string(12 - std::strlen(v.name), ' '), v.summary, "\n");
  absl::StrAppend(&s, "\n", kGlobalHelp, "\n`mtctl VERB --help` explains a verb.\n");
  return s;
}

const Verb* FindVerb(const std::string& name) {
  for (const Verb& v : AllVerbs()) {
    if (name == v.name) return &v;
  }
  return nullptr;
}

// absl::ParseCommandLine exits 1 on an unknown flag or a bad value; mtctl's documented code
// for bad usage is 2, so the flags are checked here first (values parsed as the flag will).
absl::Status CheckFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    absl::ConsumePrefix(&arg, "-");
    absl::ConsumePrefix(&arg, "-");
    const size_t eq = arg.find('=');
    std::string name(arg.substr(0, eq));
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      negated = flag != nullptr && flag->IsOfType<bool>();
      if (!negated) flag = nullptr;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, "; `mtctl VERB --help` lists the flags"));
    }
    if (negated) continue;
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " '", value, "': ", error));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int Main(int argc, char** argv) {
  // The verb is the first argument that is not a flag; "--" ends flag parsing.
  const Verb* verb = nullptr;
  bool help = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0 ||
        std::strcmp(argv[i], "-help") == 0) {
      help = true;
    } else if (std::strcmp(argv[i], "--version") == 0) {
      std::cout << "mtctl " << kVersion << " (API " << kApiVersion << ")\n";
      return kExitOk;
    } else if (bool takes_value = false;
               verb == nullptr &&
               (std::strcmp(argv[i], "-o") == 0 || std::strcmp(argv[i], "--o") == 0 ||
                (IsConnectionFlag(argv[i], &takes_value) && takes_value))) {
      ++i;  // a global flag's value, not the verb
    } else if (argv[i][0] != '-' && verb == nullptr) {
      verb = FindVerb(argv[i]);
      if (verb == nullptr) {
        std::fprintf(stderr, "mtctl: unknown verb '%s'\n\n%s", argv[i], TopUsage().c_str());
        return kExitUsage;
      }
    }
  }
  if (verb == nullptr) {
    std::cout << TopUsage();
    return help ? kExitOk : kExitUsage;
  }
  if (verb->raw_args) {
    std::vector<std::string> args;
    bool seen_verb = false;
    for (int i = 1; i < argc; ++i) {
      if (!seen_verb && verb->name == std::string(argv[i])) {
        seen_verb = true;
        continue;
      }
      args.push_back(argv[i]);
    }
    GlobalOptions defaults;
    return verb->run(args, defaults);
  }
  if (help) {
    std::cout << "usage: " << verb->usage << "\n\n" << kGlobalHelp;
    return kExitOk;
  }
  cli::NormalizeFlagNames(argc, argv);
  if (absl::Status s = CheckFlags(argc, argv); !s.ok()) return Fail(s);
  absl::FlagsUsageConfig config;
  config.version_string = [] { return absl::StrCat("mtctl ", kVersion, "\n"); };
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(TopUsage());
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  // positional: argv[0], the verb, its arguments; everything after "--" is kept as given.
  std::vector<std::string> args;
  if (absl::GetFlag(FLAGS_megatron)) args.push_back("--megatron");
  bool seen_verb = false;
  for (size_t i = 1; i < positional.size(); ++i) {
    if (!seen_verb && verb->name == std::string(positional[i])) {
      seen_verb = true;
      continue;
    }
    args.push_back(positional[i]);
  }
  auto options = LoadGlobalOptions();
  if (!options.ok()) return Fail(options.status());
  return verb->run(args, *options);
}

}  // namespace mt::client
