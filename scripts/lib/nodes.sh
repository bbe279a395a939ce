# A miniature cluster's nodes, shared by scripts/ray-local.sh and scripts/slurm-local.sh (sourced;
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
