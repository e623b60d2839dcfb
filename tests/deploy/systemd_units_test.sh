#!/usr/bin/env bash
# deploy/systemd's units through systemd's own checks: `systemd-analyze verify` must print
# nothing (an unknown key, a bad value or a missing executable is only a warning to systemd, a
# failure here), and `systemd-analyze security --offline` must rate each unit's exposure at or
# below its limit (the hardening stays in place). ExecStart points at this build's binaries so
# that verify can resolve them.
# Usage: systemd_units_test.sh BIN_DIR REPO_ROOT. Exit 77 (skipped) without systemd-analyze.
set -uo pipefail
bin=$1; repo=$2
command -v systemd-analyze >/dev/null || { echo "SKIPPED: systemd-analyze is not installed"; exit 77; }
dir=$(mktemp -d /tmp/mt-systemd-test.XXXXXX)
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL: $*" >&2; failed=1; }

for unit in mt-coordinator.service mt-worker@.service; do
  src="$repo/deploy/systemd/$unit"
  [ -f "$src" ] || { fail "missing $src"; continue; }
  grep -q '^ExecStart=/usr/local/bin/' "$src" || fail "$unit: ExecStart is not under /usr/local/bin"
  sed "s#/usr/local/bin/#$bin/#" "$src" >"$dir/$unit"
done

# unit (an instance for the template), the highest exposure accepted (systemd's 0..10 scale)
for check in "mt-coordinator.service 2.0" "mt-worker@0.service 3.0"; do
  read -r unit limit <<<"$check"
  out=$(cd "$dir" && systemd-analyze verify --man=no "$unit" 2>&1); rc=$?
  [ "$rc" -eq 0 ] && [ -z "$out" ] || fail "systemd-analyze verify $unit (exit $rc): $out"
  level=$(cd "$dir" && systemd-analyze security --offline=yes "$unit" 2>&1 |
          sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
  [ -n "$level" ] || { fail "systemd-analyze security $unit printed no exposure level"; continue; }
  awk -v l="$level" -v m="$limit" 'BEGIN { exit !(l <= m) }' ||
    fail "$unit: exposure $level is above $limit (systemd-analyze security --offline=yes)"
  echo "$unit: exposure $level (limit $limit)"
done

# Settings the deployment guide relies on.
want() { grep -q "^$2" "$repo/deploy/systemd/$1" || fail "$1 lacks $2"; }
want mt-coordinator.service 'StateDirectory=mt-coordinator'
want mt-coordinator.service 'LoadCredential=tokens:/etc/mt/tokens'
want mt-coordinator.service 'Restart=on-failure'
want mt-worker@.service 'KillMode=mixed'
want mt-worker@.service 'LoadCredential=token:/etc/mt/token'
grep -q -- '--gpu=%i' "$repo/deploy/systemd/mt-worker@.service" || fail "mt-worker@: --gpu is not %i"
[ "$failed" -eq 0 ] && echo PASS
exit "$failed"
