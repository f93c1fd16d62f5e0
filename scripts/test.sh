#!/usr/bin/env bash
# The whole test suite: fmt and clippy, unit tests, then everything against
# the real API server (started here, stopped on exit whatever happens), then
# the scenarios on a real node. The dependency audit is `make audit` (and
# part of `make lint`): off this path, because a fresh machine would compile
# cargo-deny first.
set -euo pipefail
cd "$(dirname "$0")/.."
env_dir="${TESTENV:-$PWD/.testenv}"
threads="${CARGO_TEST_THREADS:-2}"

# A full disk shows up late and obscurely (a linker that cannot map its
# output, an etcd that cannot create its WAL): say it first.
free_gb=$(df -Pk . | awk 'NR==2 { print int($4 / 1048576) }')
if [ "$free_gb" -lt 10 ]; then
  echo "warning: only ${free_gb} GiB free on this file system; a cold build and test run needs about 10 GiB" >&2
fi

echo "== lint (fmt, clippy)"
scripts/lint.sh

echo "== the Helm chart: helm lint; deploy/ is its render"
scripts/chart-test.sh

echo "== starting kube-apiserver + etcd ($env_dir)"
trap 'scripts/testenv.sh stop "$env_dir"' EXIT
scripts/testenv.sh start "$env_dir"
export NETENDPOINT_KUBECONFIG="$env_dir/kubeconfig"
echo "   $(grep -h startup_ms "$env_dir/ready")"

echo "== cargo test (workspace)"
log="$env_dir/cargo-test.log"
set +e
# --no-fail-fast: a failing test binary does not hide the ones after it.
cargo test --workspace --no-fail-fast -- --test-threads="$threads" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole workspace (cargo prints one per test binary).
awk '/^test result:/ { p += $4; f += $6 } END { printf "total: %d passed, %d failed\n", p, f }' \
  FS='[ ;]+' "$log"
scripts/chart-test.sh "$env_dir/kubeconfig" || status=1

# The Go agent kit: its unit tests, its tests against this API server, and
# the conformance suite passed by its example agent and failed by a broken one.
echo "== the Go agent kit (agentkit/)"
scripts/agentkit-test.sh || status=1
scripts/testenv.sh stop "$env_dir"

# The real node (kubelet, containerd, runc): about 70 s once its binaries are
# built, so it is part of the suite (docs/testing.md, "A real node"). It runs
# its own API server and tears everything down, pass or fail.
echo "== e2e on a real node (scripts/e2e.sh)"
set +e
scripts/e2e.sh
e2e_status=$?
set -e
echo "e2e: $([ "$e2e_status" = 0 ] && echo passed || echo "FAILED (exit $e2e_status)")"
[ "$status" = 0 ] || exit "$status"
exit "$e2e_status"
