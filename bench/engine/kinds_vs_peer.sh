#!/usr/bin/env bash
# Our training step and the PyTorch peer's (torch.compile), profiled at the same sizes on the
# same GPU and set side by side by kind of kernel (kernel_kinds.py): where the peer is faster
# than us, kind by kind. For each size: profile_step on the bench's spec (STEPS profiled steps
# after 5) with --trace, pytorch_gpt.py --mode compile (10 warm-up + 30 timed steps, then STEPS
# traced) with --trace-dir, then kernel_kinds.py on the two traces.
#
#   bench/engine/kinds_vs_peer.sh --build DIR [--sizes "350m 124m"] [--steps 3] [--out DIR]
#
# Environment: MT_PYTHON (python with torch for the peer; default python3),
# MT_PEER_LD_LIBRARY_PATH (the peer's LD_LIBRARY_PATH, as run_bench.sh). Outputs in
# OUT/kinds/: SIZE.txt (the comparison; also on stdout), the traces (gzipped), the runs' logs.
# Exit codes: 0 done, 2 bad usage, 3 a profile or a peer run failed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build="" sizes="350m" steps=3 out=${OUT:-/tmp/mt-gpu-out}
usage() { sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=${2-}; shift 2 ;;
    --sizes) sizes=${2-}; shift 2 ;;
    --steps) steps=${2-}; shift 2 ;;
    --out) out=${2-}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --version) echo "kinds_vs_peer (mt bench/engine) 1"; exit 0 ;;
    *) echo "kinds_vs_peer.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
py=${MT_PYTHON:-$(command -v python3 || true)}
prof=$build/bin/profile_step
if [ -z "$build" ] || [ ! -x "$prof" ]; then
  echo "kinds_vs_peer.sh: --build DIR must hold bin/profile_step (got '${build}')" >&2; exit 2
fi
if ! [[ $steps =~ ^[1-9][0-9]*$ ]]; then
  echo "kinds_vs_peer.sh: --steps must be a whole number of at least 1 (got '$steps')" >&2; exit 2
fi
[ -n "$py" ] || { echo "kinds_vs_peer.sh: no python3 (set MT_PYTHON)" >&2; exit 2; }
dir=$out/kinds
mkdir -p "$dir" || exit 2
# Every size checked and its spec written (bench_engine.spec_yaml) before anything runs.
python3 - $sizes <<PY || exit 2
import sys
sys.path.insert(0, "$here")
import bench_engine, sizes
bad = [s for s in sys.argv[1:] if s not in sizes.SIZES]
if bad or len(sys.argv) < 2:
    sys.exit("kinds_vs_peer.sh: --sizes: unknown size %s (one of %s)"
             % (", ".join(bad) or "(none given)", ", ".join(sizes.SIZES)))
for s in sys.argv[1:]:
    with open("$dir/%s.yaml" % s, "w") as f:
        f.write(bench_engine.spec_yaml(s, 5 + 2 * $steps + 4))
PY
peer_ld=${MT_PEER_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}}
rc=0
for size in $sizes; do
  echo "kinds_vs_peer: $size: our step" >&2
  if ! "$prof" --spec "$dir/$size.yaml" --warmup 5 --steps "$steps" --top 40 \
      --trace "$dir/ours-$size.json" >"$dir/ours-$size.txt" 2>"$dir/ours-$size.err"; then
    echo "kinds_vs_peer: $size: profile_step failed (see $dir/ours-$size.err)" >&2
    rc=3; continue
  fi
  echo "kinds_vs_peer: $size: the peer (torch.compile)" >&2
  if ! LD_LIBRARY_PATH=$peer_ld "$py" "$here/pytorch_gpt.py" --size "$size" --mode compile \
      --warmup 10 --steps 30 --trace-dir "$dir" --trace-steps "$steps" \
      >"$dir/peer-$size.jsonl" 2>"$dir/peer-$size.err"; then
    echo "kinds_vs_peer: $size: pytorch_gpt.py failed (see $dir/peer-$size.err)" >&2
    rc=3; continue
  fi
  python3 "$here/kernel_kinds.py" "$dir/ours-$size.json:$steps" \
    "$dir/peer-$size-compile.json:$steps" --top 10 | tee "$dir/$size.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=3
  gzip -f "$dir/ours-$size.json" "$dir/peer-$size-compile.json"
done
exit $rc
