// Megatron-LM's pretrain_gpt.py command line as a front end of mt.v1.JobSpec (DESIGN.md §5), so
// that existing launch scripts keep working:
//
//   mtctl submit --megatron -- --num-layers 24 --hidden-size 1024 ... --fp16
//
// Thread-compatible free functions; no state, no I/O.
#ifndef MT_COMMON_SPEC_MEGATRON_FLAGS_H_
#define MT_COMMON_SPEC_MEGATRON_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/spec/yaml_spec.h"

namespace mt::spec {

// Parses pretrain_gpt.py flags into a JobSpec. Defaults are NOT applied (run ApplyDefaults, then
// ValidateSpec, as for every front end); fields whose flag is absent stay unset.
//
// Syntax follows argparse as Megatron configures it (allow_abbrev=False): `--flag value` or
// `--flag=value`; a value may start with '-' only when it is a number ("--min-lr -1" is refused
// by range checks later, not by the syntax). A flag repeated with a different value: the last
// one wins, with a warning (argparse's behaviour; scripts append overrides). A leading
// "pretrain_gpt.py" (or ".../pretrain_gpt.py") argument is skipped with a warning.
//
// --data-path / --train-data-path / --valid-data-path / --test-data-path take every following
// argument up to the next flag: one prefix (weight 1) or weight-prefix pairs "w1 p1 w2 p2 ...".
// --split "969/30/1" is normalised to "969,30,1".
//
// Flags with no meaning in mt (--dataset-impl mmap, --distributed-backend nccl, fusion and
// logging switches, --local-rank from torch.distributed.launch, ...) are accepted with a warning
// `--dataset-impl mmap: accepted, no effect in mt` in ParsedSpec::warnings; where Megatron
// restricts their values (choices), those are still checked.
//
// Errors (kInvalidArgument, the first problem found, naming the flag):
//   unknown flag --foo[; did you mean --bar?] (or a specific hint, e.g. for
//     --gradient-accumulation-steps);
//   --swiglu: not supported ... (a Megatron flag for an architecture mt does not train);
//   --lr: expected a number, got "abc";  --num-layers: missing value;  --fp16 takes no value;
//   --fp16 and --bf16 together (Megatron rejects the pair too);
//   --checkpoint-activations (= --recompute-granularity full) with --recompute-granularity
//     selective, or --recompute-activations with --recompute-granularity full: contradictory,
//     refused rather than "last one wins" because they are different flags;
//   --tokenizer-type other than GPT2BPETokenizer; --position-embedding-type other than
//     learned_absolute; --normalization other than LayerNorm; --lr-decay-style WSD;
//   a positional argument (values belong to a flag).
absl::StatusOr<ParsedSpec> ParseMegatronFlags(const std::vector<std::string>& args);

// The Megatron-LM flag that sets a JobSpec field, by the field's dotted path
// ("model.num_layers" -> "--num-layers"; "data.data_path" -> "--data-path"), or "" when none
// does. Used to name flags in validation messages.
std::string MegatronFlagForField(absl::string_view field_path);

// Every flag ParseMegatronFlags accepts (mapped and no-effect ones), sorted; for help texts.
std::vector<std::string> KnownMegatronFlags();

}  // namespace mt::spec

#endif  // MT_COMMON_SPEC_MEGATRON_FLAGS_H_
