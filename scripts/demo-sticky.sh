#!/usr/bin/env bash
# Sticky IPs: a StatefulSet pod is deleted and recreated in a full pool while
# an agent still tears down its old rule. netendpoint-controller made the
# Pod's claim; the claim's hold keeps the address; the new Pod's ADD asks the
# hold for the next incarnation, which the controller creates once the agent
# has acknowledged the old one. The agent's own event log shows the release
# order: remove(old UID) before add(new UID), on the same IP.
# Runs on the embedded default: a real kube-apiserver + etcd on loopback; the
# plugin is invoked as a runtime invokes it (CNI_* environment, config on stdin).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
state="${DEMO_DIR:-$root/.demo-sticky}"
bin="$root/tests/bin"
plugin="$root/target/debug/netendpoint"
agent_bin="$root/target/debug/watcher-example"
controller_bin="$root/target/debug/netendpoint-controller"
kubectl() { "$bin/kubectl" --kubeconfig "$state/kubeconfig" "$@"; }
ts() { date +%H:%M:%S.%3N; }
say() { printf '\n[%s] %s\n' "$(ts)" "$*"; }
finalizer="demo.netendpoint.dev/route-agent"
agent_pid=""
controller_pid=""

cleanup() {
  set +e
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null
  [ -n "$controller_pid" ] && kill "$controller_pid" 2>/dev/null
  scripts/testenv.sh stop "$state"
}
trap cleanup EXIT

say "starting a real kube-apiserver + etcd on loopback"
scripts/testenv.sh start "$state"
rm -rf "$state/data" "$state/events.jsonl"
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Node
metadata: {name: demo-node}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: default}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: default}
spec:
  replicas: 1
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: example.invalid/db}]}
YAML
conf=$(cat <<CONF
{
  "cniVersion": "1.1.0", "name": "demo", "type": "netendpoint",
  "ipam": {
    "type": "netendpoint", "pool": "demo",
    "ranges": [[{"subnet": "10.98.0.0/29", "rangeStart": "10.98.0.2", "rangeEnd": "10.98.0.4"}]],
    "kubeconfig": "$state/kubeconfig", "nodeName": "demo-node", "dataDir": "$state/data",
    "finalizers": ["$finalizer"], "waitForRelease": "30s",
    "sticky": {"kinds": ["StatefulSet"], "stickyFor": "1h", "waitForOld": "30s"},
    "log": {"file": "$state/plugin.log"}
  }
}
CONF
)
say "netendpoint-controller reads the network config from a ConfigMap; ipam.sticky is on, so it makes a claim per StatefulSet Pod"
kubectl create configmap demo-net-conf --from-literal=10-demo.conf="$conf" >/dev/null
"$controller_bin" --kubeconfig "$state/kubeconfig" --identity demo --lease-namespace default \
  --net-conf default/demo-net-conf --pools-param "" --listen 127.0.0.1:0 >"$state/controller.log" 2>&1 &
controller_pid=$!
for _ in $(seq 1 300); do
  kubectl get ipamclaim db-0.demo >/dev/null 2>&1 && break
  sleep 0.1
done
kubectl get ipamclaim db-0.demo

cni() { # command container pod uid
  printf '%s' "$conf" | env -i CNI_COMMAND="$1" CNI_CONTAINERID="$2" CNI_IFNAME=eth0 CNI_NETNS=/run/netns/none \
    CNI_PATH="$root/target/debug" CNI_ARGS="K8S_POD_NAMESPACE=default;K8S_POD_NAME=$3;K8S_POD_UID=$4" "$plugin"
}
db_pod() { # creates db-0 owned by the StatefulSet, prints its UID
  local sts_uid
  sts_uid=$(kubectl get sts db -o jsonpath='{.metadata.uid}')
  kubectl create -o jsonpath='{.metadata.uid}' -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: db-0
  namespace: default
  labels: {app: db}
  ownerReferences: [{apiVersion: apps/v1, kind: StatefulSet, name: db, uid: "$sts_uid", controller: true}]
spec: {nodeName: demo-node, automountServiceAccountToken: false, containers: [{name: db, image: example.invalid/db}]}
YAML
}

say "an agent watches the leases, holds $finalizer and takes 3 s to tear a rule down"
"$agent_bin" --node demo-node --kubeconfig "$state/kubeconfig" --finalizer "$finalizer" --dataplane memory \
  --event-log "$state/events.jsonl" --teardown-delay 3s --metrics-addr 127.0.0.1:0 >"$state/agent.log" 2>&1 &
agent_pid=$!
sleep 2

say "pool 'demo' has 3 IPs; db-0 (StatefulSet db) and two other pods fill it; ipam.sticky is on"
uid1=$(db_pod)
printf '  ADD db-0 (uid %s) -> %s\n' "$uid1" "$(cni ADD sandbox-1 db-0 "$uid1" | jq -r '.ips[0].address')"
for p in web-a web-b; do
  printf '  ADD %-5s            -> %s\n' "$p" "$(cni ADD "sandbox-$p" "$p" "uid-$p" | jq -r '.ips[0].address')"
done
kubectl get nep

say "db-0 is deleted and recreated (a new UID); the new sandbox's ADD starts before the old one's DEL"
kubectl delete pod db-0 --grace-period=0 --force >/dev/null 2>&1
uid2=$(db_pod)
t_add=$(ts)
( cni ADD sandbox-2 db-0 "$uid2" | jq -r '.ips[0].address' > "$state/db-0.ip"; ts > "$state/db-0.time" ) &
waiter=$!
sleep 1
cni DEL sandbox-1 db-0 "$uid1"
t_del=$(ts)
say "the old incarnation is released; the agent is still tearing down; the claim's hold keeps the IP for db-0"
kubectl get nep
kubectl get nep demo.10.98.0.2 -o jsonpath='  hold demo.10.98.0.2: claim {.spec.claim.namespace}/{.spec.claim.name}, incarnation {.status.incarnation}, asked for {.status.request.incarnation} by node {.status.request.node}{"\n"}'
wait "$waiter"
say "db-0 (uid $uid2) got $(cat "$state/db-0.ip") at $(cat "$state/db-0.time")"
kubectl get nep
kubectl get ipamclaim db-0.demo -o jsonpath='  claim db-0.demo: status.ips {.status.ips}, owner Pod {.status.ownerPod.name}{"\n"}'

say "the agent's event log for 10.98.0.2, in the order it processed it:"
jq -r 'select(.ip=="10.98.0.2") | "  \(.ts)  \(.kind)  uid=\(.uid)"' "$state/events.jsonl"
cat <<SUMMARY

  summary
    new sandbox's ADD started       $t_add
    old sandbox's DEL               $t_del
    new sandbox got the same IP     $(cat "$state/db-0.time")   ($(cat "$state/db-0.ip"))
  The agent removed the old incarnation's rule before it added the new one's:
  DELETED(old) came before ADDED(new), with the same IP, and the hold kept
  the name demo.10.98.0.2 throughout, so no other pod could take the IP.
SUMMARY
