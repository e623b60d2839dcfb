#!/usr/bin/env bash
# Data-parallel weak scaling: GPT-2 124M (micro-batch 32, seq 1024, bf16) as mt jobs through
# the whole service (coordinator + one worker per GPU + mt-train ranks) at DP = 1 and DP = N,
# and PyTorch DDP (torch_ddp.py) at world 1 and N, in the same run. Per-GPU tokens/s at N over
# per-GPU tokens/s at 1 is the weak-scaling efficiency; the table prints both and their ratio.
#
#   bench/parallel/run_dp_scaling.sh --data PREFIX [--build DIR] [--world N] [--iters 40]
#
# PREFIX: an indexed dataset (.bin/.idx) for our jobs (the peer uses synthetic batches).
# Environment: MT_PYTHON / MT_PEER_LD_LIBRARY_PATH for the peer (tests/gpu/run.sh sets them).
# Exit codes: 0 done, 1 a run failed, 2 usage.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${MT_GPU_BUILD_DIR:-/tmp/mt-gpu}
world="" data="" iters=40
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --world) world=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    *) echo "run_dp_scaling.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$world" ] || world=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$world" -ge 2 ] || { echo "run_dp_scaling.sh: needs >= 2 GPUs" >&2; exit 2; }
[ -n "$data" ] && [ -f "$data.idx" ] || { echo "run_dp_scaling.sh: --data PREFIX (.bin/.idx)" >&2; exit 2; }
B=$build/bin
py=${MT_PYTHON:-python3}
D=$(mktemp -d)
failed=0
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- ours: one coordinator, one worker per GPU --------------------------------------------
"$B/mt-coordinator" --listen 127.0.0.1:0 --address_file "$D/addr" --state_dir "$D/state" \
    2>"$D/coordinator.log" &
pids=($!)
for _ in $(seq 100); do [ -s "$D/addr" ] && break; sleep 0.1; done
export MT_COORDINATOR=$(cat "$D/addr")
for ((g = 0; g < world; g++)); do
  "$B/mt-worker" --coordinator "$MT_COORDINATOR" --gpu $g --work-dir "$D/w$g" \
      2>"$D/worker$g.log" &
  pids+=($!)
done
sleep 2
ours() {  # ours DP -> per-GPU tokens/s on stdout
  local dp=$1
  cat >"$D/job$dp.yaml" <<YAML
name: dp-scaling-$dp
model: {num_layers: 12, hidden_size: 768, num_attention_heads: 12, seq_length: 1024, hidden_dropout: 0.0, attention_dropout: 0.0}
parallel: {data_parallel_size: $dp}
training: {micro_batch_size: 32, global_batch_size: $((32 * dp)), train_iters: $iters, lr: 6.0e-4, lr_warmup_iters: 10, precision: bf16}
data: {data_path: $data, split: "100,0,0", tokenizer: {vocab_file: /unused.json, merge_file: /unused.txt}}
evaluation: {eval_interval: 0}
logging: {log_interval: 10}
YAML
  local id
  id=$("$B/mtctl" submit "$D/job$dp.yaml") || return 1
  "$B/mtctl" watch "$id" >/dev/null 2>"$D/watch$dp.log"
  "$B/mtctl" describe "$id" -o json >"$D/job$dp.json" || return 1
  python3 - "$D/job$dp.json" "$dp" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
state = j.get("state", "")
tps = j.get("progress", {}).get("tokensPerSecond") or j.get("progress", {}).get("tokens_per_second")
if "SUCCEEDED" not in state or not tps:
    sys.exit("job %s: %s" % (state, j.get("events", [])[-1:] ))
print(float(tps) / int(sys.argv[2]))
PY
}
mt1=$(ours 1) || failed=1
mtn=$(ours "$world") || failed=1
kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null

# --- the peer: DDP at world 1 and N ----------------------------------------------------------
peer() {  # peer N -> per-GPU tokens/s
  local n=$1 p r
  p=$(port)
  local ps=()
  for ((r = 0; r < n; r++)); do
    LD_LIBRARY_PATH=${MT_PEER_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}} "$py" "$here/torch_ddp.py" \
        --rank $r --world "$n" --master 127.0.0.1:$p >"$D/ddp$n.$r.out" 2>"$D/ddp$n.$r.err" &
    ps+=($!)
  done
  local rc=0
  for p in "${ps[@]}"; do wait "$p" || rc=1; done
  [ $rc -eq 0 ] || { tail -n 5 "$D/ddp$n.0.err" >&2; return 1; }
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens_per_second_per_gpu"])' "$D/ddp$n.0.out"
}
pt1=$(peer 1) || failed=1
ptn=$(peer "$world") || failed=1
python3 - "${mt1:-0}" "${mtn:-0}" "${pt1:-0}" "${ptn:-0}" "$world" <<'PY'
import sys
m1, mn, p1, pn, n = map(float, sys.argv[1:])
eff = lambda a, b: b / a if a > 0 else float("nan")
print("DP weak scaling, GPT-2 124M, micro-batch 32 x 1024, bf16 (per-GPU tokens/s)")
print("%-12s %12s %12s %10s" % ("impl", "world 1", "world %d" % n, "efficiency"))
print("%-12s %12.0f %12.0f %9.1f%%" % ("mt (service)", m1, mn, 100 * eff(m1, mn)))
print("%-12s %12.0f %12.0f %9.1f%%" % ("pytorch ddp", p1, pn, 100 * eff(p1, pn)))
print("mt / pytorch per-GPU at world %d: %.3f" % (n, mn / pn if pn > 0 else float("nan")))
PY
echo "logs: $D"
exit $failed
