// checkpoint_bench: our checkpoint save and load against the disk's own bandwidth, and the cost
// of async saves to the step time (issue #7; bench/README.md).
//
//   checkpoint_bench [--dir DIR] [--device cpu|cuda] [--layers N] [--hidden N] [--heads N]
//                    [--seq N] [--vocab N] [--micro-batch N] [--precision fp32|bf16]
//                    [--repeat N] [--steps N] [--save-every N] [--max-file-mb N] [--pairs N]
//                    [--stage-device auto|cpu|cuda|none]
//
// 1. Save: Checkpointer::Save (sync: snapshot into host memory, the shard's files written and
//    hashed in parallel under temporary names, fsync, rename, manifest, `latest`) of a trained
//    model's whole state, against a dd-style write of the same number of bytes into the same
//    directory (8 MiB writes, fsync). Bandwidth ratio; target >= 80%.
// 2. Load: what a rank does on resume (ChooseLoad: every file read once, in parallel, and
//    checked against the manifest's SHA-256, the rank's own files kept in memory; then
//    OpenLoadSource + RestoreTrainer into a fresh trainer from that memory; on a GPU the files
//    are copied to the device block by block while they are read, and the restore copies
//    device to device), against a dd-style read of the dd file. Both start from a cold page
//    cache (posix_fadvise DONTNEED after the fsync). Bandwidth ratio; target >= 80%.
// 3. Async save cost: the save interval is chosen the way a user would, long enough for one
//    save to finish within it: ceil(2 x sync save time / step time) steps (--save-every
//    overrides). Phases without saves (A) and with async saves at that interval alternate,
//    A B A W A B A W ... A (--pairs B and W phases, each of a whole number of intervals and at
//    least --steps steps; a save phase ends with Wait() for its last save, timed), so that a
//    drift of the machine's speed falls on all: B saves as the product does (the snapshot's
//    device-to-host copies overlap the next step), W with the training thread waiting for the
//    copies (CheckpointerOptions::overlap_snapshot = false). The ratio of the median B phase to
//    the median A phase, wall time per step (the step + the Save call: what training sees), is
//    the figure; target <= 1.05. Per save it prints where the time went: the Save call, the
//    10 steps from the save, the rest of the interval (the background write).
// Figures are medians over --repeat runs; the machine is shared and noisy, so read ratios.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_writer.h"
#include "common/checkpoint/reshard.h"
#include "common/cli/help_version.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/checkpoint/checkpointer.h"
#include "worker/checkpoint/trainer_state.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string dir;
  std::string device = "cpu";
  int layers = 4;
  int hidden = 256;
  int heads = 4;
  int seq = 128;
  int vocab = 8192;
  int micro_batch = 2;
  std::string precision = "fp32";
  int repeat = 3;
  int steps = 30;
  int save_every = 0;  // 0: ceil(2 x save time / step time)
  int max_file_mb = 256;
  int pairs = 5;
  std::string stage_device;  // empty: "auto" on a GPU device, none on the CPU
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "checkpoint_bench: %s\n", what.c_str());
  std::exit(1);
}

void Check(const absl::Status& s, const std::string& what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.message()));
}

// Drops the file's pages from the page cache (clean pages only: call after fsync).
void Evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void EvictTree(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    Evict(dir + "/" + e->d_name);
  }
  ::closedir(d);
}

// /proc/meminfo's MemTotal and Cached, in GB (0 where unreadable): a checkpoint left in the page
// cache grows the machine's memory use by its size on every save.
struct MemInfo {
  double total_gb = 0;
  double cached_gb = 0;
};
MemInfo ReadMemInfo() {
  MemInfo m;
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return m;
  char name[64];
  long long kb = 0;
  while (std::fscanf(f, "%63s %lld kB\n", name, &kb) == 2) {
    if (std::strcmp(name, "MemTotal:") == 0) m.total_gb = kb / 1e6 * 1.024;
    if (std::strcmp(name, "Cached:") == 0) m.cached_gb = kb / 1e6 * 1.024;
  }
  std::fclose(f);
  return m;
}

// dd if=/dev/zero of=path bs=8M count=... conv=fsync, with incompressible bytes.
double DdWrite(const std::string& path, const std::vector<char>& buffer, int64_t bytes) {
  const auto start = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) Die("open " + path + ": " + std::strerror(errno));
  int64_t left = bytes;
  while (left > 0) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(left, buffer.size()));
    const ssize_t w = ::write(fd, buffer.data(), n);
    if (w <= 0) Die("write " + path + ": " + std::strerror(errno));
    left -= w;
  }
  if (::fsync(fd) != 0) Die("fsync " + path);
  ::close(fd);
  return Seconds(start, Clock::now());
}

double DdRead(const std::string& path, std::vector<char>& buffer) {
  const auto start = Clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) Die("open " + path);
  while (::read(fd, buffer.data(), buffer.size()) > 0) {
  }
  ::close(fd);
  return Seconds(start, Clock::now());
}

mt::v1::JobSpec MakeSpec(const Args& a, int64_t iters) {
  mt::v1::JobSpec spec;
  auto* m = spec.mutable_model();
  m->set_num_layers(a.layers);
  m->set_hidden_size(a.hidden);
  m->set_num_attention_heads(a.heads);
  m->set_seq_length(a.seq);
  m->set_vocab_size(a.vocab);
  auto* t = spec.mutable_training();
  t->set_micro_batch_size(a.micro_batch);
  t->set_global_batch_size(a.micro_batch);
  t->set_train_iters(iters);
  t->set_lr(1e-4);
  t->set_lr_warmup_iters(1);
  t->set_seed(1);
  t->set_precision(a.precision == "bf16" ? mt::v1::PRECISION_BF16 : mt::v1::PRECISION_FP32);
  spec.mutable_evaluation()->set_eval_interval(0);
  spec.mutable_logging()->set_log_interval(1000000);
  return spec;
}

std::unique_ptr<mt::engine::Trainer> MakeTrainer(const Args& a, const mt::v1::JobSpec& spec,
                                                 int64_t consumed = 0) {
  mt::engine::TrainerOptions o;
  o.device = a.device;
  o.log_progress = false;
  auto train = mt::engine::TokenSequenceSource::Create(
      mt::engine::SyntheticTokens(int64_t{1} << 20, a.vocab, 7), a.seq, consumed);
  if (!train.ok()) Die(std::string(train.status().message()));
  auto t = mt::engine::Trainer::Create(spec, o, std::move(*train), nullptr);
  if (!t.ok()) Die(std::string(t.status().message()));
  return std::move(*t);
}

std::unique_ptr<mt::checkpoint::Checkpointer> MakeCheckpointer(
    const Args& a, const std::string& dir, const mt::v1::JobSpec& spec, bool async,
    mt::checkpoint::SaveExchange* exchange, bool overlap = true) {
  mt::checkpoint::CheckpointerOptions o;
  o.save_dir = dir;
  o.async_save = async;
  o.overlap_snapshot = overlap;
  o.max_file_bytes = int64_t{a.max_file_mb} << 20;
  o.job_id = "bench";
  o.spec = spec;
  auto c = mt::checkpoint::Checkpointer::Create(o, exchange);
  if (!c.ok()) Die(std::string(c.status().message()));
  return std::move(*c);
}

// mkdir -p: the bench writes into <dir>/sync and <dir>/async.
void MakeDirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string prefix = dir.substr(0, i);
    struct stat st;
    if (::stat(prefix.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) Die("--dir " + dir + ": " + prefix + " is not a directory");
      continue;
    }
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      Die("--dir " + dir + ": creating " + prefix + ": " + std::strerror(errno) +
          " (name a directory you may write to)");
    }
  }
}

Args Parse(int argc, char** argv, bool* own_dir) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string name = argv[i];
    if (i + 1 >= argc) Die("missing value for " + name);
    const std::string v = argv[++i];
    auto num = [&](int* out) {
      if (!absl::SimpleAtoi(v, out) || *out < 1) Die(name + " \"" + v + "\": want an integer >= 1");
    };
    if (name == "--dir") {
      a.dir = v;
    } else if (name == "--device") {
      a.device = v;
    } else if (name == "--precision") {
      a.precision = v;
    } else if (name == "--layers") {
      num(&a.layers);
    } else if (name == "--hidden") {
      num(&a.hidden);
    } else if (name == "--heads") {
      num(&a.heads);
    } else if (name == "--seq") {
      num(&a.seq);
    } else if (name == "--vocab") {
      num(&a.vocab);
    } else if (name == "--micro-batch") {
      num(&a.micro_batch);
    } else if (name == "--repeat") {
      num(&a.repeat);
    } else if (name == "--steps") {
      num(&a.steps);
    } else if (name == "--save-every") {
      num(&a.save_every);
    } else if (name == "--max-file-mb") {
      num(&a.max_file_mb);
    } else if (name == "--pairs") {
      num(&a.pairs);
    } else if (name == "--stage-device") {
      a.stage_device = v;
      if (v.empty()) Die("--stage-device \"\": want auto, cpu, cuda, cuda:N or none");
    } else {
      Die("unknown argument " + name + " (see the comment at the top of checkpoint_bench.cc)");
    }
  }
  if (a.dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr ? tmp : "/tmp") + "/mt_ckpt_bench_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp");
    a.dir = tmpl;
    *own_dir = true;
  } else {
    MakeDirs(a.dir);
  }
  if (a.stage_device.empty() && a.device != "cpu") a.stage_device = "auto";
  if (a.stage_device == "none") a.stage_device.clear();
  return a;
}

// The random bytes the dd-style writes send: 8 MiB, incompressible.
std::vector<char> RandomBuffer() {
  std::vector<char> buffer(8 << 20);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= buffer.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(buffer.data() + i, &r, 8);
  }
  return buffer;
}

const char* Verdict(bool ok) { return ok ? "ok" : "MISSED"; }

std::string SyncDir(const Args& a) { return a.dir + "/sync"; }

void PrintSetup(const Args& a) {
  std::printf(
      "checkpoint_bench: %d layers, hidden %d, seq %d, vocab %d, %s on %s, dir %s, files <= %d "
      "MiB, %d I/O threads, load staged on %s\n",
      a.layers, a.hidden, a.seq, a.vocab, a.precision.c_str(), a.device.c_str(), a.dir.c_str(),
      a.max_file_mb, mt::checkpoint::DefaultIoThreads(),
      a.stage_device.empty() ? "none (restore from host memory)" : a.stage_device.c_str());
}

// --- 1. and 2.: save and load against dd ----------------------------------------------------

// The figures of the save and load runs, one per run; the size and place of the last save.
struct SaveLoadRuns {
  std::vector<double> save_s_all, save_bw, dd_write_bw, load_bw, restore_bw, dd_read_bw;
  int64_t bytes = 0;
  int files = 0;
  std::string last_dir;
};

struct SaveTiming {
  double save_s = 0;
  double snapshot_s = 0;
};

// A sync save of the trainer's state, timed; the save's size and directory go to `runs`.
SaveTiming TimedSave(mt::engine::Trainer& trainer, mt::checkpoint::Checkpointer& sync,
                     SaveLoadRuns* runs) {
  SaveTiming t;
  const auto start = Clock::now();
  Check(sync.Save(trainer, 0, 0), "save");
  t.save_s = Seconds(start, Clock::now());
  for (const auto& info : sync.TakeFinished()) {
    Check(info.status, "save");
    runs->bytes = info.bytes;
    runs->files = info.files;
    t.snapshot_s = info.snapshot_seconds;
    runs->last_dir = info.directory;
  }
  return t;
}

struct LoadTiming {
  double load_s = 0;     // the whole load
  double verify_s = 0;   // ChooseLoad: read + SHA-256
  double restore_s = 0;  // OpenLoadSource + RestoreTrainer
  mt::checkpoint::RestoreStats stats;
  // The chosen checkpoint (its device copies included), held by the caller until the end of the
  // run, after the dd read.
  std::optional<mt::checkpoint::LoadChoice> choice;
};

// What a rank does on resume, timed: the latest checkpoint in `save_dir` read, verified and
// restored into `fresh`.
LoadTiming TimedLoad(const Args& a, const std::string& save_dir, mt::engine::Trainer& fresh) {
  LoadTiming t;
  const auto load_start = Clock::now();
  mt::checkpoint::LoadOptions load_options;
  load_options.keep_own_files = true;
  load_options.stage_device = a.stage_device;
  auto choice = mt::checkpoint::ChooseLoad(save_dir, load_options);  // read + SHA-256, once
  if (!choice.ok() || !choice->has_value()) Die("no checkpoint to load");
  const auto verified = Clock::now();
  auto source = mt::checkpoint::OpenLoadSource(**choice);
  if (!source.ok()) Die(std::string(source.status().message()));
  mt::checkpoint::RestoreOptions restore;
  restore.stats = &t.stats;
  Check(mt::checkpoint::RestoreTrainer(fresh, **source, restore), "restore");
  source->reset();
  (*choice)->files.reset();
  const auto loaded = Clock::now();
  t.load_s = Seconds(load_start, loaded);
  t.verify_s = Seconds(load_start, verified);
  t.restore_s = Seconds(verified, loaded);
  t.choice = std::move(**choice);
  return t;
}

// Run r of phases 1 and 2: a sync save against a dd write, then a load against a dd read.
void SaveAndLoad(const Args& a, const mt::v1::JobSpec& spec, int r, mt::engine::Trainer& trainer,
                 mt::checkpoint::Checkpointer& sync, std::vector<char>& buffer,
                 SaveLoadRuns* runs) {
  Check(trainer.Step().status(), "step");
  const SaveTiming save = TimedSave(trainer, sync, runs);
  const std::string dd = a.dir + "/dd.bin";
  const double dd_s = DdWrite(dd, buffer, runs->bytes);
  runs->save_s_all.push_back(save.save_s);
  runs->save_bw.push_back(runs->bytes / save.save_s);
  runs->dd_write_bw.push_back(runs->bytes / dd_s);

  // --- 2. load against dd read (cold cache for both) -----------------------------------------
  EvictTree(runs->last_dir);
  Evict(dd);
  // The fresh trainer (model construction) is not I/O: built before the clock starts.
  auto fresh = MakeTrainer(a, spec, 0);
  const LoadTiming load = TimedLoad(a, SyncDir(a), *fresh);
  const double dd_read_s = DdRead(dd, buffer);
  // What this run read stays out of the page cache: the async phases below start from the
  // cache a training run has, not with the bench's earlier reads in it.
  EvictTree(runs->last_dir);
  Evict(dd);
  runs->load_bw.push_back(runs->bytes / load.load_s);
  runs->restore_bw.push_back(runs->bytes / load.restore_s);
  runs->dd_read_bw.push_back(runs->bytes / dd_read_s);
  std::printf(
      "  run %d: %.1f MB in %d files  save %.3f s (snapshot %.3f)  dd write %.3f s  load %.3f s "
      "(read+verify %.3f, restore %.3f: tensors %d staged, %d from memory, %d assembled)  dd "
      "read %.3f s\n",
      r + 1, runs->bytes / 1e6, runs->files, save.save_s, save.snapshot_s, dd_s, load.load_s,
      load.verify_s, load.restore_s, load.stats.from_staged, load.stats.from_memory,
      load.stats.from_assembled, dd_read_s);
}

struct IoRatios {
  double save = 0;
  double load = 0;
};

// Prints the medians of the save and load runs against dd; returns the ratios.
IoRatios ReportSaveLoad(const Args& a, const SaveLoadRuns& runs) {
  IoRatios ratios;
  ratios.save = Median(runs.save_bw) / Median(runs.dd_write_bw);
  ratios.load = Median(runs.load_bw) / Median(runs.dd_read_bw);
  std::printf("save  %8.1f MB/s   dd write %8.1f MB/s   ratio %.2f (target >= 0.80: %s)\n",
              Median(runs.save_bw) / 1e6, Median(runs.dd_write_bw) / 1e6, ratios.save,
              Verdict(ratios.save >= 0.80));
  std::printf(
      "load  %8.1f MB/s   dd read  %8.1f MB/s   ratio %.2f (target >= 0.80: %s; load includes "
      "SHA-256 verification of every file)\n",
      Median(runs.load_bw) / 1e6, Median(runs.dd_read_bw) / 1e6, ratios.load,
      Verdict(ratios.load >= 0.80));
  std::printf("      restore alone (from the verified bytes: %s) %8.1f MB/s\n",
              a.stage_device.empty() ? "host memory" : "staged on the device while read",
              Median(runs.restore_bw) / 1e6);
  return ratios;
}

// --- 3. async save cost to the step time ----------------------------------------------------

struct Mode {
  const char* name = nullptr;
  std::unique_ptr<mt::checkpoint::Checkpointer> ckpt;
  std::vector<double> phases, stalls, tail_waits;
  // Per save: the time beyond the A phases' step time of the 10 steps from the save on, and
  // of the rest of its interval (the background write).
  std::vector<double> around, rest;
};

// Two async checkpointers: the product's (the snapshot's copies overlap the next step) and one
// whose training thread waits for the copies (overlap_snapshot = false), each prepared as a
// run does at start-up.
std::array<Mode, 2> MakeModes(const Args& a, const mt::v1::JobSpec& spec,
                              mt::engine::Trainer& trainer,
                              mt::checkpoint::LocalExchange* exchange) {
  std::array<Mode, 2> modes;
  modes[0].name = "overlapped";
  modes[1].name = "waited";
  for (int m = 0; m < 2; ++m) {
    modes[m].ckpt = MakeCheckpointer(a, a.dir + (m == 0 ? "/async" : "/async-waited"), spec,
                                     /*async=*/true, exchange, /*overlap=*/m == 0);
    Check(modes[m].ckpt->Prepare(trainer), "async checkpointer");
  }
  return modes;
}

// `steps` steps; with a mode, an async save after the phase's first step and every `every`
// steps after it, and the phase ends with waiting for the last save (timed). Returns the wall
// time per step; `step_times` gets each step's.
double RunPhase(mt::engine::Trainer& trainer, int steps, int every, Mode* mode,
                std::vector<double>* step_times) {
  step_times->clear();
  const auto start = Clock::now();
  for (int s = 0; s < steps; ++s) {
    const auto t0 = Clock::now();
    Check(trainer.Step().status(), "step");
    if (mode != nullptr && s % every == 0) {
      const auto t1 = Clock::now();
      Check(mode->ckpt->Save(trainer, 0, 0), "async save");
      mode->stalls.push_back(Seconds(t1, Clock::now()));
    }
    step_times->push_back(Seconds(t0, Clock::now()));
  }
  if (mode != nullptr) {
    // The last save's rest beyond the phase's steps (0 while a save fits in its interval).
    const auto t0 = Clock::now();
    mode->ckpt->Wait();
    mode->tail_waits.push_back(Seconds(t0, Clock::now()));
  }
  return Seconds(start, Clock::now()) / steps;
}

// The A phases' times per step, and each B and W phase's step times (by mode).
struct PhaseTimes {
  std::vector<double> phase_a;
  std::vector<std::vector<double>> b_steps[2];
};

// A B A W A B A W ... A: --pairs of B and W phases of `steps` steps, saving every `every`.
PhaseTimes RunPhases(const Args& a, mt::engine::Trainer& trainer, int steps, int every,
                     std::array<Mode, 2>* modes, std::vector<double>* step_times) {
  PhaseTimes times;
  const MemInfo mem_start = ReadMemInfo();
  std::printf("  memory before the phases: MemTotal %.1f GB, page cache %.1f GB\n",
              mem_start.total_gb, mem_start.cached_gb);
  times.phase_a.push_back(RunPhase(trainer, steps, 0, nullptr, step_times));
  for (int p = 0; p < a.pairs; ++p) {
    for (int m = 0; m < 2; ++m) {
      Mode& mode = (*modes)[m];
      mode.phases.push_back(RunPhase(trainer, steps, every, &mode, step_times));
      times.b_steps[m].push_back(*step_times);
      const double before = times.phase_a.back();
      times.phase_a.push_back(RunPhase(trainer, steps, 0, nullptr, step_times));
      const MemInfo mem = ReadMemInfo();
      std::printf(
          "  %d%c: A %.4f s/step, %c %.4f s/step (last save's wait at the end %.3f s), A %.4f "
          "-> ratio %.3f; MemTotal %.1f GB, page cache %.1f GB\n",
          p + 1, m == 0 ? 'B' : 'W', before, m == 0 ? 'B' : 'W', mode.phases.back(),
          mode.tail_waits.back(), times.phase_a.back(),
          mode.phases.back() / ((before + times.phase_a.back()) / 2), mem.total_gb, mem.cached_gb);
    }
  }
  return times;
}

// Per save, where the time beyond `base` (the A phases' step time) went: the 10 steps from the
// save on, and the rest of its interval.
void AttributeSaves(double base, int every, const PhaseTimes& times, std::array<Mode, 2>* modes) {
  for (int m = 0; m < 2; ++m) {
    Mode& mode = (*modes)[m];
    for (const auto& info : mode.ckpt->TakeFinished()) Check(info.status, "async save");
    for (const std::vector<double>& t : times.b_steps[m]) {
      for (size_t s0 = 0; s0 < t.size(); s0 += every) {
        double around = 0, rest = 0;
        for (size_t j = s0; j < std::min(t.size(), s0 + every); ++j) {
          (j - s0 < 10 ? around : rest) += t[j] - base;
        }
        mode.around.push_back(around);
        mode.rest.push_back(rest);
      }
    }
  }
}

struct AsyncResult {
  int every = 0;
  double ratio[2] = {0, 0};  // by mode: median phase against the A phases
  double stall_s = 0;        // the overlapped mode's median stall in Save
};

// Prints each mode's figures against `base` and the verdict.
AsyncResult ReportAsync(int every, double base, const std::vector<double>& phase_a,
                        const std::array<Mode, 2>& modes) {
  AsyncResult result;
  result.every = every;
  for (int m = 0; m < 2; ++m) {
    const Mode& md = modes[m];
    result.ratio[m] = Median(md.phases) / base;
    std::printf(
        "  %-10s: median %.4f s/step against %.4f (A from %.4f to %.4f)  ratio %.3f; per save: "
        "training thread stalled %.4f s in Save, %+.4f s over the 10 steps from the save, %+.4f "
        "s over the rest of the interval (medians)\n",
        md.name, Median(md.phases), base, *std::min_element(phase_a.begin(), phase_a.end()),
        *std::max_element(phase_a.begin(), phase_a.end()), result.ratio[m], Median(md.stalls),
        Median(md.around), Median(md.rest));
  }
  std::printf(
      "async save every %d steps: ratio %.3f (target <= 1.05: %s); with the training thread "
      "waiting for the snapshot %.3f\n",
      every, result.ratio[0], Verdict(result.ratio[0] <= 1.05), result.ratio[1]);
  result.stall_s = Median(modes[0].stalls);
  return result;
}

// The save interval is chosen from the sync save's time (`save_time`) and the step time; then
// the phases run and their figures are printed.
AsyncResult MeasureAsync(const Args& a, mt::engine::Trainer& trainer, double save_time,
                         std::array<Mode, 2>* modes) {
  std::vector<double> step_times;  // of the last phase
  // The step time the interval is chosen from.
  const double warm = RunPhase(trainer, a.steps, 0, nullptr, &step_times);
  const int every = a.save_every > 0
                        ? a.save_every
                        : std::max(1, static_cast<int>(std::ceil(2 * save_time / warm)));
  const int steps = every * std::max(1, (a.steps + every - 1) / every);
  std::printf(
      "async: sync save %.3f s, step %.4f s -> save every %d steps (ceil(2 x save / step)%s); "
      "phases of %d steps: A (no save), B (async saves, snapshot overlapped with the next step), "
      "A, W (async saves, training thread waits for the snapshot), A, ... x %d\n",
      save_time, warm, every, a.save_every > 0 ? "; overridden by --save-every" : "", steps,
      a.pairs);
  const PhaseTimes times = RunPhases(a, trainer, steps, every, modes, &step_times);
  const double base = Median(times.phase_a);
  AttributeSaves(base, every, times, modes);
  return ReportAsync(every, base, times.phase_a, *modes);
}

void PrintResult(const IoRatios& io, const AsyncResult& async, const SaveLoadRuns& runs) {
  std::printf(
      "RESULT save_ratio=%.3f load_ratio=%.3f async_step_ratio=%.3f "
      "async_step_ratio_waited=%.3f save_every=%d stall_s=%.4f bytes=%lld files=%d\n",
      io.save, io.load, async.ratio[0], async.ratio[1], async.every, async.stall_s,
      static_cast<long long>(runs.bytes), runs.files);
}

}  // namespace

constexpr char kUsage[] =
    "usage: checkpoint_bench [--dir DIR] [--device cpu|cuda] [--layers N] [--hidden N]\n"
    "                        [--heads N] [--seq N] [--vocab N] [--micro-batch N]\n"
    "                        [--precision fp32|bf16] [--repeat N] [--steps N] [--save-every N]\n"
    "                        [--max-file-mb N] [--pairs N]\n"
    "                        [--stage-device auto|cpu|cuda|none]\n"
    "Checkpoint save and load against dd-style I/O of the same bytes, and the step-time cost of\n"
    "async saves (bench/README.md).\n";

int main(int argc, char** argv) {
  if (mt::cli::AnswerHelpOrVersion(argc, argv, "checkpoint_bench", kUsage)) return 0;
  bool own_dir = false;  // a temporary directory of ours: removed at the end
  const Args a = Parse(argc, argv, &own_dir);
  const mt::v1::JobSpec spec = MakeSpec(a, 1000000000);
  PrintSetup(a);

  // --- 1. save against dd write -------------------------------------------------------------
  auto trainer = MakeTrainer(a, spec);
  for (int i = 0; i < 2; ++i) Check(trainer->Step().status(), "step");  // optimizer state exists
  mt::checkpoint::LocalExchange exchange;
  auto sync = MakeCheckpointer(a, SyncDir(a), spec, /*async=*/false, &exchange);
  std::vector<char> buffer = RandomBuffer();
  SaveLoadRuns runs;
  for (int r = 0; r < a.repeat; ++r) SaveAndLoad(a, spec, r, *trainer, *sync, buffer, &runs);
  const IoRatios io = ReportSaveLoad(a, runs);

  // --- 3. async save cost to the step time --------------------------------------------------
  std::array<Mode, 2> modes = MakeModes(a, spec, *trainer, &exchange);
  const AsyncResult async = MeasureAsync(a, *trainer, Median(runs.save_s_all), &modes);
  PrintResult(io, async, runs);
  if (own_dir) mt::checkpoint::RemoveTree(a.dir).IgnoreError();
  return 0;
}
