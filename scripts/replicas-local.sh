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
# /tmp/weave-replicas-$WEAVE_REPLICAS_NETNS), WEAVE_REPLICAS_LEASE_S (the replicas' lease, default 2).
# Addresses: node n<i> at 10.222.0.(2+i): etcd on 2379 (peers 2380), weave on 8080.
set -euo pipefail

NS=${WEAVE_REPLICAS_NETNS:-weave-rep}
DIR=${WEAVE_REPLICAS_DIR:-/tmp/weave-replicas-$NS}
WEAVE=${WEAVE_BIN:-weave}
LEASE_S=${WEAVE_REPLICAS_LEASE_S:-2}
NET=10.222.0
HOST=$NET.254
NODES=3
NIC=wv0

die() { echo "replicas-local: $*" >&2; exit 1; }

in_ns() { ip netns exec "$NS" "$@"; }

node_ns() { echo "$NS-n$1"; }

node_ip() { echo "$NET.$((2 + $1))"; }

check_node() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -lt "$NODES" ] || die "no node $1 (nodes are 0..$((NODES - 1)))"; }

all() { local i out=(); for i in $(seq 0 $((NODES - 1))); do out+=("$($1 "$i")"); done; (IFS=,; echo "${out[*]}"); }

etcd_url() { echo "http://$(node_ip "$1"):2379"; }

weave_url() { echo "http://$(node_ip "$1"):8080"; }

check() {
  local tool
  for tool in ip etcd "$WEAVE"; do
    command -v "$tool" >/dev/null 2>&1 || { echo "replicas-local: SKIP: $tool is not installed" >&2; exit 77; }
  done
  local probe="weave-probe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "replicas-local: SKIP: cannot create a private network namespace (needs root / CAP_SYS_ADMIN)" >&2
    exit 77
  fi
  ip netns del "$probe"
}

switch_up() {
  ip netns add "$NS"
  in_ns ip link set lo up
  in_ns ip link add br0 type bridge
  in_ns ip link set br0 up
  # This machine's port on the switch.
  ip link add "$NS-h" type veth peer name p-host netns "$NS"
  in_ns ip link set p-host master br0
  in_ns ip link set p-host up
  ip addr add "$HOST/24" dev "$NS-h"
  ip link set "$NS-h" up
}

node_net_up() {
  local ns
  ns=$(node_ns "$1")
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "$NIC" netns "$ns" type veth peer name "p-n$1" netns "$NS"
  in_ns ip link set "p-n$1" master br0
  in_ns ip link set "p-n$1" up
  ip -n "$ns" addr add "$(node_ip "$1")/24" dev "$NIC"
  ip -n "$ns" link set "$NIC" up
}

initial_cluster() {
  local i out=()
  for i in $(seq 0 $((NODES - 1))); do out+=("n$i=http://$(node_ip "$i"):2380"); done
  (IFS=,; echo "${out[*]}")
}

start_etcd() {
  local d="$DIR/n$1" ip
  ip=$(node_ip "$1")
  mkdir -p "$d"
  # With its data directory from before, the member rejoins (the --initial-* flags are ignored).
  ip netns exec "$(node_ns "$1")" setsid etcd --name "n$1" --data-dir "$d/etcd" \
    --listen-client-urls "http://$ip:2379" --advertise-client-urls "http://$ip:2379" \
    --listen-peer-urls "http://$ip:2380" --initial-advertise-peer-urls "http://$ip:2380" \
    --initial-cluster "$(initial_cluster)" --initial-cluster-state new \
    --initial-cluster-token "$NS" >>"$d/etcd.log" 2>&1 </dev/null &
}

start_weave() {
  local d="$DIR/n$1"
  mkdir -p "$d"
  ip netns exec "$(node_ns "$1")" setsid "$WEAVE" serve --insecure-no-auth --disagg-only \
    --addr "$(node_ip "$1"):8080" --advertise-url "$(weave_url "$1")" --job-server-urls "$(all weave_url)" \
    --rate-limit-per-s 0 --read-rate-limit-per-s 0 --heartbeat-timeout-s 3600 \
    --keep-events 100000000 --keep-ended-jobs 100000000 \
    --etcd "$(all etcd_url)" --etcd-prefix /weave --replica "n$1" --lease-s "$LEASE_S" \
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
  rm -rf "$DIR"
  mkdir -p "$DIR"
  switch_up
  local i
  for i in $(seq 0 $((NODES - 1))); do node_net_up "$i"; start_etcd "$i"; done
  for i in $(seq 0 $((NODES - 1))); do wait_for "etcd on n$i" etcd_healthy "$i"; done
  for i in $(seq 0 $((NODES - 1))); do start_weave "$i"; done
  for i in $(seq 0 $((NODES - 1))); do wait_for "weave on n$i" curl -s -o /dev/null "$(weave_url "$i")/healthz"; done
  echo "replicas-local: up: $(all weave_url) (etcd $(all etcd_url)); logs in $DIR"
}

kill_node() {
  check_node "$1"
  local ns pids
  ns=$(node_ns "$1")
  [ -e "/run/netns/$ns" ] || die "node n$1 is not up"
  pids=$(ip netns pids "$ns")
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -9 $pids
  ip netns del "$ns"
}

start_node() {
  check_node "$1"
  [ -e "/run/netns/$(node_ns "$1")" ] && die "node n$1 is up"
  node_net_up "$1"
  start_etcd "$1"
  wait_for "etcd on n$1" etcd_healthy "$1"
  start_weave "$1"
  wait_for "weave on n$1" curl -s -o /dev/null "$(weave_url "$1")/healthz"
}

down() {
  local i ns pids
  for i in $(seq 0 $((NODES - 1))); do
    ns=$(node_ns "$i")
    if [ -e "/run/netns/$ns" ]; then
      pids=$(ip netns pids "$ns")
      # shellcheck disable=SC2086
      [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
      ip netns del "$ns"
    fi
  done
  ip link del "$NS-h" 2>/dev/null || true
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
  kill-node) kill_node "${1:?node}" ;;
  start-node) start_node "${1:?node}" ;;
  partition) check_node "${1:?node}"; in_ns ip link set "p-n$1" down ;;
  heal) check_node "${1:?node}"; in_ns ip link set "p-n$1" up ;;
  exec-node) check_node "${1:?node}"; n=$1; shift; ip netns exec "$(node_ns "$n")" "$@" ;;
  down) down ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
esac
