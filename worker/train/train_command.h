// `mt-worker train`: trains a job spec on this machine, one device, outside the service
// (development, debugging, benchmarks).
//
//   mt-worker train --spec job.yaml [--device cpu|cuda|cuda:N] [--synthetic-data]
//                   [--train-iters N] [--peak-tflops F] [--attention auto|math|fused|cudnn|flash]
//
// The spec goes through the same path as a submitted job (ParseYamlSpec, ApplyDefaults,
// ValidateSpec, ResolveForLayout with one data-parallel rank); the data is spec.data through
// worker/data (Megatron's GPT datasets), or synthetic tokens with --synthetic-data (the spec's
// data section is then ignored); then the rank session (session.h) runs it with LogReporter
// (log_reporter.h): progress lines on stderr, a final summary line (key=value) on stdout.
// Exit codes: 0 trained; 1 training failed; 2 usage, spec or data-setup error.
#ifndef MT_WORKER_TRAIN_TRAIN_COMMAND_H_
#define MT_WORKER_TRAIN_TRAIN_COMMAND_H_

#include <string>
#include <vector>

namespace mt::train {

// `args` are the arguments after "train" (no program name). Reads no global flags.
int RunTrainCommand(const std::vector<std::string>& args);

// The usage text (also printed for --help).
const char* TrainCommandUsage();

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_TRAIN_COMMAND_H_
