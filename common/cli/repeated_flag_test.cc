#include "common/cli/repeated_flag.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<std::string> Values(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return RepeatedFlagValues(static_cast<int>(argv.size()), argv.data(), "allowed_root");
}

TEST(RepeatedFlagValues, CollectsEverySpellingInOrder) {
  EXPECT_THAT(Values({"prog", "--allowed_root=/a", "--listen", "x:1", "--allowed_root", "/b",
                      "-allowed_root=/c,/d", "-allowed_root", "/e,,"}),
              ElementsAre("/a", "/b", "/c", "/d", "/e"));
}

TEST(RepeatedFlagValues, IgnoresOtherFlagsPrefixesAndWhatFollowsDoubleDash) {
  EXPECT_THAT(Values({"prog", "--allowed_roots=/x", "--allowed_rootx", "/y", "allowed_root=/z",
                      "--", "--allowed_root=/w"}),
              IsEmpty());
  EXPECT_THAT(Values({"prog", "--allowed_root"}), IsEmpty());  // no value: absl reports it
}

}  // namespace
}  // namespace mt::cli
