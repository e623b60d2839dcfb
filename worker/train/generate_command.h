// `mt-worker generate`: text from a checkpoint on this machine, one device, streamed to stdout
// as it is produced (worker/generate/generator.h does the decoding).
//
//   mt-worker generate CHECKPOINT (--prompt TEXT | --prompt-file FILE) [--max-new-tokens N]
//       [--temperature T] [--top-k K] [--top-p P] [--seed S] [--stop TEXT] [-n SAMPLES]
//       [--device cpu|cuda[:N]] [--dtype auto|fp32|bf16|fp16] [--attention auto|math|fused]
//       [--vocab-file F --merge-file F] [-o text|json]
//
// CHECKPOINT: a save directory (its latest good checkpoint), a checkpoint directory or a Hugging
// Face GPT-2 directory. The tokenizer: --vocab-file/--merge-file, else the files the checkpoint's
// job spec names, else vocab.json/merges.txt in the checkpoint directory (our Hugging Face
// export writes them). -o text: one sample streams as it is produced; several are printed
// one after the other once done, each under a "--- sample i ---" line; the timings go to
// stderr. -o json: one JSON object on stdout at the end (samples, their finish reasons, the
// prompt's token count and the timings).
// Exit codes: 0 done; 1 generation failed; 2 usage, checkpoint or tokenizer error.
#ifndef MT_WORKER_TRAIN_GENERATE_COMMAND_H_
#define MT_WORKER_TRAIN_GENERATE_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/generate/generator.h"
#include "worker/generate/inference_model.h"

namespace mt::train {

// `args` are the arguments after "generate".
int RunGenerateCommand(const std::vector<std::string>& args);
const char* GenerateCommandUsage();

struct GenerateRun {
  generate::InferenceModel loaded;
  generate::GenerateResult result;
};

// The generation of `mt-worker generate ARGS` (args after "generate", without --help), also run
// by the rank of a generation job (inference_rank.h): `on_text` (optional) hears each sample's
// text as it is produced. Errors name the flag; *usage_error says whether the input was at
// fault (exit code 2) rather than the generation (1). `tp`: a tensor-parallel rank of a
// generation job (sharded_generate.h) loads its shard of the checkpoint and decodes with the
// other ranks of its group, which make the same call.
absl::StatusOr<GenerateRun> GenerateFromArgs(const std::vector<std::string>& args,
                                             const generate::TextCallback& on_text,
                                             bool* usage_error,
                                             const generate::TensorParallelPlace& tp = {});

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_GENERATE_COMMAND_H_
