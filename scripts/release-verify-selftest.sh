#!/usr/bin/env bash
# release-verify-selftest.sh DIR VERSION: proves that scripts/release-verify.sh
# refuses a bad release. On copies of the release in DIR (which must pass),
# each with one thing wrong and the checksums and digests made consistent
# again where a forger would, it must fail with the expected message:
#   - a chart changed after SHA256SUMS was written;
#   - an image index with linux/amd64 only;
#   - a linux/arm64 image whose binaries are the x86_64 ones;
#   - a linux/amd64 image with a dynamically linked binary (gcc's default);
#   - a chart whose default image is pinned to another digest;
#   - an image without its SBOM;
#   - an SBOM that gives tokio a version Cargo.lock does not have;
#   - a chart changed, with its checksum, after it was signed;
#   - an image archive signed by another key.
# A forger without the release's key cannot sign SHA256SUMS again, so each
# of these also fails the signature of SHA256SUMS; release-verify.sh checks
# the signatures last, and each case must be refused by its own check first.
# RELEASE_PUBLIC_KEY: the public key DIR is signed with (release-verify.sh's).
# make release-check runs it on the first build.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: release-verify-selftest.sh DIR VERSION} version=${2:?usage: release-verify-selftest.sh DIR VERSION}
helm=${HELM:-tests/bin/helm}
cosign=${COSIGN:-tests/bin/cosign}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
scripts/release-verify.sh "$dir" "$version" >/dev/null || { echo "selftest: $dir does not pass to begin with" >&2; exit 1; }
title=netendpoint-watcher-example
resum() { (cd "$1" && sha256sum -- *.oci.tar ./*.tgz ./*.spdx.json images.txt RELEASE-NOTES.md | sed 's# \./# #' > SHA256SUMS); }
fresh() { rm -rf "$work/r"; cp -r "$dir" "$work/r"; rm -rf "$work/x"; mkdir -p "$work/x"; tar -C "$work/x" -xf "$work/r/$title-$version.oci.tar"; }
index_of() { local d; d=$(jq -r '.manifests[0].digest' "$work/x/index.json"); echo "$work/x/blobs/sha256/${d#sha256:}"; }
# single ARCH OUT.tar: the platform's image alone, as an archive of mkimage.sh's form.
single() {
  local y=$work/single.$1; rm -rf "$y"; cp -r "$work/x" "$y"
  jq -c --arg a "$1" '{schemaVersion, mediaType, manifests: [.manifests[] | select(.platform.architecture == $a)]}' \
    "$(index_of)" > "$y/index.json"
  tar -C "$y" -cf "$2" oci-layout index.json blobs
}
# replace OUT.tar: the release's archive of $title and images.txt become OUT.tar's.
replace() {
  local old new
  old=$(awk -v t="/$title:" 'index($1, t) { print $2 }' "$work/r/images.txt")
  new=$(mkdir -p "$work/n" && tar -C "$work/n" -xf "$1" index.json && jq -r '.manifests[0].digest' "$work/n/index.json")
  cp "$1" "$work/r/$title-$version.oci.tar"; sed -i "s#$old#$new#" "$work/r/images.txt"; resum "$work/r"
}
expect() { # MESSAGE-PATTERN CASE
  local msg
  if msg=$(scripts/release-verify.sh "$work/r" "$version" 2>&1 >/dev/null); then
    echo "selftest: FAILED: release-verify.sh passed a release with $2" >&2; exit 1
  fi
  grep -q "$1" <<<"$msg" || { echo "selftest: FAILED: for $2 release-verify.sh said: $msg" >&2; exit 1; }
  msg=$(tail -n1 <<<"$msg")
  echo "  refused: $2: ${msg#release-verify: FAILED: }"
}

fresh; echo x >> "$work/r/netendpoint-$version.tgz"
expect "SHA256SUMS does not match" "a chart changed after its checksum"

fresh; single amd64 "$work/amd64.tar"
scripts/mkindex.sh "$(jq -r '.manifests[0].annotations["io.containerd.image.name"]' "$work/x/index.json")" \
  "$work/one.tar" "$work/amd64.tar" >/dev/null
replace "$work/one.tar"
expect "not linux/amd64 and linux/arm64" "an index with linux/amd64 only"

fresh; single amd64 "$work/amd64.tar"
m=$(jq -r '.manifests[] | select(.platform.architecture == "amd64") | .digest' "$(index_of)")
l=$(jq -r '.layers[0].digest' "$work/x/blobs/sha256/${m#sha256:}")
mkdir -p "$work/rootfs"; tar -C "$work/rootfs" -xf "$work/x/blobs/sha256/${l#sha256:}"
scripts/mkimage.sh "localhost/$title:arm64" "$work/arm64.tar" "$work/rootfs" --arch arm64 >/dev/null
scripts/mkindex.sh "$(jq -r '.manifests[0].annotations["io.containerd.image.name"]' "$work/x/index.json")" \
  "$work/both.tar" "$work/amd64.tar" "$work/arm64.tar" >/dev/null
replace "$work/both.tar"
expect "linux/arm64: .* is built for Advanced Micro Devices X86-64" "x86_64 binaries in the linux/arm64 image"

fresh; single amd64 "$work/amd64.tar"; single arm64 "$work/arm64.tar"
rm -rf "$work/rootfs"; mkdir -p "$work/rootfs/usr/local/bin"
printf 'int main(void) { return 0; }\n' | gcc -x c - -o "$work/rootfs/usr/local/bin/dynamic"
scripts/mkimage.sh "localhost/$title:amd64" "$work/dyn.tar" "$work/rootfs" --arch amd64 >/dev/null
scripts/mkindex.sh "$(jq -r '.manifests[0].annotations["io.containerd.image.name"]' "$work/x/index.json")" \
  "$work/both.tar" "$work/dyn.tar" "$work/arm64.tar" >/dev/null
replace "$work/both.tar"
expect "/usr/local/bin/dynamic is not static" "a dynamically linked binary in the linux/amd64 image"

fresh; mkdir -p "$work/chart"; tar -C "$work/chart" -xzf "$work/r/netendpoint-$version.tgz"
sed -i 's/^  digest: sha256:[0-9a-f]\{4\}/  digest: sha256:0000/' "$work/chart/netendpoint/values.yaml"
"$helm" package "$work/chart/netendpoint" --destination "$work/r" >/dev/null; resum "$work/r"
expect "not a release index pinned by digest" "a chart pinned to other digests"

fresh; rm "$work/r/$title-$version.spdx.json" "$work/r/$title-$version.spdx.json.sig"; resum "$work/r"
expect "$title: no SBOM" "an image without its SBOM"

fresh; sbom=$work/r/$title-$version.spdx.json
jq '(.packages[] | select(.name == "tokio") | .versionInfo) = "0.0.1"' "$sbom" > "$work/sbom.json"; mv "$work/sbom.json" "$sbom"
resum "$work/r"
expect "not in Cargo.lock at that version: tokio 0.0.1" "an SBOM with a tokio version Cargo.lock does not have"

# The chart with a default its maintainers never set: still version x.y.z,
# pinned to the indexes, and lint-clean, so only its signature tells.
fresh; rm -rf "$work/chart"; mkdir -p "$work/chart"; tar -C "$work/chart" -xzf "$work/r/netendpoint-$version.tgz"
printf '\n# changed after signing\nextraValueOfNoOne: true\n' >> "$work/chart/netendpoint/values.yaml"
"$helm" package "$work/chart/netendpoint" --destination "$work/r" >/dev/null; resum "$work/r"
expect "netendpoint-$version.tgz.sig: does not verify" "a chart changed and checksummed after it was signed"

fresh; COSIGN_PASSWORD=other "$cosign" generate-key-pair --output-key-prefix "$work/other" >/dev/null 2>&1
COSIGN_PASSWORD=other "$cosign" sign-blob --yes --key "$work/other.key" --tlog-upload=false \
  --output-signature "$work/r/$title-$version.oci.tar.sig" "$work/r/$title-$version.oci.tar" >/dev/null 2>&1
expect "$title-$version.oci.tar.sig: does not verify" "an image archive signed by another key"
echo "release-verify-selftest: all 9 bad releases refused"
