#!/usr/bin/env bash
# The Go agent kit (agentkit/), against the API server of
# NETENDPOINT_KUBECONFIG: gofmt and go vet, its unit tests, its tests
# against the real API server (tag apiserver), then the agent conformance
# suite: passed by the Go example agent and by watcher-example under the
# contract, and failed, as it must be, by watcher-example run as a broken
# agent (naive, holding no finalizer).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${NETENDPOINT_KUBECONFIG:?the kubeconfig of the test API server, which make test starts}"
status=0
unformatted=$(cd agentkit && gofmt -l .)
if [ -n "$unformatted" ]; then echo "gofmt: not formatted: $unformatted"; status=1; fi
(cd agentkit && go vet -tags apiserver ./... && go test -count=1 -tags apiserver ./...) || status=1
(cd agentkit && go build -trimpath -o ../tests/bin/rules-agent ./examples/rules-agent)

echo "== agent conformance: the Go example agent (agentkit/examples/rules-agent)"
AGENT="$PWD/tests/bin/rules-agent" scripts/agent-conformance.sh || status=1

echo "== agent conformance: watcher-example under the contract (watcher-example/contract.sh)"
WATCHER_EXAMPLE_BIN="$PWD/target/debug/watcher-example" AGENT="$PWD/watcher-example/contract.sh" \
  scripts/agent-conformance.sh || status=1

echo "== agent conformance: watcher-example --naive-ip-keyed --no-finalizer, which must fail"
set +e
WATCHER_EXAMPLE_BIN="$PWD/target/debug/watcher-example" SUITES=uid,restart SUITE_TIMEOUT=180 \
  AGENT="$PWD/watcher-example/contract.sh --naive-ip-keyed --no-finalizer" scripts/agent-conformance.sh
naive=$?
set -e
if [ "$naive" = 0 ]; then
  echo "the conformance suite passed a naive agent that holds no finalizer: it cannot fail"
  status=1
else
  echo "the broken agent failed the conformance suite, as it must"
fi
exit "$status"
