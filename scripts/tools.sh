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

# Helm 3 beside Helm 4: the documented install runs with both (scripts/chart-test.sh).
want=$(stamp tests/helm3-tools)
if [ ! -x "$bin/helm3" ] || [ "$(cat "$bin/.helm3-tools.stamp" 2>/dev/null)" != "$want" ]; then
  helm3_version=$(awk '$1=="require" && $2=="helm.sh/helm/v3"{print $3}' tests/helm3-tools/go.mod | head -n1)
  echo "building helm $helm3_version as helm3"
  (cd tests/helm3-tools && go build -trimpath -o ../bin/helm3 \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$helm3_version -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
    helm.sh/helm/v3/cmd/helm)
  echo "$want" > "$bin/.helm3-tools.stamp"
fi

want=$(stamp tests/helm-tools)
if [ ! -x "$bin/helm" ] || [ "$(cat "$bin/.helm-tools.stamp" 2>/dev/null)" != "$want" ]; then
  helm_version=$(awk '$1=="helm.sh/helm/v4"{print $2} $1=="require" && $2=="helm.sh/helm/v4"{print $3}' tests/helm-tools/go.mod | head -n1)
  echo "building helm $helm_version"
  (cd tests/helm-tools && go build -trimpath -o ../bin/helm \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
    helm.sh/helm/v4/cmd/helm)
  echo "$want" > "$bin/.helm-tools.stamp"
fi
