#!/usr/bin/env bash
# Tensor-parallel throughput: the 1.3B GPT (24 x 2048, 16 heads, seq 1024, micro-batch 8, bf16)
# as mt jobs through the whole service (coordinator + one worker per GPU + mt-train ranks) at
# TP = 1 on one GPU and TP = N on N GPUs (without and with --sequence-parallel), and the same
# model under PyTorch's own tensor parallelism (torch_tp.py: DTensor ColwiseParallel /
# RowwiseParallel) at world 1 and N, in the same run. Prints tokens/s, the per-GPU efficiency
# tok/s(TP=N) / (N x tok/s(TP=1)) of each, and ours / PyTorch at TP = N.
#
#   bench/parallel/run_tp_scaling.sh --data PREFIX [--build DIR] [--tp N] [--iters 30]
#                                    [--size 1.3b] [--micro-batch 8]
#
# PREFIX: an indexed dataset (.bin/.idx) for our jobs (the peer uses synthetic batches).
# --tp: N (default: every GPU of the machine; >= 2). Every run pads the vocabulary to a multiple
# of 128 * N (Megatron's rule at TP = N), so all runs train the same model.
# Environment: MT_PYTHON / MT_PEER_LD_LIBRARY_PATH for the peer (tests/gpu/run.sh sets them).
# Exit codes: 0 done, 1 a run failed, 2 usage (e.g. fewer GPUs than --tp).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${MT_GPU_BUILD_DIR:-/tmp/mt-gpu}
tp="" data="" iters=30 size=1.3b micro=""
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --tp) tp=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --micro-batch) micro=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_tp_scaling.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ -n "$tp" ] || tp=$gpus
case "$tp" in ''|*[!0-9]*) echo "run_tp_scaling.sh: --tp N (a number), got '$tp'" >&2; exit 2 ;; esac
if [ "$tp" -lt 2 ]; then
  echo "run_tp_scaling.sh: needs --tp >= 2 and as many GPUs (this machine shows $gpus)" >&2
  exit 2
fi
if [ "$gpus" -lt "$tp" ]; then
  echo "run_tp_scaling.sh: --tp $tp needs $tp GPUs; nvidia-smi shows $gpus" >&2
  exit 2
fi
[ -n "$data" ] && [ -f "$data.idx" ] || {
  echo "run_tp_scaling.sh: --data PREFIX (an indexed dataset PREFIX.bin/.idx)" >&2; exit 2; }
B=$build/bin
for b in mt-coordinator mt-worker mtctl; do
  [ -x "$B/$b" ] || { echo "run_tp_scaling.sh: no $B/$b (build first: tests/gpu/run.sh)" >&2; exit 2; }
done
py=${MT_PYTHON:-python3}
# The model: bench/engine/sizes.py's size (layers hidden heads seq micro-batch).
read -r layers hidden heads seq mb < <(python3 -c "
import sys; sys.path.insert(0, '$here/../engine'); import sizes
print(*sizes.size('$size'))") || { echo "run_tp_scaling.sh: unknown --size $size" >&2; exit 2; }
[ -n "$micro" ] || micro=$mb
if [ $((heads % tp)) -ne 0 ]; then
  echo "run_tp_scaling.sh: $heads heads do not split over TP=$tp" >&2; exit 2
fi
vocab_multiple=$((128 * tp))
D=$(mktemp -d)
failed=0
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- ours: one coordinator, one worker per GPU ------------------------------------------------
"$B/mt-coordinator" --listen 127.0.0.1:0 --address_file "$D/addr" --state_dir "$D/state" \
    2>"$D/coordinator.log" &
pids=($!)
for _ in $(seq 100); do [ -s "$D/addr" ] && break; sleep 0.1; done
[ -s "$D/addr" ] || { echo "run_tp_scaling.sh: the coordinator did not start ($D)" >&2; exit 1; }
export MT_COORDINATOR=$(cat "$D/addr")
for ((g = 0; g < tp; g++)); do
  "$B/mt-worker" --coordinator "$MT_COORDINATOR" --gpu $g --work-dir "$D/w$g" \
      2>"$D/worker$g.log" &
  pids+=($!)
done
sleep 2
ours() {  # ours NAME TP SP [OVERLAP] -> the job's tokens/s on stdout
  local name=$1 t=$2 sp=$3 overlap=${4:-false}
  # make_vocab_size_divisible_by * t = 128 * N: the same padded vocabulary at every TP.
  cat >"$D/$name.yaml" <<YAML
name: tp-scaling-$name
model: {num_layers: $layers, hidden_size: $hidden, num_attention_heads: $heads, seq_length: $seq, hidden_dropout: 0.0, attention_dropout: 0.0, make_vocab_size_divisible_by: $((vocab_multiple / t))}
parallel: {tp: $t, pp: 1, dp: 1, sequence_parallel: $sp, tp_comm_overlap: $overlap}
training: {micro_batch_size: $micro, global_batch_size: $micro, train_iters: $iters, lr: 6.0e-4, lr_warmup_iters: 10, precision: bf16}
data: {data_path: $data, split: "100,0,0", tokenizer: {vocab_file: /unused.json, merge_file: /unused.txt}}
evaluation: {eval_interval: 0}
logging: {log_interval: 10}
YAML
  local id
  id=$("$B/mtctl" submit "$D/$name.yaml") || return 1
  "$B/mtctl" watch "$id" >/dev/null 2>"$D/watch-$name.log"
  "$B/mtctl" describe "$id" -o json >"$D/$name.json" || return 1
  python3 - "$D/$name.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
state = j.get("state", "")
tps = j.get("progress", {}).get("tokensPerSecond") or j.get("progress", {}).get("tokens_per_second")
if "SUCCEEDED" not in state or not tps:
    sys.exit("job %s: %s" % (state, j.get("events", [])[-1:]))
print(float(tps))
PY
}
mt1=$(ours tp1 1 false) || { failed=1; echo "run_tp_scaling.sh: our TP=1 run failed ($D)" >&2; }
mtn=$(ours "tp$tp" "$tp" false) || { failed=1; echo "run_tp_scaling.sh: our TP=$tp run failed ($D)" >&2; }
mtsp=$(ours "tp${tp}sp" "$tp" true) || { failed=1; echo "run_tp_scaling.sh: our TP=$tp SP run failed ($D)" >&2; }
mtov=$(ours "tp${tp}spov" "$tp" true true) || { failed=1; echo "run_tp_scaling.sh: our TP=$tp SP + tp_comm_overlap run failed ($D)" >&2; }
kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null

# --- the peer: PyTorch at world 1 and N --------------------------------------------------------
peer() {  # peer N -> tokens/s of the group
  local n=$1 p r
  p=$(port)
  local ps=()
  for ((r = 0; r < n; r++)); do
    LD_LIBRARY_PATH=${MT_PEER_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}} "$py" "$here/torch_tp.py" \
        --rank $r --world "$n" --master 127.0.0.1:$p --size "$size" --micro-batch "$micro" \
        --vocab-multiple "$vocab_multiple" >"$D/torch$n.$r.out" 2>"$D/torch$n.$r.err" &
    ps+=($!)
  done
  local rc=0
  for p in "${ps[@]}"; do wait "$p" || rc=1; done
  [ $rc -eq 0 ] || { tail -n 5 "$D/torch$n.0.err" >&2; return 1; }
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens_per_second"])' "$D/torch$n.0.out"
}
pt1=$(peer 1) || { failed=1; echo "run_tp_scaling.sh: the PyTorch world-1 run failed ($D)" >&2; }
ptn=$(peer "$tp") || { failed=1; echo "run_tp_scaling.sh: the PyTorch TP=$tp run failed ($D)" >&2; }
python3 - "${mt1:-0}" "${mtn:-0}" "${mtsp:-0}" "${pt1:-0}" "${ptn:-0}" "$tp" "$size" "$micro" "$seq" "${mtov:-0}" <<'PY'
import sys
m1, mn, msp, p1, pn, n = map(float, sys.argv[1:7])
size, micro, seq = sys.argv[7], sys.argv[8], sys.argv[9]
mov = float(sys.argv[10])
n = int(n)
nan = float("nan")
eff = lambda one, many: many / (n * one) if one > 0 and many > 0 else nan
ratio = lambda a, b: a / b if a > 0 and b > 0 else nan
print("TP scaling, GPT %s, micro-batch %s x %s, bf16 (tokens/s of the job; efficiency = "
      "tok/s(TP=%d) / (%d x tok/s(TP=1)))" % (size, micro, seq, n, n))
print("%-22s %12s %12s %10s" % ("impl", "TP=1 (1 GPU)", "TP=%d" % n, "efficiency"))
print("%-22s %12.0f %12.0f %9.1f%%" % ("mt (service)", m1, mn, 100 * eff(m1, mn)))
print("%-22s %12.0f %12.0f %9.1f%%" % ("mt (service) + SP", m1, msp, 100 * eff(m1, msp)))
print("%-22s %12.0f %12.0f %9.1f%%" % ("mt + SP + tp overlap", m1, mov, 100 * eff(m1, mov)))
print("%-22s %12.0f %12.0f %9.1f%%" % ("pytorch dtensor tp", p1, pn, 100 * eff(p1, pn)))
print("mt / pytorch at TP=1: %.3f" % ratio(m1, p1))
print("mt / pytorch at TP=%d: %.3f (with SP: %.3f, with SP + tp_comm_overlap: %.3f)"
      % (n, ratio(mn, pn), ratio(msp, pn), ratio(mov, pn)))
PY
echo "logs: $D"
exit $failed
