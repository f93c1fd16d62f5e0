#!/usr/bin/env bash
# Peer IPAM plugins for benchmarking netendpoint, built from the Go module
# pinned in tests/bench-peers (no peer source is vendored into this repo).
#
#   scripts/bench-peers.sh                    build tests/bin/cni/whereabouts (skipped if up to date)
#   scripts/bench-peers.sh build              same
#   scripts/bench-peers.sh crds KUBECONFIG    apply whereabouts' CRDs from the Go module cache to the
#                                             cluster and make sure its working namespace exists
#                                             (see docs/bench-peers.md)
#   scripts/bench-peers.sh conf KUBECONFIG DIR [RANGE]
#                                             write DIR/whereabouts.conf (the flat file whereabouts
#                                             requires) and DIR/whereabouts.json (network config to
#                                             feed on stdin; RANGE defaults to 10.80.0.0/20)
#   scripts/bench-peers.sh moddir             print the whereabouts module directory
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=tests/bin
mod=github.com/k8snetworkplumbingwg/whereabouts

stamp() { cat "$1"/go.mod "$1"/go.sum "$1"/*.go 2>/dev/null | sha256sum | cut -c1-16; }

moddir() {
  (cd tests/bench-peers && go mod download "$mod" && go list -m -f '{{.Dir}}' "$mod")
}

build() {
  mkdir -p "$bin/cni"
  local want version
  want=$(stamp tests/bench-peers)
  if [ -x "$bin/cni/whereabouts" ] && [ "$(cat "$bin/.bench-peers.stamp" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  version=$(cd tests/bench-peers && go list -m -f '{{.Version}}' "$mod")
  echo "building whereabouts $version (CNI IPAM plugin) into $bin/cni/whereabouts"
  local pkg=$mod/pkg/version
  (cd tests/bench-peers && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X $pkg.Version=$version -X $pkg.ReleaseStatus=released" \
    -o "$root/$bin/cni/whereabouts" "$mod/cmd")
  echo "$want" > "$bin/.bench-peers.stamp"
}

crds() {
  local kubeconfig=${1:?usage: $0 crds KUBECONFIG}
  local kubectl=("$root/$bin/kubectl" --kubeconfig "$kubeconfig")
  local dir ns
  dir=$(moddir)
  # Only these two CRDs are touched by the plugin's ADD/DEL (NodeSlicePool is
  # only read when node_slice_size is set, which the benchmark does not use).
  "${kubectl[@]}" apply \
    -f "$dir/doc/crds/whereabouts.cni.cncf.io_ippools.yaml" \
    -f "$dir/doc/crds/whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml"
  "${kubectl[@]}" wait --for condition=established --timeout=60s \
    crd/ippools.whereabouts.cni.cncf.io crd/overlappingrangeipreservations.whereabouts.cni.cncf.io
  # whereabouts keeps its IPPool, OverlappingRangeIPReservations and its
  # leader-election Lease "whereabouts" in the kubeconfig context's namespace,
  # or kube-system if the context sets none. The plugin never reads Pods, so no
  # Pod/ServiceAccount objects are needed.
  ns=$("${kubectl[@]}" config view --minify -o jsonpath='{.contexts[0].context.namespace}')
  ns=${ns:-kube-system}
  "${kubectl[@]}" get namespace "$ns" >/dev/null 2>&1 || "${kubectl[@]}" create namespace "$ns"
}

# whereabouts v0.9 refuses to load its IPAM config unless a "flat file" exists
# (configuration_path, else /etc/cni/net.d/whereabouts.d/whereabouts.conf and
# two other fixed paths): write one plus a ready-to-use network config.
conf() {
  local kubeconfig=${1:?usage: $0 conf KUBECONFIG DIR [RANGE]} dir=${2:?usage: $0 conf KUBECONFIG DIR [RANGE]}
  local range=${3:-10.80.0.0/20}
  mkdir -p "$dir"
  kubeconfig=$(cd "$(dirname "$kubeconfig")" && pwd)/$(basename "$kubeconfig")
  dir=$(cd "$dir" && pwd)
  printf '{"kubernetes":{"kubeconfig":"%s"}}\n' "$kubeconfig" > "$dir/whereabouts.conf"
  printf '{"cniVersion":"1.0.0","name":"wa","type":"whereabouts","ipam":{"type":"whereabouts","range":"%s","configuration_path":"%s","log_level":"error","kubernetes":{"kubeconfig":"%s"}}}\n' \
    "$range" "$dir/whereabouts.conf" "$kubeconfig" > "$dir/whereabouts.json"
  echo "$dir/whereabouts.json"
}

case "${1:-build}" in
  build) build ;;
  crds) shift; crds "$@" ;;
  conf) shift; conf "$@" ;;
  moddir) moddir ;;
  *) echo "usage: $0 [build | crds KUBECONFIG | conf KUBECONFIG DIR [RANGE] | moddir]" >&2; exit 2 ;;
esac
