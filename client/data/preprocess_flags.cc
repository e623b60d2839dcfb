#include "client/data/preprocess_flags.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace mt::client::data_cli {

using data::BadLinePolicy;
using data::PreprocessInputFormat;

const char kPreprocessUsage[] =
    "usage: mtctl data preprocess --input FILE --output-prefix PREFIX --vocab-file VOCAB\n"
    "                             --merge-file MERGES [--append-eod] [--workers N] [FLAGS]\n\n"
    "Tokenises a corpus with GPT-2's BPE and writes Megatron-LM's indexed dataset\n"
    "PREFIX_KEY_document.bin/.idx for each JSON key (Megatron's naming). Flags are those of\n"
    "Megatron-LM's tools/preprocess_data.py:\n\n"
    "  --input FILE             JSON lines ({\"text\": ...} per line) or plain text (one\n"
    "                           document per line); \"-\" reads standard input\n"
    "  --input-format F         auto (default: JSON lines when the first character that is\n"
    "                           not whitespace is '{'), jsonl or text\n"
    "  --json-keys K [K ...]    keys to tokenise, one output each (default: text); with text\n"
    "                           input one key, which names the output\n"
    "  --output-prefix PREFIX   outputs are PREFIX_KEY_document.{bin,idx}; the directory must\n"
    "                           exist\n"
    "  --tokenizer-type T       GPT2BPETokenizer (the default and the only one supported)\n"
    "  --vocab-file FILE        gpt2-vocab.json (encoder.json)\n"
    "  --merge-file FILE        gpt2-merges.txt (vocab.bpe)\n"
    "  --append-eod             end every non-empty document with <|endoftext|> (50256)\n"
    "  --workers N              tokenizer threads (default: the number of CPUs); the output\n"
    "                           is identical for every N, documents stay in input order\n"
    "  --on-error fail|skip     a bad line (not UTF-8, not a JSON object, missing key, not a\n"
    "                           string): fail naming its line number (default), or skip it\n"
    "                           (for every key) and report the count and the first lines\n"
    "  -o table|json|yaml       the summary's format on stdout (default table)\n"
    "  --quiet                  no progress on stderr\n\n"
    "Accepted and ignored, with a notice: --partitions N (one streaming pass with --workers\n"
    "threads instead; input order is kept), --dataset-impl mmap, --chunk-size N,\n"
    "--log-interval N, --keep-newlines, --keep-sequential-samples, --lang L, --vocab-size N,\n"
    "--vocab-extra-ids 0. Rejected: --split-sentences (needs NLTK's punkt sentence splitter,\n"
    "which has no C++ equivalent here), --tokenizer-model, other --tokenizer-type values.\n\n"
    "Memory stays bounded whatever the input's size (a line may be up to 1 GiB). Outputs are\n"
    "written under temporary names and renamed at the very end: an interrupted or failed run\n"
    "leaves no PREFIX_KEY_document.idx. Progress (documents/s, MB/s, ETA) goes to stderr,\n"
    "the summary to stdout. Exit codes: 0 ok, 1 failed, 2 bad usage or bad input line,\n"
    "3 input not found, 130/143 interrupted by SIGINT/SIGTERM.\n";

const std::vector<FlagSpec>& PreprocessFlags() {
  static const std::vector<FlagSpec> specs = {
      {"help", FlagKind::kBool},
      {"input", FlagKind::kValue},
      {"input-format", FlagKind::kValue},
      {"json-keys", FlagKind::kList},
      {"output-prefix", FlagKind::kValue},
      {"tokenizer-type", FlagKind::kValue},
      {"vocab-file", FlagKind::kValue},
      {"merge-file", FlagKind::kValue},
      {"append-eod", FlagKind::kBool},
      {"workers", FlagKind::kValue},
      {"on-error", FlagKind::kValue},
      {"o", FlagKind::kValue},
      {"quiet", FlagKind::kBool},
      {"partitions", FlagKind::kValue},
      {"dataset-impl", FlagKind::kValue},
      {"chunk-size", FlagKind::kValue},
      {"log-interval", FlagKind::kValue},
      {"keep-newlines", FlagKind::kBool},
      {"split-sentences", FlagKind::kBool},
      {"keep-sequential-samples", FlagKind::kBool},
      {"lang", FlagKind::kValue},
      {"vocab-size", FlagKind::kValue},
      {"vocab-extra-ids", FlagKind::kValue},
      {"tokenizer-model", FlagKind::kValue},
  };
  return specs;
}

namespace {

// Flags whose job we cannot do (sentence splitting, other tokenizers).
absl::Status RejectUnsupported(const ParsedFlags& f) {
  if (!f.positional.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", f.positional[0], "' (did you mean --input?)"));
  }
  if (f.Has("split-sentences")) {
    return absl::InvalidArgumentError(
        "--split-sentences is not supported: Megatron splits with NLTK's punkt model, which "
        "has no equivalent here; split the text into sentences beforehand, or drop the flag to "
        "keep one sequence per document");
  }
  if (f.Has("tokenizer-model")) {
    return absl::InvalidArgumentError(
        "--tokenizer-model is not supported: only GPT2BPETokenizer (--vocab-file and "
        "--merge-file)");
  }
  const std::string type = f.Get("tokenizer-type", "GPT2BPETokenizer");
  if (type != "GPT2BPETokenizer") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tokenizer-type ", type,
        " is not supported: only GPT2BPETokenizer (GPT-2 byte-level BPE from --vocab-file and "
        "--merge-file)"));
  }
  return absl::OkStatus();
}

// --input, --output-prefix, --vocab-file, --merge-file.
absl::Status ParseRequired(const ParsedFlags& f, PreprocessCommand* c) {
  c->options.input = f.Get("input");
  c->options.output_prefix = f.Get("output-prefix");
  c->vocab_file = f.Get("vocab-file");
  c->merge_file = f.Get("merge-file");
  if (c->options.input.empty()) return absl::InvalidArgumentError("--input is required");
  if (c->options.output_prefix.empty()) {
    return absl::InvalidArgumentError("--output-prefix is required");
  }
  if (c->vocab_file.empty() || c->merge_file.empty()) {
    return absl::InvalidArgumentError(
        "--vocab-file and --merge-file are required (GPT-2's gpt2-vocab.json and "
        "gpt2-merges.txt; deploy/setup.sh puts them in ~/.cache/mt/assets)");
  }
  return absl::OkStatus();
}

absl::StatusOr<PreprocessInputFormat> ParseInputFormat(const std::string& name) {
  if (name == "auto") return PreprocessInputFormat::kAuto;
  if (name == "jsonl" || name == "json") return PreprocessInputFormat::kJsonl;
  if (name == "text" || name == "txt") return PreprocessInputFormat::kText;
  return absl::InvalidArgumentError(
      absl::StrCat("--input-format ", name, ": choose auto, jsonl or text"));
}

absl::StatusOr<BadLinePolicy> ParseOnError(const std::string& name) {
  if (name == "fail") return BadLinePolicy::kFail;
  if (name == "skip") return BadLinePolicy::kSkip;
  return absl::InvalidArgumentError(absl::StrCat("--on-error ", name, ": choose fail or skip"));
}

// What shapes the output: keys, input format, eod, workers, bad lines, -o, --quiet.
absl::Status ParseChoices(const ParsedFlags& f, int cpus, PreprocessCommand* c) {
  if (f.Has("json-keys")) c->options.json_keys = f.List("json-keys");
  MT_ASSIGN_OR_RETURN(c->options.input_format, ParseInputFormat(f.Get("input-format", "auto")));
  c->options.append_eod = f.Has("append-eod");
  MT_ASSIGN_OR_RETURN(int64_t workers, IntFlag(f, "workers", cpus, 1, 1024));
  c->options.workers = static_cast<int>(workers);
  MT_ASSIGN_OR_RETURN(c->options.on_bad_line, ParseOnError(f.Get("on-error", "fail")));
  MT_ASSIGN_OR_RETURN(c->format, FormatFlag(f));
  c->quiet = f.Has("quiet");
  return absl::OkStatus();
}

// Megatron's flags that mean nothing here: checked, then noted as ignored.
absl::Status ParseIgnored(const ParsedFlags& f, std::vector<std::string>* notices) {
  MT_ASSIGN_OR_RETURN(int64_t partitions, IntFlag(f, "partitions", 1, 1, 1 << 20));
  if (partitions > 1) {
    notices->push_back(absl::StrCat(
        "--partitions ", partitions,
        " ignored: one streaming pass with --workers threads, input order kept (Megatron's "
        "partitions would interleave documents round-robin)"));
  }
  if (f.Has("dataset-impl")) {
    const std::string impl = f.Get("dataset-impl");
    if (impl != "mmap") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--dataset-impl ", impl, " is not supported: only mmap (MMIDIDX) is written"));
    }
    notices->push_back("--dataset-impl mmap: the only format; nothing to choose");
  }
  if (f.Has("vocab-extra-ids")) {
    MT_ASSIGN_OR_RETURN(int64_t extra, IntFlag(f, "vocab-extra-ids", 0, 0, 1 << 20));
    if (extra != 0) {
      return absl::InvalidArgumentError(
          "--vocab-extra-ids is not supported with GPT2BPETokenizer (only 0)");
    }
  }
  for (const char* name : {"chunk-size", "log-interval", "vocab-size"}) {
    if (f.Has(name)) {
      MT_RETURN_IF_ERROR(IntFlag(f, name, 0, 0, int64_t{1} << 40).status());
      notices->push_back(absl::StrCat(
          "--", name, " ", f.Get(name), " ignored",
          std::string(name) == "log-interval" ? " (progress is shown on stderr)" : ""));
    }
  }
  if (f.Has("keep-newlines")) {
    notices->push_back(
        "--keep-newlines ignored: it matters only with --split-sentences; "
        "newlines are always kept");
  }
  if (f.Has("keep-sequential-samples")) {
    notices->push_back("--keep-sequential-samples ignored: input order is always kept");
  }
  if (f.Has("lang")) notices->push_back("--lang ignored: it matters only with --split-sentences");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PreprocessCommand> ParsePreprocess(const ParsedFlags& flags, int cpus) {
  PreprocessCommand c;
  MT_RETURN_IF_ERROR(RejectUnsupported(flags));
  MT_RETURN_IF_ERROR(ParseRequired(flags, &c));
  MT_RETURN_IF_ERROR(ParseChoices(flags, cpus, &c));
  MT_RETURN_IF_ERROR(ParseIgnored(flags, &c.notices));
  return c;
}

}  // namespace mt::client::data_cli
