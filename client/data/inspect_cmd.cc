// mtctl data inspect PREFIX: counts, lengths, token histogram and sample documents of an
// indexed dataset, or (--dump-jsonl) every document decoded back to JSON lines.
#include <sys/stat.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/common.h"
#include "client/data/data_verbs.h"
#include "client/data/flags.h"
#include "client/data/inspect_stats.h"
#include "client/format.h"
#include "client/output.h"
#include "common/data/indexed_dataset.h"
#include "common/tokenizer/gpt2_bpe_tokenizer.h"

namespace mt::client::data_cli {
namespace {

using tokenizer::Gpt2BpeTokenizer;

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

struct InspectCommand {
  std::string prefix;
  OutputFormat format = OutputFormat::kTable;
  int64_t documents = 2;
  int64_t max_chars = 300;
  int64_t top = 10;
  std::string vocab_file, merge_file;  // both or neither
  bool dump_jsonl = false;
};

absl::StatusOr<InspectCommand> ParseInspect(const ParsedFlags& f) {
  if (f.positional.size() != 1) {
    return absl::InvalidArgumentError(
        "inspect takes one dataset PREFIX (see mtctl data inspect --help)");
  }
  InspectCommand c;
  auto format = FormatFlag(f);
  auto n_docs = IntFlag(f, "documents", 2, 0, int64_t{1} << 40);
  auto max_chars = IntFlag(f, "max-chars", 300, 0, int64_t{1} << 40);
  auto top = IntFlag(f, "top", 10, 0, 1 << 20);
  for (const absl::Status& s :
       {format.status(), n_docs.status(), max_chars.status(), top.status()}) {
    if (!s.ok()) return s;
  }
  c.format = *format;
  c.documents = *n_docs;
  c.max_chars = *max_chars;
  c.top = *top;
  c.vocab_file = f.Get("vocab-file");
  c.merge_file = f.Get("merge-file");
  if (c.vocab_file.empty() != c.merge_file.empty()) {
    return absl::InvalidArgumentError("--vocab-file and --merge-file go together");
  }
  c.dump_jsonl = f.Has("dump-jsonl");
  if (c.dump_jsonl && c.vocab_file.empty()) {
    return absl::InvalidArgumentError("--dump-jsonl needs --vocab-file and --merge-file");
  }
  c.prefix = StripDatasetSuffix(f.positional[0]);
  return c;
}

// Every document as one {"text": ...} line, a final end-of-document token dropped.
int DumpJsonl(const data::IndexedDataset& ds, const Gpt2BpeTokenizer& tok) {
  std::string out;
  for (int64_t d = 0; d < ds.num_documents(); ++d) {
    auto ids = DocumentTokens(ds, d);
    if (!ids.ok()) return Fail(ids.status());
    if (!ids->empty() && ids->back() == tok.eod()) ids->pop_back();
    absl::StrAppend(&out, "{\"text\": ", JsonString(tok.Decode(*ids)), "}\n");
    if (out.size() > (1 << 20)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? kExitOk : kExitFailed;
}

// Everything inspect found about one dataset.
struct Report {
  const InspectCommand& command;
  const data::IndexedDataset& ds;
  const Gpt2BpeTokenizer* tok;  // null without a vocabulary
  int64_t idx_bytes;
  DatasetStats stats;
  std::vector<SampleDocument> samples;

  double share(int64_t n) const {
    return n / std::max<double>(1, static_cast<double>(ds.num_tokens()));
  }
};

JsonValue Lengths(const LengthStats& l) {
  return JsonValue::Object()
      .Set("min", JsonValue::Int(l.min))
      .Set("mean", JsonValue::Num(l.mean()))
      .Set("max", JsonValue::Int(l.max));
}

JsonValue ReportJson(const Report& r) {
  const DatasetStats& st = r.stats;
  const bool any = st.distinct_tokens > 0;
  JsonValue v = JsonValue::Object();
  v.Set("prefix", JsonValue::Str(r.command.prefix))
      .Set("dtype", JsonValue::Str(data::DTypeName(r.ds.dtype())))
      .Set("bin_bytes", JsonValue::Int(static_cast<int64_t>(r.ds.data_bytes())))
      .Set("idx_bytes", JsonValue::Int(r.idx_bytes))
      .Set("documents", JsonValue::Int(r.ds.num_documents()))
      .Set("sequences", JsonValue::Int(r.ds.num_sequences()))
      .Set("empty_documents", JsonValue::Int(st.empty_documents))
      .Set("tokens", JsonValue::Int(r.ds.num_tokens()))
      .Set("sequence_length", Lengths(st.sequences))
      .Set("document_length", Lengths(st.documents))
      .Set("distinct_tokens", JsonValue::Int(st.distinct_tokens))
      .Set("min_token_id", any ? JsonValue::Int(st.min_id) : JsonValue::Null())
      .Set("max_token_id", any ? JsonValue::Int(st.max_id) : JsonValue::Null())
      .Set("eod", JsonValue::Object()
                      .Set("id", JsonValue::Int(st.eod))
                      .Set("documents_ending_with_eod", JsonValue::Int(st.eod_documents)));
  JsonValue top_ids = JsonValue::Array();
  for (const auto& [id, n] : st.top_tokens) {
    JsonValue t = JsonValue::Object()
                      .Set("id", JsonValue::Int(id))
                      .Set("count", JsonValue::Int(n))
                      .Set("share", JsonValue::Num(r.share(n), 6));
    if (r.tok) t.Set("text", JsonValue::Str(r.tok->TokenBytes(static_cast<int32_t>(id))));
    top_ids.Push(std::move(t));
  }
  v.Set("top_tokens", std::move(top_ids));
  JsonValue docs = JsonValue::Array();
  for (const SampleDocument& s : r.samples) {
    docs.Push(JsonValue::Object()
                  .Set("document", JsonValue::Int(s.document))
                  .Set("tokens", JsonValue::Int(s.tokens))
                  .Set(r.tok ? "text" : "ids", JsonValue::Str(s.text))
                  .Set("truncated", JsonValue::Bool(s.truncated)));
  }
  v.Set("samples", std::move(docs));
  return v;
}

std::string TopTokensTable(const Report& r) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& [id, n] : r.stats.top_tokens) {
    std::vector<std::string> row = {absl::StrCat("  ", id), Thousands(n),
                                    absl::StrFormat("%.2f%%", 100.0 * r.share(n))};
    if (r.tok) row.push_back(JsonString(r.tok->TokenBytes(static_cast<int32_t>(id))));
    rows.push_back(std::move(row));
  }
  std::vector<std::string> header = {"  id", "count", "share"};
  if (r.tok) header.push_back("text");
  return FormatTable(header, rows);
}

std::string ReportText(const Report& r) {
  const DatasetStats& st = r.stats;
  const data::IndexedDataset& ds = r.ds;
  std::string o;
  auto row = [&o](absl::string_view k, const std::string& v) {
    absl::StrAppend(&o, absl::StrFormat("%-16s %s\n", k, v));
  };
  row("dataset", absl::StrCat(r.command.prefix, "  (.bin ", DecimalBytes(ds.data_bytes()),
                              ", .idx ", DecimalBytes(r.idx_bytes), ")"));
  row("dtype", std::string(data::DTypeName(ds.dtype())));
  row("documents", absl::StrCat(Thousands(ds.num_documents()),
                                st.empty_documents > 0
                                    ? absl::StrCat("  (", Thousands(st.empty_documents), " empty)")
                                    : ""));
  row("sequences", Thousands(ds.num_sequences()));
  row("tokens", Thousands(ds.num_tokens()));
  row("sequence length", st.sequences.Text());
  if (ds.num_sequences() != ds.num_documents()) row("document length", st.documents.Text());
  row("distinct ids",
      absl::StrCat(
          Thousands(st.distinct_tokens),
          st.distinct_tokens == 0 ? "" : absl::StrCat("  (ids ", st.min_id, "..", st.max_id, ")")));
  row("end of document",
      absl::StrCat(Thousands(st.eod_documents), " of ", Thousands(ds.num_documents()),
                   " documents end with ", st.eod, r.tok ? "" : " (GPT-2's <|endoftext|>)"));
  if (!st.top_tokens.empty()) absl::StrAppend(&o, "top token ids\n", TopTokensTable(r));
  for (const SampleDocument& s : r.samples) {
    absl::StrAppend(&o, "document ", s.document, " (", Thousands(s.tokens), " tokens)",
                    s.truncated ? ", first part:" : ":", "\n  ",
                    r.tok ? JsonString(s.text) : s.text, s.truncated ? " ..." : "", "\n");
  }
  return o;
}

}  // namespace

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
  auto c = ParseInspect(*f);
  if (!c.ok()) return UsageError(c.status());
  struct stat st;
  if (::stat(data::IndexPath(c->prefix).c_str(), &st) != 0) {
    return Fail(absl::NotFoundError(absl::StrCat("no dataset ", c->prefix, " (",
                                                 data::IndexPath(c->prefix), " does not exist)")));
  }
  auto ds = data::IndexedDataset::Create(c->prefix);
  if (!ds.ok()) return Fail(ds.status());
  std::unique_ptr<Gpt2BpeTokenizer> tok;
  if (!c->vocab_file.empty()) {
    auto t = Gpt2BpeTokenizer::Create(c->vocab_file, c->merge_file);
    if (!t.ok()) return Fail(t.status());
    tok = std::move(t).value();
  }
  if (c->dump_jsonl) return DumpJsonl(**ds, *tok);

  auto stats = ComputeStats(**ds, tok ? tok->eod() : 50256, c->top);
  if (!stats.ok()) return Fail(stats.status());
  auto samples = SampleDocuments(**ds, tok.get(), c->documents, c->max_chars);
  if (!samples.ok()) return Fail(samples.status());
  const Report report{*c, **ds, tok.get(), st.st_size, std::move(*stats), std::move(*samples)};
  if (c->format != OutputFormat::kTable) {
    ReportJson(report).Print(c->format);
  } else {
    std::cout << ReportText(report);
  }
  return kExitOk;
}

}  // namespace mt::client::data_cli
