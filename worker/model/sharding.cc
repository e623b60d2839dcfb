#include "worker/model/sharding.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mt::model {
namespace {

constexpr absl::string_view kLayersPrefix = "decoder.layers.";

}  // namespace

TpSplit TensorParallelSplit(absl::string_view name) {
  if (name == "embedding.word_embeddings.weight" || name == "output_layer.weight") {
    return TpSplit::kDim0;
  }
  if (absl::EndsWith(name, ".self_attention.linear_qkv.weight") ||
      absl::EndsWith(name, ".self_attention.linear_qkv.bias") ||
      absl::EndsWith(name, ".mlp.linear_fc1.weight") ||
      absl::EndsWith(name, ".mlp.linear_fc1.bias")) {
    return TpSplit::kDim0;
  }
  if (absl::EndsWith(name, ".self_attention.linear_proj.weight") ||
      absl::EndsWith(name, ".mlp.linear_fc2.weight")) {
    return TpSplit::kDim1;
  }
  return TpSplit::kReplicated;
}

int TensorParallelSplitDim(absl::string_view name) {
  switch (TensorParallelSplit(name)) {
    case TpSplit::kDim0:
      return 0;
    case TpSplit::kDim1:
      return 1;
    case TpSplit::kReplicated:
      break;
  }
  return -1;
}

int64_t LayerIndexOf(absl::string_view name) {
  if (!absl::StartsWith(name, kLayersPrefix)) return -1;
  absl::string_view rest = name.substr(kLayersPrefix.size());
  const size_t dot = rest.find('.');
  int64_t layer = -1;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, dot), &layer)) return -1;
  return layer;
}

std::string WithLayerIndex(absl::string_view name, int64_t layer) {
  if (LayerIndexOf(name) < 0) return std::string(name);
  absl::string_view rest = name.substr(kLayersPrefix.size());
  return absl::StrCat(kLayersPrefix, layer, rest.substr(rest.find('.')));
}

}  // namespace mt::model
