// The checks an mt checkpoint directory passes before the coordinator imports it as VERIFIED,
// beyond the sizes and SHA-256 of its files (checkpoint_dir.h VerifyCheckpointFiles): no file
// of the manifest leads outside the directory, and the tensors the manifest describes are the
// ones the shards hold. Each returns one line per problem, empty when all is well; the lines
// name files and tensors, never the files' contents. Thread-compatible free functions.
#ifndef MT_COMMON_CHECKPOINT_MANIFEST_CHECK_H_
#define MT_COMMON_CHECKPOINT_MANIFEST_CHECK_H_

#include <string>
#include <vector>

#include "mt/v1/checkpoint.pb.h"

namespace mt::checkpoint {

// Every file the manifest lists resolves (symbolic links followed) inside `dir`.
std::vector<std::string> CheckManifestFilesInside(const std::string& dir,
                                                  const mt::v1::CheckpointManifest& manifest);

// The manifest's tensors against the safetensors headers of its shard files (headers only,
// bounded by each file's size): each tensor's file is a listed .safetensors file whose header
// has that tensor with the same dtype and shape; full_shape follows from shape, split_dim and
// tp_size; tp_rank < tp_size; every tensor of every listed shard is in the manifest.
std::vector<std::string> CheckManifestTensors(const std::string& dir,
                                              const mt::v1::CheckpointManifest& manifest);

}  // namespace mt::checkpoint

#endif  // MT_COMMON_CHECKPOINT_MANIFEST_CHECK_H_
