#include "common/checkpoint/manifest_check.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "common/base/files.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::checkpoint {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A directory with one shard of two tensors (a [4, 2] split along dim 0 over tp 2, and a
// replicated [3]) and the manifest that describes it.
struct Fixture {
  std::string dir;
  mt::v1::CheckpointManifest manifest;
};

Fixture Write() {
  Fixture f;
  f.dir = testutil::MakeTempDir("mcheck");
  HostTensor a = ZerosTensor(DType::kF32, {4, 2});
  HostTensor b = ZerosTensor(DType::kBF16, {3});
  const std::string shard = ShardFileName(1, 0);
  auto digest = WriteSafetensors(f.dir + "/" + shard, {ViewOf("model.a", a), ViewOf("model.b", b)},
                                 {{"tp_rank", "1"}, {"tp_size", "2"}});
  EXPECT_TRUE(digest.ok());
  auto* file = f.manifest.add_files();
  file->set_path(shard);
  file->set_size_bytes(digest->size);
  file->set_sha256(digest->sha256);
  auto* ta = f.manifest.add_tensors();
  ta->set_name("model.a");
  ta->set_file(shard);
  ta->set_dtype("F32");
  for (int64_t d : {4, 2}) ta->add_shape(d);
  for (int64_t d : {8, 2}) ta->add_full_shape(d);
  ta->set_split_dim(0);
  ta->set_tp_rank(1);
  ta->set_tp_size(2);
  auto* tb = f.manifest.add_tensors();
  tb->set_name("model.b");
  tb->set_file(shard);
  tb->set_dtype("BF16");
  tb->add_shape(3);
  tb->add_full_shape(3);
  tb->set_split_dim(-1);
  tb->set_tp_rank(1);
  tb->set_tp_size(2);
  return f;
}

TEST(ManifestCheckTest, ATruthfulManifestPasses) {
  Fixture f = Write();
  EXPECT_THAT(CheckManifestTensors(f.dir, f.manifest), IsEmpty());
  EXPECT_THAT(CheckManifestFilesInside(f.dir, f.manifest), IsEmpty());
}

TEST(ManifestCheckTest, ShapeOrDtypeContradictingTheShardIsReported) {
  Fixture f = Write();
  f.manifest.mutable_tensors(0)->set_shape(0, 40);
  f.manifest.mutable_tensors(0)->set_full_shape(0, 80);
  f.manifest.mutable_tensors(1)->set_dtype("F32");
  EXPECT_THAT(
      CheckManifestTensors(f.dir, f.manifest),
      ElementsAre("tensor model.a: the manifest says F32[40, 2], mp_rank_01_000.safetensors "
                  "holds F32[4, 2]",
                  "tensor model.b: the manifest says F32[3], mp_rank_01_000.safetensors "
                  "holds BF16[3]"));
}

TEST(ManifestCheckTest, FullShapeMustFollowFromSplitAndTp) {
  Fixture f = Write();
  f.manifest.mutable_tensors(0)->set_full_shape(0, 4);  // tp 2 along dim 0: must be 8
  EXPECT_THAT(CheckManifestTensors(f.dir, f.manifest),
              ElementsAre(HasSubstr("full_shape [4, 2] does not follow from shape [4, 2]")));
  Fixture g = Write();
  g.manifest.mutable_tensors(1)->set_split_dim(3);
  g.manifest.mutable_tensors(0)->set_tp_rank(2);
  const std::vector<std::string> problems = CheckManifestTensors(g.dir, g.manifest);
  EXPECT_EQ(problems.size(), 2u);
}

TEST(ManifestCheckTest, MissingExtraAndUnlistedTensorsAreReported) {
  Fixture f = Write();
  f.manifest.mutable_tensors(1)->set_name("model.c");  // not in the shard; model.b then unlisted
  auto* ghost = f.manifest.add_tensors();
  *ghost = f.manifest.tensors(0);
  ghost->set_file("other.safetensors");  // not a listed file
  EXPECT_THAT(CheckManifestTensors(f.dir, f.manifest),
              ElementsAre("tensor model.c: not in mp_rank_01_000.safetensors",
                          "tensor model.a: its file other.safetensors is not a listed, readable "
                          ".safetensors file",
                          "mp_rank_01_000.safetensors holds model.b, which the manifest lacks"));
}

TEST(ManifestCheckTest, FilesLinkedOutOfTheDirectoryAreReported) {
  Fixture f = Write();
  const std::string outside = testutil::MakeTempDir("mcheck-out") + "/x.safetensors";
  ASSERT_TRUE(WriteFileAtomically(outside, "not read").ok());
  ASSERT_EQ(::symlink(outside.c_str(), (f.dir + "/linked.safetensors").c_str()), 0);
  f.manifest.add_files()->set_path("linked.safetensors");
  EXPECT_THAT(CheckManifestFilesInside(f.dir, f.manifest),
              ElementsAre(HasSubstr("'linked.safetensors' in '" + f.dir + "' leads outside")));
}

}  // namespace
}  // namespace mt::checkpoint
