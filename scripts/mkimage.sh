#!/usr/bin/env bash
# mkimage.sh NAME:TAG OUT.tar ROOTFS [--entrypoint PATH]... [--user USER]
#   [--expose PORT/PROTO]... [--label KEY=VALUE]... [--env KEY=VALUE]...
#   [--arch amd64|arm64]
#
# Packs the directory ROOTFS as the single layer of an OCI image and writes
# it as an OCI image layout in a tar archive (an `oci-archive`), which
# `ctr images import`, `skopeo copy oci-archive:OUT.tar ...` and
# `kind load image-archive` take: no registry and no daemon. Prints the
# manifest digest (the image's identity) and the archive's size.
#
# Reproducible: the layer is a tar sorted by name, with owner 0:0 and mtime 0
# (modes as ROOTFS has them), the config carries no creation time, and every
# JSON document is written compactly by jq; so the same ROOTFS and flags give
# the same digests, and the same archive bytes.
#
# In NAME:TAG, `{digest}` stands for the first 12 hex digits of the manifest
# digest, so a tag can follow the content.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,3p' "$0" >&2; exit 2; }
name=$1 out=$2 rootfs=$3; shift 3
entry=() user="" expose=() labels=() envs=() arch=amd64
while [ $# -gt 0 ]; do
  case "$1" in
    --entrypoint) entry+=("$2"); shift 2 ;;
    --user) user=$2; shift 2 ;;
    --expose) expose+=("$2"); shift 2 ;;
    --label) labels+=("$2"); shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    *) echo "mkimage.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -d "$rootfs" ] || { echo "mkimage.sh: $rootfs is not a directory" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/oci/blobs/sha256"

# blob FILE: moves FILE into the blob store, prints "DIGEST SIZE".
blob() {
  local d s
  d=$(sha256sum "$1" | cut -d' ' -f1); s=$(stat -c %s "$1")
  mv "$1" "$work/oci/blobs/sha256/$d"; echo "sha256:$d $s"
}
# A JSON array or object from the arguments (jq's --args).
json_array() { jq -cn '$ARGS.positional' --args "$@"; }
json_object() { # KEY=VALUE... -> {"KEY": "VALUE"}
  jq -cn '[$ARGS.positional[] | capture("^(?<key>[^=]+)=(?<value>.*)$")] | from_entries' --args "$@"
}

tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=gnu -C "$rootfs" -cf "$work/layer" .
read -r layer layer_size < <(blob "$work/layer")
[ ${#envs[@]} -gt 0 ] || envs=("PATH=/usr/local/bin:/usr/bin:/bin")
case "$arch" in amd64|arm64) ;; *) echo "mkimage.sh: --arch $arch: amd64 or arm64" >&2; exit 2 ;; esac
jq -cn --arg layer "$layer" --arg user "$user" --arg arch "$arch" \
  --argjson entry "$(json_array ${entry[@]+"${entry[@]}"})" \
  --argjson env "$(json_array "${envs[@]}")" \
  --argjson ports "$(json_array ${expose[@]+"${expose[@]}"})" \
  --argjson labels "$(json_object ${labels[@]+"${labels[@]}"})" '{
  architecture: $arch, os: "linux",
  config: ({Env: $env, WorkingDir: "/"}
    + (if ($entry | length) > 0 then {Entrypoint: $entry} else {} end)
    + (if $user != "" then {User: $user} else {} end)
    + (if ($ports | length) > 0 then {ExposedPorts: ($ports | map({key: ., value: {}}) | from_entries)} else {} end)
    + (if ($labels | length) > 0 then {Labels: $labels} else {} end)),
  rootfs: {type: "layers", diff_ids: [$layer]}}' > "$work/config"
read -r config config_size < <(blob "$work/config")
jq -cn --arg config "$config" --argjson config_size "$config_size" --arg layer "$layer" --argjson layer_size "$layer_size" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
  config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $config, size: $config_size},
  layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $layer, size: $layer_size}]}' > "$work/manifest"
read -r manifest manifest_size < <(blob "$work/manifest")
hex=${manifest#sha256:}
name=${name//\{digest\}/${hex:0:12}}
jq -cn --arg manifest "$manifest" --argjson manifest_size "$manifest_size" --arg name "$name" --arg arch "$arch" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
  manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $manifest, size: $manifest_size,
    platform: {architecture: $arch, os: "linux"},
    annotations: {"io.containerd.image.name": $name, "org.opencontainers.image.ref.name": ($name | split(":") | last)}}]}' \
  > "$work/oci/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$work/oci/oci-layout"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=gnu -C "$work/oci" \
  -cf "$out" oci-layout index.json blobs
echo "$name $manifest $(stat -c %s "$out")"
