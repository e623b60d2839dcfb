#include "worker/engine/data_sources.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "common/base/status_matchers.h"
#include "common/data/indexed_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/tiny_spec.h"
#include "worker/engine/trainer.h"

namespace mt::engine::data_sources_test {
namespace {

mt::v1::JobSpec TinySpec() {
  testutil::TinySpecOptions o;
  o.train_iters = 6;
  o.seed = 5;
  mt::v1::JobSpec spec = testutil::TinyGptSpec(o);
  spec.mutable_evaluation()->set_eval_interval(3);
  spec.mutable_evaluation()->set_eval_iters(1);
  spec.mutable_logging()->set_log_interval(3);
  return spec;
}

TEST(DataSourcesTest, SyntheticIsDeterministicAndSplitsDiffer) {
  MT_ASSERT_OK_AND_ASSIGN(DataSources a, SyntheticDataSources(TinySpec()));
  MT_ASSERT_OK_AND_ASSIGN(DataSources b, SyntheticDataSources(TinySpec()));
  ASSERT_NE(a.valid, nullptr);
  MT_ASSERT_OK_AND_ASSIGN(TokenBatch ta, a.train->Next(2));
  MT_ASSERT_OK_AND_ASSIGN(TokenBatch tb, b.train->Next(2));
  MT_ASSERT_OK_AND_ASSIGN(TokenBatch va, a.valid->Next(2));
  EXPECT_EQ(ta.rows, 2);
  EXPECT_EQ(ta.cols, 17);
  EXPECT_EQ(ta.tokens, tb.tokens);
  EXPECT_NE(ta.tokens, va.tokens);
  for (int64_t t : ta.tokens) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 128);
  }
}

TEST(DataSourcesTest, SyntheticWantsTheResolvedGlobalBatch) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_global_batch_size(0);
  EXPECT_THAT(SyntheticDataSources(spec).status(),
              ::mt::testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                      ::testing::HasSubstr("spec::ResolveForLayout")));
}

// A small Megatron indexed dataset on disk, through worker/data into the trainer.
TEST(DataSourcesTest, TrainsOnIndexedDataset) {
  if (!HaveDatasetLoader()) GTEST_SKIP() << "built without worker/data";
  const std::string dir = ::testing::TempDir() + "/mt_engine_data_sources";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  const std::string prefix = dir + "/corpus";
  {
    MT_ASSERT_OK_AND_ASSIGN(auto writer,
                            data::IndexedDatasetWriter::Create(prefix, data::DType::kUInt16));
    uint32_t x = 1;
    for (int doc = 0; doc < 60; ++doc) {
      std::vector<int32_t> ids;
      const int len = 20 + doc % 40;
      for (int i = 0; i < len; ++i) {
        x = x * 1103515245u + 12345u;
        ids.push_back(static_cast<int32_t>((x >> 16) % 127));
      }
      ids.push_back(127);  // end of document
      MT_ASSERT_OK(writer->AddDocument(ids));
    }
    MT_ASSERT_OK(writer->Finalize());
  }
  mt::v1::JobSpec spec = TinySpec();
  auto* path = spec.mutable_data()->add_data_path();
  path->set_weight(1.0);
  path->set_prefix(prefix);
  spec.mutable_data()->set_split("90,10,0");
  spec.mutable_data()->set_data_cache_path(dir + "/cache");
  spec.mutable_data()->set_num_workers(0);

  MT_ASSERT_OK_AND_ASSIGN(DataSources sources, DataSourcesFromSpec(spec));
  ASSERT_NE(sources.valid, nullptr);
  TrainerOptions options;
  options.log_progress = false;
  MT_ASSERT_OK_AND_ASSIGN(auto trainer, Trainer::Create(spec, options, std::move(sources.train),
                                                        std::move(sources.valid)));
  int evals = 0;
  MT_ASSERT_OK(trainer->Train({}, [&](const EvalMetrics& e) {
    EXPECT_TRUE(std::isfinite(e.loss));
    ++evals;
  }));
  EXPECT_EQ(trainer->iteration(), 6);
  EXPECT_EQ(evals, 2);
}

TEST(DataSourcesTest, WithoutLoaderIsUnimplemented) {
  if (HaveDatasetLoader()) GTEST_SKIP() << "built with worker/data";
  EXPECT_THAT(DataSourcesFromSpec(TinySpec()).status(),
              ::mt::testing::StatusIs(absl::StatusCode::kUnimplemented,
                                      ::testing::HasSubstr("--synthetic-data")));
}

}  // namespace
}  // namespace mt::engine::data_sources_test
