# A miniature cluster's nodes (and the namespace check), shared by scripts/ray-local.sh and scripts/slurm-local.sh (sourced;
# the caller sets NET and defines die): the training node t0 at $NET.2 on the last CPU, rollout
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
