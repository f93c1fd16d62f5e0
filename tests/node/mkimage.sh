#!/usr/bin/env bash
# mkimage.sh NAME:TAG OUT.tar BINARY: packs one static binary as /<its name>,
# the image's entrypoint, into a single-layer OCI image archive that
# `ctr images import` takes (no registry is reachable).
set -euo pipefail
name=$1 out=$2 binary=$3
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs" "$work/oci/blobs/sha256"
cp "$binary" "$work/rootfs/"
entry="/$(basename "$binary")"

# blob FILE: moves FILE into the blob store, prints "DIGEST SIZE".
blob() {
  local d s
  d=$(sha256sum "$1" | cut -d' ' -f1); s=$(stat -c %s "$1")
  mv "$1" "$work/oci/blobs/sha256/$d"; echo "sha256:$d $s"
}
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/rootfs" -cf "$work/layer" .
read -r layer layer_size < <(blob "$work/layer")
jq -cn --arg entry "$entry" --arg layer "$layer" '{
  architecture: "amd64", os: "linux",
  config: {Entrypoint: [$entry], Env: ["PATH=/"], WorkingDir: "/"},
  rootfs: {type: "layers", diff_ids: [$layer]}}' > "$work/config"
read -r config config_size < <(blob "$work/config")
jq -cn --arg config "$config" --argjson config_size "$config_size" --arg layer "$layer" --argjson layer_size "$layer_size" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
  config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $config, size: $config_size},
  layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $layer, size: $layer_size}]}' > "$work/manifest"
read -r manifest manifest_size < <(blob "$work/manifest")
jq -cn --arg manifest "$manifest" --argjson manifest_size "$manifest_size" --arg name "$name" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
  manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $manifest, size: $manifest_size,
    platform: {architecture: "amd64", os: "linux"},
    annotations: {"io.containerd.image.name": $name, "org.opencontainers.image.ref.name": ($name | split(":") | last)}}]}' \
  > "$work/oci/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$work/oci/oci-layout"
tar -C "$work/oci" -cf "$out" oci-layout index.json blobs
