#!/usr/bin/env bash
# Waits until the API server enforces the admission policies of deploy/:
# policies take effect a moment after they are created, so a lease from a
# plugin token bound to no node must be refused (a server-side dry run).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
"$tbin/kube-testenv" sa-kubeconfig --dir "$NODE_DIR/api" --namespace netendpoint-system \
  --name netendpoint-cni --out "$NODE_DIR/install/unbound-kubeconfig"
# A lease that every other policy admits (its labels mirror its spec, its
# address is inside the pool's first range), so that the only refusal left
# is the one this waits for. The dry run stores nothing.
probe_lease='{"apiVersion": "netendpoint.dev/v1alpha1", "kind": "NetworkEndpoint",
  "metadata": {"name": "e2e.10.250.0.10", "labels": {"netendpoint.dev/pool": "e2e",
    "netendpoint.dev/node": "'"$NODE_NAME"'", "netendpoint.dev/ip-family": "4",
    "netendpoint.dev/block": "10.250.0.0"}},
  "spec": {"pool": "e2e", "ip": "10.250.0.10", "prefixLength": 24, "node": "'"$NODE_NAME"'",
           "containerID": "policy-probe", "ifName": "eth0"}}'
refused() {
  local out
  out=$("$tbin/kubectl" --kubeconfig "$NODE_DIR/install/unbound-kubeconfig" create --dry-run=server -f - \
    <<<"$probe_lease" 2>&1) || true
  last=$out
  [[ "$out" == *"bound to no node"* ]]
}
held=0
last=
for _ in $(seq 1 100); do refused && { held=1; break; }; sleep 0.2; done
rm -f "$NODE_DIR/install/unbound-kubeconfig"
[ "$held" = 1 ] || { echo "the admission policies did not take effect; the last answer to the probe: $last" >&2; exit 1; }
