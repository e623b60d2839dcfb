// mtctl data preprocess: JSON lines or text -> GPT-2 BPE tokens -> Megatron .bin/.idx
// (Megatron-LM's tools/preprocess_data.py; flags in preprocess_flags.h).
//
// --partitions: Megatron splits the input round-robin into N files, preprocesses them in N
// processes and merges the results, which reorders documents. Here one streaming pass with
// --workers threads already uses every core with bounded memory and keeps the input order, so
// --partitions is accepted and ignored, with a notice.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/common.h"
#include "client/data/cancel_on_signal.h"
#include "client/data/data_verbs.h"
#include "client/data/flags.h"
#include "client/data/preprocess_flags.h"
#include "client/data/progress_printer.h"
#include "client/format.h"
#include "client/output.h"
#include "common/data/indexed_dataset.h"
#include "common/tokenizer/gpt2_bpe_tokenizer.h"

namespace mt::client::data_cli {
namespace {

JsonValue PreprocessJson(const PreprocessCommand& c, const data::PreprocessResult& r) {
  JsonValue v = JsonValue::Object();
  v.Set("input", JsonValue::Str(c.options.input))
      .Set("format", JsonValue::Str(data::InputFormatName(r.format)))
      .Set("input_bytes", JsonValue::Int(r.input_bytes))
      .Set("lines", JsonValue::Int(r.lines))
      .Set("documents", JsonValue::Int(r.documents))
      .Set("tokens", JsonValue::Int(r.tokens))
      .Set("blank_lines", JsonValue::Int(r.blank_lines))
      .Set("bad_lines", JsonValue::Int(r.bad_lines));
  JsonValue bad = JsonValue::Array();
  for (const auto& b : r.bad_line_examples) {
    bad.Push(JsonValue::Object()
                 .Set("line", JsonValue::Int(b.line))
                 .Set("reason", JsonValue::Str(b.reason)));
  }
  v.Set("bad_line_examples", std::move(bad))
      .Set("seconds", JsonValue::Num(r.seconds, 3))
      .Set("tokens_per_second", JsonValue::Num(r.seconds > 0 ? r.tokens / r.seconds : 0, 0))
      .Set("documents_per_second", JsonValue::Num(r.seconds > 0 ? r.documents / r.seconds : 0, 1))
      .Set("bytes_per_second", JsonValue::Num(r.seconds > 0 ? r.input_bytes / r.seconds : 0, 0))
      .Set("workers", JsonValue::Int(c.options.workers))
      .Set("append_eod", JsonValue::Bool(c.options.append_eod))
      .Set("dtype", JsonValue::Str(data::DTypeName(r.dtype)));
  JsonValue outputs = JsonValue::Array();
  for (const auto& o : r.outputs) {
    outputs.Push(JsonValue::Object()
                     .Set("key", JsonValue::Str(o.key))
                     .Set("prefix", JsonValue::Str(o.prefix))
                     .Set("bin", JsonValue::Str(data::DataPath(o.prefix)))
                     .Set("idx", JsonValue::Str(data::IndexPath(o.prefix)))
                     .Set("documents", JsonValue::Int(o.documents))
                     .Set("sequences", JsonValue::Int(o.sequences))
                     .Set("tokens", JsonValue::Int(o.tokens)));
  }
  v.Set("outputs", std::move(outputs));
  return v;
}

// Runs the preprocessing with progress on stderr; a signal cancels it.
absl::StatusOr<data::PreprocessResult> RunWithProgress(PreprocessCommand& c,
                                                       const tokenizer::Gpt2BpeTokenizer& tok,
                                                       ProgressPrinter* printer, int* signal) {
  ScopedCancelOnSignal signals;
  c.options.cancel = ScopedCancelOnSignal::cancelled();
  data::PreprocessProgress last;
  c.options.on_progress = [&](const data::PreprocessProgress& p) {
    last = p;
    printer->Update(p, false);
  };
  absl::StatusOr<data::PreprocessResult> result = data::Preprocess(c.options, tok);
  if (result.ok()) printer->Update(last, /*final=*/true);
  *signal = ScopedCancelOnSignal::signal_number();
  return result;
}

// The exit code of a failed run: 128+signal when interrupted, 2 for a bad input line.
int ReportFailure(const PreprocessCommand& c, const absl::Status& status, int sig) {
  if (absl::IsCancelled(status)) {
    std::fprintf(
        stderr,
        "mtctl: interrupted (%s); the partial output was removed, no %s.idx was "
        "written\n",
        sig != 0 ? strsignal(sig) : "cancelled",
        data::PreprocessOutputPrefix(c.options.output_prefix, c.options.json_keys[0]).c_str());
    return 128 + (sig != 0 ? sig : SIGINT);
  }
  if (absl::IsInvalidArgument(status) && absl::StartsWith(status.message(), "line ")) {
    std::fprintf(stderr, "mtctl: %s: %s\n  nothing was written; --on-error skip skips such lines\n",
                 c.options.input.c_str(), std::string(status.message()).c_str());
    return kExitUsage;
  }
  return Fail(status);
}

void NoteSkippedLines(const data::PreprocessResult& r) {
  for (const auto& b : r.bad_line_examples) {
    Notice(absl::StrCat("skipped line ", b.line, ": ", b.reason));
  }
  if (r.bad_lines > static_cast<int64_t>(r.bad_line_examples.size())) {
    Notice(absl::StrCat("... and ", r.bad_lines - static_cast<int64_t>(r.bad_line_examples.size()),
                        " more bad lines skipped"));
  }
}

void PrintTable(const PreprocessCommand& c, const data::PreprocessResult& r) {
  const double s = std::max(r.seconds, 1e-9);
  std::vector<std::vector<std::string>> rows;
  rows.push_back(
      {"input", absl::StrCat(c.options.input, "  (", data::InputFormatName(r.format), ", ",
                             DecimalBytes(r.input_bytes), ", ", Thousands(r.lines), " lines)")});
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
  rows.push_back(
      {"time", absl::StrFormat("%.2f s  (%s docs/s, %.1f MB/s, %s tokens/s, %d workers)", r.seconds,
                               ScaledCount(r.documents / s, "k"), r.input_bytes / s / 1e6,
                               ScaledCount(r.tokens / s, "k"), c.options.workers)});
  for (const auto& row : rows) std::cout << absl::StrFormat("%-11s %s\n", row[0], row[1]);
}

}  // namespace

int RunPreprocess(const std::vector<std::string>& args) {
  auto flags = ParseFlags(args, PreprocessFlags(), "preprocess");
  if (!flags.ok()) return UsageError(flags.status());
  if (flags->Has("help")) {
    std::cout << kPreprocessUsage;
    return kExitOk;
  }
  const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto parsed = ParsePreprocess(*flags, cpus);
  if (!parsed.ok()) return UsageError(parsed.status());
  PreprocessCommand& c = *parsed;
  for (const auto& n : c.notices) Notice(n);
  auto tok = tokenizer::Gpt2BpeTokenizer::Create(c.vocab_file, c.merge_file);
  if (!tok.ok()) return Fail(tok.status());

  ProgressPrinter printer(!c.quiet);
  int sig = 0;
  absl::StatusOr<data::PreprocessResult> result = RunWithProgress(c, **tok, &printer, &sig);
  if (!result.ok()) {
    printer.BreakLine();
    return ReportFailure(c, result.status(), sig);
  }
  NoteSkippedLines(*result);
  if (c.format != OutputFormat::kTable) {
    PreprocessJson(c, *result).Print(c.format);
  } else {
    PrintTable(c, *result);
  }
  return kExitOk;
}

}  // namespace mt::client::data_cli
