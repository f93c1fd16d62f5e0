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

# The documented Helm install (docs/install.md, "With Helm"), word for word,
# with Helm 4 and with Helm 3, each on a fresh API server of its own (no
# netendpoint object before it): the release is deployed with its objects,
# and it uninstalls. Pods need a node: the real node's e2e runs those.
block=$(scripts/docs-block.sh helm-install)
for h in helm helm3; do
  dir="${TESTENV:-$PWD/.testenv}-$h"
  TESTENV_BARE=1 scripts/testenv.sh start "$dir" >/dev/null
  user=$(mktemp -d)
  mkdir "$user/bin"
  ln -s "$PWD/deploy" "$user/deploy"
  ln -s "$PWD/tests/bin/$h" "$user/bin/helm"
  ln -s "$PWD/tests/bin/kubectl" "$user/bin/kubectl"
  printf 'pools:\n  - name: pods\n    ranges: [[{subnet: 10.244.0.0/16}]]\n' > "$user/my-pools.yaml"
  version=$("$user/bin/helm" version --short)
  run() { (cd "$user" && PATH="$user/bin:$PATH" KUBECONFIG="$dir/kubeconfig" bash -euo pipefail -c "$1"); }
  if ! run "$block" > "$user/install.log" 2>&1; then
    cat "$user/install.log" >&2
    scripts/testenv.sh stop "$dir"
    echo "chart: the documented Helm install failed with helm $version" >&2
    exit 1
  fi
  if ! run 'helm status netendpoint -n netendpoint-system -o json | jq -e ".info.status == \"deployed\"" >/dev/null
      kubectl wait --for condition=established --timeout=60s crd/networkendpoints.netendpoint.dev crd/networkendpointpools.netendpoint.dev >/dev/null
      kubectl -n netendpoint-system get daemonset/netendpoint-installer daemonset/netendpoint-watcher-example \
        deployment/netendpoint-controller configmap/netendpoint-net-conf configmap/netendpoint-agents >/dev/null
      kubectl get validatingadmissionpolicy netendpoint-agent netendpoint-lease-integrity >/dev/null
      kubectl -n netendpoint-system get configmap netendpoint-net-conf -o jsonpath="{.data}" | grep -q 10-netendpoint.conflist
      helm uninstall netendpoint -n netendpoint-system >/dev/null' > "$user/check.log" 2>&1; then
    cat "$user/check.log" >&2
    scripts/testenv.sh stop "$dir"
    echo "chart: after the documented Helm install with helm $version, the release or its objects are missing" >&2
    exit 1
  fi
  scripts/testenv.sh stop "$dir"
  rm -rf "$user"
  echo "chart: the documented Helm install works with helm $version on a fresh cluster, and uninstalls"
done
