#!/bin/bash
# The chaos soak (README.md): runs mt-chaos-soak and, whatever way it ends, removes what it
# leaves behind: the processes inside its network namespaces, the namespaces (mtchaos<PID>-*)
# and its checkpoint tmpfs (source mt-chaos-<PID>). Also removes those of earlier runs whose
# process is gone (a run killed with SIGKILL).
#   tests/chaos/run.sh [--build-dir DIR] [mt-chaos-soak flags: --duration 1h --seed N ...]
# Exit codes: mt-chaos-soak's (0 held, 1 violation, 2 bad flag, 77 skipped).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build"
if [ "${1:-}" = "--build-dir" ]; then
  build=$2
  shift 2
fi
soak="$build/tests/mt-chaos-soak"
if [ ! -x "$soak" ]; then
  echo "run.sh: $soak not found: build it first (ninja -C $build mt-chaos-soak)" >&2
  exit 2
fi
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "run.sh: SKIPPED: the chaos soak needs root (network namespaces, a tmpfs mount) and iproute2" >&2
  exit 77
fi

# Removes the namespaces, processes and mount of run PID.
remove_run() {
  local pid=$1 ns
  for ns in $(ip netns list | awk '{print $1}' | grep "^mtchaos$pid-"); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  findmnt -rn -S "mt-chaos-$pid" -o TARGET 2>/dev/null | xargs -r -n1 umount -l 2>/dev/null
}

# Earlier runs killed before they could clean up.
for ns in $(ip netns list | awk '{print $1}' | sed -n 's/^mtchaos\([0-9]*\)-.*/\1/p' | sort -u); do
  kill -0 "$ns" 2>/dev/null || remove_run "$ns"
done
for src in $(findmnt -rn -t tmpfs -o SOURCE | sed -n 's/^mt-chaos-\([0-9]*\)$/\1/p' | sort -u); do
  kill -0 "$src" 2>/dev/null || remove_run "$src"
done

child=
on_exit() {
  if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
    kill -TERM "$child" 2>/dev/null
    for _ in $(seq 60); do kill -0 "$child" 2>/dev/null || break; sleep 1; done
    kill -KILL "$child" 2>/dev/null
  fi
  [ -n "$child" ] && remove_run "$child"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

"$soak" "$@" &
child=$!
wait "$child"
status=$?
remove_run "$child"
child=
exit $status
