#!/usr/bin/env bash
# A local multi-node Ray cluster for trying Weave's Ray backend, sealed in a private network
# namespace that has only loopback: nothing Ray starts can reach the network.
#
# With WEAVE_RAY_LINK_MBIT set it is a miniature cluster instead: every node is a network
# namespace of its own on its own CPU set (the training node on the last CPU, the rollout
# nodes on the others), all joined by a switch (a bridge in the sealed namespace, which has no
# link to this machine's network); the training node's port is limited to that many Mbit/s in
# each direction (tc tbf), so every byte between the pools crosses a slow inter-pool link while
# the rollout nodes talk among themselves at full speed. `exec` runs in the switch's namespace.
#
#   scripts/ray-local.sh check            can a namespace be made and is Ray installed? (exit 77: no)
#   scripts/ray-local.sh up               head (training node t0) + workers (rollout r0, r1, r2)
#   scripts/ray-local.sh exec CMD [ARG]   run CMD inside the namespace with Ray's hygiene settings
#   scripts/ray-local.sh kill-node NODE   SIGKILL one node's Ray processes (e.g. r1): a node failure
#   scripts/ray-local.sh down             stop everything, remove the namespace and the state dir
#
# Settings (environment): WEAVE_RAY_NETNS (namespace name, default weave-ray), WEAVE_RAY_DIR
# (state: HOME, logs, temp; default /tmp/weave-ray-$WEAVE_RAY_NETNS), WEAVE_RAY_GPUS (fake GPUs
# per node, default 8), WEAVE_RAY_ROLLOUT (rollout worker count, default 3), WEAVE_RAY_LINK_MBIT
# (the miniature cluster's inter-pool link, see above).
# Addresses: the head is 127.0.0.2 (GCS :6379, dashboard and job API :8265), worker i is
# 127.0.0.(3+i). Never 127.0.0.1, which Ray rewrites to a routable address. On the miniature
# cluster: head 10.218.0.2, worker i 10.218.0.(3+i), the switch's namespace 10.218.0.1.
# `scripts/ray-local.sh head` prints the head's address, `serve-ip` where `exec` may bind a server
# every node reaches (the head's address, or the switch's on the miniature cluster).
set -euo pipefail

NS=${WEAVE_RAY_NETNS:-weave-ray}
DIR=${WEAVE_RAY_DIR:-/tmp/weave-ray-$NS}
GPUS=${WEAVE_RAY_GPUS:-8}
ROLLOUT=${WEAVE_RAY_ROLLOUT:-3}
LINK_MBIT=${WEAVE_RAY_LINK_MBIT:-}
if [ -n "$LINK_MBIT" ]; then
  NET=10.218.0
  # Each node's NIC has this name in its own namespace: gloo binds it.
  NIC=wv0
else
  NET=127.0.0
fi
HEAD=$NET.2

die() { echo "ray-local: $*" >&2; exit 1; }

# Ray's hygiene: no usage reports, report URL pointing at a closed loopback port, and a HOME
# with an empty ray_bootstrap_config.yaml (which stops the cloud metadata probe).
ray_env() {
  mkdir -p "$DIR/home"
  : >"$DIR/home/ray_bootstrap_config.yaml"
  export HOME="$DIR/home" RAY_USAGE_STATS_ENABLED=0 RAY_USAGE_STATS_REPORT_URL=http://127.0.0.1:9/
  # Notice a dead node within a few seconds instead of ~30 s.
  export RAY_health_check_period_ms=1000 RAY_health_check_failure_threshold=3
  export RAY_health_check_initial_delay_ms=1000
}

in_ns() { ip netns exec "$NS" "$@"; }

# The namespace a node's processes run in: the one namespace, or the node's own.
node_ns() { if [ -n "$LINK_MBIT" ]; then echo "$NS-$1"; else echo "$NS"; fi; }

# node_ip and node_cpus: the miniature cluster's addresses and CPU sets.
# shellcheck source=lib/nodes.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/nodes.sh"

check() {
  command -v ray >/dev/null 2>&1 || { echo "ray-local: SKIP: Ray is not installed (pip install \"ray[default]\")" >&2; exit 77; }
  command -v ip >/dev/null 2>&1 || { echo "ray-local: SKIP: iproute2 (ip) is not installed" >&2; exit 77; }
  if [ -n "$LINK_MBIT" ]; then
    command -v tc >/dev/null 2>&1 || { echo "ray-local: SKIP: tc (iproute2) is not installed" >&2; exit 77; }
    command -v taskset >/dev/null 2>&1 || { echo "ray-local: SKIP: taskset (util-linux) is not installed" >&2; exit 77; }
  fi
  can_make_namespace ray-local "; refusing to run Ray unprotected"
}

ns_up() {
  ip netns list | grep -qw "^$NS" && die "namespace $NS exists already (run: $0 down)"
  ip netns add "$NS"
  in_ns ip link set lo up
  # Only loopback: refuse to go on if anything else is there.
  local links
  links=$(in_ns ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')
  [ "$links" = "lo " ] || die "namespace $NS has links other than lo: $links"
  [ -z "$LINK_MBIT" ] || switch_up
}

# The miniature cluster's network: a bridge in the sealed namespace and a namespace per node
# joined to it; the training node's port shaped both ways. Nothing is linked to this machine.
switch_up() {
  in_ns ip link add br0 type bridge
  in_ns ip addr add "$NET.1/24" dev br0
  in_ns ip link set br0 up
  local node
  for node in t0 $(seq -f 'r%g' 0 $((ROLLOUT - 1))); do
    node_on_switch "$node"
  done
  shape_training_link "$LINK_MBIT"
}

# start_node WEAVE_NODE POOL [--head]
start_node() {
  local node=$1 pool=$2 ip run; shift 2
  ip=$(node_ip "$node")
  run=(ip netns exec "$(node_ns "$node")")
  if [ -n "$LINK_MBIT" ]; then
    # The node's CPU set and NIC hold for everything it starts (raylet, workers, actors).
    run+=(env GLOO_SOCKET_IFNAME="$NIC" taskset -c "$(node_cpus "$node")")
  fi
  local common=(--node-ip-address="$ip" --num-cpus=4 --num-gpus="$GPUS" --temp-dir="$DIR/tmp"
    --object-store-memory=100000000 --disable-usage-stats
    --resources="{\"weave_node_$node\": 1000}" --labels="weave.io/pool=$pool,weave.io/node=$node")
  if [ "${1:-}" = --head ]; then
    "${run[@]}" ray start --head --port=6379 --dashboard-host="$ip" --dashboard-port=8265 --include-dashboard=true \
      "${common[@]}" >"$DIR/logs/$node.log" 2>&1 || { cat "$DIR/logs/$node.log" >&2; die "head failed to start"; }
  else
    "${run[@]}" ray start --address="$HEAD:6379" "${common[@]}" >"$DIR/logs/$node.log" 2>&1 \
      || { cat "$DIR/logs/$node.log" >&2; die "node $node failed to start"; }
  fi
}

up() {
  check
  rm -rf "$DIR"
  mkdir -p "$DIR/logs"
  ray_env
  ns_up
  start_node t0 training --head
  for i in $(seq 0 $((ROLLOUT - 1))); do
    start_node "r$i" rollout
  done
  # Wait until the job API answers and every node is alive.
  local want=$((ROLLOUT + 1))
  for _ in $(seq 1 120); do
    local n
    n=$(in_ns curl -sf "http://$HEAD:8265/api/v0/nodes?limit=100" 2>/dev/null \
      | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(1 for n in d["data"]["result"]["result"] if n["state"]=="ALIVE"))' 2>/dev/null || echo 0)
    if [ "$n" = "$want" ]; then
      echo "ray-local: up in namespace $NS: dashboard http://$HEAD:8265, $want nodes (t0 + r0..r$((ROLLOUT - 1)))${LINK_MBIT:+, inter-pool link $LINK_MBIT Mbit/s}"
      return 0
    fi
    sleep 1
  done
  die "the cluster did not come up (logs in $DIR)"
}

kill_node() {
  local node=$1 ip pids
  ip=$(node_ip "$node")
  if [ -n "$LINK_MBIT" ]; then
    # A node of the miniature cluster is its namespace: every process in it dies.
    pids=$(ip netns pids "$(node_ns "$node")")
  else
    # Every process of that node carries its address on the command line; the pattern ends at
    # the address so 127.0.0.3 does not match 127.0.0.30.
    pids=$(ip netns pids "$NS" | while read -r p; do
      { tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | grep -qE "(node[-_]ip[-_]address[= ]|--node-ip-address=)$ip( |\$)" && echo "$p"
    done || true)
  fi
  [ -n "$pids" ] || die "no processes found for node $node ($ip)"
  kill -9 $pids
  echo "ray-local: killed node $node ($ip): $(echo $pids | wc -w) processes"
}

down() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$NS(-t0|-r[0-9]+)?\$" || true); do
    ip netns pids "$ns" | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns"
  done
  rm -rf "$DIR"
}

case ${1:-} in
  check) check ;;
  up) up ;;
  down) down ;;
  exec) shift; ray_env; exec ip netns exec "$NS" "$@" ;;
  kill-node) kill_node "${2:?node name, e.g. r1}" ;;
  head) echo "$HEAD" ;;
  serve-ip) if [ -n "$LINK_MBIT" ]; then echo "$NET.1"; else echo "$HEAD"; fi ;;
  *) sed -n '2,27p' "$0" >&2; exit 2 ;;
esac
