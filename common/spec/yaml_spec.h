// YAML job files as a front end of mt.v1.JobSpec (DESIGN.md §5), driven by protobuf reflection:
// keys are the proto field names, so a new proto field is a new YAML key without code changes.
// Thread-compatible free functions; no state, no I/O.
//
//   name: gpt-350m
//   model: {num_layers: 24, hidden_size: 1024, num_attention_heads: 16, seq_length: 1024}
//   parallel: {tp: 2, pp: 2, dp: auto}
//   training:
//     micro_batch_size: 4
//     global_batch_size: 64
//     train_iters: 100000
//     lr: 1.5e-4
//     precision: bf16
//   data:
//     data_path: [0.3, /data/a_text_document, 0.7, /data/b_text_document]
//     tokenizer: {vocab_file: gpt2-vocab.json, merge_file: gpt2-merges.txt}
//
// Conventions:
//   - Keys are snake_case proto field names nested as in JobSpec (model:, parallel:, training:,
//     data:, checkpoint:, evaluation:, logging:, restart:, resources:, plus the top-level name,
//     priority, from_checkpoint).
//   - Aliases under parallel: tp, pp, dp, cp for tensor_model_parallel_size,
//     pipeline_model_parallel_size, data_parallel_size, context_parallel_size. "auto" is 0 for
//     data_parallel_size (dp) and world_size. Giving a field twice (also through its alias) is an
//     error.
//   - Enums by short lower-case name (precision: bf16, lr_decay_style: cosine,
//     recompute_granularity: full, device: gpu, tokenizer type: gpt2_bpe) or the full name
//     (PRECISION_BF16), any case, '-' for '_' (inverse-square-root). tokenizer type also accepts
//     Megatron's GPT2BPETokenizer.
//   - Booleans: true/false (also yes/no/on/off). Integers: decimal, range-checked for their
//     field (int32 fields reject 3000000000). Numbers: decimal or exponent (1.5e-4), finite.
//   - Lists of data paths (data_path, train_data_path, valid_data_path, test_data_path): a string
//     (one prefix, weight 1), a list of {weight, prefix} maps, or Megatron's flat list
//     [0.3, a, 0.7, b]. Other repeated fields take a YAML list.
//   - A key with an empty value (`load_dir:` or `~`) leaves the field unset, with a warning.
//   - Errors (kInvalidArgument) list every problem found, one per line, each naming the key by
//     its full path and, where known, the line: unknown keys (with "did you mean"), wrong types,
//     out-of-range integers, duplicate keys, bad enum names, a YAML syntax error, several
//     documents ("---"), an empty document, a document over 1 MiB.
#ifndef MT_COMMON_SPEC_YAML_SPEC_H_
#define MT_COMMON_SPEC_YAML_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::spec {

// A front end's result: the spec as written (defaults not applied) and notices for the user
// (e.g. a Megatron flag accepted without effect). Warnings never change the spec.
struct ParsedSpec {
  mt::v1::JobSpec spec;
  std::vector<std::string> warnings;
};

inline constexpr size_t kMaxYamlSpecBytes = 1 << 20;

// Parses one YAML document into a JobSpec. Defaults are not applied and nothing is validated
// beyond types and integer ranges: run ApplyDefaults and ValidateSpec next.
absl::StatusOr<ParsedSpec> ParseYamlSpec(absl::string_view yaml);

// Writes the fields that are set (proto3 presence), in field order, with the long key names and
// short enum names. ParseYamlSpec(SpecToYaml(s))->spec equals s for every s whose enum fields
// hold known values.
std::string SpecToYaml(const mt::v1::JobSpec& spec);

}  // namespace mt::spec

#endif  // MT_COMMON_SPEC_YAML_SPEC_H_
