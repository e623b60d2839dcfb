// Megatron-LM's tools/preprocess_data.py as a library: a corpus of JSON lines (or plain text,
// one document per line) → GPT-2 BPE tokens → one indexed dataset (indexed_dataset.h) per JSON
// key, named `{output_prefix}_{key}_document.{bin,idx}` as Megatron names them.
//
//   PreprocessOptions o;
//   o.input = "corpus.jsonl";
//   o.output_prefix = "out/corpus";   // → out/corpus_text_document.{bin,idx}
//   o.append_eod = true;
//   o.workers = 4;
//   MT_ASSIGN_OR_RETURN(PreprocessResult r, Preprocess(o, *tokenizer));
//
// What a document is, as in preprocess_data.py without --split-sentences:
// - one input line is one document; for each key, its value is tokenised whole into one
//   sequence; with append_eod, eod() ends every document that has at least one token;
// - an empty string gives an empty document (no sequence, no eod), as in Megatron;
// - lines that are empty or only spaces/tabs/CR are skipped and counted (`blank_lines`);
//   Megatron would fail on them in JSON mode, but they are harmless and common at file ends;
// - a line ends at '\n'; one trailing '\r' is removed (CRLF files), and so is a UTF-8
//   byte-order mark at the start of the input.
//
// Bad lines (not valid UTF-8, not one JSON object, missing a key, a value that is not a string)
// are reported with their 1-based line number. With BadLinePolicy::kFail (the default) the
// first bad line in input order fails the run (InvalidArgument "line N: ..."), whatever the
// number of workers; with kSkip the whole line is skipped for every key (so the outputs of
// several keys stay aligned document by document) and counted.
//
// Streaming with bounded memory: a reader thread cuts the input into batches of whole lines
// (about `batch_bytes`), `workers` threads (each with its own tokenizer Clone) turn a batch into
// tokens, and the calling thread writes batches strictly in input order. At most
// `max_batches_in_flight` batches exist at once (read but not yet written), so memory is about
// (max_batches_in_flight × batch_bytes × ~5) whatever the input's size; a single line longer
// than `max_line_bytes` fails the run. The output is byte-identical for every number of workers.
//
// Outputs are written under temporary names and renamed into place only when the whole input
// succeeded (IndexedDatasetWriter): a failed, cancelled or killed run never leaves a final
// `.idx`. Cancel by setting *cancel (e.g. from a signal handler): the run stops within about
// 100 ms, removes its temporary files and returns Cancelled.
//
// Thread safety: Preprocess is reentrant; the tokenizer is only Clone()d. on_progress is called
// on the calling thread.
#ifndef MT_COMMON_DATA_PREPROCESS_H_
#define MT_COMMON_DATA_PREPROCESS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/data/indexed_dataset.h"
#include "common/tokenizer/gpt2_bpe_tokenizer.h"

namespace mt::data {

enum class PreprocessInputFormat {
  kAuto,   // jsonl when the first byte that is not whitespace is '{', else text
  kJsonl,  // one JSON object per line; the documents are the values of json_keys
  kText,   // one document per line, the line as is (without its newline)
};

enum class BadLinePolicy {
  kFail,  // the first bad line (in input order) fails the run
  kSkip,  // bad lines are skipped, counted and the first few reported
};

absl::string_view InputFormatName(PreprocessInputFormat format);  // "auto", "jsonl", "text"

struct PreprocessProgress {
  int64_t lines = 0;         // input lines written (documents, blank and bad lines)
  int64_t documents = 0;     // documents written (per output)
  int64_t tokens = 0;        // tokens written, all outputs together
  int64_t bad_lines = 0;     // skipped so far (kSkip)
  int64_t bytes_done = 0;    // input bytes whose documents are written
  int64_t total_bytes = -1;  // the input's size; -1 when unknown (a pipe)
  double seconds = 0;        // since the start
};

struct BadLine {
  int64_t line = 0;  // 1-based
  std::string reason;
};

struct PreprocessOptions {
  std::string input;  // a file, or "-" for standard input
  // Outputs are `{output_prefix}_{key}_document`; the directory must exist.
  std::string output_prefix;
  // JSON keys, one output each; with kText exactly one, which only names the output.
  std::vector<std::string> json_keys = {"text"};
  PreprocessInputFormat input_format = PreprocessInputFormat::kAuto;
  bool append_eod = false;  // Megatron's --append-eod
  int workers = 1;          // tokenizer threads (>= 1)
  BadLinePolicy on_bad_line = BadLinePolicy::kFail;
  size_t max_reported_bad_lines = 20;  // kept in PreprocessResult::bad_line_examples

  // Streaming knobs (the defaults suit every corpus; tests make them small).
  size_t batch_bytes = size_t{1} << 20;     // input bytes per unit of work
  size_t read_bytes = size_t{1} << 20;      // bytes per read(2)
  int max_batches_in_flight = 0;            // 0: 2 × workers + 2
  size_t max_line_bytes = size_t{1} << 30;  // a longer line fails the run

  // Optional: set to true to stop early (polled; may be written from a signal handler).
  const std::atomic<bool>* cancel = nullptr;
  // Optional: called on the calling thread after every batch written and once at the end.
  std::function<void(const PreprocessProgress&)> on_progress;
};

struct PreprocessOutput {
  std::string key;     // the JSON key
  std::string prefix;  // `{output_prefix}_{key}_document`
  int64_t documents = 0;
  int64_t sequences = 0;  // documents that are not empty
  int64_t tokens = 0;
};

struct PreprocessResult {
  PreprocessInputFormat format = PreprocessInputFormat::kJsonl;  // as detected
  DType dtype = DType::kUInt16;
  int64_t lines = 0;                       // every input line
  int64_t documents = 0;                   // written, in each output
  int64_t blank_lines = 0;                 // skipped without complaint
  int64_t bad_lines = 0;                   // skipped with kSkip
  std::vector<BadLine> bad_line_examples;  // the first max_reported_bad_lines of them
  int64_t input_bytes = 0;
  int64_t tokens = 0;  // all outputs together
  double seconds = 0;
  std::vector<PreprocessOutput> outputs;  // in json_keys order
};

// `{output_prefix}_{key}_document`, Megatron's name for one key's dataset.
std::string PreprocessOutputPrefix(absl::string_view output_prefix, absl::string_view key);

// Checks the options without touching the file system (InvalidArgument naming the field).
absl::Status ValidatePreprocessOptions(const PreprocessOptions& options);

// Runs the whole conversion; see the top of this file. Errors: InvalidArgument for bad input
// lines ("line N: ...") and options, NotFound when the input or output directory is missing,
// Cancelled when *cancel was set, others for I/O.
absl::StatusOr<PreprocessResult> Preprocess(const PreprocessOptions& options,
                                            const tokenizer::Gpt2BpeTokenizer& tokenizer);

namespace internal {
// Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF), as Python's codec
// (and so Megatron's reader) accepts. On failure *error_offset is the first bad byte.
bool IsValidUtf8(absl::string_view s, size_t* error_offset);
}  // namespace internal

}  // namespace mt::data

#endif  // MT_COMMON_DATA_PREPROCESS_H_
