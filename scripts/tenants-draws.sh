#!/usr/bin/env bash
# The README's multi-draw figures for owned clusters: `weave experiment tenants` on seeds
# 1..DRAWS (default 80), quotas+preemption+backfill against FIFO on the same jobs, summarised
# by scripts/tenants_draws.py. Extra arguments go to every run, e.g.
#   scripts/tenants-draws.sh --grace-min 5
#   scripts/tenants-draws.sh --min-run-h 0.15 --half-life-h 2
set -euo pipefail
cd "$(dirname "$0")/.."
weave="${WEAVE:-target/release/weave}"
trace="${TRACE:-../shared/data/rollmux/wild.trace}"
[ -x "$weave" ] || cargo build --release --quiet -p weave-cli
out="$(mktemp -d)"
for seed in $(seq 1 "${DRAWS:-80}"); do
  "$weave" experiment tenants --trace "$trace" --seed "$seed" --json "$@" > "$out/$seed.json"
done
python3 scripts/tenants_draws.py "$out"/*.json
