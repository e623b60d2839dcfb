// Times the sample-index build at the scale the design asks for: about 1 billion tokens at
// seq_length 1024 (~1M samples) should take seconds. Builds from synthetic document lengths
// (the index math reads only lengths), then writes and reads the cache file.
//
//   mt_gpt_indices_bench [tokens=1000000000] [seq_length=1024] [cache_dir=/tmp]
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cli/help_version.h"
#include "worker/data/gpt_indices.h"
#include "worker/data/index_cache.h"

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
  return 1;
}

}  // namespace

constexpr char kUsage[] =
    "usage: mt_gpt_indices_bench [TOKENS=1000000000] [SEQ_LENGTH=1024] [CACHE_DIR=/tmp]\n"
    "Times the sample-index build, then the cache file's write and read, for synthetic "
    "documents.\n";

int main(int argc, char** argv) {
  if (mt::cli::AnswerHelpOrVersion(argc, argv, "mt_gpt_indices_bench", kUsage)) return 0;
  using namespace mt::data;
  const int64_t tokens = argc > 1 ? std::atoll(argv[1]) : 1000000000;
  const int64_t seq = argc > 2 ? std::atoll(argv[2]) : 1024;
  const std::string dir = argc > 3 ? argv[3] : "/tmp";

  // Documents of 1..2000 tokens (mean ~1000), as web text after tokenisation roughly is.
  auto t = std::chrono::steady_clock::now();
  std::mt19937 gen(1);
  std::vector<int32_t> lengths;
  int64_t total = 0;
  while (total < tokens) {
    lengths.push_back(1 + static_cast<int32_t>(gen() % 2000));
    total += lengths.back();
  }
  const int64_t docs = static_cast<int64_t>(lengths.size());
  std::printf("documents %lld, tokens %lld, seq_length %lld (lengths made in %.2f s)\n",
              static_cast<long long>(docs), static_cast<long long>(total),
              static_cast<long long>(seq), Seconds(t));

  const int64_t want = (total - 1) / seq;  // one epoch's worth, as a 1B-token run would ask
  t = std::chrono::steady_clock::now();
  auto plan = PlanEpochs(total, seq, want);
  if (!plan.ok()) return Fail(plan.status());
  NumpyRandomState rng(1234);
  auto doc = BuildDocumentIndex({0, docs}, plan->num_epochs, plan->separate_final_epoch, &rng);
  if (!doc.ok()) return Fail(doc.status());
  const double t_doc = Seconds(t);
  t = std::chrono::steady_clock::now();
  auto sample = BuildSampleIndex(lengths, *doc, seq, *plan);
  if (!sample.ok()) return Fail(sample.status());
  const double t_sample = Seconds(t);
  t = std::chrono::steady_clock::now();
  const std::vector<int64_t> shuffle =
      BuildShuffleIndex(plan->num_samples_total, plan->num_samples_total, &rng);
  const double t_shuffle = Seconds(t);
  std::printf("samples %lld: document index %.3f s, sample index %.3f s, shuffle index %.3f s\n",
              static_cast<long long>(plan->num_samples_total), t_doc, t_sample, t_shuffle);

  const std::string path = absl::StrCat(dir, "/mt_gpt_indices_bench.", ::getpid(), ".mtidx");
  t = std::chrono::steady_clock::now();
  absl::Status w = WriteIndexCache(
      path, "bench", {CacheArray::Of(*doc), CacheArray::Of(*sample), CacheArray::Of(shuffle)});
  if (!w.ok()) return Fail(w);
  const double t_write = Seconds(t);
  t = std::chrono::steady_clock::now();
  auto file = IndexCacheFile::Read(path, "bench");
  if (!file.ok()) return Fail(file.status());
  auto back = file->Array<int64_t>(2);
  const double t_read = Seconds(t);
  ::unlink(path.c_str());
  ::unlink((path + ".lock").c_str());
  if (!back.ok() || *back != shuffle) return Fail(absl::DataLossError("cache round trip"));
  std::printf("cache: write %.3f s, read + verify %.3f s\n", t_write, t_read);

  t = std::chrono::steady_clock::now();
  const BlendingIndices b =
      BuildBlendingIndices(Normalize({0.4, 0.2, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05}), want);
  std::printf("blending %lld samples over 8 datasets: %.3f s\n", static_cast<long long>(want),
              Seconds(t));
  return b.counts.empty() ? 1 : 0;
}
