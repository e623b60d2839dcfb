#!/usr/bin/env bash
# The engine benchmark: our trainer against PyTorch eager and torch.compile, same model, same
# GPU, same run (bench/engine/README.md). Prints a table last; results under the output dir.
#
#   bench/engine/run_bench.sh [--build DIR] [--out DIR] [--sizes "124m 350m 1.3b"]
#                             [--modes "ours eager compile"] [--warmup N] [--steps N]
#                             [--device cuda|cpu] [--budget SECONDS] [--dropout P]
#
# Environment (flags win):
#   MT_TRAIN             our trainer (default $build/bin/mt-train, else $build/bin/mt-worker train)
#   MT_GPU_BUILD_DIR     build dir (default /tmp/mt-gpu, else ./build)
#   MT_BENCH_SIZES       sizes (default "124m 350m 1.3b"; "tiny" is a CPU smoke-test size)
#   MT_BENCH_MODES       runs per size (default "ours eager compile")
#   MT_BENCH_WARMUP      warm-up steps (default 10); MT_BENCH_STEPS timed steps (default 20)
#   MT_BENCH_DEADLINE    epoch seconds by which all runs must end (tests/gpu/run.sh sets it)
#   MT_BENCH_BUDGET_S    else seconds from now (default 480)
#   MT_BENCH_DEVICE      cuda (default), cuda:N or cpu (the CPU smoke test)
#   MT_BENCH_DROPOUT     hidden and attention dropout of both sides, in [0, 1) (default 0;
#                        Megatron's default is 0.1; the DESIGN.md anchors are at 0)
#   MT_BENCH_ATTENTION   ours: auto (default), math, fused, cudnn, flash
#   MT_BENCH_FUSED_LM_HEAD=1  ours: --fused-lm-head (output layer + loss in one node; default)
#   MT_BENCH_FUSED_LAYERNORM=1  ours: --fused-layernorm (the LayerNorm kernels; the default now)
#   MT_BENCH_OURS_ARGS   ours: more mt-train switches, space-separated (e.g. --no-fused-mlp)
#   MT_BENCH_VARIANT_ARGS  also run ours with these switches added, right after ours at each
#                        size, and print the variant's ratio to ours (an A/B in one run)
#   MT_BENCH_VARIANT_TRAIN  the variant runs this trainer instead (another build's mt-train,
#                        e.g. of the commit before a change: an A/B of two builds in one run)
#   MT_BENCH_COMPILE_MODE  torch.compile mode (default "default")
#   MT_PYTHON            python with torch for the peer (default python3)
#   MT_PEER_LD_LIBRARY_PATH  LD_LIBRARY_PATH for the peer (set by tests/gpu/run.sh to the one
#                        from before .device/gpu-env.sh, so PyTorch never sees the bundle's libs)
#   OUT                  output root: results go to $OUT/bench-engine (default /tmp/mt-gpu-out)
# Exit codes: 0 done, 3 a run of ours failed, 2 usage or setup error.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

build=${MT_GPU_BUILD_DIR:-}
out=""
sizes=${MT_BENCH_SIZES:-124m 350m 1.3b}
modes=${MT_BENCH_MODES:-ours eager compile}
warmup=${MT_BENCH_WARMUP:-10}
steps=${MT_BENCH_STEPS:-20}
device=${MT_BENCH_DEVICE:-cuda}
dropout=${MT_BENCH_DROPOUT:-0}
budget=${MT_BENCH_BUDGET_S:-480}
deadline=${MT_BENCH_DEADLINE:-0}
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --dropout) dropout=$2; shift 2 ;;
    --budget) budget=$2; deadline=0; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_bench.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
if [ -z "$build" ]; then
  if [ -d /tmp/mt-gpu/bin ]; then build=/tmp/mt-gpu; else build=$root/build; fi
fi
[ -n "$out" ] || out=${OUT:-/tmp/mt-gpu-out}/bench-engine
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
[ -d "$build" ] && build=$(cd "$build" && pwd)

# The machine's python (with torch) before anything changes PATH.
py=${MT_PYTHON:-$(command -v python3 || true)}
if [ -z "$py" ]; then echo "run_bench.sh: no python3 (set MT_PYTHON)" >&2; exit 2; fi

train_args=()
if [ -n "${MT_TRAIN:-}" ]; then
  train_bin=$(realpath -m "$MT_TRAIN")
elif [ -x "$build/bin/mt-train" ]; then
  train_bin=$build/bin/mt-train
elif [ -x "$build/bin/mt-worker" ]; then
  train_bin=$build/bin/mt-worker
  train_args=(--train-arg train)
else
  echo "run_bench.sh: no $build/bin/mt-train or mt-worker (build first, or set MT_TRAIN)" >&2
  train_bin=$build/bin/mt-train  # its runs fail as "cannot start"; the peers still run
fi
# On the GPU machine our binaries need the bundle's libraries (.device/gpu-env.sh; tests/gpu/
# run.sh has sourced it already); the peer keeps the environment from before it.
if [ -z "${MT_PEER_LD_LIBRARY_PATH+x}" ]; then
  export MT_PEER_LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}
fi
if [ -f "$root/.device/gpu-env.sh" ] && [[ "${LD_LIBRARY_PATH-}" != */tmp/bundle/usr/* ]] &&
   command -v nvidia-smi >/dev/null 2>&1; then
  cd "$root" || exit 2
  # shellcheck disable=SC1091
  source .device/gpu-env.sh >"$out/gpu-env.log" 2>&1 ||
    echo "run_bench.sh: .device/gpu-env.sh failed (see $out/gpu-env.log)" >&2
fi

mtctl=""
[ -x "$build/bin/mtctl" ] && mtctl=$build/bin/mtctl

dl_args=(--budget "$budget")
[ "$deadline" != "0" ] && dl_args=(--deadline "$deadline")
peer_ld_args=(--peer-ld-library-path "$MT_PEER_LD_LIBRARY_PATH")
ours_args=()
[ "${MT_BENCH_FUSED_LM_HEAD:-0}" = 1 ] && ours_args+=(--fused-lm-head)
[ "${MT_BENCH_FUSED_LAYERNORM:-0}" = 1 ] && ours_args+=(--fused-layernorm)
for a in ${MT_BENCH_OURS_ARGS:-}; do train_args+=("--train-arg=$a"); done
for a in ${MT_BENCH_VARIANT_ARGS:-}; do ours_args+=("--variant-arg=$a"); done
[ -n "${MT_BENCH_VARIANT_TRAIN:-}" ] && ours_args+=("--variant-bin=$MT_BENCH_VARIANT_TRAIN")

"$py" "$here/bench_engine.py" --train-bin "$train_bin" "${train_args[@]}" --python "$py" \
  "${peer_ld_args[@]}" --mtctl "$mtctl" --out "$out" --sizes "$sizes" --modes "$modes" \
  --warmup "$warmup" --steps "$steps" --device "$device" --dropout "$dropout" \
  --attention "${MT_BENCH_ATTENTION:-auto}" "${ours_args[@]}" --compile-mode "${MT_BENCH_COMPILE_MODE:-default}" \
  "${dl_args[@]}"
