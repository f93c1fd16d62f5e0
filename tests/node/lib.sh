# Shared by the real-node scripts: paths and helpers. Sourced, not run.
# Everything the node writes lives under $NODE_DIR (default: the repository's
# gitignored .node/); see docs/testing.md, "A real node", for the few things
# outside it.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NODE_DIR=${NODE_DIR:-$repo/.node}
nbin=$repo/tests/bin/node
tbin=$repo/tests/bin
sock=$NODE_DIR/ctd/containerd.sock
# kubectl logs/exec reach the kubelet by the node's name, so the node is named
# after the host.
NODE_NAME=${NODE_NAME:-$(hostname)}
# The bridge the pods hang off; up.sh makes it and gives it NODE_API_IP,
# down.sh deletes it.
NODE_BRIDGE=${NODE_BRIDGE:-nee2e0}
# The API server listens on the bridge's address, port 443, and that address
# is also the ClusterIP of the `kubernetes` Service (the first address of the
# Service range): so Pods reach the API server at KUBERNETES_SERVICE_HOST,
# from the host network and from the pod network (an address on their own
# link), with no kube-proxy. Nothing of this leaves the machine.
NODE_API_IP=${NODE_API_IP:-10.250.0.241}
NODE_SERVICE_CIDR=${NODE_SERVICE_CIDR:-10.250.0.240/28}
export PATH="$nbin:$tbin:$PATH"
# kubectl's discovery cache, not in ~/.kube.
export KUBECACHEDIR="$NODE_DIR/kube-cache"

kc() { "$tbin/kubectl" --kubeconfig "$NODE_DIR/api/kubeconfig" "$@"; }
kns() { kc -n netendpoint-system "$@"; }
crictl() { "$nbin/crictl" --config "$NODE_DIR/crictl.yaml" "$@"; }
ctr() { "$nbin/ctr" --address "$sock" "$@"; }
# Runs a command in the node's mount namespace (see up.sh), where kubelet,
# containerd, runc and the CNI plugins run.
in_node() { nsenter --mount="/proc/$(cat "$NODE_DIR/pids/node-ns")/ns/mnt" -- "$@"; }
ts() { date -u +%H:%M:%S.%3N; }
say() { printf '[%s] %s\n' "$(ts)" "$*"; }
# ms since the epoch
now_ms() { date +%s%3N; }
# user_dir IMAGES [DEPLOY]: the directory where the docs' commands run
# (tests/node/docs-run.sh): deploy/ is an overlay of the IMAGES overlay (made
# by scripts/images.sh, which swaps the image references of DEPLOY), with
# DEPLOY's files that the docs apply on their own; 10-netendpoint.conflist is
# the node's network config; bin/kubectl talks to the node's API server, and
# bin/kubectl-netendpoint is the kubectl plugin.
user_dir() {
  local images=$1 deploy=${2:-$repo/deploy} user=$NODE_DIR/user f
  mkdir -p "$user/deploy" "$user/bin"
  rm -f "$user/deploy"/*.yaml
  printf 'resources:\n  - %s\n' "$(realpath --relative-to="$user/deploy" "$images")" > "$user/deploy/kustomization.yaml"
  for f in namespace.yaml agents.yaml; do [ ! -f "$deploy/$f" ] || cp "$deploy/$f" "$user/deploy/"; done
  cp "$NODE_DIR/install/10-netendpoint.conflist" "$user/"
  # KUBECONFIG rather than --kubeconfig: kubectl finds a plugin only before its first flag.
  printf '#!/bin/sh\nexport KUBECONFIG=%q\nexec %q "$@"\n' "$NODE_DIR/api/kubeconfig" "$tbin/kubectl" > "$user/bin/kubectl"
  # The kubectl plugin, as docs/install.md installs it (on PATH).
  printf '#!/bin/sh\nexec %q "$@"\n' "${CARGO_TARGET_DIR:-$repo/target}/debug/kubectl-netendpoint" > "$user/bin/kubectl-netendpoint"
  chmod +x "$user/bin/kubectl" "$user/bin/kubectl-netendpoint"
}
# node_lock: with NETENDPOINT_E2E_LOCK set (a file path), waits until no
# other kubelet runs on this machine and takes that lock for the rest of the
# calling script, so that two runs sharing a machine (kubelet's port is
# fixed) take turns. Call it after the builds, right before tests/node/up.sh.
node_lock() {
  [ -n "${NETENDPOINT_E2E_LOCK:-}" ] || return 0
  say "waiting for the real-node lock $NETENDPOINT_E2E_LOCK"
  while pgrep -x kubelet >/dev/null; do sleep 5; done
  exec 9>"$NETENDPOINT_E2E_LOCK"
  flock 9
  while pgrep -x kubelet >/dev/null; do sleep 5; done
}
