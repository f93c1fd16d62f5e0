#!/usr/bin/env bash
# make e2e: a real node (tests/node: the test API server, kube-controller-
# manager, kube-scheduler, kubelet, containerd, runc) drives netendpoint.
# Brings the node up, runs the scenarios of docs/testing.md ("A real node"),
# prints the figures, and tears the node down on exit, pass or fail. Needs
# root.
#
# E2E_SCENARIOS picks the scenarios after A (which every run needs), e.g. "A"
# for `make demo-node`; default all: A,B,R,C,S,L,G,D. E2E_SHOW=1 prints the
# leases and the agent's log of the reused IP after A.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/node/lib.sh
pods=3
export NODE_POOL_SIZE=$pods
fail() { echo "E2E FAILED: $*" >&2; exit 1; }
want() { [[ ",${E2E_SCENARIOS:-A,B,R,C,S,L,G,D}," == *",$1,"* ]]; }
results=()
result() { results+=("$*"); }

# Printed after the teardown, whose sandbox removals send the last DELs.
figures() {
  echo
  say "== figures (plugin log at debug level; DELs include the teardown's)"
  for r in "${results[@]}"; do echo "  $r"; done
  log=$NODE_DIR/logs/plugin.log
  count() { grep 'invocation' "$log" | grep -c "command=\"\?$1\"\?" || true; }
  echo "  calls: ADD $(count ADD), DEL $(count DEL) ($(grep 'invocation' "$log" | grep "command=\"\?DEL\"\?" | grep -c 'netns="\?empty' || true) with an empty netns), STATUS $(count STATUS), CHECK $(count CHECK), GC $(count GC)"
  echo "  CNI_ARGS keys containerd passed: $(grep 'invocation' "$log" | grep "command=\"\?ADD\"\?" | sed -n 's/.*cni_args=\([^ ]*\).*/\1/p' | sort -u | tr '\n' ' ')"
  echo "  e2e total: $(( $(date +%s) - t0 )) s"
  say "E2E PASSED"
}

cleanup() {
  local rc=$?
  if [ "$rc" != 0 ] && [ -d "$NODE_DIR/logs" ]; then
    for f in kubelet containerd agent controller plugin kube-controller-manager; do
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
events=$NODE_DIR/agent/events.jsonl

# Workloads run the pause binary; the pool is the only limit.
deployment() { # name replicas
  kc apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1, namespace: default}
spec:
  replicas: $2
  selector: {matchLabels: {app: $1}}
  # A full pool has no IP for a surge pod: an update replaces pods one by one.
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 0, maxUnavailable: 1}}
  template:
    metadata: {labels: {app: $1}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 2
      containers:
      - {name: main, image: localhost/netendpoint-e2e/pause:1, imagePullPolicy: Never}
YAML
}
statefulset() { # name replicas
  kc apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: $1, namespace: default}
spec:
  replicas: $2
  serviceName: $1
  selector: {matchLabels: {app: $1}}
  template:
    metadata: {labels: {app: $1}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 2
      containers:
      - {name: main, image: localhost/netendpoint-e2e/pause:1, imagePullPolicy: Never}
YAML
}
bare_pod() { # name [grace_s [arg]]: a Pod bound to this node, no controller
  kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  nodeName: $NODE_NAME
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: ${2:-2}
  containers:
  - {name: main, image: localhost/netendpoint-e2e/pause:1, imagePullPolicy: Never, args: [${3:-}]}
YAML
}
# A bare pod made and Running, with its lease: prints "ip lease uid". Call it
# in a command substitution, so that its fail ends the script.
leased_bare_pod() { # name [grace_s [arg]]
  local ip lease uid
  bare_pod "$@"
  wait_until 120 running "$1" || fail "$1 not Running"
  ip=$(pod_ip "$1")
  read -r lease uid _ < <(lease_of "$ip")
  [ -n "$uid" ] || fail "no lease for $1's IP $ip"
  echo "$ip $lease $uid"
}
# "name uid ip" of each Running, not terminating pod with label app=$1.
running_pods() {
  kc get pods -l "app=$1" -o json | jq -r '.items[] | select(.metadata.deletionTimestamp == null
    and .status.phase == "Running" and .status.podIP != null) | "\(.metadata.name) \(.metadata.uid) \(.status.podIP)"'
}
pod_ip() { kc get pod "$1" -o jsonpath='{.status.podIP}'; }
pod_uid() { kc get pod "$1" -o jsonpath='{.metadata.uid}' 2>/dev/null; }
running() { [ "$(kc get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null)" = Running ]; }
wait_until() { # timeout_s command... : polls every 0.2 s
  local end=$(( $(date +%s) + $1 )); shift
  until "$@"; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.2; done
}
lease_of() { # ip -> "name uid deleting"
  kc get nep -o json | jq -r --arg ip "$1" \
    '.items[] | select(.spec.ip == $ip) | "\(.metadata.name) \(.metadata.uid) \(.metadata.deletionTimestamp != null)"'
}
lease_count() { kc get nep -o json | jq '.items | length'; }
no_leases() { [ "$(lease_count)" = 0 ]; }
sandbox_ready() { # pod -> 0 when a READY sandbox of that pod exists
  [ -n "$(crictl pods --name "^$1\$" --state ready -q 2>/dev/null)" ]
}
# The agent saw DELETED(old lease UID) before ADDED(new lease UID): prints
# "seq_rm seq_add" or fails.
agent_order() { # old_uid new_uid what
  local rm add
  rm=$(jq -r --arg u "$1" 'select(.kind == "remove" and .uid == $u) | .seq' "$events" | head -n1)
  add=$(jq -r --arg u "$2" 'select(.kind == "add" and .uid == $u) | .seq' "$events" | head -n1)
  [ -n "$rm" ] || fail "$3: the agent's log has no DELETED for the old lease ($1)"
  [ -n "$add" ] || fail "$3: the agent's log has no ADDED for the new lease ($2)"
  [ "$rm" -lt "$add" ] || fail "$3: the agent saw ADDED(new) #$add before DELETED(old) #$rm"
  echo "$rm $add"
}
# A remove that took away a rule of another lease than the one removed.
lost_rules() { jq -s '[.[] | select(.kind == "remove" and .removed_uid != null and .removed_uid != .uid)] | length' "$events"; }
# IPs for which the agent saw ADDED twice with no DELETED in between.
double_adds() {
  jq -s '[group_by(.ip)[] | sort_by(.seq) | map(.kind) | . as $k | range(1; length) | select($k[.] == "add" and $k[. - 1] == "add")] | length' "$events"
}
sandbox_failures() { # pod... -> FailedCreatePodSandBox events of those pods
  local n=0 p c
  for p in "$@"; do
    c=$(kc get events --field-selector "involvedObject.name=$p,reason=FailedCreatePodSandBox" -o json | jq '[.items[] | .count // 1] | add // 0')
    n=$((n + c))
  done
  echo "$n"
}
net_ready() { crictl info | jq -r '.status.conditions[] | select(.type == "NetworkReady") | .status'; }
node_ready() { kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null; }
wait_for() { # timeout_s expected command... : polls every 0.5 s until it prints expected
  local end=$(( $(date +%s) + $1 )) want=$2; shift 2
  until [ "$("$@")" = "$want" ]; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.5; done
}

echo
say "== scenario A (seed): Deployment app, $pods replicas in a pool of $pods IPs; kubectl delete pod of one"
start=$(now_ms)
deployment app $pods
kc rollout status deployment/app --timeout=120s >/dev/null || fail "deployment app not rolled out"
t_all=$(( $(now_ms) - start ))
say "$pods pods Running in ${t_all} ms"
kc get pods -o wide
read -r victim _ old_ip < <(running_pods app | head -n1)
before=$(running_pods app | awk '{print $1}' | sort | tr '\n' ' ')
read -r lease old_uid _ < <(lease_of "$old_ip")
[ -n "$old_uid" ] || fail "no lease for $victim's IP $old_ip"
start=$(now_ms)
kc delete pod "$victim" --wait=false >/dev/null
replacement() { running_pods app | awk -v b=" $before" 'index(b, " " $1 " ") == 0 {print; exit}'; }
has_replacement() { [ -n "$(replacement)" ]; }
wait_until 120 has_replacement || fail "no replacement of $victim became Running"
t_repl=$(( $(now_ms) - start ))
read -r repl _ new_ip < <(replacement)
read -r _ new_uid _ < <(lease_of "$new_ip")
say "the ReplicaSet's replacement $repl Running with $new_ip after ${t_repl} ms ($victim had $old_ip)"
[ "$new_ip" = "$old_ip" ] || fail "the pool is full, so the replacement must reuse $old_ip; got $new_ip"
# Not in a process substitution: its fail must end the script.
order=$(agent_order "$old_uid" "$new_uid" A)
read -r seq_rm seq_add <<<"$order"
[ "$(lost_rules)" = 0 ] || fail "$(lost_rules) lost rules in the agent's log"
failed=$(sandbox_failures "$repl")
say "agent: DELETED(old) #$seq_rm before ADDED(new) #$seq_add for $old_ip; lost rules: 0; failed sandbox creations of $repl: $failed"
result "A seed: $pods pods to Running ${t_all} ms; kubectl delete pod to replacement Running ${t_repl} ms, IP reused, DELETED(old) before ADDED(new), 0 lost rules, $failed failed sandbox creations"

if [ "${E2E_SHOW:-0}" = 1 ]; then
  echo
  say "kubectl get nep   (the leases; $repl holds the IP $victim had)"
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
  [ "$(node_ready)" = True ] || fail "node Ready=$(node_ready) with a full pool"
  [ "$(net_ready)" = true ] || fail "crictl info NetworkReady=$(net_ready) with a full pool"
  sleep 2
done
status_after=$(grep -c 'command="STATUS"\|command=STATUS' "$NODE_DIR/logs/plugin.log" || true)
[ "$status_after" -gt "$status_before" ] || fail "no CNI STATUS call reached the plugin in 20 s"
say "node Ready and NetworkReady=true over 20 s with $full/$pods IPs leased; STATUS calls in that time: $((status_after - status_before))"
result "B full pool: node Ready over 20 s, $((status_after - status_before)) STATUS calls"
fi

if want R; then
echo
say "== scenario R: rolling update of Deployment app in the full pool (maxSurge 0, maxUnavailable 1)"
old_pods=$(running_pods app | awk '{print $1}' | tr '\n' ' ')
start=$(now_ms)
kc patch deployment app --type=merge -p '{"spec":{"template":{"metadata":{"annotations":{"e2e.netendpoint.dev/revision":"2"}}}}}' >/dev/null
kc rollout status deployment/app --timeout=180s >/dev/null || fail "the rolling update did not complete"
t_roll=$(( $(now_ms) - start ))
new_rs=$(kc get rs -l app=app -o json | jq -r '.items[] | select(.metadata.annotations["deployment.kubernetes.io/revision"] == "2") | .metadata.name')
new_pods=$(kc get pods -l app=app -o json | jq -r --arg rs "$new_rs" '.items[] | select(.metadata.ownerReferences[0].name == $rs) | .metadata.name' | tr '\n' ' ')
n_new=0
for p in $new_pods; do running "$p" || fail "$p of the new ReplicaSet is not Running"; n_new=$((n_new + 1)); done
[ "$n_new" = "$pods" ] || fail "the new ReplicaSet has $n_new pods, want $pods"
[ "$(lost_rules)" = 0 ] || fail "$(lost_rules) lost rules in the agent's log"
# Each new pod took an IP an old pod had: its lease was added after a remove of the IP's previous lease.
reused=0
for p in $new_pods; do
  ip=$(pod_ip "$p")
  read -r _ uid _ < <(lease_of "$ip")
  prev=$(jq -s -r --arg ip "$ip" --arg u "$uid" '[.[] | select(.ip == $ip)] | (map(.uid) | index($u)) as $i
    | if $i > 0 and .[$i - 1].kind == "remove" then "ok" else "no" end' "$events")
  [ "$prev" = ok ] || fail "$p's lease for $ip was not added right after the removal of the IP's previous lease"
  reused=$((reused + 1))
done
[ "$(double_adds)" = 0 ] || fail "the agent added a second rule for an IP that still had one"
failed=$(sandbox_failures $new_pods)
say "all $n_new pods of $new_rs Running after ${t_roll} ms (old: $old_pods); IPs reused in order: $reused; failed sandbox creations: $failed; lost rules: 0"
result "R rolling update (full pool): $n_new new pods Running in ${t_roll} ms, $reused IPs reused with DELETED before ADDED, $failed failed sandbox creations, 0 lost rules"
fi

kc delete deployment app --wait=false >/dev/null
start=$(now_ms)
wait_until 120 no_leases || fail "app's leases were not all released after deleting the Deployment"
say "Deployment app deleted: all its leases released in $(( $(now_ms) - start )) ms"

if want C; then
echo
say "== scenario C: kubectl delete pod --force: the lease stays until the sandbox is really gone"
# The container ignores SIGTERM, so the sandbox outlives the Pod object until
# kubelet's SIGKILL at the end of the grace period.
p=$(leased_bare_pod hold-1 10 --ignore-term)
read -r c_ip c_lease c_uid <<<"$p"
kc delete pod hold-1 --force --grace-period=0 >/dev/null 2>&1
t_gone=$(now_ms)
kc get pod hold-1 >/dev/null 2>&1 && fail "hold-1 still exists after a forced delete"
samples=0 held=0 held_ms= sandbox_ms=
end=$(( $(date +%s) + 90 ))
while :; do
  # Live: the same object (UID), not being deleted.
  state=$(kc get nep "$c_lease" -o jsonpath='{.metadata.uid} {.metadata.deletionTimestamp}' 2>/dev/null) || state=
  [ "$state" = "$c_uid " ] && live=yes || live=no
  if sandbox_ready hold-1; then sb=ready; else sb=gone; [ -n "$sandbox_ms" ] || sandbox_ms=$(( $(now_ms) - t_gone )); fi
  samples=$((samples + 1))
  if [ "$live" = no ]; then
    # Read after the lease: a sandbox still READY now was READY when the lease went.
    [ "$sb" = gone ] || fail "lease $c_lease released while hold-1's sandbox is still running"
    held_ms=$(( $(now_ms) - t_gone )); break
  fi
  [ "$sb" = gone ] || held=$((held + 1))
  [ "$(date +%s)" -lt "$end" ] || fail "lease $c_lease of the force-deleted hold-1 never released"
  sleep 0.1
done
[ "$held" -gt 0 ] || fail "no sample saw the sandbox ready after the forced delete: the scenario showed nothing"
say "the Pod object was gone at once; the sandbox was still ready in $held of $samples samples (gone after ~${sandbox_ms} ms); lease $c_lease released after ${held_ms} ms, never while the sandbox was ready"
result "C force-delete: the sandbox outlived the Pod object by ~${sandbox_ms} ms (container ignoring SIGTERM); its lease stayed live all that time ($held samples) and was released ${held_ms} ms after the delete"
fi

if want S; then
echo
say "== scenario S: StatefulSet web (sticky IPs on): kubectl delete pod web-0 keeps its IP"
start=$(now_ms)
statefulset web 2
kc rollout status statefulset/web --timeout=120s >/dev/null || fail "statefulset web not rolled out"
say "web-0 and web-1 Running in $(( $(now_ms) - start )) ms"
s_ip=$(pod_ip web-0); s_pod_uid=$(pod_uid web-0)
read -r s_lease s_old_uid _ < <(lease_of "$s_ip")
kc get nep "$s_lease" -o json | jq -e '.metadata.finalizers | index("netendpoint.dev/sticky-hold")' >/dev/null ||
  fail "web-0's lease $s_lease has no sticky hold"
start=$(now_ms)
kc delete pod web-0 --wait=false >/dev/null
new_web0() { [ "$(pod_uid web-0)" != "$s_pod_uid" ] && [ -n "$(pod_uid web-0)" ] && running web-0 && [ -n "$(pod_ip web-0)" ]; }
wait_until 120 new_web0 || fail "web-0 was not recreated and Running"
t_sts=$(( $(now_ms) - start ))
s_new_ip=$(pod_ip web-0)
[ "$s_new_ip" = "$s_ip" ] || fail "web-0 had $s_ip and came back with $s_new_ip (sticky IPs are on, a free IP was there)"
read -r _ s_new_uid _ < <(lease_of "$s_ip")
order=$(agent_order "$s_old_uid" "$s_new_uid" S)
read -r seq_rm seq_add <<<"$order"
[ "$(lost_rules)" = 0 ] || fail "$(lost_rules) lost rules in the agent's log"
free=$(( pods - $(lease_count) ))
say "web-0 recreated and Running with its IP $s_ip after ${t_sts} ms ($free IP(s) of the pool were free); agent: DELETED(old) #$seq_rm before ADDED(new) #$seq_add"
kc get nep -o wide
kc delete statefulset web --wait=false >/dev/null
start=$(now_ms)
wait_until 120 no_leases || fail "web's held leases were not released after the StatefulSet was deleted"
t_hold=$(( $(now_ms) - start ))
ended=$(kc get events -A --field-selector reason=StickyHoldEnded -o json | jq '[.items[] | .count // 1] | add // 0')
say "StatefulSet deleted: the controller ended the holds (StickyHoldEnded events: $ended) and every lease was released in ${t_hold} ms"
result "S StatefulSet recreate (sticky): web-0 back with its IP $s_ip in ${t_sts} ms with a free IP in the pool, DELETED(old) before ADDED(new); holds ended by the controller ${t_hold} ms after the StatefulSet's deletion"
fi

if want L; then
echo
say "== scenario L: a leaked lease (its Pod deleted while the node's CNI config had no netendpoint) is collected by the controller"
p=$(leased_bare_pod leak-1)
read -r l_ip l_lease l_uid <<<"$p"
# An operator's config change that drops netendpoint from the chain: containerd
# tears pods down with the config it has now, so netendpoint gets no DEL.
mkdir -p "$NODE_DIR/cni/host-local"
cat > "$NODE_DIR/cni/conf/00-without-netendpoint.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "without-netendpoint", "plugins": [{"type": "bridge", "bridge": "$NODE_BRIDGE",
 "ipam": {"type": "host-local", "dataDir": "$NODE_DIR/cni/host-local", "ranges": [[{"subnet": "10.251.0.0/24"}]]}}]}
JSON
cni_net() { crictl info | jq -r '[.cniconfig.Networks[]?.Config.Name] | last'; }
wait_for 30 without-netendpoint cni_net || fail "containerd did not load the config without netendpoint"
dels_before=$(grep 'invocation' "$NODE_DIR/logs/plugin.log" | grep -c "command=\"\?DEL\"\?" || true)
kc delete pod leak-1 --timeout=60s >/dev/null || fail "leak-1 was not deleted"
t_deleted=$(now_ms)
rm -f "$NODE_DIR/cni/conf/00-without-netendpoint.conflist"
wait_for 30 e2e cni_net || fail "containerd did not load netendpoint's config again"
dels_after=$(grep 'invocation' "$NODE_DIR/logs/plugin.log" | grep -c "command=\"\?DEL\"\?" || true)
[ -n "$(lease_of "$l_ip")" ] || fail "the lease of leak-1 went without a DEL: nothing leaked"
say "leak-1 deleted; netendpoint got $((dels_after - dels_before)) DELs; lease $l_lease remains with its Pod gone (containerd never calls GC)"
lease_gone() { [ -z "$(lease_of "$l_ip")" ]; }
wait_until 120 lease_gone || fail "the controller did not collect the leaked lease $l_lease"
t_leak=$(( $(now_ms) - t_deleted ))
leak_line=$(grep "pod gone for the grace" "$NODE_DIR/logs/controller.log" | grep "$l_lease" | tail -n 1)
[ -n "$leak_line" ] || fail "the controller's log does not name the leaked lease $l_lease"
say "the controller deleted lease $l_lease ${t_leak} ms after its Pod was gone (--pod-gone-grace 10s, seen twice), and the agent released it:"
echo "  $leak_line" | cut -c1-240
kc get events -A --field-selector reason=PodGone -o custom-columns=REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message
result "L leaked lease: collected by the controller ${t_leak} ms after its Pod was deleted (pod-gone grace 10 s, seen twice); netendpoint got $((dels_after - dels_before)) DELs for it"
fi

if want G; then
echo
say "== scenario G: the API server stopped for longer than STATUS's 60 s window makes the node NetworkReady=false; it recovers on restart"
p=$(leased_bare_pod keep-1)
read -r g_ip g_lease g_uid <<<"$p"
start=$(now_ms)
scripts/testenv.sh stop "$NODE_DIR/api"
t_stop=$(( $(now_ms) - start ))
wait_for 150 false net_ready || fail "NetworkReady stayed true with the API server stopped"
t_net=$(( $(now_ms) - start ))
reason=$(crictl info | jq -r '.status.conditions[] | select(.type == "NetworkReady") | .reason')
say "API server stopped (its shutdown took ${t_stop} ms): NetworkReady=false ($reason) ${t_net} ms after the stop began; keep-1's sandbox still ready: $(sandbox_ready keep-1 && echo yes || echo no)"
sandbox_ready keep-1 || fail "keep-1's sandbox went down while the API server was stopped"
start=$(now_ms)
scripts/testenv.sh resume "$NODE_DIR/api"
t_api=$(( $(now_ms) - start ))
wait_for 60 true net_ready || fail "NetworkReady did not recover after the API server came back"
t_net_back=$(( $(now_ms) - start ))
wait_for 120 True node_ready || fail "node not Ready after the API server came back"
t_node_back=$(( $(now_ms) - start ))
read -r _ g_uid2 _ < <(lease_of "$g_ip")
[ "$g_uid2" = "$g_uid" ] || fail "keep-1's lease changed across the API server restart ($g_uid -> $g_uid2)"
running keep-1 || fail "keep-1 not Running after the restart"
say "API server back in ${t_api} ms: NetworkReady=true after ${t_net_back} ms, Node Ready after ${t_node_back} ms; keep-1 Running with the same lease"
result "G API server stopped: NetworkReady=false ${t_net} ms after the stop began (shutdown ${t_stop} ms; window 60 s from the first failed STATUS); restarted in ${t_api} ms, NetworkReady=true after ${t_net_back} ms, Node Ready after ${t_node_back} ms; the pod and its lease unchanged"
fi

if want D; then
echo
say "== scenario D: refused credentials make the node NetworkReady=false; it recovers once they work"
token=$NODE_DIR/cni/conf/netendpoint.d/token
cp "$token" "$token.good"
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
t_back=$(( $(now_ms) - start ))
say "credentials restored: node Ready again after ${t_back} ms"
result "D refused credentials: NetworkReady=false after ${t_net} ms, Node Ready=False after ${t_node} ms; Ready again ${t_back} ms after the fix"
fi
