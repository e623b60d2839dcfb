// The files besides the weights that make a Hugging Face GPT-2 export usable on its own
// (transformers' `pipeline("text-generation", model=DIR)`, AutoTokenizer):
//   vocab.json, merges.txt        the GPT-2 BPE files the checkpoint's job trained with
//                                 (data.tokenizer), copied byte for byte after they are checked
//                                 to be a byte-level BPE vocabulary of the model's size
//   tokenizer_config.json         GPT2Tokenizer, <|endoftext|> as bos/eos/unk, the model's
//   special_tokens_map.json       context as model_max_length
//   generation_config.json        eos/bos/pad = <|endoftext|>, greedy, 64 new tokens
// No LibTorch. Thread-compatible free function.
#ifndef MT_COMMON_CHECKPOINT_HF_TOKENIZER_FILES_H_
#define MT_COMMON_CHECKPOINT_HF_TOKENIZER_FILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mt/v1/checkpoint.pb.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::checkpoint {

// Writes generation_config.json into `out_dir` (an existing directory), and the tokenizer
// files when `tokenizer` names files that are here and hold a vocabulary of the model's
// vocab_size. Without them (a job on synthetic tokens names placeholders; a model trained with
// another vocabulary) the export gets the generation config only, and a warning is logged.
// Returns the files written. Errors: named files that exist but are not GPT-2 BPE files
// (INVALID_ARGUMENT naming them, never quoting their bytes); read and write errors.
absl::StatusOr<std::vector<mt::v1::CheckpointFile>> WriteHfTokenizerFiles(
    const mt::v1::ManifestModel& model, const mt::v1::TokenizerSpec& tokenizer,
    const std::string& out_dir);

}  // namespace mt::checkpoint

#endif  // MT_COMMON_CHECKPOINT_HF_TOKENIZER_FILES_H_
