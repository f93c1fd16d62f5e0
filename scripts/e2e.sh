#!/usr/bin/env bash
# make e2e: a real node (tests/node: the test API server, kube-controller-
# manager, kube-scheduler, kubelet, containerd, runc) with netendpoint
# installed as a user installs it: the images of `make images` imported into
# containerd, deploy/ applied through an overlay that swaps the image
# references, the installer and the agent as DaemonSet Pods, the controller
# as a Deployment. Brings the node up, runs the scenarios of docs/testing.md
# ("A real node"), prints the figures, and tears the node down on exit, pass
# or fail. Needs root; one real node at a time on a machine (kubelet's fixed
# port).
#
# E2E_SCENARIOS picks the scenarios besides A (which every run needs), e.g.
# "A" for `make demo-node`; default all: H,A,B,R,F,C,S,K,O,L,G,D,X. E2E_SHOW=1 prints
# the leases and the agent's log of the reused IP after A.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/node/lib.sh
pods=3
# The controller uses the node's network (hostNetwork) and takes no IP: the
# Deployment of the scenarios fills the pool.
export NODE_POOL_SIZE=$pods
fail() { echo "E2E FAILED: $*" >&2; exit 1; }
# A command that fails outside any check ends the run under set -e: name it,
# so that no failure is silent.
trap 'echo "E2E FAILED: line $LINENO: \`$BASH_COMMAND\` exited with status $?" >&2' ERR
want() { [[ ",${E2E_SCENARIOS:-H,A,B,R,F,C,S,K,O,L,G,D,X}," == *",$1,"* ]]; }
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
    kc get pods -A -o wide >&2 2>/dev/null
    for f in kubelet containerd plugin kube-controller-manager; do
      echo "--- last lines of $f.log" >&2; tail -n 15 "$NODE_DIR/logs/$f.log" >&2 2>/dev/null
    done
    for f in "$NODE_DIR"/logs/pods/*.log; do
      [ -f "$f" ] || continue
      echo "--- last lines of ${f##*/}" >&2; tail -n 8 "$f" | cut -c1-300 >&2
    done
  fi
  tests/node/down.sh
  [ "$rc" != 0 ] || figures
  exit "$rc"
}
trap cleanup EXIT

t0=$(date +%s)
export NODE_IMAGES=${NODE_IMAGES:-$PWD/target/images}
tests/node/build.sh
scripts/images.sh
# The kubectl plugin, which the docs' verify step runs.
cargo build -q -p kubectl-netendpoint
node_lock
tests/node/up.sh
# docs/install.md, "Verify": kubectl netendpoint status --wait, word for word.
start=$(now_ms)
tests/node/docs-run.sh verify
result "V verify: kubectl netendpoint status --wait found the install healthy $(( $(now_ms) - start )) ms after the rollout"
source tests/node/e2e-lib.sh
echo
say "== scenario A (seed): Deployment app, $pods replicas, fills the pool of $NODE_POOL_SIZE IPs; kubectl delete pod of one"
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
  say "the agent's log for $old_ip, in the order it changed its table"
  agent_events
  jq -r --arg ip "$old_ip" 'select(.ip == $ip) | "  \(.ts)  \(.kind)  lease uid=\(.uid)"' "$events"
fi

if want H; then
echo
say "== scenario H: the Helm chart, with the same images, renders what the kustomize install made (kubectl diff is empty)"
helm_set=()
while read -r ref _ _; do
  name=${ref%:*}; case "${name##*/}" in
    netendpoint) helm_set+=(--set "image.repository=$name" --set "image.tag=${ref##*:}") ;;
    netendpoint-watcher-example) helm_set+=(--set "agentImage.repository=$name" --set "agentImage.tag=${ref##*:}") ;;
  esac
done < "$NODE_IMAGES/images.txt"
"$tbin/helm" template netendpoint deploy/helm/netendpoint --namespace netendpoint-system "${helm_set[@]}" > "$NODE_DIR/helm-render.yaml"
rc=0
kc diff -f "$NODE_DIR/helm-render.yaml" > "$NODE_DIR/helm-diff.txt" 2>&1 || rc=$?
[ "$rc" = 0 ] || { head -n 60 "$NODE_DIR/helm-diff.txt" >&2; fail "kubectl diff of the chart's render against the installed objects (exit $rc)"; }
n=$(grep -c '^kind:' "$NODE_DIR/helm-render.yaml")
say "helm template of deploy/helm/netendpoint ($n objects) against the cluster installed with kubectl apply -k: no difference"
result "H chart: helm template with the installed images renders the $n objects kubectl apply -k installed, to the field (kubectl diff empty)"
fi

if want B; then
echo
say "== scenario B: with the pool full the node stays Ready (containerd calls CNI STATUS for kubelet's runtime status polls)"
full=$(live_leases)
[ "$full" = "$NODE_POOL_SIZE" ] || fail "expected $NODE_POOL_SIZE live leases (a full pool: $pods of app), found $full"
status_before=$(grep -c 'command="STATUS"\|command=STATUS' "$NODE_DIR/logs/plugin.log" || true)
for _ in $(seq 1 10); do
  [ "$(node_ready)" = True ] || fail "node Ready=$(node_ready) with a full pool"
  [ "$(net_ready)" = true ] || fail "crictl info NetworkReady=$(net_ready) with a full pool"
  sleep 2
done
status_after=$(grep -c 'command="STATUS"\|command=STATUS' "$NODE_DIR/logs/plugin.log" || true)
[ "$status_after" -gt "$status_before" ] || fail "no CNI STATUS call reached the plugin in 20 s"
say "node Ready and NetworkReady=true over 20 s with $full/$NODE_POOL_SIZE IPs leased; STATUS calls in that time: $((status_after - status_before))"
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
agent_events
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

if want F; then
echo
f_pods=20
say "== scenario F: full pool rollout: Deployment roll, $f_pods replicas, in its own pool rollout of $f_pods IPs; kubectl rollout restart twice (default strategy: 25 % surge)"
# The pool, added as a user adds one: its network config as a key of
# netendpoint-net-conf (the controller reads every key: the pool's capacity,
# and the ranges admission holds its leases to), and the file on the node,
# first in its CNI directory, so that containerd gives it to new sandboxes.
# E2E_F_WAIT_FOR_RELEASE weakens its waitForRelease to show F failing.
f_conf=$(jq --arg w "${E2E_F_WAIT_FOR_RELEASE:-20s}" '.name = "rollout" | .plugins[0].ipam.pool = "rollout"
  | .plugins[0].ipam.ranges = [[{subnet: "10.250.1.0/24", rangeStart: "10.250.1.10", rangeEnd: "10.250.1.29"}]]
  | .plugins[0].ipam.waitForRelease = $w | del(.plugins[0].ipam.sticky)' "$NODE_DIR/install/10-netendpoint.conflist")
kns patch configmap netendpoint-net-conf --type merge -p "$(jq -n --arg c "$f_conf" '{data: {"rollout.conflist": $c}}')" >/dev/null
pool_known() { [ -n "$(kns get configmap netendpoint-pools -o jsonpath='{.data.rollout}')" ]; }
wait_until 60 pool_known || fail "the controller did not write pool rollout's ranges into netendpoint-pools"
curl -sf --max-time 2 http://127.0.0.1:9466/metrics >/dev/null || fail "the controller's /metrics (127.0.0.1:9466 on the node) does not answer"
# The policy netendpoint-lease-range reads that ConfigMap through an informer: give it a moment.
sleep 3
printf '%s\n' "$f_conf" > "$NODE_DIR/cni/conf/00-rollout.conflist.tmp"
mv "$NODE_DIR/cni/conf/00-rollout.conflist.tmp" "$NODE_DIR/cni/conf/00-rollout.conflist"
wait_for 30 rollout cni_net || fail "containerd did not load the config of network rollout"
say "pool rollout (10.250.1.10-10.250.1.29) known to the controller ($(kns get configmap netendpoint-pools -o jsonpath='{.data.rollout}')) and first in the node's CNI directory"
kc create namespace rollout >/dev/null
# Pods need the namespace's ServiceAccount, which kube-controller-manager makes.
f_sa() { kc -n rollout get serviceaccount default >/dev/null 2>&1; }
wait_until 30 f_sa || fail "namespace rollout has no ServiceAccount default"
kc apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: roll, namespace: rollout}
spec:
  replicas: $f_pods
  selector: {matchLabels: {app: roll}}
  template:
    metadata: {labels: {app: roll}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 2
      containers:
      - {name: main, image: localhost/netendpoint-e2e/pause:1, imagePullPolicy: Never}
YAML
fk() { kc -n rollout "$@"; }
f_leases() { kc get nep -l netendpoint.dev/pool=rollout -o json | jq '[.items[] | select(.metadata.deletionTimestamp == null)] | length'; }
f_all_leases() { kc get nep -l netendpoint.dev/pool=rollout -o json | jq '.items | length'; }
start=$(now_ms)
fk rollout status deployment/roll --timeout=180s >/dev/null || fail "deployment roll not rolled out"
f_up=$(( $(now_ms) - start ))
n=$(fk get pods -l app=roll -o json | jq '[.items[] | select(.status.phase == "Running")] | length')
[ "$n" = "$f_pods" ] || fail "$n of $f_pods pods of roll Running"
say "$f_pods pods of roll Running in ${f_up} ms: the pool is full ($(f_leases) leases)"
forced_ev0=$(events_of ForcedRelease)
forced_m0=$(controller_metric netendpoint_forced_releases_total rollout)
waited_m0=$(controller_metric netendpoint_adds_waited_total rollout)
plugin_lines0=$(wc -l < "$NODE_DIR/logs/plugin.log")
# The queue as the controller exports it, every 0.25 s.
f=$NODE_DIR/f-queue.samples
rm -f "$f" "$f.stop"
f_queue() { echo "$(controller_metric netendpoint_pool_waiting rollout) $(controller_metric netendpoint_pool_oldest_wait_seconds rollout)"; }
sampler "$f" f_queue &
spid=$!
f_rolls=()
for i in 1 2; do
  start=$(now_ms)
  fk rollout restart deployment/roll >/dev/null
  fk rollout status deployment/roll --timeout=180s >/dev/null || fail "rollout $i of roll did not complete"
  t=$(( $(now_ms) - start ))
  f_rolls+=("$t")
  # The old pods' releases end after the rollout's status says done.
  full() { [ "$(f_all_leases)" = "$f_pods" ]; }
  wait_until 60 full || fail "after rollout $i pool rollout has $(f_all_leases) leases, want $f_pods"
  say "rollout $i of roll complete in ${t} ms; the old pods' leases all released"
done
touch "$f.stop"; wait "$spid"
failed=$(events_of FailedCreatePodSandBox rollout)
forced=$(( $(events_of ForcedRelease) - forced_ev0 ))
forced_m=$(( $(controller_metric netendpoint_forced_releases_total rollout) - forced_m0 ))
waited_m=$(( $(controller_metric netendpoint_adds_waited_total rollout) - waited_m0 ))
waiting_ev=$(events_of WaitingForIP rollout)
tail -n +"$((plugin_lines0 + 1))" "$NODE_DIR/logs/plugin.log" | grep 'pool=rollout' > "$NODE_DIR/f-plugin.log" || true
queued=$(grep -c 'pool full: waiting in its queue' "$NODE_DIR/f-plugin.log" || true)
served=$(grep -c 'claimed the address promised to this ADD\|claimed the promised address as its release ended' "$NODE_DIR/f-plugin.log" || true)
longest=$(sed -n 's/.*waited_ms=\([0-9]*\).*/\1/p' "$NODE_DIR/f-plugin.log" | sort -n | tail -n1)
read -r peak oldest < <(awk '{ if ($2 > w) w = $2; if ($3 > o) o = $3 } END { print w + 0, o + 0 }' "$f")
lost=$(lost_rules)
# The agent installs a rule on the watch event of a lease: a moment after its ADD.
table_matches() { [ "$(agent_table)" = "$(leases_table)" ]; }
wait_until 15 table_matches || table_differs=yes
say "rollouts ${f_rolls[0]} ms and ${f_rolls[1]} ms; ADDs queued: $queued (controller: $waited_m waited, $waiting_ev WaitingForIP Events), served by the queue: $served, longest wait ${longest:-0} ms (sampled: up to $peak waiting, oldest ${oldest} s); failed sandbox creations: $failed; forced releases: $forced (metric: $forced_m); lost rules: $lost"
[ "$failed" = 0 ] || { fk get events --field-selector reason=FailedCreatePodSandBox -o custom-columns=POD:.involvedObject.name,COUNT:.count,MESSAGE:.message | cut -c1-300 >&2; fail "$failed failed sandbox creations in the full pool's rollouts"; }
[ "$forced" = 0 ] && [ "$forced_m" = 0 ] || fail "$forced ForcedRelease Events, $forced_m forced releases counted by the controller: a release did not wait for the agent"
[ "$lost" = 0 ] || fail "$lost lost rules in the agent's log"
[ -z "${table_differs:-}" ] || fail "the agent's table after the rollouts differs from the leases: table [$(agent_table | tr '\n' ' ')] leases [$(leases_table | tr '\n' ' ')]"
[ "$queued" -gt 0 ] && [ "$served" -gt 0 ] || fail "no ADD waited in the queue ($queued) or was served by it ($served): the pool was never full"
result "F full pool rollout: $f_pods pods of roll in a pool of $f_pods to Running ${f_up} ms; kubectl rollout restart ${f_rolls[0]} ms and ${f_rolls[1]} ms; ADDs queued $queued (controller: $waited_m waited), served by the queue $served, longest wait ${longest:-0} ms; $failed failed sandbox creations, $forced forced releases, $lost lost rules; the agent's table equals the leases"
fk delete deployment roll --wait=false >/dev/null
start=$(now_ms)
f_gone() { [ "$(f_all_leases)" = 0 ]; }
wait_until 120 f_gone || fail "roll's leases were not all released after deleting the Deployment"
rm -f "$NODE_DIR/cni/conf/00-rollout.conflist"
wait_for 30 e2e cni_net || fail "containerd did not load netendpoint's config e2e again"
kns patch configmap netendpoint-net-conf --type merge -p '{"data":{"rollout.conflist":null}}' >/dev/null
kc delete namespace rollout --wait=false >/dev/null
say "Deployment roll deleted: its leases released in $(( $(now_ms) - start )) ms; the node's CNI config and netendpoint-net-conf as before"
fi

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
s_hold=$(hold_of "$s_ip")
[ -n "$s_hold" ] || fail "web-0's IP $s_ip has no sticky hold"
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
# A sticky hold and its incarnation are two objects of one IP.
used_ips() { kc get nep -o json | jq '[.items[] | select(.metadata.deletionTimestamp == null) | .spec.ip] | unique | length'; }
free=$(( NODE_POOL_SIZE - $(used_ips) ))
say "web-0 recreated and Running with its IP $s_ip after ${t_sts} ms ($free IP(s) of the pool were free); agent: DELETED(old) #$seq_rm before ADDED(new) #$seq_add"
kc get nep -o wide
say "-- web-0 deleted again with the pool full and a Pod of Deployment wait queued for an address"
kc scale statefulset web --replicas=3 >/dev/null
kc rollout status statefulset/web --timeout=120s >/dev/null || fail "statefulset web not scaled to 3"
[ "$(used_ips)" = "$NODE_POOL_SIZE" ] || fail "web's 3 Pods should fill the pool of $NODE_POOL_SIZE IPs; $(used_ips) in use"
s_ip=$(pod_ip web-0); s_pod_uid=$(pod_uid web-0)
deployment wait 1
queued_waiter() { kc get nepneed -o json | jq -e '[.items[] | select(.spec.pod.name | startswith("wait-"))] | length > 0' >/dev/null; }
wait_until 60 queued_waiter || fail "the Pod of Deployment wait did not join the full pool's queue"
start=$(now_ms)
kc delete pod web-0 --wait=false >/dev/null
wait_until 120 new_web0 || fail "web-0 was not recreated and Running with a waiter in the queue"
t_sts_wait=$(( $(now_ms) - start ))
s_new_ip=$(pod_ip web-0)
waiter_leases=$(kc get nep -l netendpoint.dev/pod-namespace=default -o json | jq -r '[.items[] | select(.spec.pod.name // "" | startswith("wait-")) | .spec.ip] | join(" ")')
[ "$s_new_ip" = "$s_ip" ] || fail "web-0 had $s_ip and came back with $s_new_ip, with a waiter queued (its leases: [$waiter_leases])"
[ -z "$waiter_leases" ] || fail "the waiter of Deployment wait took $waiter_leases while web-0 was recreated"
[ -z "$(running_pods wait)" ] || fail "the Pod of Deployment wait runs in a full pool: $(running_pods wait)"
[ "$(lost_rules)" = 0 ] || fail "$(lost_rules) lost rules in the agent's log"
say "web-0 back with its IP $s_ip after ${t_sts_wait} ms while the Pod of Deployment wait stayed queued (no lease)"
kc delete deployment wait --wait=false >/dev/null
s_waiter="S waiter: with the pool full and a Pod of Deployment wait queued, kubectl delete pod web-0: back with its IP $s_ip in ${t_sts_wait} ms, the waiter took nothing"
kc delete statefulset web --wait=false >/dev/null
start=$(now_ms)
wait_until 120 no_leases || fail "web's held leases were not released after the StatefulSet was deleted"
t_hold=$(( $(now_ms) - start ))
ended=$(kc get events -A --field-selector reason=StickyHoldEnded -o json | jq '[.items[] | .count // 1] | add // 0')
say "StatefulSet deleted: the controller ended the holds (StickyHoldEnded events: $ended) and every lease was released in ${t_hold} ms"
result "S StatefulSet recreate (sticky): web-0 back with its IP $s_ip in ${t_sts} ms with a free IP in the pool, DELETED(old) before ADDED(new); holds ended by the controller ${t_hold} ms after the StatefulSet's deletion"
result "$s_waiter"
fi

if want K; then
echo
say "== scenario K: an agent's line in netendpoint-agents survives re-applying deploy/ and deploy/agents.yaml, and the policy honours it"
kns patch configmap netendpoint-agents --type merge -p '{"data":{"default.e2e-agent":"e2e.example.com/agent"}}' >/dev/null
(cd "$NODE_DIR/user" && PATH="$NODE_DIR/user/bin:$PATH" kubectl apply -k deploy/ >/dev/null &&
  PATH="$NODE_DIR/user/bin:$PATH" kubectl apply -f deploy/agents.yaml >/dev/null) || fail "re-applying deploy/ failed"
line=$(kns get configmap netendpoint-agents -o jsonpath='{.data.default\.e2e-agent}')
[ "$line" = e2e.example.com/agent ] || fail "the user's line was dropped by the re-apply: $(kns get configmap netendpoint-agents -o jsonpath='{.data}')"
shipped=$(kns get configmap netendpoint-agents -o jsonpath='{.data.netendpoint-system\.netendpoint-watcher-example}')
[ "$shipped" = watcher.netendpoint.dev/rules ] || fail "the shipped line is gone: $shipped"
# The line is what admits the agent: its node-bound token may add its own
# finalizer (a server-side dry run) while it is listed, and not once removed.
kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: ServiceAccount
metadata: {name: e2e-agent, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-agent}
rules: [{apiGroups: [netendpoint.dev], resources: [networkendpoints], verbs: [get, list, watch, patch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-agent}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-agent}
subjects: [{kind: ServiceAccount, name: e2e-agent, namespace: default}]
YAML
"$tbin/kube-testenv" sa-kubeconfig --dir "$NODE_DIR/api" --namespace default --name e2e-agent \
  --bound-node "$NODE_NAME" --out "$NODE_DIR/install/e2e-agent.kubeconfig"
# A lease to try the patch on: the earlier scenarios' workloads are gone,
# and the controller takes none (hostNetwork).
deployment kagent 1
kc rollout status deployment/kagent --timeout=120s >/dev/null || fail "deployment kagent not rolled out"
k_lease=$(kc get nep -l netendpoint.dev/pod-namespace=default -o json |
  jq -r '[.items[] | select(.spec.pod.name | startswith("kagent-"))][0].metadata.name // empty')
[ -n "$k_lease" ] || fail "no lease of kagent to try the agent's patch on"
agent_add() {
  "$tbin/kubectl" --kubeconfig "$NODE_DIR/install/e2e-agent.kubeconfig" patch nep "$k_lease" --type json --dry-run=server \
    -p '[{"op":"add","path":"/metadata/finalizers/-","value":"e2e.example.com/agent"}]' 2>&1
}
admitted() { agent_add >/dev/null; }
refused_unlisted() { [[ "$(agent_add)" == *"no registered agent"* ]]; }
wait_until 30 admitted || fail "the listed agent's finalizer patch was refused: $(agent_add)"
kns patch configmap netendpoint-agents --type merge -p '{"data":{"default.e2e-agent":null}}' >/dev/null
wait_until 30 refused_unlisted || fail "the agent's patch was not refused once its line was removed: $(agent_add)"
kc delete clusterrolebinding e2e-agent >/dev/null; kc delete clusterrole e2e-agent >/dev/null
kc -n default delete serviceaccount e2e-agent >/dev/null
kc delete deployment kagent --wait=false >/dev/null
say "after kubectl apply -k deploy/ and kubectl apply -f deploy/agents.yaml the user's line default.e2e-agent was still there; its agent's patch was admitted, and refused once the line was removed"
result "K agents list: a line added with kubectl patch survived kubectl apply -k deploy/ and kubectl apply -f deploy/agents.yaml; the admission policy admitted that agent's finalizer patch, and refused it once the line was removed"
fi

if want O; then
echo
say "== scenario O: kubectl rollout restart of the installer, the agent and the controller while bare pods are made and deleted"
churn_log=$NODE_DIR/churn.log
: > "$churn_log"; : > "$NODE_DIR/churn.err"; rm -f "$NODE_DIR/churn.stop"
# One bare pod at a time: made, Running (or not within 90 s), deleted.
# Lines: name, start (ms), time to Running (ms or -), ok|timeout.
churn() {
  local i=0 name start t st
  while [ ! -e "$NODE_DIR/churn.stop" ]; do
    i=$((i + 1)) name=churn-$i start=$(now_ms)
    bare_pod "$name" 1 2>/dev/null || { sleep 1; continue; }
    if wait_until 90 running "$name"; then st=ok t=$(( $(now_ms) - start )); else st=timeout t=-; fi
    echo "$name $start $t $st" >> "$churn_log"
    # A refused delete is retried by the cleanup after the loop; the loop
    # itself must not end on it (set -e holds in this background subshell).
    kc delete pod "$name" --wait=false >/dev/null 2>>"$NODE_DIR/churn.err" || echo "delete $name failed" >> "$NODE_DIR/churn.err"
  done
}
ready_pods() { # app.kubernetes.io/name -> its Pods that are Ready and not being deleted
  kns get pods -l "app.kubernetes.io/name=$1" -o json | jq '[.items[] | select(.metadata.deletionTimestamp == null)
    | select(any(.status.conditions[]?; .type == "Ready" and .status == "True"))] | length'
}
# The longest time the sampled value was 0: from the first 0 of a run to the next sample that is not.
longest_zero() {
  awk '{ if ($2 == "0") { if (!z) { z = 1; s = $1 } } else { if (z && $1 - s > m) m = $1 - s; z = 0 } last = $1 }
    END { if (z && last - s > m) m = last - s; print m + 0 }' "$1"
}
# The time from the last line an old Pod logged (it stopped) to the first
# line of a new one matching $3: old and new are log file name patterns.
ms_of() { date -u -d "$1" +%s%3N; }
log_gap() { # old_pod new_pod_prefix pattern
  local old_end new_line
  old_end=$(tail -n1 "$NODE_DIR"/logs/pods/*_"$1"_*.log | awk '{print $1}')
  new_line=$(cat $(ls "$NODE_DIR"/logs/pods/*_"$2"*.log | tail -n1) | grep -m1 -- "$3" | awk '{print $1}')
  [ -n "$old_end" ] && [ -n "$new_line" ] || { echo "?"; return; }
  echo $(( $(ms_of "$new_line") - $(ms_of "$old_end") ))
}
# Churn pods started at or after $1 (ms): "count ok-count slowest-ms".
churn_since() {
  awk -v t="$1" '$2 >= t { n++; if ($4 == "ok") { ok++; if ($3 > m) m = $3 } } END { print n + 0, ok + 0, m + 0 }' "$churn_log"
}
churn & churn_pid=$!
sleep 5

# rollout NAME KIND: restarts it while sampling its ready Pods; sets
# o_roll (ms to rollout complete) and o_gap (longest time with no ready Pod).
rollout() {
  local f=$NODE_DIR/o-$1.samples start
  rm -f "$f" "$f.stop"
  sampler "$f" ready_pods "$1" & local spid=$!
  start=$(now_ms)
  kns rollout restart "$2/$1" >/dev/null
  kns rollout status "$2/$1" --timeout=180s >/dev/null || fail "$2/$1 did not roll out"
  o_roll=$(( $(now_ms) - start ))
  sleep 3
  touch "$f.stop"; wait "$spid"
  o_gap=$(longest_zero "$f")
  o_start=$start
}

say "-- the installer (its minted token outlives its Pod)"
token_before=$(md5sum < "$NODE_DIR/cni/conf/netendpoint.d/token")
installer_before=$(kns get pods -l app.kubernetes.io/name=netendpoint-installer -o jsonpath='{.items[0].metadata.name}')
rollout netendpoint-installer ds
i_down=$(log_gap "$installer_before" netendpoint-installer- "installed ServiceAccount token")
read -r n ok slow < <(churn_since "$o_start")
[ "$n" -gt 0 ] || fail "no pod was made during the installer's rollout"
[ "$ok" = "$n" ] || fail "$((n - ok)) of $n pods made during the installer's rollout did not become Running"
token_after=$(md5sum < "$NODE_DIR/cni/conf/netendpoint.d/token")
say "installer rolled out in ${o_roll} ms: ${i_down} ms from the old Pod's last log line to the new one's first token, no ready installer Pod for ${o_gap} ms (readiness probe every 10 s); $ok/$n pods made meanwhile Running (slowest ${slow} ms); token $([ "$token_before" = "$token_after" ] && echo kept || echo re-minted by the new Pod)"
result "O installer rollout: ${o_roll} ms, no installer for ${i_down} ms (old Pod's end to the new one's first token), no ready installer Pod for ${o_gap} ms; $ok/$n pods made during it Running (slowest ${slow} ms): the plugin kept working"

say "-- the agent (releases wait for it; none may be lost)"
agent_pod_before=$(kns get pods -l app.kubernetes.io/name=netendpoint-watcher-example -o jsonpath='{.items[0].metadata.name}')
rollout netendpoint-watcher-example ds
a_down=$(log_gap "$agent_pod_before" netendpoint-watcher-example- "resynced with the API server")
read -r n ok slow < <(churn_since "$o_start")
[ "$ok" = "$n" ] || fail "$((n - ok)) of $n pods made during the agent's rollout did not become Running"
# The longest wait of a release on the agent's finalizer during the rollout
# (deletionTimestamp, 1 s resolution, to the finalizer's removal), from its log.
o_since=$(date -u -d "@$(( o_start / 1000 ))" +%Y-%m-%dT%H:%M:%S)
release_max=$(pod_logs netendpoint-watcher-example | awk -v t="$o_since" '$1 >= t && /finalizer removed/ {
  if (match($0, /release_seconds=[0-9.]+/)) { v = substr($0, RSTART + 16, RLENGTH - 16) + 0; if (v > m) m = v } } END { print m + 0 }')
say "agent rolled out in ${o_roll} ms (from $agent_pod_before): ${a_down} ms from the old Pod's last log line to the new one's resync, no ready agent Pod for ${o_gap} ms; $ok/$n pods made meanwhile Running (slowest ${slow} ms); longest release wait on the agent ${release_max} s"
o_agent="O agent rollout: ${o_roll} ms, no agent for ${a_down} ms (old Pod's end to the new one's resync), no ready agent Pod for ${o_gap} ms; $ok/$n pods made during it Running (slowest ${slow} ms); longest release wait on the agent's finalizer ${release_max} s"

say "-- the controller (leadership moves to a new Pod)"
leader_before=$(leader)
f=$NODE_DIR/o-lease.samples
rm -f "$f" "$f.stop"
sampler "$f" sh -c "$tbin/kubectl --kubeconfig $NODE_DIR/api/kubeconfig -n netendpoint-system get lease netendpoint-controller -o json | jq -r '\"\(.spec.holderIdentity) \(.spec.renewTime) \(.spec.acquireTime)\"'" &
spid=$!
start=$(now_ms)
kns rollout restart deployment/netendpoint-controller >/dev/null
kns rollout status deployment/netendpoint-controller --timeout=180s >/dev/null || fail "the controller did not roll out"
t_roll=$(( $(now_ms) - start ))
wait_until 90 new_leader || fail "no Pod of the controller's new ReplicaSet became the leader"
t_lead=$(( $(now_ms) - start ))
touch "$f.stop"; wait "$spid"
leader_after=$(leader)
# Leadership gap: the old holder's last renewal to the first sample of a new holder's acquisition.
# A sample with no holder (null) counts as neither.
read -r last_renew new_acquire moves < <(awk -v old="$leader_before" '
  $2 == "" || $2 == "null" { next }
  $2 == old { r = $3 } $2 != old && !a { a = $4 } $2 != prev && prev != "" { m++ } { prev = $2 }
  END { print r, a, m + 0 }' "$f")
[ -n "$last_renew" ] && [ -n "$new_acquire" ] || fail "the Lease samples show no move of leadership ($leader_before -> $leader_after)"
lead_gap=$(( $(ms_of "$new_acquire") - $(ms_of "$last_renew") ))
read -r n ok slow < <(churn_since "$start")
[ "$ok" = "$n" ] || fail "$((n - ok)) of $n pods made during the controller's rollout did not become Running"
say "controller rolled out in ${t_roll} ms; leadership moved $leader_before -> $leader_after ($moves change(s) of holder), ${lead_gap} ms from the old leader's last renewal to the new one's acquisition, ${t_lead} ms after the restart; $ok/$n pods made meanwhile Running"
o_ctl="O controller rollout: ${t_roll} ms; leadership moved to a new Pod ${t_lead} ms after the restart, ${lead_gap} ms without a leader (old holder's last renewal to the new one's acquisition)"

touch "$NODE_DIR/churn.stop"
wait "$churn_pid" || fail "the churn loop ended with status $?: $(tail -n3 "$NODE_DIR/churn.err" 2>/dev/null)"
[ ! -s "$NODE_DIR/churn.err" ] || say "churn: $(wc -l < "$NODE_DIR/churn.err") error line(s), last: $(tail -n1 "$NODE_DIR/churn.err")"
# A churn Pod may be gone between the get and its delete.
for p in $(kc get pods -o name | grep '^pod/churn-'); do kc delete "$p" --wait=false >/dev/null 2>&1 || true; done
wait_until 120 no_leases || fail "the churn pods' leases were not all released"
total=$(wc -l < "$churn_log")
forced=$(kc get events -A --field-selector reason=ForcedRelease -o json | jq '[.items[] | .count // 1] | add // 0')
[ "$forced" = 0 ] || fail "$forced forced releases: a release did not wait for the agent"
[ "$(lost_rules)" = 0 ] || fail "$(lost_rules) lost rules in the agent's log"
# The current agent's table (replayed from its own log) holds exactly the leases that exist.
table=$(agent_table)
leases_now=$(leases_table)
[ "$table" = "$leases_now" ] || fail "the agent's table after its rollout differs from the leases: table [$table] leases [$leases_now]"
say "$total pods made and deleted in all; every lease released, 0 forced, 0 lost rules; the new agent's table matches the $(wc -l <<<"$leases_now") leases"
result "$o_agent; $total pods in all, every release acknowledged (0 forced), 0 lost rules, the new agent's table equals the leases"
result "$o_ctl"
fi

if want L; then
echo
say "== scenario L: a leaked lease (its Pod deleted while the node's CNI config had no netendpoint) is collected by the controller"
# The controller collects a lease whose Pod has been gone for its
# --pod-gone-grace, 15m in deploy/; 10s here, set as an operator sets it.
kns set env deployment/netendpoint-controller NETENDPOINT_CONTROLLER_POD_GONE_GRACE=10s >/dev/null
start=$(now_ms)
kns rollout status deployment/netendpoint-controller --timeout=120s >/dev/null || fail "the controller did not roll out"
wait_until 60 new_leader || fail "no controller Pod of the new ReplicaSet became the leader"
say "controller rolled out with --pod-gone-grace 10s, and one of its new Pods leads, after $(( $(now_ms) - start )) ms"
p=$(leased_bare_pod leak-1)
read -r l_ip l_lease l_uid <<<"$p"
# An operator's config change that drops netendpoint from the chain: containerd
# tears pods down with the config it has now, so netendpoint gets no DEL.
mkdir -p "$NODE_DIR/cni/host-local"
cat > "$NODE_DIR/cni/conf/00-without-netendpoint.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "without-netendpoint", "plugins": [{"type": "bridge", "bridge": "$NODE_BRIDGE",
 "ipam": {"type": "host-local", "dataDir": "$NODE_DIR/cni/host-local", "ranges": [[{"subnet": "10.251.0.0/24"}]]}}]}
JSON
wait_for 30 without-netendpoint cni_net || fail "containerd did not load the config without netendpoint"
dels_before=$(grep 'invocation' "$NODE_DIR/logs/plugin.log" | grep -c "command=\"\?DEL\"\?" || true)
kc delete pod leak-1 --timeout=60s >/dev/null || fail "leak-1 was not deleted"
t_deleted=$(now_ms)
# kubelet stops the sandbox a moment after the Pod object is gone; that
# teardown, too, must find the config without netendpoint. Done here as
# kubelet does it (stop, then remove), so it cannot come after the restore.
for sb in $(crictl pods --name '^leak-1$' -q 2>/dev/null); do
  crictl stopp "$sb" >/dev/null 2>&1; crictl rmp "$sb" >/dev/null 2>&1
done
rm -f "$NODE_DIR/cni/conf/00-without-netendpoint.conflist"
wait_for 30 e2e cni_net || fail "containerd did not load netendpoint's config again"
dels_after=$(grep 'invocation' "$NODE_DIR/logs/plugin.log" | grep -c "command=\"\?DEL\"\?" || true)
[ -n "$(lease_of "$l_ip")" ] || fail "the lease of leak-1 went without a DEL: nothing leaked"
say "leak-1 deleted; netendpoint got $((dels_after - dels_before)) DELs; lease $l_lease remains with its Pod gone (containerd never calls GC)"
lease_gone() { [ -z "$(lease_of "$l_ip")" ]; }
wait_until 120 lease_gone || fail "the controller did not collect the leaked lease $l_lease"
t_leak=$(( $(now_ms) - t_deleted ))
leak_line=$(pod_logs netendpoint-controller | grep "pod gone for the grace" | grep "$l_lease" | tail -n 1 || true)
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
say "== scenario D: the plugin's credentials: a damaged token file is repaired by the installer; revoked ones make the node NetworkReady=false until the installer mints new ones"
token=$NODE_DIR/cni/conf/netendpoint.d/token
good=$(cat "$token")
printf not-a-valid-token > "$token.tmp" && mv "$token.tmp" "$token"
start=$(now_ms)
repaired() { [ "$(cat "$token")" = "$good" ]; }
wait_until 30 repaired || fail "the installer did not rewrite the damaged token file within 30 s"
t_repair=$(( $(now_ms) - start ))
say "damaged token file rewritten by the installer after ${t_repair} ms (--interval=10s)"
# Every token minted for a ServiceAccount dies with it: delete and recreate
# netendpoint-cni (as a re-apply after an accidental delete would).
kns delete serviceaccount netendpoint-cni >/dev/null
start=$(now_ms)
kc apply -k "$NODE_IMAGES" >/dev/null
wait_for 60 false net_ready || fail "NetworkReady stayed true with revoked credentials"
t_net=$(( $(now_ms) - start ))
wait_for 60 False node_ready || fail "node stayed Ready with revoked credentials"
t_node=$(( $(now_ms) - start ))
installer_ready() { kns get ds netendpoint-installer -o jsonpath='{.status.numberReady}'; }
wait_for 60 0 installer_ready || fail "the installer stayed Ready (its --check passed) with revoked credentials"
t_unready=$(( $(now_ms) - start ))
reason=$(crictl info | jq -r '.status.conditions[] | select(.type == "NetworkReady") | .reason')
say "ServiceAccount netendpoint-cni recreated: NetworkReady=false ($reason) after ${t_net} ms, Node Ready=False after ${t_node} ms, installer not ready after ${t_unready} ms"
# The installer mints a new token only when its current one is due (40 to
# 50 % of 24 h), so recovery is a restart of the installer (docs/install.md).
start=$(now_ms)
kns rollout restart ds/netendpoint-installer >/dev/null
kns rollout status ds/netendpoint-installer --timeout=120s >/dev/null || fail "the installer did not roll out"
wait_for 60 true net_ready || fail "NetworkReady did not recover"
wait_for 90 True node_ready || fail "node did not become Ready again"
t_back=$(( $(now_ms) - start ))
say "kubectl rollout restart ds/netendpoint-installer: node Ready again after ${t_back} ms"
result "D credentials: a damaged token file rewritten by the installer after ${t_repair} ms; revoked (ServiceAccount recreated): NetworkReady=false after ${t_net} ms, Node Ready=False after ${t_node} ms, installer not ready after ${t_unready} ms; Ready again ${t_back} ms after restarting the installer"
fi

if want X; then
echo
say "== scenario X: uninstall, the steps of docs/install.md word for word"
# Step 1 starts with the user's own workloads: here the scenarios' Pods.
kc delete pods --all -n default --wait=false >/dev/null 2>&1 || true
start=$(now_ms)
tests/node/docs-run.sh uninstall-workloads
t_work=$(( $(now_ms) - start ))
tests/node/docs-run.sh uninstall-drain
t_drain=$(( $(now_ms) - start ))
tests/node/docs-run.sh --node uninstall-node-config
tests/node/docs-run.sh uninstall-delete
t_delete=$(( $(now_ms) - start ))
left=$(kc get crd,clusterrole,clusterrolebinding,validatingadmissionpolicy,validatingadmissionpolicybinding -o name | grep netendpoint || true)
[ -z "$left" ] || fail "kubectl delete -k left cluster objects behind: $left"
! kc get namespace netendpoint-system >/dev/null 2>&1 || fail "namespace netendpoint-system is still there"
on_node=()
for f in "$NODE_DIR"/cni/bin/netendpoint "$NODE_DIR"/cni/conf/netendpoint.d/* "$NODE_DIR"/cni/varlib/netendpoint; do
  [ -e "$f" ] && on_node+=("${f#$NODE_DIR/}")
done
# What docs/install.md says stays on a node, with /opt/cni/bin, /etc/cni/net.d
# and /var/lib/cni being cni/bin, cni/conf and cni/varlib here.
want_left="cni/bin/netendpoint cni/conf/netendpoint.d/ca.crt cni/conf/netendpoint.d/kubeconfig cni/conf/netendpoint.d/nodename cni/conf/netendpoint.d/token cni/varlib/netendpoint"
[ "${on_node[*]}" = "$want_left" ] || fail "left on the node: ${on_node[*]}; docs/install.md says: $want_left"
whoami=$("$tbin/kubectl" --kubeconfig "$NODE_DIR/cni/conf/netendpoint.d/kubeconfig" auth whoami 2>&1) &&
  fail "the plugin's token still authenticates after the uninstall: $whoami"
tests/node/docs-run.sh --node uninstall-node-files
for f in cni/bin/netendpoint cni/conf/netendpoint.d cni/conf/10-netendpoint.conflist cni/varlib/netendpoint; do
  [ ! -e "$NODE_DIR/$f" ] || fail "$f is still on the node after the last step"
done
say "uninstalled: workloads' leases gone after ${t_work} ms, every lease after ${t_drain} ms, kubectl delete -k and the namespace gone after ${t_delete} ms; left on the node until step 5: ${on_node[*]} (the token no longer authenticates)"
result "X uninstall (docs/install.md word for word): leases of the workloads released ${t_work} ms after their deletion, all leases ${t_drain} ms, CRDs and namespace deleted ${t_delete} ms (never Terminating on a lease); kubectl delete -k left on the node what the docs list, with a dead token"
fi
