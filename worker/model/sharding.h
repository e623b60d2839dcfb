// How each GPT parameter is split over the tensor-parallel group (Megatron-core's rule), by its
// Megatron-core name (gpt.h). The model (TP layers), the optimizer (a replicated parameter
// counts once in the global gradient norm) and checkpoints (resharding between layouts) all
// read this one table. Names always carry GLOBAL layer indices (decoder.layers.N with N the
// layer's index in the whole model), whatever the pipeline stage holding it. Pure: no LibTorch.
#ifndef MT_WORKER_MODEL_SHARDING_H_
#define MT_WORKER_MODEL_SHARDING_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace mt::model {

enum class TpSplit {
  kReplicated,  // every TP rank holds all of it (LayerNorms, position embedding, row biases)
  kDim0,        // split along dim 0: column-parallel weights/biases, vocab-parallel tables
  kDim1,        // split along dim 1: row-parallel weights
};

// embedding.word_embeddings.weight, output_layer.weight          -> kDim0 (vocabulary)
// *.self_attention.linear_qkv.{weight,bias}, *.mlp.linear_fc1.*   -> kDim0 (column parallel;
//   QKV is laid out per head as [q_h, k_h, v_h], so a split keeps whole heads)
// *.self_attention.linear_proj.weight, *.mlp.linear_fc2.weight    -> kDim1 (row parallel)
// everything else (LayerNorms, position embedding, linear_proj/fc2 biases) -> kReplicated
TpSplit TensorParallelSplit(absl::string_view name);

// The dimension TensorParallelSplit(name) splits along: 0, 1, or -1 when replicated (the form
// checkpoint slices take).
int TensorParallelSplitDim(absl::string_view name);

// The global layer index in a decoder.layers.N.* name, or -1 for a name outside the layers.
int64_t LayerIndexOf(absl::string_view name);

// `name` with its layer index replaced by `layer` (unchanged when it has none).
std::string WithLayerIndex(absl::string_view name, int64_t layer);

}  // namespace mt::model

#endif  // MT_WORKER_MODEL_SHARDING_H_
