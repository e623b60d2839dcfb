// Rank credentials (issue #20): bound to one (job, attempt, rank), the same under the same key
// (a restarted coordinator), different under another key; malformed keys are refused.
#include "coordinator/rendezvous/rank_credentials.h"

#include <string>

#include "common/base/status_matchers.h"
#include "common/rpc/worker_credential.h"
#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

TEST(RankCredentials, BoundToOneJobAttemptAndRank) {
  const std::string key = rpc::NewWorkerSecret();
  MT_ASSERT_OK_AND_ASSIGN(RankCredentials c, RankCredentials::FromKey(key));
  const std::string issued = c.Issue("j-3", 1, 2);
  EXPECT_EQ(issued.size(), 64u);
  EXPECT_TRUE(c.Check("j-3", 1, 2, issued).ok());
  // Every other coordinate is refused, naming what the call claimed.
  EXPECT_THAT(c.Check("j-4", 1, 2, issued),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("rendezvous of j-4 attempt 1 rank 2: the call's "
                                 "x-mt-rank-credential is not the one issued")));
  EXPECT_FALSE(c.Check("j-3", 0, 2, issued).ok());
  EXPECT_FALSE(c.Check("j-3", 1, 1, issued).ok());
  EXPECT_FALSE(c.Check("j-3", 1, 2, issued.substr(0, 63)).ok());
  EXPECT_THAT(c.Check("j-3", 1, 2, ""),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("carries no")));
  // Distinct ranks of one attempt get distinct credentials.
  EXPECT_NE(c.Issue("j-3", 1, 0), c.Issue("j-3", 1, 1));
  // The same key (the store's, after a restart) issues the same; another key does not.
  MT_ASSERT_OK_AND_ASSIGN(RankCredentials same, RankCredentials::FromKey(key));
  EXPECT_EQ(same.Issue("j-3", 1, 2), issued);
  MT_ASSERT_OK_AND_ASSIGN(RankCredentials other, RankCredentials::FromKey(rpc::NewWorkerSecret()));
  EXPECT_FALSE(other.Check("j-3", 1, 2, issued).ok());
}

TEST(RankCredentials, KnownAnswer) {
  // HMAC-SHA256 under the key 32 x 0x0b of "j-1/0/0", from Python's hmac module:
  // hmac.new(b"\x0b" * 32, b"j-1/0/0", "sha256").hexdigest()
  std::string key;
  for (int i = 0; i < 32; ++i) key += "0b";
  MT_ASSERT_OK_AND_ASSIGN(RankCredentials c, RankCredentials::FromKey(key));
  EXPECT_EQ(c.Issue("j-1", 0, 0),
            "c8bc8b3b7aeedfc839d8404b0898b752c589d23afaba465f8581dc4bee736b2a");
}

TEST(RankCredentials, RefusesAMalformedKey) {
  EXPECT_THAT(RankCredentials::FromKey("abc").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank_credential_key")));
  EXPECT_FALSE(RankCredentials::FromKey(std::string(64, 'G')).ok());
}

}  // namespace
}  // namespace mt::coordinator
