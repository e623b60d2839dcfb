#include "worker/daemon/assignment_paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/subprocess.h"

namespace mt::worker {
namespace {

using ::mt::testing::IsOk;
using ::mt::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

mt::v1::Assignment WithSpec(const mt::v1::JobSpec& spec) {
  mt::v1::Assignment a;
  a.set_job_id("j-1");
  a.set_spec(spec.SerializeAsString());
  return a;
}

TEST(CheckAssignmentPathsTest, EveryPathAndResumeFromMustResolveIntoTheRoots) {
  char real[4096];
  const std::string tmp = testutil::MakeTempDir("apaths");
  ASSERT_NE(::realpath(tmp.c_str(), real), nullptr);
  const std::string root = std::string(real) + "/data";
  ASSERT_EQ(::mkdir(root.c_str(), 0755), 0);
  ASSERT_EQ(::symlink("/root", (root + "/home").c_str()), 0);
  auto roots = AllowedRoots::Create({root});
  ASSERT_TRUE(roots.ok()) << roots.status();

  mt::v1::JobSpec spec;
  spec.mutable_data()->add_data_path()->set_prefix(root + "/corpus_text_document");
  spec.mutable_checkpoint()->set_save_dir(root + "/ck");
  mt::v1::Assignment ok = WithSpec(spec);
  ok.set_resume_from(root + "/ck/iter_0000010");
  EXPECT_THAT(CheckAssignmentPaths(ok, *roots), IsOk());
  EXPECT_THAT(CheckAssignmentPaths(ok, AllowedRoots()), IsOk());

  spec.mutable_checkpoint()->set_save_dir(root + "/home/ck");  // -> /root/ck
  spec.mutable_logging()->set_tensorboard_dir("/var/tmp/tb");
  mt::v1::Assignment bad = WithSpec(spec);
  bad.set_resume_from("/root/ck/iter_0000010");
  EXPECT_THAT(CheckAssignmentPaths(bad, *roots),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr("checkpoint.save_dir: '" + root +
                                       "/home/ck' (it resolves to '/root/ck')"),
                             HasSubstr("logging.tensorboard_dir: '/var/tmp/tb'"),
                             HasSubstr("resume_from: '/root/ck/iter_0000010'"))));

  mt::v1::Assignment garbage;
  garbage.set_job_id("j-2");
  garbage.set_spec("\xff\xff\xff");
  EXPECT_THAT(CheckAssignmentPaths(garbage, *roots),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("j-2")));
}

// The coordinator's roots come with the assignment: they confine a worker started without
// --allowed-root, and they apply on top of the worker's own.
TEST(CheckAssignmentPathsTest, TheCoordinatorsRootsConfineToo) {
  char real[4096];
  const std::string tmp = testutil::MakeTempDir("apaths");
  ASSERT_NE(::realpath(tmp.c_str(), real), nullptr);
  const std::string data = std::string(real) + "/data", out = std::string(real) + "/out";
  ASSERT_EQ(::mkdir(data.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(out.c_str(), 0755), 0);
  ASSERT_EQ(::symlink(out.c_str(), (data + "/escape").c_str()), 0);

  mt::v1::JobSpec spec;
  spec.mutable_data()->add_data_path()->set_prefix(data + "/corpus_text_document");
  spec.mutable_checkpoint()->set_save_dir(data + "/ck");
  mt::v1::Assignment inside = WithSpec(spec);
  inside.add_allowed_roots(data);
  EXPECT_THAT(CheckAssignmentPaths(inside, AllowedRoots()), IsOk());

  // A link swapped in after the coordinator's check at submit: the worker refuses it.
  spec.mutable_checkpoint()->set_save_dir(data + "/escape/ck");
  mt::v1::Assignment escaped = WithSpec(spec);
  escaped.add_allowed_roots(data);
  escaped.set_resume_from(out + "/ck/iter_0000010");
  EXPECT_THAT(CheckAssignmentPaths(escaped, AllowedRoots()),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr("the coordinator's --allowed-root: "),
                             HasSubstr("checkpoint.save_dir: '" + data + "/escape/ck'"),
                             HasSubstr("resume_from: '" + out + "/ck/iter_0000010'"))));

  // Both sets apply: inside the coordinator's roots but outside this worker's.
  auto mine = AllowedRoots::Create({out});
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_THAT(
      CheckAssignmentPaths(inside, *mine),
      StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("this worker's --allowed-root: ")));

  mt::v1::Assignment relative = WithSpec(spec);
  relative.add_allowed_roots("relative/root");
  EXPECT_THAT(CheckAssignmentPaths(relative, AllowedRoots()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the coordinator's --allowed-root 'relative/root'")));
}

}  // namespace
}  // namespace mt::worker
