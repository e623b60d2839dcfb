#include "common/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/errors.h"
#include "common/base/files.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"

namespace mt::data {
namespace {

static_assert(sizeof(kIndexMagic) == 9, "MMIDIDX magic is 9 bytes");

constexpr size_t kWriteBufferBytes = size_t{1} << 20;
constexpr absl::string_view kRebuildHint =
    "re-create it with `mtctl data preprocess` (or Megatron's tools/preprocess_data.py)";

template <typename T>
T LoadLE(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // little-endian host (x86-64, aarch64)
  return v;
}

template <typename T>
void AppendLE(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Maps a whole file read-only; *data is nullptr for an empty file.
absl::Status MapFile(const std::string& path, const char** data, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  *size = static_cast<uint64_t>(st.st_size);
  *data = nullptr;
  if (*size > 0) {
    void* p = ::mmap(nullptr, *size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus("mmap", path, err);
    }
    *data = static_cast<const char*>(p);
  }
  ::close(fd);
  return absl::OkStatus();
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The element at p, of `dtype`, as an int32 token id; false if it is not one.
bool ElementToInt32(DType dtype, const char* p, int32_t* out) {
  switch (dtype) {
    case DType::kUInt8:
      *out = LoadLE<uint8_t>(p);
      return true;
    case DType::kInt8:
      *out = LoadLE<int8_t>(p);
      return true;
    case DType::kInt16:
      *out = LoadLE<int16_t>(p);
      return true;
    case DType::kUInt16:
      *out = LoadLE<uint16_t>(p);
      return true;
    case DType::kInt32:
      *out = LoadLE<int32_t>(p);
      return true;
    case DType::kInt64: {
      const int64_t v = LoadLE<int64_t>(p);
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        return false;
      }
      *out = static_cast<int32_t>(v);
      return true;
    }
    case DType::kFloat32:
    case DType::kFloat64: {
      const double v =
          dtype == DType::kFloat32 ? static_cast<double>(LoadLE<float>(p)) : LoadLE<double>(p);
      if (!(v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) ||
          v != std::floor(v)) {
        return false;
      }
      *out = static_cast<int32_t>(v);
      return true;
    }
  }
  return false;
}

}  // namespace

bool IsValidDTypeCode(uint8_t code) { return code >= 1 && code <= 8; }

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kUInt8:
    case DType::kInt8:
      return 1;
    case DType::kInt16:
    case DType::kUInt16:
      return 2;
    case DType::kInt32:
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
    case DType::kFloat64:
      return 8;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kUInt8:
      return "uint8";
    case DType::kInt8:
      return "int8";
    case DType::kInt16:
      return "int16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kFloat64:
      return "float64";
    case DType::kFloat32:
      return "float32";
    case DType::kUInt16:
      return "uint16";
  }
  return "invalid";
}

DType OptimalDType(int64_t vocab_size) {
  return vocab_size < 65500 ? DType::kUInt16 : DType::kInt32;
}

std::string IndexPath(absl::string_view prefix) { return absl::StrCat(prefix, ".idx"); }
std::string DataPath(absl::string_view prefix) { return absl::StrCat(prefix, ".bin"); }

namespace internal {

absl::StatusOr<std::vector<int64_t>> SequencePointers(absl::Span<const int32_t> lengths,
                                                      size_t element_size) {
  std::vector<int64_t> pointers;
  pointers.reserve(lengths.size());
  int64_t at = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", i, " has a negative length ", lengths[i]));
    }
    pointers.push_back(at);
    const int64_t bytes = int64_t{lengths[i]} * static_cast<int64_t>(element_size);
    if (at > std::numeric_limits<int64_t>::max() - bytes) {
      return absl::OutOfRangeError(
          absl::StrCat("sequence ", i, " ends past byte 2^63 of the .bin"));
    }
    at += bytes;
  }
  return pointers;
}

}  // namespace internal

// ---------------------------------------------------------------------------------------------
// IndexedDataset

IndexedDataset::~IndexedDataset() {
  if (index_ != nullptr) ::munmap(const_cast<char*>(index_), index_size_);
  if (data_ != nullptr) ::munmap(const_cast<char*>(data_), data_size_);
}

absl::StatusOr<std::unique_ptr<IndexedDataset>> IndexedDataset::Create(const std::string& prefix) {
  std::unique_ptr<IndexedDataset> ds(new IndexedDataset());
  MT_RETURN_IF_ERROR(ds->Open(prefix));
  return ds;
}

absl::Status IndexedDataset::Open(const std::string& prefix) {
  prefix_ = prefix;
  const std::string idx_path = IndexPath(prefix);
  const std::string bin_path = DataPath(prefix);
  if (absl::Status s = MapFile(idx_path, &index_, &index_size_); !s.ok()) {
    return Annotate(s, absl::StrCat("opening the index of dataset ", prefix,
                                    " (expected <prefix>.idx and <prefix>.bin)"));
  }
  if (absl::Status s = MapFile(bin_path, &data_, &data_size_); !s.ok()) {
    return Annotate(s, absl::StrCat("opening the data of dataset ", prefix,
                                    " (expected <prefix>.idx and <prefix>.bin)"));
  }
  return Validate();
}

absl::Status IndexedDataset::Validate() {
  MT_RETURN_IF_ERROR(ValidateHeader());
  MT_RETURN_IF_ERROR(ValidateSequences());
  return ValidateDocumentIndex();
}

absl::Status IndexedDataset::Corrupt(absl::string_view what) const {
  return absl::DataLossError(absl::StrCat(IndexPath(prefix_), ": ", what, "; ", kRebuildHint));
}

// Magic, version, dtype, and the counts against the index file's size.
absl::Status IndexedDataset::ValidateHeader() {
  const std::string idx_path = IndexPath(prefix_);
  if (index_size_ < kIndexHeaderBytes) {
    return Corrupt(absl::StrCat("truncated: ", index_size_, " bytes, but the header alone is ",
                                kIndexHeaderBytes));
  }
  const absl::string_view magic(index_, sizeof(kIndexMagic));
  if (magic != absl::string_view(kIndexMagic, sizeof(kIndexMagic))) {
    std::string msg = absl::StrCat("not a Megatron MMIDIDX index: it starts with \"",
                                   absl::CHexEscape(magic), "\", not \"MMIDIDX\\0\\0\"");
    if (absl::StartsWith(magic, "TNTIDX")) {
      absl::StrAppend(&msg,
                      " (this is Megatron's older lazy/cached format; re-run preprocessing with "
                      "--dataset-impl mmap)");
    }
    return absl::InvalidArgumentError(absl::StrCat(idx_path, ": ", msg, "; ", kRebuildHint));
  }
  const uint64_t version = LoadLE<uint64_t>(index_ + 9);
  if (version != kIndexVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat(idx_path, ": index version ", version, "; only version ", kIndexVersion,
                     " (Megatron's MMIDIDX) is supported; ", kRebuildHint));
  }
  const uint8_t code = LoadLE<uint8_t>(index_ + 17);
  if (!IsValidDTypeCode(code)) {
    return absl::InvalidArgumentError(
        absl::StrCat(idx_path, ": unknown dtype code ", code,
                     " (valid: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, "
                     "8 uint16); ",
                     kRebuildHint));
  }
  dtype_ = static_cast<DType>(code);
  const uint64_t n = LoadLE<uint64_t>(index_ + 18);
  const uint64_t d = LoadLE<uint64_t>(index_ + 26);
  // Sizes beyond what the file could hold are caught before any multiplication overflows.
  const uint64_t body = index_size_ - kIndexHeaderBytes;
  if (n > body / 12 || d > body / 8 || n * 12 + d * 8 > body) {
    return Corrupt(absl::StrCat("truncated: the header promises ", n, " sequences and ", d,
                                " document indices (", kIndexHeaderBytes, " + 12*", n, " + 8*", d,
                                " bytes) but the file has ", index_size_, " bytes"));
  }
  const uint64_t expected = kIndexHeaderBytes + n * 12 + d * 8;
  // Megatron's multimodal datasets append one int8 mode per sequence; we ignore them.
  if (index_size_ != expected && index_size_ != expected + n) {
    return Corrupt(absl::StrCat(index_size_ - expected,
                                " unexpected bytes after the document indices (the file has ",
                                index_size_, " bytes, the header accounts for ", expected, ")"));
  }
  num_sequences_ = static_cast<int64_t>(n);
  num_doc_indices_ = static_cast<int64_t>(d);
  lengths_ = index_ + kIndexHeaderBytes;
  pointers_ = lengths_ + n * 4;
  doc_idx_ = pointers_ + n * 8;
  return absl::OkStatus();
}

// Every sequence starts where the previous one ends, and together they fill the .bin exactly.
absl::Status IndexedDataset::ValidateSequences() {
  const int64_t item = static_cast<int64_t>(DTypeSize(dtype_));
  int64_t at = 0;  // where the next sequence must start
  for (int64_t i = 0; i < num_sequences_; ++i) {
    const int32_t len = LoadLE<int32_t>(lengths_ + i * 4);
    const int64_t ptr = LoadLE<int64_t>(pointers_ + i * 8);
    if (len < 0) return Corrupt(absl::StrCat("sequence ", i, " has a negative length ", len));
    if (ptr != at) {
      return Corrupt(absl::StrCat(
          "sequence ", i, " starts at byte ", ptr, " of the .bin, but the ",
          i == 0 ? "first must start at 0" : "previous one ends at " + std::to_string(at),
          " (offsets must be contiguous and increasing)"));
    }
    const int64_t bytes = int64_t{len} * item;
    if (at > std::numeric_limits<int64_t>::max() - bytes) {
      return Corrupt(absl::StrCat("sequence ", i, " ends past byte 2^63"));
    }
    at += bytes;
  }
  if (static_cast<uint64_t>(at) != data_size_) {
    return absl::DataLossError(absl::StrCat(
        DataPath(prefix_), " has ", data_size_, " bytes but its index ", IndexPath(prefix_),
        " describes ", at, " (", at / item, " ", DTypeName(dtype_),
        " tokens): the two files do not belong together or one was cut short; ", kRebuildHint));
  }
  num_tokens_ = at / item;
  return absl::OkStatus();
}

// The document index starts at 0 and increases to at most the sequence count.
absl::Status IndexedDataset::ValidateDocumentIndex() const {
  if (num_doc_indices_ == 0) {
    return Corrupt("the document index is empty; it must start with 0");
  }
  int64_t prev = 0;
  for (int64_t i = 0; i < num_doc_indices_; ++i) {
    const int64_t v = LoadLE<int64_t>(doc_idx_ + i * 8);
    if (i == 0 && v != 0) {
      return Corrupt(absl::StrCat("the document index starts with ", v, ", not 0"));
    }
    if (v < prev || v > num_sequences_) {
      return Corrupt(absl::StrCat("document index entry ", i, " is ", v, ": out of range (entries ",
                                  "must increase from 0 to at most the sequence count ",
                                  num_sequences_, "; the previous entry is ", prev, ")"));
    }
    prev = v;
  }
  return absl::OkStatus();
}

int32_t IndexedDataset::sequence_length(int64_t sequence) const {
  MT_CHECK(sequence >= 0 && sequence < num_sequences_) << sequence;
  return LoadLE<int32_t>(lengths_ + sequence * 4);
}

int64_t IndexedDataset::sequence_pointer(int64_t sequence) const {
  MT_CHECK(sequence >= 0 && sequence < num_sequences_) << sequence;
  return LoadLE<int64_t>(pointers_ + sequence * 8);
}

int64_t IndexedDataset::document_index(int64_t document) const {
  MT_CHECK(document >= 0 && document < num_doc_indices_) << document;
  return LoadLE<int64_t>(doc_idx_ + document * 8);
}

std::vector<int32_t> IndexedDataset::SequenceLengths() const {
  std::vector<int32_t> out(num_sequences_);
  if (!out.empty()) std::memcpy(out.data(), lengths_, out.size() * 4);
  return out;
}

std::vector<int64_t> IndexedDataset::DocumentIndices() const {
  std::vector<int64_t> out(num_doc_indices_);
  std::memcpy(out.data(), doc_idx_, out.size() * 8);
  return out;
}

absl::string_view IndexedDataset::RawSequence(int64_t sequence) const {
  const int64_t bytes = int64_t{sequence_length(sequence)} * DTypeSize(dtype_);
  if (bytes == 0) return {};
  return absl::string_view(data_ + sequence_pointer(sequence), bytes);
}

absl::Status IndexedDataset::Read(int64_t sequence, int64_t offset, int64_t length,
                                  int32_t* out) const {
  if (sequence < 0 || sequence >= num_sequences_) {
    return absl::OutOfRangeError(
        absl::StrCat(prefix_, ": sequence ", sequence, " out of range [0, ", num_sequences_, ")"));
  }
  const int64_t len = sequence_length(sequence);
  if (offset < 0 || length < 0 || offset > len || length > len - offset) {
    return absl::OutOfRangeError(absl::StrCat(prefix_, ": tokens [", offset, ", ", offset, " + ",
                                              length, ") of sequence ", sequence, " leave its ",
                                              len, " tokens"));
  }
  if (length == 0) return absl::OkStatus();
  const size_t item = DTypeSize(dtype_);
  const char* p = data_ + sequence_pointer(sequence) + offset * static_cast<int64_t>(item);
  switch (dtype_) {
    case DType::kUInt16:
      for (int64_t i = 0; i < length; ++i) out[i] = LoadLE<uint16_t>(p + 2 * i);
      return absl::OkStatus();
    case DType::kInt32:
      std::memcpy(out, p, static_cast<size_t>(length) * 4);
      return absl::OkStatus();
    default:
      for (int64_t i = 0; i < length; ++i) {
        if (!ElementToInt32(dtype_, p + i * item, &out[i])) {
          return absl::InvalidArgumentError(
              absl::StrCat(DataPath(prefix_), ": token ", offset + i, " of sequence ", sequence,
                           " (", DTypeName(dtype_), ") is not an int32 token id"));
        }
      }
      return absl::OkStatus();
  }
}

absl::StatusOr<std::vector<int32_t>> IndexedDataset::Get(int64_t sequence, int64_t offset,
                                                         int64_t length) const {
  if (sequence < 0 || sequence >= num_sequences_) {
    return absl::OutOfRangeError(
        absl::StrCat(prefix_, ": sequence ", sequence, " out of range [0, ", num_sequences_, ")"));
  }
  if (length == -1) {
    // To the end; an offset past the end is reported by Read.
    length = std::max<int64_t>(0, sequence_length(sequence) - offset);
  }
  if (length < 0) {
    return absl::OutOfRangeError(
        absl::StrCat(prefix_, ": negative length ", length, " for sequence ", sequence));
  }
  std::vector<int32_t> out(static_cast<size_t>(length));
  MT_RETURN_IF_ERROR(Read(sequence, offset, length, out.data()));
  return out;
}

// ---------------------------------------------------------------------------------------------
// IndexedDatasetWriter

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, DType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype) {}

absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::Create(
    const std::string& prefix, DType dtype) {
  MT_RETURN_IF_ERROR(ValidatePath(prefix, "dataset prefix"));
  if (!IsValidDTypeCode(static_cast<uint8_t>(dtype))) {
    return absl::InvalidArgumentError(absl::StrCat("invalid dtype code ", static_cast<int>(dtype)));
  }
  std::unique_ptr<IndexedDatasetWriter> w(new IndexedDatasetWriter(prefix, dtype));
  const std::string suffix = absl::StrCat(".tmp.", ::getpid());
  w->bin_tmp_ = DataPath(prefix) + suffix;
  w->idx_tmp_ = IndexPath(prefix) + suffix;
  w->bin_fd_ = ::open(w->bin_tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->bin_fd_ < 0) return ErrnoStatus("creating", w->bin_tmp_, errno);
  w->buffer_.reserve(kWriteBufferBytes);
  return w;
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!finalized_) Abandon();
}

void IndexedDatasetWriter::Abandon() {
  if (bin_fd_ >= 0) {
    ::close(bin_fd_);
    bin_fd_ = -1;
  }
  ::unlink(bin_tmp_.c_str());
  ::unlink(idx_tmp_.c_str());
}

absl::Status IndexedDatasetWriter::Check() {
  if (!status_.ok()) return status_;
  if (finalized_) {
    return absl::FailedPreconditionError(
        absl::StrCat("dataset ", prefix_, " was already finalized"));
  }
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::Flush() {
  if (buffer_.empty()) return absl::OkStatus();
  absl::Status s = WriteAll(bin_fd_, buffer_, bin_tmp_);
  buffer_.clear();
  return s;
}

absl::Status IndexedDatasetWriter::WriteData(const char* bytes, size_t n) {
  if (buffer_.size() + n <= kWriteBufferBytes) {
    buffer_.append(bytes, n);
  } else {
    MT_RETURN_IF_ERROR(Flush());
    if (n >= kWriteBufferBytes) {
      MT_RETURN_IF_ERROR(WriteAll(bin_fd_, absl::string_view(bytes, n), bin_tmp_));
    } else {
      buffer_.append(bytes, n);
    }
  }
  data_bytes_ += n;
  return absl::OkStatus();
}

namespace {

// The token ids a dtype holds exactly: [lo, hi].
std::pair<int32_t, int32_t> TokenRange(DType dtype) {
  int32_t lo = std::numeric_limits<int32_t>::min();
  int32_t hi = std::numeric_limits<int32_t>::max();
  switch (dtype) {
    case DType::kUInt8:
      lo = 0, hi = 0xFF;
      break;
    case DType::kInt8:
      lo = -128, hi = 127;
      break;
    case DType::kInt16:
      lo = -32768, hi = 32767;
      break;
    case DType::kUInt16:
      lo = 0, hi = 0xFFFF;
      break;
    case DType::kFloat32:
      lo = -(1 << 24), hi = 1 << 24;  // exact in float32
      break;
    default:
      break;
  }
  return {lo, hi};
}

// Writes `count` token ids as T to `out` (count * sizeof(T) bytes, little-endian host).
template <typename T>
void EncodeAs(const int32_t* in, size_t count, char* out) {
  for (size_t i = 0; i < count; ++i) {
    const T v = static_cast<T>(in[i]);
    std::memcpy(out + sizeof(T) * i, &v, sizeof(T));
  }
}

// Writes `count` token ids as `dtype` to `out` (count * DTypeSize(dtype) bytes). The ids are in
// TokenRange(dtype).
void EncodeTokens(DType dtype, const int32_t* in, size_t count, char* out) {
  switch (dtype) {
    case DType::kUInt8:
      return EncodeAs<uint8_t>(in, count, out);
    case DType::kInt8:
      return EncodeAs<int8_t>(in, count, out);
    case DType::kInt16:
      return EncodeAs<int16_t>(in, count, out);
    case DType::kUInt16:
      return EncodeAs<uint16_t>(in, count, out);
    case DType::kInt32:
      return EncodeAs<int32_t>(in, count, out);
    case DType::kInt64:
      return EncodeAs<int64_t>(in, count, out);
    case DType::kFloat32:
      return EncodeAs<float>(in, count, out);
    case DType::kFloat64:
      return EncodeAs<double>(in, count, out);
  }
}

}  // namespace

absl::Status IndexedDatasetWriter::AddSequence(absl::Span<const int32_t> tokens) {
  MT_RETURN_IF_ERROR(Check());
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("a sequence of ", tokens.size(),
                                                   " tokens is longer than the format's "
                                                   "int32 lengths allow; split it"));
  }
  // Range check first, so that a bad token leaves the writer usable.
  const auto [lo, hi] = TokenRange(dtype_);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < lo || tokens[i] > hi) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", tokens[i], " (position ", i, " of sequence ", lengths_.size(),
          ") does not fit dtype ", DTypeName(dtype_),
          "; use OptimalDType(vocab_size), which picks int32 for vocabularies of 65500 or more"));
    }
  }
  // Converts through a stack buffer, chunk by chunk.
  constexpr size_t kChunk = 4096;
  char buf[kChunk * 8];
  const size_t item = DTypeSize(dtype_);
  for (size_t start = 0; start < tokens.size(); start += kChunk) {
    const size_t count = std::min(kChunk, tokens.size() - start);
    EncodeTokens(dtype_, tokens.data() + start, count, buf);
    if (absl::Status s = WriteData(buf, count * item); !s.ok()) {
      status_ = s;
      return s;
    }
  }
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::EndDocument() {
  MT_RETURN_IF_ERROR(Check());
  doc_idx_.push_back(static_cast<int64_t>(lengths_.size()));
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::AddDocument(absl::Span<const int32_t> tokens) {
  if (!tokens.empty()) MT_RETURN_IF_ERROR(AddSequence(tokens));
  return EndDocument();
}

absl::Status IndexedDatasetWriter::Append(const IndexedDataset& other) {
  MT_RETURN_IF_ERROR(Check());
  if (other.dtype() != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot append dataset ", other.prefix(), " (", DTypeName(other.dtype()), ") to ", prefix_,
        " (", DTypeName(dtype_), "): the dtypes differ; re-preprocess one of them"));
  }
  const int64_t offset = static_cast<int64_t>(lengths_.size());
  const std::vector<int32_t> lengths = other.SequenceLengths();
  const std::vector<int64_t> docs = other.DocumentIndices();
  // The data, in large slices straight from the mapping.
  const absl::string_view data = other.RawData();
  constexpr size_t kSlice = size_t{64} << 20;
  for (size_t at = 0; at < data.size(); at += kSlice) {
    if (absl::Status s = WriteData(data.data() + at, std::min(kSlice, data.size() - at)); !s.ok()) {
      status_ = s;
      return s;
    }
  }
  lengths_.insert(lengths_.end(), lengths.begin(), lengths.end());
  for (size_t i = 1; i < docs.size(); ++i) doc_idx_.push_back(offset + docs[i]);
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::WriteIndex(int fd) {
  std::string& out = buffer_;
  out.clear();
  auto spill = [&]() -> absl::Status {
    if (out.size() < kWriteBufferBytes) return absl::OkStatus();
    absl::Status s = WriteAll(fd, out, idx_tmp_);
    out.clear();
    return s;
  };
  out.append(kIndexMagic, sizeof(kIndexMagic));
  AppendLE<uint64_t>(&out, kIndexVersion);
  AppendLE<uint8_t>(&out, static_cast<uint8_t>(dtype_));
  AppendLE<uint64_t>(&out, lengths_.size());
  AppendLE<uint64_t>(&out, doc_idx_.size());
  for (int32_t len : lengths_) {
    AppendLE<int32_t>(&out, len);
    MT_RETURN_IF_ERROR(spill());
  }
  const int64_t item = static_cast<int64_t>(DTypeSize(dtype_));
  int64_t at = 0;
  for (int32_t len : lengths_) {
    AppendLE<int64_t>(&out, at);
    at += int64_t{len} * item;
    MT_RETURN_IF_ERROR(spill());
  }
  for (int64_t d : doc_idx_) {
    AppendLE<int64_t>(&out, d);
    MT_RETURN_IF_ERROR(spill());
  }
  MT_RETURN_IF_ERROR(WriteAll(fd, out, idx_tmp_));
  out.clear();
  if (::fsync(fd) != 0) return ErrnoStatus("fsync", idx_tmp_, errno);
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::RenameIntoPlace() {
  // An old .idx goes first, so that at no moment does a complete-looking index sit beside a
  // .bin it does not describe; the new .idx arrives last.
  const std::string idx_path = IndexPath(prefix_);
  const std::string bin_path = DataPath(prefix_);
  if (::unlink(idx_path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus("removing the old index", idx_path, errno);
  }
  if (::rename(bin_tmp_.c_str(), bin_path.c_str()) != 0) {
    return ErrnoStatus("renaming " + bin_tmp_ + " to", bin_path, errno);
  }
  if (::rename(idx_tmp_.c_str(), idx_path.c_str()) != 0) {
    return ErrnoStatus("renaming " + idx_tmp_ + " to", idx_path, errno);
  }
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::Finalize() {
  MT_RETURN_IF_ERROR(Check());
  auto fail = [this](absl::Status s) {
    status_ = s;
    Abandon();
    return s;
  };
  if (absl::Status s = Flush(); !s.ok()) return fail(s);
  if (::fsync(bin_fd_) != 0) return fail(ErrnoStatus("fsync", bin_tmp_, errno));
  if (::close(bin_fd_) != 0) {
    bin_fd_ = -1;
    return fail(ErrnoStatus("closing", bin_tmp_, errno));
  }
  bin_fd_ = -1;

  // The index, streamed through the same buffer.
  const int fd = ::open(idx_tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail(ErrnoStatus("creating", idx_tmp_, errno));
  absl::Status s = WriteIndex(fd);
  if (::close(fd) != 0 && s.ok()) s = ErrnoStatus("closing", idx_tmp_, errno);
  if (!s.ok()) return fail(s);
  if (absl::Status r = RenameIntoPlace(); !r.ok()) return fail(r);
  finalized_ = true;
  if (absl::Status d = FsyncDirectory(DirName(IndexPath(prefix_))); !d.ok()) {
    status_ = d;
    return d;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------

absl::Status MergeIndexedDatasets(absl::Span<const std::string> input_prefixes,
                                  const std::string& output_prefix) {
  if (input_prefixes.empty()) {
    return absl::InvalidArgumentError("merge needs at least one input dataset");
  }
  std::vector<std::unique_ptr<IndexedDataset>> inputs;
  for (const std::string& prefix : input_prefixes) {
    if (prefix == output_prefix) {
      return absl::InvalidArgumentError(absl::StrCat("the merge output ", output_prefix,
                                                     " is also an input; choose another prefix"));
    }
    MT_ASSIGN_OR_RETURN(std::unique_ptr<IndexedDataset> ds, IndexedDataset::Create(prefix));
    if (!inputs.empty() && ds->dtype() != inputs.front()->dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot merge ", prefix, " (", DTypeName(ds->dtype()), ") with ",
          inputs.front()->prefix(), " (", DTypeName(inputs.front()->dtype()),
          "): all inputs must have the same dtype; re-preprocess with the same tokenizer"));
    }
    inputs.push_back(std::move(ds));
  }
  MT_ASSIGN_OR_RETURN(std::unique_ptr<IndexedDatasetWriter> writer,
                      IndexedDatasetWriter::Create(output_prefix, inputs.front()->dtype()));
  for (const auto& ds : inputs) MT_RETURN_IF_ERROR(writer->Append(*ds));
  return writer->Finalize();
}

}  // namespace mt::data
