#!/usr/bin/env bash
# chart-test.sh [KUBECONFIG]: the Helm chart deploy/helm/netendpoint:
# `helm lint` with its defaults and with ci/pools-values.yaml (every
# template rendered), deploy/ is its render and both make the same objects
# (scripts/render-deploy.sh --check); with a KUBECONFIG, `helm template |
# kubectl apply --dry-run=server` against that API server, with the defaults
# into netendpoint-system and with ci/pools-values.yaml into another
# namespace. make test runs both halves.
set -euo pipefail
cd "$(dirname "$0")/.."
helm=tests/bin/helm kubectl=tests/bin/kubectl
chart=deploy/helm/netendpoint
if [ $# -eq 0 ]; then
  "$helm" lint --strict "$chart" >/dev/null
  "$helm" lint --strict "$chart" -f "$chart/ci/pools-values.yaml" >/dev/null
  echo "chart: helm lint passed (defaults, ci/pools-values.yaml)"
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
