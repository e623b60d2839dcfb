// gMock matchers for protobuf messages, for tests that compare whole specs or replies.
// Header-only: the matcher is a template that gMock instantiates in each test.
#ifndef MT_TESTS_TESTUTIL_PROTO_MATCHERS_H_
#define MT_TESTS_TESTUTIL_PROTO_MATCHERS_H_

#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"

namespace mt::testutil {

// The argument equals `expected` field by field; on a mismatch the explanation lists the fields
// that differ (MessageDifferencer's report), which a printed proto would leave to the reader.
MATCHER_P(EqualsProto, expected, "") {
  std::string diff;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  if (differencer.Compare(expected, arg)) return true;
  *result_listener << diff;
  return false;
}

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_PROTO_MATCHERS_H_
