// The fixture of the suites that run jobs through the whole stack (tests/integration): a real
// Cluster (cluster.h) with its coordinator started and the repetitive dataset written, worker
// daemons on demand, `mtctl submit` of a YAML file, the job's event history as text for failure
// messages, and the YAML of the tiny GPT those suites train. Written once here so that every
// suite starts, submits and reports the same way.
// Not thread-safe: one test thread drives a fixture.
#ifndef MT_TESTS_TESTUTIL_JOB_FIXTURE_H_
#define MT_TESTS_TESTUTIL_JOB_FIXTURE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mt/v1/job.pb.h"
#include "tests/testutil/cluster.h"

namespace mt::testutil {

// The directory of mt-coordinator, mt-worker, mt-train and mtctl: this build's bin/, or
// $MT_TEST_BIN_DIR when set (another build's daemons, all four binaries).
std::string BinDir();

// The tiny GPT that the suites train (2 layers, hidden 32, 2 heads, seq 16, micro-batch 2, lr
// 3e-3 with 2 warm-up steps, seed 7) on a dataset whose tokenizer is never read. The fields are
// what the suites vary; Yaml() writes the spec as `mtctl submit` reads it.
struct TinyJob {
  TinyJob(std::string name, std::string data_path, int train_iters)
      : name(std::move(name)), data_path(std::move(data_path)), train_iters(train_iters) {}
  std::string Yaml() const;

  std::string name;
  std::string data_path;
  int train_iters;
  std::string dp = "auto";  // a number, or "auto": spread over the free workers
  int global_batch_size = 8;
  // Both dropouts; empty leaves them out (the spec's defaults).
  std::string dropout = "0.0";
  std::string split = "90,10,0";
  std::string evaluation = "{eval_interval: 0}";
  int log_interval = 5;
  // The directory of the tokenizer files the spec names (never read; a coordinator with
  // --allowed-root wants it under a root).
  std::string tokenizer_dir = "/unused";
  // Further top-level sections, each "key: value" without the newline (checkpoint, restart).
  std::vector<std::string> sections;
};

class JobFixture : public ::testing::Test {
 protected:
  // Starts the coordinator and writes the dataset (data_): 64 documents of 200 tokens.
  void SetUp() override;

  // Starts workers "w0".."w<n-1>" with `flags` and waits until all n are IDLE. Every worker is
  // on "node0", or on a node of its own name with `node_per_worker` (so that a placement names
  // the daemon).
  void StartWorkers(int n, const std::vector<std::string>& flags = {}, bool node_per_worker = false,
                    absl::Duration timeout = absl::Seconds(30));

  // Writes `yaml` to `file` in the cluster's directory and runs `mtctl submit [flags] FILE`
  // (which must succeed); returns the job id it prints.
  std::string Submit(const std::string& yaml, const std::string& file,
                     const std::vector<std::string>& flags = {});

  // The job's history, oldest first (empty when the job cannot be read).
  std::vector<mt::v1::JobEvent> Events(const std::string& id);
  // The same, one line per event: "<attempt> <STATE>: <reason>", for failure messages.
  std::string EventText(const std::string& id);
  // The events that changed the job's state, oldest first: notes within a state (a straggler,
  // a load fallback, a cancel's saved step), which a loaded machine may add anywhere, left out.
  std::vector<mt::v1::JobEvent> Transitions(const std::string& id);
  // The states the job went through, oldest first (Transitions' states).
  std::vector<mt::v1::JobState> States(const std::string& id);
  // The coordinator's metrics endpoint (host:port, from `mtctl info -o json`); empty if none.
  std::string CoordinatorMetricsAddress();

  Cluster cluster_{BinDir()};
  std::string data_;
};

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_JOB_FIXTURE_H_
