#!/usr/bin/env bash
# release.sh VERSION: a release of this tree, in one folder,
# $RELEASE_OUT (default target/release-VERSION):
#   <image>-VERSION.oci.tar  per image of deploy/Containerfile.*, an OCI archive
#                            whose image is a multi-platform index of
#                            linux/amd64 and linux/arm64 (static musl binaries
#                            for each, built as `make images` builds them)
#   netendpoint-VERSION.tgz  the Helm chart deploy/helm/netendpoint packaged
#                            with version and appVersion VERSION, its default
#                            image references pinned to those indexes:
#                            REPO/<image>:vVERSION@sha256:...
#   images.txt               per image: reference, index digest, archive bytes,
#                            and the platform manifests' digests
#   <image>-VERSION.spdx.json
#                            per image, its SBOM: the crates compiled into
#                            its binaries, SPDX 2.3 JSON written by syft
#                            (scripts/sbom.sh)
#   RELEASE-NOTES.md         the CHANGELOG.md entry of VERSION
#   SHA256SUMS               sha256sum of every file above
#   <file>.sig               per file above and SHA256SUMS, its signature
#                            (cosign sign-blob with RELEASE_SIGNING_KEY, no
#                            transparency log: it verifies offline with the
#                            public key alone)
# then checks it with scripts/release-verify.sh (both platforms in every
# index, every binary of its platform's architecture and static, the chart
# pinned to the indexes, the SBOMs, the checksums, the signatures).
#
# Signed, always: RELEASE_SIGNING_KEY is the path of a cosign private key
# (cosign generate-key-pair) and COSIGN_PASSWORD its password; without them
# the release is refused before anything is built. RELEASE_PUBLIC_KEY, if
# given, must be the public key of that private key (the one users are told
# to verify with); the signatures are checked with it, or else with the
# public key derived from the private one. `make release-check` signs with
# a throwaway key of its own.
#
# Reproducible: the same commit gives the same index digests, archives,
# chart bytes, SBOMs and SHA256SUMS (scripts/release-check.sh builds twice
# and compares); only the signatures differ from one signing to the next
# (ECDSA draws a new random number each time). The chart's files carry the
# commit's time (or SOURCE_DATE_EPOCH), and helm writes its gzip header
# without a time.
#
# RELEASE_SRC: the source tree to release (default: this one). The upgrade
# test releases an earlier commit with this tree's tooling: its sources (a
# `git archive`, built in its own target directory), its Containerfiles,
# chart and Cargo.lock; SOURCE_DATE_EPOCH must then be given (the commit's
# time: an archive has no history), and RELEASE_NOTES (a file) stands in
# for a CHANGELOG.md entry that tree does not have.
#
# RELEASE_REPO: the repository prefix of the references (default
# ghcr.io/netendpoint, the chart's own). The tools (helm, syft, cosign) come
# from scripts/release-tools.sh (`make release` runs it first).
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-${VERSION:-}}
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  { echo "release: give the version as x.y.z: make release VERSION=x.y.z" >&2; exit 2; }
out=${RELEASE_OUT:-target/release-$version}
src=$(cd "${RELEASE_SRC:-.}" && pwd)
export RELEASE_SRC=$src
registry=${RELEASE_REPO:-ghcr.io/netendpoint}
tag=v$version
helm=${HELM:-tests/bin/helm}
cosign=${COSIGN:-tests/bin/cosign}
for t in "$helm" "$cosign" "${SYFT:-tests/bin/syft}"; do
  [ -x "$t" ] || { echo "release: $t missing (scripts/release-tools.sh builds it)" >&2; exit 1; }
done
key=${RELEASE_SIGNING_KEY:-}
if [ -z "$key" ] || [ ! -f "$key" ] || [ -z "${COSIGN_PASSWORD+set}" ]; then
  echo "release: a release is signed: give RELEASE_SIGNING_KEY=<cosign private key> and COSIGN_PASSWORD" >&2
  echo "         (cosign generate-key-pair makes a pair; make release-check builds with a throwaway one)" >&2
  exit 2
fi
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$src" log -1 --format=%ct 2>/dev/null || true)}
[ -n "$epoch" ] || { echo "release: $src has no git history: give SOURCE_DATE_EPOCH (its commit's time)" >&2; exit 2; }
export SOURCE_DATE_EPOCH=$epoch
crate_version=$(sed -n '/^\[workspace.package\]/,/^\[/ s/^version *= *"\(.*\)"/\1/p' "$src/Cargo.toml")
[ "$crate_version" = "$version" ] ||
  echo "release: note: the workspace version in Cargo.toml is $crate_version; the binaries report that one" >&2
if [ "$src" = "$PWD" ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  echo "release: note: the work tree has uncommitted changes; the release is not of commit $(git rev-parse --short HEAD)" >&2
fi

# The CHANGELOG.md entry: from "## [VERSION]" (or "## VERSION") to the next "## ".
notes=$(awk -v v="$version" '
  /^## / { if (on) exit; h = $2; gsub(/[][]/, "", h); if (h == v || h == "v" v) on = 1 }
  on { print }' "$src/CHANGELOG.md" 2>/dev/null || true)
[ -z "${RELEASE_NOTES:-}" ] || notes=$(cat "$RELEASE_NOTES")
[ -n "$notes" ] || { echo "release: $src/CHANGELOG.md has no entry \"## [$version]\"; write it first" >&2; exit 1; }

work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# The key opens with the password, and pairs with RELEASE_PUBLIC_KEY, before
# anything is built.
"$cosign" public-key --key "$key" --outfile "$work/signer.pub" 2>"$work/cosign.err" ||
  { echo "release: cosign cannot read RELEASE_SIGNING_KEY=$key: $(tail -n1 "$work/cosign.err")" >&2; exit 1; }
pub=${RELEASE_PUBLIC_KEY:-$work/signer.pub}
[ "$(grep -v -- '-----' "$pub" | tr -d ' \n')" = "$(grep -v -- '-----' "$work/signer.pub" | tr -d ' \n')" ] ||
  { echo "release: RELEASE_PUBLIC_KEY=$pub is not the public key of RELEASE_SIGNING_KEY=$key" >&2; exit 1; }
rm -rf "$out"; mkdir -p "$out"
for triple in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
  arch=${triple%%-*}; [ "$arch" = x86_64 ] && arch=amd64 || arch=arm64
  echo "=== linux/$arch ($triple)"
  IMAGES_SRC=$src IMAGES_TRIPLE=$triple IMAGES_VERSION=$version IMAGES_REPO=$registry IMAGES_OUT=$work/$arch scripts/images.sh
done

echo "=== image indexes"
: > "$out/images.txt"
declare -A digest_of
while read -r ref _; do
  title=${ref%:*}; title=${title##*/}
  read -r iref idigest isize < <(scripts/mkindex.sh "$registry/$title:$tag" "$out/$title-$version.oci.tar" \
    "$work/amd64/$title.tar" "$work/arm64/$title.tar")
  amd=$(awk -v t="/$title:" 'index($1, t) { print $2 }' "$work/amd64/images.txt")
  arm=$(awk -v t="/$title:" 'index($1, t) { print $2 }' "$work/arm64/images.txt")
  echo "$iref $idigest $isize linux/amd64=$amd linux/arm64=$arm" >> "$out/images.txt"
  digest_of[$title]=$idigest
  echo "   $iref@$idigest  $(( isize / 1024 )) KiB"
  echo "      linux/amd64 $amd"
  echo "      linux/arm64 $arm"
done < "$work/amd64/images.txt"

echo "=== chart"
cp -r "$src/deploy/helm/netendpoint" "$work/chart"
sed -i -e "s/^version: .*/version: $version/" -e "s/^appVersion: .*/appVersion: \"$version\"/" "$work/chart/Chart.yaml"
# Each top-level image block of values.yaml (a mapping with repository, tag
# and digest) whose repository is one of the release's images: that image's
# repository, tag and index digest.
awk -v reg="$registry" -v tag="$tag" -v pins="$(for t in "${!digest_of[@]}"; do echo "$t=${digest_of[$t]}"; done)" '
  BEGIN { n = split(pins, l, "\n"); for (i = 1; i <= n; i++) { split(l[i], kv, "="); d[kv[1]] = kv[2] } }
  /^[^ #]/ { img = "" }
  /^  repository: / { r = $2; sub(/.*\//, "", r); if (r in d) { img = r; print "  repository: " reg "/" r; pinned[r] = 1; next } }
  img != "" && /^  tag: / { print "  tag: " tag; next }
  img != "" && /^  digest: / { print "  digest: " d[img]; next }
  { print }
  END { for (t in d) if (!(t in pinned)) { print "release: values.yaml has no image block for " t > "/dev/stderr"; exit 1 } }
' "$work/chart/values.yaml" > "$work/values.yaml"
mv "$work/values.yaml" "$work/chart/values.yaml"
find "$work/chart" -exec touch -h -d "@$epoch" {} +
"$helm" package "$work/chart" --destination "$out" >/dev/null
chart=$out/netendpoint-$version.tgz
[ -f "$chart" ] || { echo "release: helm package wrote no $chart" >&2; exit 1; }
echo "   $(basename "$chart")  sha256:$(sha256sum "$chart" | cut -c1-64)"

echo "=== SBOMs"
SBOM_SRC=$src scripts/sbom.sh "$out" "$version"

printf '%s\n' "$notes" > "$out/RELEASE-NOTES.md"
(cd "$out" && sha256sum -- *.oci.tar ./*.tgz ./*.spdx.json images.txt RELEASE-NOTES.md | sed 's# \./# #' > SHA256SUMS)

echo "=== signatures"
for f in $(awk '{ print $2 }' "$out/SHA256SUMS") SHA256SUMS; do
  "$cosign" sign-blob --yes --key "$key" --tlog-upload=false --output-signature "$out/$f.sig" "$out/$f" \
    >/dev/null 2>"$work/cosign.err" || { echo "release: cosign sign-blob $f: $(tail -n1 "$work/cosign.err")" >&2; exit 1; }
  echo "   $f.sig"
done

echo "=== checks"
RELEASE_PUBLIC_KEY=$pub scripts/release-verify.sh "$out" "$version"
echo "release $version in $out"
