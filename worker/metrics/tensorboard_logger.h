// What a rank writes to --tensorboard-dir (logging.tensorboard_dir): Megatron-LM's scalar
// names, so that existing TensorBoard layouts and habits carry over. Written by the rank whose
// progress speaks for the job (last pipeline stage, tp = cp = dp = 0), every step:
//
//   lm loss, lm loss vs samples        the step's loss (x = iteration / consumed samples)
//   learning-rate, learning-rate vs samples
//   grad-norm                          before clipping (omitted on a skipped step)
//   loss-scale, batch-size, iteration-time (s), tokens-per-second (whole job)
//   throughput                         TFLOP/s per GPU (Megatron's --log-throughput figure)
//   mfu                                model FLOPs utilisation, when the device peak is known
// at every logging interval:
//   mem-allocated-bytes, mem-reserved-bytes, mem-max-allocated-bytes
// after every evaluation:
//   lm loss validation, lm loss validation vs samples, lm loss validation ppl
//
// Files are flushed every `flush_every` and on destruction. Thread-compatible.
#ifndef MT_WORKER_METRICS_TENSORBOARD_LOGGER_H_
#define MT_WORKER_METRICS_TENSORBOARD_LOGGER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/engine/trainer.h"
#include "worker/metrics/event_file.h"

namespace mt::worker::metrics {

struct TensorBoardOptions {
  // Ranks of the job, to turn the job's FLOP/s into per-GPU throughput.
  int world_size = 1;
  // Training FLOPs per token (TrainPlan::flops_per_token); 0 = no throughput.
  double flops_per_token = 0.0;
  int64_t global_batch_size = 0;
  absl::Duration flush_every = absl::Seconds(2);
};

class TensorBoardLogger {
 public:
  static absl::StatusOr<std::unique_ptr<TensorBoardLogger>> Create(
      const std::string& dir, const TensorBoardOptions& options, absl::Time now);

  void OnStep(const engine::StepMetrics& m, absl::Time now);
  void OnMemory(const engine::MemoryStats& memory, int64_t iteration, absl::Time now);
  void OnEval(const engine::EvalMetrics& e, int64_t consumed_samples, absl::Time now);
  // Writes what is buffered; an error once (the caller logs it; training goes on).
  absl::Status Flush();
  const std::string& path() const { return writer_->path(); }

 private:
  TensorBoardLogger(std::unique_ptr<EventFileWriter> writer, TensorBoardOptions options,
                    absl::Time now)
      : writer_(std::move(writer)), options_(options), last_flush_(now) {}
  void MaybeFlush(absl::Time now);

  std::unique_ptr<EventFileWriter> writer_;
  TensorBoardOptions options_;
  absl::Time last_flush_;
  bool failed_ = false;
};

}  // namespace mt::worker::metrics

#endif  // MT_WORKER_METRICS_TENSORBOARD_LOGGER_H_
