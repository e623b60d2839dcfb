#include "common/data/indexed_dataset.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/paths.h"
#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::data {
namespace {

using ::mt::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

MATCHER_P(IsOkAndHolds, matcher, "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(matcher, *arg, result_listener);
}

std::string ReadAll(const std::string& path) {
  auto s = ReadFile(path, 1ull << 30);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

void WriteAll(const std::string& path, const std::string& bytes) {
  ASSERT_THAT(WriteFileAtomically(path, bytes), ::mt::testing::IsOk());
}

// A fresh directory per test.
class IndexedDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testutil::MakeTempDir("data_test");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { EXPECT_EQ(std::system(("rm -rf '" + dir_ + "'").c_str()), 0); }
  std::string Prefix(absl::string_view name) const { return absl::StrCat(dir_, "/", name); }

  std::string dir_;
};

// Little-endian encoders for building files by hand, straight from FORMAT.md.
void PutU8(std::string* s, uint8_t v) { s->push_back(static_cast<char>(v)); }
void PutLE(std::string* s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// The example of FORMAT.md: uint16 tokens; document 0 = sequences 0 and 1 (a sentence split),
// where sequence 1 is empty; document 1 = sequence 2.
std::string SpecIndexBytes() {
  std::string idx;
  idx += std::string("MMIDIDX\0\0", 9);
  PutLE(&idx, 1, 8);  // version
  PutU8(&idx, 8);     // dtype uint16
  PutLE(&idx, 3, 8);  // sequence count
  PutLE(&idx, 3, 8);  // document-index count (2 documents + 1)
  PutLE(&idx, 3, 4);  // lengths
  PutLE(&idx, 0, 4);
  PutLE(&idx, 2, 4);
  PutLE(&idx, 0, 8);  // pointers (bytes)
  PutLE(&idx, 6, 8);
  PutLE(&idx, 6, 8);
  PutLE(&idx, 0, 8);  // document indices
  PutLE(&idx, 2, 8);
  PutLE(&idx, 3, 8);
  return idx;
}
std::string SpecDataBytes() {
  std::string bin;
  for (uint64_t t : {1, 2, 65535, 7, 50256}) PutLE(&bin, t, 2);
  return bin;
}

TEST_F(IndexedDatasetTest, ReadsIndexBuiltByHandFromTheSpecification) {
  const std::string idx = SpecIndexBytes();
  ASSERT_EQ(idx.size(), 34u + 3 * 4 + 3 * 8 + 3 * 8);
  WriteAll(Prefix("spec.idx"), idx);
  WriteAll(Prefix("spec.bin"), SpecDataBytes());
  MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(Prefix("spec")));
  EXPECT_EQ(ds->dtype(), DType::kUInt16);
  EXPECT_EQ(ds->num_sequences(), 3);
  EXPECT_EQ(ds->num_documents(), 2);
  EXPECT_EQ(ds->num_tokens(), 5);
  EXPECT_EQ(ds->data_bytes(), 10u);
  EXPECT_THAT(ds->SequenceLengths(), ElementsAre(3, 0, 2));
  EXPECT_THAT(ds->DocumentIndices(), ElementsAre(0, 2, 3));
  EXPECT_EQ(ds->sequence_pointer(0), 0);
  EXPECT_EQ(ds->sequence_pointer(1), 6);
  EXPECT_EQ(ds->sequence_pointer(2), 6);
  EXPECT_EQ(ds->document_index(1), 2);
  EXPECT_THAT(ds->Get(0), IsOkAndHolds(ElementsAre(1, 2, 65535)));
  MT_ASSERT_OK_AND_ASSIGN(auto seq1, ds->Get(1));
  EXPECT_TRUE(seq1.empty());
  MT_ASSERT_OK_AND_ASSIGN(auto tail, ds->Get(2, 1, 1));
  EXPECT_THAT(tail, ElementsAre(50256));
  EXPECT_EQ(ds->RawSequence(2), std::string("\x07\x00\x50\xC4", 4));
}

TEST_F(IndexedDatasetTest, WriterProducesTheSpecificationBytes) {
  MT_ASSERT_OK_AND_ASSIGN(auto w, IndexedDatasetWriter::Create(Prefix("w"), DType::kUInt16));
  MT_ASSERT_OK(w->AddSequence({1, 2, 65535}));
  MT_ASSERT_OK(w->AddSequence({}));
  MT_ASSERT_OK(w->EndDocument());
  MT_ASSERT_OK(w->AddDocument({7, 50256}));
  EXPECT_EQ(w->num_sequences(), 3);
  EXPECT_EQ(w->num_documents(), 2);
  EXPECT_EQ(w->num_tokens(), 5);
  MT_ASSERT_OK(w->Finalize());
  EXPECT_EQ(ReadAll(Prefix("w.idx")), SpecIndexBytes());
  EXPECT_EQ(ReadAll(Prefix("w.bin")), SpecDataBytes());
  EXPECT_THAT(w->AddDocument({1}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("already finalized")));
}

TEST(DTypeTest, CodesSizesAndOptimalChoice) {
  EXPECT_EQ(OptimalDType(50257), DType::kUInt16);
  EXPECT_EQ(OptimalDType(65499), DType::kUInt16);
  EXPECT_EQ(OptimalDType(65500), DType::kInt32);
  EXPECT_EQ(OptimalDType(128256), DType::kInt32);
  const std::pair<DType, size_t> sizes[] = {
      {DType::kUInt8, 1}, {DType::kInt8, 1},    {DType::kInt16, 2},   {DType::kInt32, 4},
      {DType::kInt64, 8}, {DType::kFloat64, 8}, {DType::kFloat32, 4}, {DType::kUInt16, 2}};
  for (const auto& [dtype, size] : sizes) EXPECT_EQ(DTypeSize(dtype), size) << DTypeName(dtype);
  EXPECT_EQ(static_cast<int>(DType::kUInt16), 8);
  EXPECT_FALSE(IsValidDTypeCode(0));
  EXPECT_FALSE(IsValidDTypeCode(9));
  EXPECT_EQ(IndexPath("a/b"), "a/b.idx");
  EXPECT_EQ(DataPath("a/b"), "a/b.bin");
}

// Random documents, some split into several sequences.
struct Corpus {
  std::vector<std::vector<std::vector<int32_t>>> docs;  // doc -> sequences -> tokens
};
Corpus RandomCorpus(uint64_t seed, int max_token, int num_docs) {
  std::mt19937_64 rng(seed);
  Corpus c;
  for (int d = 0; d < num_docs; ++d) {
    std::vector<std::vector<int32_t>> doc;
    const int seqs = static_cast<int>(rng() % 4);  // 0..3, so empty documents too
    for (int s = 0; s < seqs; ++s) {
      std::vector<int32_t> t(rng() % 300);
      for (auto& x : t) x = static_cast<int32_t>(rng() % (static_cast<uint64_t>(max_token) + 1));
      doc.push_back(std::move(t));
    }
    c.docs.push_back(std::move(doc));
  }
  return c;
}

void WriteCorpus(const Corpus& c, const std::string& prefix, DType dtype) {
  MT_ASSERT_OK_AND_ASSIGN(auto w, IndexedDatasetWriter::Create(prefix, dtype));
  for (const auto& doc : c.docs) {
    for (const auto& seq : doc) MT_ASSERT_OK(w->AddSequence(seq));
    MT_ASSERT_OK(w->EndDocument());
  }
  MT_ASSERT_OK(w->Finalize());
}

void ExpectCorpus(const IndexedDataset& ds, const Corpus& c) {
  int64_t seq = 0;
  int64_t tokens = 0;
  ASSERT_EQ(ds.num_documents(), static_cast<int64_t>(c.docs.size()));
  for (size_t d = 0; d < c.docs.size(); ++d) {
    ASSERT_EQ(ds.document_index(d), seq);
    for (const auto& want : c.docs[d]) {
      ASSERT_EQ(ds.sequence_length(seq), static_cast<int32_t>(want.size()));
      MT_ASSERT_OK_AND_ASSIGN(auto got, ds.Get(seq));
      ASSERT_EQ(got, want) << "sequence " << seq;
      if (want.size() >= 3) {
        MT_ASSERT_OK_AND_ASSIGN(auto mid, ds.Get(seq, 1, 2));
        ASSERT_THAT(mid, ElementsAre(want[1], want[2]));
        std::vector<int32_t> buf(want.size() - 1, -1);
        MT_ASSERT_OK(ds.Read(seq, 1, static_cast<int64_t>(buf.size()), buf.data()));
        ASSERT_EQ(buf, std::vector<int32_t>(want.begin() + 1, want.end()));
      }
      tokens += static_cast<int64_t>(want.size());
      ++seq;
    }
  }
  EXPECT_EQ(ds.document_index(ds.num_documents()), seq);
  EXPECT_EQ(ds.num_sequences(), seq);
  EXPECT_EQ(ds.num_tokens(), tokens);
}

TEST_F(IndexedDatasetTest, RoundTripUInt16) {
  const Corpus c = RandomCorpus(1, 65535, 300);
  WriteCorpus(c, Prefix("u16"), OptimalDType(50257));
  MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(Prefix("u16")));
  EXPECT_EQ(ds->dtype(), DType::kUInt16);
  ExpectCorpus(*ds, c);
  EXPECT_EQ(ds->data_bytes(), static_cast<uint64_t>(ds->num_tokens()) * 2);
}

TEST_F(IndexedDatasetTest, RoundTripInt32) {
  const Corpus c = RandomCorpus(2, 2000000000, 300);
  WriteCorpus(c, Prefix("i32"), OptimalDType(200000));
  MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(Prefix("i32")));
  EXPECT_EQ(ds->dtype(), DType::kInt32);
  ExpectCorpus(*ds, c);
}

TEST_F(IndexedDatasetTest, EveryDTypeRoundTrips) {
  const DType all[] = {DType::kUInt8, DType::kInt8,    DType::kInt16,   DType::kInt32,
                       DType::kInt64, DType::kFloat64, DType::kFloat32, DType::kUInt16};
  for (DType dtype : all) {
    const Corpus c = RandomCorpus(3, 127, 40);  // fits every dtype
    const std::string prefix = Prefix(DTypeName(dtype));
    WriteCorpus(c, prefix, dtype);
    MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(prefix));
    EXPECT_EQ(ds->dtype(), dtype);
    ExpectCorpus(*ds, c);
    EXPECT_EQ(ReadAll(prefix + ".idx")[17], static_cast<char>(dtype));
  }
}

TEST_F(IndexedDatasetTest, TokensThatDoNotFitAreRejected) {
  MT_ASSERT_OK_AND_ASSIGN(auto w, IndexedDatasetWriter::Create(Prefix("x"), DType::kUInt16));
  EXPECT_THAT(w->AddSequence({1, 65536}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("65536"), HasSubstr("uint16"), HasSubstr("OptimalDType"))));
  EXPECT_THAT(w->AddSequence({-1}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("-1")));
  // The writer stays usable; nothing of the rejected sequences was written.
  MT_ASSERT_OK(w->AddDocument({5, 6}));
  MT_ASSERT_OK(w->Finalize());
  MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(Prefix("x")));
  EXPECT_EQ(ds->num_sequences(), 1);
  EXPECT_THAT(ds->Get(0), IsOkAndHolds(ElementsAre(5, 6)));
}

TEST_F(IndexedDatasetTest, NonIntegerValuesInFloatAndInt64DataAreErrors) {
  // float32 data holding 1.5, and int64 data holding 2^40: valid files, but not token ids.
  for (const auto& [dtype, raw] :
       {std::pair<DType, std::string>{DType::kFloat32, std::string("\x00\x00\xC0\x3F", 4)},
        {DType::kInt64, std::string("\x00\x00\x00\x00\x00\x01\x00\x00", 8)}}) {
    std::string idx = std::string("MMIDIDX\0\0", 9);
    PutLE(&idx, 1, 8);
    PutU8(&idx, static_cast<uint8_t>(dtype));
    PutLE(&idx, 1, 8);
    PutLE(&idx, 2, 8);
    PutLE(&idx, 1, 4);
    PutLE(&idx, 0, 8);
    PutLE(&idx, 0, 8);
    PutLE(&idx, 1, 8);
    const std::string prefix = Prefix(DTypeName(dtype));
    WriteAll(prefix + ".idx", idx);
    WriteAll(prefix + ".bin", raw);
    MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(prefix));
    EXPECT_EQ(ds->RawSequence(0), raw);
    EXPECT_THAT(ds->Get(0), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("is not an int32 token id")));
  }
}

TEST_F(IndexedDatasetTest, GetOutOfRange) {
  WriteAll(Prefix("s.idx"), SpecIndexBytes());
  WriteAll(Prefix("s.bin"), SpecDataBytes());
  MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(Prefix("s")));
  EXPECT_THAT(ds->Get(3), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("sequence 3")));
  EXPECT_THAT(ds->Get(-1), StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
  EXPECT_THAT(ds->Get(0, 2, 2), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("leave")));
  EXPECT_THAT(ds->Get(0, 4), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("leave its 3")));
  EXPECT_THAT(ds->Get(0, 0, -2),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("negative length")));
  EXPECT_THAT(ds->Get(0, -1, 1), StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
  MT_ASSERT_OK_AND_ASSIGN(auto none, ds->Get(0, 3));
  EXPECT_TRUE(none.empty());
}

// Each corruption of a valid pair, and the error it must give.
struct Corruption {
  const char* name;
  std::function<void(std::string* idx, std::string* bin)> mutate;
  absl::StatusCode code;
  const char* message;
};

void SetLE(std::string* s, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) (*s)[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

TEST_F(IndexedDatasetTest, CorruptionsGiveClearErrors) {
  // Offsets in SpecIndexBytes(): lengths at 34, pointers at 46, document indices at 70.
  const Corruption cases[] = {
      {"short header", [](std::string* i, std::string*) { i->resize(20); },
       absl::StatusCode::kDataLoss, "truncated: 20 bytes, but the header alone is 34"},
      {"bad magic", [](std::string* i, std::string*) { (*i)[0] = 'X'; },
       absl::StatusCode::kInvalidArgument, "not a Megatron MMIDIDX index"},
      {"legacy magic", [](std::string* i, std::string*) { i->replace(0, 9, "TNTIDX\0\0\0", 9); },
       absl::StatusCode::kInvalidArgument, "older lazy/cached format"},
      {"version", [](std::string* i, std::string*) { SetLE(i, 9, 2, 8); },
       absl::StatusCode::kInvalidArgument, "index version 2; only version 1"},
      {"dtype 0", [](std::string* i, std::string*) { (*i)[17] = 0; },
       absl::StatusCode::kInvalidArgument, "unknown dtype code 0"},
      {"dtype 9", [](std::string* i, std::string*) { (*i)[17] = 9; },
       absl::StatusCode::kInvalidArgument, "unknown dtype code 9"},
      {"truncated arrays", [](std::string* i, std::string*) { i->pop_back(); },
       absl::StatusCode::kDataLoss, "truncated: the header promises 3 sequences"},
      {"huge count", [](std::string* i, std::string*) { SetLE(i, 18, uint64_t{1} << 62, 8); },
       absl::StatusCode::kDataLoss, "truncated"},
      {"huge doc count", [](std::string* i, std::string*) { SetLE(i, 26, ~uint64_t{0}, 8); },
       absl::StatusCode::kDataLoss, "truncated"},
      {"trailing bytes", [](std::string* i, std::string*) { i->append("xy"); },
       absl::StatusCode::kDataLoss, "2 unexpected bytes after the document indices"},
      {"negative length", [](std::string* i, std::string*) { SetLE(i, 38, 0xFFFFFFFF, 4); },
       absl::StatusCode::kDataLoss, "sequence 1 has a negative length -1"},
      {"first pointer", [](std::string* i, std::string*) { SetLE(i, 46, 2, 8); },
       absl::StatusCode::kDataLoss, "sequence 0 starts at byte 2 of the .bin, but the first"},
      {"gap", [](std::string* i, std::string*) { SetLE(i, 54, 8, 8); }, absl::StatusCode::kDataLoss,
       "sequence 1 starts at byte 8 of the .bin, but the previous"},
      {"backwards", [](std::string* i, std::string*) { SetLE(i, 62, 4, 8); },
       absl::StatusCode::kDataLoss, "sequence 2 starts at byte 4"},
      {"bin too long", [](std::string*, std::string* b) { b->append("\x01\x00", 2); },
       absl::StatusCode::kDataLoss, "has 12 bytes but its index"},
      {"bin truncated", [](std::string*, std::string* b) { b->pop_back(); },
       absl::StatusCode::kDataLoss, "do not belong together"},
      {"length vs bin", [](std::string* i, std::string*) { SetLE(i, 42, 3, 4); },
       absl::StatusCode::kDataLoss, "describes 12"},
      {"first doc index", [](std::string* i, std::string*) { SetLE(i, 70, 1, 8); },
       absl::StatusCode::kDataLoss, "the document index starts with 1, not 0"},
      {"doc index past end", [](std::string* i, std::string*) { SetLE(i, 86, 4, 8); },
       absl::StatusCode::kDataLoss, "document index entry 2 is 4: out of range"},
      {"doc index decreasing",
       [](std::string* i, std::string*) {
         SetLE(i, 78, 3, 8);
         SetLE(i, 86, 2, 8);
       },
       absl::StatusCode::kDataLoss, "document index entry 2 is 2: out of range"},
      {"doc index negative", [](std::string* i, std::string*) { SetLE(i, 78, ~uint64_t{0}, 8); },
       absl::StatusCode::kDataLoss, "document index entry 1 is -1"},
      {"no doc index",
       [](std::string* i, std::string*) {
         SetLE(i, 26, 0, 8);
         i->resize(70);
       },
       absl::StatusCode::kDataLoss, "the document index is empty"},
  };
  for (const Corruption& c : cases) {
    std::string idx = SpecIndexBytes();
    std::string bin = SpecDataBytes();
    c.mutate(&idx, &bin);
    const std::string prefix = Prefix("bad");
    WriteAll(prefix + ".idx", idx);
    WriteAll(prefix + ".bin", bin);
    auto ds = IndexedDataset::Create(prefix);
    EXPECT_THAT(ds, StatusIs(c.code, AllOf(HasSubstr(c.message), HasSubstr(prefix)))) << c.name;
    if (!ds.ok() && c.code == absl::StatusCode::kDataLoss) {
      EXPECT_THAT(std::string(ds.status().message()), HasSubstr("mtctl data preprocess")) << c.name;
    }
  }
}

TEST_F(IndexedDatasetTest, MultimodalModesAreAccepted) {
  std::string idx = SpecIndexBytes();
  idx.append(3, '\0');  // one int8 mode per sequence, as Megatron's multimodal writer adds
  WriteAll(Prefix("mm.idx"), idx);
  WriteAll(Prefix("mm.bin"), SpecDataBytes());
  MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(Prefix("mm")));
  EXPECT_EQ(ds->num_sequences(), 3);
}

TEST_F(IndexedDatasetTest, MissingFilesAreNamed) {
  EXPECT_THAT(IndexedDataset::Create(Prefix("none")),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr(Prefix("none.idx")), HasSubstr("<prefix>.idx"))));
  WriteAll(Prefix("half.idx"), SpecIndexBytes());
  EXPECT_THAT(IndexedDataset::Create(Prefix("half")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(Prefix("half.bin"))));
}

TEST_F(IndexedDatasetTest, EmptyDataset) {
  MT_ASSERT_OK_AND_ASSIGN(auto w, IndexedDatasetWriter::Create(Prefix("e"), DType::kUInt16));
  MT_ASSERT_OK(w->Finalize());
  EXPECT_EQ(ReadAll(Prefix("e.bin")), "");
  MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(Prefix("e")));
  EXPECT_EQ(ds->num_sequences(), 0);
  EXPECT_EQ(ds->num_documents(), 0);
  EXPECT_THAT(ds->DocumentIndices(), ElementsAre(0));
  EXPECT_TRUE(ds->RawData().empty());
}

TEST_F(IndexedDatasetTest, InterruptedWriterLeavesNothing) {
  {
    MT_ASSERT_OK_AND_ASSIGN(auto w, IndexedDatasetWriter::Create(Prefix("i"), DType::kUInt16));
    MT_ASSERT_OK(w->AddDocument({1, 2, 3}));
    // While writing, only temporary names exist.
    EXPECT_FALSE(PathExists(Prefix("i.idx")));
    EXPECT_FALSE(PathExists(Prefix("i.bin")));
    EXPECT_TRUE(PathExists(absl::StrCat(Prefix("i.bin"), ".tmp.", ::getpid())));
  }  // destroyed without Finalize
  EXPECT_FALSE(PathExists(Prefix("i.idx")));
  EXPECT_FALSE(PathExists(Prefix("i.bin")));
  EXPECT_FALSE(PathExists(absl::StrCat(Prefix("i.bin"), ".tmp.", ::getpid())));
  EXPECT_FALSE(PathExists(absl::StrCat(Prefix("i.idx"), ".tmp.", ::getpid())));
}

TEST_F(IndexedDatasetTest, FinalizeReplacesAnOldDatasetAndAnAbandonedOneKeepsIt) {
  WriteCorpus(RandomCorpus(5, 100, 10), Prefix("r"), DType::kUInt16);
  const std::string old_idx = ReadAll(Prefix("r.idx"));
  {
    MT_ASSERT_OK_AND_ASSIGN(auto w, IndexedDatasetWriter::Create(Prefix("r"), DType::kUInt16));
    MT_ASSERT_OK(w->AddDocument({9}));
  }
  EXPECT_EQ(ReadAll(Prefix("r.idx")), old_idx);
  MT_ASSERT_OK_AND_ASSIGN(auto old_ds, IndexedDataset::Create(Prefix("r")));
  const Corpus c = RandomCorpus(6, 100, 3);
  WriteCorpus(c, Prefix("r"), DType::kUInt16);
  MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(Prefix("r")));
  ExpectCorpus(*ds, c);
  EXPECT_EQ(old_ds->num_documents(), 10);  // the old mapping stays readable
}

TEST_F(IndexedDatasetTest, MergeConcatenatesSequencesAndDocuments) {
  const Corpus a = RandomCorpus(10, 50000, 50);
  const Corpus b = RandomCorpus(11, 50000, 1);
  const Corpus c = RandomCorpus(12, 50000, 70);
  WriteCorpus(a, Prefix("a"), DType::kUInt16);
  WriteCorpus(b, Prefix("b"), DType::kUInt16);
  WriteCorpus(c, Prefix("c"), DType::kUInt16);
  MT_ASSERT_OK_AND_ASSIGN(auto empty, IndexedDatasetWriter::Create(Prefix("e"), DType::kUInt16));
  MT_ASSERT_OK(empty->Finalize());
  const std::vector<std::string> inputs = {Prefix("a"), Prefix("e"), Prefix("b"), Prefix("c")};
  MT_ASSERT_OK(MergeIndexedDatasets(inputs, Prefix("abc")));
  Corpus all = a;
  all.docs.insert(all.docs.end(), b.docs.begin(), b.docs.end());
  all.docs.insert(all.docs.end(), c.docs.begin(), c.docs.end());
  MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(Prefix("abc")));
  ExpectCorpus(*ds, all);
  // Byte for byte what writing the concatenation directly gives.
  WriteCorpus(all, Prefix("direct"), DType::kUInt16);
  EXPECT_EQ(ReadAll(Prefix("abc.idx")), ReadAll(Prefix("direct.idx")));
  EXPECT_EQ(ReadAll(Prefix("abc.bin")), ReadAll(Prefix("direct.bin")));
}

TEST_F(IndexedDatasetTest, MergeErrors) {
  WriteCorpus(RandomCorpus(1, 100, 3), Prefix("u16"), DType::kUInt16);
  WriteCorpus(RandomCorpus(2, 100, 3), Prefix("i32"), DType::kInt32);
  const std::vector<std::string> mixed = {Prefix("u16"), Prefix("i32")};
  EXPECT_THAT(MergeIndexedDatasets(mixed, Prefix("out")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("int32"), HasSubstr("uint16"), HasSubstr("same dtype"))));
  EXPECT_FALSE(PathExists(Prefix("out.idx")));
  const std::vector<std::string> self = {Prefix("u16")};
  EXPECT_THAT(MergeIndexedDatasets(self, Prefix("u16")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("also an input")));
  const std::vector<std::string> missing = {Prefix("u16"), Prefix("nope")};
  EXPECT_THAT(MergeIndexedDatasets(missing, Prefix("out")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(Prefix("nope.idx"))));
  EXPECT_THAT(MergeIndexedDatasets({}, Prefix("out")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least one")));
}

TEST(SequencePointersTest, SixtyFourBitOffsets) {
  const int32_t kMax = std::numeric_limits<int32_t>::max();
  MT_ASSERT_OK_AND_ASSIGN(auto p, internal::SequencePointers({kMax, kMax, kMax, 1}, 8));
  EXPECT_THAT(p, ElementsAre(0, int64_t{kMax} * 8, int64_t{kMax} * 16, int64_t{kMax} * 24));
  EXPECT_GT(p[1], int64_t{1} << 32);
  EXPECT_THAT(internal::SequencePointers({1, -2}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
}

// A dataset whose second sequence starts past 4 GiB, with the .bin as a sparse file: checks
// that offsets are 64-bit from the index through the mapping to Get.
TEST_F(IndexedDatasetTest, ReadsPastFourGiBInASparseFile) {
  const int64_t len0 = (int64_t{1} << 30) + 5;  // int32 tokens: 4 GiB + 20 bytes
  const int64_t ptr1 = len0 * 4;
  ASSERT_GT(ptr1, int64_t{1} << 32);
  std::string idx = std::string("MMIDIDX\0\0", 9);
  PutLE(&idx, 1, 8);
  PutU8(&idx, 4);  // int32
  PutLE(&idx, 2, 8);
  PutLE(&idx, 3, 8);
  PutLE(&idx, static_cast<uint64_t>(len0), 4);
  PutLE(&idx, 3, 4);
  PutLE(&idx, 0, 8);
  PutLE(&idx, static_cast<uint64_t>(ptr1), 8);
  PutLE(&idx, 0, 8);
  PutLE(&idx, 1, 8);
  PutLE(&idx, 2, 8);
  WriteAll(Prefix("big.idx"), idx);
  const std::string bin = Prefix("big.bin");
  const int fd = ::open(bin.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  if (::ftruncate(fd, ptr1 + 12) != 0) {
    ::close(fd);
    GTEST_SKIP() << "cannot make a sparse 4 GiB file in " << dir_;
  }
  const int32_t tail0[2] = {123456, -7};  // the last two tokens of sequence 0
  const int32_t seq1[3] = {50256, 0, 2147483647};
  ASSERT_EQ(::pwrite(fd, tail0, 8, ptr1 - 8), 8);
  ASSERT_EQ(::pwrite(fd, seq1, 12, ptr1), 12);
  ::close(fd);
  MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(Prefix("big")));
  EXPECT_EQ(ds->data_bytes(), static_cast<uint64_t>(ptr1 + 12));
  EXPECT_EQ(ds->num_tokens(), len0 + 3);
  EXPECT_EQ(ds->sequence_pointer(1), ptr1);
  EXPECT_THAT(ds->Get(1), IsOkAndHolds(ElementsAre(50256, 0, 2147483647)));
  EXPECT_THAT(ds->Get(0, len0 - 3, 3), IsOkAndHolds(ElementsAre(0, 123456, -7)));
  EXPECT_THAT(ds->Get(0, 0, 2), IsOkAndHolds(ElementsAre(0, 0)));
}

}  // namespace
}  // namespace mt::data
