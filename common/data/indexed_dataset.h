// Megatron-LM's indexed dataset ("mmap", MMIDIDX): token sequences in `<prefix>.bin`, their
// lengths, byte offsets and document boundaries in `<prefix>.idx`. Byte-level layout: FORMAT.md.
// Files written here are read by Megatron-LM and the other way round.
//
// Sequences and documents, as in Megatron's preprocess_data.py: each document is one or more
// sequences (one per document, or one per sentence with --split-sentences); the index lists,
// for each document, the number of its first sequence. The end-of-document token, if any, is
// part of the tokens the caller adds (Megatron's --append-eod), not of this format.
//
//   MT_ASSIGN_OR_RETURN(auto w, IndexedDatasetWriter::Create("out/corpus", OptimalDType(50257)));
//   for (...) MT_RETURN_IF_ERROR(w->AddDocument(ids));   // ids end with eod
//   MT_RETURN_IF_ERROR(w->Finalize());                     // now out/corpus.{bin,idx} exist
//
//   MT_ASSIGN_OR_RETURN(auto ds, IndexedDataset::Create("out/corpus"));
//   MT_ASSIGN_OR_RETURN(std::vector<int32_t> t, ds->Get(/*sequence=*/0, /*offset=*/10, 5));
#ifndef MT_COMMON_DATA_INDEXED_DATASET_H_
#define MT_COMMON_DATA_INDEXED_DATASET_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace mt::data {

// Element types, with Megatron's codes (megatron/core/datasets/indexed_dataset.py, DType).
enum class DType : uint8_t {
  kUInt8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUInt16 = 8,
};

bool IsValidDTypeCode(uint8_t code);
size_t DTypeSize(DType dtype);             // bytes per element
absl::string_view DTypeName(DType dtype);  // "uint16", "int32", ...
// Megatron's DType.optimal_dtype: uint16 when the vocabulary has fewer than 65500 tokens,
// else int32.
DType OptimalDType(int64_t vocab_size);

std::string IndexPath(absl::string_view prefix);  // prefix + ".idx"
std::string DataPath(absl::string_view prefix);   // prefix + ".bin"

inline constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kIndexVersion = 1;
// magic (9) + version (8) + dtype (1) + sequence count (8) + document-index count (8).
inline constexpr size_t kIndexHeaderBytes = 34;

// Reader: both files memory-mapped read-only; Create checks the whole index against the data
// file first (magic, version, dtype, sizes, contiguous offsets, document indices), so a dataset
// that opens can be read anywhere without further checks. Thread-safe: immutable once created.
class IndexedDataset {
 public:
  static absl::StatusOr<std::unique_ptr<IndexedDataset>> Create(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  DType dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  // Documents; the index stores num_documents() + 1 entries (it starts with 0).
  int64_t num_documents() const { return num_doc_indices_ - 1; }
  int64_t num_tokens() const { return num_tokens_; }  // over all sequences
  uint64_t data_bytes() const { return data_size_; }  // size of the .bin

  // Index entries; each aborts on an index out of range.
  int32_t sequence_length(int64_t sequence) const;   // tokens
  int64_t sequence_pointer(int64_t sequence) const;  // byte offset of its first token in .bin
  // The first sequence of document `document`, for document in [0, num_documents()];
  // document_index(num_documents()) is one past the last sequence of the last document.
  int64_t document_index(int64_t document) const;

  // Copies of the whole arrays (the file's are not aligned for direct access).
  std::vector<int32_t> SequenceLengths() const;
  std::vector<int64_t> DocumentIndices() const;

  // Tokens [offset, offset + length) of one sequence; length -1 means to its end. OutOfRange
  // if the span leaves the sequence. Megatron's IndexedDataset.get(idx, offset, length).
  absl::StatusOr<std::vector<int32_t>> Get(int64_t sequence, int64_t offset = 0,
                                           int64_t length = -1) const;
  // The same into out[0, length) (length >= 0). Values that are not int32 (possible only with
  // the int64 and float dtypes) give InvalidArgument.
  absl::Status Read(int64_t sequence, int64_t offset, int64_t length, int32_t* out) const;
  // The raw little-endian elements of one sequence, as stored.
  absl::string_view RawSequence(int64_t sequence) const;
  // The whole .bin, as stored.
  absl::string_view RawData() const {
    return data_ == nullptr ? absl::string_view() : absl::string_view(data_, data_size_);
  }

 private:
  IndexedDataset() = default;
  absl::Status Open(const std::string& prefix);
  // Checks the mapped files before any read (FORMAT.md): the header, then every sequence's
  // place in the .bin, then the document index. Sets the counts and the arrays' pointers.
  absl::Status Validate();
  absl::Status ValidateHeader();
  absl::Status ValidateSequences();
  absl::Status ValidateDocumentIndex() const;
  // A DataLossError naming the index file, `what` is wrong, and how to rebuild it.
  absl::Status Corrupt(absl::string_view what) const;

  std::string prefix_;
  DType dtype_ = DType::kUInt16;
  int64_t num_sequences_ = 0;
  int64_t num_doc_indices_ = 0;
  int64_t num_tokens_ = 0;
  const char* index_ = nullptr;  // mapped .idx
  uint64_t index_size_ = 0;
  const char* data_ = nullptr;  // mapped .bin (nullptr when empty)
  uint64_t data_size_ = 0;
  const char* lengths_ = nullptr;   // int32[N], inside index_
  const char* pointers_ = nullptr;  // int64[N]
  const char* doc_idx_ = nullptr;   // int64[D]
};

// Writer: streams tokens to a temporary .bin, keeps the lengths and document boundaries in
// memory (12 bytes per sequence), and Finalize() writes the .idx. Both files live under
// temporary names until Finalize renames them into place (.bin first, .idx last, after removing
// any old .idx), so an interrupted run never leaves a complete-looking pair; a writer destroyed
// before Finalize removes its temporary files. After the first error every call returns it.
// Thread-compatible.
class IndexedDatasetWriter {
 public:
  static absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> Create(const std::string& prefix,
                                                                      DType dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one sequence (Megatron's add_item). Every token must fit the dtype.
  absl::Status AddSequence(absl::Span<const int32_t> tokens);
  // Closes the current document: its sequences are those added since the last EndDocument
  // (Megatron's end_document; a document with no sequence is allowed and is empty).
  absl::Status EndDocument();
  // One document of one sequence (none when tokens is empty, as in preprocess_data.py).
  absl::Status AddDocument(absl::Span<const int32_t> tokens);
  // Appends every sequence and document of another dataset of the same dtype, copying its
  // .bin (Megatron's add_index, used by merge_datasets.py).
  absl::Status Append(const IndexedDataset& other);
  // Flushes, fsyncs and renames both files into place.
  absl::Status Finalize();

  DType dtype() const { return dtype_; }
  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(doc_idx_.size()) - 1; }
  int64_t num_tokens() const { return static_cast<int64_t>(data_bytes_ / DTypeSize(dtype_)); }

 private:
  IndexedDatasetWriter(std::string prefix, DType dtype);
  absl::Status Check();
  absl::Status WriteData(const char* bytes, size_t n);
  absl::Status Flush();
  // Finalize's parts: the .idx written to `fd` (idx_tmp_) and fsynced; then the old .idx
  // removed, the .bin and the new .idx renamed into place, in that order.
  absl::Status WriteIndex(int fd);
  absl::Status RenameIntoPlace();
  void Abandon();

  const std::string prefix_;
  const DType dtype_;
  std::string bin_tmp_;
  std::string idx_tmp_;
  int bin_fd_ = -1;
  std::string buffer_;
  uint64_t data_bytes_ = 0;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_idx_ = {0};
  absl::Status status_;
  bool finalized_ = false;
};

// Megatron's tools/merge_datasets.py: concatenates the datasets at `input_prefixes` (same dtype)
// into `output_prefix`, sequences and documents in order.
absl::Status MergeIndexedDatasets(absl::Span<const std::string> input_prefixes,
                                  const std::string& output_prefix);

namespace internal {
// Byte offset of every sequence given their lengths: 0, l0*size, (l0+l1)*size, ...; fails on
// a negative length or if an offset would pass INT64_MAX. Exposed for tests of the 64-bit math.
absl::StatusOr<std::vector<int64_t>> SequencePointers(absl::Span<const int32_t> lengths,
                                                      size_t element_size);
}  // namespace internal

}  // namespace mt::data

#endif  // MT_COMMON_DATA_INDEXED_DATASET_H_
