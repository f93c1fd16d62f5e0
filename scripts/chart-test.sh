#!/usr/bin/env bash
# chart-test.sh [KUBECONFIG]: the Helm chart deploy/helm/netendpoint:
# `helm lint` with its defaults and with ci/pools-values.yaml (every
# template rendered), refusing bad values (values.schema.json), deploy/ is its render and both make the same objects
# (scripts/render-deploy.sh --check); with a KUBECONFIG, `helm template |
# kubectl apply --dry-run=server` against that API server, with the defaults
# into netendpoint-system and with ci/pools-values.yaml into another
# namespace, and the chart's value agents checked by `kubectl netendpoint
# agents` (registered and stamped in one step). make test runs both halves.
set -euo pipefail
cd "$(dirname "$0")/.."
helm=tests/bin/helm kubectl=tests/bin/kubectl
chart=deploy/helm/netendpoint
if [ $# -eq 0 ]; then
  "$helm" lint --strict "$chart" >/dev/null
  "$helm" lint --strict "$chart" -f "$chart/ci/pools-values.yaml" >/dev/null
  echo "chart: helm lint passed (defaults, ci/pools-values.yaml)"
  # values.schema.json refuses a misspelt key and a value of the wrong type.
  for bad in controller.replica=2 controller.replicas=two crossNode=nodes namespace.create=yes; do
    if "$helm" lint --strict "$chart" --set "$bad" >/dev/null 2>&1; then
      echo "chart: helm lint --strict accepted the bad value $bad (values.schema.json)" >&2
      exit 1
    fi
  done
  echo "chart: helm lint --strict refuses a misspelt key and values of the wrong type"
  scripts/render-deploy.sh --check
  exit 0
fi
kc() { "$kubectl" --kubeconfig "$1" "${@:2}"; }
kubeconfig=$1
# A server dry run cannot make objects in a namespace that does not exist.
kc "$kubeconfig" apply -f deploy/namespace.yaml >/dev/null
"$helm" template netendpoint "$chart" --namespace netendpoint-system |
  kc "$kubeconfig" apply --dry-run=server -f - >/dev/null
kc "$kubeconfig" create namespace netendpoint-helm --dry-run=client -o yaml |
  kc "$kubeconfig" label --local -f - pod-security.kubernetes.io/enforce=privileged -o yaml |
  kc "$kubeconfig" apply -f - >/dev/null
"$helm" template netendpoint "$chart" --namespace netendpoint-helm -f "$chart/ci/pools-values.yaml" \
  --set namespace.create=false | kc "$kubeconfig" apply --dry-run=server -f - >/dev/null
echo "chart: helm template | kubectl apply --dry-run=server passed (defaults; ci/pools-values.yaml in another namespace)"

# Registering an agent with the chart is one step: its line in the value
# `agents` both registers it (the agents list) and stamps its finalizer on
# every pool's leases (the network configs). The two ConfigMaps the chart
# renders from ci/pools-values.yaml, applied for real into a namespace of
# their own, must satisfy `kubectl netendpoint agents` for that agent.
ns=netendpoint-agents-check-$$
kc "$kubeconfig" create namespace "$ns" --dry-run=client -o yaml | kc "$kubeconfig" apply -f - >/dev/null
"$helm" template netendpoint "$chart" --namespace "$ns" -f "$chart/ci/pools-values.yaml" --set namespace.create=false \
    --show-only templates/agents.yaml --show-only templates/net-conf.yaml |
  kc "$kubeconfig" apply -f - >/dev/null
# Other tests' leases may leave other finalizers unregistered here, and make
# the command exit 1: only this agent's row is judged.
report=$(target/debug/kubectl-netendpoint --kubeconfig "$kubeconfig" agents -o json \
  --agents "$ns/netendpoint-agents" --net-conf "$ns/netendpoint-net-conf" 2>/dev/null || true)
row=$(jq -c '.agents[] | select(.finalizer == "routes.example.com/agent")' <<<"$report")
kc "$kubeconfig" delete namespace "$ns" --wait=false >/dev/null
if ! jq -e '.problem == null and .registeredBy == ["my-agents.route-agent"]
    and .stampedBy == ["pods (pool pods)", "storage (pool storage)"]' <<<"${row:-null}" >/dev/null; then
  echo "chart: the value agents did not both register and stamp routes.example.com/agent: ${row:-no row}" >&2
  exit 1
fi
echo "chart: one line of the value agents registers the agent and stamps its finalizer on every pool"
