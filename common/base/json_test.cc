#include "common/base/json.h"

#include <string>

#include "gtest/gtest.h"

namespace mt {
namespace {

TEST(Json, QuoteEscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonQuote(""), "\"\"");
  EXPECT_EQ(JsonQuote("plain text"), "\"plain text\"");
  EXPECT_EQ(JsonQuote("a\"b"), "\"a\\\"b\"");
  EXPECT_EQ(JsonQuote("a\\b"), "\"a\\\\b\"");
  EXPECT_EQ(JsonQuote("a\nb\tc\rd"), "\"a\\nb\\tc\\rd\"");
  EXPECT_EQ(JsonQuote(std::string("a\0b", 3)), "\"a\\u0000b\"");
  EXPECT_EQ(JsonQuote("\x1f"), "\"\\u001f\"");
  // UTF-8 and DEL pass through unchanged.
  EXPECT_EQ(JsonQuote("\xc3\xa9\x7f"), "\"\xc3\xa9\x7f\"");
}

}  // namespace
}  // namespace mt
