#!/usr/bin/env bash
# check-images.sh [IMAGES_DIR]: checks the images of `make images` (default
# target/images) against what they must ship:
# - each image against its deploy/Containerfile.* (the registry build): the
#   entrypoint, user, exposed ports and title label of its final stage, and
#   every binary its COPY lines put in place, executable and static;
# - deploy/ with the overlay's image references against the images: each
#   container's command, exec probe and --plugin-src name a file that is in
#   the container's image.
# Prints one line per check, then "check-images: all N checks passed"; exits 1
# at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-target/images}
kubectl=${KUBECTL:-tests/bin/kubectl}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0
ok() { passed=$((passed + 1)); echo "  ok: $*"; }
bad() { echo "check-images: FAILED: $*" >&2; exit 1; }
[ -s "$dir/images.txt" ] || bad "no $dir/images.txt: run make images"

# unpack REF: the image's config (JSON) into $work/<name>.config and its
# layer into $work/<name>/.
declare -A root_of
while read -r ref digest _; do
  name=${ref%:*}; name=${name##*/}
  a=$work/$name.archive; mkdir -p "$a" "$work/$name"
  tar -C "$a" -xf "$dir/$name.tar"
  m=$(jq -r '.manifests[0].digest' "$a/index.json")
  [ "$m" = "$digest" ] || bad "$name: index.json names $m, images.txt $digest"
  [ "sha256:$(sha256sum "$a/blobs/sha256/${m#sha256:}" | cut -c1-64)" = "$m" ] || bad "$name: manifest blob does not match its digest"
  cfg=$(jq -r '.config.digest' "$a/blobs/sha256/${m#sha256:}")
  cp "$a/blobs/sha256/${cfg#sha256:}" "$work/$name.config"
  layer=$(jq -r '.layers[0].digest' "$a/blobs/sha256/${m#sha256:}")
  tar -C "$work/$name" -xf "$a/blobs/sha256/${layer#sha256:}"
  root_of[$ref]=$work/$name
done < "$dir/images.txt"

# The final stage of a Containerfile, one instruction per line.
final_stage() {
  sed -e 's/^[[:space:]]*#.*$//' "$1" | sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta' |
    awk 'toupper($1) == "FROM" { buf = "" } NF { buf = buf $0 "\n" } END { printf "%s", buf }'
}
for cf in deploy/Containerfile.*; do
  stage=$(final_stage "$cf")
  title=$(grep -o 'org.opencontainers.image.title="[^"]*"' <<<"$stage" | head -n1 | cut -d'"' -f2)
  root=$work/$title config=$work/$title.config
  [ -f "$config" ] || bad "$cf builds image $title, which $dir does not have"
  want=$(sed -n 's/^ENTRYPOINT *//p' <<<"$stage" | jq -c .)
  have=$(jq -c '.config.Entrypoint' "$config")
  [ "$want" = "$have" ] || bad "$title: entrypoint $have, $cf says $want"
  ok "$title: entrypoint $have as in $cf"
  want=$(sed -n 's/^USER *//p' <<<"$stage")
  have=$(jq -r '.config.User // ""' "$config")
  [ "$want" = "$have" ] || bad "$title: user '$have', $cf says '$want'"
  ok "$title: user $have"
  want=$(sed -n 's/^EXPOSE *//p' <<<"$stage" | tr ' ' '\n' | sed '/^$/d; /\//!s/$/\/tcp/' | sort | tr '\n' ' ')
  have=$(jq -r '.config.ExposedPorts // {} | keys[]' "$config" | sort | tr '\n' ' ')
  [ "$want" = "$have" ] || bad "$title: exposes '$have', $cf says '$want'"
  ok "$title: exposes ${have:-nothing}"
  while read -r _ from rest; do
    read -r -a words <<<"$rest"
    dest=${words[-1]}; unset 'words[-1]'
    for s in "${words[@]}"; do
      if [[ "$dest" == */ ]] || [ ${#words[@]} -gt 1 ]; then p=${dest%/}/$(basename "$s"); else p=$dest; fi
      [ -f "$root$p" ] && [ -x "$root$p" ] || bad "$title: $p (COPY in $cf) is missing or not executable"
      scripts/check-static.sh "$root$p" >/dev/null || bad "$title: $p is not static"
      ok "$title: $p, executable, static"
    done
  done < <(grep -i '^COPY ' <<<"$stage")
done

# The manifests with the overlay's image references name only files their images have.
if [ -x "$kubectl" ]; then
  "$kubectl" kustomize "$dir" > "$work/deploy.yaml"
  # YAML to JSON without a server: a no-op local edit.
  "$kubectl" annotate --local -f "$work/deploy.yaml" netendpoint.dev/none- -o json > "$work/deploy.json" ||
    bad "kubectl could not read the rendered overlay"
  while IFS=$'\t' read -r obj image path; do
    root=${root_of[$image]:-}
    [ -n "$root" ] || bad "$obj runs image $image, which make images did not build"
    [ -f "$root$path" ] && [ -x "$root$path" ] || bad "$obj names $path, which image $image does not have"
    ok "$obj: $path is in $image"
  done < <(jq -r '(.items // [.])[] | select(.spec.template.spec.containers != null) | "\(.kind)/\(.metadata.name)" as $o
    | .spec.template.spec.containers[] | .image as $i
    | ((.command // [])[:1][], (.readinessProbe.exec.command // [])[:1][], (.livenessProbe.exec.command // [])[:1][],
       ((.args // [])[] | select(startswith("--plugin-src=")) | sub("^--plugin-src="; "")))
    | [$o, $i, .] | @tsv' "$work/deploy.json")
else
  echo "  (the manifests were not checked: no $kubectl; scripts/tools.sh builds it)"
fi
echo "check-images: all $passed checks passed"
