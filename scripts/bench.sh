#!/usr/bin/env bash
# make bench: builds release binaries, starts a dedicated real API server,
# runs the benchmark harness (figures only, no assertions) and writes
# BENCHMARKS.md and docs/bench.svg. BENCH_ARGS=--quick for a short run.
set -euo pipefail
cd "$(dirname "$0")/.."
state="${BENCH_DIR:-$PWD/.bench}"
command -v /usr/bin/time >/dev/null || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq time >/dev/null; }
scripts/bench-peers.sh build || echo "whereabouts unavailable: the peer column is left out (see docs/bench-peers.md)" >&2
cargo build --release -p netendpoint-cni -p watcher-example -p netendpoint-controller -p netendpoint-tests --bins
trap 'scripts/testenv.sh stop "$state"' EXIT
scripts/testenv.sh start "$state"
peer=()
if [ -x tests/bin/cni/whereabouts ] && scripts/bench-peers.sh crds "$state/kubeconfig"; then
  peer=(--whereabouts tests/bin/cni/whereabouts)
fi
target/release/netendpoint-bench --kubeconfig "$state/kubeconfig" --bin-dir target/release \
  --cni-dir tests/bin/cni "${peer[@]}" --out BENCHMARKS.md --plot docs/bench.svg ${BENCH_ARGS:-}
