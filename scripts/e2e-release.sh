#!/usr/bin/env bash
# make e2e-release: a release installed on the real node as a user installs
# it from a registry. Needs root; tears the node and the registry down on
# exit, pass or fail.
#   1. `make release` of this tree (scripts/release.sh: both platforms, the
#      chart, SBOMs, signatures) with a key of this test, its references
#      naming a local registry (distribution, scripts/registry.sh, on a
#      loopback address);
#   2. pushed there (scripts/release-push.sh): the image indexes, the chart
#      as an OCI artifact, the SBOMs and signatures as referrers;
#   3. verified from the registry with the public key alone
#      (scripts/release-verify-registry.sh), and shown refused when the
#      registry serves a tampered chart (signed bytes changed, the old
#      signatures attached) or a tampered image (its tag moved to other
#      bytes);
#   4. installed on the real node with `helm install oci://...`: containerd
#      pulls every image from the registry by the digest the chart pins
#      (nothing is imported), asserted from each Pod's imageID and the
#      registry's access log;
#   5. used: a Deployment's Pods get leases and addresses, and a deleted
#      Pod's lease ends once the agent of the release has let it go.
# E2E_RELEASE_VERSION: the version built (default: CHANGELOG.md's newest).
# REGISTRY_ADDR: the registry's loopback address (default 127.0.0.1:5117).
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/node/lib.sh
version=${E2E_RELEASE_VERSION:-$(sed -n 's/^## \[\([0-9][^]]*\)\].*/\1/p' CHANGELOG.md | head -n1)}
[ -n "$version" ] || { echo "e2e-release: CHANGELOG.md names no release" >&2; exit 1; }
export REGISTRY_ADDR=${REGISTRY_ADDR:-127.0.0.1:5117}
work=$repo/target/e2e-release
repo_prefix=$REGISTRY_ADDR/netendpoint
chart_ref=oci://$repo_prefix/charts/netendpoint
oras=$tbin/oras helm=$tbin/helm
fail() { echo "E2E-RELEASE FAILED: $*" >&2; exit 1; }
results=()
result() { results+=("$*"); }
cleanup() {
  local rc=$?
  if [ "$rc" != 0 ] && [ -d "$NODE_DIR/logs" ]; then
    kc get pods -A -o wide >&2 2>/dev/null || true
    tail -n 20 "$work/registry/registry.log" >&2 2>/dev/null || true
  fi
  tests/node/down.sh >/dev/null 2>&1 || true
  scripts/registry.sh stop "$work/registry" || true
  if [ "$rc" = 0 ]; then
    echo; say "== figures"
    for r in "${results[@]}"; do echo "  $r"; done
    echo "  e2e-release total: $(( $(date +%s) - t0 )) s"
    say "E2E-RELEASE PASSED"
  fi
  exit "$rc"
}
trap cleanup EXIT
t0=$(date +%s)
mkdir -p "$work"

say "== make release $version, signed with this test's key, its references in $repo_prefix"
keys=$work/keys; mkdir -p "$keys"
COSIGN_PASSWORD=$(head -c 24 /dev/urandom | base64)
export COSIGN_PASSWORD RELEASE_SIGNING_KEY=$keys/release.key RELEASE_PUBLIC_KEY=$keys/release.pub
rm -f "$keys"/release.*
"$tbin/cosign" generate-key-pair --output-key-prefix "$keys/release" >/dev/null 2>&1 || fail "cosign generate-key-pair"
start=$(date +%s)
RELEASE_REPO=$repo_prefix RELEASE_OUT=$work/release-$version scripts/release.sh "$version" > "$work/release.log" 2>&1 ||
  { tail -n 30 "$work/release.log" >&2; fail "make release $version"; }
t_release=$(( $(date +%s) - start ))
grep -A2 '=== image indexes' "$work/release.log" | tail -n +2 | sed 's/^/    /'
result "make release $version (both platforms, chart, SBOMs, signatures, checks): ${t_release} s"
rel=$work/release-$version

say "== the registry, and the release pushed to it"
rm -rf "$work/registry"
scripts/registry.sh start "$work/registry" >/dev/null
start=$(now_ms)
scripts/release-push.sh "$rel"
result "pushed to the registry at $REGISTRY_ADDR in $(( $(now_ms) - start )) ms"

say "== verified from the registry with the public key, before anything is installed"
scripts/release-verify-registry.sh "$chart_ref" "$version" || fail "the release as the registry serves it does not verify"
result "release-verify-registry: the chart, images.txt, every image's digest and SBOM verified"

say "== a tampered chart is refused"
tamper=$work/tamper; rm -rf "$tamper"; mkdir -p "$tamper/chart"
tar -xzf "$rel/netendpoint-$version.tgz" -C "$tamper/chart"
# One value changed: the installer, plugin and controller from another image.
sed -i 's/^  pullPolicy: IfNotPresent/  pullPolicy: Always/' "$tamper/chart/netendpoint/values.yaml"
"$helm" package "$tamper/chart/netendpoint" --destination "$tamper" >/dev/null
cmp -s "$tamper/netendpoint-$version.tgz" "$rel/netendpoint-$version.tgz" && fail "the tampered chart has the signed bytes"
"$helm" push "$tamper/netendpoint-$version.tgz" "oci://$repo_prefix/tampered/charts" --plain-http >/dev/null 2>&1
# The attacker attaches the release's own signatures to it.
(cd "$rel" && "$oras" attach --plain-http --artifact-type application/vnd.netendpoint.release.signatures.v1 \
  "$repo_prefix/tampered/charts/netendpoint:$version" "netendpoint-$version.tgz.sig" images.txt images.txt.sig >/dev/null)
if scripts/release-verify-registry.sh "oci://$repo_prefix/tampered/charts/netendpoint" "$version" > "$tamper/chart.out" 2>&1; then
  cat "$tamper/chart.out" >&2; fail "a tampered chart verified"
fi
grep -q "has no signature that verifies" "$tamper/chart.out" || { cat "$tamper/chart.out" >&2; fail "the tampered chart was refused for another reason"; }
say "refused: $(grep REFUSED "$tamper/chart.out")"
result "a tampered chart (one value changed, the release's signatures attached): refused"

say "== a tampered image is refused"
read -r ref digest _ amd _ < <(head -n1 "$rel/images.txt")
amd=${amd#linux/amd64=}
# The tag moved to other bytes: the amd64 manifest alone, not the signed index.
"$oras" cp --from-plain-http --to-plain-http "${ref%:*}@$amd" "$ref" >/dev/null
if scripts/release-verify-registry.sh "$chart_ref" "$version" > "$tamper/image.out" 2>&1; then
  cat "$tamper/image.out" >&2; fail "a tampered image verified"
fi
grep -q "the image was changed" "$tamper/image.out" || { cat "$tamper/image.out" >&2; fail "the tampered image was refused for another reason"; }
say "refused: $(grep REFUSED "$tamper/image.out")"
result "a tampered image (its tag moved to other bytes): refused"
"$oras" cp --from-plain-http --to-plain-http "${ref%:*}@$digest" "$ref" >/dev/null
scripts/release-verify-registry.sh "$chart_ref" "$version" >/dev/null || fail "the restored release does not verify"

say "== the real node, its containerd pointed at the registry"
tests/node/build.sh
node_lock
NODE_NO_INSTALL=1 tests/node/up.sh
source tests/node/e2e-lib.sh
mkdir -p "$NODE_DIR/ctd/certs.d/$REGISTRY_ADDR"
cat > "$NODE_DIR/ctd/certs.d/$REGISTRY_ADDR/hosts.toml" <<EOF
server = "http://$REGISTRY_ADDR"
[host."http://$REGISTRY_ADDR"]
  capabilities = ["pull", "resolve"]
EOF
for r in $(awk '{ print $1 }' "$rel/images.txt"); do
  ! ctr -n k8s.io images ls -q | grep -q "^${r%:*}" ||
    fail "containerd already has $r before the install"
done

say "== helm install $chart_ref --version $version"
start=$(now_ms)
access0=$(wc -l < "$work/registry/registry.log")
# A fresh cluster has none of netendpoint's CRDs; the node's API server was
# given them at its start (scripts/testenv.sh), so they go first: the chart
# installs its own.
kc delete -f deploy/crd.yaml --wait=true >/dev/null
kc create namespace netendpoint-system >/dev/null
kc label namespace netendpoint-system pod-security.kubernetes.io/enforce=privileged >/dev/null
kns create configmap netendpoint-net-conf --from-file=10-netendpoint.conflist="$NODE_DIR/install/10-netendpoint.conflist" >/dev/null
"$helm" install netendpoint "$chart_ref" --version "$version" --plain-http --namespace netendpoint-system \
  --set namespace.create=false --kubeconfig "$NODE_DIR/api/kubeconfig" >/dev/null ||
  fail "helm install $chart_ref --version $version"
for w in ds/netendpoint-installer ds/netendpoint-watcher-example deployment/netendpoint-controller; do
  kns rollout status "$w" --timeout=300s >/dev/null || fail "$w did not roll out from the registry's images"
done
tests/node/policies-wait.sh
kc wait --for=condition=Ready "node/$NODE_NAME" --timeout=120s >/dev/null || fail "node not Ready"
t_install=$(( $(now_ms) - start ))
say "installed from the registry and rolled out in $t_install ms"
result "helm install from the registry to rolled out: $t_install ms"

# Every container of the release runs the image the release signed, pulled
# from the registry: its imageID is REGISTRY/<image>@<index digest>.
declare -A signed=()
while read -r r d _; do signed[${r%:*}@$d]=1; done < "$rel/images.txt"
n=0
while read -r pod id; do
  [ -n "${signed[$id]:-}" ] || fail "$pod runs $id, not an image the release signed"
  n=$((n + 1))
done < <(kns get pods -o json | jq -r '.items[] | .metadata.name as $p | .status.containerStatuses[]?, .status.initContainerStatuses[]? | "\($p) \(.imageID)"')
[ "$n" -ge 3 ] || fail "only $n containers of the release were found"
pulled=$(tail -n +"$((access0 + 1))" "$work/registry/registry.log" | grep -c '"GET /v2/netendpoint/[^ ]*/manifests/sha256:' || true)
[ "$pulled" -ge 2 ] || fail "the registry's log shows $pulled manifest pulls by digest"
say "$n containers run the signed images by digest; the registry served $pulled manifest GETs by digest"
result "$n containers of the release run REGISTRY/<image>@<signed index digest>; nothing imported; $pulled manifest pulls by digest"

say "== used: a Deployment gets leases and addresses, and a deleted Pod's lease ends"
deployment app 2
kc rollout status deployment/app --timeout=120s >/dev/null || fail "app did not roll out"
for p in $(kc get pods -l app=app -o name); do
  ip=$(kc get "$p" -o jsonpath='{.status.podIP}')
  read -r lease _ _ < <(lease_of "$ip")
  [ -n "$lease" ] || fail "$p ($ip) has no NetworkEndpoint"
done
victim=$(kc get pods -l app=app -o jsonpath='{.items[0].metadata.name}')
vip=$(pod_ip "$victim")
read -r vlease _ _ < <(lease_of "$vip")
kc delete pod "$victim" --wait=false >/dev/null
gone() { ! kc get nep "$vlease" >/dev/null 2>&1; }
wait_until 60 gone || fail "the lease $vlease of the deleted Pod $victim did not end"
kc rollout status deployment/app --timeout=120s >/dev/null || fail "app did not roll out again"
say "the lease $vlease of $victim ($vip) ended after its agent's finalizer; the Deployment is whole again"
result "a Deployment's Pods leased; a deleted Pod's lease ended and a replacement started"
