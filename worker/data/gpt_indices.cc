#include "worker/data/gpt_indices.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mt::data {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// numpy's pairwise_sum for float64 (numpy/core/src/umath/loops_utils.h.src), blocks of 128
// with 8 accumulators; np.sum(a) is 0 + pairwise_sum(a).
double PairwiseSum(const double* a, int64_t n) {
  if (n < 8) {
    double res = -0.0;
    for (int64_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return PairwiseSum(a, n2) + PairwiseSum(a + n2, n - n2);
}

bool MulOverflows(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

absl::string_view SplitName(Split split) {
  switch (split) {
    case Split::kTrain:
      return "train";
    case Split::kValid:
      return "valid";
    case Split::kTest:
      return "test";
  }
  return "unknown";
}

double NumpySum(absl::Span<const double> values) {
  return 0.0 + PairwiseSum(values.data(), static_cast<int64_t>(values.size()));
}

std::vector<double> Normalize(absl::Span<const double> weights) {
  const double sum = NumpySum(weights);
  std::vector<double> out(weights.begin(), weights.end());
  for (double& w : out) w = w / sum;
  return out;
}

double RoundHalfEven(double x) {
  const double floor = std::floor(x);
  const double diff = x - floor;
  if (diff > 0.5) return floor + 1.0;
  if (diff < 0.5) return floor;
  return std::fmod(floor, 2.0) == 0.0 ? floor : floor + 1.0;
}

absl::StatusOr<std::array<double, kNumSplits>> ParseSplit(absl::string_view text) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "split \"", text, "\": ", why,
        "; expected up to three non-negative weights for train,valid,test such as 969,30,1"));
  };
  std::vector<absl::string_view> parts =
      absl::StrSplit(text, absl::ByAnyChar(",/"), absl::SkipWhitespace());
  if (parts.empty()) return bad("no weights");
  if (parts.size() > static_cast<size_t>(kNumSplits)) return bad("more than three weights");
  std::array<double, kNumSplits> raw = {0.0, 0.0, 0.0};
  for (size_t i = 0; i < parts.size(); ++i) {
    const absl::string_view p = absl::StripAsciiWhitespace(parts[i]);
    double v = 0;
    if (!absl::SimpleAtod(p, &v) || !std::isfinite(v)) {
      return bad(absl::StrCat("\"", p, "\" is not a number"));
    }
    if (v < 0) return bad(absl::StrCat("weight ", p, " is negative"));
    raw[i] = v;
  }
  const double sum = NumpySum(raw);
  if (!(sum > 0)) return bad("the weights sum to 0");
  std::array<double, kNumSplits> out;
  for (int i = 0; i < kNumSplits; ++i) out[i] = raw[i] / sum;
  return out;
}

std::array<std::optional<DocumentRange>, kNumSplits> SplitDocuments(
    const std::array<double, kNumSplits>& w, int64_t num_documents) {
  // functools.reduce(lambda a, b: a + [a[-1] + b], [[0], *w]): left-to-right partial sums.
  std::array<double, kNumSplits + 1> c;
  c[0] = 0.0;
  for (int i = 0; i < kNumSplits; ++i) c[i + 1] = c[i] + w[i];
  const double n = static_cast<double>(num_documents);
  std::array<std::optional<DocumentRange>, kNumSplits> out;
  for (int i = 0; i < kNumSplits; ++i) {
    if (c[i + 1] <= c[i]) continue;  // weight 0: Megatron's split matrix holds None
    DocumentRange r;
    r.begin = static_cast<int64_t>(RoundHalfEven(c[i] * n));
    r.end = static_cast<int64_t>(RoundHalfEven(c[i + 1] * n));
    // Normalised weights sum to 1 within an ulp, so the last end rounds to N; clamp anyway so
    // that the ranges never leave the dataset.
    r.begin = std::clamp<int64_t>(r.begin, 0, num_documents);
    r.end = std::clamp<int64_t>(r.end, r.begin, num_documents);
    out[i] = r;
  }
  return out;
}

absl::StatusOr<std::array<int64_t, kNumSplits>> TrainValidTestNumSamples(const SampleBudget& b) {
  if (b.global_batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("global batch size must be positive, got ", b.global_batch_size));
  }
  if ((b.train_iters > 0) == (b.train_samples > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("exactly one of train_iters (", b.train_iters,
                                                   ") and train_samples (", b.train_samples,
                                                   ") must be positive"));
  }
  if (b.eval_interval < 0 || b.eval_iters < 0) {
    return absl::InvalidArgumentError(absl::StrCat("eval_interval (", b.eval_interval,
                                                   ") and eval_iters (", b.eval_iters,
                                                   ") must not be negative"));
  }
  std::array<int64_t, kNumSplits> out = {0, 0, 0};
  int64_t train_iters = b.train_iters;
  if (b.train_samples > 0) {
    out[0] = b.train_samples;
    train_iters = b.train_samples / b.global_batch_size;
  } else if (MulOverflows(b.train_iters, b.global_batch_size, &out[0])) {
    return absl::InvalidArgumentError("train_iters * global_batch_size overflows int64");
  }
  if (b.eval_interval > 0) {
    int64_t eval_iters = 0;
    if (MulOverflows(train_iters / b.eval_interval + 1, b.eval_iters, &eval_iters) ||
        MulOverflows(eval_iters, b.global_batch_size, &out[1])) {
      return absl::InvalidArgumentError("the validation sample count overflows int64");
    }
  }
  if (MulOverflows(b.eval_iters, b.global_batch_size, &out[2])) {
    return absl::InvalidArgumentError("the test sample count overflows int64");
  }
  return out;
}

absl::StatusOr<EpochPlan> PlanEpochs(int64_t tokens_per_epoch, int64_t seq_length,
                                     int64_t num_samples) {
  if (seq_length <= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence length must be at least 2, got ", seq_length));
  }
  if (num_samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative sample count ", num_samples));
  }
  if (tokens_per_epoch <= kExtraTokens) {
    return absl::FailedPreconditionError(
        absl::StrCat("the documents hold ", tokens_per_epoch,
                     " tokens: too few to draw any sample (give the split more documents)"));
  }
  int64_t requested = 0;
  if (MulOverflows(num_samples, seq_length, &requested) || requested > kInt64Max - kExtraTokens) {
    return absl::InvalidArgumentError("num_samples * seq_length overflows int64");
  }
  requested += kExtraTokens;
  EpochPlan plan;
  plan.tokens_per_epoch = tokens_per_epoch;
  // The fewest epochs E >= 1 with E * tokens_per_epoch >= requested (the loop in
  // _get_num_epochs, in closed form).
  plan.num_epochs = std::max<int64_t>(1, (requested - 1) / tokens_per_epoch + 1);
  int64_t total_tokens = 0;
  if (MulOverflows(plan.num_epochs, tokens_per_epoch, &total_tokens)) {
    return absl::InvalidArgumentError("num_epochs * tokens_per_epoch overflows int64");
  }
  if (plan.num_epochs > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(plan.num_epochs, " epochs requested: more than Megatron's int32 allows"));
  }
  plan.num_samples_total = (total_tokens - kExtraTokens) / seq_length;
  if (plan.num_epochs > 1) {
    plan.num_samples_sans_final_epoch =
        ((plan.num_epochs - 1) * tokens_per_epoch - kExtraTokens) / seq_length;
    const int64_t from_final_epoch = num_samples - plan.num_samples_sans_final_epoch;
    const int64_t per_epoch = (tokens_per_epoch - kExtraTokens) / seq_length;
    // Python's int() truncates, as the cast does.
    plan.separate_final_epoch =
        from_final_epoch <
        static_cast<int64_t>(kSeparateFinalEpochThreshold * static_cast<double>(per_epoch));
  }
  return plan;
}

absl::StatusOr<std::vector<int32_t>> BuildDocumentIndex(DocumentRange range, int64_t num_epochs,
                                                        bool separate_final_epoch,
                                                        NumpyRandomState* rng) {
  if (range.begin < 0 || range.end < range.begin ||
      range.end - 1 > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("document range [", range.begin, ", ", range.end, ") does not fit int32"));
  }
  if (num_epochs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_epochs must be >= 1, got ", num_epochs));
  }
  const int64_t n = range.size();
  int64_t total = 0;
  if (MulOverflows(n, num_epochs, &total)) {
    return absl::InvalidArgumentError("the document index size overflows int64");
  }
  std::vector<int32_t> index(static_cast<size_t>(total));
  for (int64_t e = 0; e < num_epochs; ++e) {
    int32_t* row = index.data() + e * n;
    for (int64_t d = 0; d < n; ++d) row[d] = static_cast<int32_t>(range.begin + d);
  }
  if (!separate_final_epoch || num_epochs == 1) {
    rng->Shuffle(index.data(), total);
  } else {
    rng->Shuffle(index.data(), total - n);
    rng->Shuffle(index.data() + (total - n), n);
  }
  return index;
}

absl::StatusOr<std::vector<int64_t>> BuildSampleIndex(absl::Span<const int32_t> lengths,
                                                      absl::Span<const int32_t> document_index,
                                                      int64_t seq_length, const EpochPlan& plan) {
  if (seq_length <= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence length must be at least 2, got ", seq_length));
  }
  const int64_t num_samples = plan.num_samples_total;
  const int64_t num_docs = static_cast<int64_t>(document_index.size());
  if (num_docs == 0) return absl::InvalidArgumentError("empty document index");
  for (int32_t d : {document_index.front(), document_index.back()}) {
    if (d < 0 || static_cast<size_t>(d) >= lengths.size()) {
      return absl::InvalidArgumentError(absl::StrCat("document ", d, " out of range"));
    }
  }
  std::vector<int64_t> out(static_cast<size_t>(2 * (num_samples + 1)));
  int64_t* sample_idx = out.data();
  int64_t doc_pos = 0;     // position in document_index
  int64_t doc_offset = 0;  // token offset inside that document
  sample_idx[0] = 0;
  sample_idx[1] = 0;
  int64_t sample = 1;
  // Walks the concatenated documents once: a sample starts where the previous one ended, on its
  // last (shared) token. Mirrors helpers.cpp's build_sample_idx line by line.
  while (sample <= num_samples) {
    int64_t remaining = seq_length + kExtraTokens;
    while (remaining != 0) {
      const int32_t doc = document_index[doc_pos];
      if (doc < 0 || static_cast<size_t>(doc) >= lengths.size()) {
        return absl::InvalidArgumentError(absl::StrCat("document ", doc, " out of range"));
      }
      const int64_t doc_length = lengths[doc] - doc_offset;
      remaining -= doc_length;
      if (remaining <= 0) {
        doc_offset += remaining + doc_length - kExtraTokens;
        remaining = 0;
      } else {
        if (doc_pos == num_docs - 1) {
          // Out of documents: only the last sample may end here (helpers.cpp asserts it).
          if (sample != num_samples) {
            return absl::InternalError(absl::StrCat(
                "sample index ran out of documents at sample ", sample, " of ", num_samples,
                " (epochs ", plan.num_epochs, ", tokens per epoch ", plan.tokens_per_epoch, ")"));
          }
          doc_offset = lengths[document_index[doc_pos]] - kExtraTokens;
          break;
        }
        ++doc_pos;
        doc_offset = 0;
      }
    }
    sample_idx[2 * sample] = doc_pos;
    sample_idx[2 * sample + 1] = doc_offset;
    ++sample;
  }
  return out;
}

std::vector<int64_t> BuildShuffleIndex(int64_t num_samples, int64_t total_size,
                                       NumpyRandomState* rng) {
  std::vector<int64_t> out(static_cast<size_t>(std::max<int64_t>(total_size, 0)));
  for (int64_t i = 0; i < total_size; ++i) out[i] = i;
  const int64_t first = std::min(num_samples, total_size);
  rng->Shuffle(out.data(), first);
  if (first < total_size) rng->Shuffle(out.data() + first, total_size - first);
  return out;
}

BlendingIndices BuildBlendingIndices(absl::Span<const double> weights, int64_t size) {
  const int64_t k = static_cast<int64_t>(weights.size());
  BlendingIndices out;
  out.dataset_index.resize(static_cast<size_t>(size));
  out.dataset_sample_index.resize(static_cast<size_t>(size));
  out.counts.assign(static_cast<size_t>(k), 0);
  if (k == 0) return out;
  for (int64_t i = 0; i < size; ++i) {
    const double x = std::max(static_cast<double>(i), 1.0);
    int64_t best = 0;
    double best_error = weights[0] * x - static_cast<double>(out.counts[0]);
    for (int64_t d = 1; d < k; ++d) {
      const double error = weights[d] * x - static_cast<double>(out.counts[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    out.dataset_index[i] = static_cast<int16_t>(best);
    out.dataset_sample_index[i] = out.counts[best];
    ++out.counts[best];
  }
  return out;
}

std::vector<int64_t> BlendedDatasetSizes(absl::Span<const double> normalized_weights,
                                         int64_t size) {
  std::vector<int64_t> out;
  out.reserve(normalized_weights.size());
  for (double w : normalized_weights) {
    // Python evaluates target_size * weight * 1.005 left to right.
    out.push_back(static_cast<int64_t>(std::ceil(static_cast<double>(size) * w * 1.005)));
  }
  return out;
}

}  // namespace mt::data
