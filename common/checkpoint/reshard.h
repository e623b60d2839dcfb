// Reading a checkpoint under any layout: whole tensors by name, assembled from the
// tensor-parallel slices of whichever (TP, PP) layout wrote them, and re-sliced for the rank
// that loads them. Names carry GLOBAL layer indices, so a pipeline stage simply asks for the
// layers it holds; the vocabulary padding (which depends on TP) is cut or zero-extended.
//
// A TensorSource is an mt checkpoint directory (OpenCheckpointSource) or a Hugging Face GPT-2
// directory converted on the fly (hf_gpt2.h). Names: "model.<param>" for the model's
// parameters, "optimizer.<state>.<param>" for the optimizer (state = master, exp_avg,
// exp_avg_sq, momentum), "rng.*" for generator states.
//
// No LibTorch. Thread-compatible.
#ifndef MT_COMMON_CHECKPOINT_RESHARD_H_
#define MT_COMMON_CHECKPOINT_RESHARD_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint/host_tensor.h"
#include "common/checkpoint/safetensors.h"
#include "mt/v1/checkpoint.pb.h"

namespace mt::checkpoint {

// Where one rank's slice of a tensor comes from.
struct SliceRequest {
  // -1 replicated, 0 or 1.
  int split_dim = -1;
  int tp_rank = 0;
  int tp_size = 1;
  // The loading rank's shape of the tensor (its slice); checked.
  std::vector<int64_t> shape;
};

// Where the bytes of one stored tensor lie: the answer of TensorSource::Locate when a rank's
// slice is exactly a tensor of the checkpoint (same cut, no resharding) held in memory.
struct StoredTensor {
  std::string file;  // the manifest's path of its file
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // of its first byte in the file
  uint64_t nbytes = 0;
  const char* data = nullptr;  // the bytes (in the verified file held in memory)
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // Model shape and, for an mt checkpoint, its trainer state and layout.
  virtual const mt::v1::CheckpointManifest& manifest() const = 0;
  virtual bool Has(const std::string& name) const = 0;
  // Every tensor name, sorted.
  virtual std::vector<std::string> Names() const = 0;
  // The whole tensor: every TP slice, the writer's vocabulary padding.
  virtual absl::StatusOr<HostTensor> Full(const std::string& name) = 0;
  // The slice a rank needs (see LoadSlice); the default assembles Full() and cuts it.
  virtual absl::StatusOr<HostTensor> Slice(const std::string& name, const SliceRequest& request);
  // Without a copy: where the bytes of Slice(name, request) already lie, when they are one
  // stored tensor held in memory (the loading rank's own verified files); std::nullopt when
  // the slice must be assembled or read (then call Slice). NOT_FOUND as Slice. The default has
  // nothing in memory.
  virtual absl::StatusOr<std::optional<StoredTensor>> Locate(const std::string& name,
                                                             const SliceRequest& request);
};

// True for tensors whose dim 0 is the padded vocabulary (the word embedding, the output
// layer, and their optimizer state).
bool IsVocabPadded(const std::string& name);

// `full` cut to `request`: vocabulary-padded tensors are first resized to the loading
// layout's padded vocabulary (request.shape[0] * tp_size rows when split along dim 0), then
// the rank's slice is taken. INVALID_ARGUMENT when the shapes cannot match.
absl::StatusOr<HostTensor> CutSlice(const std::string& name, HostTensor full,
                                    const SliceRequest& request);

// An mt checkpoint directory with its (already read and, if wanted, verified) manifest.
// Tensors of the files in `files` (the load's verification kept them: LoadChoice::files) come
// from memory, the others from the directory.
absl::StatusOr<std::unique_ptr<TensorSource>> OpenCheckpointSource(
    const std::string& dir, mt::v1::CheckpointManifest manifest,
    std::shared_ptr<const InMemoryFiles> files = nullptr);

// The checkpoint or Hugging Face directory at `dir` (a checkpoint directory, not a save
// directory; see ChooseCheckpoint).
absl::StatusOr<std::unique_ptr<TensorSource>> OpenAnySource(const std::string& dir);

}  // namespace mt::checkpoint

#endif  // MT_COMMON_CHECKPOINT_RESHARD_H_
