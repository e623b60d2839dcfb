// pipeline_bubble: the pipeline schedule's idle time (bubble) on real devices against the
// theory (p-1)/(v*m + p-1) (worker/parallel/pipeline_schedule.h).
//
// One process, one thread per stage: stage r on GPU r with NCCL, or CPU threads over Gloo
// when this build or machine has no GPU (a smoke run). Each stage builds its chunk(s) of a GPT
// with GptModel's stage split and runs PipelineExecutor's training schedule; the executor
// synchronises the device after every action, so a stage's compute time is exact, and
//   bubble(stage) = 1 - compute seconds / schedule seconds,
// averaged over the steps after the warm-up. The first and last stages also hold the
// embedding and the output layer + loss, which the theory leaves out: their imbalance and the
// send/recv time show up as measured - theory.
//
//   pipeline_bubble [--pp=2,4] [--micro-batches=4,8,16] [--chunks=1] [--layers=24]
//                   [--hidden=1024] [--heads=16] [--seq=1024] [--micro-batch-size=4]
//                   [--vocab=50304] [--dtype=bf16|fp32] [--steps=6] [--warmup=2]
//
// Prints one line per (p, m): per-stage measured bubble, their mean, the theory and the ratio.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/cli/help_version.h"
#include "common/layout/job_layout.h"
#include "common/spec/defaults.h"
#include "worker/model/gpt.h"
#include "worker/model/gpt_config.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/pipeline.h"
#include "worker/parallel/pipeline_schedule.h"
#include "worker/parallel/process_groups.h"

namespace {

struct Options {
  std::vector<int> pp = {2, 4};
  std::vector<int> micro_batches = {4, 8, 16};
  int chunks = 1;
  int layers = 24;
  int hidden = 1024;
  int heads = 16;
  int seq = 1024;
  int micro_batch_size = 4;
  int vocab = 50304;
  std::string dtype = "bf16";
  int steps = 6;
  int warmup = 2;
};

std::vector<int> IntList(absl::string_view v) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(v, ',')) {
    int x = 0;
    if (!absl::SimpleAtoi(part, &x)) {
      std::fprintf(stderr, "not a number: %s\n", std::string(part).c_str());
      std::exit(2);
    }
    out.push_back(x);
  }
  return out;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : a.substr(eq + 1);
    auto one = [&](int* x) { *x = IntList(value).at(0); };
    if (key == "--pp") {
      o.pp = IntList(value);
    } else if (key == "--micro-batches") {
      o.micro_batches = IntList(value);
    } else if (key == "--chunks") {
      one(&o.chunks);
    } else if (key == "--layers") {
      one(&o.layers);
    } else if (key == "--hidden") {
      one(&o.hidden);
    } else if (key == "--heads") {
      one(&o.heads);
    } else if (key == "--seq") {
      one(&o.seq);
    } else if (key == "--micro-batch-size") {
      one(&o.micro_batch_size);
    } else if (key == "--vocab") {
      one(&o.vocab);
    } else if (key == "--dtype") {
      o.dtype = value;
    } else if (key == "--steps") {
      one(&o.steps);
    } else if (key == "--warmup") {
      one(&o.warmup);
    } else {
      std::fprintf(stderr, "unknown flag %s (see the comment at the top of pipeline_bubble.cc)\n",
                   a.c_str());
      std::exit(2);
    }
  }
  return o;
}

struct StageResult {
  std::string error;
  double bubble = 0;  // mean over the measured steps
  double step_seconds = 0;
};

// One (p, m) configuration; returns each stage's result.
std::vector<StageResult> Measure(const Options& o, int p, int m, bool gpu) {
  mt::v1::JobSpec spec;
  spec.mutable_model()->set_num_layers(o.layers);
  spec.mutable_parallel()->set_pipeline_model_parallel_size(p);
  spec.mutable_parallel()->set_data_parallel_size(1);
  if (o.chunks > 1) {
    spec.mutable_parallel()->set_num_layers_per_virtual_pipeline_stage(o.layers / (p * o.chunks));
  }
  spec.mutable_training()->set_micro_batch_size(o.micro_batch_size);
  spec.mutable_training()->set_global_batch_size(o.micro_batch_size * m);
  mt::spec::ApplyDefaults(&spec);
  std::vector<StageResult> results(p);
  auto layout = mt::layout::JobLayout(spec, p);
  if (!layout.ok()) {
    results[0].error = layout.status().ToString();
    return results;
  }
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < p; ++rank) {
    threads.emplace_back([&, rank] {
      StageResult& out = results[rank];
      try {
        auto groups = mt::parallel::ProcessGroups::Create(
            *layout, rank, store, gpu ? "nccl" : "gloo", std::chrono::minutes(5));
        if (!groups.ok()) {
          out.error = groups.status().ToString();
          return;
        }
        const torch::Device device = gpu ? torch::Device(torch::kCUDA, rank) : torch::kCPU;
        const torch::ScalarType dtype = o.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat;
        mt::model::GptConfig config;
        config.num_layers = o.layers;
        config.hidden_size = o.hidden;
        config.num_attention_heads = o.heads;
        config.seq_length = o.seq;
        config.max_position_embeddings = o.seq;
        config.vocab_size = o.vocab;
        config.hidden_dropout = 0.0;
        config.attention_dropout = 0.0;
        const auto& layers = layout->stage_layers(rank).layers();
        const int per_chunk = layers.size() / o.chunks;
        std::vector<std::shared_ptr<mt::model::GptModel>> chunks;
        for (int c = 0; c < o.chunks; ++c) {
          mt::model::ModelShard shard;
          for (int i = c * per_chunk; i < (c + 1) * per_chunk; ++i) {
            shard.layers.push_back(layers[i]);
          }
          shard.pre_process = rank == 0 && c == 0;
          shard.post_process = rank == p - 1 && c == o.chunks - 1;
          mt::model::ModelBuildOptions build;
          build.seed = 1;
          build.device = device;
          build.dtype = dtype;
          auto chunk = mt::model::GptModel::Create(config, shard, build);
          if (!chunk.ok()) {
            out.error = chunk.status().ToString();
            return;
          }
          chunks.push_back(*chunk);
        }
        mt::parallel::PipelineConfig pc;
        pc.num_micro_batches = m;
        pc.num_chunks = o.chunks;
        pc.activation_shape = {o.micro_batch_size, o.seq, o.hidden};
        pc.activation_dtype = dtype;
        pc.device = device;
        if (gpu) pc.synchronize = [rank] { torch::cuda::synchronize(rank); };
        auto executor = mt::parallel::PipelineExecutor::Create((*groups)->pp(), pc);
        if (!executor.ok()) {
          out.error = executor.status().ToString();
          return;
        }
        torch::manual_seed(2);
        std::vector<mt::parallel::PipelineMicroBatch> mbs;
        for (int i = 0; i < m; ++i) {
          torch::Tensor sample =
              torch::randint(0, o.vocab, {o.micro_batch_size, o.seq + 1},
                             torch::TensorOptions().dtype(torch::kLong).device(device));
          mbs.push_back({sample.narrow(1, 0, o.seq), sample.narrow(1, 1, o.seq)});
        }
        mt::parallel::ChunkForward forward = [&](int c, const torch::Tensor& input,
                                                 const torch::Tensor& targets) {
          return chunks[c]->ForwardStage(input, targets);
        };
        double bubble_sum = 0, seconds_sum = 0;
        for (int step = 0; step < o.warmup + o.steps; ++step) {
          for (auto& c : chunks) c->zero_grad();
          auto r = (*executor)->Train(forward, mbs, 1.0);
          if (!r.ok()) {
            out.error = r.status().ToString();
            return;
          }
          if (step < o.warmup) continue;
          bubble_sum += 1.0 - r->compute_seconds / r->seconds;
          seconds_sum += r->seconds;
        }
        out.bubble = bubble_sum / o.steps;
        out.step_seconds = seconds_sum / o.steps;
      } catch (const std::exception& e) {
        out.error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace

constexpr char kUsage[] =
    "usage: pipeline_bubble [--pp=2,4] [--micro-batches=4,8,16] [--chunks=1] [--layers=24]\n"
    "                       [--hidden=1024] [--heads=16] [--seq=1024] [--micro-batch-size=4]\n"
    "                       [--vocab=50304] [--dtype=bf16|fp32] [--steps=6] [--warmup=2]\n"
    "The pipeline schedule's measured bubble per stage against the theory (p-1)/(v*m + p-1).\n";

int main(int argc, char** argv) {
  if (mt::cli::AnswerHelpOrVersion(argc, argv, "pipeline_bubble", kUsage)) return 0;
  const Options o = Parse(argc, argv);
  const bool gpu = torch::cuda::is_available() && mt::parallel::HasBackend("nccl");
  const int devices = gpu ? static_cast<int>(torch::cuda::device_count()) : 0;
  std::printf(
      "pipeline_bubble: %s, %d layers x %d hidden, seq %d, micro-batch %d, %s, %d chunk(s)\n",
      gpu ? absl::StrCat(devices, " GPU(s), NCCL").c_str() : "CPU threads, Gloo", o.layers,
      o.hidden, o.seq, o.micro_batch_size, o.dtype.c_str(), o.chunks);
  if (!gpu && !mt::parallel::HasBackend("gloo")) {
    std::fprintf(stderr, "pipeline_bubble: neither a GPU with NCCL nor Gloo in this build\n");
    return 1;
  }
  int failures = 0;
  for (int p : o.pp) {
    if (gpu && p > devices) {
      std::printf("pp=%d: skipped, only %d GPU(s)\n", p, devices);
      continue;
    }
    for (int m : o.micro_batches) {
      const std::vector<StageResult> r = Measure(o, p, m, gpu);
      std::vector<std::string> per_stage;
      double mean = 0, seconds = 0;
      bool ok = true;
      for (int s = 0; s < p; ++s) {
        if (!r[s].error.empty()) {
          std::printf("pp=%d m=%d stage %d: %s\n", p, m, s, r[s].error.c_str());
          ok = false;
          continue;
        }
        per_stage.push_back(absl::StrFormat("%.3f", r[s].bubble));
        mean += r[s].bubble / p;
        seconds = std::max(seconds, r[s].step_seconds);
      }
      if (!ok) {
        ++failures;
        continue;
      }
      const double theory = mt::parallel::TheoreticalBubbleFraction(p, m, o.chunks);
      std::printf(
          "pp=%d m=%-3d v=%d  bubble per stage [%s]  mean %.3f  theory (p-1)/(v*m+p-1) = %.3f  "
          "measured/theory %.2f  step %.1f ms\n",
          p, m, o.chunks, absl::StrJoin(per_stage, " ").c_str(), mean, theory,
          theory > 0 ? mean / theory : 0.0, seconds * 1e3);
    }
  }
  return failures == 0 ? 0 : 1;
}
