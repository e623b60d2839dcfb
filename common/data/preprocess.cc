#include "common/data/preprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/errors.h"
#include "common/base/status_macros.h"
#include "common/tokenizer/json_lite.h"

namespace mt::data {

absl::string_view InputFormatName(PreprocessInputFormat format) {
  switch (format) {
    case PreprocessInputFormat::kAuto:
      return "auto";
    case PreprocessInputFormat::kJsonl:
      return "jsonl";
    case PreprocessInputFormat::kText:
      return "text";
  }
  return "?";
}

std::string PreprocessOutputPrefix(absl::string_view output_prefix, absl::string_view key) {
  return absl::StrCat(output_prefix, "_", key, "_document");
}

namespace internal {

bool IsValidUtf8(absl::string_view s, size_t* error_offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // ASCII runs, eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlong forms
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // no overlong forms
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      *error_offset = i;
      return false;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) {
      *error_offset = i;
      return false;
    }
    for (size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) {
        *error_offset = i;
        return false;
      }
    }
    i += len;
  }
  return true;
}

}  // namespace internal

namespace {

using tokenizer::Gpt2BpeTokenizer;

constexpr absl::string_view kBom = "\xEF\xBB\xBF";  // UTF-8 byte-order mark

bool IsBlank(absl::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\v' && c != '\f') return false;
  }
  return true;
}

// Whole input lines, cut by the reader.
struct Batch {
  int64_t seq = 0;
  std::string data;  // every line ends with '\n', except perhaps the input's last
  PreprocessInputFormat format = PreprocessInputFormat::kAuto;  // kAuto: all lines blank
};

// What a worker made of one batch.
struct BatchResult {
  int64_t bytes = 0;
  int64_t lines = 0;
  int64_t blank_lines = 0;
  std::vector<BadLine> bad;  // line numbers relative to the batch (0-based)
  // Per key: the tokens of every document back to back, and each document's length.
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<int32_t>> lengths;
};

std::string DescribeJsonError(const absl::Status& s, absl::string_view key) {
  if (absl::IsNotFound(s)) return absl::StrCat("no field \"", key, "\"");
  absl::string_view m = s.message();
  if (absl::EndsWith(m, "is not a string")) return std::string(m);
  // json_lite says "JSON error at byte B (line 1): what"; a record is one line.
  std::string text(m);
  const size_t pos = text.find(" (line 1)");
  if (pos != std::string::npos) text.erase(pos, 9);
  if (absl::StartsWith(text, "JSON error")) text.erase(0, 5);  // "error at byte ..."
  return absl::StrCat("not a valid JSON object: ", text);
}

void ProcessBatch(const Batch& batch, const Gpt2BpeTokenizer& tok, const PreprocessOptions& o,
                  BatchResult* r) {
  const size_t keys = o.json_keys.size();
  r->bytes = static_cast<int64_t>(batch.data.size());
  r->tokens.resize(keys);
  r->lengths.resize(keys);
  for (auto& t : r->tokens) t.reserve(batch.data.size() / 4 + 16);
  const absl::string_view data = batch.data;
  std::vector<std::string> texts(keys);
  size_t pos = 0;
  int64_t index = 0;
  auto bad = [&](int64_t line, std::string reason) {
    r->bad.push_back(BadLine{line, std::move(reason)});
  };
  while (pos < data.size()) {
    const char* nl =
        static_cast<const char*>(std::memchr(data.data() + pos, '\n', data.size() - pos));
    const size_t end = nl == nullptr ? data.size() : static_cast<size_t>(nl - data.data());
    absl::string_view line = data.substr(pos, end - pos);
    pos = nl == nullptr ? data.size() : end + 1;
    const int64_t i = index++;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (batch.seq == 0 && i == 0 && absl::StartsWith(line, kBom)) line.remove_prefix(3);
    if (IsBlank(line)) {
      ++r->blank_lines;
      continue;
    }
    // The first bad line fails the run; the rest of the batch would be thrown away.
    if (o.on_bad_line == BadLinePolicy::kFail && !r->bad.empty()) break;
    size_t offset = 0;
    if (!internal::IsValidUtf8(line, &offset)) {
      bad(i, absl::StrCat("not valid UTF-8 (byte ", offset + 1, " of the line)"));
      continue;
    }
    bool ok = true;
    if (batch.format == PreprocessInputFormat::kText) {
      texts[0].assign(line.data(), line.size());
    } else {
      for (size_t k = 0; k < keys && ok; ++k) {
        absl::StatusOr<std::string> v = tokenizer::ExtractJsonStringField(line, o.json_keys[k]);
        if (!v.ok()) {
          bad(i, DescribeJsonError(v.status(), o.json_keys[k]));
          ok = false;
        } else {
          texts[k] = *std::move(v);
        }
      }
    }
    if (!ok) continue;
    for (size_t k = 0; k < keys; ++k) {
      std::vector<int32_t>& t = r->tokens[k];
      const size_t before = t.size();
      tok.EncodeAppend(texts[k], &t);
      size_t n = t.size() - before;
      if (n > 0 && o.append_eod) {
        t.push_back(tok.eod());
        ++n;
      }
      if (n > static_cast<size_t>(INT32_MAX)) {
        // The index stores lengths as int32; drop what this line added and report it.
        for (size_t j = 0; j < k; ++j) {
          r->tokens[j].resize(r->tokens[j].size() - static_cast<size_t>(r->lengths[j].back()));
          r->lengths[j].pop_back();
        }
        t.resize(before);
        bad(i, absl::StrCat("field \"", o.json_keys[k], "\" has more than 2^31-1 tokens"));
        ok = false;
        break;
      }
      r->lengths[k].push_back(static_cast<int32_t>(n));
    }
  }
  r->lines = index;
}

// Reader → workers → ordered writer; the calling thread is the writer (Pop/Written). Its own
// threads are the reader and the workers; Pop and Written are for the one writer thread.
// Thread-safe: the queues are guarded by mu_.
class Pipeline {
 public:
  Pipeline(const PreprocessOptions& o, const Gpt2BpeTokenizer& tok, int fd, bool pollable)
      : o_(o), fd_(fd), pollable_(pollable) {
    max_in_flight_ = o.max_batches_in_flight > 0 ? o.max_batches_in_flight : 2 * o.workers + 2;
    reader_ = std::thread([this] { ReadLoop(); });
    for (int i = 0; i < o.workers; ++i) {
      workers_.emplace_back(
          [this, t = std::shared_ptr<Gpt2BpeTokenizer>(tok.Clone())] { WorkLoop(*t); });
    }
  }

  ~Pipeline() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    reader_.join();
    for (auto& w : workers_) w.join();
  }

  enum class Next { kBatch, kEnd, kCancelled };

  // The next batch's result in input order; kEnd after the last one.
  Next Pop(BatchResult* out) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return done_.count(written_) > 0 || (reader_done_ && written_ == read_);
    };
    while (!mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(100))) {
      if (Cancelled()) return Next::kCancelled;
    }
    if (Cancelled()) return Next::kCancelled;
    auto it = done_.find(written_);
    if (it == done_.end()) return Next::kEnd;
    *out = std::move(it->second);
    done_.erase(it);
    return Next::kBatch;
  }

  // The batch returned by Pop is written; its slot may be reused.
  void Written() {
    absl::MutexLock lock(&mu_);
    ++written_;
  }

  // After Pop returned kEnd.
  absl::Status reader_status() {
    absl::MutexLock lock(&mu_);
    return reader_status_;
  }
  bool line_too_long() {
    absl::MutexLock lock(&mu_);
    return line_too_long_;
  }
  PreprocessInputFormat format() {
    absl::MutexLock lock(&mu_);
    return format_;
  }

 private:
  bool Cancelled() const {
    return o_.cancel != nullptr && o_.cancel->load(std::memory_order_relaxed);
  }

  // False when the pipeline is stopping.
  bool Push(Batch batch) {
    absl::MutexLock lock(&mu_);
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || read_ - written_ < max_in_flight_;
    };
    mu_.Await(absl::Condition(&room));
    if (stop_) return false;
    if (batch.format != PreprocessInputFormat::kAuto) format_ = batch.format;
    ++read_;
    work_.push_back(std::move(batch));
    return true;
  }

  void FinishReading(absl::Status status, bool too_long) {
    absl::MutexLock lock(&mu_);
    reader_status_ = std::move(status);
    line_too_long_ = too_long;
    reader_done_ = true;
  }

  bool Stopping() {
    absl::MutexLock lock(&mu_);
    return stop_;
  }

  // Waits until fd_ is readable (pipes only), so that a stop is noticed while input is idle.
  bool WaitReadable() {
    if (!pollable_) return true;
    while (true) {
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, 100);
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return true;  // let read() report it
      if (Stopping()) return false;
    }
  }

  void ReadLoop() {
    PreprocessInputFormat format = o_.input_format;
    std::string cur;
    size_t last_nl = std::string::npos;  // of cur
    int64_t seq = 0;
    bool eof = false;
    while (!eof) {
      if (Stopping()) return FinishReading(absl::CancelledError("stopped"), false);
      if (!WaitReadable()) return FinishReading(absl::CancelledError("stopped"), false);
      const size_t old = cur.size();
      // Up to batch_bytes per batch, unless one line is longer.
      const size_t want =
          old < o_.batch_bytes ? std::min(o_.read_bytes, o_.batch_bytes - old) : o_.read_bytes;
      cur.resize(old + want);
      ssize_t n;
      do {
        n = ::read(fd_, &cur[old], want);
      } while (n < 0 && errno == EINTR);
      if (n < 0) {
        const int err = errno;
        return FinishReading(ErrnoStatus("reading", o_.input, err), false);
      }
      cur.resize(old + static_cast<size_t>(n));
      if (n == 0) eof = true;
      if (n > 0) {
        const void* p = ::memrchr(cur.data() + old, '\n', static_cast<size_t>(n));
        if (p != nullptr) last_nl = static_cast<size_t>(static_cast<const char*>(p) - cur.data());
      }
      if (!eof && cur.size() < o_.batch_bytes) continue;
      size_t cut;
      if (eof) {
        cut = cur.size();
      } else if (last_nl == std::string::npos) {
        // cur starts at a line start and holds no newline: one line, still growing.
        if (cur.size() > o_.max_line_bytes) return FinishReading(absl::OkStatus(), true);
        continue;
      } else {
        cut = last_nl + 1;
      }
      if (cut == 0) break;
      std::string next(cur.data() + cut, cur.size() - cut);
      cur.resize(cut);
      if (format == PreprocessInputFormat::kAuto) {
        // A UTF-8 byte-order mark at the very start is not content (ProcessBatch drops it).
        const size_t from = seq == 0 && absl::StartsWith(cur, kBom) ? 3 : 0;
        for (char c : absl::string_view(cur).substr(from)) {
          if (c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != '\v' && c != '\f') {
            format = c == '{' ? PreprocessInputFormat::kJsonl : PreprocessInputFormat::kText;
            break;
          }
        }
        if (format == PreprocessInputFormat::kText && o_.json_keys.size() != 1) {
          return FinishReading(
              absl::InvalidArgumentError(
                  "the input is plain text (its first character is not '{'), which has one "
                  "document per line, but several --json-keys were given; pass --input-format "
                  "jsonl if it is JSON lines"),
              false);
        }
      }
      Batch b;
      b.seq = seq++;
      b.data = std::move(cur);
      b.format = format;
      if (!Push(std::move(b))) return FinishReading(absl::CancelledError("stopped"), false);
      cur = std::move(next);
      cur.reserve(o_.batch_bytes + o_.read_bytes);
      last_nl = std::string::npos;
    }
    FinishReading(absl::OkStatus(), false);
  }

  void WorkLoop(const Gpt2BpeTokenizer& tok) {
    while (true) {
      Batch batch;
      {
        absl::MutexLock lock(&mu_);
        auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || !work_.empty() || reader_done_;
        };
        mu_.Await(absl::Condition(&has_work));
        if (stop_ || work_.empty()) return;
        batch = std::move(work_.front());
        work_.pop_front();
      }
      BatchResult r;
      ProcessBatch(batch, tok, o_, &r);
      absl::MutexLock lock(&mu_);
      done_.emplace(batch.seq, std::move(r));
    }
  }

  const PreprocessOptions& o_;
  const int fd_;
  const bool pollable_;
  int64_t max_in_flight_ = 0;

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Batch> work_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, BatchResult> done_ ABSL_GUARDED_BY(mu_);
  int64_t read_ ABSL_GUARDED_BY(mu_) = 0;     // batches handed to the workers
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;  // batches written, in order
  bool reader_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status reader_status_ ABSL_GUARDED_BY(mu_);
  bool line_too_long_ ABSL_GUARDED_BY(mu_) = false;
  PreprocessInputFormat format_ ABSL_GUARDED_BY(mu_) = PreprocessInputFormat::kAuto;

  std::thread reader_;
  std::vector<std::thread> workers_;
};

// The output directory must exist (as for Megatron); say so before reading anything.
absl::Status CheckOutputDirectory(const std::string& output_prefix) {
  const size_t slash = output_prefix.rfind('/');
  const std::string out_dir = slash == std::string::npos ? "."
                              : slash == 0               ? "/"
                                                         : output_prefix.substr(0, slash);
  struct stat st;
  if (::stat(out_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(
        absl::StrCat("--output-prefix: directory ", out_dir, " does not exist"));
  }
  return absl::OkStatus();
}

// Opens --input ("-" is stdin, fd 0) and fills `st`; not a directory. A regular file is read
// sequentially.
absl::StatusOr<int> OpenInput(const std::string& input, struct stat* st) {
  int fd = 0;
  if (input != "-") {
    fd = ::open(input.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("--input: opening", input, errno);
  }
  if (::fstat(fd, st) != 0) {
    const int err = errno;
    if (fd > 0) ::close(fd);
    return ErrnoStatus("--input: stat", input, err);
  }
  if (S_ISDIR(st->st_mode)) {
    if (fd > 0) ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("--input: ", input, " is a directory, not a file"));
  }
  if (S_ISREG(st->st_mode)) ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return fd;
}

// One batch's results, in input order: its bad lines counted (or the error under
// --on-bad-line fail), its documents appended to each key's writer, the counts added up.
absl::Status AddBatch(BatchResult& r, const PreprocessOptions& options,
                      const std::vector<std::unique_ptr<IndexedDatasetWriter>>& writers,
                      PreprocessResult* result) {
  for (BadLine& b : r.bad) {
    b.line += result->lines + 1;
    if (options.on_bad_line == BadLinePolicy::kFail) {
      return absl::InvalidArgumentError(absl::StrCat("line ", b.line, ": ", b.reason));
    }
    ++result->bad_lines;
    if (result->bad_line_examples.size() < options.max_reported_bad_lines) {
      result->bad_line_examples.push_back(std::move(b));
    }
  }
  for (size_t k = 0; k < writers.size(); ++k) {
    const std::vector<int32_t>& tokens = r.tokens[k];
    size_t offset = 0;
    for (int32_t len : r.lengths[k]) {
      MT_RETURN_IF_ERROR(writers[k]->AddDocument(
          absl::MakeConstSpan(tokens.data() + offset, static_cast<size_t>(len))));
      offset += static_cast<size_t>(len);
      if (len > 0) ++result->outputs[k].sequences;
    }
    result->outputs[k].documents += static_cast<int64_t>(r.lengths[k].size());
    result->outputs[k].tokens += static_cast<int64_t>(tokens.size());
    result->tokens += static_cast<int64_t>(tokens.size());
  }
  result->documents += static_cast<int64_t>(r.lengths[0].size());
  result->lines += r.lines;
  result->blank_lines += r.blank_lines;
  result->input_bytes += r.bytes;
  return absl::OkStatus();
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ > 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::Status ValidatePreprocessOptions(const PreprocessOptions& o) {
  if (o.input.empty()) return absl::InvalidArgumentError("--input is required");
  if (o.output_prefix.empty()) return absl::InvalidArgumentError("--output-prefix is required");
  if (o.json_keys.empty()) return absl::InvalidArgumentError("--json-keys: at least one key");
  absl::flat_hash_set<std::string> seen;
  for (const std::string& k : o.json_keys) {
    if (k.empty()) return absl::InvalidArgumentError("--json-keys: empty key");
    if (!seen.insert(k).second) {
      return absl::InvalidArgumentError(absl::StrCat("--json-keys: \"", k, "\" given twice"));
    }
  }
  if (o.input_format == PreprocessInputFormat::kText && o.json_keys.size() != 1) {
    return absl::InvalidArgumentError(
        "--json-keys: plain-text input has one document per line, so exactly one key (it "
        "names the output)");
  }
  if (o.workers < 1 || o.workers > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("--workers ", o.workers, ": must be 1..1024"));
  }
  if (o.batch_bytes == 0 || o.read_bytes == 0 || o.max_line_bytes == 0) {
    return absl::InvalidArgumentError("batch, read and line sizes must be positive");
  }
  return absl::OkStatus();
}

absl::StatusOr<PreprocessResult> Preprocess(const PreprocessOptions& options,
                                            const Gpt2BpeTokenizer& tokenizer) {
  MT_RETURN_IF_ERROR(ValidatePreprocessOptions(options));
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };

  MT_RETURN_IF_ERROR(CheckOutputDirectory(options.output_prefix));
  struct stat st;
  MT_ASSIGN_OR_RETURN(const int fd, OpenInput(options.input, &st));
  Fd input(fd);
  const int64_t total_bytes = S_ISREG(st.st_mode) ? st.st_size : -1;

  PreprocessResult result;
  result.dtype = OptimalDType(tokenizer.vocab_size());
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const std::string& key : options.json_keys) {
    PreprocessOutput out;
    out.key = key;
    out.prefix = PreprocessOutputPrefix(options.output_prefix, key);
    MT_ASSIGN_OR_RETURN(auto w, IndexedDatasetWriter::Create(out.prefix, result.dtype));
    writers.push_back(std::move(w));
    result.outputs.push_back(std::move(out));
  }

  PreprocessProgress progress;
  progress.total_bytes = total_bytes;
  {
    Pipeline pipeline(options, tokenizer, fd, !S_ISREG(st.st_mode));
    BatchResult r;
    while (true) {
      const Pipeline::Next next = pipeline.Pop(&r);
      if (next == Pipeline::Next::kCancelled) return absl::CancelledError("interrupted");
      if (next == Pipeline::Next::kEnd) {
        if (pipeline.line_too_long()) {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", result.lines + 1, ": longer than ", options.max_line_bytes,
                           " bytes (is this a JSON-lines or text file?)"));
        }
        MT_RETURN_IF_ERROR(pipeline.reader_status());
        result.format = pipeline.format();
        break;
      }
      MT_RETURN_IF_ERROR(AddBatch(r, options, writers, &result));
      pipeline.Written();
      if (options.on_progress) {
        progress.lines = result.lines;
        progress.documents = result.documents;
        progress.tokens = result.tokens;
        progress.bad_lines = result.bad_lines;
        progress.bytes_done = result.input_bytes;
        progress.seconds = elapsed();
        options.on_progress(progress);
      }
    }
  }
  if (result.format == PreprocessInputFormat::kAuto) {
    // Nothing but blank lines: no document either way.
    result.format = PreprocessInputFormat::kJsonl;
  }
  if (options.cancel != nullptr && options.cancel->load()) {
    return absl::CancelledError("interrupted");
  }
  for (auto& w : writers) MT_RETURN_IF_ERROR(w->Finalize());
  result.seconds = elapsed();
  if (options.on_progress) {
    progress.seconds = result.seconds;
    options.on_progress(progress);
  }
  return result;
}

}  // namespace mt::data
