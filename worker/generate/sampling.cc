#include "worker/generate/sampling.h"

#include <ATen/ATen.h>
#include <ATen/core/Generator.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace mt::generate {

absl::Status ValidateSampling(const SamplingOptions& o) {
  if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--temperature ", o.temperature, ": want a number >= 0 (0 = greedy)"));
  }
  if (o.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--top-k ", o.top_k, ": want an integer >= 0 (0 = no limit)"));
  }
  if (!(o.top_p > 0.0 && o.top_p <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--top-p ", o.top_p, ": want a number in (0, 1] (1 = no limit)"));
  }
  return absl::OkStatus();
}

at::Tensor NextTokens(const at::Tensor& logits, int64_t vocab_size, const SamplingOptions& o,
                      at::Generator& generator) {
  at::Tensor scores = logits.narrow(-1, 0, std::min(vocab_size, logits.size(-1)));
  if (o.temperature == 0.0) return scores.argmax(-1);
  scores = scores / o.temperature;
  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
  if (o.top_k > 0 && o.top_k < scores.size(-1)) {
    const at::Tensor kth = std::get<0>(scores.topk(o.top_k, -1)).narrow(-1, o.top_k - 1, 1);
    scores = scores.masked_fill(scores.lt(kth), kMinusInf);
  }
  if (o.top_p < 1.0) {
    auto [sorted, order] = scores.sort(-1, /*descending=*/true);
    const at::Tensor probs = sorted.softmax(-1);
    // Drop a token when the tokens before it already reach top_p (the first always stays).
    const at::Tensor before = probs.cumsum(-1) - probs;
    const at::Tensor drop_sorted = before.ge(o.top_p);
    const at::Tensor drop = at::zeros_like(drop_sorted).scatter(-1, order, drop_sorted);
    scores = scores.masked_fill(drop, kMinusInf);
  }
  // Draw on the CPU from the caller's generator: reproducible whatever the device.
  const at::Tensor probs = scores.softmax(-1).to(at::kCPU);
  return at::multinomial(probs, 1, /*replacement=*/false, generator)
      .squeeze(-1)
      .to(logits.device());
}

}  // namespace mt::generate
