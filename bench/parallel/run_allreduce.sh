#!/usr/bin/env bash
# All-reduce bus bandwidth: ours (allreduce_bench, c10d through worker/parallel) against
# PyTorch's torch.distributed.all_reduce, same GPUs, same run; prints a table with the ratio.
#
#   bench/parallel/run_allreduce.sh [--build DIR] [--world N] [--sizes_mib 1,16,128,1024]
#                                   [--backend nccl|gloo]
#
# Defaults: build /tmp/mt-gpu, world = the number of GPUs (nvidia-smi -L), nccl. Environment:
# MT_PYTHON (python with torch for the peer), MT_PEER_LD_LIBRARY_PATH (its library path).
# Exit codes: 0 done, 1 a run failed, 2 usage.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${MT_GPU_BUILD_DIR:-/tmp/mt-gpu}
world=""
sizes=1,16,128,1024
backend=nccl
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --world) world=$2; shift 2 ;;
    --sizes_mib) sizes=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    *) echo "run_allreduce.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$world" ] || world=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$world" -lt 2 ]; then
  echo "run_allreduce.sh: needs at least 2 ranks (world=$world)" >&2; exit 2
fi
bin=$build/bin/allreduce_bench
[ -x "$bin" ] || { echo "run_allreduce.sh: $bin not built" >&2; exit 2; }
py=${MT_PYTHON:-python3}
out=$(mktemp -d)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

launch() {  # launch NAME CMD... : one process per rank, rank 0's stdout to $out/NAME.jsonl
  local name=$1; shift
  local p; p=$(port)
  local pids=() r
  for ((r = 0; r < world; r++)); do
    "$@" --rank $r --world "$world" --master 127.0.0.1:$p --sizes_mib "$sizes" \
        --backend "$backend" >"$out/$name.$r.out" 2>"$out/$name.$r.err" &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cp "$out/$name.0.out" "$out/$name.jsonl"
  if [ $rc -ne 0 ]; then echo "run_allreduce.sh: $name failed:" >&2; for f in "$out/$name".*.err; do tail -n 5 "$f" >&2; done; fi
  return $rc
}

failed=0
launch mt "$bin" || failed=1
LD_LIBRARY_PATH=${MT_PEER_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}} launch pytorch "$py" "$here/torch_allreduce.py" || failed=1
python3 - "$out/mt.jsonl" "$out/pytorch.jsonl" "$world" "$backend" <<'PY'
import json, sys
def load(p):
    try:
        return {r["bytes"]: r for r in map(json.loads, open(p)) if r}
    except Exception:
        return {}
mt, pt = load(sys.argv[1]), load(sys.argv[2])
print("all-reduce bus bandwidth, %s ranks, %s, fp32 (GB/s)" % (sys.argv[3], sys.argv[4]))
print("%10s %10s %10s %7s" % ("size", "mt", "pytorch", "ratio"))
for b in sorted(set(mt) | set(pt)):
    m = mt.get(b, {}).get("busbw_gbps"); p = pt.get(b, {}).get("busbw_gbps")
    size = "%d MiB" % (b >> 20) if b >= 1 << 20 else "%d B" % b
    print("%10s %10s %10s %7s" % (size, "%.1f" % m if m else "-", "%.1f" % p if p else "-",
                                   "%.3f" % (m / p) if m and p else "-"))
PY
exit $failed
