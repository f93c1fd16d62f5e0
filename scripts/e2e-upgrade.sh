#!/usr/bin/env bash
# make e2e-upgrade: an upgrade on the real node, from the release before to
# this tree. The release before is a fixed earlier commit (UPGRADE_FROM),
# built the same way (`make images` of its source) and installed from its
# deploy/; Pods run on it (a Deployment, a StatefulSet with sticky IPs, a
# bare Pod), then this tree's deploy/ is applied with the commands of
# docs/install.md, "Upgrade", word for word. Asserted: every lease keeps its
# UID and finalizers, and every sticky hold stays, through the upgrade; the
# new plugin releases the leases the old one made (a Deployment's Pod deleted
# in a full pool, a StatefulSet's Pod recreated with its IP); no release is
# forced and no rule lost. Needs root; tears the node down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/node/lib.sh
# The release before: main as it was when this test was written (its parent
# commit, so that the upgrade crosses the changes of this branch).
from=${UPGRADE_FROM:-e16444db94e9bf9fc7fb1f93c6665d8f9b910a01}
# Old agent (on the pod network before), 2 + 1 controller Pods (a rollout
# surges one), 2 of app, 2 of web, 1 bare: room for every one, and a full
# pool at the end.
export NODE_POOL_SIZE=9
fail() { echo "E2E-UPGRADE FAILED: $*" >&2; exit 1; }
results=()
result() { results+=("$*"); }
cleanup() {
  local rc=$?
  if [ "$rc" != 0 ] && [ -d "$NODE_DIR/logs" ]; then
    kc get pods -A -o wide >&2 2>/dev/null
    for f in "$NODE_DIR"/logs/pods/*.log; do
      [ -f "$f" ] || continue
      echo "--- last lines of ${f##*/}" >&2; tail -n 8 "$f" | cut -c1-300 >&2
    done
  fi
  tests/node/down.sh
  if [ "$rc" = 0 ]; then
    echo; say "== figures"
    for r in "${results[@]}"; do echo "  $r"; done
    echo "  e2e-upgrade total: $(( $(date +%s) - t0 )) s"
    say "E2E-UPGRADE PASSED"
  fi
  exit "$rc"
}
trap cleanup EXIT
t0=$(date +%s)

old=$repo/target/upgrade-from
say "== the release before: $from, built as make images builds this tree"
git -C "$repo" cat-file -e "$from^{commit}" || fail "commit $from is not in this repository"
if [ "$(cat "$old/commit" 2>/dev/null)" != "$from" ]; then
  rm -rf "$old/src" "$old/images"; mkdir -p "$old/src"
  git -C "$repo" archive "$from" | tar -x -C "$old/src"
  echo "$from" > "$old/commit"
fi
start=$(date +%s)
# In its own target directory (target/upgrade-from/src/target), kept for the
# next run: a first run compiles every dependency again.
IMAGES_SRC=$old/src IMAGES_OUT=$old/images scripts/images.sh
t_old_build=$(( $(date +%s) - start ))
start=$(date +%s)
scripts/images.sh
t_new_build=$(( $(date +%s) - start ))
tests/node/build.sh
node_lock
NODE_NO_INSTALL=1 tests/node/up.sh
for tar in "$old"/images/*.tar "$repo"/target/images/*.tar; do ctr -n k8s.io images import "$tar" >/dev/null; done
source tests/node/e2e-lib.sh

say "== install the release before (its deploy/, with its images)"
start=$(now_ms)
kc apply -f "$old/src/deploy/namespace.yaml" >/dev/null
kns create configmap netendpoint-net-conf --from-file=10-netendpoint.conflist="$NODE_DIR/install/10-netendpoint.conflist" >/dev/null
[ ! -f "$old/src/deploy/agents.yaml" ] || kc apply -f "$old/src/deploy/agents.yaml" >/dev/null
kc apply -k "$old/images" >/dev/null
for w in ds/netendpoint-installer ds/netendpoint-watcher-example deployment/netendpoint-controller; do
  kns rollout status "$w" --timeout=180s >/dev/null || fail "the release before: $w did not roll out"
done
tests/node/policies-wait.sh
kc wait --for=condition=Ready "node/$NODE_NAME" --timeout=120s >/dev/null || fail "node not Ready"
say "release before installed in $(( $(now_ms) - start )) ms: $(kns get pods -o jsonpath='{range .items[*]}{.spec.containers[0].image} {end}' | tr ' ' '\n' | sort -u | tr '\n' ' ')"

say "== workloads on the release before"
deployment app 2
statefulset web 2
p=$(leased_bare_pod bare-1)
kc rollout status deployment/app --timeout=120s >/dev/null || fail "app not rolled out"
kc rollout status statefulset/web --timeout=120s >/dev/null || fail "web not rolled out"
# Every lease of the scenario's Pods: name uid finalizers, before.
snapshot() {
  kc get nep -l netendpoint.dev/pod-namespace=default -o json |
    jq -r '.items[] | "\(.metadata.name) \(.metadata.uid) \(.metadata.finalizers // [] | sort | join(","))"' | sort
}
before=$(snapshot)
holds=$(grep -c 'netendpoint.dev/sticky-hold' <<<"$before" || true)
[ "$holds" = 2 ] || fail "expected the sticky holds of web-0 and web-1, found $holds: $before"
say "$(wc -l <<<"$before") leases of app, web and bare-1, $holds with a sticky hold"
plugin_before=$(md5sum < "$NODE_DIR/cni/bin/netendpoint")

say "== upgrade: docs/install.md, Upgrade, with this tree's deploy/ as deploy/"
user_dir "$repo/target/images"
[ -f "$NODE_DIR/user/deploy/agents.yaml" ] && ! kns get configmap netendpoint-agents >/dev/null 2>&1 &&
  kc apply -f "$NODE_DIR/user/deploy/agents.yaml" >/dev/null
start=$(now_ms)
tests/node/docs-run.sh upgrade
t_upgrade=$(( $(now_ms) - start ))
kc wait --for=condition=Ready "node/$NODE_NAME" --timeout=120s >/dev/null || fail "node not Ready after the upgrade"
images_now=$(kns get pods -o jsonpath='{range .items[*]}{.spec.containers[0].image} {end}' | tr ' ' '\n' | sort -u | tr '\n' ' ')
for ref in $(awk '{print $1}' "$repo/target/images/images.txt"); do
  [[ " $images_now " == *" $ref "* ]] || fail "no Pod runs $ref after the upgrade: $images_now"
done
plugin_after=$(md5sum < "$NODE_DIR/cni/bin/netendpoint")
after=$(snapshot)
[ "$before" = "$after" ] || fail "leases changed through the upgrade: before [$before] after [$after]"
say "upgraded in ${t_upgrade} ms; every lease kept its UID and finalizers, sticky holds included; plugin binary $([ "$plugin_before" = "$plugin_after" ] && echo "unchanged (same bytes)" || echo replaced)"

say "== the new plugin serves the old leases"
# The pool is full now: app's replacement reuses the IP of the Pod deleted.
kc scale deployment app --replicas=$(( $(kc get deployment app -o jsonpath='{.spec.replicas}') + NODE_POOL_SIZE - $(kc get nep -o json | jq '.items | length') )) >/dev/null
kc rollout status deployment/app --timeout=120s >/dev/null || fail "app did not fill the pool"
[ "$(live_leases)" = "$NODE_POOL_SIZE" ] || fail "the pool is not full: $(live_leases) of $NODE_POOL_SIZE"
# A Pod whose lease the old plugin made.
victim= old_ip= old_uid=
while read -r name _ ip; do
  read -r _ uid _ < <(lease_of "$ip")
  if grep -q " $uid " <<<"$before"; then victim=$name old_ip=$ip old_uid=$uid; break; fi
done < <(running_pods app)
[ -n "$victim" ] || fail "no Pod of app holds a lease made before the upgrade"
kc delete pod "$victim" --wait=false >/dev/null
replaced() { [ "$(running_pods app | wc -l)" = "$(kc get deployment app -o jsonpath='{.spec.replicas}')" ] && ! running_pods app | grep -q "^$victim "; }
wait_until 120 replaced || fail "app's replacement of $victim did not become Running"
new_ip=$(running_pods app | awk -v ip="$old_ip" '$3 == ip {print $3}')
[ "$new_ip" = "$old_ip" ] || fail "the replacement did not reuse $old_ip in the full pool"
read -r _ new_uid _ < <(lease_of "$old_ip")
order=$(agent_order "$old_uid" "$new_uid" upgrade)
s_ip=$(pod_ip web-0); s_pod_uid=$(pod_uid web-0)
kc delete pod web-0 --wait=false >/dev/null
new_web0() { [ "$(pod_uid web-0)" != "$s_pod_uid" ] && [ -n "$(pod_uid web-0)" ] && running web-0 && [ -n "$(pod_ip web-0)" ]; }
wait_until 120 new_web0 || fail "web-0 was not recreated and Running"
[ "$(pod_ip web-0)" = "$s_ip" ] || fail "web-0 had $s_ip before the upgrade and came back with $(pod_ip web-0)"
b_ip=$(pod_ip bare-1)
kc delete pod bare-1 --timeout=60s >/dev/null || fail "bare-1 was not deleted"
gone() { [ -z "$(lease_of "$b_ip")" ]; }
wait_until 60 gone || fail "bare-1's lease, made by the old plugin, was not released by the new one"
forced=$(kc get events -A --field-selector reason=ForcedRelease -o json | jq '[.items[] | .count // 1] | add // 0')
[ "$forced" = 0 ] || fail "$forced forced releases"
[ "$(lost_rules)" = 0 ] || fail "$(lost_rules) lost rules in the agents' logs"
say "app's $victim (its lease made by the old plugin) replaced with the same IP $old_ip, DELETED(old) before ADDED(new) in the agent's log ($order); web-0 back with its IP $s_ip; bare-1's lease released; 0 forced releases, 0 lost rules"
result "upgrade from $from: old images built in ${t_old_build} s, new in ${t_new_build} s (the old tree in its own target directory); docs/install.md 'Upgrade' took ${t_upgrade} ms to every rollout done; $(wc -l <<<"$before") leases (2 sticky holds) kept their UIDs and finalizers; the new plugin released old leases (full-pool reuse, StatefulSet recreate with its IP, bare Pod); 0 forced releases, 0 lost rules"
