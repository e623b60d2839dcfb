#include "coordinator/jobs/restart_policy.h"

#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

using ::testing::HasSubstr;

mt::v1::Job MakeJob(const std::string& save_dir, int max_restarts, int attempt,
                    int64_t resume_step = 0, const std::string& load_dir = "") {
  mt::v1::Job job;
  job.set_id("j-1");
  job.mutable_spec()->mutable_checkpoint()->set_save_dir(save_dir);
  job.mutable_spec()->mutable_checkpoint()->set_load_dir(load_dir);
  job.mutable_spec()->mutable_restart()->set_max_restarts(max_restarts);
  job.set_attempt(attempt);
  job.set_resume_step(resume_step);
  return job;
}

const std::string kCause = "rank 1 on w-2 failed: exit code 1";

struct FailureCase {
  const char* name;
  mt::v1::Job job;
  bool restart;
  const char* reason_has;
};

TEST(RestartPolicy, DecideOnFailure) {
  const FailureCase cases[] = {
      {"no_save_dir", MakeJob("", 3, 0), false, "the job saves no checkpoints"},
      {"max_restarts_zero", MakeJob("/ck", 0, 0), false, "restart.max_restarts is 0"},
      {"used_up", MakeJob("/ck", 2, 2), false, "all 2 restarts (restart.max_restarts)"},
      {"first", MakeJob("/ck", 3, 0), true, "restart 1 of at most 3"},
      {"last", MakeJob("/ck", 3, 2), true, "restart 3 of at most 3"},
  };
  for (const FailureCase& c : cases) {
    const FailureDecision d = DecideOnFailure(c.job, kCause);
    EXPECT_EQ(d.restart, c.restart) << c.name;
    EXPECT_THAT(d.reason, HasSubstr(c.reason_has)) << c.name;
    EXPECT_THAT(d.reason, HasSubstr(kCause)) << c.name;  // the cause is never lost
  }
}

struct RequeueCase {
  const char* name;
  mt::v1::Job job;
  std::optional<FoundCheckpoint> latest;
  std::string skipped;
  bool requeue;
  std::string resume_from;
  int64_t resume_step;
  const char* reason_has;
};

TEST(RestartPolicy, DecideRequeue) {
  const FoundCheckpoint at8{"/ck/iter_0000008", 8};
  const FoundCheckpoint at4{"/ck/iter_0000004", 4};
  const RequeueCase cases[] = {
      {"first_from_latest", MakeJob("/ck", 3, 0), at8, "", true, "/ck/iter_0000008", 8,
       "restart 1 from /ck/iter_0000008 (step 8)"},
      {"first_no_checkpoint_starts_over", MakeJob("/ck", 3, 0), std::nullopt, "", true, "", 0,
       "restart 1 from scratch (no checkpoint in save_dir yet)"},
      {"first_no_checkpoint_from_load_dir", MakeJob("/ck", 3, 0, 0, "/base"), std::nullopt, "",
       true, "", 0, "restart 1 from /base"},
      {"new_checkpoint_since_restart", MakeJob("/ck", 3, 1, 4), at8, "", true, "/ck/iter_0000008",
       8, "restart 2 from"},
      {"fell_back_past_damaged", MakeJob("/ck", 3, 0), at4, "iter_0000008: sha256 mismatch", true,
       "/ck/iter_0000004", 4, "skipped: iter_0000008: sha256 mismatch"},
      {"no_new_checkpoint_since_restart", MakeJob("/ck", 3, 1, 8), at8, "", false, "", 0,
       "failed again with no new checkpoint since restart 1 (which resumed from step 8)"},
      {"older_checkpoint_only", MakeJob("/ck", 3, 1, 8), at4, "iter_0000008: missing", false, "", 0,
       "no new checkpoint since restart 1"},
      {"started_over_and_still_none", MakeJob("/ck", 3, 1, 0), std::nullopt, "", false, "", 0,
       "(which started over: there was no checkpoint)"},
      {"only_damaged_checkpoints", MakeJob("/ck", 3, 0), std::nullopt,
       "no loadable checkpoint in /ck", false, "", 0, "not restarted: no checkpoint in /ck loads"},
  };
  for (const RequeueCase& c : cases) {
    const RequeueDecision d = DecideRequeue(c.job, kCause, c.latest, c.skipped);
    EXPECT_EQ(d.requeue, c.requeue) << c.name;
    EXPECT_EQ(d.resume_from, c.resume_from) << c.name;
    EXPECT_EQ(d.resume_step, c.resume_step) << c.name;
    EXPECT_THAT(d.reason, HasSubstr(c.reason_has)) << c.name;
    EXPECT_THAT(d.reason, HasSubstr(kCause)) << c.name;
  }
}

// Rule 4 holds only the job's own failures against it: faults of its surroundings restart it
// from the same checkpoint (within max_restarts, which DecideOnFailure checks).
TEST(RestartPolicy, OnlyTheJobsOwnFailuresEndItWithoutANewCheckpoint) {
  EXPECT_TRUE(IsOwnFailure("rank 1 on w-2 failed: exit code 1: mt-train: reading the data"));
  const std::string surroundings[] = {
      "worker w-7 on node node4 running rank 1 was lost (no heartbeat for 3s)",
      "worker w-3 registered again without rank 0 and no exit report came within 10s",
      "worker w-3 no longer runs rank 0",
      "rank 0 on w-5 failed: killed by signal 9 (Killed)",
      "hung: rank 1 on worker w-2 (node n1) made no progress for 10 s in forward of step 7",
      "hung at startup: rank 0 on worker w-1 (node n0) did not reach training: starting",
  };
  const FoundCheckpoint at8{"/ck/iter_0000008", 8};
  for (const std::string& cause : surroundings) {
    EXPECT_FALSE(IsOwnFailure(cause)) << cause;
    const RequeueDecision d = DecideRequeue(MakeJob("/ck", 3, 2, 8), cause, at8, "");
    EXPECT_TRUE(d.requeue) << cause;
    EXPECT_EQ(d.resume_from, "/ck/iter_0000008") << cause;
    EXPECT_EQ(d.resume_step, 8) << cause;
    EXPECT_THAT(d.reason, HasSubstr("restart 3 from /ck/iter_0000008 (step 8)")) << cause;
  }
  // The same failure of its own ends it.
  const RequeueDecision own = DecideRequeue(MakeJob("/ck", 3, 2, 8), kCause, at8, "");
  EXPECT_FALSE(own.requeue);
  EXPECT_THAT(own.reason, HasSubstr("failed again with no new checkpoint since restart 2"));
}

}  // namespace
}  // namespace mt::coordinator
