#!/usr/bin/env bash
# deploy/slurm/mt.sbatch against a real Slurm (slurmctld, two slurmd, munge) on a cluster of
# network namespaces (slurm_cluster.sh). Cases:
#   complete  job mode: a DP=4 tiny GPT over 2 nodes x 2 CPU slots succeeds, its losses are in
#             the batch's output, and nothing is left running
#   cancel    job mode, scancel mid-run: the workers get SIGTERM, the job saves a checkpoint
#             at the step it stopped, everything exits
#   workers   workers mode: a coordinator outside the allocation gets the allocation's
#             workers (two per Slurm node, named after it), trains a job on them, and they
#             deregister on scancel
# Usage: slurm_test.sh BIN_DIR ASSET_DIR REPO_ROOT CASE. Exit 77 (skipped) with the reason
# when root, network namespaces or Slurm are missing.
set -uo pipefail
bin=$1; assets=$2; repo=$3; case=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/slurm/slurm_cluster.sh
source "$here/slurm_cluster.sh"

missing=$(slurm_cluster_missing)
if [ -n "$missing" ]; then echo "SKIPPED: $missing"; exit 77; fi

dir=$(mktemp -d /tmp/mt-slurm-test.XXXXXX)
failed=0
fail() { echo "FAIL: $*" >&2; failed=1; }
cleanup() {
  slurm_cluster_down
  if [ "$failed" -eq 0 ]; then rm -rf "$dir"; else echo "kept $dir for inspection" >&2; fi
}
trap cleanup EXIT

# The mt processes of this test still alive: their command lines name $dir.
mt_leftovers() {
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case "$exe" in "$bin"/mt-*|"$bin"/mtctl) ;; *) continue ;; esac
    grep -q "$dir" < <(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) && echo "${p#/proc/} $exe"
  done
}

# Every process left in a node's namespace other than its slurmd.
node_leftovers() {
  local i p
  for i in 1 2; do
    for p in $(ip netns pids "$(_sc_ns "n$i")"); do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmd ] && continue
      echo "n$i: $p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
    done
  done
}

# Waits until Slurm job $1 has left the queue (at most $2 seconds).
wait_gone() {
  for _ in $(seq $(($2 * 2))); do
    [ -z "$(in_ctl squeue -h -j "$1" 2>/dev/null)" ] && return 0
    sleep 0.5
  done
  return 1
}

# The Slurm job's field $2 (JobState, ExitCode) as slurmctld reports it.
job_field() { in_ctl scontrol show job "$1" -o | tr ' ' '\n' | sed -n "s/^$2=//p"; }

check_nothing_left() {
  local q; q=$(in_ctl squeue -h)
  [ -z "$q" ] || fail "squeue is not empty: $q"
  sleep 1
  local left; left=$(mt_leftovers)
  [ -z "$left" ] || fail "mt processes left running: $left"
  left=$(node_leftovers)
  [ -z "$left" ] || fail "processes left on the nodes: $left"
}

slurm_cluster_up "$dir/slurm" 2 2 || { fail "the Slurm cluster did not come up"; exit 1; }

# The dataset: three chapters of Moby Dick, tokenised with GPT-2's BPE.
mkdir -p "$dir/data" "$dir/out" "$dir/ckpt"
head -n 3 "$assets/moby-dick.jsonl" >"$dir/data/corpus.jsonl"
"$bin/mtctl" data preprocess --input "$dir/data/corpus.jsonl" --output-prefix "$dir/data/corpus" \
  --vocab-file "$assets/gpt2-vocab.json" --merge-file "$assets/gpt2-merges.txt" --append-eod \
  --workers 2 >/dev/null || { fail "mtctl data preprocess"; exit 1; }

# job_yaml NAME ITERS: the tiny GPT, data-parallel over every worker, saving into $dir/ckpt.
job_yaml() {
  cat >"$dir/$1.yaml" <<YAML
name: $1
model: {num_layers: 2, hidden_size: 32, num_attention_heads: 2, seq_length: 16,
        hidden_dropout: 0.0, attention_dropout: 0.0}
parallel: {tp: 1, pp: 1, dp: auto}
training: {micro_batch_size: 2, global_batch_size: 8, train_iters: $2, lr: 3.0e-3,
           lr_warmup_iters: 2, seed: 7}
data:
  data_path: $dir/data/corpus_text_document
  split: "90,10,0"
  tokenizer: {vocab_file: $assets/gpt2-vocab.json, merge_file: $assets/gpt2-merges.txt}
evaluation: {eval_interval: 0}
logging: {log_interval: 1}
checkpoint: {save_dir: $dir/ckpt/$1}
YAML
  echo "$dir/$1.yaml"
}

# sbatch ARGS...: submits mt.sbatch on 2 nodes x 2 tasks from $dir/out; prints the job id.
submit() {
  in_ctl sbatch --parsable --nodes=2 --ntasks-per-node=2 --chdir="$dir/out" \
    --output="$dir/out/mt-%j.out" --export="ALL,MT_BIN_DIR=$bin" \
    "$repo/deploy/slurm/mt.sbatch" "$@"
}

# The last step a running job reported, from the coordinator at $1 with token file $2, over
# TLS verified with the CA $3.
job_step() {
  in_ctl "$bin/mtctl" --coordinator "$1" --token-file "$2" --tls-ca "$3" list -o json 2>/dev/null |
    sed -n 's/.*"step": "\{0,1\}\([0-9]*\).*/\1/p' | sort -n | tail -n 1
}

# The step of the newest checkpoint under $1 (0 when none).
saved_step() {
  find "$1" -maxdepth 1 -type d -name 'iter_*' 2>/dev/null | sed 's/.*iter_0*//' | sort -n |
    tail -n 1 | grep . || echo 0
}

case "$case" in
complete)
  start=$(date +%s)
  id=$(submit "$(job_yaml complete 20)") || { fail "sbatch refused the script"; exit 1; }
  wait_gone "$id" 240 || fail "the allocation $id did not end within 240 s"
  out=$(cat "$dir/out/mt-$id.out")
  echo "$out" | tail -n 30
  state=$(job_field "$id" JobState); code=$(job_field "$id" ExitCode)
  [ "$state" = COMPLETED ] && [ "$code" = 0:0 ] || fail "Slurm job $id: $state, exit $code"
  # Here-strings, not `echo "$out" | grep -q`: grep -q leaves at its first match, bash's echo
  # writes line by line, and under pipefail an echo still writing then fails with SIGPIPE, so
  # a loss found in the first lines read as "no loss" (a failure of the full suite, once).
  grep -q 'SUCCEEDED' <<<"$out" || fail "the output does not say the job SUCCEEDED"
  grep -Eiq 'loss[^0-9]*[0-9]+\.[0-9]+' <<<"$out" || fail "no loss in the output"
  n=$(grep -l 'deregistering' "$dir"/out/mt-"$id"/worker-*.log 2>/dev/null | wc -l)
  [ "$n" -eq 4 ] || fail "$n of 4 workers deregistered (logs in $dir/out/mt-$id)"
  echo "complete: $(($(date +%s) - start)) s from sbatch to the allocation's end"
  check_nothing_left
  ;;
cancel)
  id=$(submit "$(job_yaml cancel 100000)") || { fail "sbatch refused the script"; exit 1; }
  run="$dir/out/mt-$id"
  step=""
  for _ in $(seq 240); do
    if [ -s "$run/token" ] && [ -s "$run/tls/ca.pem" ]; then
      step=$(job_step "$(_sc_addr 1):7070" "$run/token" "$run/tls/ca.pem")
      [ -n "$step" ] && [ "$step" -ge 5 ] && break
    fi
    sleep 0.5
  done
  [ -n "$step" ] && [ "$step" -ge 5 ] || { fail "the job never reached step 5"; cat "$dir/out/mt-$id.out"; exit 1; }
  start=$(date +%s)
  in_ctl scancel "$id"
  wait_gone "$id" 90 || fail "the allocation $id did not end within 90 s of scancel"
  echo "cancel: scancel at step $step; $(($(date +%s) - start)) s until the allocation ended"
  cat "$dir/out/mt-$id.out" | tail -n 20
  state=$(job_field "$id" JobState)
  [ "$state" = CANCELLED ] || fail "Slurm job $id is $state, not CANCELLED"
  n=$(grep -l 'signal 15: deregistering' "$run"/worker-*.log 2>/dev/null | wc -l)
  [ "$n" -eq 4 ] || fail "$n of 4 workers logged SIGTERM (logs in $run)"
  saved=$(saved_step "$dir/ckpt/cancel")
  [ "$saved" -ge "$step" ] || fail "no checkpoint at or after step $step (newest: $saved) in $dir/ckpt/cancel"
  grep -q 'CANCELLED' "$run/job.txt" || fail "the mt job is not CANCELLED: $(cat "$run/job.txt")"
  check_nothing_left
  ;;
workers)
  # A long-lived coordinator outside the allocation (the controller's namespace).
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/token" && chmod 600 "$dir/token"
  coordinator="$(_sc_addr 0):7070"
  # Off loopback the coordinator serves TLS (docs/security.md): a CA and its certificate.
  mkdir -p "$dir/tls" && (cd "$dir/tls" &&
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
      -subj /CN=mt-slurm-test-ca -keyout ca.key -out ca.pem &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=coordinator \
      -keyout server.key -out server.csr &&
    printf 'subjectAltName=IP:%s\n' "$(_sc_addr 0)" >server.ext &&
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
      -extfile server.ext -out server.pem) >"$dir/tls.log" 2>&1 ||
    { fail "openssl: $(cat "$dir/tls.log")"; exit 1; }
  _sc_spawn ctl "$bin/mt-coordinator" --listen=0.0.0.0:7070 --metrics_port=-1 \
    --state_dir="$dir/coordinator" --auth_token_file="$dir/token" \
    --tls_cert="$dir/tls/server.pem" --tls_key="$dir/tls/server.key" \
    --advertise_address="$coordinator" \
    --allowed_root="$dir" --allowed_root="$assets" 2>"$dir/coordinator.log"
  ctl() {
    in_ctl "$bin/mtctl" --coordinator "$coordinator" --token-file "$dir/token" \
      --tls-ca "$dir/tls/ca.pem" "$@"
  }
  id=$(submit --coordinator "$coordinator" --token-file "$dir/token" --tls-ca "$dir/tls/ca.pem") ||
    { fail "sbatch refused the script"; exit 1; }
  # idle_workers WANT SECONDS: waits until WANT workers are IDLE; prints how many are.
  idle_workers() {
    local n=0
    for _ in $(seq $(($2 * 2))); do
      n=$(ctl workers -o json 2>/dev/null | grep -c '"state": "WORKER_STATE_IDLE"')
      [ "$n" -eq "$1" ] && break
      sleep 0.5
    done
    echo "$n"
  }
  n=$(idle_workers 4 60)
  [ "$n" -eq 4 ] || { fail "$n of 4 workers registered"; cat "$dir/out/mt-$id.out"; exit 1; }
  nodes=$(ctl workers -o json | sed -n 's/.*"node": "\([^"]*\)".*/\1/p' | sort | uniq -c |
          awk '{print $2 "=" $1}' | tr '\n' ' ')
  [ "$nodes" = "n1=2 n2=2 " ] || fail "workers per Slurm node: '$nodes', want n1=2 n2=2"
  job=$(ctl submit "$(job_yaml workers 20)") || { fail "mtctl submit"; exit 1; }
  ctl watch "$job" >"$dir/watch.out" 2>/dev/null || fail "$job did not succeed: $(ctl describe "$job")"
  grep -Eiq 'loss[^0-9]*[0-9]+\.[0-9]+' "$dir/watch.out" || fail "no loss in mtctl watch's output"
  in_ctl scancel "$id"
  wait_gone "$id" 90 || fail "the allocation $id did not end within 90 s of scancel"
  n=$(idle_workers 0 10)
  [ "$n" -eq 0 ] || fail "$n workers still IDLE after scancel (they should have deregistered)"
  kill -TERM "${_sc_pids[-1]}"; wait "${_sc_pids[-1]}"
  check_nothing_left
  ;;
*)
  echo "unknown case '$case' (complete, cancel, workers)" >&2; exit 2 ;;
esac
[ "$failed" -eq 0 ] && echo "PASS: $case"
exit "$failed"
