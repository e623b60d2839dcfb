// mtctl data preprocess | inspect | merge: Megatron-LM's data tools (tools/preprocess_data.py,
// tools/merge_datasets.py) plus an inspector, on the indexed dataset format of
// common/data/FORMAT.md. Each subcommand parses its own flags, Megatron style (`--flag value`
// and `--flag=value`), so existing preprocessing scripts keep working.
//
// --partitions: Megatron splits the input round-robin into N files, preprocesses them in N
// processes and merges the results, which reorders documents. Here one streaming pass with
// --workers threads already uses every core with bounded memory and keeps the input order, so
// --partitions is accepted and ignored, with a notice.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/common.h"
#include "client/verbs.h"
#include "common/base/status_macros.h"
#include "common/data/indexed_dataset.h"
#include "common/data/preprocess.h"
#include "common/tokenizer/gpt2_bpe_tokenizer.h"

namespace mt::client {
namespace {

using data::BadLinePolicy;
using data::PreprocessInputFormat;
using tokenizer::Gpt2BpeTokenizer;

// ------------------------------------------------------------------------------------------
// Usage texts.

const char kDataUsage[] =
    "usage: mtctl data SUBCOMMAND [FLAGS]\n\n"
    "  preprocess   JSON lines or text -> GPT-2 BPE tokens -> Megatron .bin/.idx\n"
    "               (flags of Megatron-LM's tools/preprocess_data.py)\n"
    "  inspect      counts, lengths, token histogram and sample documents of a dataset\n"
    "  merge        concatenate datasets (Megatron-LM's tools/merge_datasets.py)\n\n"
    "`mtctl data SUBCOMMAND --help` explains each.\n";

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

const char kInspectUsage[] =
    "usage: mtctl data inspect PREFIX [--vocab-file VOCAB --merge-file MERGES] [FLAGS]\n\n"
    "Opens PREFIX.bin/.idx (a trailing .bin or .idx is ignored), checks it, and prints the\n"
    "dtype, document, sequence and token counts, sequence lengths (min/mean/max), the most\n"
    "frequent token ids (decoded with the vocabulary when given) and the first documents.\n\n"
    "  --documents N      documents to show (default 2)\n"
    "  --max-chars N      characters shown per document (default 300; 0: all)\n"
    "  --top N            most frequent token ids to list (default 10)\n"
    "  --vocab-file FILE  with --merge-file: decode tokens to text\n"
    "  --merge-file FILE\n"
    "  --dump-jsonl       instead: every document decoded, one {\"text\": ...} JSON line each\n"
    "                     on stdout (a final <|endoftext|> is dropped), the inverse of\n"
    "                     `preprocess --append-eod`; needs --vocab-file and --merge-file\n"
    "  -o table|json|yaml\n";

const char kMergeUsage[] =
    "usage: mtctl data merge --input DIR_OR_PREFIX [...] --output-prefix PREFIX\n\n"
    "Concatenates indexed datasets of one dtype into PREFIX.bin/.idx, documents in order\n"
    "(Megatron-LM's tools/merge_datasets.py). --input takes a directory (every PREFIX.bin/.idx\n"
    "pair in it, in sorted order, as Megatron does) or explicit prefixes, in the order given\n"
    "(a trailing .bin or .idx is ignored); several may be given.\n\n"
    "  -o table|json|yaml\n";

// ------------------------------------------------------------------------------------------
// Flags.

enum class FlagKind { kBool, kValue, kList };
struct FlagSpec {
  const char* name;  // without dashes; "o" is the short -o
  FlagKind kind;
};

struct ParsedFlags {
  std::map<std::string, std::vector<std::string>> values;
  std::vector<std::string> positional;
  bool Has(const std::string& name) const { return values.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& def = "") const {
    auto it = values.find(name);
    return it == values.end() || it->second.empty() ? def : it->second.back();
  }
  const std::vector<std::string>& List(const std::string& name) const {
    static const std::vector<std::string> kEmpty;
    auto it = values.find(name);
    return it == values.end() ? kEmpty : it->second;
  }
};

bool IsFlag(const std::string& a) {
  return (absl::StartsWith(a, "--") && a.size() > 2) || a == "-o" || absl::StartsWith(a, "-o=");
}

absl::StatusOr<ParsedFlags> ParseFlags(const std::vector<std::string>& args,
                                       const std::vector<FlagSpec>& specs,
                                       absl::string_view command) {
  ParsedFlags out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      for (++i; i < args.size(); ++i) out.positional.push_back(args[i]);
      break;
    }
    if (!IsFlag(a)) {
      out.positional.push_back(a);
      continue;
    }
    std::string name = a[1] == '-' ? a.substr(2) : a.substr(1);
    std::string inline_value;
    bool has_inline = false;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name.resize(eq);
      has_inline = true;
    }
    std::replace(name.begin(), name.end(), '_', '-');  // --output_prefix works too
    if (name == "output") name = "o";
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs) {
      if (name == s.name) spec = &s;
    }
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", a.substr(0, a.find('=')),
                                                     " (see mtctl data ", command, " --help)"));
    }
    const std::string shown = name == "o" ? "-o" : "--" + name;
    std::vector<std::string>& v = out.values[name];
    switch (spec->kind) {
      case FlagKind::kBool:
        if (has_inline) {
          return absl::InvalidArgumentError(absl::StrCat(shown, " takes no value"));
        }
        v.push_back("true");
        break;
      case FlagKind::kValue:
        if (has_inline) {
          v.push_back(inline_value);
        } else if (i + 1 < args.size() && (!IsFlag(args[i + 1]))) {
          v.push_back(args[++i]);
        } else {
          return absl::InvalidArgumentError(absl::StrCat(shown, " needs a value"));
        }
        break;
      case FlagKind::kList:
        // Megatron's nargs='+': every following argument up to the next flag.
        v.clear();
        if (has_inline) v.push_back(inline_value);
        while (i + 1 < args.size() && !IsFlag(args[i + 1]) && args[i + 1] != "--") {
          v.push_back(args[++i]);
        }
        if (v.empty()) return absl::InvalidArgumentError(absl::StrCat(shown, " needs a value"));
        break;
    }
  }
  return out;
}

absl::StatusOr<int64_t> IntFlag(const ParsedFlags& f, const std::string& name, int64_t def,
                                int64_t min, int64_t max) {
  if (!f.Has(name)) return def;
  int64_t v;
  const std::string s = f.Get(name);
  if (!absl::SimpleAtoi(s, &v) || v < min || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " ", s, ": expected an integer in [", min, ", ", max, "]"));
  }
  return v;
}

absl::StatusOr<OutputFormat> FormatFlag(const ParsedFlags& f) {
  const std::string o = f.Get("o", "table");
  if (o == "table") return OutputFormat::kTable;
  if (o == "json") return OutputFormat::kJson;
  if (o == "yaml") return OutputFormat::kYaml;
  return absl::InvalidArgumentError(absl::StrCat("-o ", o, ": choose table, json or yaml"));
}

void Notice(const std::string& message) {
  std::fprintf(stderr, "mtctl: notice: %s\n", message.c_str());
}

int UsageError(const absl::Status& status) {
  std::fprintf(stderr, "mtctl: %s\n", std::string(status.message()).c_str());
  return kExitUsage;
}

// ------------------------------------------------------------------------------------------
// A small ordered JSON value, for -o json|yaml (keys keep the order they were added in).
// Thread-compatible.

class Value {
 public:
  static Value Int(int64_t v) { return Value(kInt, absl::StrCat(v)); }
  // Fixed notation with up to `decimals` digits after the point (no exponents).
  static Value Num(double v, int decimals = 3) {
    if (!std::isfinite(v)) return Value(kInt, "null");
    std::string s = absl::StrFormat("%.*f", decimals, v);
    if (s.find('.') != std::string::npos) {
      while (s.back() == '0') s.pop_back();
      if (s.back() == '.') s.pop_back();
    }
    return Value(kInt, s == "-0" ? "0" : s);
  }
  static Value Bool(bool v) { return Value(kInt, v ? "true" : "false"); }
  static Value Null() { return Value(kInt, "null"); }
  static Value Str(absl::string_view v) { return Value(kStr, std::string(v)); }
  static Value Object() { return Value(kObject, ""); }
  static Value Array() { return Value(kArray, ""); }

  Value& Set(const std::string& key, Value v) {
    items_.emplace_back(key, std::move(v));
    return *this;
  }
  Value& Push(Value v) {
    items_.emplace_back("", std::move(v));
    return *this;
  }

  std::string Json(int indent = 0) const {
    const std::string pad(indent + 2, ' '), end_pad(indent, ' ');
    switch (kind_) {
      case kInt:
        return scalar_;
      case kStr:
        return Quote(scalar_);
      case kObject:
      case kArray: {
        if (items_.empty()) return kind_ == kObject ? "{}" : "[]";
        std::string s = kind_ == kObject ? "{\n" : "[\n";
        for (size_t i = 0; i < items_.size(); ++i) {
          absl::StrAppend(&s, pad);
          if (kind_ == kObject) absl::StrAppend(&s, Quote(items_[i].first), ": ");
          absl::StrAppend(&s, items_[i].second.Json(indent + 2),
                          i + 1 < items_.size() ? ",\n" : "\n");
        }
        return s + end_pad + (kind_ == kObject ? "}" : "]");
      }
    }
    return "null";
  }

  // Block-style YAML; strings double-quoted with JSON's escapes (valid YAML too).
  std::string Yaml(int indent = 0) const {
    std::string s;
    const std::string pad(indent, ' ');
    for (const auto& [key, v] : items_) {
      absl::StrAppend(&s, pad, kind_ == kObject ? YamlKey(key) + ":" : "-");
      if ((v.kind_ == kObject || v.kind_ == kArray) && !v.items_.empty()) {
        absl::StrAppend(&s, "\n", v.Yaml(indent + 2));
      } else {
        absl::StrAppend(&s, " ", v.Json(), "\n");
      }
    }
    return s;
  }

  void Print(OutputFormat format) const {
    std::cout << (format == OutputFormat::kYaml ? Yaml() : Json() + "\n");
    std::cout.flush();
  }

  // Plain identifiers as they are, anything else quoted.
  static std::string YamlKey(const std::string& key) {
    bool plain = !key.empty() && !absl::ascii_isdigit(static_cast<unsigned char>(key[0]));
    for (char c : key)
      plain = plain && (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_');
    return plain ? key : Quote(key);
  }

  // JSON string literal; bytes that are not UTF-8 become U+FFFD so the output stays valid.
  static std::string Quote(absl::string_view s) {
    std::string out = "\"";
    out.reserve(s.size() + 2);
    size_t bad = 0;
    std::string clean;
    if (!data::internal::IsValidUtf8(s, &bad)) {
      while (!s.empty()) {
        size_t off = 0;
        if (data::internal::IsValidUtf8(s, &off)) {
          clean.append(s.data(), s.size());
          break;
        }
        clean.append(s.data(), off);
        clean += "\xEF\xBF\xBD";
        s.remove_prefix(off + 1);
      }
      s = clean;
    }
    for (unsigned char c : s) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20 || c == 0x7F) {
            out += absl::StrFormat("\\u%04x", c);
          } else {
            out += static_cast<char>(c);
          }
      }
    }
    return out + "\"";
  }

 private:
  enum Kind { kInt, kStr, kObject, kArray };  // kInt: any literal (numbers, true, null)
  Value(Kind kind, std::string scalar) : kind_(kind), scalar_(std::move(scalar)) {}
  Kind kind_;
  std::string scalar_;
  std::vector<std::pair<std::string, Value>> items_;
};

// ------------------------------------------------------------------------------------------
// Human-readable numbers.

std::string Thousands(int64_t v) {
  std::string digits = absl::StrCat(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string Bytes(double b) {
  if (b < 1e3) return absl::StrFormat("%.0f B", b);
  if (b < 1e6) return absl::StrFormat("%.1f kB", b / 1e3);
  if (b < 1e9) return absl::StrFormat("%.1f MB", b / 1e6);
  return absl::StrFormat("%.2f GB", b / 1e9);
}

std::string Rate(double per_second) {
  if (per_second < 1e3) return absl::StrFormat("%.0f", per_second);
  if (per_second < 1e6) return absl::StrFormat("%.1fk", per_second / 1e3);
  return absl::StrFormat("%.2fM", per_second / 1e6);
}

std::string Duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(std::llround(s));
  if (t >= 3600) return absl::StrFormat("%d:%02d:%02d", t / 3600, (t / 60) % 60, t % 60);
  return absl::StrFormat("%d:%02d", t / 60, t % 60);
}

// ------------------------------------------------------------------------------------------
// Signals: SIGINT/SIGTERM/SIGHUP ask the run to stop (it removes its temporary files); a
// second signal kills at once (SA_RESETHAND).

std::atomic<bool> g_cancel{false};
std::atomic<int> g_signal{0};

void OnSignal(int sig) {
  g_signal.store(sig);
  g_cancel.store(true);
}

class ScopedCancelOnSignal {
 public:
  ScopedCancelOnSignal() {
    g_cancel = false;
    g_signal = 0;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~ScopedCancelOnSignal() {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  }
  ScopedCancelOnSignal(const ScopedCancelOnSignal&) = delete;
  ScopedCancelOnSignal& operator=(const ScopedCancelOnSignal&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> old_;
};

// ------------------------------------------------------------------------------------------
// Progress on stderr: redrawn in place on a terminal (10 times a second at most), a line
// every 5 seconds otherwise. Thread-compatible (Preprocess calls it on one thread).

class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool enabled) : enabled_(enabled), tty_(::isatty(STDERR_FILENO) == 1) {}

  void Update(const data::PreprocessProgress& p, bool final) {
    if (!enabled_) return;
    const double interval = tty_ ? 0.1 : 5.0;
    if (!final && p.seconds - last_ < interval) return;
    if (final && !tty_) return;  // the summary follows
    last_ = p.seconds;
    const double s = std::max(p.seconds, 1e-9);
    std::string line;
    if (p.total_bytes > 0) {
      const double frac = std::min(1.0, static_cast<double>(p.bytes_done) / p.total_bytes);
      if (tty_) {
        const int width = 24, fill = static_cast<int>(frac * width);
        absl::StrAppend(&line, "[", std::string(fill, '#'), std::string(width - fill, '.'), "] ");
      }
      absl::StrAppend(&line, absl::StrFormat("%3.0f%%  ", frac * 100), Bytes(p.bytes_done), "/",
                      Bytes(p.total_bytes), "  ");
    } else {
      absl::StrAppend(&line, Bytes(p.bytes_done), "  ");
    }
    absl::StrAppend(&line, Thousands(p.documents), " docs  ", Rate(p.documents / s), " docs/s  ",
                    absl::StrFormat("%.1f", p.bytes_done / s / 1e6), " MB/s  ", Rate(p.tokens / s),
                    " tokens/s");
    if (p.bad_lines > 0) absl::StrAppend(&line, "  ", Thousands(p.bad_lines), " bad");
    if (final) {
      absl::StrAppend(&line, "  done in ", Duration(p.seconds));
    } else if (p.total_bytes > 0 && p.bytes_done > 0) {
      absl::StrAppend(&line, "  ETA ",
                      Duration((p.total_bytes - p.bytes_done) / (p.bytes_done / s)));
    }
    if (tty_) {
      std::fprintf(stderr, "\r%s\x1b[K%s", line.c_str(), final ? "\n" : "");
      open_line_ = !final;
    } else {
      std::fprintf(stderr, "preprocess: %s\n", line.c_str());
    }
    std::fflush(stderr);
  }

  // Ends a line left open on the terminal, before an error message.
  void BreakLine() {
    if (open_line_) std::fputc('\n', stderr);
    open_line_ = false;
  }

 private:
  const bool enabled_;
  const bool tty_;
  double last_ = 0;
  bool open_line_ = false;
};

// ------------------------------------------------------------------------------------------
// preprocess

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

struct PreprocessCommand {
  data::PreprocessOptions options;
  std::string vocab_file;
  std::string merge_file;
  OutputFormat format = OutputFormat::kTable;
  bool quiet = false;
  std::vector<std::string> notices;
};

absl::StatusOr<PreprocessCommand> ParsePreprocess(const ParsedFlags& f) {
  PreprocessCommand c;
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
  c.options.input = f.Get("input");
  c.options.output_prefix = f.Get("output-prefix");
  c.vocab_file = f.Get("vocab-file");
  c.merge_file = f.Get("merge-file");
  if (c.options.input.empty()) return absl::InvalidArgumentError("--input is required");
  if (c.options.output_prefix.empty()) {
    return absl::InvalidArgumentError("--output-prefix is required");
  }
  if (c.vocab_file.empty() || c.merge_file.empty()) {
    return absl::InvalidArgumentError(
        "--vocab-file and --merge-file are required (GPT-2's gpt2-vocab.json and "
        "gpt2-merges.txt; deploy/setup.sh puts them in ~/.cache/mt/assets)");
  }
  if (f.Has("json-keys")) c.options.json_keys = f.List("json-keys");
  const std::string input_format = f.Get("input-format", "auto");
  if (input_format == "auto") {
    c.options.input_format = PreprocessInputFormat::kAuto;
  } else if (input_format == "jsonl" || input_format == "json") {
    c.options.input_format = PreprocessInputFormat::kJsonl;
  } else if (input_format == "text" || input_format == "txt") {
    c.options.input_format = PreprocessInputFormat::kText;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--input-format ", input_format, ": choose auto, jsonl or text"));
  }
  c.options.append_eod = f.Has("append-eod");
  const int64_t cpus = std::max(1u, std::thread::hardware_concurrency());
  MT_ASSIGN_OR_RETURN(int64_t workers, IntFlag(f, "workers", cpus, 1, 1024));
  c.options.workers = static_cast<int>(workers);
  const std::string on_error = f.Get("on-error", "fail");
  if (on_error == "fail") {
    c.options.on_bad_line = BadLinePolicy::kFail;
  } else if (on_error == "skip") {
    c.options.on_bad_line = BadLinePolicy::kSkip;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--on-error ", on_error, ": choose fail or skip"));
  }
  MT_ASSIGN_OR_RETURN(c.format, FormatFlag(f));
  c.quiet = f.Has("quiet");

  // Megatron's flags that mean nothing here.
  MT_ASSIGN_OR_RETURN(int64_t partitions, IntFlag(f, "partitions", 1, 1, 1 << 20));
  if (partitions > 1) {
    c.notices.push_back(absl::StrCat(
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
    c.notices.push_back("--dataset-impl mmap: the only format; nothing to choose");
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
      c.notices.push_back(absl::StrCat(
          "--", name, " ", f.Get(name), " ignored",
          std::string(name) == "log-interval" ? " (progress is shown on stderr)" : ""));
    }
  }
  if (f.Has("keep-newlines")) {
    c.notices.push_back(
        "--keep-newlines ignored: it matters only with --split-sentences; "
        "newlines are always kept");
  }
  if (f.Has("keep-sequential-samples")) {
    c.notices.push_back("--keep-sequential-samples ignored: input order is always kept");
  }
  if (f.Has("lang")) c.notices.push_back("--lang ignored: it matters only with --split-sentences");
  c.options.cancel = &g_cancel;
  return c;
}

Value PreprocessJson(const PreprocessCommand& c, const data::PreprocessResult& r) {
  Value v = Value::Object();
  v.Set("input", Value::Str(c.options.input))
      .Set("format", Value::Str(data::InputFormatName(r.format)))
      .Set("input_bytes", Value::Int(r.input_bytes))
      .Set("lines", Value::Int(r.lines))
      .Set("documents", Value::Int(r.documents))
      .Set("tokens", Value::Int(r.tokens))
      .Set("blank_lines", Value::Int(r.blank_lines))
      .Set("bad_lines", Value::Int(r.bad_lines));
  Value bad = Value::Array();
  for (const auto& b : r.bad_line_examples) {
    bad.Push(Value::Object().Set("line", Value::Int(b.line)).Set("reason", Value::Str(b.reason)));
  }
  v.Set("bad_line_examples", std::move(bad))
      .Set("seconds", Value::Num(r.seconds, 3))
      .Set("tokens_per_second", Value::Num(r.seconds > 0 ? r.tokens / r.seconds : 0, 0))
      .Set("documents_per_second", Value::Num(r.seconds > 0 ? r.documents / r.seconds : 0, 1))
      .Set("bytes_per_second", Value::Num(r.seconds > 0 ? r.input_bytes / r.seconds : 0, 0))
      .Set("workers", Value::Int(c.options.workers))
      .Set("append_eod", Value::Bool(c.options.append_eod))
      .Set("dtype", Value::Str(data::DTypeName(r.dtype)));
  Value outputs = Value::Array();
  for (const auto& o : r.outputs) {
    outputs.Push(Value::Object()
                     .Set("key", Value::Str(o.key))
                     .Set("prefix", Value::Str(o.prefix))
                     .Set("bin", Value::Str(data::DataPath(o.prefix)))
                     .Set("idx", Value::Str(data::IndexPath(o.prefix)))
                     .Set("documents", Value::Int(o.documents))
                     .Set("sequences", Value::Int(o.sequences))
                     .Set("tokens", Value::Int(o.tokens)));
  }
  v.Set("outputs", std::move(outputs));
  return v;
}

int RunPreprocess(const std::vector<std::string>& args) {
  auto flags = ParseFlags(args, PreprocessFlags(), "preprocess");
  if (!flags.ok()) return UsageError(flags.status());
  if (flags->Has("help")) {
    std::cout << kPreprocessUsage;
    return kExitOk;
  }
  auto parsed = ParsePreprocess(*flags);
  if (!parsed.ok()) return UsageError(parsed.status());
  PreprocessCommand& c = *parsed;
  for (const auto& n : c.notices) Notice(n);
  auto tok = Gpt2BpeTokenizer::Create(c.vocab_file, c.merge_file);
  if (!tok.ok()) return Fail(tok.status());

  ProgressPrinter printer(!c.quiet);
  absl::StatusOr<data::PreprocessResult> result;
  {
    ScopedCancelOnSignal signals;
    data::PreprocessProgress last;
    c.options.on_progress = [&](const data::PreprocessProgress& p) {
      last = p;
      printer.Update(p, false);
    };
    result = data::Preprocess(c.options, **tok);
    if (result.ok()) printer.Update(last, /*final=*/true);
  }
  if (!result.ok()) {
    printer.BreakLine();
    if (absl::IsCancelled(result.status())) {
      const int sig = g_signal.load();
      std::fprintf(
          stderr,
          "mtctl: interrupted (%s); the partial output was removed, no %s.idx was "
          "written\n",
          sig != 0 ? strsignal(sig) : "cancelled",
          data::PreprocessOutputPrefix(c.options.output_prefix, c.options.json_keys[0]).c_str());
      return 128 + (sig != 0 ? sig : SIGINT);
    }
    if (absl::IsInvalidArgument(result.status()) &&
        absl::StartsWith(result.status().message(), "line ")) {
      std::fprintf(stderr,
                   "mtctl: %s: %s\n  nothing was written; --on-error skip skips such lines\n",
                   c.options.input.c_str(), std::string(result.status().message()).c_str());
      return kExitUsage;
    }
    return Fail(result.status());
  }
  const data::PreprocessResult& r = *result;
  for (const auto& b : r.bad_line_examples) {
    Notice(absl::StrCat("skipped line ", b.line, ": ", b.reason));
  }
  if (r.bad_lines > static_cast<int64_t>(r.bad_line_examples.size())) {
    Notice(absl::StrCat("... and ", r.bad_lines - static_cast<int64_t>(r.bad_line_examples.size()),
                        " more bad lines skipped"));
  }
  if (c.format != OutputFormat::kTable) {
    PreprocessJson(c, r).Print(c.format);
    return kExitOk;
  }
  const double s = std::max(r.seconds, 1e-9);
  std::vector<std::vector<std::string>> rows;
  rows.push_back(
      {"input", absl::StrCat(c.options.input, "  (", data::InputFormatName(r.format), ", ",
                             Bytes(r.input_bytes), ", ", Thousands(r.lines), " lines)")});
  std::string docs = Thousands(r.documents);
  if (r.blank_lines > 0 || r.bad_lines > 0) {
    absl::StrAppend(&docs, "  (skipped: ", Thousands(r.blank_lines), " blank lines, ",
                    Thousands(r.bad_lines), " bad lines)");
  }
  rows.push_back({"documents", docs});
  rows.push_back(
      {"tokens",
       absl::StrCat(Thousands(r.tokens), "  (", data::DTypeName(r.dtype),
                    c.options.append_eod ? ", each document ends with eod" : ", no eod", ")")});
  for (const auto& o : r.outputs) {
    rows.push_back({"output", absl::StrCat(o.prefix, ".{bin,idx}  ", Thousands(o.documents),
                                           " documents, ", Thousands(o.tokens), " tokens")});
  }
  rows.push_back({"time", absl::StrFormat("%.2f s  (%s docs/s, %.1f MB/s, %s tokens/s, %d workers)",
                                          r.seconds, Rate(r.documents / s), r.input_bytes / s / 1e6,
                                          Rate(r.tokens / s), c.options.workers)});
  for (const auto& row : rows) std::cout << absl::StrFormat("%-11s %s\n", row[0], row[1]);
  return kExitOk;
}

// ------------------------------------------------------------------------------------------
// inspect

std::string StripDatasetSuffix(std::string p) {
  if (absl::EndsWith(p, ".bin") || absl::EndsWith(p, ".idx")) p.resize(p.size() - 4);
  return p;
}

// At most max_chars bytes of s, cut at a UTF-8 character boundary.
std::string Truncate(const std::string& s, int64_t max_chars, bool* truncated) {
  *truncated = max_chars > 0 && static_cast<int64_t>(s.size()) > max_chars;
  if (!*truncated) return s;
  size_t n = static_cast<size_t>(max_chars);
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

struct LengthStats {
  int64_t count = 0, min = 0, max = 0, sum = 0;
  void Add(int64_t v) {
    if (count == 0 || v < min) min = v;
    if (count == 0 || v > max) max = v;
    sum += v;
    ++count;
  }
  double mean() const { return count > 0 ? static_cast<double>(sum) / count : 0; }
  Value Json() const {
    return Value::Object()
        .Set("min", Value::Int(min))
        .Set("mean", Value::Num(mean()))
        .Set("max", Value::Int(max));
  }
  std::string Text() const {
    return absl::StrFormat("min %s  mean %.1f  max %s", Thousands(min), mean(), Thousands(max));
  }
};

absl::StatusOr<std::vector<int32_t>> DocumentTokens(const data::IndexedDataset& ds, int64_t d) {
  std::vector<int32_t> out;
  for (int64_t s = ds.document_index(d); s < ds.document_index(d + 1); ++s) {
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>(ds.sequence_length(s)));
    MT_RETURN_IF_ERROR(ds.Read(s, 0, ds.sequence_length(s), out.data() + at));
  }
  return out;
}

int RunInspect(const std::vector<std::string>& args) {
  static const std::vector<FlagSpec> specs = {
      {"help", FlagKind::kBool},        {"documents", FlagKind::kValue},
      {"max-chars", FlagKind::kValue},  {"top", FlagKind::kValue},
      {"vocab-file", FlagKind::kValue}, {"merge-file", FlagKind::kValue},
      {"dump-jsonl", FlagKind::kBool},  {"o", FlagKind::kValue},
  };
  auto f = ParseFlags(args, specs, "inspect");
  if (!f.ok()) return UsageError(f.status());
  if (f->Has("help")) {
    std::cout << kInspectUsage;
    return kExitOk;
  }
  if (f->positional.size() != 1) {
    return UsageError(absl::InvalidArgumentError(
        "inspect takes one dataset PREFIX (see mtctl data inspect --help)"));
  }
  auto format = FormatFlag(*f);
  auto n_docs = IntFlag(*f, "documents", 2, 0, int64_t{1} << 40);
  auto max_chars = IntFlag(*f, "max-chars", 300, 0, int64_t{1} << 40);
  auto top = IntFlag(*f, "top", 10, 0, 1 << 20);
  for (const absl::Status& s :
       {format.status(), n_docs.status(), max_chars.status(), top.status()}) {
    if (!s.ok()) return UsageError(s);
  }
  const std::string vocab = f->Get("vocab-file"), merges = f->Get("merge-file");
  if (vocab.empty() != merges.empty()) {
    return UsageError(absl::InvalidArgumentError("--vocab-file and --merge-file go together"));
  }
  const bool dump = f->Has("dump-jsonl");
  if (dump && vocab.empty()) {
    return UsageError(
        absl::InvalidArgumentError("--dump-jsonl needs --vocab-file and --merge-file"));
  }
  const std::string prefix = StripDatasetSuffix(f->positional[0]);
  struct stat st;
  if (::stat(data::IndexPath(prefix).c_str(), &st) != 0) {
    return Fail(absl::NotFoundError(
        absl::StrCat("no dataset ", prefix, " (", data::IndexPath(prefix), " does not exist)")));
  }
  const int64_t idx_bytes = st.st_size;
  auto ds_or = data::IndexedDataset::Create(prefix);
  if (!ds_or.ok()) return Fail(ds_or.status());
  const data::IndexedDataset& ds = **ds_or;
  std::unique_ptr<Gpt2BpeTokenizer> tok;
  if (!vocab.empty()) {
    auto t = Gpt2BpeTokenizer::Create(vocab, merges);
    if (!t.ok()) return Fail(t.status());
    tok = std::move(t).value();
  }

  if (dump) {
    std::string out;
    for (int64_t d = 0; d < ds.num_documents(); ++d) {
      auto ids = DocumentTokens(ds, d);
      if (!ids.ok()) return Fail(ids.status());
      if (!ids->empty() && ids->back() == tok->eod()) ids->pop_back();
      absl::StrAppend(&out, "{\"text\": ", Value::Quote(tok->Decode(*ids)), "}\n");
      if (out.size() > (1 << 20)) {
        std::fwrite(out.data(), 1, out.size(), stdout);
        out.clear();
      }
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return std::fflush(stdout) == 0 ? kExitOk : kExitFailed;
  }

  // Lengths.
  LengthStats seq, doc;
  for (int64_t s = 0; s < ds.num_sequences(); ++s) seq.Add(ds.sequence_length(s));
  int64_t empty_docs = 0, eod_docs = 0;
  const int32_t eod = tok ? tok->eod() : 50256;
  for (int64_t d = 0; d < ds.num_documents(); ++d) {
    int64_t len = 0;
    const int64_t first = ds.document_index(d), last = ds.document_index(d + 1);
    for (int64_t s = first; s < last; ++s) len += ds.sequence_length(s);
    doc.Add(len);
    if (len == 0) ++empty_docs;
    // The document's last token: the last token of its last non-empty sequence.
    for (int64_t s = last - 1; s >= first; --s) {
      const int32_t n = ds.sequence_length(s);
      if (n == 0) continue;
      int32_t t = -1;
      if (ds.Read(s, n - 1, 1, &t).ok() && t == eod) ++eod_docs;
      break;
    }
  }

  // Token histogram.
  std::vector<int64_t> small_counts;
  absl::flat_hash_map<int64_t, int64_t> counts;
  int64_t max_id = -1, min_id = -1;
  if (ds.dtype() == data::DType::kUInt16 || ds.dtype() == data::DType::kUInt8) {
    small_counts.assign(65536, 0);
    const absl::string_view raw = ds.RawData();
    if (ds.dtype() == data::DType::kUInt16) {
      const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
      for (size_t i = 0; i + 1 < raw.size(); i += 2) ++small_counts[p[i] | (p[i + 1] << 8)];
    } else {
      for (unsigned char c : raw) ++small_counts[c];
    }
    for (size_t id = 0; id < small_counts.size(); ++id) {
      if (small_counts[id] > 0) counts[static_cast<int64_t>(id)] = small_counts[id];
    }
  } else {
    std::vector<int32_t> buf;
    for (int64_t s = 0; s < ds.num_sequences(); ++s) {
      buf.resize(static_cast<size_t>(ds.sequence_length(s)));
      absl::Status rs = ds.Read(s, 0, ds.sequence_length(s), buf.data());
      if (!rs.ok()) return Fail(rs);
      for (int32_t t : buf) ++counts[t];
    }
  }
  bool first_id = true;
  for (const auto& [id, n] : counts) {
    if (first_id || id > max_id) max_id = id;
    if (first_id || id < min_id) min_id = id;
    first_id = false;
  }
  std::vector<std::pair<int64_t, int64_t>> ranked(counts.begin(), counts.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (static_cast<int64_t>(ranked.size()) > *top) ranked.resize(static_cast<size_t>(*top));

  // Sample documents.
  struct Sample {
    int64_t document;
    int64_t tokens;
    std::string text;  // decoded, or ids
    bool truncated;
  };
  std::vector<Sample> samples;
  for (int64_t d = 0; d < std::min<int64_t>(*n_docs, ds.num_documents()); ++d) {
    auto ids = DocumentTokens(ds, d);
    if (!ids.ok()) return Fail(ids.status());
    Sample s{d, static_cast<int64_t>(ids->size()), "", false};
    if (tok) {
      s.text = Truncate(tok->Decode(*ids), *max_chars, &s.truncated);
    } else {
      const size_t shown = *max_chars > 0 ? std::min<size_t>(ids->size(), 32) : ids->size();
      s.truncated = shown < ids->size();
      s.text = absl::StrJoin(ids->begin(), ids->begin() + static_cast<ptrdiff_t>(shown), " ");
    }
    samples.push_back(std::move(s));
  }

  const double total = std::max<double>(1, static_cast<double>(ds.num_tokens()));
  if (*format != OutputFormat::kTable) {
    Value v = Value::Object();
    v.Set("prefix", Value::Str(prefix))
        .Set("dtype", Value::Str(data::DTypeName(ds.dtype())))
        .Set("bin_bytes", Value::Int(static_cast<int64_t>(ds.data_bytes())))
        .Set("idx_bytes", Value::Int(idx_bytes))
        .Set("documents", Value::Int(ds.num_documents()))
        .Set("sequences", Value::Int(ds.num_sequences()))
        .Set("empty_documents", Value::Int(empty_docs))
        .Set("tokens", Value::Int(ds.num_tokens()))
        .Set("sequence_length", seq.Json())
        .Set("document_length", doc.Json())
        .Set("distinct_tokens", Value::Int(static_cast<int64_t>(counts.size())))
        .Set("min_token_id", counts.empty() ? Value::Null() : Value::Int(min_id))
        .Set("max_token_id", counts.empty() ? Value::Null() : Value::Int(max_id))
        .Set("eod", Value::Object()
                        .Set("id", Value::Int(eod))
                        .Set("documents_ending_with_eod", Value::Int(eod_docs)));
    Value top_ids = Value::Array();
    for (const auto& [id, n] : ranked) {
      Value t = Value::Object()
                    .Set("id", Value::Int(id))
                    .Set("count", Value::Int(n))
                    .Set("share", Value::Num(n / total, 6));
      if (tok) t.Set("text", Value::Str(tok->TokenBytes(static_cast<int32_t>(id))));
      top_ids.Push(std::move(t));
    }
    v.Set("top_tokens", std::move(top_ids));
    Value docs = Value::Array();
    for (const Sample& s : samples) {
      docs.Push(Value::Object()
                    .Set("document", Value::Int(s.document))
                    .Set("tokens", Value::Int(s.tokens))
                    .Set(tok ? "text" : "ids", Value::Str(s.text))
                    .Set("truncated", Value::Bool(s.truncated)));
    }
    v.Set("samples", std::move(docs));
    v.Print(*format);
    return kExitOk;
  }

  std::string o;
  auto row = [&o](absl::string_view k, const std::string& v) {
    absl::StrAppend(&o, absl::StrFormat("%-16s %s\n", k, v));
  };
  row("dataset",
      absl::StrCat(prefix, "  (.bin ", Bytes(ds.data_bytes()), ", .idx ", Bytes(idx_bytes), ")"));
  row("dtype", std::string(data::DTypeName(ds.dtype())));
  row("documents",
      absl::StrCat(Thousands(ds.num_documents()),
                   empty_docs > 0 ? absl::StrCat("  (", Thousands(empty_docs), " empty)") : ""));
  row("sequences", Thousands(ds.num_sequences()));
  row("tokens", Thousands(ds.num_tokens()));
  row("sequence length", seq.Text());
  if (ds.num_sequences() != ds.num_documents()) row("document length", doc.Text());
  row("distinct ids",
      absl::StrCat(Thousands(static_cast<int64_t>(counts.size())),
                   counts.empty() ? "" : absl::StrCat("  (ids ", min_id, "..", max_id, ")")));
  row("end of document",
      absl::StrCat(Thousands(eod_docs), " of ", Thousands(ds.num_documents()),
                   " documents end with ", eod, tok ? "" : " (GPT-2's <|endoftext|>)"));
  if (!ranked.empty()) {
    absl::StrAppend(&o, "top token ids\n");
    std::vector<std::vector<std::string>> rows;
    for (const auto& [id, n] : ranked) {
      std::vector<std::string> r = {absl::StrCat(id), Thousands(n),
                                    absl::StrFormat("%.2f%%", 100.0 * n / total)};
      if (tok) r.push_back(Value::Quote(tok->TokenBytes(static_cast<int32_t>(id))));
      rows.push_back(std::move(r));
    }
    std::vector<std::string> header = {"  id", "count", "share"};
    if (tok) header.push_back("text");
    for (auto& r : rows) r[0] = "  " + r[0];
    absl::StrAppend(&o, FormatTable(header, rows));
  }
  for (const Sample& s : samples) {
    absl::StrAppend(&o, "document ", s.document, " (", Thousands(s.tokens), " tokens)",
                    s.truncated ? ", first part:" : ":", "\n  ",
                    tok ? Value::Quote(s.text) : s.text, s.truncated ? " ..." : "", "\n");
  }
  std::cout << o;
  return kExitOk;
}

// ------------------------------------------------------------------------------------------
// merge

// Megatron's merge_datasets.py: every PREFIX with both .bin and .idx in `dir`, sorted; a file
// whose partner is missing is an error.
absl::StatusOr<std::vector<std::string>> PrefixesInDirectory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return absl::NotFoundError(absl::StrCat("--input ", dir, ": ", std::strerror(errno)));
  }
  std::set<std::string> bins, idxs;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    struct stat st;
    const std::string path = absl::StrCat(dir, "/", n);
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (absl::EndsWith(n, ".bin")) bins.insert(path.substr(0, path.size() - 4));
    if (absl::EndsWith(n, ".idx")) idxs.insert(path.substr(0, path.size() - 4));
  }
  ::closedir(d);
  for (const std::string& p : bins) {
    if (idxs.count(p) == 0) return absl::InvalidArgumentError(absl::StrCat(p, ".bin has no .idx"));
  }
  for (const std::string& p : idxs) {
    if (bins.count(p) == 0) return absl::InvalidArgumentError(absl::StrCat(p, ".idx has no .bin"));
  }
  if (bins.empty()) {
    return absl::NotFoundError(absl::StrCat("--input ", dir, ": no .bin/.idx pairs in it"));
  }
  return std::vector<std::string>(bins.begin(), bins.end());
}

int RunMerge(const std::vector<std::string>& args) {
  static const std::vector<FlagSpec> specs = {
      {"help", FlagKind::kBool},
      {"input", FlagKind::kList},
      {"output-prefix", FlagKind::kValue},
      {"multimodal", FlagKind::kBool},
      {"o", FlagKind::kValue},
  };
  auto f = ParseFlags(args, specs, "merge");
  if (!f.ok()) return UsageError(f.status());
  if (f->Has("help")) {
    std::cout << kMergeUsage;
    return kExitOk;
  }
  auto format = FormatFlag(*f);
  if (!format.ok()) return UsageError(format.status());
  if (f->Has("multimodal")) {
    return UsageError(absl::InvalidArgumentError(
        "--multimodal is not supported (only text datasets, without per-sequence modes)"));
  }
  std::vector<std::string> inputs = f->List("input");
  // `merge --input a b --output-prefix c` and `merge --output-prefix c a b` both work.
  for (const auto& p : f->positional) inputs.push_back(p);
  const std::string output = StripDatasetSuffix(f->Get("output-prefix"));
  if (inputs.empty() || output.empty()) {
    return UsageError(absl::InvalidArgumentError(
        "merge needs --input (a directory or prefixes) and --output-prefix"));
  }
  std::vector<std::string> prefixes;
  for (const std::string& in : inputs) {
    struct stat st;
    std::string dir = in;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      auto found = PrefixesInDirectory(dir);
      if (!found.ok()) return Fail(found.status());
      prefixes.insert(prefixes.end(), found->begin(), found->end());
    } else {
      const std::string p = StripDatasetSuffix(in);
      if (::stat(data::IndexPath(p).c_str(), &st) != 0) {
        return Fail(absl::NotFoundError(absl::StrCat(
            "--input ", in, ": neither a directory nor a dataset (no ", data::IndexPath(p), ")")));
      }
      prefixes.push_back(p);
    }
  }
  for (const std::string& p : prefixes) {
    if (p == output) {
      return UsageError(absl::InvalidArgumentError(
          absl::StrCat("--output-prefix ", output, " is also an input")));
    }
  }
  absl::Status s = data::MergeIndexedDatasets(prefixes, output);
  if (!s.ok()) return Fail(s);
  auto merged = data::IndexedDataset::Create(output);
  if (!merged.ok()) return Fail(merged.status());
  if (*format != OutputFormat::kTable) {
    Value in = Value::Array();
    for (const auto& p : prefixes) in.Push(Value::Str(p));
    Value::Object()
        .Set("inputs", std::move(in))
        .Set("output", Value::Str(output))
        .Set("dtype", Value::Str(data::DTypeName((*merged)->dtype())))
        .Set("documents", Value::Int((*merged)->num_documents()))
        .Set("sequences", Value::Int((*merged)->num_sequences()))
        .Set("tokens", Value::Int((*merged)->num_tokens()))
        .Print(*format);
    return kExitOk;
  }
  std::cout << absl::StrFormat("%-10s %s\n", "inputs",
                               absl::StrCat(prefixes.size(), ": ", absl::StrJoin(prefixes, ", ")));
  std::cout << absl::StrFormat("%-10s %s.{bin,idx}  (%s)\n", "output", output,
                               data::DTypeName((*merged)->dtype()));
  std::cout << absl::StrFormat("%-10s %s\n", "documents", Thousands((*merged)->num_documents()));
  std::cout << absl::StrFormat("%-10s %s\n", "tokens", Thousands((*merged)->num_tokens()));
  return kExitOk;
}

}  // namespace

int RunData(const std::vector<std::string>& args, const GlobalOptions& /*options*/) {
  // Global flags given before the subcommand (`mtctl -o json data inspect X`) go to it.
  std::vector<std::string> leading;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h" || a == "-help") break;
    if (!IsFlag(a)) break;
    if (a == "--coordinator" || a == "--token-file" || a == "--token_file") {
      ++i;  // connection flags mean nothing for local data work
      continue;
    }
    if (absl::StartsWith(a, "--coordinator=") || absl::StartsWith(a, "--token-file=") ||
        absl::StartsWith(a, "--token_file=")) {
      continue;
    }
    // The rest (-o FORMAT, or a mistake) is for the subcommand to accept or reject.
    leading.push_back(a);
    if ((a == "-o" || a == "--output") && i + 1 < args.size()) leading.push_back(args[++i]);
  }
  if (i >= args.size() || args[i] == "--help" || args[i] == "-h" || args[i] == "-help") {
    std::cout << kDataUsage;
    return i >= args.size() ? kExitUsage : kExitOk;
  }
  const std::string& sub = args[i];
  std::vector<std::string> rest(args.begin() + static_cast<ptrdiff_t>(i) + 1, args.end());
  rest.insert(rest.end(), leading.begin(), leading.end());
  if (sub == "preprocess") return RunPreprocess(rest);
  if (sub == "inspect") return RunInspect(rest);
  if (sub == "merge") return RunMerge(rest);
  std::fprintf(stderr, "mtctl: unknown data subcommand '%s'\n\n%s", sub.c_str(), kDataUsage);
  return kExitUsage;
}

}  // namespace mt::client
