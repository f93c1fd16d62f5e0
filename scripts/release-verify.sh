#!/usr/bin/env bash
# release-verify.sh DIR [VERSION]: checks a release folder of
# scripts/release.sh, as `make release` does after writing it:
# - SHA256SUMS matches every file it lists, and lists every file there is
#   but itself and the signatures (*.sig);
# - each image archive holds one image index, of the digest images.txt gives,
#   with exactly linux/amd64 and linux/arm64; every blob matches its digest;
#   each platform's config names its architecture;
# - every ELF file in each platform's layer is built for that architecture
#   (readelf's Machine) and static (scripts/check-static.sh), and each
#   image has at least one;
# - the chart has version and appVersion VERSION, passes `helm lint
#   --strict`, and every image its default render names is one of
#   images.txt's references pinned to its index digest;
# - each image has its SBOM, <image>-VERSION.spdx.json, SPDX JSON that
#   names kube, k8s-openapi, serde and tokio, and every crate it names is
#   in the Cargo.lock of the source tree (RELEASE_SRC, default this one)
#   at the version it gives;
# - every file, SHA256SUMS last, has a signature <file>.sig that cosign
#   verify-blob accepts with the public key RELEASE_PUBLIC_KEY (required),
#   offline: no transparency log is asked;
# the signatures last, so that each kind of bad release is refused by its
# own check (scripts/release-verify-selftest.sh).
# Prints one line per check, then "release-verify: all N checks passed";
# exits 1 at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: release-verify.sh DIR [VERSION]}
version=${2:-$(basename "$dir" | sed -n 's/^release-//p')}
[ -n "$version" ] || { echo "release-verify: give the VERSION" >&2; exit 2; }
helm=${HELM:-tests/bin/helm}
cosign=${COSIGN:-tests/bin/cosign}
pub=${RELEASE_PUBLIC_KEY:-}
if [ -z "$pub" ] || [ ! -f "$pub" ]; then
  echo "release-verify: give the public key of the release: RELEASE_PUBLIC_KEY=<cosign.pub>" >&2; exit 2
fi
[ -x "$cosign" ] || { echo "release-verify: $cosign missing (scripts/release-tools.sh builds it)" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0
ok() { passed=$((passed + 1)); echo "  ok: $*"; }
bad() { echo "release-verify: FAILED: $*" >&2; exit 1; }

[ -s "$dir/SHA256SUMS" ] || bad "no $dir/SHA256SUMS"
(cd "$dir" && sha256sum --quiet --strict -c SHA256SUMS) || bad "SHA256SUMS does not match the files"
listed=$(awk '{ print $2 }' "$dir/SHA256SUMS" | sort | tr '\n' ' ')
present=$(cd "$dir" && find . -maxdepth 1 -type f ! -name SHA256SUMS ! -name '*.sig' -printf '%f\n' | sort | tr '\n' ' ')
[ "$listed" = "$present" ] || bad "SHA256SUMS lists '$listed', the folder has '$present'"
ok "SHA256SUMS: $(wc -l < "$dir/SHA256SUMS") files, all match"
[ -s "$dir/RELEASE-NOTES.md" ] && grep -q "$version" <(head -n1 "$dir/RELEASE-NOTES.md") ||
  bad "RELEASE-NOTES.md is missing or not the entry of $version"
ok "RELEASE-NOTES.md: $(head -n1 "$dir/RELEASE-NOTES.md")"

# blob DIR DIGEST: the path of the blob, after checking its bytes.
blob() {
  local p=$1/blobs/sha256/${2#sha256:}
  [ -f "$p" ] || bad "$1: blob $2 missing"
  [ "sha256:$(sha256sum "$p" | cut -c1-64)" = "$2" ] || bad "$1: blob $2 does not match its digest"
  echo "$p"
}
machine_of() { case "$1" in amd64) echo "Advanced Micro Devices X86-64" ;; arm64) echo AArch64 ;; esac; }

declare -A pinned
[ -s "$dir/images.txt" ] || bad "no $dir/images.txt"
while read -r ref digest _ _; do
  title=${ref%:*}; title=${title##*/}
  a=$work/$title; mkdir -p "$a"
  tar -C "$a" -xf "$dir/$title-$version.oci.tar" || bad "$title-$version.oci.tar is not a tar archive"
  [ "$(jq -r '.manifests | length' "$a/index.json")" = 1 ] || bad "$title: index.json names more than one image"
  [ "$(jq -r '.manifests[0].digest' "$a/index.json")" = "$digest" ] || bad "$title: index.json does not name $digest"
  [ "$(jq -r '.manifests[0].annotations["io.containerd.image.name"]' "$a/index.json")" = "$ref" ] || bad "$title: not named $ref"
  idx=$(blob "$a" "$digest")
  [ "$(jq -r .mediaType "$idx")" = application/vnd.oci.image.index.v1+json ] || bad "$title: $digest is not an image index"
  platforms=$(jq -r '.manifests[].platform | "\(.os)/\(.architecture)"' "$idx" | sort | tr '\n' ' ')
  [ "$platforms" = "linux/amd64 linux/arm64 " ] || bad "$title: the index has platforms '$platforms', not linux/amd64 and linux/arm64"
  ok "$title: index $digest with linux/amd64 and linux/arm64"
  while read -r arch m; do
    man=$(blob "$a" "$m")
    cfg=$(blob "$a" "$(jq -r .config.digest "$man")")
    [ "$(jq -r .architecture "$cfg")" = "$arch" ] && [ "$(jq -r .os "$cfg")" = linux ] ||
      bad "$title linux/$arch: its config says $(jq -r '"\(.os)/\(.architecture)"' "$cfg")"
    root=$work/$title.$arch; mkdir -p "$root"
    while read -r l; do tar -C "$root" -xf "$(blob "$a" "$l")"; done < <(jq -r '.layers[].digest' "$man")
    n=0
    while read -r f; do
      [ "$(head -c4 "$f" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] || continue
      machine=$(readelf -h "$f" | sed -n 's/^ *Machine: *//p')
      [ "$machine" = "$(machine_of "$arch")" ] || bad "$title linux/$arch: ${f#"$root"} is built for $machine"
      scripts/check-static.sh "$f" >/dev/null || bad "$title linux/$arch: ${f#"$root"} is not static"
      ok "$title linux/$arch: ${f#"$root"}: $machine, static"
      n=$((n + 1))
    done < <(find "$root" -type f | sort)
    [ "$n" -gt 0 ] || bad "$title linux/$arch: no binary in the image"
  done < <(jq -r '.manifests[] | "\(.platform.architecture) \(.digest)"' "$idx")
  pinned[$ref@$digest]=1
done < "$dir/images.txt"

chart=$dir/netendpoint-$version.tgz
[ -f "$chart" ] || bad "no $chart"
"$helm" show chart "$chart" > "$work/Chart.yaml"
[ "$(sed -n 's/^version: //p' "$work/Chart.yaml")" = "$version" ] || bad "the chart's version is not $version"
[ "$(sed -n 's/^appVersion: //p' "$work/Chart.yaml" | tr -d '"')" = "$version" ] || bad "the chart's appVersion is not $version"
ok "chart: version and appVersion $version"
"$helm" lint --strict "$chart" >/dev/null || bad "helm lint --strict $chart"
ok "chart: helm lint --strict"
"$helm" template netendpoint "$chart" --namespace netendpoint-system > "$work/render.yaml"
images=$(sed -n 's/^ *image: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$work/render.yaml" | sort -u)
[ -n "$images" ] || bad "the chart's render names no image"
for i in $images; do
  [ -n "${pinned[$i]:-}" ] || bad "the chart's render names $i, which is not a release index pinned by digest"
  ok "chart: renders $i"
done

# The crates of Cargo.lock, "name version" a line.
awk '/^\[\[package\]\]$/ { n = v = "" } /^name = / { n = $3 } /^version = / { v = $3 }
  n != "" && v != "" { gsub(/"/, "", n); gsub(/"/, "", v); print n, v; n = v = "" }' "${RELEASE_SRC:-.}/Cargo.lock" | sort -u > "$work/lock"
while read -r ref _; do
  title=${ref%:*}; title=${title##*/}
  sbom=$dir/$title-$version.spdx.json
  [ -f "$sbom" ] || bad "$title: no SBOM $title-$version.spdx.json"
  jq -e '.spdxVersion | startswith("SPDX-2.")' "$sbom" >/dev/null 2>&1 || bad "$title: $title-$version.spdx.json is not SPDX JSON"
  [ "$(jq -r .name "$sbom")" = "$title" ] || bad "$title: its SBOM is the document of $(jq -r .name "$sbom")"
  # Every package but the one the document describes (the image), "name version" a line.
  jq -r '[.relationships[] | select(.relationshipType == "DESCRIBES") | .relatedSpdxElement] as $root
    | .packages[] | select(.SPDXID as $id | $root | index($id) | not) | "\(.name) \(.versionInfo)"' "$sbom" |
    sort -u > "$work/sbom"
  unknown=$(comm -23 "$work/sbom" "$work/lock" | tr '\n' ',')
  [ -z "$unknown" ] || bad "$title: its SBOM names crates that are not in Cargo.lock at that version: ${unknown%,}"
  for crate in kube k8s-openapi serde tokio; do
    v=$(awk -v c="$crate" '$1 == c { printf "%s%s", s, $2; s = "," }' "$work/sbom")
    [ -n "$v" ] || bad "$title: its SBOM does not name $crate"
    ok "$title SBOM: $crate $v"
  done
  ok "$title SBOM: $(wc -l < "$work/sbom") crates, all in Cargo.lock"
done < "$dir/images.txt"

# The signatures: every file's, SHA256SUMS last; and no other.
while read -r s; do
  [ -f "$dir/${s%.sig}" ] || bad "$s signs no file of the release"
done < <(cd "$dir" && find . -maxdepth 1 -type f -name '*.sig' -printf '%f\n')
for f in $(awk '{ print $2 }' "$dir/SHA256SUMS") SHA256SUMS; do
  [ -f "$dir/$f.sig" ] || bad "$f has no signature $f.sig"
  "$cosign" verify-blob --key "$pub" --signature "$dir/$f.sig" --insecure-ignore-tlog=true --offline=true "$dir/$f" \
    >"$work/cosign.out" 2>&1 || bad "$f.sig: does not verify with $pub: $(grep -m1 '^Error:' "$work/cosign.out")"
  ok "$f.sig: verified"
done
echo "release-verify: all $passed checks passed"
