# A miniature cluster's nodes (and the namespace check), shared by scripts/ray-local.sh and scripts/slurm-local.sh (sourced;
# the caller sets NET, NS and NIC and defines die, in_ns and node_ns): the training node t0 at $NET.2 on the last CPU, rollout
# node r<i> at $NET.(3+i) on the other CPUs (all of them on a one-CPU machine).

node_ip() {
  case $1 in
    t0) echo "$NET.2" ;;
    r*) echo "$NET.$((3 + ${1#r}))" ;;
    *) die "unknown node $1" ;;
  esac
}

node_cpus() {
  local last=$(($(nproc) - 1))
  if [ "$last" = 0 ]; then echo 0
  elif [ "$1" = t0 ]; then echo "$last"
  elif [ "$last" = 1 ]; then echo 0
  else echo "0-$((last - 1))"; fi
}

# can_make_namespace NAME [WHY]: exits 77 (a skip), NAME saying so, where no network namespace
# can be made here (no root / CAP_SYS_ADMIN); WHY is added to the message.
can_make_namespace() {
  local probe="weave-probe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "$1: SKIP: cannot create a private network namespace (needs root / CAP_SYS_ADMIN)${2:-}" >&2
    exit 77
  fi
  ip netns del "$probe"
}

# node_on_switch NODE: NODE's namespace, its NIC joined to the switch (br0 in $NS) at its address.
node_on_switch() {
  local node=$1 ns
  ns=$(node_ns "$node")
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "$NIC" netns "$ns" type veth peer name "p-$node" netns "$NS"
  in_ns ip link set "p-$node" master br0
  in_ns ip link set "p-$node" up
  ip -n "$ns" addr add "$(node_ip "$node")/24" dev "$NIC"
  ip -n "$ns" link set "$NIC" up
}

# shape_training_link MBIT: the training node's port limited to MBIT both ways (tc tbf), with a
# small bucket (2 ms at the rate, at least 10 full frames), as the runtime's mini cluster.
shape_training_link() {
  local rate="${1}mbit"
  local burst="$(( $1 * 1000 / 8 / 500 > 15 ? $1 * 1000 / 8 / 500 : 15 ))kb"
  ip netns exec "$(node_ns t0)" tc qdisc add dev "$NIC" root tbf rate "$rate" burst "$burst" latency 100ms
  in_ns tc qdisc add dev p-t0 root tbf rate "$rate" burst "$burst" latency 100ms
}
