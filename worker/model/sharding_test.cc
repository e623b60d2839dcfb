#include "worker/model/sharding.h"

#include <gtest/gtest.h>

namespace mt::model {
namespace {

TEST(Sharding, MegatronCoreRule) {
  struct Case {
    const char* name;
    TpSplit want;
  };
  const Case cases[] = {
      {"embedding.word_embeddings.weight", TpSplit::kDim0},
      {"embedding.position_embeddings.weight", TpSplit::kReplicated},
      {"output_layer.weight", TpSplit::kDim0},
      {"decoder.layers.0.input_layernorm.weight", TpSplit::kReplicated},
      {"decoder.layers.0.input_layernorm.bias", TpSplit::kReplicated},
      {"decoder.layers.3.self_attention.linear_qkv.weight", TpSplit::kDim0},
      {"decoder.layers.3.self_attention.linear_qkv.bias", TpSplit::kDim0},
      {"decoder.layers.3.self_attention.linear_proj.weight", TpSplit::kDim1},
      {"decoder.layers.3.self_attention.linear_proj.bias", TpSplit::kReplicated},
      {"decoder.layers.11.pre_mlp_layernorm.weight", TpSplit::kReplicated},
      {"decoder.layers.11.mlp.linear_fc1.weight", TpSplit::kDim0},
      {"decoder.layers.11.mlp.linear_fc1.bias", TpSplit::kDim0},
      {"decoder.layers.11.mlp.linear_fc2.weight", TpSplit::kDim1},
      {"decoder.layers.11.mlp.linear_fc2.bias", TpSplit::kReplicated},
      {"decoder.final_layernorm.weight", TpSplit::kReplicated},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(TensorParallelSplit(c.name), c.want) << c.name;
    const int dim = c.want == TpSplit::kDim0 ? 0 : (c.want == TpSplit::kDim1 ? 1 : -1);
    EXPECT_EQ(TensorParallelSplitDim(c.name), dim) << c.name;
  }
}

TEST(Sharding, LayerIndices) {
  EXPECT_EQ(LayerIndexOf("decoder.layers.17.mlp.linear_fc1.weight"), 17);
  EXPECT_EQ(LayerIndexOf("decoder.final_layernorm.weight"), -1);
  EXPECT_EQ(LayerIndexOf("embedding.word_embeddings.weight"), -1);
  EXPECT_EQ(LayerIndexOf("decoder.layers.x.mlp"), -1);
  EXPECT_EQ(WithLayerIndex("decoder.layers.2.mlp.linear_fc1.weight", 10),
            "decoder.layers.10.mlp.linear_fc1.weight");
  EXPECT_EQ(WithLayerIndex("output_layer.weight", 10), "output_layer.weight");
}

}  // namespace
}  // namespace mt::model
