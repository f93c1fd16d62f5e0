#!/usr/bin/env bash
# release-push.sh DIR: publishes the release folder DIR (`make release`) to
# the registry its references name (RELEASE_REPO when it was built):
#   REPO/<image>:vX.Y.Z   each image index, copied from its OCI archive, so
#                         its digest is the one images.txt lists; its SBOM
#                         and the SBOM's signature attached as a referrer
#                         (artifact type application/spdx+json)
#   REPO/charts/netendpoint:X.Y.Z
#                         the chart (helm push), with the signatures attached
#                         as one referrer (artifact type
#                         application/vnd.netendpoint.release.signatures.v1):
#                         the chart's, and images.txt, SHA256SUMS and
#                         RELEASE-NOTES.md with theirs
# Nothing is re-encoded: every manifest and blob keeps its bytes, so the
# signatures made over the folder verify what the registry serves
# (scripts/release-verify-registry.sh). A loopback registry is spoken to in
# plain HTTP (scripts/registry.sh); any other over HTTPS, with the
# credentials of oras and helm's own login.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-}
[ -n "$dir" ] && [ -f "$dir/images.txt" ] ||
  { echo "release-push: give the folder of a release (make release wrote it): release-push.sh DIR" >&2; exit 2; }
dir=$(cd "$dir" && pwd)
oras=${ORAS:-$PWD/tests/bin/oras} helm=${HELM:-$PWD/tests/bin/helm}
for t in "$oras" "$helm"; do
  [ -x "$t" ] || { echo "release-push: $t missing (scripts/release-tools.sh builds it)" >&2; exit 1; }
done
chart=$(cd "$dir" && ls netendpoint-*.tgz 2>/dev/null | head -n1)
[ -n "$chart" ] || { echo "release-push: $dir has no chart netendpoint-<version>.tgz" >&2; exit 1; }
version=${chart#netendpoint-}; version=${version%.tgz}

first=$(awk 'NR == 1 { print $1 }' "$dir/images.txt")
repo=${first%/*}; host=${repo%%/*}
plain=()
case "$host" in 127.*|localhost|localhost:*|\[::1\]*) plain=(--plain-http) ;; esac
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

while read -r ref digest _; do
  title=${ref%:*}; title=${title##*/}
  tag=${ref##*:}
  [ "${ref%/*}" = "$repo" ] || { echo "release-push: $ref is not under $repo, as the first image is" >&2; exit 1; }
  rm -rf "$work/layout"; mkdir -p "$work/layout"
  tar -xf "$dir/$title-$version.oci.tar" -C "$work/layout"
  "$oras" cp "${plain[@]/--plain-http/--to-plain-http}" --from-oci-layout "$work/layout:$tag" "$ref" >/dev/null
  got=$("$oras" resolve "${plain[@]}" "$ref")
  [ "$got" = "$digest" ] || { echo "release-push: $ref resolves to $got after the push, not to $digest" >&2; exit 1; }
  (cd "$dir" && "$oras" attach "${plain[@]}" --artifact-type application/spdx+json "${ref%:*}@$digest" \
    "$title-$version.spdx.json:application/spdx+json" \
    "$title-$version.spdx.json.sig:application/vnd.netendpoint.signature.v1" >/dev/null)
  echo "   $ref@$digest  (SBOM attached)"
done < "$dir/images.txt"

out=$("$helm" push "$dir/$chart" "oci://$repo/charts" "${plain[@]}" 2>&1) ||
  { echo "release-push: helm push $chart: $out" >&2; exit 1; }
cdigest=$(sed -n 's/^Digest: *//p' <<<"$out")
(cd "$dir" && "$oras" attach "${plain[@]}" --artifact-type application/vnd.netendpoint.release.signatures.v1 \
  "$repo/charts/netendpoint@$cdigest" \
  "$chart.sig:application/vnd.netendpoint.signature.v1" \
  images.txt:text/plain images.txt.sig:application/vnd.netendpoint.signature.v1 \
  SHA256SUMS:text/plain SHA256SUMS.sig:application/vnd.netendpoint.signature.v1 \
  RELEASE-NOTES.md:text/markdown >/dev/null)
echo "   oci://$repo/charts/netendpoint:$version@$cdigest  (signatures attached)"
