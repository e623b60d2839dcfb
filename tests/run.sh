#!/usr/bin/env bash
# Runs the test suites on the build that deploy/setup.sh made: formatting, then every CTest
# label that runs without a GPU (unit, integration, e2e, fuzz, and the short forms of the
# multinode, slurm and chaos suites). GPU and perf tests run on the GPU machine through
# tests/gpu/run.sh; the long forms (label long) by hand: `ctest --test-dir build -L long`.
#   tests/run.sh [extra ctest arguments, e.g. -L unit or -R Layout]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MT_BUILD_DIR:-$root/build}
"$root/tools/check_format.sh"
# Every test's scratch files (testutil::MakeTempDir and the daemons the tests start honour
# TMPDIR) go under one folder that is removed when the run ends, pass or fail: runs on one
# machine never pile checkpoints and datasets up in /tmp until its disk is full.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/mt-tests.XXXXXX")
trap 'rm -rf "$scratch" || true' EXIT
export TMPDIR=$scratch
echo "tests/run.sh: scratch files under $scratch ($(df -h --output=avail "$scratch" | tail -1 | tr -d ' ') free)" >&2
# ctest runs one test per core, and a test's trainers compute with one thread each (the daemons
# of tests/testutil serve one-core slots; in-process trainers call at::set_num_threads(1)).
# OpenBLAS ignores LibTorch's count and would start a spinning thread per core in every process.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -LE 'gpu|perf|long' --timeout 900 "$@"
