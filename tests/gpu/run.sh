#!/usr/bin/env bash
# The GPU suite, on the GPU machine (shared/device/README.md), with .device/ carried into the
# repo root (tests/gpu/prepare.sh makes it on the development machine): sources
# .device/gpu-env.sh, configures and builds (Release, Ninja) into /tmp/mt-gpu, runs
# `ctest -L gpu`, then the engine benchmark (bench/engine/run_bench.sh: our
# trainer against PyTorch eager and torch.compile), and prints a short table last.
#
#   tests/gpu/run.sh
#
# Environment:
#   OUT               where logs and results go (default /tmp/mt-gpu-out)
#   MT_GPU_BUILD_DIR  build dir (default /tmp/mt-gpu); MT_GPU_JOBS build jobs (default 16)
#   MT_GPU_BUDGET_S   wall-time budget of the whole script (default 540 s); the build and the
#                     tests are cut off where they would leave no time for the table, and the
#                     benchmark gets what is left (runs that do not fit are listed as "skip")
#   MT_GPU_SKIP_TESTS=1, MT_GPU_SKIP_BENCH=1   leave a stage out (without the tests, only the
#                     programs the other stages run are built: mt-train, mtctl, the benches asked for)
#   MT_ASSET_DIR      GPT-2 BPE files for the tests (default .device/assets when it has them)
#   MT_GPU_DECODE=1   also run the decode benchmark (bench/generate/run_decode.sh: ours against
#                     transformers' generate) before the engine benchmark, in at most 240 s
#   MT_GPU_KERNEL_BENCHES="name ..."  also run these kernel benches of the build (bench/engine's
#                     cross_entropy_bench, layer_norm_bench, optimizer_bench, ...: each times a
#                     kernel against its peer in one run) after the tests, at most 90 s each,
#                     output in kernel-NAME.txt
#   MT_GPU_PROFILE_AB="--switch ..."  also profile our step at each size with our defaults and
#                     with these switches, side by side (bench/engine/profile_ab.py; sizes from
#                     MT_PROFILE_SIZES, default "124m 1.3b"), before the engine benchmark, in at
#                     most 240 s
#   MT_GPU_KINDS="350m ..."  also profile our step and torch.compile's at these sizes and set
#                     them side by side by kind of kernel (bench/engine/kinds_vs_peer.sh:
#                     GEMM, attention, LayerNorm, ...), before the engine benchmark, in at most
#                     300 s; output in kinds/SIZE.txt
#   MT_BENCH_SIZES, MT_BENCH_MODES, MT_BENCH_WARMUP, MT_BENCH_STEPS, ...  see run_bench.sh
# Exit codes: 0 all passed; 1 environment, configure, build or a GPU test failed; 3 the build
# and tests passed but a benchmark run of our trainer failed.
set -uo pipefail
t0=$(date +%s)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
out=${OUT:-/tmp/mt-gpu-out}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
rm -f "$out/bench-engine/table.txt" "$out/summary.txt"  # never show an older run's table
build=${MT_GPU_BUILD_DIR:-/tmp/mt-gpu}
jobs=${MT_GPU_JOBS:-16}
budget=${MT_GPU_BUDGET_S:-540}
deadline=$((t0 + budget))
# The machine's python and library path from before gpu-env.sh, for the PyTorch peer.
export MT_PYTHON=${MT_PYTHON:-$(command -v python3 || echo python3)}
export MT_PEER_LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}

names=() stats=() secs=() details=()
record() { names+=("$1"); stats+=("$2"); secs+=("$3"); details+=("$4"); }
say() { echo "[gpu +$(($(date +%s) - t0))s] $*"; }
left() { echo $((deadline - $(date +%s))); }
# A timeout(1) limit that keeps `reserve` seconds of the budget (at least 1 s: 0 means none).
limit() { local t=$(($(left) - $1)); [ $t -ge 1 ] || t=1; echo $t; }
failed=0
# An optional stage's row from its exit code (name, rc, start, log, program); a failure makes
# the suite's exit code 3, as a failed benchmark does.
record_optional() {
  if [ "$2" = 0 ]; then
    record "$1" ok $(($(date +%s) - $3)) "$4"
  else
    record "$1" FAIL $(($(date +%s) - $3)) "$5 exit $2 (see $(basename "$4"))"
    [ $failed -eq 0 ] && failed=3
  fi
  return 0
}

print_table() {
  local gpu
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
        2>/dev/null | head -1)
  {
    echo
    echo "== mt GPU suite: ${gpu:-no nvidia-smi}; $(date -u '+%Y-%m-%d %H:%M:%S UTC');" \
         "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')" \
         "$(git -C "$root" status --porcelain 2>/dev/null | grep -q . && echo '(+ local changes)');" \
         "$(($(date +%s) - t0)) s =="
    printf '%-10s %-6s %6s  %s\n' stage result sec detail
    local i
    for i in "${!names[@]}"; do
      printf '%-10s %-6s %6s  %s\n' "${names[$i]}" "${stats[$i]}" "${secs[$i]}" "${details[$i]}"
    done
    if [ -s "$out/bench-engine/table.txt" ] && [ "${MT_GPU_SKIP_BENCH:-0}" != 1 ]; then
      echo
      cat "$out/bench-engine/table.txt"
    fi
    echo "logs: $out"
  } | tee "$out/summary.txt"
}

finish() {
  print_table
  exit "$1"
}

# 1. Environment: the bundle's libraries, LibTorch and NCCL from the machine's PyTorch.
s=$(date +%s)
if [ ! -f .device/gpu-env.sh ]; then
  record env FAIL 0 ".device/gpu-env.sh is missing (carry .device into the repo root)"
  finish 1
fi
# shellcheck disable=SC1091
if ! source .device/gpu-env.sh >"$out/gpu-env.log" 2>&1; then
  record env FAIL $(($(date +%s) - s)) "source .device/gpu-env.sh failed: $(tail -1 "$out/gpu-env.log")"
  finish 1
fi
record env ok $(($(date +%s) - s)) "$(grep -m1 '^gpu-env:' "$out/gpu-env.log" | cut -c10-)"
# The GPT-2 BPE files for the tests that tokenize (HfGenerateTest skips without them): the
# machine has no npm, so they come in .device/assets/ (gpt2-vocab.json, gpt2-merges.txt).
if [ -z "${MT_ASSET_DIR:-}" ] && [ -f .device/assets/gpt2-vocab.json ]; then
  export MT_ASSET_DIR=$root/.device/assets
fi
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
say "environment ready: $(tail -1 "$out/gpu-env.log")"

# 2. Configure and build.
s=$(date +%s)
say "configure $build"
if ! timeout -k 10 "$(limit 30)" cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DMT_BUILD_TESTS=ON -DCMAKE_PREFIX_PATH="$MT_CMAKE_PREFIX" -DCMAKE_CUDA_ARCHITECTURES=90 \
     -DNCCL_ROOT="$MT_NCCL_ROOT" >"$out/configure.log" 2>&1; then
  tail -n 30 "$out/configure.log"
  record configure FAIL $(($(date +%s) - s)) "see configure.log"
  finish 1
fi
record configure ok $(($(date +%s) - s)) "Release, CUDA arch 90, $build"
# Without the tests, only the programs the later stages run (a third of the build's time).
targets=()
if [ "${MT_GPU_SKIP_TESTS:-0}" = 1 ]; then
  [ "${MT_GPU_SKIP_BENCH:-0}" = 1 ] || targets+=(mt-train mtctl)
  [ "${MT_GPU_DECODE:-0}" = 1 ] && targets+=(decode_bench)
  [ -n "${MT_GPU_PROFILE_AB:-}${MT_GPU_KINDS:-}" ] && targets+=(profile_step)
  for kb in ${MT_GPU_KERNEL_BENCHES:-}; do targets+=("$kb"); done
  [ ${#targets[@]} -gt 0 ] || targets=(all)
fi
s=$(date +%s)
say "build -j $jobs${targets[*]:+ (targets: ${targets[*]})}"
timeout -k 10 "$(limit 30)" cmake --build "$build" -j "$jobs" ${targets[@]:+--target "${targets[@]}"} \
  >"$out/build.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  grep -E 'error|FAILED' "$out/build.log" | head -n 20
  tail -n 20 "$out/build.log"
  why="see build.log"
  [ $rc -ge 124 ] && why="cut off by the time budget (MT_GPU_BUDGET_S=$budget); see build.log"
  record build FAIL $(($(date +%s) - s)) "$why"
  finish 1
fi
record build ok $(($(date +%s) - s)) "$(grep -c '^\[' "$out/build.log") build steps"

# 3. GPU tests.
if [ "${MT_GPU_SKIP_TESTS:-0}" = 1 ]; then
  record "gpu tests" skip 0 "MT_GPU_SKIP_TESTS=1"
else
  s=$(date +%s)
  say "ctest -L gpu"
  timeout -k 10 "$(limit 20)" ctest --test-dir "$build" -L gpu --output-on-failure \
    --no-tests=error --timeout 300 >"$out/ctest-gpu.log" 2>&1
  rc=$?
  cp "$build/Testing/Temporary/LastTest.log" "$out/ctest-gpu-LastTest.log" 2>/dev/null || true
  # "100% tests passed, 0 tests failed out of 9" (older CTest) or "100% tests passed out of 9".
  summary=$(grep -E '[0-9]+% tests passed(, [0-9]+ tests? failed)? out of [0-9]+' \
            "$out/ctest-gpu.log" | tail -1)
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$summary")
  nfail=0
  if grep -qE 'tests? failed' <<<"$summary"; then
    nfail=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$summary")
  fi
  # A GPU test that GTEST_SKIPs (no device, no CUDA build) passes in ctest: count those.
  gskip=$(grep -oE '^\[  SKIPPED \] [^ ]+\.[^ ]+' "$out/ctest-gpu-LastTest.log" 2>/dev/null |
          sort -u | wc -l)
  nrun=$(sed -n '/tests did not run:/,/^$/p' "$out/ctest-gpu.log" | grep -cE '^\s+[0-9]+ - ')
  if [ -n "$summary" ]; then
    detail="$((total - nfail)) passed, $nfail failed of $total; $gskip skipped inside gtest"
    [ "$nrun" -gt 0 ] && detail="$detail; $nrun not run"
  else
    detail="no ctest summary (see ctest-gpu.log): $(grep -m1 -iE 'no tests|error' "$out/ctest-gpu.log")"
  fi
  if [ $rc -ne 0 ]; then
    failed=1
    [ $rc -ge 124 ] && [ -z "$summary" ] && detail="cut off by the time budget; $detail"
    bad=$(sed -n '/The following tests FAILED:/,/^Errors while running/p' "$out/ctest-gpu.log" |
          grep -oE '[0-9]+ - [^ ]+' | sed -E 's/^[0-9]+ - //' | head -n 5 | paste -sd, -)
    [ -n "$bad" ] && detail="$detail (failed: $bad)"
    sed -n '/The following tests FAILED:/,$p' "$out/ctest-gpu.log" | head -n 20
    record "gpu tests" FAIL $(($(date +%s) - s)) "$detail"
  else
    record "gpu tests" ok $(($(date +%s) - s)) "$detail"
  fi
fi

# 3b. The decode benchmark, when asked for (MT_GPU_DECODE=1).
if [ "${MT_GPU_DECODE:-0}" = 1 ]; then
  s=$(date +%s)
  say "bench/generate/run_decode.sh"
  dl=$(limit 15); [ "$dl" -gt 240 ] && dl=240
  timeout -k 10 "$dl" "$root/bench/generate/run_decode.sh" "$build" "${MT_DECODE_SIZES:-124m}" \
    2>&1 | tee "$out/decode.log"
  record_optional decode "${PIPESTATUS[0]}" "$s" "$out/decode.log" run_decode.sh
fi

# 3b'. Kernel benches, when asked for (MT_GPU_KERNEL_BENCHES).
for kb in ${MT_GPU_KERNEL_BENCHES:-}; do
  s=$(date +%s)
  say "$kb"
  kl=$(limit 15); [ "$kl" -gt 90 ] && kl=90
  if [ ! -x "$build/bin/$kb" ]; then
    record "$kb" FAIL 0 "no $build/bin/$kb (a kernel bench of bench/engine or bench/generate?)"
    [ $failed -eq 0 ] && failed=3
    continue
  fi
  timeout -k 10 "$kl" "$build/bin/$kb" 2>&1 | tee "$out/kernel-$kb.txt"
  record_optional "$kb" "${PIPESTATUS[0]}" "$s" "$out/kernel-$kb.txt" "$kb"
done

# 3c. Kernel profiles of one switch's two sides, when asked for (MT_GPU_PROFILE_AB).
if [ -n "${MT_GPU_PROFILE_AB:-}" ]; then
  s=$(date +%s)
  say "bench/engine/profile_ab.py ${MT_GPU_PROFILE_AB}"
  pl=$(limit 15); [ "$pl" -gt 240 ] && pl=240
  variant=()
  for a in $MT_GPU_PROFILE_AB; do variant+=("--variant-arg=$a"); done
  timeout -k 10 "$pl" "$MT_PYTHON" "$root/bench/engine/profile_ab.py" --build "$build" \
    --out "$out" --sizes "${MT_PROFILE_SIZES:-124m 1.3b}" "${variant[@]}" 2>&1 |
    tee "$out/profile-ab.log"
  record_optional profile "${PIPESTATUS[0]}" "$s" "$out/profile-ab.log" profile_ab.py
fi

# 3d. Ours against the peer by kind of kernel, when asked for (MT_GPU_KINDS="SIZE ...").
if [ -n "${MT_GPU_KINDS:-}" ]; then
  s=$(date +%s)
  say "bench/engine/kinds_vs_peer.sh --sizes \"${MT_GPU_KINDS}\""
  kl=$(limit 15); [ "$kl" -gt 300 ] && kl=300
  timeout -k 10 "$kl" "$root/bench/engine/kinds_vs_peer.sh" --build "$build" --out "$out" \
    --sizes "$MT_GPU_KINDS" 2>&1 | tee "$out/kinds.log"
  record_optional kinds "${PIPESTATUS[0]}" "$s" "$out/kinds.log" kinds_vs_peer.sh
fi

# 4. The engine benchmark, in what is left of the budget (15 s kept for the table).
if [ "${MT_GPU_SKIP_BENCH:-0}" = 1 ]; then
  record bench skip 0 "MT_GPU_SKIP_BENCH=1"
else
  s=$(date +%s)
  say "bench/engine/run_bench.sh ($(($(left) - 15)) s left)"
  MT_BENCH_DEADLINE=$((deadline - 15)) timeout -k 10 "$(limit 5)" \
    "$root/bench/engine/run_bench.sh" --build "$build" --out "$out/bench-engine" \
    2>&1 | tee "$out/bench.log"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) record bench ok $(($(date +%s) - s)) "table below; $out/bench-engine/results.json" ;;
    3) record bench FAIL $(($(date +%s) - s)) "a run of ours failed (notes below)"
       [ $failed -eq 0 ] && failed=3 ;;
    *) record bench FAIL $(($(date +%s) - s)) "run_bench.sh exit $rc (see bench.log)"
       [ $failed -eq 0 ] && failed=3 ;;
  esac
fi
finish $failed
