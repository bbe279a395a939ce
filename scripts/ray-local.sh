#!/usr/bin/env bash
# A local multi-node Ray cluster for trying Weave's Ray backend, sealed in a private network
# namespace that has only loopback: nothing Ray starts can reach the network.
#
#   scripts/ray-local.sh check            can a namespace be made and is Ray installed? (exit 77: no)
#   scripts/ray-local.sh up               head (training node t0) + workers (rollout r0, r1, r2)
#   scripts/ray-local.sh exec CMD [ARG]   run CMD inside the namespace with Ray's hygiene settings
#   scripts/ray-local.sh kill-node NODE   SIGKILL one node's Ray processes (e.g. r1): a node failure
#   scripts/ray-local.sh down             stop everything, remove the namespace and the state dir
#
# Settings (environment): WEAVE_RAY_NETNS (namespace name, default weave-ray), WEAVE_RAY_DIR
# (state: HOME, logs, temp; default /tmp/weave-ray-$WEAVE_RAY_NETNS), WEAVE_RAY_GPUS (fake GPUs
# per node, default 8), WEAVE_RAY_ROLLOUT (rollout worker count, default 3).
# Addresses: the head is 127.0.0.2 (GCS :6379, dashboard and job API :8265), worker i is
# 127.0.0.(3+i). Never 127.0.0.1, which Ray rewrites to a routable address.
set -euo pipefail

NS=${WEAVE_RAY_NETNS:-weave-ray}
DIR=${WEAVE_RAY_DIR:-/tmp/weave-ray-$NS}
GPUS=${WEAVE_RAY_GPUS:-8}
ROLLOUT=${WEAVE_RAY_ROLLOUT:-3}
HEAD=127.0.0.2

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

check() {
  command -v ray >/dev/null 2>&1 || { echo "ray-local: SKIP: Ray is not installed (pip install \"ray[default]\")" >&2; exit 77; }
  command -v ip >/dev/null 2>&1 || { echo "ray-local: SKIP: iproute2 (ip) is not installed" >&2; exit 77; }
  local probe="weave-probe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "ray-local: SKIP: cannot create a private network namespace (needs root / CAP_SYS_ADMIN); refusing to run Ray unprotected" >&2
    exit 77
  fi
  ip netns del "$probe"
}

ns_up() {
  ip netns list | grep -qw "^$NS" && die "namespace $NS exists already (run: $0 down)"
  ip netns add "$NS"
  in_ns ip link set lo up
  # Only loopback: refuse to go on if anything else is there.
  local links
  links=$(in_ns ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')
  [ "$links" = "lo " ] || die "namespace $NS has links other than lo: $links"
}

# start_node IP WEAVE_NODE POOL [--head]
start_node() {
  local ip=$1 node=$2 pool=$3; shift 3
  local common=(--node-ip-address="$ip" --num-cpus=4 --num-gpus="$GPUS" --temp-dir="$DIR/tmp"
    --object-store-memory=100000000 --disable-usage-stats
    --resources="{\"weave_node_$node\": 1000}" --labels="weave.io/pool=$pool,weave.io/node=$node")
  if [ "${1:-}" = --head ]; then
    in_ns ray start --head --port=6379 --dashboard-host="$ip" --dashboard-port=8265 --include-dashboard=true \
      "${common[@]}" >"$DIR/logs/$node.log" 2>&1 || { cat "$DIR/logs/$node.log" >&2; die "head failed to start"; }
  else
    in_ns ray start --address="$HEAD:6379" "${common[@]}" >"$DIR/logs/$node.log" 2>&1 \
      || { cat "$DIR/logs/$node.log" >&2; die "node $node failed to start"; }
  fi
}

up() {
  check
  rm -rf "$DIR"
  mkdir -p "$DIR/logs"
  ray_env
  ns_up
  start_node "$HEAD" t0 training --head
  for i in $(seq 0 $((ROLLOUT - 1))); do
    start_node "127.0.0.$((3 + i))" "r$i" rollout
  done
  # Wait until the job API answers and every node is alive.
  local want=$((ROLLOUT + 1))
  for _ in $(seq 1 120); do
    local n
    n=$(in_ns curl -sf "http://$HEAD:8265/api/v0/nodes?limit=100" 2>/dev/null \
      | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(1 for n in d["data"]["result"]["result"] if n["state"]=="ALIVE"))' 2>/dev/null || echo 0)
    if [ "$n" = "$want" ]; then
      echo "ray-local: up in namespace $NS: dashboard http://$HEAD:8265, $want nodes (t0 + r0..r$((ROLLOUT - 1)))"
      return 0
    fi
    sleep 1
  done
  die "the cluster did not come up (logs in $DIR)"
}

kill_node() {
  local node=$1 ip
  case $node in
    t0) ip=$HEAD ;;
    r*) ip=127.0.0.$((3 + ${node#r})) ;;
    *) die "unknown node $node" ;;
  esac
  # Every process of that node carries its address on the command line; the pattern ends at
  # the address so 127.0.0.3 does not match 127.0.0.30.
  local pids
  pids=$(ip netns pids "$NS" | while read -r p; do
    { tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | grep -qE "(node[-_]ip[-_]address[= ]|--node-ip-address=)$ip( |\$)" && echo "$p"
  done || true)
  [ -n "$pids" ] || die "no processes found for node $node ($ip)"
  kill -9 $pids
  echo "ray-local: killed node $node ($ip): $(echo $pids | wc -w) processes"
}

down() {
  if ip netns list | grep -qw "^$NS"; then
    ip netns pids "$NS" | xargs -r kill -9 2>/dev/null || true
    ip netns del "$NS"
  fi
  rm -rf "$DIR"
}

case ${1:-} in
  check) check ;;
  up) up ;;
  down) down ;;
  exec) shift; ray_env; exec ip netns exec "$NS" "$@" ;;
  kill-node) kill_node "${2:?node name, e.g. r1}" ;;
  *) sed -n '2,15p' "$0" >&2; exit 2 ;;
esac
