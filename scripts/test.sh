#!/usr/bin/env bash
# The whole test suite: lint, unit tests, then everything against the real
# API server (started here, stopped on exit whatever happens).
set -euo pipefail
cd "$(dirname "$0")/.."
env_dir="${TESTENV:-$PWD/.testenv}"
threads="${CARGO_TEST_THREADS:-2}"

if cargo clippy --version >/dev/null 2>&1; then
  echo "== lint"
  cargo fmt --all -- --check
  cargo clippy --workspace --all-targets -- -D warnings
fi

echo "== starting kube-apiserver + etcd ($env_dir)"
trap 'scripts/testenv.sh stop "$env_dir"' EXIT
scripts/testenv.sh start "$env_dir"
export NETENDPOINT_KUBECONFIG="$env_dir/kubeconfig"
echo "   $(grep -h startup_ms "$env_dir/ready")"

echo "== cargo test (workspace)"
cargo test --workspace -- --test-threads="$threads"
