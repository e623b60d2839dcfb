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

namespace mt::train {

// `args` are the arguments after "generate".
int RunGenerateCommand(const std::vector<std::string>& args);
const char* GenerateCommandUsage();

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_GENERATE_COMMAND_H_
