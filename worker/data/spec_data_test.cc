#include "worker/data/spec_data.h"

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::data {
namespace {

using ::mt::testing::StatusIs;
using ::testing::ElementsAre;

mt::v1::JobSpec Spec() {
  mt::v1::JobSpec spec;
  spec.mutable_model()->set_seq_length(128);
  spec.mutable_training()->set_train_iters(10);
  spec.mutable_training()->set_global_batch_size(16);
  spec.mutable_training()->set_micro_batch_size(4);
  spec.mutable_evaluation()->set_eval_interval(5);
  spec.mutable_evaluation()->set_eval_iters(2);
  return spec;
}

TEST(SpecDataTest, WeightedDataPaths) {
  mt::v1::JobSpec spec = Spec();
  auto* d = spec.mutable_data();
  auto* p = d->add_data_path();
  p->set_weight(0.3);
  p->set_prefix("/d/a");
  p = d->add_data_path();
  p->set_weight(0.7);
  p->set_prefix("/d/b");
  d->set_split("98,2,0");
  d->set_data_cache_path("/cache");
  d->set_num_workers(3);
  spec.mutable_training()->set_seed(7);
  MT_ASSERT_OK_AND_ASSIGN(GPTDataSetup s, GPTDataSetupFromSpec(spec));
  EXPECT_THAT(s.config.blend.prefixes, ElementsAre("/d/a", "/d/b"));
  EXPECT_THAT(s.config.blend.weights, ElementsAre(0.3, 0.7));
  EXPECT_EQ(s.config.split, "98,2,0");
  EXPECT_EQ(s.config.cache_dir, "/cache");
  EXPECT_EQ(s.config.seq_length, 128);
  EXPECT_EQ(s.config.seed, 7u);
  EXPECT_EQ(s.num_workers, 3);
  EXPECT_THAT(s.num_samples, ElementsAre(160, (10 / 5 + 1) * 2 * 16, 2 * 16));
}

TEST(SpecDataTest, SinglePathAndDefaults) {
  mt::v1::JobSpec spec = Spec();
  spec.mutable_evaluation()->clear_eval_interval();
  auto* p = spec.mutable_data()->add_data_path();
  p->set_weight(1);
  p->set_prefix("/d/a");
  MT_ASSERT_OK_AND_ASSIGN(GPTDataSetup s, GPTDataSetupFromSpec(spec));
  EXPECT_THAT(s.config.blend.prefixes, ElementsAre("/d/a"));
  EXPECT_TRUE(s.config.blend.weights.empty());  // Megatron's "--data-path PREFIX"
  EXPECT_EQ(s.config.split, "969,30,1");
  EXPECT_EQ(s.config.seed, 1234u);
  EXPECT_EQ(s.num_workers, 2);
  EXPECT_THAT(s.num_samples, ElementsAre(160, (10 / 1000 + 1) * 2 * 16, 32));
}

TEST(SpecDataTest, PerSplitPathsAndErrors) {
  mt::v1::JobSpec spec = Spec();
  spec.mutable_data()->add_train_data_path()->set_prefix("/d/t");
  spec.mutable_data()->add_test_data_path()->set_prefix("/d/x");
  MT_ASSERT_OK_AND_ASSIGN(GPTDataSetup s, GPTDataSetupFromSpec(spec));
  ASSERT_TRUE(s.config.blend_per_split[0].has_value());
  EXPECT_THAT(s.config.blend_per_split[0]->prefixes, ElementsAre("/d/t"));
  EXPECT_FALSE(s.config.blend_per_split[1].has_value());
  EXPECT_TRUE(s.config.blend_per_split[2].has_value());

  spec.mutable_training()->set_seed(uint64_t{1} << 32);
  EXPECT_THAT(GPTDataSetupFromSpec(spec), StatusIs(absl::StatusCode::kInvalidArgument));
  spec.mutable_training()->set_seed(1);
  spec.mutable_training()->set_global_batch_size(0);
  EXPECT_THAT(GPTDataSetupFromSpec(spec), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace mt::data
