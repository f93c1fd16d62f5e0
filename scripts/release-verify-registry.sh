#!/usr/bin/env bash
# release-verify-registry.sh oci://REPO/charts/netendpoint VERSION
#
# Verifies a release as a registry serves it (scripts/release-push.sh put it
# there), offline, with the public key RELEASE_PUBLIC_KEY (required), before
# anything is installed from it:
#   - the chart the registry serves for VERSION verifies against its
#     signature (attached to the chart as a referrer), and so does
#     images.txt, the list of the release's image indexes and their digests;
#   - every image of images.txt: its tag resolves in the registry to the
#     digest images.txt lists (a tag pointed at other bytes is refused), and
#     its SBOM (attached to it) verifies against the SBOM's signature;
#   - every image the chart's values pin is one of images.txt, by digest.
# Prints one line per check; the first failed check ends it with exit 1 and
# says what did not verify. Since the chart pins every image by digest and
# a registry addresses content by its digest, what the node pulls is what
# was signed.
set -euo pipefail
cd "$(dirname "$0")/.."
chart_ref=${1:-} version=${2:-}
[[ "$chart_ref" == oci://* ]] && [ -n "$version" ] ||
  { echo "release-verify-registry: give oci://REPO/charts/netendpoint VERSION" >&2; exit 2; }
pub=${RELEASE_PUBLIC_KEY:-}
[ -n "$pub" ] && [ -f "$pub" ] ||
  { echo "release-verify-registry: give the release's public key: RELEASE_PUBLIC_KEY=<cosign.pub>" >&2; exit 2; }
oras=${ORAS:-tests/bin/oras} helm=${HELM:-tests/bin/helm} cosign=${COSIGN:-tests/bin/cosign}
for t in "$oras" "$helm" "$cosign"; do
  [ -x "$t" ] || { echo "release-verify-registry: $t missing (scripts/release-tools.sh builds it)" >&2; exit 1; }
done
repo=${chart_ref#oci://}; host=${repo%%/*}
plain=()
case "$host" in 127.*|localhost|localhost:*|\[::1\]*) plain=(--plain-http) ;; esac
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
bad() { echo "release-verify-registry: REFUSED: $*" >&2; exit 1; }
ok() { echo "   ok  $*"; }

# verify FILE SIG: the cosign signature SIG of FILE, with the public key.
verify() {
  "$cosign" verify-blob --key "$pub" --signature "$2" --insecure-ignore-tlog=true --offline=true "$1" \
    >"$work/cosign.out" 2>&1
}
# referrers SUBJECT ARTIFACT_TYPE: the digests of SUBJECT's referrers of that type.
referrers() {
  "$oras" discover "${plain[@]}" --format json --artifact-type "$2" "$1" 2>"$work/oras.err" |
    jq -r '(.referrers // .manifests // [])[] | .digest'
}

mkdir -p "$work/chart"
"$helm" pull "$chart_ref" --version "$version" "${plain[@]}" -d "$work/chart" >/dev/null 2>"$work/helm.err" ||
  bad "$chart_ref $version: helm pull failed: $(tail -n1 "$work/helm.err")"
tgz=$work/chart/netendpoint-$version.tgz
[ -f "$tgz" ] || bad "$chart_ref $version: helm pull wrote no netendpoint-$version.tgz"
cdigest=$("$oras" resolve "${plain[@]}" "$repo:$version")

# The chart's signatures: any attached set whose chart signature verifies.
found=""
for d in $(referrers "$repo@$cdigest" application/vnd.netendpoint.release.signatures.v1); do
  rm -rf "$work/sigs"; mkdir -p "$work/sigs"
  "$oras" pull "${plain[@]}" -o "$work/sigs" "$repo@$d" >/dev/null 2>&1 || continue
  if [ -f "$work/sigs/netendpoint-$version.tgz.sig" ] && verify "$tgz" "$work/sigs/netendpoint-$version.tgz.sig"; then
    found=$d; break
  fi
done
[ -n "$found" ] || bad "the chart $repo:$version ($cdigest) has no signature that verifies with $pub"
ok "chart $repo:$version@$cdigest: signature verified"
[ -f "$work/sigs/images.txt" ] && [ -f "$work/sigs/images.txt.sig" ] || bad "the chart's signatures carry no images.txt"
verify "$work/sigs/images.txt" "$work/sigs/images.txt.sig" ||
  bad "images.txt attached to the chart does not verify with $pub"
ok "images.txt: signature verified"

while read -r ref digest _; do
  got=$("$oras" resolve "${plain[@]}" "$ref" 2>"$work/oras.err") || bad "$ref: not in the registry: $(tail -n1 "$work/oras.err")"
  [ "$got" = "$digest" ] || bad "$ref resolves to $got, but the release signed $digest: the image was changed"
  title=${ref%:*}; title=${title##*/}
  sbom=""
  for d in $(referrers "${ref%:*}@$digest" application/spdx+json); do
    rm -rf "$work/sbom"; mkdir -p "$work/sbom"
    "$oras" pull "${plain[@]}" -o "$work/sbom" "${ref%:*}@$d" >/dev/null 2>&1 || continue
    f=$work/sbom/$title-$version.spdx.json
    if [ -f "$f" ] && [ -f "$f.sig" ] && verify "$f" "$f.sig"; then sbom=$d; break; fi
  done
  [ -n "$sbom" ] || bad "$ref@$digest has no SBOM whose signature verifies with $pub"
  ok "$ref@$digest: the signed digest; SBOM signature verified"
done < "$work/sigs/images.txt"

tar -xzf "$tgz" -C "$work/chart" netendpoint/values.yaml
for d in $(grep -oE '^  digest: sha256:[0-9a-f]{64}' "$work/chart/netendpoint/values.yaml" | awk '{ print $2 }'); do
  awk -v d="$d" '$2 == d { f = 1 } END { exit !f }' "$work/sigs/images.txt" ||
    bad "the chart pins $d, which is not an image of the release"
done
ok "every image the chart pins is one of the release's"
echo "release $version at $chart_ref: verified"
