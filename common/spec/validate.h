// The one validator of mt.v1.JobSpec, shared by every front end (YAML, Megatron-LM flags, the
// gRPC API) and by the coordinator. Thread-compatible free functions; no state, no I/O (but
// CheckPathsConfined, which resolves paths on the file system).
#ifndef MT_COMMON_SPEC_VALIDATE_H_
#define MT_COMMON_SPEC_VALIDATE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/base/confine.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::spec {

// Every problem in `spec`, one sentence each, in a fixed order (job, model, parallel, training,
// data, checkpoint, evaluation, logging, restart, resources, then the checks that apply to every
// field). Each names the field by its full path (as in YAML: "model.hidden_size"), the offending
// value, the rule, and a fix, e.g.
//   model.hidden_size (1000) must be divisible by model.num_attention_heads (16); choose a
//   multiple of 16 such as 1008
// Where the problem is a missing value and the field has a Megatron-LM flag, the flag is named
// too: "data.data_path (--data-path) is empty: ...". Empty when the spec is valid.
//
// Meant to run after ApplyDefaults, but an unset field that has a default counts as having it
// (TP 0 is TP 1, an unset dropout is 0.1), so the verdict is the same before and after.
// What it checks, beyond the ranges written in job_spec.proto: divisibility for tensor, pipeline
// (even, explicit or interleaved), context and sequence parallelism; world = TP*CP*PP*DP;
// global batch divisible by micro batch * DP when DP is known (else by micro batch); exactly one
// of train_iters/train_samples and Megatron's iteration/sample schedule rules; loss scaling only
// with fp16; the distributed-optimizer overlap rules; data paths (blend or separate sets),
// weights, split, tokenizer files; every string: UTF-8, at most 4096 bytes, no NUL (paths through
// ValidatePath), no shell syntax ("$(", "${", "`", ";", "|", "&&", ">", "<", newline); every
// enum: a known value.
std::vector<std::string> ListSpecProblems(const mt::v1::JobSpec& spec);

// OK, or kInvalidArgument whose message lists every problem of ListSpecProblems, one per line
// (a user fixes a spec in one round rather than one error at a time).
absl::Status ValidateSpec(const mt::v1::JobSpec& spec);

// Makes every relative path field absolute under `base_dir` (the directory of the job file, or
// the client's working directory): data.{data_path,train_data_path,valid_data_path,
// test_data_path}[].prefix, data.tokenizer.{vocab_file,merge_file}, data.data_cache_path,
// checkpoint.{save_dir,load_dir}, logging.tensorboard_dir. Empty fields are left alone; every
// result (absolute paths too) is normalized lexically: "." components and repeated slashes
// removed, ".." removing the component before it (as Python's os.path.normpath; through a
// symbolic link that differs from what the file system would do, so give such paths resolved).
// The client runs this before submitting, because the coordinator and workers have another
// working directory. Errors: `base_dir` not absolute; a path starting with '~' (mt does not
// expand it; give an absolute path).
absl::Status ResolveRelativePaths(mt::v1::JobSpec* spec, absl::string_view base_dir);

// What the coordinator accepts at its API (SubmitJob), beyond ValidateSpec: every path field
// (the ones ResolveRelativePaths handles) absolute and normalized, so no '..' can walk out of
// a directory a name was checked against and every daemon reads the same file. One problem per
// path, naming the field and the normalized path to give instead.
std::vector<std::string> ListSubmittedPathProblems(const mt::v1::JobSpec& spec);
absl::Status ValidateSubmittedPaths(const mt::v1::JobSpec& spec);

// Every path field (as above) resolved (common/base/confine.h: links followed, '..' after them)
// and checked against `roots`; OK when `roots` is empty. PERMISSION_DENIED listing each path
// outside the roots, one per line, naming the field, where it resolves and the roots (a data
// prefix is checked with its .bin and .idx files). The
// coordinator checks at SubmitJob and each worker again before a rank starts. Reads the file
// system (lstat, readlink), unlike the rest of this file.
absl::Status CheckPathsConfined(const mt::v1::JobSpec& spec, const AllowedRoots& roots);

}  // namespace mt::spec

#endif  // MT_COMMON_SPEC_VALIDATE_H_
