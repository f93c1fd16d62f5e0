#!/usr/bin/env bash
# Builds the test tooling from Go modules into tests/bin, reusing Go's build
# and module caches: the real kube-apiserver + etcd (kube-testenv), the
# reference CNI plugins and cnitool, helm 4 (which lints and renders the
# chart) and helm 3 (the documented Helm install runs with both). Rebuilds
# only when go.mod/go.sum or the sources changed.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=tests/bin
mkdir -p "$bin/cni"

stamp() { cat "$1"/go.mod "$1"/go.sum "$1"/*.go 2>/dev/null | sha256sum | cut -c1-16; }

k8s_version=$(awk '$1=="k8s.io/kubernetes"{print $2}' tests/kube-testenv/go.mod | head -n1)
want=$(stamp tests/kube-testenv)
if [ ! -x "$bin/kube-testenv" ] || [ "$(cat "$bin/.kube-testenv.stamp" 2>/dev/null)" != "$want" ]; then
  echo "building kube-testenv (kube-apiserver $k8s_version + embedded etcd); a cold build takes ~10 min on 2 cores"
  minor=$(echo "$k8s_version" | cut -d. -f2)
  pkg=k8s.io/component-base/version
  (cd tests/kube-testenv && go build -trimpath -o ../bin/ \
    -ldflags "-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean" \
    . k8s.io/kubernetes/cmd/kubectl)
  echo "$want" > "$bin/.kube-testenv.stamp"
fi

want=$(stamp tests/cni-tools)
if [ ! -x "$bin/cni/bridge" ] || [ "$(cat "$bin/.cni-tools.stamp" 2>/dev/null)" != "$want" ]; then
  echo "building reference CNI plugins and cnitool"
  (cd tests/cni-tools && for p in \
      github.com/containernetworking/plugins/plugins/main/bridge \
      github.com/containernetworking/plugins/plugins/main/ptp \
      github.com/containernetworking/plugins/plugins/main/loopback \
      github.com/containernetworking/plugins/plugins/main/macvlan \
      github.com/containernetworking/plugins/plugins/ipam/host-local \
      github.com/containernetworking/plugins/plugins/meta/portmap \
      github.com/containernetworking/cni/cnitool; do
    go build -trimpath -ldflags "-s -w" -o ../bin/cni/ "$p"
  done)
  echo "$want" > "$bin/.cni-tools.stamp"
fi

# build_helm DIR MAJOR OUT: helm vMAJOR, at the version DIR/go.mod pins, as
# tests/bin/OUT. Helm 4 lints and renders the chart; Helm 3 beside it, as
# most users still run it: the documented install runs with both
# (scripts/chart-test.sh).
build_helm() {
  local dir=$1 out=$3 module=helm.sh/helm/v$2 version want
  want=$(stamp "$dir")
  if [ ! -x "$bin/$out" ] || [ "$(cat "$bin/.$out-tools.stamp" 2>/dev/null)" != "$want" ]; then
    version=$(awk -v m="$module" '$1==m{print $2} $1=="require" && $2==m{print $3}' "$dir/go.mod" | head -n1)
    echo "building helm $version as $out"
    (cd "$dir" && go build -trimpath -o "../bin/$out" \
      -ldflags "-s -w -X $module/internal/version.version=$version -X $module/internal/version.gitTreeState=clean" \
      "$module/cmd/helm")
    echo "$want" > "$bin/.$out-tools.stamp"
  fi
}
build_helm tests/helm-tools 4 helm
build_helm tests/helm3-tools 3 helm3
