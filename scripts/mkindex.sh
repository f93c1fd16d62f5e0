#!/usr/bin/env bash
# mkindex.sh NAME:TAG OUT.tar ARCHIVE.tar...
#
# Joins single-platform OCI archives of one image (as scripts/mkimage.sh
# writes them, one per architecture) into one OCI archive whose image is a
# multi-platform image index: each ARCHIVE's manifest with its platform, in
# the order given, and every blob they refer to. The archive's index.json
# names the image index as NAME:TAG, so `ctr images import`, `skopeo copy
# oci-archive:OUT.tar ...` and `crane push` take it whole.
#
# Reproducible as mkimage.sh is: compact JSON from jq, a tar sorted by name
# with owner 0:0 and mtime 0; the same archives give the same index digest
# and the same bytes. Prints "NAME:TAG INDEX_DIGEST SIZE".
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2p' "$0" >&2; exit 2; }
name=$1 out=$2; shift 2
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/oci/blobs/sha256" "$work/in"
manifests=()
for a in "$@"; do
  d=$work/in/$(basename "$a")
  mkdir -p "$d"; tar -C "$d" -xf "$a"
  [ "$(jq '.manifests | length' "$d/index.json")" = 1 ] || { echo "mkindex.sh: $a: not a single-image archive" >&2; exit 1; }
  desc=$(jq -c '.manifests[0] | {mediaType, digest, size, platform}' "$d/index.json")
  [ "$(jq -r '.mediaType' <<<"$desc")" = application/vnd.oci.image.manifest.v1+json ] ||
    { echo "mkindex.sh: $a: its image is not a single manifest" >&2; exit 1; }
  [ "$(jq -r '.platform.architecture // ""' <<<"$desc")" != "" ] || { echo "mkindex.sh: $a: no platform" >&2; exit 1; }
  for b in "$d"/blobs/sha256/*; do
    [ "$(sha256sum "$b" | cut -c1-64)" = "$(basename "$b")" ] || { echo "mkindex.sh: $a: blob $(basename "$b") does not match its digest" >&2; exit 1; }
    cp -n "$b" "$work/oci/blobs/sha256/"
  done
  manifests+=("$desc")
done
dup=$(printf '%s\n' "${manifests[@]}" | jq -r '.platform | "\(.os)/\(.architecture)"' | sort | uniq -d)
[ -z "$dup" ] || { echo "mkindex.sh: two archives for $dup" >&2; exit 1; }

printf '%s\n' "${manifests[@]}" | jq -cs '{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: .}' \
  > "$work/index"
digest=sha256:$(sha256sum "$work/index" | cut -c1-64); size=$(stat -c %s "$work/index")
mv "$work/index" "$work/oci/blobs/sha256/${digest#sha256:}"
jq -cn --arg digest "$digest" --argjson size "$size" --arg name "$name" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
  manifests: [{mediaType: "application/vnd.oci.image.index.v1+json", digest: $digest, size: $size,
    annotations: {"io.containerd.image.name": $name, "org.opencontainers.image.ref.name": ($name | split(":") | last)}}]}' \
  > "$work/oci/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$work/oci/oci-layout"
find "$work/oci" -type f -exec chmod 0644 {} +
find "$work/oci" -type d -exec chmod 0755 {} +
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=gnu -C "$work/oci" \
  -cf "$out" oci-layout index.json blobs
echo "$name $digest $(stat -c %s "$out")"
