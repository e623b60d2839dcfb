#include "tests/testutil/test_checkpoint_files.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status_macros.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/safetensors.h"
#include "google/protobuf/util/time_util.h"

namespace mt::testutil {

std::string TestCheckpointBytes(int64_t step) {
  return std::string(5000 + step, static_cast<char>(step));
}

absl::StatusOr<std::string> MakeTestCheckpoint(const std::string& save_dir,
                                               const std::string& job_id, int64_t step,
                                               double validation_loss, bool commit,
                                               bool real_shard) {
  ::mkdir(save_dir.c_str(), 0755);
  const std::string dir = absl::StrCat(save_dir, "/", checkpoint::IterationDirName(step));
  ::mkdir(dir.c_str(), 0755);
  const std::string shard = checkpoint::ShardFileName(0, 0);
  const std::string bytes = TestCheckpointBytes(step);
  if (real_shard) {
    checkpoint::TensorView v{"model.w",
                             checkpoint::DType::kU8,
                             {static_cast<int64_t>(bytes.size())},
                             bytes.data(),
                             bytes.size()};
    MT_RETURN_IF_ERROR(checkpoint::WriteSafetensors(dir + "/" + shard, {v}, {}).status());
  } else {
    MT_RETURN_IF_ERROR(WriteFileAtomically(dir + "/" + shard, bytes));
  }
  if (!commit) return dir;
  MT_ASSIGN_OR_RETURN(checkpoint::FileDigest digest, checkpoint::DigestFile(dir + "/" + shard));
  mt::v1::CheckpointManifest m;
  m.set_format(checkpoint::kFormatName);
  m.set_format_version(checkpoint::kFormatVersion);
  m.set_job_id(job_id);
  m.set_step(step);
  m.set_loss(10.0 / step);
  m.set_validation_loss(validation_loss);
  m.mutable_layout()->set_world_size(1);
  m.mutable_layout()->set_tensor_model_parallel_size(1);
  m.mutable_trainer()->set_consumed_samples(8 * step);
  mt::v1::CheckpointFile* f = m.add_files();
  f->set_path(shard);
  f->set_size_bytes(digest.size);
  f->set_sha256(digest.sha256);
  *m.mutable_create_time() = google::protobuf::util::TimeUtil::SecondsToTimestamp(1000 + step);
  if (real_shard) {
    mt::v1::ManifestTensor* t = m.add_tensors();
    t->set_name("model.w");
    t->set_file(shard);
    t->set_dtype("U8");
    t->add_shape(5000 + step);
    t->add_full_shape(5000 + step);
    t->set_split_dim(-1);
    t->set_tp_size(1);
  }
  MT_RETURN_IF_ERROR(checkpoint::WriteManifest(dir, m));
  MT_RETURN_IF_ERROR(checkpoint::WriteLatest(save_dir, step));
  return dir;
}

}  // namespace mt::testutil
