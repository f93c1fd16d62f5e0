#!/usr/bin/env bash
# The main job: a local demo on the embedded default, a real kube-apiserver +
# etcd on loopback. The reference bridge plugin delegates IPAM to netendpoint
# in real network namespaces, in a pool of three IPs. One pod is deleted and
# its replacement added at once while an agent's finalizer still holds the old
# IP: the replacement waits, and gets the IP only after the finalizer is gone.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
state="${DEMO_DIR:-$root/.demo}"
bin="$root/tests/bin"
kubectl() { "$bin/kubectl" --kubeconfig "$state/kubeconfig" "$@"; }
ts() { date +%H:%M:%S.%3N; }
# `kubectl netendpoint`: kubectl finds the plugin binary on PATH (plugin lookup
# stops at the first flag, so the kubeconfig comes from KUBECONFIG).
knep() { KUBECONFIG="$state/kubeconfig" PATH="$root/target/debug:$PATH" "$bin/kubectl" netendpoint "$@"; }
say() { printf '\n[%s] %s\n' "$(ts)" "$*"; }

pods=(pod-a pod-b pod-c)
finalizer="demo.netendpoint.dev/route-agent"
netdir="$state/net.d"

cleanup() {
  set +e
  for p in "${pods[@]}" pod-b2; do
    ip netns pids "demo-$p" >/dev/null 2>&1 && NETCONFPATH="$netdir" CNI_PATH="$bin/cni:$root/target/debug" \
      "$bin/cni/cnitool" del demo "/run/netns/demo-$p" >/dev/null 2>&1
    ip netns del "demo-$p" 2>/dev/null
  done
  ip link del nedemo0 2>/dev/null
  scripts/testenv.sh stop "$state"
}
trap cleanup EXIT

say "starting a real kube-apiserver + etcd on loopback"
scripts/testenv.sh start "$state"
kubectl version 2>/dev/null | grep -i "server version"

rm -rf "$state/data"
mkdir -p "$netdir"
# The plugin leases only under a registered node name (a kubelet registers it in a real cluster).
printf 'apiVersion: v1\nkind: Node\nmetadata:\n  name: demo-node\n' | kubectl apply -f - >/dev/null
cat > "$netdir/10-demo.conf" <<CONF
{
  "cniVersion": "1.1.0",
  "name": "demo",
  "type": "bridge",
  "bridge": "nedemo0",
  "isGateway": true,
  "ipam": {
    "type": "netendpoint",
    "pool": "demo",
    "ranges": [[{"subnet": "10.99.0.0/29", "rangeStart": "10.99.0.2", "rangeEnd": "10.99.0.4"}]],
    "kubeconfig": "$state/kubeconfig",
    "nodeName": "demo-node",
    "finalizers": ["$finalizer"],
    "waitForRelease": "45s",
    "dataDir": "$state/data",
    "log": {"file": "$state/plugin.log"}
  }
}
CONF
export NETCONFPATH="$netdir" CNI_PATH="$bin/cni:$root/target/debug"

add() { # pod -> prints the IP
  ip netns add "demo-$1" 2>/dev/null || true
  CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=$1" \
    "$bin/cni/cnitool" add demo "/run/netns/demo-$1" | jq -r '.ips[0].address'
}

say "pool 'demo' has 3 usable IPs (10.99.0.2-10.99.0.4); every lease carries the finalizer $finalizer"
for p in "${pods[@]}"; do
  printf '  ADD %-6s -> %s\n' "$p" "$(add "$p")"
done
say "inside pod-a's network namespace:"
ip netns exec demo-pod-a ip -4 -o addr show dev eth0 | awk '{print "  " $2 " " $4}'
say "kubectl get nep"
kubectl get nep

say "DEL pod-b (its sandbox is gone) and, at the same moment, ADD its replacement pod-b2"
"$bin/cni/cnitool" del demo /run/netns/demo-pod-b
t_del=$(ts)
ip netns del demo-pod-b
( add pod-b2 > "$state/pod-b2.ip"; ts > "$state/pod-b2.time" ) &
waiter=$!
sleep 2
old=$(kubectl get nep -o json | jq -r '.items[] | select(.spec.pod.name=="pod-b") | .metadata.name')
say "2 s later: the pool is full, the old lease $old is releasing and waits on the agent; pod-b2 waits too"
kubectl get nep
echo
kubectl describe nep "$old" | sed -n '/^Metadata/,/^Spec/p;/^  Pod:/,/^  Pool/p' | grep -E 'Deletion Timestamp|Finalizers|route-agent|Name:|Namespace:' | sed 's/^/  /'
oldip=$(kubectl get nep "$old" -o jsonpath='{.spec.ip}')
say "kubectl netendpoint why $oldip   (who holds it, since when, what the release waits on, the Events)"
knep why "$oldip" | sed 's/^/  /'
say "kubectl netendpoint pools   (ranges read from the network config; in a cluster, from the installer's ConfigMap)"
knep pools --config "$netdir/10-demo.conf" | sed 's/^/  /'
[ -s "$state/pod-b2.ip" ] && { echo "pod-b2 got an IP before the release: invariant broken" >&2; exit 1; }

say "the agent has torn down its rule for pod-b and removes ONLY its finalizer, ONLY from that object (JSON patch: test uid + test + remove)"
uid=$(kubectl get nep "$old" -o jsonpath='{.metadata.uid}')
kubectl patch nep "$old" --type=json -p "[{\"op\":\"test\",\"path\":\"/metadata/uid\",\"value\":\"$uid\"},{\"op\":\"test\",\"path\":\"/metadata/finalizers/0\",\"value\":\"$finalizer\"},{\"op\":\"remove\",\"path\":\"/metadata/finalizers/0\"}]" >/dev/null
t_ack=$(ts)
wait "$waiter"
say "pod-b2 got $(cat "$state/pod-b2.ip") at $(cat "$state/pod-b2.time")"
cat <<SUMMARY

  summary
    DEL pod-b requested the release    $t_del
    agent removed its finalizer        $t_ack
    pod-b2 was handed the IP           $(cat "$state/pod-b2.time")   ($(cat "$state/pod-b2.ip"))
  The replacement got the IP only after the last finalizer was cleared: an agent
  watching NetworkEndpoints sees pod-b's DELETED before pod-b2's ADDED.
SUMMARY
pods+=(pod-b2)
say "kubectl get nep"
kubectl get nep
say "kubectl netendpoint pools"
knep pools --config "$netdir/10-demo.conf" | sed 's/^/  /'
say "plugin log (stderr/stdin never go to stdout; stdin is never logged):"
tail -n 4 "$state/plugin.log" | sed 's/^/  /'
