#!/usr/bin/env bash
# A real Slurm for the course: a controller and two compute nodes, n1 and n2, on this one machine.
#
#   bash scripts/slurm.sh start     install (Debian's slurm-wlm and munge, with apt) where missing, and start
#   bash scripts/slurm.sh status    what runs, and the nodes as Slurm sees them
#   bash scripts/slurm.sh stop      stop every daemon it started, and every job step left; remove its files
#
# Needs root (the daemons, and apt) on Linux. Everything it writes is under $SLURM_HOME (default
# /tmp/ddpcourse-slurm): the configuration, the state, the logs, the nodes' spool directories and pid files.
# Point Slurm's commands at it with:  export SLURM_CONF=$SLURM_HOME/slurm.conf  (start prints this).
# Both nodes are this machine on 127.0.0.1, each slurmd on a port of its own; a job of two nodes gets one
# task per node, as on a cluster, and `srun -N2 ... torchrun --nnodes 2 --rdzv-backend c10d` meets across them.
set -euo pipefail

SLURM_HOME=${SLURM_HOME:-/tmp/ddpcourse-slurm}
CONF=$SLURM_HOME/slurm.conf
NODES=(n1 n2)
say() { printf 'slurm: %s\n' "$*"; }
fail() { printf 'slurm: %s\n' "$*" >&2; exit 1; }

can_run() {
  [ "$(uname -s)" = Linux ] || fail "Slurm needs Linux; on $(uname -s), use a Linux machine or container"
  [ "$(id -u)" = 0 ] || fail "starting Slurm's daemons needs root: run it as root (sudo bash scripts/slurm.sh start)"
}

install() {
  # iproute2: the `ip` that gives the Slurm of each sandbox (exercise 4.6) its nodes' addresses
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
    && command -v ip >/dev/null && return
  command -v apt-get >/dev/null || fail "slurm-wlm, munge or iproute2 is missing and there is no apt-get to install them"
  say "installing slurm-wlm, munge and iproute2 with apt-get"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge iproute2 >/dev/null
}

configure() {
  local host cpus memory port
  host=$(hostname -s)
  cpus=$(nproc)
  memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 4 ))  # MB per node: a quarter each, headroom
  port=$(( 17000 + RANDOM % 2000 ))  # the controller's; the nodes' follow it
  mkdir -p "$SLURM_HOME"/{state,log,spool,run,munge}
  chmod 700 "$SLURM_HOME/munge"
  cat > "$CONF" <<EOF
ClusterName=ddpcourse
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$SLURM_HOME/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$SLURM_HOME/state
SlurmdSpoolDir=$SLURM_HOME/spool/%n
SlurmctldPidFile=$SLURM_HOME/run/slurmctld.pid
SlurmdPidFile=$SLURM_HOME/run/slurmd-%n.pid
SlurmctldLogFile=$SLURM_HOME/log/slurmctld.log
SlurmdLogFile=$SLURM_HOME/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
InactiveLimit=0
KillWait=5
MinJobAge=60
SlurmdTimeout=30
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 1)) CPUs=$cpus RealMemory=$memory State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 2)) CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=course Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
  mkdir -p "${NODES[@]/#/$SLURM_HOME/spool/}"
}

start_munge() {
  local key=$SLURM_HOME/munge/munge.key
  [ -f "$key" ] || { dd if=/dev/urandom bs=1 count=1024 of="$key" status=none; chmod 400 "$key"; }
  munged --key-file="$key" --socket="$SLURM_HOME/munge/munge.socket" --pid-file="$SLURM_HOME/munge/munged.pid" \
         --log-file="$SLURM_HOME/log/munged.log" --seed-file="$SLURM_HOME/munge/munge.seed" --force
}

running() {  # pid files of the daemons that run now
  local file
  for file in "$SLURM_HOME"/run/*.pid "$SLURM_HOME"/munge/munged.pid; do
    [ -f "$file" ] && kill -0 "$(cat "$file")" 2>/dev/null && echo "$file"
  done
  return 0
}

start() {
  can_run
  [ -z "$(running)" ] || { say "already running (bash scripts/slurm.sh stop first to start afresh)"; status; return; }
  install
  configure
  start_munge
  slurmctld -f "$CONF"
  local node
  for node in "${NODES[@]}"; do slurmd -f "$CONF" -N "$node"; done
  export SLURM_CONF=$CONF
  local waited=0
  until [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" = 2 ]; do
    sleep 0.5; waited=$((waited + 1))
    [ $waited -lt 60 ] || { status; fail "the nodes did not come up in 30 s (logs in $SLURM_HOME/log)"; }
  done
  say "two nodes up, n1 and n2, on this machine; for Slurm's commands: export SLURM_CONF=$CONF"
}

status() {
  [ -f "$CONF" ] || { say "not configured (bash scripts/slurm.sh start)"; return 1; }
  local files
  files=$(running)
  [ -n "$files" ] || { say "stopped"; return 1; }
  say "running: $(echo "$files" | xargs -n1 basename | sed 's/\.pid$//' | tr '\n' ' ')"
  SLURM_CONF=$CONF sinfo -N -o '%N %T %c %m' || true
}

stop() {
  [ -d "$SLURM_HOME" ] || { say "nothing to stop"; return; }
  if [ -f "$CONF" ] && [ -n "$(running)" ]; then
    SLURM_CONF=$CONF scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
  fi
  local file pid
  for file in "$SLURM_HOME"/run/slurmd-*.pid "$SLURM_HOME"/run/slurmctld.pid "$SLURM_HOME"/munge/munged.pid; do
    [ -f "$file" ] || continue
    pid=$(cat "$file")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  # job steps a daemon left behind (slurmstepd), started for this cluster's configuration
  pkill -9 -f "slurmstepd.*" 2>/dev/null || true
  rm -rf "$SLURM_HOME"
  say "stopped; $SLURM_HOME removed"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: bash scripts/slurm.sh start|status|stop" >&2; exit 2 ;;
esac
