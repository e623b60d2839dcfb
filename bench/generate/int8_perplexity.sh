#!/usr/bin/env bash
# The perplexity change of --quantize int8 (issue #17): trains a GPT-2 124M on Moby Dick with
# mt-train on the GPU, then evaluates its validation split with mt-worker eval in bf16 and fp32,
# with and without int8 weights, and prints the four results (one JSON object per line) last.
#   bench/generate/int8_perplexity.sh BUILD_DIR [ASSET_DIR (default ~/.cache/mt/assets)]
# ITERS (default 150): training steps of 16 x 1,024 tokens. WORK (default a temp dir): where
# the data and the checkpoint go (about 2 GB); removed at the end unless WORK was given.
set -euo pipefail
build=$1
assets=${2:-$HOME/.cache/mt/assets}
work=${WORK:-}
[ -n "$work" ] || { work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; }
mkdir -p "$work"
"$build/bin/mtctl" data preprocess --input "$assets/moby-dick.jsonl" --output-prefix "$work/moby" \
  --vocab-file "$assets/gpt2-vocab.json" --merge-file "$assets/gpt2-merges.txt" --append-eod \
  --workers "$(nproc)" >&2
cat > "$work/job.yaml" <<YAML
name: moby-124m
model: {num_layers: 12, hidden_size: 768, num_attention_heads: 12, seq_length: 1024,
        hidden_dropout: 0.0, attention_dropout: 0.0}
parallel: {tp: 1, pp: 1, dp: 1}
training: {micro_batch_size: 8, global_batch_size: 16, train_iters: ${ITERS:-150}, lr: 6.0e-4,
           lr_warmup_iters: 10, lr_decay_style: cosine, min_lr: 6.0e-5, weight_decay: 0.1,
           precision: bf16}
data:
  data_path: $work/moby_text_document
  split: "949,50,1"
  tokenizer: {vocab_file: $assets/gpt2-vocab.json, merge_file: $assets/gpt2-merges.txt}
evaluation: {eval_interval: 1000, eval_iters: 2}
logging: {log_interval: 20}
checkpoint: {save_dir: $work/ckpt}
YAML
"$build/bin/mt-train" --spec "$work/job.yaml" --device cuda --save "$work/ckpt" >&2
for q in none int8; do
  for d in bf16 fp32; do
    printf 'quantize=%s dtype=%s ' "$q" "$d"
    "$build/bin/mt-worker" eval "$work/ckpt" --data-path "$work/moby_text_document" \
      --split 949,50,1 --all --device cuda --dtype "$d" --quantize "$q" -o json
  done
done
