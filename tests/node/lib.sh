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
# The bridge the pods hang off; down.sh deletes it.
NODE_BRIDGE=${NODE_BRIDGE:-nee2e0}
export PATH="$nbin:$tbin:$PATH"
# kubectl's discovery cache, not in ~/.kube.
export KUBECACHEDIR="$NODE_DIR/kube-cache"

kc() { "$tbin/kubectl" --kubeconfig "$NODE_DIR/api/kubeconfig" "$@"; }
crictl() { "$nbin/crictl" --config "$NODE_DIR/crictl.yaml" "$@"; }
ctr() { "$nbin/ctr" --address "$sock" "$@"; }
ts() { date -u +%H:%M:%S.%3N; }
say() { printf '[%s] %s\n' "$(ts)" "$*"; }
# ms since the epoch
now_ms() { date +%s%3N; }
