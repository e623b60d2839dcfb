#include "common/rpc/worker_credential.h"

#include <set>

#include "gtest/gtest.h"

namespace mt::rpc {
namespace {

TEST(WorkerCredentialTest, SecretsAreFreshHexAndPassTheCheck) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string s = NewWorkerSecret();
    EXPECT_EQ(s.size(), kWorkerSecretHexDigits);
    EXPECT_TRUE(CheckWorkerSecret(s, "f").ok()) << s;
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(WorkerCredentialTest, HashIsSha256AndMatchesOnlyTheSecret) {
  // SHA-256("abc"), FIPS 180-2 appendix B.1.
  EXPECT_EQ(HashWorkerSecret("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string s = NewWorkerSecret();
  const std::string h = HashWorkerSecret(s);
  EXPECT_TRUE(WorkerSecretMatches(s, h));
  std::string other = s;
  other[10] = other[10] == 'a' ? 'b' : 'a';
  EXPECT_FALSE(WorkerSecretMatches(other, h));
  EXPECT_FALSE(WorkerSecretMatches("", h));
}

TEST(WorkerCredentialTest, MalformedSecretsNameTheField) {
  const absl::Status short_one = CheckWorkerSecret("abc", "worker_credential");
  EXPECT_EQ(short_one.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_one.message().find("worker_credential must be the 64"), std::string::npos);
  EXPECT_FALSE(CheckWorkerSecret(std::string(64, 'G'), "f").ok());
  EXPECT_FALSE(CheckWorkerSecret(std::string(64, 'A'), "f").ok());  // upper case is not issued
}

}  // namespace
}  // namespace mt::rpc
