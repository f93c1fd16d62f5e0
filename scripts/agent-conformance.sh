#!/usr/bin/env bash
# The agent conformance suite (watcher-example/README.md, "Conformance"):
# the seed, stress, restart and UID suites of tests/tests/watcher_*.rs run
# against AGENT, any command that follows the contract, on the real API
# server. Prints a verdict per suite; exits non-zero when any suite fails.
#
#   AGENT='<command>'      required; run by `sh -c` with the contract's environment
#   SUITES=seed,stress,restart,uid   the suites, in order (default: all four)
#   SUITE_TIMEOUT=600      seconds a suite may take before it counts as failed
#
# Reuses the API server of NETENDPOINT_KUBECONFIG when set (make test does);
# otherwise starts one of its own and stops it on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${AGENT:?set AGENT to the command that starts the agent, e.g. AGENT=path/to/agent}"
suites=${SUITES:-seed,stress,restart,uid}
limit=${SUITE_TIMEOUT:-600}
threads=${CARGO_TEST_THREADS:-2}

if [ -z "${NETENDPOINT_KUBECONFIG:-}" ]; then
  env_dir="${TESTENV:-$PWD/.testenv}-conformance"
  trap 'scripts/testenv.sh stop "$env_dir"' EXIT
  scripts/testenv.sh start "$env_dir"
  export NETENDPOINT_KUBECONFIG="$env_dir/kubeconfig"
fi
cargo build -q --workspace --bins
args=()
for s in ${suites//,/ }; do args+=(--test "watcher_$s"); done
cargo test -q -p netendpoint-tests --no-run "${args[@]}"

logs=$(mktemp -d)
export NETENDPOINT_AGENT_CMD="$AGENT"
failed=0
declare -A verdict seconds
for s in ${suites//,/ }; do
  start=$SECONDS
  if timeout --kill-after=10 "$limit" cargo test -q -p netendpoint-tests --test "watcher_$s" \
      -- --test-threads="$threads" --nocapture >"$logs/$s.log" 2>&1; then
    verdict[$s]=PASS
  else
    rc=$?
    verdict[$s]=FAIL
    [ "$rc" = 124 ] && verdict[$s]="FAIL (timed out after ${limit}s)"
    failed=$((failed + 1))
    echo "--- $s: last lines of its output ($logs/$s.log)"
    grep -v '^test result:' "$logs/$s.log" | tail -n 25 | sed 's/^/    /'
  fi
  seconds[$s]=$((SECONDS - start))
done
echo "agent conformance: $AGENT"
for s in ${suites//,/ }; do printf '  %-8s %s (%ss)\n' "$s" "${verdict[$s]}" "${seconds[$s]}"; done
n=$(echo "${suites//,/ }" | wc -w)
echo "verdict: $((n - failed)) of $n suites passed"
[ "$failed" = 0 ]
