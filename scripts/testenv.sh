#!/usr/bin/env bash
# start DIR | stop DIR | resume DIR: runs the real API server for tests and
# the demo. start waits until /readyz answers and installs the NetworkEndpoint
# CRD (not with TESTENV_BARE=1: a fresh cluster); TESTENV_FLAGS adds flags of
# `kube-testenv serve` (e.g. --address).
# resume starts a stopped server again with its etcd data, PKI, address, port
# and flags, so every kubeconfig and token issued before still works (an API
# server restart, as the real-node scenarios need).
set -euo pipefail
cd "$(dirname "$0")/.."
# The kubectl built with the test API server (scripts/tools.sh), as new as it.
kubectl() { if [ -x tests/bin/kubectl ]; then tests/bin/kubectl "$@"; else command kubectl "$@"; fi; }
cmd=${1:?start|stop}
dir=${2:-.testenv}
case "$cmd" in
  start)
    "$0" stop "$dir" >/dev/null 2>&1 || true
    mkdir -p "$dir"
    # A server that was killed leaves its ready file behind: never wait on that one.
    rm -f "$dir/ready"
    # What resume needs to start the same server again.
    [ -n "${TESTENV_RESUMING:-}" ] || echo "${TESTENV_FLAGS:-}" > "$dir/serve.flags"
    setsid tests/bin/kube-testenv serve --dir "$dir" ${TESTENV_FLAGS:-} >"$dir/apiserver.log" 2>&1 < /dev/null &
    if ! tests/bin/kube-testenv wait --dir "$dir" --timeout 3m; then
      tail -n 30 "$dir/apiserver.log" >&2
      exit 1
    fi
    # A bare server (TESTENV_BARE=1) is a fresh cluster, as a user installs on.
    [ -z "${TESTENV_BARE:-}" ] || exit 0
    # netendpoint's CRDs, the IPAMClaim API its sticky claims use, and
    # KubeVirt's VirtualMachineInstance API a VM's live migration is read from.
    kubectl --kubeconfig "$dir/kubeconfig" apply -f deploy/crd.yaml -f tests/fixtures/ipamclaims-crd.yaml \
      -f tests/fixtures/kubevirt-vmi-crd.yaml >/dev/null
    kubectl --kubeconfig "$dir/kubeconfig" wait --for condition=established --timeout=60s \
      crd/networkendpoints.netendpoint.dev crd/networkendpointshards.netendpoint.dev \
      crd/networkendpointneeds.netendpoint.dev crd/ipamclaims.k8s.cni.cncf.io \
      crd/virtualmachineinstances.kubevirt.io >/dev/null
    ;;
  resume)
    server=$(sed -n 's/^ *server: *//p' "$dir/kubeconfig" | head -n1)
    hostport=${server#https://}
    port=${hostport##*:} address=${hostport%:*}
    address=${address#[} address=${address%]}
    [ -n "$port" ] && [ -n "$address" ] || { echo "no server in $dir/kubeconfig" >&2; exit 1; }
    TESTENV_RESUMING=1 TESTENV_FLAGS="$(cat "$dir/serve.flags" 2>/dev/null) --keep-data --address $address --port $port" \
      exec "$0" start "$dir"
    ;;
  stop)
    pid=$(cat "$dir/pid" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    ;;
  *) echo "usage: $0 start|stop|resume [DIR]" >&2; exit 2 ;;
esac
