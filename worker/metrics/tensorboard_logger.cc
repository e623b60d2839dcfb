#include "worker/metrics/tensorboard_logger.h"

#include <cmath>
#include <utility>

namespace mt::worker::metrics {

absl::StatusOr<std::unique_ptr<TensorBoardLogger>> TensorBoardLogger::Create(
    const std::string& dir, const TensorBoardOptions& options, absl::Time now) {
  if (options.world_size < 1) return absl::InvalidArgumentError("world_size must be >= 1");
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer = EventFileWriter::Create(dir, now);
  if (!writer.ok()) return writer.status();
  return std::unique_ptr<TensorBoardLogger>(
      new TensorBoardLogger(*std::move(writer), options, now));
}

void TensorBoardLogger::OnStep(const engine::StepMetrics& m, absl::Time now) {
  EventFileWriter& w = *writer_;
  const int64_t it = m.iteration;
  // A step the trainer did not read back (StepMetrics::synced false) has a NaN loss: nothing
  // is written for it (the callers sync every step when TensorBoard is on).
  if (!std::isnan(m.loss)) {
    w.AddScalar("lm loss", m.loss, it, now);
    w.AddScalar("lm loss vs samples", m.loss, m.consumed_samples, now);
  }
  w.AddScalar("learning-rate", m.learning_rate, it, now);
  w.AddScalar("learning-rate vs samples", m.learning_rate, m.consumed_samples, now);
  if (std::isfinite(m.grad_norm)) w.AddScalar("grad-norm", m.grad_norm, it, now);
  w.AddScalar("loss-scale", m.loss_scale, it, now);
  if (options_.global_batch_size > 0) {
    w.AddScalar("batch-size", static_cast<double>(options_.global_batch_size), it, now);
  }
  w.AddScalar("iteration-time", m.seconds, it, now);
  w.AddScalar("tokens-per-second", m.tokens_per_second, it, now);
  if (options_.flops_per_token > 0) {
    w.AddScalar("throughput",
                m.tokens_per_second * options_.flops_per_token / options_.world_size / 1e12, it,
                now);
  }
  if (m.mfu > 0) w.AddScalar("mfu", m.mfu, it, now);
  MaybeFlush(now);
}

void TensorBoardLogger::OnMemory(const engine::MemoryStats& memory, int64_t iteration,
                                 absl::Time now) {
  writer_->AddScalar("mem-allocated-bytes", static_cast<double>(memory.allocated_bytes), iteration,
                     now);
  writer_->AddScalar("mem-reserved-bytes", static_cast<double>(memory.reserved_bytes), iteration,
                     now);
  writer_->AddScalar("mem-max-allocated-bytes", static_cast<double>(memory.peak_allocated_bytes),
                     iteration, now);
  MaybeFlush(now);
}

void TensorBoardLogger::OnEval(const engine::EvalMetrics& e, int64_t consumed_samples,
                               absl::Time now) {
  writer_->AddScalar("lm loss validation", e.loss, e.iteration, now);
  writer_->AddScalar("lm loss validation vs samples", e.loss, consumed_samples, now);
  writer_->AddScalar("lm loss validation ppl", e.perplexity, e.iteration, now);
  // An evaluation is rare and worth seeing at once.
  last_flush_ = absl::InfinitePast();
  MaybeFlush(now);
}

void TensorBoardLogger::MaybeFlush(absl::Time now) {
  if (now - last_flush_ < options_.flush_every) return;
  last_flush_ = now;
  (void)Flush();
}

absl::Status TensorBoardLogger::Flush() {
  absl::Status s = writer_->Flush();
  if (!s.ok() && !failed_) {
    failed_ = true;
    return s;
  }
  return absl::OkStatus();
}

}  // namespace mt::worker::metrics
