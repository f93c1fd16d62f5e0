#!/usr/bin/env bash
# make e2e-upgrade: an upgrade on the real node, from the release before to
# this tree's, both as users receive them. The release before is the
# sources of a fixed earlier commit (UPGRADE_FROM) released by this tree's
# tooling (scripts/release.sh with RELEASE_SRC: linux/amd64 and linux/arm64
# image indexes, its chart pinned to them, SBOMs, every file signed) as
# 0.1.0; this tree is released as CHANGELOG.md's newest version, signed with
# the same throwaway key. Both are pushed to a local registry
# (distribution, scripts/registry.sh, on a loopback address) with
# scripts/release-push.sh and verified there with the public key
# (scripts/release-verify-registry.sh) before anything is installed; the
# node's containerd pulls every image by its index digest from that
# registry, nothing imported. Each is installed from its deploy/ with its
# images pinned to the signed digests, the path docs/install.md's
# "Upgrade" documents (`make e2e-release` installs with helm from the
# registry). Pods run on the release before (a Deployment, a StatefulSet
# with sticky IPs, a bare Pod), then this tree's deploy/ is applied with the
# commands of docs/install.md, "Upgrade", word for word, while Pods wait in
# the full pool (the old plugin's waits, with no queue, when it begins) and
# a StatefulSet's Pod is being recreated. Asserted: every lease keeps its
# UID and finalizers, and every sticky hold stays, through the upgrade; the
# StatefulSet's Pod recreated across the upgrade keeps its IP; the waiters
# get the addresses the upgrade frees (the old release's Pods on the pod
# network, if any) and, the last one, the address freed after it, with no
# failed sandbox creation after that release; the new plugin releases the
# leases the old one made (a Deployment's Pod deleted in a full pool, a
# StatefulSet's Pod recreated with its IP, a bare Pod); no release is forced
# and no rule lost. Needs root; tears the node down on exit.
#
# E2E_UPGRADE_STS_DURING=0 leaves web-1 alone during the upgrade.
# E2E_UPGRADE_WAIT_FOR_RELEASE (default: the node's 20s) and
# E2E_UPGRADE_SKIP_RELEASE=1 weaken the waiters' part, to show it failing.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/node/lib.sh
# The release before: main as it was before the waiting queue (issue 32's
# starting point): its plugin waits unordered, with one need per pool and
# node, so the upgrade crosses the change of waiting protocol. Its sticky
# IPs are holds and incarnations, as this tree's.
from=${UPGRADE_FROM:-23867fbde90e6f47247f81a0cbbb1fcb0de0f365}
from_version=0.1.0
new_version=$(sed -n 's/^## \[\([0-9][^]]*\)\].*/\1/p' CHANGELOG.md | head -n1)
# Old agent and controller (on the pod network before), 2 of app, 2 of web,
# 1 bare: room for every one; app then fills the pool, and waiters wait.
export NODE_POOL_SIZE=9
sts_during=${E2E_UPGRADE_STS_DURING:-1}
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
  scripts/registry.sh stop "$registry_dir" >/dev/null 2>&1 || true
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
export REGISTRY_ADDR=${REGISTRY_ADDR:-127.0.0.1:5117}
work=$repo/target/e2e-upgrade
registry_dir=$work/registry
repo_prefix=$REGISTRY_ADDR/netendpoint
new_overlay=$work/new
# release_overlay SRC RELEASE OUT: writes OUT/kustomization.yaml, SRC's
# deploy/ with every image of the release folder RELEASE pulled from the
# registry by its index digest, under the name SRC's kustomization gives it.
release_overlay() {
  local src=$1 rel=$2 out=$3 ref digest title base
  mkdir -p "$out"
  printf '# %s/deploy with the images of %s from the registry, by digest (scripts/e2e-upgrade.sh)\nresources:\n  - %s\nimages:\n' \
    "$src" "$rel" "$(realpath --relative-to="$out" "$src/deploy")" > "$out/kustomization.yaml"
  while read -r ref digest _; do
    title=${ref%:*}; title=${title##*/}
    base=$(awk -v t="$title" '$1 == "-" && $2 == "name:" { n = $3 } $1 == "newName:" && n == t { print $2; exit }' \
      "$src/deploy/kustomization.yaml")
    [ "$("$tbin/oras" resolve --plain-http "${ref%:*}:${ref##*:}")" = "$digest" ] || fail "$ref is not $digest in the registry"
    printf '  - name: %s\n    newName: %s\n    digest: %s\n' "${base:-$title}" "${ref%:*}" "$digest" >> "$out/kustomization.yaml"
  done < "$rel/images.txt"
}
say "== the release before: $from, released as $from_version by this tree's scripts/release.sh; this tree as $new_version"
git -C "$repo" cat-file -e "$from^{commit}" || fail "commit $from is not in this repository"
if [ "$(cat "$old/commit" 2>/dev/null)" != "$from" ]; then
  rm -rf "$old/src" "$old/images" "$old/registry"; mkdir -p "$old/src"
  git -C "$repo" archive "$from" | tar -x -C "$old/src"
  echo "$from" > "$old/commit"
fi
keys=$work/keys; rm -rf "$keys"; mkdir -p "$keys"
COSIGN_PASSWORD=$(head -c 24 /dev/urandom | base64)
export COSIGN_PASSWORD RELEASE_SIGNING_KEY=$keys/release.key RELEASE_PUBLIC_KEY=$keys/release.pub
"$tbin/cosign" generate-key-pair --output-key-prefix "$keys/release" >/dev/null 2>&1 || fail "cosign generate-key-pair"
old_rel=$work/release-$from_version new_rel=$work/release-$new_version
printf '## [%s]\n\nThe release before, for `make e2e-upgrade`: the sources of commit %s, released with the tooling of a later tree.\n' \
  "$from_version" "$from" > "$keys/notes-$from_version.md"
start=$(date +%s)
# In its own target directory (target/upgrade-from/src/target), kept for the
# next run: a first run compiles every dependency again, for both platforms.
RELEASE_SRC=$old/src RELEASE_NOTES=$keys/notes-$from_version.md SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct "$from") \
  RELEASE_REPO=$repo_prefix RELEASE_OUT=$old_rel scripts/release.sh "$from_version" > "$work/release-old.log" 2>&1 ||
  { tail -n 30 "$work/release-old.log" >&2; fail "the release of $from"; }
t_old_build=$(( $(date +%s) - start ))
start=$(date +%s)
RELEASE_REPO=$repo_prefix RELEASE_OUT=$new_rel scripts/release.sh "$new_version" > "$work/release-new.log" 2>&1 ||
  { tail -n 30 "$work/release-new.log" >&2; fail "the release of this tree"; }
t_new_build=$(( $(date +%s) - start ))
result "releases built (both platforms, chart, SBOMs, signatures, checks): $from_version of $from in ${t_old_build} s, $new_version of this tree in ${t_new_build} s"
tests/node/build.sh
node_lock
NODE_NO_INSTALL=1 tests/node/up.sh
rm -rf "$registry_dir" "$new_overlay" "$old/registry"
scripts/registry.sh start "$registry_dir" >/dev/null
for v in "$from_version" "$new_version"; do
  scripts/release-push.sh "$work/release-$v" >/dev/null
  scripts/release-verify-registry.sh "oci://$repo_prefix/charts/netendpoint" "$v" > "$work/verify-$v.log" 2>&1 ||
    { cat "$work/verify-$v.log" >&2; fail "release $v, as the registry serves it, does not verify"; }
done
result "both releases pushed to the registry at $REGISTRY_ADDR and verified there with the public key before the install"
release_overlay "$old/src" "$old_rel" "$old/registry"
release_overlay "$repo" "$new_rel" "$new_overlay"
mkdir -p "$NODE_DIR/ctd/certs.d/$REGISTRY_ADDR"
printf 'server = "http://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' "$REGISTRY_ADDR" "$REGISTRY_ADDR" \
  > "$NODE_DIR/ctd/certs.d/$REGISTRY_ADDR/hosts.toml"
say "both releases in the registry at $REGISTRY_ADDR, signed and verified; the node pulls their images from there by digest"
source tests/node/e2e-lib.sh

say "== install the release before (its deploy/, with its images)"
start=$(now_ms)
kc apply -f "$old/src/deploy/namespace.yaml" >/dev/null
if [ -n "${E2E_UPGRADE_WAIT_FOR_RELEASE:-}" ]; then
  jq --arg w "$E2E_UPGRADE_WAIT_FOR_RELEASE" '.plugins[0].ipam.waitForRelease = $w' "$NODE_DIR/install/10-netendpoint.conflist" \
    > "$NODE_DIR/install/10-netendpoint.conflist.tmp"
  mv "$NODE_DIR/install/10-netendpoint.conflist.tmp" "$NODE_DIR/install/10-netendpoint.conflist"
fi
kns create configmap netendpoint-net-conf --from-file=10-netendpoint.conflist="$NODE_DIR/install/10-netendpoint.conflist" >/dev/null
[ ! -f "$old/src/deploy/agents.yaml" ] || kc apply -f "$old/src/deploy/agents.yaml" >/dev/null
kc apply -k "$old/registry" >/dev/null
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
# The IPs in use (a sticky hold and its incarnation share one; a release in
# progress still holds its IP).
ips_used() { kc get nep -o json | jq '[.items[].spec.ip] | unique | length'; }
room=$(( NODE_POOL_SIZE - $(ips_used) ))
kc scale deployment app --replicas=$(( 2 + room )) >/dev/null
kc rollout status deployment/app --timeout=120s >/dev/null || fail "app did not fill the pool"
[ "$(ips_used)" = "$NODE_POOL_SIZE" ] || fail "the pool is not full: $(ips_used) IPs of $NODE_POOL_SIZE in use"
# Every lease of the scenario's Pods: name uid finalizers, before.
snapshot() {
  kc get nep -o json | jq -r '.items[]
    | select(.metadata.labels["netendpoint.dev/pod-namespace"] == "default" or .metadata.labels["netendpoint.dev/role"] == "hold")
    | "\(.metadata.name) \(.metadata.uid) \(.metadata.finalizers // [] | sort | join(","))"' | sort
}
before=$(snapshot)
# A sticky hold: a NetworkEndpoint labelled netendpoint.dev/role=hold (the
# design before that kept the lease itself, with the finalizer
# netendpoint.dev/sticky-hold).
holds=$(( $(kc get nep -l netendpoint.dev/role=hold -o name | wc -l) + $(grep -c 'netendpoint.dev/sticky-hold' <<<"$before" || true) ))
[ "$holds" = 2 ] || fail "expected the sticky holds of web-0 and web-1, found $holds: $before"
# The old release's own Pods on the pod network: their leases end during the upgrade.
old_system=$(kc get nep -o json | jq '[.items[] | select(.spec.pod.namespace == "netendpoint-system")] | length')
say "$(wc -l <<<"$before") leases of app, web and bare-1, $holds with a sticky hold; the pool full ($NODE_POOL_SIZE IPs, $old_system of them the old release's own Pods)"
plugin_before=$(md5sum < "$NODE_DIR/cni/bin/netendpoint")

say "== across the upgrade: web-1 recreated, and $(( old_system + 1 )) Pods waiting in the full pool"
r_ip=$(pod_ip web-1); r_pod_uid=$(pod_uid web-1)
read -r r_lease _ _ < <(lease_of "$r_ip")
# The release before keeps web-1's IP with a hold.
r_hold=$(hold_of "$r_ip")
[ -n "$r_hold" ] && grep -q "^$r_hold " <<<"$before" || fail "web-1's IP $r_ip has no sticky hold: $before"
# The waiters: one for each IP the upgrade frees, and one more, which waits
# until an IP is freed after the upgrade.
n_wait=$(( old_system + 1 ))
plugin_lines0=$(wc -l < "$NODE_DIR/logs/plugin.log")
waiters=()
declare -A w_created=()
for i in $(seq 1 "$n_wait"); do
  bare_pod "waiter-$i"
  waiters+=("waiter-$i"); w_created[waiter-$i]=$(now_ms)
done
# Each waits in the old plugin's protocol (unordered, no queue): its ADD
# logs that the pool is full and it waits for a release.
needed() { local w; for w in "${waiters[@]}"; do
  tail -n +"$((plugin_lines0 + 1))" "$NODE_DIR/logs/plugin.log" | grep 'pool full: waiting for a release' |
    grep -qE "pod=default/$w([^0-9]|\$)" || return 1; done; }
wait_until 60 needed || fail "the waiters did not all wait in the full pool under the old plugin (no 'pool full: waiting' in its log)"
say "${waiters[*]} Pending, each waiting under the old plugin"

say "== upgrade: docs/install.md, Upgrade, with this tree's deploy/ as deploy/"
user_dir "$new_overlay"
[ -f "$NODE_DIR/user/deploy/agents.yaml" ] && ! kns get configmap netendpoint-agents >/dev/null 2>&1 &&
  kc apply -f "$NODE_DIR/user/deploy/agents.yaml" >/dev/null
# web-1 goes as soon as the new deploy/ is applied (the admission policy
# netendpoint-agent-scope is new in it): its recreation's ADD runs while the
# old plugin, old controller and new admission policies meet, and whichever
# plugin and controller run then ask for and make its next incarnation.
applied() { kc get validatingadmissionpolicy netendpoint-agent-scope >/dev/null 2>&1; }
if applied; then fail "the release before already has the policy netendpoint-agent-scope: choose another marker of the new deploy/"; fi
start=$(now_ms)
tests/node/docs-run.sh upgrade &
upgrade_pid=$!
wait_until 60 applied || fail "the new deploy/ was not applied (no policy netendpoint-agent-scope)"
[ "$sts_during" = 0 ] || kc delete pod web-1 --wait=false >/dev/null
t_web1_deleted=$(( $(now_ms) - start ))
wait "$upgrade_pid" || fail "the docs' upgrade steps failed"
t_upgrade=$(( $(now_ms) - start ))
kc wait --for=condition=Ready "node/$NODE_NAME" --timeout=120s >/dev/null || fail "node not Ready after the upgrade"
images_now=$(kns get pods -o jsonpath='{range .items[*]}{.spec.containers[0].image} {end}' | tr ' ' '\n' | sort -u | tr '\n' ' ')
while read -r ref digest _; do
  ref=${ref%:*}@$digest
  [[ " $images_now " == *" $ref "* ]] || fail "no Pod runs $ref after the upgrade: $images_now"
done < "$new_rel/images.txt"
plugin_after=$(md5sum < "$NODE_DIR/cni/bin/netendpoint")
say "upgraded in ${t_upgrade} ms; plugin binary $([ "$plugin_before" = "$plugin_after" ] && echo "unchanged (same bytes)" || echo replaced)"

new_web1() { [ "$(pod_uid web-1)" != "$r_pod_uid" ] && [ -n "$(pod_uid web-1)" ] && running web-1 && [ -n "$(pod_ip web-1)" ]; }
[ "$sts_during" = 0 ] && new_web1() { running web-1; }
wait_until 120 new_web1 || fail "web-1, deleted before the upgrade, was not recreated and Running"
r_ip_now=$(pod_ip web-1)
t=$(kc get pod web-1 -o json | jq -r '.status.conditions[] | select(.type == "Ready") | .lastTransitionTime')
t_web1=$(( $(date -d "$t" +%s%3N) - start ))
# Every lease kept its UID and finalizers, but web-1's, which its
# recreation replaced or left held.
after=$(snapshot)
lost_leases=$(comm -23 <(grep -v "^$r_lease " <<<"$before") <(sort <<<"$after"))
[ -z "$lost_leases" ] || fail "leases changed through the upgrade: [$lost_leases]; after [$after]"
# web-1's IP is its own or still held for it: nobody else has it.
r_holder=$(kc get nep -o json | jq -r --arg ip "$r_ip" '[.items[] | select(.spec.ip == $ip) | .spec.pod.name // "-"] | unique | join(",")')
[[ "$r_holder" == web-1 || "$r_holder" == "" ]] || fail "web-1's IP $r_ip went to $r_holder"
if [ "$sts_during" = 0 ]; then
  sts_figure="web-1 left alone (E2E_UPGRADE_STS_DURING=0)"
else
  sts_figure="web-1 deleted ${t_web1_deleted} ms into the upgrade, Running again ${t_web1} ms after the upgrade began with $r_ip_now ($([ "$r_ip_now" = "$r_ip" ] && echo "its IP" || echo "its IP $r_ip kept for it meanwhile"); $(sandbox_failures web-1) failed sandbox creations)"
fi
say "$sts_figure; every other lease kept its UID and finalizers, sticky holds included"

# The IPs the upgrade freed go to the waiters (and to web-1, if its
# recreation took one before the new controller made its claim); the pool
# is full again, and at least one waiter still waits.
w_running() { local n=0 w; for w in "${waiters[@]}"; do running "$w" && n=$((n + 1)); done; echo "$n"; }
releases() { kc get nep -o json | jq '[.items[] | select(.metadata.deletionTimestamp != null and ((.metadata.finalizers // []) | index("netendpoint.dev/sticky-hold") | not))] | length'; }
settled() { [ "$(ips_used)" = "$NODE_POOL_SIZE" ] && [ "$(releases)" = 0 ]; }
wait_until 120 settled || fail "the pool did not fill again after the upgrade: $(ips_used) of $NODE_POOL_SIZE IPs in use"
sleep 3
pending=()
for w in "${waiters[@]}"; do running "$w" || pending+=("$w"); done
[ "${#pending[@]}" -gt 0 ] || fail "every waiter is Running, but the pool had room for $(( n_wait - 1 )) of them only"
declare -A w_ms=()
for w in "${waiters[@]}"; do
  running "$w" || continue
  t=$(kc get pod "$w" -o json | jq -r '.status.conditions[] | select(.type == "Ready") | .lastTransitionTime')
  w_ms[$w]=$(( $(date -d "$t" +%s%3N) - w_created[$w] ))
done
say "$(w_running) waiters got the IPs the upgrade freed; ${pending[*]} still wait in the full pool ($(ips_used) of $NODE_POOL_SIZE IPs in use)"

# An IP freed after the upgrade, acknowledged by the agent: bare-1's lease,
# made by the old plugin, released by the new one. With the waiter's ADD in
# the queue (its entry ordered by the new controller), it must be served by
# it: no sandbox creation of the waiter fails after the release.
# The first of them in the new queue (ordered by the new controller) is the one served.
first_queued() { kc get nepneed -o json | jq -r '[.items[] | select(.status.arrival != null)] | sort_by(.status.arrival | tonumber) | .[0].spec.pod.name // empty'; }
queued() { last=$(first_queued); [ -n "$last" ]; }
wait_until 90 queued || fail "no waiter's ADD waited in the new queue (no ordered entry)"
b_ip=$(pod_ip bare-1)
read -r _ b_uid _ < <(lease_of "$b_ip")
fails_before=$(sandbox_failures "$last")
t_rel=$(now_ms)
gone() { ! kc get nep -o json | jq -e --arg u "$b_uid" 'any(.items[]; .metadata.uid == $u)' >/dev/null; }
t_gone=skipped
if [ "${E2E_UPGRADE_SKIP_RELEASE:-0}" != 1 ]; then
  kc delete pod bare-1 --wait=false >/dev/null
  wait_until 60 gone || fail "bare-1's lease, made by the old plugin, was not released by the new one"
  t_gone=$(( $(now_ms) - t_rel ))
fi
wait_until 60 running "$last" || fail "$last did not get the IP freed after the upgrade ($b_ip): $(kc get pod "$last" -o jsonpath='{.status.phase}')"
t_last=$(( $(now_ms) - t_rel ))
fails_after=$(( $(sandbox_failures "$last") - fails_before ))
last_ip=$(pod_ip "$last")
[ "$last_ip" = "$b_ip" ] || fail "$last got $last_ip, not the IP $b_ip freed for it"
if [ "$fails_after" != 0 ]; then
  kc get events --field-selector "involvedObject.name=$last,reason=FailedCreatePodSandBox" -o custom-columns=LAST:.lastTimestamp,COUNT:.count,MESSAGE:.message | cut -c1-300 >&2
  fail "$fails_after failed sandbox creations of $last after the release of $b_ip"
fi
w_ms[$last]=$(( $(now_ms) - w_created[$last] ))
# Waiters left: the pool has nothing more for them.
for w in "${pending[@]}"; do
  [ "$w" = "$last" ] || running "$w" || kc delete pod "$w" --wait=false >/dev/null
done
# What each waiter went through: its failed sandbox creations (the old
# plugin's and the new one's waits that ran out before an IP was free, and
# any other), and how long it was Pending.
w_report=()
exhausted_total=0 other_total=0 ranges_total=0
for w in "${waiters[@]}"; do
  [ -n "${w_ms[$w]:-}" ] || continue
  ev=$(kc get events --field-selector "involvedObject.name=$w,reason=FailedCreatePodSandBox" -o json)
  ex=$(jq '[.items[] | select(.message | test("exhausted: [0-9]+ of [0-9]+ IPs in use")) | .count // 1] | add // 0' <<<"$ev")
  all=$(jq '[.items[] | .count // 1] | add // 0' <<<"$ev")
  exhausted_total=$(( exhausted_total + ex )); other_total=$(( other_total + all - ex ))
  ranges=$(jq '[.items[] | select(.message | test("has no ranges")) | .count // 1] | add // 0' <<<"$ev")
  ranges_total=$(( ranges_total + ranges ))
  w_report+=("$w Pending $(( w_ms[$w] / 1000 )) s, $all failed sandbox creations ($ex a wait that ran out, $ranges refused while the pool's ranges were not registered)")
  if [ "$(( all - ex - ranges ))" != 0 ]; then
    jq -r '.items[] | select(.message | test("exhausted: [0-9]+ of [0-9]+ IPs in use|has no ranges") | not) | "  \(.count // 1)x \(.message)"' <<<"$ev" | cut -c1-300
  fi
done
tail -n +"$((plugin_lines0 + 1))" "$NODE_DIR/logs/plugin.log" > "$NODE_DIR/upgrade-plugin.log"
old_waits=$(grep -c 'waiting for a release to begin and finish' "$NODE_DIR/upgrade-plugin.log" || true)
new_queued=$(grep -c 'pool full: waiting in its queue' "$NODE_DIR/upgrade-plugin.log" || true)
new_unordered=$(grep -c 'pool full: waiting for a release' "$NODE_DIR/upgrade-plugin.log" || true)
late_joins=$(grep -c 'the pool is summarised now' "$NODE_DIR/upgrade-plugin.log" || true)
say "$last got $b_ip ${t_last} ms after bare-1's delete (its lease gone after ${t_gone} ms), 0 failed sandbox creations after it; ADDs since the waiters waited: old plugin $old_waits waits, new plugin $new_unordered waits ($new_queued in the queue, $late_joins joined it late)"
for r in "${w_report[@]}"; do say "  $r"; done
result "across the upgrade: $sts_figure; $n_wait Pods waited in the full pool: $(for r in "${w_report[@]}"; do printf '%s; ' "$r"; done)$(( ${#pending[@]} - 1 )) left waiting (deleted); the last got the IP freed after the upgrade ${t_last} ms after its release began (its lease gone after ${t_gone} ms), 0 failed sandbox creations after it; waits: old plugin $old_waits, new plugin $new_unordered ($new_queued queued, $late_joins joined late); failed sandbox creations: $exhausted_total waits that ran out, $ranges_total refused while the pool's ranges were not registered, $(( other_total - ranges_total )) other"

say "== the new plugin serves the old leases"
# The pool is full (the last waiter took the last IP): app's replacement
# reuses the IP of the Pod deleted.
[ "$(ips_used)" = "$NODE_POOL_SIZE" ] || fail "the pool is not full: $(ips_used) IPs of $NODE_POOL_SIZE in use"
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
# web-1, if its recreation during the upgrade took another address (before
# the new controller made its claim), gets back the one its old lease kept.
web1_again=
if [ "$sts_during" != 0 ] && [ "$r_ip_now" != "$r_ip" ]; then
  r_pod_uid=$(pod_uid web-1)
  kc delete pod web-1 --wait=false >/dev/null
  wait_until 120 new_web1 || fail "web-1 was not recreated and Running after the upgrade"
  [ "$(pod_ip web-1)" = "$r_ip" ] || fail "web-1 came back with $(pod_ip web-1), not $r_ip, which the old version's lease kept for it"
  web1_again="; web-1 recreated again, back with $r_ip, which the old version's lease kept for it"
fi
forced=$(kc get events -A --field-selector reason=ForcedRelease -o json | jq '[.items[] | .count // 1] | add // 0')
[ "$forced" = 0 ] || fail "$forced forced releases"
[ "$(lost_rules)" = 0 ] || fail "$(lost_rules) lost rules in the agents' logs"
say "app's $victim (its lease made by the old plugin) replaced with the same IP $old_ip, DELETED(old) before ADDED(new) in the agent's log ($order); web-0 back with its IP $s_ip$web1_again; 0 forced releases, 0 lost rules"
result "upgrade from $from_version ($from) to $new_version: docs/install.md 'Upgrade' took ${t_upgrade} ms to every rollout done; $(wc -l <<<"$before") leases (2 sticky holds) kept their UIDs and finalizers; the new plugin released old leases (full-pool reuse, StatefulSet recreate with its IP, bare Pod); 0 forced releases, 0 lost rules"
