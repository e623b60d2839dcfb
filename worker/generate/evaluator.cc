#include "worker/generate/evaluator.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/durations.h"
#include "common/base/status_macros.h"
#include "worker/model/gpt.h"

namespace mt::generate {
namespace {

absl::Status CheckBatch(const engine::TokenBatch& batch, const model::GptConfig& config) {
  if (batch.cols - 1 > config.max_positions()) {
    return absl::InvalidArgumentError(absl::StrCat("--context-length ", batch.cols - 1,
                                                   " is longer than the model's ",
                                                   config.max_positions(), " positions"));
  }
  for (int64_t t : batch.tokens) {
    if (t < 0 || t >= config.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("--data-path: token id ", t, " outside the model's vocabulary [0, ",
                       config.vocab_size, "): the data was tokenized with another tokenizer"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<EvalResult> EvaluateImpl(model::GptModel& gpt, engine::BatchSource& source,
                                        int64_t rows, int64_t batches,
                                        const std::function<void(int64_t)>& on_batch) {
  const auto start = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  const torch::Device device = gpt.output_weight().device();
  torch::Tensor loss_sum;
  EvalResult out;
  for (int64_t i = 0; batches < 0 || i < batches; ++i) {
    absl::StatusOr<engine::TokenBatch> batch = source.Next(rows);
    if (!batch.ok() && batches < 0 && absl::IsOutOfRange(batch.status()) && i > 0) break;
    MT_RETURN_IF_ERROR(batch.status());
    MT_RETURN_IF_ERROR(CheckBatch(*batch, gpt.config()));
    const torch::Tensor sample =
        torch::tensor(batch->tokens, torch::kLong).view({batch->rows, batch->cols}).to(device);
    const torch::Tensor loss = gpt.LossOnSample(sample);
    loss_sum = i == 0 ? loss : loss_sum + loss;
    ++out.batches;
    out.tokens += batch->rows * (batch->cols - 1);
    if (on_batch) on_batch(out.batches);
  }
  if (out.batches == 0) return absl::OutOfRangeError("evaluation: no batch to evaluate");
  out.loss = loss_sum.item<double>() / static_cast<double>(out.batches);
  out.perplexity = std::exp(std::min(20.0, out.loss));
  out.seconds = SecondsSince(start);
  return out;
}

}  // namespace

absl::StatusOr<EvalResult> EvaluateLoss(model::GptModel& gpt, engine::BatchSource& source,
                                        int64_t micro_batch_size, int64_t batches,
                                        const std::function<void(int64_t)>& on_batch) {
  if (micro_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--micro-batch-size ", micro_batch_size, ": want an integer >= 1"));
  }
  const bool was_training = gpt.is_training();
  gpt.eval();
  absl::StatusOr<EvalResult> out;
  try {
    out = EvaluateImpl(gpt, source, micro_batch_size, batches, on_batch);
  } catch (const c10::Error& e) {
    out = absl::InternalError(absl::StrCat("evaluation: ", e.what_without_backtrace()));
  }
  gpt.train(was_training);
  return out;
}

}  // namespace mt::generate
