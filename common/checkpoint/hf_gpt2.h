// Hugging Face GPT-2 (transformers' GPT2LMHeadModel) <-> mt, without LibTorch.
//
// A Hugging Face directory is `config.json` + `model.safetensors`. The mapping (ours ->
// theirs; N = global layer index; Conv1D weights are stored [in, out], i.e. transposed):
//   embedding.word_embeddings.weight [padded_vocab, h] -> transformer.wte.weight [vocab, h]
//                                                         (padding rows dropped)
//   embedding.position_embeddings.weight               -> transformer.wpe.weight
//   decoder.layers.N.input_layernorm.{weight,bias}     -> transformer.h.N.ln_1.*
//   decoder.layers.N.self_attention.linear_qkv.weight [3h, h] -> transformer.h.N.attn.c_attn
//       .weight [h, 3h]; our output rows are per head [q_h, k_h, v_h], theirs [q | k | v]:
//       rows permuted, then transposed (the bias permuted the same way)
//   decoder.layers.N.self_attention.linear_proj.*      -> transformer.h.N.attn.c_proj.* (T)
//   decoder.layers.N.pre_mlp_layernorm.*               -> transformer.h.N.ln_2.*
//   decoder.layers.N.mlp.linear_fc1.*                  -> transformer.h.N.mlp.c_fc.* (T)
//   decoder.layers.N.mlp.linear_fc2.*                  -> transformer.h.N.mlp.c_proj.* (T)
//   decoder.final_layernorm.*                          -> transformer.ln_f.*
//   output_layer.weight (untied models only)           -> lm_head.weight
// The activation: our MLP runs torch's tanh-approximated GELU (gelu(x, "tanh"), Megatron's
// and GPT-2's function). transformers calls that kernel "gelu_pytorch_tanh", which the export
// writes; GPT-2's own "gelu_new" is the same formula written out in Python, equal up to
// float rounding (import accepts both). LayerNorm epsilon from the model, attention scaled by
// 1/sqrt(head_dim), the lm_head tied unless the model is untied: the same function, so the
// logits agree (tests/gpu/hf_logits_check.py checks them against transformers).
//
// Thread-compatible free functions.
#ifndef MT_COMMON_CHECKPOINT_HF_GPT2_H_
#define MT_COMMON_CHECKPOINT_HF_GPT2_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint/host_tensor.h"
#include "mt/v1/checkpoint.pb.h"

namespace mt::checkpoint {

class TensorSource;

// True when `dir` has config.json and model.safetensors.
bool LooksLikeHfGpt2(const std::string& dir);

// The directory as a TensorSource with mt names ("model.<param>", full tensors, the
// vocabulary unpadded) and a weights-only manifest (model shape from config.json, no trainer
// state, tensor-parallel size 1). Errors name the missing or mis-shaped tensor or field.
absl::StatusOr<std::unique_ptr<TensorSource>> OpenHfGpt2Source(const std::string& dir);

// config.json for a model shape.
std::string HfGpt2ConfigJson(const mt::v1::ManifestModel& model, DType dtype);

// Writes `out_dir` (created; must not exist) with model.safetensors and config.json from
// `source`'s weights (fp32 master weights when the checkpoint has them), cast to `dtype`
// (F32, F16 or BF16), then generation_config.json and, when the checkpoint's job names its
// tokenizer files, vocab.json, merges.txt, tokenizer_config.json and special_tokens_map.json
// (hf_tokenizer_files.h). Returns the files written.
absl::StatusOr<std::vector<mt::v1::CheckpointFile>> ExportHfGpt2(TensorSource& source,
                                                                 const std::string& out_dir,
                                                                 DType dtype);

// Writes an mt checkpoint directory `out_dir` (created; must not exist): one shard with the
// model's weights in fp32 and a weights-only manifest, loadable by --load like any other.
absl::StatusOr<mt::v1::CheckpointManifest> ImportHfGpt2(const std::string& hf_dir,
                                                        const std::string& out_dir);

}  // namespace mt::checkpoint

#endif  // MT_COMMON_CHECKPOINT_HF_GPT2_H_
