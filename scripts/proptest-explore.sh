#!/usr/bin/env bash
# Runs the property tests with fresh random seeds, N rounds, and prints any counterexample.
# CI runs them with the fixed seed in .ci/run (a flaky test blocks everyone); this is where
# new cases are found. A failure prints the seed, proptest's minimal failing input, and the
# test's regression file (proptest has written the case there: commit it, then fix the bug).
#
#   scripts/proptest-explore.sh 50          # 50 rounds, release build
#   DEBUG=1 scripts/proptest-explore.sh 10  # debug build (overflow checks on)
#   CASES=5000 scripts/proptest-explore.sh  # more cases per property per round
set -uo pipefail
rounds="${1:-20}"
cd "$(dirname "$0")/.."
profile=(--release)
[[ "${DEBUG:-0}" == 1 ]] && profile=()
targets=(
  "weave-dispatch properties"
  "weave-dispatch staleness"
  "weave-place properties"
  "weave-place consolidation"
  "weave-sim sharing"
  "weave-server preemption"
  "weave-server snapshot"
  "weave-trace fuzz"
)
[[ -n "${CASES:-}" ]] && export PROPTEST_CASES="$CASES"
args=()
for t in "${targets[@]}"; do
  set -- $t
  args+=(-p "$1" --test "$2")
done
cargo test "${profile[@]}" --no-run -q "${args[@]}" || exit 1
log="$(mktemp)"
for ((r = 1; r <= rounds; r++)); do
  seed=$(( (RANDOM << 30) ^ (RANDOM << 15) ^ RANDOM ))
  if ! PROPTEST_RNG_SEED="$seed" cargo test "${profile[@]}" -q "${args[@]}" >"$log" 2>&1; then
    echo "round $r: FAILED with PROPTEST_RNG_SEED=$seed"
    grep -E "minimal failing input|Test failed|panicked at|^test .* FAILED" "$log" | head -20
    git status --short -- '*.proptest-regressions'
    echo "full output: $log"
    exit 1
  fi
  echo "round $r: ok (seed $seed)"
done
rm -f "$log"
echo "$rounds rounds with random seeds: no counterexample"
