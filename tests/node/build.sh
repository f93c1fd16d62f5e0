#!/usr/bin/env bash
# Builds the real node's binaries into tests/bin/node (gitignored): containerd,
# ctr and containerd-shim-runc-v2, runc (cgo, seccomp: Debian's
# libseccomp-dev from apt when missing), crictl, kubelet,
# kube-controller-manager and kube-scheduler (from the module in
# tests/node/kube, whose replace block matches tests/kube-testenv), and the
# pause image's binary. A binary that is present is not rebuilt (the three
# Kubernetes ones are when tests/node/kube/go.mod or go.sum change); delete
# it to rebuild. Builds run under `nice -n 19`.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$PWD/tests/bin/node
mkdir -p "$bin"
export GOBIN=$bin
go=(nice -n 19 go)

containerd_version=v2.4.2
runc_version=v1.5.3
crictl_version=v1.37.0

timed() { local s; s=$(date +%s); "$@"; echo "  built in $(( $(date +%s) - s )) s"; }

if [ ! -x "$bin/containerd" ] || [ ! -x "$bin/ctr" ] || [ ! -x "$bin/containerd-shim-runc-v2" ]; then
  echo "building containerd $containerd_version, ctr, containerd-shim-runc-v2"
  v=github.com/containerd/containerd/v2/version
  timed "${go[@]}" install -trimpath \
    -ldflags "-s -w -X $v.Version=$containerd_version -X $v.Revision=netendpoint-e2e -X $v.Package=github.com/containerd/containerd/v2" \
    "github.com/containerd/containerd/v2/cmd/containerd@$containerd_version" \
    "github.com/containerd/containerd/v2/cmd/ctr@$containerd_version" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$containerd_version"
fi

if [ ! -x "$bin/runc" ]; then
  if ! dpkg -s libseccomp-dev >/dev/null 2>&1; then
    echo "installing libseccomp-dev (runc's seccomp support)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev >/dev/null; }
  fi
  echo "building runc $runc_version"
  CGO_ENABLED=1 timed "${go[@]}" install -trimpath -tags "seccomp urfave_cli_no_docs" \
    -ldflags "-X main.version=${runc_version#v} -X main.gitCommit=netendpoint-e2e" \
    "github.com/opencontainers/runc@$runc_version"
fi

if [ ! -x "$bin/crictl" ]; then
  echo "building crictl $crictl_version"
  timed "${go[@]}" install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$crictl_version" \
    "sigs.k8s.io/cri-tools/cmd/crictl@$crictl_version"
fi

k8s_version=$(awk '$1=="k8s.io/kubernetes"{print $2} $1=="require" && $2=="k8s.io/kubernetes"{print $3}' \
  tests/node/kube/go.mod | head -n1)
# The binaries refuse to start with an empty version.
[ -n "$k8s_version" ] || { echo "no k8s.io/kubernetes version in tests/node/kube/go.mod" >&2; exit 1; }
minor=$(echo "$k8s_version" | cut -d. -f2)
pkg=k8s.io/component-base/version
# These three are rebuilt when the module changes (a new Kubernetes release).
stamp=$(cat tests/node/kube/go.mod tests/node/kube/go.sum | sha256sum | cut -c1-16)
[ "$(cat "$bin/.kube.stamp" 2>/dev/null)" = "$stamp" ] || rm -f "$bin/kubelet" "$bin/kube-controller-manager" "$bin/kube-scheduler"
for cmd in kubelet kube-controller-manager kube-scheduler; do
  [ ! -x "$bin/$cmd" ] || continue
  echo "building $cmd $k8s_version (kubelet: about 3 min cold, 1.5 min warm on 2 cores)"
  (cd tests/node/kube && timed "${go[@]}" build -trimpath -o "$bin/$cmd" \
    -ldflags "-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean" \
    "k8s.io/kubernetes/cmd/$cmd")
done
echo "$stamp" > "$bin/.kube.stamp"

if [ ! -x "$bin/pause" ] || [ tests/node/images/pause/main.go -nt "$bin/pause" ]; then
  echo "building pause"
  (cd tests/node/images/pause && CGO_ENABLED=0 "${go[@]}" build -trimpath -ldflags "-s -w" -o "$bin/pause" .)
fi
echo "node binaries in $bin"
