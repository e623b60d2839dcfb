// TFRecord framing and TensorBoard's Event encoding against bytes computed independently (by
// hand from the format's description, checked with a bit-by-bit CRC-32C): if these pass, the
// files we write are framed and encoded the way TensorBoard reads them.
#include "worker/metrics/tfrecord.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensorboard/event.pb.h"

namespace mt::worker::metrics {
namespace {

using ::mt::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Bytes(std::initializer_list<uint8_t> b) { return std::string(b.begin(), b.end()); }

TEST(Crc32cTest, KnownAnswers) {
  // The CRC-32C check value, and RFC 3720 (iSCSI) appendix B.4's vectors.
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32cTest, MaskRotatesRightBy15AndAddsTheConstant) {
  EXPECT_EQ(MaskCrc(0), 0xA282EAD8u);
  // 0xE3069283 rotated right by 15 is 0x2506C60D; + 0xA282EAD8 = 0xC78AB0E5.
  EXPECT_EQ(MaskCrc(0xE3069283u), 0xC78AB0E5u);
}

TEST(TfRecordTest, FrameIsLengthCrcPayloadCrc) {
  const std::string want = Bytes({0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // u64 length 3
                                  0xb0, 0x99, 0x49, 0x0e,    // masked CRC of the length
                                  0x61, 0x62, 0x63,          // "abc"
                                  0x6e, 0x57, 0xf1, 0x21});  // masked CRC of "abc"
  EXPECT_EQ(absl::BytesToHexString(FrameRecord("abc")), absl::BytesToHexString(want));
  MT_ASSERT_OK_AND_ASSIGN(std::vector<std::string> records, ParseRecords(want + want));
  EXPECT_THAT(records, ElementsAre("abc", "abc"));
  MT_ASSERT_OK_AND_ASSIGN(records, ParseRecords(FrameRecord("")));
  EXPECT_THAT(records, ElementsAre(""));
}

TEST(TfRecordTest, DamageIsFoundAndPlaced) {
  const std::string good = FrameRecord("abc");
  std::string bad_length = good;
  bad_length[0] = 4;
  EXPECT_THAT(ParseRecords(bad_length).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad length CRC")));
  std::string bad_payload = good;
  bad_payload[13] = 'X';
  EXPECT_THAT(ParseRecords(good + bad_payload).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("record at byte 19: bad payload")));
  EXPECT_THAT(ParseRecords(good.substr(0, good.size() - 1)).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
  EXPECT_THAT(ParseRecords(good.substr(0, 5)).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated header")));
}

TEST(EventEncodingTest, FieldNumbersAreTensorBoards) {
  mt::tensorboard::Event e;
  e.set_wall_time(1.5);
  e.set_step(7);
  auto* v = e.mutable_summary()->add_value();
  v->set_tag("lm loss");
  v->set_simple_value(2.5f);
  // wall_time: field 1, fixed64 1.5; step: field 2, varint 7; summary: field 5, 16 bytes:
  // value: field 1, 14 bytes: tag: field 1 "lm loss"; simple_value: field 2, fixed32 2.5f.
  const std::string want = Bytes({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f,  //
                                  0x10, 0x07,                                            //
                                  0x2a, 0x10,                                            //
                                  0x0a, 0x0e,                                            //
                                  0x0a, 0x07, 'l',  'm',  ' ',  'l',  'o',  's',  's',   //
                                  0x15, 0x00, 0x00, 0x20, 0x40});
  EXPECT_EQ(absl::BytesToHexString(e.SerializeAsString()), absl::BytesToHexString(want));
  mt::tensorboard::Event version;
  version.set_file_version("brain.Event:2");
  EXPECT_EQ(absl::BytesToHexString(version.SerializeAsString()),
            absl::BytesToHexString(std::string("\x1a\x0d", 2) + "brain.Event:2"));
}

}  // namespace
}  // namespace mt::worker::metrics
