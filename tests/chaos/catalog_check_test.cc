#include "tests/chaos/catalog_check.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::chaos {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

mt::v1::Checkpoint Entry(int64_t step, mt::v1::CheckpointState state) {
  mt::v1::Checkpoint c;
  c.set_id("c-" + std::to_string(step));
  c.set_step(step);
  c.set_state(state);
  return c;
}

TEST(CatalogCheckTest, LiveEntriesMatchingTheDiskAgree) {
  const CatalogComparison c = CompareCatalogWithDisk(
      {Entry(10, mt::v1::CHECKPOINT_STATE_DELETED), Entry(20, mt::v1::CHECKPOINT_STATE_COMPLETE),
       Entry(30, mt::v1::CHECKPOINT_STATE_VERIFIED), Entry(40, mt::v1::CHECKPOINT_STATE_WRITING)},
      {20, 30});
  EXPECT_THAT(c.mismatches, IsEmpty());
  EXPECT_EQ(c.live, 2);
  EXPECT_EQ(c.writing, 1);
}

TEST(CatalogCheckTest, EachDisagreementIsNamed) {
  const CatalogComparison c = CompareCatalogWithDisk(
      {Entry(10, mt::v1::CHECKPOINT_STATE_DELETED), Entry(20, mt::v1::CHECKPOINT_STATE_COMPLETE),
       Entry(30, mt::v1::CHECKPOINT_STATE_CORRUPT)},
      {10, 40});
  EXPECT_THAT(c.mismatches, ElementsAre("step 30 (c-30) is CHECKPOINT_STATE_CORRUPT",
                                        "step 20 is in the catalog but not on disk",
                                        "step 10 is DELETED but still on disk",
                                        "step 40 is on disk but not in the catalog"));
}

TEST(CatalogCheckTest, AStepSavedAgainAfterADeletedEntryAgrees) {
  const CatalogComparison c = CompareCatalogWithDisk(
      {Entry(20, mt::v1::CHECKPOINT_STATE_DELETED), Entry(20, mt::v1::CHECKPOINT_STATE_COMPLETE)},
      {20});
  EXPECT_THAT(c.mismatches, IsEmpty());
}

}  // namespace
}  // namespace mt::chaos
