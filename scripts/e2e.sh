#!/usr/bin/env bash
# make e2e: a real node (tests/node: kubelet, containerd, runc, the test API
# server) drives netendpoint. Brings the node up, runs the scenarios, prints
# the figures, and tears the node down on exit, pass or fail. Needs root.
#
# No kube-controller-manager or kube-scheduler runs in this slice: the pods are
# bare Pods with spec.nodeName, and a "replacement" is created by the script.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/node/lib.sh
pods=3
export NODE_POOL_SIZE=$pods
fail() { echo "E2E FAILED: $*" >&2; exit 1; }
# E2E_SCENARIOS picks scenarios after A (which every run needs), e.g. "A" for
# `make demo-node`; default all. E2E_SHOW=1 prints the leases and the agent's
# log of the reused IP after A.
want() { [[ ",${E2E_SCENARIOS:-A,B,C,D}," == *",$1,"* ]]; }

# Printed after the teardown, whose sandbox removals send the last DELs.
figures() {
  echo
  say "== figures (plugin log at debug level; DELs include the teardown's)"
  log=$NODE_DIR/logs/plugin.log
  count() { grep 'invocation' "$log" | grep -c "command=\"\?$1\"\?" || true; }
  echo "  ADD: $(count ADD)  DEL: $(count DEL)  STATUS: $(count STATUS)  CHECK: $(count CHECK)  GC: $(count GC)"
  echo "  DELs with an empty netns: $(grep 'invocation' "$log" | grep "command=\"\?DEL\"\?" | grep -c 'netns="\?empty' || true)"
  echo "  CNI_ARGS keys containerd passed: $(grep 'invocation' "$log" | grep "command=\"\?ADD\"\?" | sed -n 's/.*cni_args=\([^ ]*\).*/\1/p' | sort -u | tr '\n' ' ')"
  echo "  $pods pods to Running: ${t_all} ms; delete-and-replace to Running: ${t_repl} ms"
  echo "  e2e total: $(( $(date +%s) - t0 )) s"
  say "E2E PASSED"
}

cleanup() {
  local rc=$?
  if [ "$rc" != 0 ] && [ -d "$NODE_DIR/logs" ]; then
    for f in kubelet containerd agent plugin; do
      echo "--- last lines of $f.log" >&2; tail -n 15 "$NODE_DIR/logs/$f.log" >&2 2>/dev/null
    done
  fi
  tests/node/down.sh
  [ "$rc" != 0 ] || figures
  exit "$rc"
}
trap cleanup EXIT

t0=$(date +%s)
tests/node/build.sh
nice -n 19 cargo build --workspace --bins
tests/node/up.sh

# A bare Pod on this node running the pause binary.
pod() {
  kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default, labels: {app: e2e}}
spec:
  nodeName: $NODE_NAME
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
  containers:
  - {name: main, image: localhost/netendpoint-e2e/pause:1, imagePullPolicy: Never}
YAML
}
pod_ip() { kc get pod "$1" -o jsonpath='{.status.podIP}'; }
running() { [ "$(kc get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null)" = Running ]; }
wait_running() { # pod timeout_s
  local end=$(( $(date +%s) + $2 ))
  until running "$1"; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.2; done
}
lease_of() { # ip -> "name uid deleting"
  kc get nep -o json | jq -r --arg ip "$1" \
    '.items[] | select(.spec.ip == $ip) | "\(.metadata.name) \(.metadata.uid) \(.metadata.deletionTimestamp != null)"'
}
sandbox_ready() { # pod -> 0 when a READY sandbox of that pod exists
  [ -n "$(crictl pods --name "^$1\$" --state ready -q 2>/dev/null)" ]
}

echo
say "== scenario A (seed): a pool of $pods IPs, $pods pods; delete one and create its replacement at once"
start=$(now_ms)
for i in $(seq 1 $pods); do pod "web-$i"; done
for i in $(seq 1 $pods); do wait_running "web-$i" 120 || fail "web-$i not Running"; done
t_all=$(( $(now_ms) - start ))
say "$pods pods Running in ${t_all} ms"
kc get pods -o wide
old_ip=$(pod_ip web-2)
read -r lease old_uid _ < <(lease_of "$old_ip")
[ -n "$old_uid" ] || fail "no lease for web-2's IP $old_ip"

start=$(now_ms)
kc delete pod web-2 --wait=false >/dev/null
pod web-2b
wait_running web-2b 120 || fail "replacement web-2b not Running"
t_repl=$(( $(now_ms) - start ))
new_ip=$(pod_ip web-2b)
read -r _ new_uid _ < <(lease_of "$new_ip")
say "replacement web-2b Running with $new_ip after ${t_repl} ms (web-2 had $old_ip)"
[ "$new_ip" = "$old_ip" ] || fail "the pool is full, so the replacement must reuse $old_ip; got $new_ip"
events=$NODE_DIR/agent/events.jsonl
seq_rm=$(jq -r --arg u "$old_uid" 'select(.kind == "remove" and .uid == $u) | .seq' "$events" | head -n1)
seq_add=$(jq -r --arg u "$new_uid" 'select(.kind == "add" and .uid == $u) | .seq' "$events" | head -n1)
[ -n "$seq_rm" ] || fail "agent log has no DELETED for the old lease $lease ($old_uid)"
[ -n "$seq_add" ] || fail "agent log has no ADDED for the new lease $lease ($new_uid)"
[ "$seq_rm" -lt "$seq_add" ] || fail "agent saw ADDED(new) #$seq_add before DELETED(old) #$seq_rm"
lost=$(jq -s '[.[] | select(.kind == "remove" and .removed_uid != null and .removed_uid != .uid)] | length' "$events")
[ "$lost" = 0 ] || fail "$lost lost rules in the agent's log"
ts_rm=$(jq -r --arg u "$old_uid" 'select(.kind == "remove" and .uid == $u) | .ts' "$events" | head -n1)
ts_add=$(jq -r --arg u "$new_uid" 'select(.kind == "add" and .uid == $u) | .ts' "$events" | head -n1)
failed_sandboxes=$(kc get events --field-selector involvedObject.name=web-2b,reason=FailedCreatePodSandBox -o json | jq '[.items[].count] | add // 0')
say "agent: DELETED(old) #$seq_rm at $ts_rm before ADDED(new) #$seq_add at $ts_add for $old_ip; lost rules: 0; failed sandbox creations of web-2b: $failed_sandboxes"

if [ "${E2E_SHOW:-0}" = 1 ]; then
  echo
  say "kubectl get nep   (the leases; web-2b holds the IP web-2 had)"
  kc get nep
  say "the agent's event log for $old_ip, in the order it processed it"
  jq -r --arg ip "$old_ip" 'select(.ip == $ip) | "  \(.ts)  \(.kind)  lease uid=\(.uid)"' "$events"
fi

if want B; then
echo
say "== scenario B: with the pool full the node stays Ready (containerd calls CNI STATUS for kubelet's runtime status polls)"
full=$(kc get nep -o json | jq '[.items[] | select(.metadata.deletionTimestamp == null)] | length')
[ "$full" = "$pods" ] || fail "expected $pods live leases (a full pool), found $full"
status_before=$(grep -c 'command="STATUS"\|command=STATUS' "$NODE_DIR/logs/plugin.log" || true)
for _ in $(seq 1 10); do
  ready=$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')
  net=$(crictl info | jq -r '.status.conditions[] | select(.type == "NetworkReady") | .status')
  [ "$ready" = True ] || fail "node Ready=$ready with a full pool"
  [ "$net" = true ] || fail "crictl info NetworkReady=$net with a full pool"
  sleep 2
done
status_after=$(grep -c 'command="STATUS"\|command=STATUS' "$NODE_DIR/logs/plugin.log" || true)
[ "$status_after" -gt "$status_before" ] || fail "no CNI STATUS call reached the plugin in 20 s"
say "node Ready and NetworkReady=true over 20 s with $full/$pods IPs leased; STATUS calls in that time: $((status_after - status_before))"

fi

if want C; then
echo
say "== scenario C: kubectl delete pod --force: the lease stays until the sandbox is really gone"
c_ip=$(pod_ip web-1)
read -r c_lease _ _ < <(lease_of "$c_ip")
kc delete pod web-1 --force --grace-period=0 >/dev/null 2>&1
t_gone=$(now_ms)
kc get pod web-1 >/dev/null 2>&1 && fail "web-1 still exists after a forced delete"
samples=0 held_ms=
end=$(( $(date +%s) + 60 ))
while :; do
  state=$(lease_of "$c_ip")
  if sandbox_ready web-1; then sb=ready; else sb=gone; fi
  samples=$((samples + 1))
  if [ -z "$state" ] || [ "${state##* }" = true ]; then
    # Read after the lease: a sandbox still READY now was READY when the lease went.
    [ "$sb" = gone ] || fail "lease $c_lease released while web-1's sandbox is still running"
    held_ms=$(( $(now_ms) - t_gone )); break
  fi
  [ "$(date +%s)" -lt "$end" ] || fail "lease $c_lease of the force-deleted web-1 never released"
  sleep 0.1
done
say "the Pod object was gone at once; lease $c_lease released within ${held_ms} ms, never while the sandbox was ready ($samples samples)"

fi

if want D; then
echo
say "== scenario D: refused credentials make the node NetworkReady=false; it recovers once they work"
token=$NODE_DIR/cni/conf/netendpoint.d/token
cp "$token" "$token.good"
net_ready() { crictl info | jq -r '.status.conditions[] | select(.type == "NetworkReady") | .status'; }
node_ready() { kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'; }
wait_for() { # timeout_s expected command...
  local end=$(( $(date +%s) + $1 )) want=$2; shift 2
  until [ "$("$@")" = "$want" ]; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.5; done
}
printf not-a-valid-token > "$token.tmp" && mv "$token.tmp" "$token"
start=$(now_ms)
wait_for 60 false net_ready || fail "NetworkReady stayed true with refused credentials"
t_net=$(( $(now_ms) - start ))
wait_for 60 False node_ready || fail "node stayed Ready with refused credentials"
t_node=$(( $(now_ms) - start ))
reason=$(crictl info | jq -r '.status.conditions[] | select(.type == "NetworkReady") | .reason')
say "credentials refused: NetworkReady=false ($reason) after ${t_net} ms, Node Ready=False after ${t_node} ms"
mv "$token.good" "$token"
start=$(now_ms)
wait_for 60 true net_ready || fail "NetworkReady did not recover"
wait_for 60 True node_ready || fail "node did not become Ready again"
say "credentials restored: node Ready again after $(( $(now_ms) - start )) ms"
fi
