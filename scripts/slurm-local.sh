#!/usr/bin/env bash
# A local Slurm cluster on one machine, for Weave's Slurm backend (issue #55): munge, one
# slurmctld and one slurmd per node, sealed in private network namespaces (nothing it starts
# can reach the network). It is a miniature cluster as the Ray script's is: each node is a
# network namespace of its own on its own CPU set (the training node t0 on the last CPU, the
# rollout nodes on the others), all joined by a switch (a bridge in the sealed namespace, where
# slurmctld runs); with WEAVE_SLURM_LINK_MBIT the training node's port is limited to that many
# Mbit/s both ways (tc tbf), so every byte between the pools crosses a slow inter-pool link.
#
#   scripts/slurm-local.sh check            can namespaces be made and is Slurm installed? (exit 77: no)
#   scripts/slurm-local.sh up               munge + slurmctld + slurmd on t0 (training), r0.. (rollout)
#   scripts/slurm-local.sh exec CMD [ARG]   run CMD in the switch's namespace with SLURM_CONF set
#                                           (sbatch, squeue, scontrol, and weave serve all run there)
#   scripts/slurm-local.sh kill-node NODE   SIGKILL every process of one node (its slurmd and its
#                                           jobs' processes): a node failure
#   scripts/slurm-local.sh restart-controller  stop slurmctld (SIGTERM: it saves its state) and start
#                                           it again from its state files, jobs kept
#   scripts/slurm-local.sh serve-ip         the switch's address (where weave serve listens for the nodes)
#   scripts/slurm-local.sh down             stop everything, remove the namespaces and the state dir
#   scripts/slurm-local.sh selftest         up, check what the Slurm backend relies on, down
#
# Settings (environment): WEAVE_SLURM_NETNS (namespace name, default weave-slurm), WEAVE_SLURM_DIR
# (state, logs, spool; default /tmp/weave-slurm-$WEAVE_SLURM_NETNS), WEAVE_SLURM_ROLLOUT (rollout
# node count, default 2), WEAVE_SLURM_LINK_MBIT (the inter-pool link, unlimited when unset).
# Addresses: slurmctld 10.219.0.1, t0 10.219.0.2, r<i> 10.219.0.(3+i). Each slurmd is started
# as its node (`slurmd -N`), so every node shares this machine's host name; a job finds its node
# in SLURMD_NODENAME. Notes from trying it (Slurm 22.05, Debian): `%n` in the slurmd paths
# keeps the nodes' files apart; proctrack/linuxproc and task/none need no cgroups; munge's
# socket directory must be mode 755; slurmd is started with `nsenter --net=` (`ip netns exec`
# remounts /sys, and slurmd checks the cgroup file system there).
set -euo pipefail

NS=${WEAVE_SLURM_NETNS:-weave-slurm}
DIR=${WEAVE_SLURM_DIR:-/tmp/weave-slurm-$NS}
ROLLOUT=${WEAVE_SLURM_ROLLOUT:-2}
LINK_MBIT=${WEAVE_SLURM_LINK_MBIT:-}
NET=10.219.0
CTL=$NET.1
NIC=wv0

die() { echo "slurm-local: $*" >&2; exit 1; }

in_ns() { ip netns exec "$NS" "$@"; }

node_ns() { echo "$NS-$1"; }

nodes() { echo t0; seq -f 'r%g' 0 $((ROLLOUT - 1)); }

# node_ip and node_cpus: the miniature cluster's addresses and CPU sets.
# shellcheck source=lib/nodes.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/nodes.sh"

check() {
  local tool
  for tool in slurmctld slurmd munged sbatch; do
    command -v "$tool" >/dev/null 2>&1 \
      || { echo "slurm-local: SKIP: $tool is not installed (apt-get install slurmctld slurmd slurm-client munge)" >&2; exit 77; }
  done
  for tool in ip tc taskset; do
    command -v "$tool" >/dev/null 2>&1 || { echo "slurm-local: SKIP: $tool is not installed" >&2; exit 77; }
  done
  can_make_namespace slurm-local
}

network_up() {
  ip netns list | grep -qw "^$NS" && die "namespace $NS exists already (run: $0 down)"
  ip netns add "$NS"
  in_ns ip link set lo up
  in_ns ip link add br0 type bridge
  in_ns ip addr add "$CTL/24" dev br0
  in_ns ip link set br0 up
  local node
  for node in $(nodes); do
    node_on_switch "$node"
  done
  [ -z "$LINK_MBIT" ] || shape_training_link "$LINK_MBIT"
}

munge_up() {
  mkdir -p "$DIR/munge"
  chmod 755 "$DIR/munge"
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$DIR/munge/munge.key"
  munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/logs/munged.log" --seed-file="$DIR/munge/seed" \
    || die "munged failed to start (log: $DIR/logs/munged.log)"
}

write_conf() {
  local node features
  {
    echo "ClusterName=weave"
    echo "SlurmctldHost=$(hostname -s)($CTL)"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$DIR/munge/munge.socket"
    echo "CredType=cred/munge"
    echo "StateSaveLocation=$DIR/ctld"
    echo "SlurmctldPidFile=$DIR/ctld/slurmctld.pid"
    echo "SlurmctldLogFile=$DIR/logs/slurmctld.log"
    echo "SlurmdSpoolDir=$DIR/d/%n"
    echo "SlurmdPidFile=$DIR/d/%n.pid"
    echo "SlurmdLogFile=$DIR/logs/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "MpiDefault=none"
    echo "MailProg=/bin/true"
    echo "SchedulerType=sched/backfill"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "JobCompType=jobcomp/none"
    echo "AccountingStorageType=accounting_storage/none"
    # A node that stopped answering is in service again when it comes back; one an operator (or
    # Weave) set DOWN stays down. A job on a node that fails is not requeued by Slurm: Weave
    # places it again (on other nodes) and launches a new Slurm job.
    echo "ReturnToService=1"
    echo "JobRequeue=0"
    echo "SlurmdTimeout=10"
    echo "InactiveLimit=0"
    echo "KillWait=2"
    for node in $(nodes); do
      if [ "$node" = t0 ]; then features=training; else features=rollout; fi
      # Co-executed jobs share a node: up to 8 jobs per CPU.
      echo "NodeName=$node NodeAddr=$(node_ip "$node") CPUs=1 Features=$features State=UNKNOWN"
    done
    echo "PartitionName=weave Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8"
  } >"$DIR/slurm.conf"
}

controller_up() {
  in_ns slurmctld -i -f "$DIR/slurm.conf" >>"$DIR/logs/slurmctld.out" 2>&1 \
    || { cat "$DIR/logs/slurmctld.out" "$DIR/logs/slurmctld.log" >&2 2>/dev/null; die "slurmctld failed to start"; }
}

# The controller stopped as an operator stops it (it writes its state) and started again from
# that state: the jobs it had are still its jobs.
restart_controller() {
  local pid
  pid=$(cat "$DIR/ctld/slurmctld.pid" 2>/dev/null) || die "no slurmctld pid file in $DIR/ctld"
  kill -TERM "$pid"
  for _ in $(seq 1 80); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  ! kill -0 "$pid" 2>/dev/null || die "slurmctld ($pid) did not stop within 20 s"
  controller_up
  for _ in $(seq 1 80); do sctl squeue -h >/dev/null 2>&1 && { echo "slurm-local: slurmctld restarted"; return 0; }; sleep 0.25; done
  die "slurmctld did not answer within 20 s of its restart"
}

daemons_up() {
  export SLURM_CONF="$DIR/slurm.conf"
  mkdir -p "$DIR/ctld" "$DIR/d"
  controller_up
  local node
  for node in $(nodes); do
    mkdir -p "$DIR/d/$node"
    # nsenter, not `ip netns exec`, which remounts /sys and hides the cgroup file system slurmd checks.
    nsenter --net="/run/netns/$(node_ns "$node")" env GLOO_SOCKET_IFNAME="$NIC" taskset -c "$(node_cpus "$node")" \
      slurmd -f "$SLURM_CONF" -N "$node" >"$DIR/logs/slurmd-$node.out" 2>&1 \
      || { cat "$DIR/logs/slurmd-$node.out" >&2; die "slurmd on $node failed to start"; }
  done
}

idle_nodes() {
  in_ns env SLURM_CONF="$DIR/slurm.conf" sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle" {n++} END {print n + 0}'
}

up() {
  check
  rm -rf "$DIR"
  mkdir -p "$DIR/logs"
  network_up
  munge_up
  write_conf
  daemons_up
  local want=$((ROLLOUT + 1))
  for _ in $(seq 1 60); do
    if [ "$(idle_nodes)" = "$want" ]; then
      echo "slurm-local: up in namespace $NS: slurmctld $CTL, $want nodes (t0 + r0..r$((ROLLOUT - 1)))${LINK_MBIT:+, inter-pool link $LINK_MBIT Mbit/s}; SLURM_CONF=$DIR/slurm.conf"
      return 0
    fi
    sleep 0.5
  done
  in_ns env SLURM_CONF="$DIR/slurm.conf" sinfo -N >&2 || true
  die "the nodes did not come up (logs in $DIR/logs)"
}

kill_node() {
  local node=$1 pids
  node_ip "$node" >/dev/null
  pids=$(ip netns pids "$(node_ns "$node")")
  [ -n "$pids" ] || die "no processes found on node $node"
  kill -9 $pids
  echo "slurm-local: killed node $node: $(echo $pids | wc -w) processes"
}

# sctl CMD...: a Slurm client command against this cluster.
sctl() { in_ns env SLURM_CONF="$DIR/slurm.conf" "$@"; }

# wait_for SECONDS DESCRIPTION CMD...: until CMD succeeds, or fail naming DESCRIPTION.
wait_for() {
  local limit=$1 what=$2; shift 2
  for _ in $(seq 1 $((limit * 4))); do
    if "$@"; then return 0; fi
    sleep 0.25
  done
  die "selftest: $what (not within $limit s)"
}

job_state() { sctl scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
node_state() { sctl sinfo -h -N -n "$1" -o '%T' 2>/dev/null | head -1; }
state_is() { [ "$(job_state "$1")" = "$2" ]; }
node_is() { case $(node_state "$1") in $2) return 0 ;; *) return 1 ;; esac; }

# What Weave's Slurm backend relies on, checked on a cluster it brings up and takes down: a job
# pinned with --nodelist runs in that node's namespace and CPU set; two jobs share a node at
# once; a node set DOWN ends the jobs on it without requeueing them and stays down until
# resumed; a node whose processes die is marked DOWN by itself.
selftest() {
  trap down EXIT
  up
  local out="$DIR/selftest" a b c
  mkdir -p "$out"
  a=$(sctl sbatch --parsable --nodelist=r0 -o "$out/a" --wrap \
    'echo "$SLURMD_NODENAME $(ip -o -4 addr show wv0 | awk "{print \$4}") $(taskset -pc $$ | sed "s/.*: //")"; sleep 4')
  b=$(sctl sbatch --parsable --nodelist=r0 -o /dev/null --wrap 'sleep 4')
  wait_for 20 "two jobs running on r0 at once" eval 'state_is "$a" RUNNING && state_is "$b" RUNNING'
  wait_for 20 "the pinned job completed" state_is "$a" COMPLETED
  read -r name addr cpus <"$out/a"
  [ "$name $addr" = "r0 $(node_ip r0)/24" ] || die "selftest: the pinned job ran as '$name $addr', not r0 at $(node_ip r0)"
  [ "$cpus" = "$(node_cpus r0)" ] || die "selftest: the pinned job had CPUs $cpus, not r0's $(node_cpus r0)"
  c=$(sctl sbatch --parsable --nodelist=r1 -o /dev/null --wrap 'sleep 60')
  wait_for 20 "a job running on r1" state_is "$c" RUNNING
  sctl scontrol update nodename=r1 state=down reason=weave-selftest
  wait_for 20 "the job on a downed node ended, not requeued" eval 'case $(job_state "$c") in NODE_FAIL|FAILED|CANCELLED) true ;; *) false ;; esac'
  sleep 2
  node_is r1 'down*' || node_is r1 down || die "selftest: r1 came back by itself ($(node_state r1))"
  sctl scontrol update nodename=r1 state=resume
  wait_for 20 "r1 back in service" node_is r1 idle
  kill_node r0 >/dev/null
  wait_for 40 "a killed node marked down" node_is r0 'down*'
  echo "slurm-local: selftest passed (pinning, sharing a node, a downed node's job not requeued, a dead node marked down)"
}

down() {
  local ns pidfile
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$NS(-t0|-r[0-9]+)?\$" || true); do
    ip netns pids "$ns" | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns"
  done
  pidfile="$DIR/munge/munged.pid"
  if [ -f "$pidfile" ]; then kill -9 "$(cat "$pidfile")" 2>/dev/null || true; fi
  rm -rf "$DIR"
}

case ${1:-} in
  check) check ;;
  up) up ;;
  exec) shift; in_ns env SLURM_CONF="$DIR/slurm.conf" "$@" ;;
  kill-node) kill_node "${2:?node}" ;;
  restart-controller) restart_controller ;;
  serve-ip) echo "$CTL" ;;
  selftest) selftest ;;
  down) down ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
