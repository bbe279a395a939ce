#!/usr/bin/env bash
# Replicas of the control plane on a miniature cluster (issue #56): three nodes, each a network
# namespace of its own running one etcd member and one `weave serve --etcd` replica, joined by a
# switch (a bridge in a sealed namespace). This machine reaches the switch through a port of its
# own (10.222.0.254), so tests and drivers run here and talk to the nodes' addresses. A node can
# be killed whole (every process in its namespace, then the namespace: a lost machine; its disk
# stays for a restart) or cut off the switch (a partition: its processes run on, alone).
#
#   scripts/replicas-local.sh check            can namespaces be made, are etcd and weave here? (exit 77: no)
#   scripts/replicas-local.sh up               the switch and nodes n0..n2: etcd members, then replicas
#   scripts/replicas-local.sh urls             the replicas' URLs, comma-separated
#   scripts/replicas-local.sh kill-node N      SIGKILL every process of node N and remove its namespace
#   scripts/replicas-local.sh start-node N     bring node N back (its etcd member and replica, same disk)
#   scripts/replicas-local.sh partition N      cut node N off the switch (its processes keep running)
#   scripts/replicas-local.sh heal N           join it again
#   scripts/replicas-local.sh exec-node N CMD  run CMD inside node N's namespace
#   scripts/replicas-local.sh down             stop everything, remove the namespaces and the state dir
#
# Settings (environment): WEAVE_BIN (the weave binary; default `weave` on PATH), WEAVE_REPLICAS_NETNS
# (namespace prefix, default weave-rep), WEAVE_REPLICAS_DIR (state and logs; default
# /tmp/weave-replicas-$WEAVE_REPLICAS_NETNS), WEAVE_REPLICAS_LEASE_S (the replicas' lease, default 2),
# WEAVE_REPLICAS_ETCD_ELECTION_MS (etcd's election timeout, default 500 ms; its heartbeat a tenth).
# Addresses: node n<i> at 10.222.0.(2+i): etcd on 2379 (peers 2380), weave on 8080.
set -euo pipefail

NS=${WEAVE_REPLICAS_NETNS:-weave-rep}
DIR=${WEAVE_REPLICAS_DIR:-/tmp/weave-replicas-$NS}
WEAVE=${WEAVE_BIN:-weave}
LEASE_S=${WEAVE_REPLICAS_LEASE_S:-2}
# etcd's election timeout and heartbeat: 500 and 50 ms, for a LAN (etcd's defaults are 1000 and 100 ms;
# a new etcd leader extends every lease by its election timeout, so the lost node's etcd leadership
# costs the failover about two election timeouts on top of the replicas' lease).
ELECTION_MS=${WEAVE_REPLICAS_ETCD_ELECTION_MS:-500}
NET=10.222.0
HOST=$NET.254
NODES=3
NIC=wv0
# This machine's port on the switch (interface names are at most 15 characters).
HOSTIF="wh$(printf %s "$NS" | cksum | cut -c1-8)"

die() { echo "replicas-local: $*" >&2; exit 1; }

in_ns() { ip netns exec "$NS" "$@"; }

node_ns() { echo "$NS-$1"; }

# can_make_namespace and node_on_switch (the miniature cluster's, as the Ray and Slurm scripts'
# nodes); node_ip is this cluster's own, defined after them: node n<i> at $NET.(2+i).
# shellcheck source=lib/nodes.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/nodes.sh"

node_ip() { echo "$NET.$((2 + ${1#n}))"; }

nodes() { seq -f 'n%g' 0 $((NODES - 1)); }

# The node a command names by its number.
node_arg() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -lt "$NODES" ] || die "no node $1 (nodes are 0..$((NODES - 1)))"; echo "n$1"; }

all() { local n out=(); for n in $(nodes); do out+=("$($1 "$n")"); done; (IFS=,; echo "${out[*]}"); }

etcd_url() { echo "http://$(node_ip "$1"):2379"; }

weave_url() { echo "http://$(node_ip "$1"):8080"; }

check() {
  local tool
  for tool in ip etcd curl "$WEAVE"; do
    command -v "$tool" >/dev/null 2>&1 || { echo "replicas-local: SKIP: $tool is not installed" >&2; exit 77; }
  done
  can_make_namespace replicas-local
}

switch_up() {
  ip netns add "$NS"
  in_ns ip link set lo up
  in_ns ip link add br0 type bridge
  in_ns ip link set br0 up
  # This machine's port on the switch.
  ip link add "$HOSTIF" type veth peer name p-host netns "$NS"
  in_ns ip link set p-host master br0
  in_ns ip link set p-host up
  ip addr add "$HOST/24" dev "$HOSTIF"
  ip link set "$HOSTIF" up
}

peer() { echo "$1=http://$(node_ip "$1"):2380"; }

start_etcd() {
  local d="$DIR/$1" ip
  ip=$(node_ip "$1")
  mkdir -p "$d"
  # With its data directory from before, the member rejoins (the --initial-* flags are ignored).
  ip netns exec "$(node_ns "$1")" setsid etcd --name "$1" --data-dir "$d/etcd" \
    --listen-client-urls "http://$ip:2379" --advertise-client-urls "http://$ip:2379" \
    --listen-peer-urls "http://$ip:2380" --initial-advertise-peer-urls "http://$ip:2380" \
    --initial-cluster "$(all peer)" --initial-cluster-state new \
    --initial-cluster-token "$NS" --pre-vote --election-timeout "$ELECTION_MS" --heartbeat-interval "$((ELECTION_MS / 10))" \
    >>"$d/etcd.log" 2>&1 </dev/null &
}

start_weave() {
  local d="$DIR/$1"
  mkdir -p "$d"
  ip netns exec "$(node_ns "$1")" setsid "$WEAVE" serve --insecure-no-auth --disagg-only \
    --addr "$(node_ip "$1"):8080" --advertise-url "$(weave_url "$1")" --job-server-urls "$(all weave_url)" \
    --rate-limit-per-s 0 --read-rate-limit-per-s 0 --heartbeat-timeout-s 3600 \
    --keep-events 100000000 --keep-ended-jobs 100000000 \
    --etcd "$(all etcd_url)" --etcd-prefix /weave --replica "$1" --lease-s "$LEASE_S" \
    --data "$d/weave" >>"$d/weave.log" 2>&1 </dev/null &
}

wait_for() {
  local what=$1 i
  shift
  for i in $(seq 1 600); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  die "timed out waiting for $what"
}

etcd_healthy() { curl -sf -X POST -d '{"key":"AA=="}' "$(etcd_url "$1")/v3/kv/range"; }

up() {
  check
  [ -e "/run/netns/$NS" ] && die "$NS exists already (scripts/replicas-local.sh down first)"
  ip -o addr show | grep -q " $HOST/" && die "another cluster holds $HOST (take it down first)"
  rm -rf "$DIR"
  mkdir -p "$DIR"
  switch_up
  local n
  for n in $(nodes); do node_on_switch "$n"; start_etcd "$n"; done
  for n in $(nodes); do wait_for "etcd on $n" etcd_healthy "$n"; done
  for n in $(nodes); do start_weave "$n"; done
  for n in $(nodes); do wait_for "weave on $n" curl -s -o /dev/null "$(weave_url "$n")/healthz"; done
  echo "replicas-local: up: $(all weave_url) (etcd $(all etcd_url)); logs in $DIR"
}

kill_node() {
  local ns pids
  ns=$(node_ns "$1")
  [ -e "/run/netns/$ns" ] || die "node $1 is not up"
  pids=$(ip netns pids "$ns")
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -9 $pids
  ip netns del "$ns"
  # The kernel takes the namespace and its link down once its processes are gone: wait for that.
  wait_for "node $1's port to go" port_gone "$1"
}

port_gone() { ! in_ns ip link show "p-$1" >/dev/null 2>&1; }

start_node() {
  [ -e "/run/netns/$(node_ns "$1")" ] && die "node $1 is up"
  node_on_switch "$1"
  start_etcd "$1"
  wait_for "etcd on $1" etcd_healthy "$1"
  start_weave "$1"
  wait_for "weave on $1" curl -s -o /dev/null "$(weave_url "$1")/healthz"
}

down() {
  local n ns pids
  for n in $(nodes); do
    ns=$(node_ns "$n")
    if [ -e "/run/netns/$ns" ]; then
      pids=$(ip netns pids "$ns")
      # shellcheck disable=SC2086
      [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
      ip netns del "$ns"
    fi
  done
  ip link del "$HOSTIF" 2>/dev/null || true
  [ -e "/run/netns/$NS" ] && ip netns del "$NS"
  rm -rf "$DIR"
}

cmd=${1:-}
shift || true
case $cmd in
  check) check ;;
  up) up ;;
  urls) all weave_url ;;
  etcd-endpoints) all etcd_url ;;
  kill-node) n=$(node_arg "${1:?node}"); kill_node "$n" ;;
  start-node) n=$(node_arg "${1:?node}"); start_node "$n" ;;
  partition) n=$(node_arg "${1:?node}"); in_ns ip link set "p-$n" down ;;
  heal) n=$(node_arg "${1:?node}"); in_ns ip link set "p-$n" up ;;
  exec-node) n=$(node_arg "${1:?node}"); shift; ip netns exec "$(node_ns "$n")" "$@" ;;
  down) down ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
esac
