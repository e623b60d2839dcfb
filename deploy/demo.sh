#!/usr/bin/env bash
# The main job on one machine: starts a coordinator and workers (one per GPU, two CPU slots
# when there is none), preprocesses Moby Dick, submits a small GPT (4 layers x 256 hidden,
# data-parallel over the workers), shows its live progress and the final validation loss and
# perplexity, and ends with a short continuation of a prompt sampled from the trained
# checkpoint (mt-worker generate, on the CPU). Stops everything it started on exit.
# Run deploy/setup.sh first (the README's first command does both).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${MT_BUILD_DIR:-$root/build}/bin
assets=${MT_ASSET_DIR:-$HOME/.cache/mt/assets}
run=$(mktemp -d /tmp/mt-demo.XXXXXX)
say() { printf '\033[1mdemo:\033[0m %s\n' "$*" >&2; }
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  say "stopped; logs in $run"
}
trap cleanup EXIT

"$bin/mt-coordinator" --listen 127.0.0.1:0 --address_file "$run/address" --state_dir "$run/state" 2>"$run/coordinator.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$run/address" ] && break; sleep 0.1; done
[ -s "$run/address" ] || { cat "$run/coordinator.log" >&2; exit 1; }
export MT_COORDINATOR=$(cat "$run/address")
say "coordinator at $MT_COORDINATOR"

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | wc -l || echo 0); fi
if [ "$gpus" -gt 0 ]; then
  for g in $(seq 0 $((gpus - 1))); do
    "$bin/mt-worker" --coordinator "$MT_COORDINATOR" --gpu "$g" 2>"$run/worker-$g.log" & pids+=($!)
  done
  slots=$gpus
else
  cores=$(( $(nproc) / 2 )); [ "$cores" -ge 1 ] || cores=1
  for s in 0 1; do
    "$bin/mt-worker" --coordinator "$MT_COORDINATOR" --gpu -1 --node "$(hostname)" \
      --cpu-cores "$cores" --work-dir "$run/worker-cpu$s" 2>"$run/worker-cpu$s.log" & pids+=($!)
  done
  slots=2
fi
for _ in $(seq 100); do
  n=$("$bin/mtctl" workers -o json 2>/dev/null | grep -c '"state": "WORKER_STATE_IDLE"' || true)
  [ "$n" -ge "$slots" ] && break; sleep 0.1
done
say "workers:"
"$bin/mtctl" workers

say "preprocessing Moby Dick into $run/moby-dick_text_document.{bin,idx}"
"$bin/mtctl" data preprocess --input "$assets/moby-dick.jsonl" --output-prefix "$run/moby-dick" \
  --vocab-file "$assets/gpt2-vocab.json" --merge-file "$assets/gpt2-merges.txt" --append-eod \
  --workers "$(nproc)"

cat > "$run/job.yaml" <<YAML
name: moby-dick-small
model: {num_layers: 4, hidden_size: 256, num_attention_heads: 4, seq_length: 64,
        hidden_dropout: 0.0, attention_dropout: 0.0}
parallel: {tp: 1, pp: 1, dp: auto}
training: {micro_batch_size: 4, global_batch_size: 8, train_iters: ${MT_DEMO_ITERS:-150},
           lr: 2.0e-3, lr_warmup_iters: 15, lr_decay_style: cosine, min_lr: 2.0e-4,
           weight_decay: 0.1}
data:
  data_path: $run/moby-dick_text_document
  split: "949,50,1"
  tokenizer: {vocab_file: $assets/gpt2-vocab.json, merge_file: $assets/gpt2-merges.txt}
evaluation: {eval_interval: 50, eval_iters: 5}
logging: {log_interval: 10}
checkpoint: {save_dir: $run/checkpoints}
YAML
say "plan: the layout and placement this job gets on these workers"
"$bin/mtctl" plan "$run/job.yaml"
job=$("$bin/mtctl" submit "$run/job.yaml")
say "submitted $job; watching it (mtctl watch $job)"
"$bin/mtctl" watch "$job"
"$bin/mtctl" describe "$job" | sed -n '/^events/,$p'
prompt=${MT_DEMO_PROMPT:-"Call me Ishmael. Some years ago"}
say "what it learned: a continuation of \"$prompt\" (mt-worker generate $run/checkpoints, CPU)"
"$bin/mt-worker" generate "$run/checkpoints" --prompt "$prompt" --max-new-tokens 48 \
  --temperature 0.8 --top-k 40 --seed 1 --device cpu
