#include "common/base/errors.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace mt {
namespace {

TEST(Errors, EachErrnoHasItsCanonicalCode) {
  struct Case {
    int err;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {ENOENT, absl::StatusCode::kNotFound},
      {EACCES, absl::StatusCode::kPermissionDenied},
      {EPERM, absl::StatusCode::kPermissionDenied},
      {EROFS, absl::StatusCode::kPermissionDenied},
      {ENOSPC, absl::StatusCode::kResourceExhausted},
      {EDQUOT, absl::StatusCode::kResourceExhausted},
      {EFBIG, absl::StatusCode::kResourceExhausted},
      {EEXIST, absl::StatusCode::kAlreadyExists},
      {EIO, absl::StatusCode::kInternal},
      {EBADF, absl::StatusCode::kInternal},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ErrnoToCode(c.err), c.code) << std::strerror(c.err);
    EXPECT_EQ(ErrnoStatus("reading", "/x", c.err).code(), c.code) << std::strerror(c.err);
  }
}

TEST(Errors, MessageNamesWhatPathAndCause) {
  EXPECT_EQ(ErrnoStatus("opening", "/data/a.bin", ENOENT).message(),
            std::string("opening /data/a.bin: ") + std::strerror(ENOENT));
  EXPECT_EQ(ErrnoStatus("binding a socket", "", EACCES).message(),
            std::string("binding a socket: ") + std::strerror(EACCES));
  EXPECT_EQ(
      ErrnoStatus("writing", "/ckpt/f", ENOSPC).message(),
      std::string("writing /ckpt/f: ") + std::strerror(ENOSPC) + " (disk full or file too large)");
}

}  // namespace
}  // namespace mt
