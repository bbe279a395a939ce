#!/usr/bin/env bash
# Runs .ci/run's test steps N times on a clean clone of the committed HEAD and prints which
# tests failed how often: the way to show that CI does not flake.
#
#   scripts/ci-repeat.sh 10            # ten rounds, the machine otherwise idle
#   LOAD=1 scripts/ci-repeat.sh 5      # five rounds with a release build of the workspace
#                                      # running beside them (in a second clone, in a loop)
#   FULL=1 scripts/ci-repeat.sh 3      # each round is the whole of .ci/run (installs, fmt, clippy)
#
# The clone is built once; each round then runs the Python client's unit tests, the README's
# test command, the ignored tests (Ray, root, Python) and the short real-jobs run, with the
# environment .ci/run sets. Ray must be installed already (.ci/run installs it).
set -uo pipefail
n="${1:-10}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d /tmp/weave-ci-repeat.XXXXXX)"
git clone --quiet "$repo" "$work/clone"
cd "$work/clone"
# The same seed .ci/run gives proptest.
export PROPTEST_RNG_SEED="$(sed -n 's/^export PROPTEST_RNG_SEED=//p' .ci/run)"

loader=""
if [[ "${LOAD:-0}" == 1 ]]; then
  git clone --quiet "$repo" "$work/load"
  ( cd "$work/load" && while true; do cargo clean -q; cargo build -q --release --workspace >/dev/null 2>&1; done ) &
  loader=$!
  trap 'kill -- -$loader 2>/dev/null; kill $loader 2>/dev/null; pkill -f "$work/load" 2>/dev/null' EXIT
fi

if [[ "${FULL:-0}" != 1 ]]; then
  echo "== building the clone once ($work/clone)"
  cargo test --workspace --locked --no-run -q 2>&1 | tail -3
  venv="$work/venv"
  python3 -m venv "$venv" && "$venv/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check "./python[otel,torch]" "opentelemetry-sdk==1.45.2"
  cargo build --locked -q -p weave-cli
fi

declare -A failed
rounds_failed=0
for ((i = 1; i <= n; i++)); do
  log="$work/round-$i.log"
  start=$SECONDS
  if [[ "${FULL:-0}" == 1 ]]; then
    bash .ci/run >"$log" 2>&1
  else
    {
      "$venv/bin/python" -m unittest discover -s python/tests -p 'test_*.py' &&
        cargo test --workspace --locked &&
        cargo test --workspace --locked -- --ignored &&
        "$venv/bin/python" -W ignore -m weave_client.runtime.experiment --weave target/debug/weave \
          --iterations 8 --prompts 16 --rounds 1 --kill-serve
    } >"$log" 2>&1
  fi
  rc=$?
  names="$(grep -E '^test .* \.\.\. FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/'; grep -E '^(FAIL|ERROR): ' "$log" | sed -E 's/^(FAIL|ERROR): //'; grep -qE '^(Traceback|AssertionError)' "$log" && tail -1 "$log" | cut -c1-120 | sed 's/^/real jobs: /')"
  if [[ $rc -ne 0 ]]; then
    rounds_failed=$((rounds_failed + 1))
    [[ -z "$names" ]] && names="(round failed with rc $rc, no test named: see $log)"
  fi
  while IFS= read -r t; do
    [[ -n "$t" ]] && failed["$t"]=$((${failed["$t"]:-0} + 1))
  done <<<"$names"
  echo "round $i/$n: rc $rc in $((SECONDS - start)) s"
done

echo "== $((n - rounds_failed)) of $n rounds passed${LOAD:+ (under load)}; logs in $work"
for t in "${!failed[@]}"; do
  echo "  ${failed[$t]}x  $t"
done | sort -rn
[[ $rounds_failed -eq 0 ]]
