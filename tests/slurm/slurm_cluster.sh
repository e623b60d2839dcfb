# shellcheck shell=bash
# A real Slurm cluster of network namespaces, for tests/slurm (sourced, not run).
#
#   slurm_cluster_up DIR NODES CPUS   munged, slurmctld and one slurmd per node; returns when
#                                     every node is idle (or fails after 60 s)
#   in_ctl CMD...                     runs CMD where the Slurm clients reach slurmctld
#   slurm_cluster_down                stops every daemon it started, removes its namespaces
#
# Layout: a hub namespace holds a bridge; slurmctld runs in namespace "ctl" (10.R.S.1), node i
# in namespace "n<i>" (10.R.S.(i+1)) with its own loopback, veth and host name (a UTS namespace
# and /etc/netns/NS/hosts, so that the node's name resolves to its own address, as on a real
# host). Every address lives only inside the namespaces created here. munged listens on a
# socket in DIR; slurm.conf, state and spool directories are in DIR; /etc/slurm is not read
# (SLURM_CONF points at DIR/slurm.conf). Needs root, `ip netns`, unshare, munged, slurmctld,
# slurmd. Not thread-safe: one cluster per shell.

_sc_prefix=""; _sc_dir=""; _sc_nodes=0; _sc_pids=()

_sc_ns() { echo "${_sc_prefix}-$1"; }

# The missing piece, or nothing when the cluster can be built here.
slurm_cluster_missing() {
  [ "$(id -u)" -eq 0 ] || { echo "not root (network namespaces need root)"; return; }
  local b
  for b in ip unshare nsenter munged slurmctld slurmd sbatch squeue scancel scontrol; do
    command -v "$b" >/dev/null 2>&1 ||
      { echo "$b is not installed (deploy/setup.sh installs slurmctld slurmd munge)"; return; }
  done
  local probe="mtsp$$"
  ip netns add "$probe" 2>/dev/null || { echo "cannot create network namespaces"; return; }
  ip netns del "$probe"
}

_sc_addr() { echo "10.$_sc_net.$(($1 + 1))"; }  # 0 = ctl, i = node i

_sc_netns() {
  ip netns add "$(_sc_ns hub)" || return 1
  ip -n "$(_sc_ns hub)" link add br0 type bridge && ip -n "$(_sc_ns hub)" link set br0 up
  ip -n "$(_sc_ns hub)" link set lo up
  local i name ns hosts
  hosts="127.0.0.1 localhost"$'\n'"$(_sc_addr 0) ctl"
  for i in $(seq 1 "$_sc_nodes"); do hosts+=$'\n'"$(_sc_addr "$i") n$i"; done
  for i in $(seq 0 "$_sc_nodes"); do
    name=n$i; [ "$i" -eq 0 ] && name=ctl
    ns=$(_sc_ns "$name")
    ip netns add "$ns" || return 1
    mkdir -p "/etc/netns/$ns" && printf '%s\n' "$hosts" >"/etc/netns/$ns/hosts"
    ip link add "v$i-$_sc_prefix" netns "$ns" type veth peer name "p$i" netns "$(_sc_ns hub)" ||
      return 1
    ip -n "$ns" link set "v$i-$_sc_prefix" name eth0
    ip -n "$(_sc_ns hub)" link set "p$i" master br0 up
    ip -n "$ns" addr add "$(_sc_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up
  done
}

# Runs CMD in namespace NS with host name NAME (a UTS namespace of its own), in the background;
# appends its pid.
# nsenter rather than `ip netns exec`: the latter remounts /sys, which hides the cgroup mounts
# slurmd needs; the node's /etc/hosts is bind-mounted in a mount namespace of its own instead.
_sc_in() {
  local name=$1; shift
  ${_sc_exec:-} nsenter --net="/run/netns/$(_sc_ns "$name")" unshare --uts --mount sh -c \
    'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"' \
    "$name" "/etc/netns/$(_sc_ns "$name")/hosts" "$@"
}
# The pid appended is the daemon's own (the background subshell execs it). Note that a
# background process of a script ignores SIGINT: stop it with SIGTERM.
_sc_spawn() {
  (_sc_exec="exec"; _sc_in "$@") &
  _sc_pids+=($!)
}

_sc_conf() {
  local d=$_sc_dir cpus=$1 i names=""
  for i in $(seq 1 "$_sc_nodes"); do names+="${names:+,}n$i"; done
  {
    echo "ClusterName=mttest"
    echo "SlurmctldHost=ctl($(_sc_addr 0))"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$d/munge/munge.sock"
    echo "CredType=cred/munge"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "StateSaveLocation=$d/ctld"
    echo "SlurmdSpoolDir=$d/spool/%n"
    echo "SlurmctldPidFile=$d/slurmctld.pid"
    echo "SlurmdPidFile=$d/slurmd-%n.pid"
    echo "SlurmctldLogFile=$d/slurmctld.log"
    echo "SlurmdLogFile=$d/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SwitchType=switch/none"
    echo "MpiDefault=none"
    echo "SchedulerType=sched/backfill"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "ReturnToService=2"
    echo "JobCompType=jobcomp/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "KillWait=30"
    echo "SlurmdTimeout=60"
    echo "InactiveLimit=0"
    for i in $(seq 1 "$_sc_nodes"); do
      echo "NodeName=n$i NodeAddr=$(_sc_addr "$i") CPUs=$cpus State=UNKNOWN"
    done
    echo "PartitionName=test Nodes=$names Default=YES MaxTime=INFINITE State=UP"
  } >"$d/slurm.conf"
}

in_ctl() { _sc_in ctl "$@"; }

slurm_cluster_up() {
  _sc_dir=$1; _sc_nodes=$2
  local cpus=$3 i
  _sc_prefix="mts$$"
  _sc_net="$((200 + $$ % 50)).$(($$ / 50 % 250))"
  mkdir -p "$_sc_dir/munge" "$_sc_dir/ctld" && chmod 700 "$_sc_dir/munge" || return 1
  for i in $(seq 1 "$_sc_nodes"); do mkdir -p "$_sc_dir/spool/n$i"; done
  export SLURM_CONF=$_sc_dir/slurm.conf
  _sc_conf "$cpus"
  _sc_netns || { echo "slurm_cluster: creating the namespaces failed" >&2; return 1; }
  (umask 077 && head -c 1024 /dev/urandom >"$_sc_dir/munge/munge.key")
  munged --foreground --force --socket="$_sc_dir/munge/munge.sock" \
    --key-file="$_sc_dir/munge/munge.key" --pid-file="$_sc_dir/munge/munged.pid" \
    --seed-file="$_sc_dir/munge/seed" --log-file="$_sc_dir/munge/munged.log" \
    2>"$_sc_dir/munge/munged.out" &
  _sc_pids+=($!)
  _sc_spawn ctl slurmctld -D -i -f "$SLURM_CONF" >"$_sc_dir/slurmctld.out" 2>&1
  for i in $(seq 1 "$_sc_nodes"); do
    _sc_spawn "n$i" slurmd -D -N "n$i" -f "$SLURM_CONF" >"$_sc_dir/slurmd-n$i.out" 2>&1
  done
  local idle=0
  for _ in $(seq 120); do
    idle=$(in_ctl sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle$' || true)
    [ "$idle" -ge "$_sc_nodes" ] && return 0
    sleep 0.5
  done
  echo "slurm_cluster: $idle of $_sc_nodes nodes idle after 60 s; logs in $_sc_dir" >&2
  in_ctl sinfo -N -l >&2
  return 1
}

slurm_cluster_down() {
  local p i
  for ((i = ${#_sc_pids[@]} - 1; i >= 0; i--)); do
    p=${_sc_pids[$i]}
    # the daemon is the child of unshare (or the process itself for munged)
    pkill -TERM -P "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null
  done
  for p in "${_sc_pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    pkill -KILL -P "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  _sc_pids=()
  [ -n "$_sc_prefix" ] || return 0
  for i in $(seq 0 "$_sc_nodes"); do
    local name=n$i; [ "$i" -eq 0 ] && name=ctl
    ip netns del "$(_sc_ns "$name")" 2>/dev/null
    rm -rf "/etc/netns/$(_sc_ns "$name")"
  done
  ip netns del "$(_sc_ns hub)" 2>/dev/null
  return 0
}
