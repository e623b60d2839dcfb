#include "common/spec/spec_internal.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::spec::internal {
namespace {

using ::mt::testing::IsOk;
using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

TEST(SpecInternalTest, ParseInt) {
  EXPECT_EQ(*ParseInt("12", 0, 100), 12);
  EXPECT_EQ(*ParseInt("-3", -5, 5), -3);
  EXPECT_EQ(*ParseInt(" 7 ", 0, 10), 7);
  EXPECT_THAT(ParseInt("twelve", 0, 100),
              StatusIs(kInvalid, "expected an integer, got \"twelve\""));
  EXPECT_THAT(ParseInt("1.5", 0, 100), StatusIs(kInvalid, "expected an integer, got \"1.5\""));
  EXPECT_THAT(ParseInt("1e5", 0, 1000000), StatusIs(kInvalid, HasSubstr("expected an integer")));
  EXPECT_THAT(ParseInt("", 0, 1), StatusIs(kInvalid, "expected an integer, got \"\""));
  EXPECT_THAT(ParseInt("3000000000", INT32_MIN, INT32_MAX),
              StatusIs(kInvalid, "3000000000 is out of range (-2147483648..2147483647)"));
  EXPECT_THAT(ParseInt("99999999999999999999", INT64_MIN, INT64_MAX),
              StatusIs(kInvalid, HasSubstr("99999999999999999999 is out of range")));
  EXPECT_THAT(ParseInt("101", 0, 100), StatusIs(kInvalid, "101 is out of range (0..100)"));
}

TEST(SpecInternalTest, ParseUint64) {
  EXPECT_EQ(*ParseUint64("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  EXPECT_THAT(ParseUint64("-1"), StatusIs(kInvalid, HasSubstr("-1 is out of range (0..")));
  EXPECT_THAT(ParseUint64("x"), StatusIs(kInvalid, "expected a non-negative integer, got \"x\""));
}

TEST(SpecInternalTest, ParseDouble) {
  EXPECT_EQ(*ParseDouble("1.5e-4"), 1.5e-4);
  EXPECT_EQ(*ParseDouble("3"), 3.0);
  EXPECT_EQ(*ParseDouble("-0.5"), -0.5);
  EXPECT_EQ(*ParseDouble(".5"), 0.5);
  for (const char* bad : {"abc", "inf", "nan", "0x1p3", "1,5", "", ".inf"}) {
    EXPECT_THAT(ParseDouble(bad), StatusIs(kInvalid, HasSubstr("expected a number"))) << bad;
  }
  EXPECT_THAT(ParseDouble("1e999"), StatusIs(kInvalid, "1e999 is out of range for a number"));
}

TEST(SpecInternalTest, ParseBool) {
  for (const char* t : {"true", "True", "TRUE", "yes", "on"}) EXPECT_TRUE(*ParseBool(t)) << t;
  for (const char* f : {"false", "False", "no", "off"}) EXPECT_FALSE(*ParseBool(f)) << f;
  EXPECT_THAT(ParseBool("1"), StatusIs(kInvalid, "expected true or false, got \"1\""));
}

TEST(SpecInternalTest, EnumNames) {
  EXPECT_EQ(EnumShortName(mt::v1::Precision_descriptor()->FindValueByName("PRECISION_BF16")),
            "bf16");
  EXPECT_EQ(EnumShortName(mt::v1::LrDecayStyle_descriptor()->FindValueByName(
                "LR_DECAY_STYLE_INVERSE_SQUARE_ROOT")),
            "inverse_square_root");
  const auto* style = mt::v1::LrDecayStyle_descriptor();
  for (const char* text :
       {"inverse_square_root", "inverse-square-root", "INVERSE_SQUARE_ROOT",
        "LR_DECAY_STYLE_INVERSE_SQUARE_ROOT", "lr_decay_style_inverse_square_root"}) {
    auto v = ParseEnum(style, text);
    ASSERT_THAT(v, IsOk()) << text;
    EXPECT_EQ((*v)->number(), mt::v1::LR_DECAY_STYLE_INVERSE_SQUARE_ROOT) << text;
  }
  EXPECT_THAT(ParseEnum(mt::v1::Precision_descriptor(), "fp8"),
              StatusIs(kInvalid, "expected one of fp32, fp16, bf16, got \"fp8\""));
  auto tok = ParseEnum(mt::v1::TokenizerType_descriptor(), "GPT2BPETokenizer");
  ASSERT_THAT(tok, IsOk());
  EXPECT_EQ((*tok)->number(), mt::v1::TOKENIZER_TYPE_GPT2_BPE);
}

TEST(SpecInternalTest, FormatDoubleIsShortestAndReadsBack) {
  EXPECT_EQ(FormatDouble(0.1), "0.1");
  EXPECT_EQ(FormatDouble(1), "1.0");
  EXPECT_EQ(FormatDouble(1.5e-4), "0.00015");
  EXPECT_EQ(FormatDouble(1e-8), "1.0e-08");
  EXPECT_EQ(FormatDouble(6e-5), "6.0e-05");
  EXPECT_EQ(FormatDouble(4294967296.0), "4294967296.0");
  EXPECT_EQ(FormatDouble(0.999), "0.999");
  EXPECT_EQ(FormatDouble(-2.5), "-2.5");
  EXPECT_EQ(FormatDouble(10), "10.0");
  EXPECT_EQ(FormatDouble(-200), "-200.0");
  EXPECT_EQ(FormatDouble(1e15), "1000000000000000.0");
  EXPECT_EQ(FormatDouble(1e20), "1.0e+20");
  for (double v : {0.1, 10.0, 120.0, 1e15 + 1, 1.0 / 3, 2.0 / 3 * 1e-7, 1e300, 5e-324,
                   0.30000000000000004, 123456789.123}) {
    EXPECT_EQ(std::strtod(FormatDouble(v).c_str(), nullptr), v) << FormatDouble(v);
  }
}

TEST(SpecInternalTest, EditDistanceAndNearestName) {
  EXPECT_EQ(EditDistance("", "abc"), 3);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_EQ(EditDistance("same", "same"), 0);
  const std::vector<std::string> names = {"micro_batch_size", "global_batch_size", "lr", "min_lr"};
  EXPECT_EQ(NearestName("micro_batch", names), "micro_batch_size");  // prefix
  EXPECT_EQ(NearestName("mni_lr", names), "min_lr");                 // two edits
  EXPECT_EQ(NearestName("zzzzzzzz", names), "");
  EXPECT_EQ(NearestName("--num-layer", {"--num-layers", "--num-workers"}), "--num-layers");
}

TEST(SpecInternalTest, Utf8) {
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xc3"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
}

TEST(SpecInternalTest, ShellMetacharacters) {
  EXPECT_EQ(FindShellMetacharacters("/data/a_text-document.v2"), "");
  EXPECT_EQ(FindShellMetacharacters("/data/my (copy) & more"), "");
  EXPECT_EQ(FindShellMetacharacters("a$(b)"), "$(");
  EXPECT_EQ(FindShellMetacharacters("a${b}"), "${");
  EXPECT_EQ(FindShellMetacharacters("`x`"), "`");
  EXPECT_EQ(FindShellMetacharacters("a;b|c"), ";");  // the first one
  EXPECT_EQ(FindShellMetacharacters("a|b;c"), "|");
  EXPECT_EQ(FindShellMetacharacters("a && b"), "&&");
  EXPECT_EQ(FindShellMetacharacters("a > b"), ">");
  EXPECT_EQ(FindShellMetacharacters("a < b"), "<");
  EXPECT_EQ(FindShellMetacharacters("a\nb"), "\n");
  EXPECT_EQ(FindShellMetacharacters("a\rb"), "\r");
}

TEST(SpecInternalTest, ParseSplit) {
  EXPECT_EQ(*ParseSplit("969,30,1"), (std::vector<double>{969, 30, 1}));
  EXPECT_EQ(*ParseSplit("100"), (std::vector<double>{100}));
  EXPECT_EQ(*ParseSplit("0.9,0.1"), (std::vector<double>{0.9, 0.1}));
  for (const char* bad : {"", "a", "1,2,3,4", "0,0", "-1,2", "1,,2", "969/30/1"}) {
    EXPECT_THAT(ParseSplit(bad), StatusIs(kInvalid, HasSubstr("expected one to three"))) << bad;
  }
}

TEST(SpecInternalTest, ParseFlatDataPaths) {
  auto where = [](int i) { return i < 0 ? std::string("x") : "x[" + std::to_string(i) + "]"; };
  auto one = ParseFlatDataPaths({"a"}, where);
  ASSERT_THAT(one, IsOk());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].weight(), 1.0);
  EXPECT_EQ((*one)[0].prefix(), "a");
  auto two = ParseFlatDataPaths({"0.3", "a", "0.7", "b"}, where);
  ASSERT_THAT(two, IsOk());
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[1].weight(), 0.7);
  EXPECT_EQ((*two)[1].prefix(), "b");
  EXPECT_THAT(ParseFlatDataPaths({}, where), StatusIs(kInvalid, "x: no dataset prefix given"));
  EXPECT_THAT(ParseFlatDataPaths({"0.3", "a", "b"}, where),
              StatusIs(kInvalid,
                       "x: expected one prefix or weight-prefix pairs (w1 p1 w2 p2 "
                       "...), got 3 values"));
  EXPECT_THAT(ParseFlatDataPaths({"a", "b"}, where),
              StatusIs(kInvalid,
                       "x[0]: expected a blend weight (a number) before each prefix, "
                       "got \"a\"; write weight-prefix pairs (w1 p1 w2 p2 ...)"));
}

TEST(SpecInternalTest, MutableFieldByPath) {
  mt::v1::JobSpec spec;
  auto found = MutableFieldByPath(&spec, "data.tokenizer.vocab_file");
  ASSERT_THAT(found, IsOk());
  EXPECT_EQ(found->second->name(), "vocab_file");
  EXPECT_TRUE(spec.data().has_tokenizer());
  EXPECT_THAT(MutableFieldByPath(&spec, "model.nope"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("no field model.nope")));
  EXPECT_THAT(MutableFieldByPath(&spec, "name.x"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("is not a message field")));
}

TEST(SpecInternalTest, SetScalarFromTextByFieldType) {
  mt::v1::JobSpec spec;
  const auto* d = mt::v1::TrainingSpec::descriptor();
  auto* t = spec.mutable_training();
  ASSERT_THAT(SetScalarFromText(t, d->FindFieldByName("micro_batch_size"), "8"), IsOk());
  ASSERT_THAT(SetScalarFromText(t, d->FindFieldByName("train_iters"), "5000000000"), IsOk());
  ASSERT_THAT(SetScalarFromText(t, d->FindFieldByName("lr"), "3e-4"), IsOk());
  ASSERT_THAT(SetScalarFromText(t, d->FindFieldByName("seed"), "18446744073709551615"), IsOk());
  ASSERT_THAT(SetScalarFromText(t, d->FindFieldByName("precision"), "bf16"), IsOk());
  ASSERT_THAT(
      SetScalarFromText(t, d->FindFieldByName("accumulate_allreduce_grads_in_fp32"), "true"),
      IsOk());
  ASSERT_THAT(SetScalarFromText(t, d->FindFieldByName("weight_decay"), "0"), IsOk());
  EXPECT_EQ(t->micro_batch_size(), 8);
  EXPECT_EQ(t->train_iters(), 5000000000);
  EXPECT_EQ(t->lr(), 3e-4);
  EXPECT_EQ(t->seed(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(t->precision(), mt::v1::PRECISION_BF16);
  EXPECT_TRUE(t->accumulate_allreduce_grads_in_fp32());
  EXPECT_TRUE(t->has_weight_decay());
  EXPECT_EQ(t->weight_decay(), 0);
  EXPECT_THAT(SetScalarFromText(t, d->FindFieldByName("micro_batch_size"), "3000000000"),
              StatusIs(kInvalid, HasSubstr("out of range")));
  auto* p = spec.mutable_parallel();
  const auto* pd = mt::v1::ParallelSpec::descriptor();
  ASSERT_THAT(SetScalarFromText(p, pd->FindFieldByName("pipeline_layer_split"), "3"), IsOk());
  ASSERT_THAT(SetScalarFromText(p, pd->FindFieldByName("pipeline_layer_split"), "5"), IsOk());
  EXPECT_THAT(p->pipeline_layer_split(), ::testing::ElementsAre(3, 5));
  EXPECT_THAT(
      SetScalarFromText(&spec, mt::v1::JobSpec::descriptor()->FindFieldByName("name"), "\xff"),
      StatusIs(kInvalid, "expected UTF-8 text, got \"\\xff\""));
}

}  // namespace
}  // namespace mt::spec::internal
