#!/usr/bin/env bash
# Builds the fuzz build (clang-16, ASan/UBSan, libFuzzer; only the parsers and the coordinator's
# handlers) into build-fuzz/ and runs each target for N seconds from its seed corpus
# (tests/fuzz/corpus/<target>/), two at a time. Fails on any finding (crash, leak, UB report,
# timeout, out-of-memory); the input that found it is kept as build-fuzz/findings/<target>/*.
#   tests/fuzz/run.sh [--seconds N] [--jobs J] [--seed S] [--build-only] [target ...]
# Defaults: 60 s per target, 2 at a time, every target, a random seed. --seed makes the run
# repeatable (CI's short form passes one, so that a landing's fuzz step is the run checked
# before it; the long runs by hand keep random seeds). Figures (executions, coverage) of each
# run: build-fuzz/logs/<target>.log; a summary line per target on stdout.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${MT_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=60 jobs=2 build_only=0 seed="" targets=()
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    -*) echo "fuzz/run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
for tool in clang-16 clang++-16; do
  command -v "$tool" >/dev/null || {
    echo "fuzz/run.sh: $tool not found; install clang-16 and libclang-rt-16-dev (deploy/setup.sh)" >&2
    exit 1
  }
done
if ((${#targets[@]} == 0)); then
  for d in "$root"/tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi

if [[ ! -f $build/build.ninja ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DMT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16 \
    ${MT_ASSET_DIR:+-DMT_ASSET_DIR=$MT_ASSET_DIR} >/dev/null
fi
ninja -C "$build" -j "${MT_FUZZ_BUILD_JOBS:-$(nproc)}" "${targets[@]}" >&2
((build_only)) && exit 0

mkdir -p "$build/logs"
run_one() {  # target -> exit status of libFuzzer; a summary line on stdout
  local t=$1 work="$build/corpus/$1" findings="$build/findings/$1" log="$build/logs/$1.log"
  mkdir -p "$work" "$findings"
  local rc=0
  # New inputs go to the work corpus (first directory); the committed seeds are only read.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$findings/" ${seed:+-seed="$seed"} \
    "$work" "$root/tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  local execs
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  local cov
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  if ((rc == 0)); then
    echo "fuzz $t: ok, ${seconds}s, ${execs:-0} executions, coverage ${cov:-?}, 0 findings"
  else
    echo "fuzz $t: FINDING (exit $rc), see $log and $findings/"
    grep -E 'ERROR|runtime error|SUMMARY' "$log" | head -5 >&2 || true
  fi
  return $rc
}
export -f run_one
export build root seconds
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}'
