#!/usr/bin/env bash
# `mtctl data preprocess --workers 1` against js-tiktoken's gpt2 encoding in one Node process,
# on the same corpus in the same run; then --workers 1,2,... for scaling. Prints both rates and
# their ratio (target: mtctl >= 3x). See bench/README.md.
#
#   bench/preprocess_vs_tiktoken.sh [--mtctl PATH] [--input FILE.jsonl] [--repeat N]
#                                   [--runs N] [--workers "1 2"] [--record]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
assets=${MT_ASSET_DIR:-$HOME/.cache/mt/assets}
mtctl=${MTCTL:-$root/build/bin/mtctl}
input=$assets/sotu.jsonl
repeat=1          # copies of the input for the head-to-head
scale_repeat=12   # copies for the scaling runs (~130 MB: long enough for warm caches)
runs=3            # each measurement is the median of this many runs, mtctl and Node interleaved
workers_list="1 2"
record=0

while [ $# -gt 0 ]; do
  case $1 in
    --mtctl) mtctl=$2; shift 2 ;;
    --input) input=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --scale-repeat) scale_repeat=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --workers) workers_list=$2; shift 2 ;;
    --record) record=1; shift ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

for f in "$mtctl" "$input" "$assets/gpt2-vocab.json" "$assets/gpt2-merges.txt" \
         "$assets/npm/js-tiktoken-1.0.21/package.json"; do
  [ -e "$f" ] || { echo "missing $f (build mtctl; run deploy/setup.sh)" >&2; exit 3; }
done
command -v node >/dev/null || { echo "node is required" >&2; exit 3; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
corpus=$tmp/corpus.jsonl
for _ in $(seq "$repeat"); do cat "$input"; done > "$corpus"
big=$tmp/big.jsonl
for _ in $(seq "$scale_repeat"); do cat "$input"; done > "$big"

now() { date +%s.%N; }
# json FILE FIELD: a top-level number of a JSON document.
json() { node -e 'const o=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));console.log(o[process.argv[2]])' "$1" "$2"; }
median() { tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
calc() { awk "BEGIN {printf \"$1\", $2}"; }

run_mtctl() {  # corpus workers [tag] -> $tmp/m[tag].json ; prints process wall seconds
  local t0 t1
  t0=$(now)
  "$mtctl" data preprocess --input "$1" --output-prefix "$tmp/out${3:-}" --vocab-file \
    "$assets/gpt2-vocab.json" --merge-file "$assets/gpt2-merges.txt" --workers "$2" \
    --quiet -o json > "$tmp/m${3:-}.json"
  t1=$(now)
  calc "%.4f" "$t1 - $t0"
}
run_node() {  # corpus -> $tmp/n.json ; prints process wall seconds
  local t0 t1
  t0=$(now)
  node "$root/bench/tiktoken_encode.js" "$assets" "$1" > "$tmp/n.json"
  t1=$(now)
  calc "%.4f" "$t1 - $t0"
}

bytes=$(stat -c %s "$corpus")
echo "corpus     $(basename "$input") x$repeat: $bytes bytes"
echo "machine    $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"

m_core=() m_wall=() n_core=() n_wall=()
for i in $(seq "$runs"); do
  m_wall+=("$(run_mtctl "$corpus" 1)"); m_core+=("$(json "$tmp/m.json" seconds)")
  n_wall+=("$(run_node "$corpus")"); n_core+=("$(json "$tmp/n.json" encode_seconds)")
done
m_tokens=$(json "$tmp/m.json" tokens)
n_tokens=$(json "$tmp/n.json" tokens)
mc=$(echo "${m_core[*]}" | median); mw=$(echo "${m_wall[*]}" | median)
nc=$(echo "${n_core[*]}" | median); nw=$(echo "${n_wall[*]}" | median)

same="identical"
[ "$m_tokens" = "$n_tokens" ] || same="DIFFERENT ($m_tokens vs $n_tokens)"
m_rate=$(calc "%.0f" "$m_tokens / $mc"); n_rate=$(calc "%.0f" "$n_tokens / $nc")
m_wrate=$(calc "%.0f" "$m_tokens / $mw"); n_wrate=$(calc "%.0f" "$n_tokens / $nw")
ratio=$(calc "%.1f" "$m_rate / $n_rate"); wratio=$(calc "%.1f" "$m_wrate / $n_wrate")

report=$tmp/report.txt
{
  echo "tokens     $m_tokens (mtctl) / $n_tokens (js-tiktoken): $same"
  echo "median of $runs runs, one thread each:"
  printf '  %-44s %9.3f s  %12s tokens/s\n' \
    "mtctl data preprocess --workers 1 (core)" "$mc" "$m_rate" \
    "js-tiktoken 1.0.21 gpt2 encode (core)" "$nc" "$n_rate" \
    "mtctl, whole process" "$mw" "$m_wrate" \
    "node, whole process" "$nw" "$n_wrate"
  echo "ratio      ${ratio}x core, ${wratio}x whole process (target >= 3x)"
  echo "           core = mtctl's Preprocess() (read, JSON, UTF-8 check, BPE, write .bin/.idx,"
  echo "           fsync) vs js-tiktoken's encode loop alone (file read and JSON.parse excluded);"
  echo "           whole process = both include start-up, vocabulary load and file read."
  echo "scaling    mtctl data preprocess on $(basename "$input") x$scale_repeat ($(stat -c %s "$big") bytes), median of $runs:"
  base=""
  for w in $workers_list; do
    ts=()
    for i in $(seq "$runs"); do run_mtctl "$big" "$w" > /dev/null; ts+=("$(json "$tmp/m.json" seconds)"); done
    s=$(echo "${ts[*]}" | median)
    rate=$(calc "%.0f" "$(json "$tmp/m.json" tokens) / $s")
    [ -n "$base" ] || base=$rate
    printf '  --workers %-3s %8.3f s  %12s tokens/s  %5sx\n' "$w" "$s" "$rate" "$(calc "%.2f" "$rate / $base")"
  done
  # Control: what the machine gives right now. Two independent --workers 1 processes at once
  # take as long as one alone when two cores are free, twice as long when only one is.
  alone=() pair=()
  for i in $(seq "$runs"); do
    alone+=("$(run_mtctl "$big" 1 a)")
    t0=$(now)
    run_mtctl "$big" 1 b > /dev/null & run_mtctl "$big" 1 c > /dev/null & wait
    pair+=("$(calc "%.4f" "$(now) - $t0")")
  done
  a=$(echo "${alone[*]}" | median); p=$(echo "${pair[*]}" | median)
  printf 'control    one --workers 1 process alone %.3f s, two at once %.3f s: %s cores free for us\n' \
    "$a" "$p" "$(calc "%.2f" "2 * $a / $p")"
} | tee "$report"

if [ "$record" = 1 ]; then
  results=$root/bench/RESULTS.md
  entry=$tmp/entry.md
  {
    echo "### $(date -u)"
    echo
    echo "Machine: $(uname -srm), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load at start $(cut -d' ' -f1-3 /proc/loadavg); node $(node --version); $("$mtctl" --version | head -1)."
    echo
    echo "Command: \`bench/preprocess_vs_tiktoken.sh --input $(basename "$input") --repeat $repeat --scale-repeat $scale_repeat --runs $runs --workers \"$workers_list\"\`"
    echo
    echo '```'
    echo "corpus     $(basename "$input") x$repeat: $bytes bytes"
    cat "$report"
    echo '```'
    echo
  } > "$entry"
  # Insert at the end of this benchmark's section (creating the file or section if needed).
  node - "$results" "$entry" <<'EOF'
const fs = require('fs');
const [file, entryFile] = process.argv.slice(2);
const section = '## preprocess_vs_tiktoken: mtctl data preprocess vs js-tiktoken';
let text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '# Benchmark results\n\n';
const entry = fs.readFileSync(entryFile, 'utf8');
let at = text.indexOf(section);
if (at < 0) {
  if (!text.endsWith('\n\n')) text += text.endsWith('\n') ? '\n' : '\n\n';
  text += section + '\n\nTokens/s of `mtctl data preprocess --workers 1` against js-tiktoken\'s gpt2 ' +
          'encoding in one Node process, same corpus, same run (bench/preprocess_vs_tiktoken.sh, ' +
          'bench/README.md). Target: ratio >= 3x.\n\n';
  at = text.indexOf(section);
}
const next = text.indexOf('\n## ', at + section.length);
const end = next < 0 ? text.length : next + 1;
text = text.slice(0, end) + (text.slice(0, end).endsWith('\n\n') ? '' : '\n') + entry + text.slice(end);
fs.writeFileSync(file, text);
EOF
  echo "recorded in $results"
fi
