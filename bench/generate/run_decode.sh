#!/usr/bin/env bash
# The decode benchmark on the GPU machine: decode_bench (ours, bf16 weights and int8 weights)
# and hf_generate.py (transformers' generate, eager) in the same run, bf16, greedy, prompt 128,
# 128 new tokens, at batch 1, 16 and 64 (transformers at 1 and 16); then time to first token
# for a 1,024-token prompt (the whole context: one token follows it). Prints the ratio table
# last; its last two columns are the decode step without and with the CUDA graph (decode_bench
# runs both; the other mt figures are the graph's).
#   bench/generate/run_decode.sh BUILD_DIR [SIZES (default "124m")]
# MT_PYTHON / MT_PEER_LD_LIBRARY_PATH: the python with transformers and its library path (the
# GPU suite sets them before sourcing .device/gpu-env.sh).
set -uo pipefail
build=$1
sizes=${2:-124m}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${MT_PYTHON:-python3}
out=$(mktemp)
status=0
for s in $sizes; do
  timeout 300 "$build/bin/decode_bench" --size "$s" --batches 1,16,64 --prompt 128 --new 128 | tee -a "$out" || status=1
  timeout 300 "$build/bin/decode_bench" --size "$s" --batches 1,16,64 --prompt 128 --new 128 \
    --quantize int8 | tee -a "$out" || status=1
  timeout 60 "$build/bin/decode_bench" --size "$s" --batches 1 --prompt 1024 --new 1 | tee -a "$out" || status=1
  if LD_LIBRARY_PATH=${MT_PEER_LD_LIBRARY_PATH-} "$py" -c "import transformers" 2>/dev/null; then
    LD_LIBRARY_PATH=${MT_PEER_LD_LIBRARY_PATH-} timeout 300 "$py" "$here/hf_generate.py" \
      --size "$s" --batches 1,16 --prompt 128 --new 128 | tee -a "$out"
  else
    echo "hf: no transformers in $py"
  fi
done
echo
echo "size  weights  batch  mt ms/token (whole generate)  hf ms/token  mt/hf speed-up  mt decode step ms  eager step ms  graph step ms"
awk '
  { for (i = 1; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] } }
  $1 == "mt" && v["prompt"] == 128 { k = v["size"] " " v["quantize"] " " v["batch"]
                                     mt[k] = v["total_ms_per_token"]; step[k] = v["ms_per_token"]
                                     eager[k] = v["eager_ms_per_token"]
                                     graph[k] = v["graph_ms_per_token"] }
  $1 == "hf" { hf[v["size"] " " v["batch"]] = v["ms_per_token"] }
  $1 == "mt" && v["prompt"] == 1024 { ttft[v["size"]] = v["ttft_ms"] }
  END { for (s in ttft) printf "%s: time to first token, 1,024-token prompt: %s ms\n", s, ttft[s];
        for (k in mt) { split(k, p, " "); h = p[1] " " p[3]
          printf "%-5s %7s %5s  %26s  %11s  %14s  %17s  %13s  %13s\n", p[1], p[2], p[3], mt[k],
                 (h in hf) ? hf[h] : "-", (h in hf) ? sprintf("%.2fx", hf[h] / mt[k]) : "-",
                 step[k], eager[k], graph[k] } }' "$out" | sort
rm -f "$out"
exit $status
