#include "worker/metrics/rank_telemetry.h"

namespace mt::worker::metrics {

void TelemetryAccumulator::AddStep(const engine::StepMetrics& m) {
  mt::v1::RankTelemetry& t = pending_;
  t.set_step(m.iteration);
  t.set_loss(m.loss);
  t.set_learning_rate(m.learning_rate);
  t.set_grad_norm(m.grad_norm);
  t.set_loss_scale(m.loss_scale);
  t.set_skipped_steps(m.skipped_total);
  // Log steps carry the interval's rate, which ends with a device read (trainer.h); it stands
  // until the next log step.
  if (m.interval_tokens_per_second > 0) {
    interval_tokens_per_second_ = m.interval_tokens_per_second;
    interval_mfu_ = m.interval_mfu;
  }
  const bool interval = interval_tokens_per_second_ > 0;
  t.set_tokens_per_second(interval ? interval_tokens_per_second_ : m.tokens_per_second);
  t.set_mfu(interval ? interval_mfu_ : m.mfu);
  t.set_consumed_samples(m.consumed_samples);
  t.add_step_seconds(m.seconds);
  t.set_tokens(t.tokens() + m.tokens);
  t.set_data_wait_seconds(t.data_wait_seconds() + m.data_seconds);
}

void TelemetryAccumulator::AddCommunication(const std::string& collective, const std::string& group,
                                            double seconds, int64_t calls) {
  auto& [s, c] = comm_[{collective, group}];
  s += seconds;
  c += calls;
}

mt::v1::RankTelemetry TelemetryAccumulator::Take(const engine::MemoryStats& memory,
                                                 absl::Time now) {
  mt::v1::RankTelemetry out;
  out.Swap(&pending_);
  // The latest values stay for the next telemetry, whose steps overwrite them.
  pending_.set_step(out.step());
  out.set_memory_allocated_bytes(memory.allocated_bytes);
  out.set_memory_reserved_bytes(memory.reserved_bytes);
  out.set_memory_peak_bytes(memory.peak_allocated_bytes);
  for (const auto& [key, value] : comm_) {
    mt::v1::CommunicationTime* c = out.add_communication();
    c->set_collective(key.first);
    c->set_group(key.second);
    c->set_seconds(value.first);
    c->set_calls(value.second);
  }
  comm_.clear();
  last_take_ = now;
  return out;
}

}  // namespace mt::worker::metrics
