#!/usr/bin/env bash
# make images: the project's images, built from the workspace with no
# registry and no container engine. For each deploy/Containerfile.*, it
# builds the binaries that Containerfile builds (the same `cargo build -p ...
# --bin ...` arguments, for the musl target, so they are static), and packs
# them as its final stage lays them out (COPY destinations, ENTRYPOINT, USER,
# EXPOSE, LABEL) into an OCI archive (scripts/mkimage.sh). The Containerfiles
# are the one description of both builds; scripts/check-images.sh compares
# the result with them.
#
# Writes to $IMAGES_OUT (default target/images):
#   <image>.tar          the OCI archive (`ctr -n k8s.io images import`,
#                        `skopeo copy oci-archive:...`, `kind load image-archive`)
#   images.txt           one line per image: reference, manifest digest, bytes
#   kustomization.yaml   an overlay of deploy/ that only swaps the image
#                        references for these: `kubectl apply -k target/images`
#
# IMAGES_SRC: the source tree to build (default: this one; the upgrade test
# builds an earlier commit, in that tree's own target directory). IMAGES_REPO: the repository prefix of the
# references (default localhost/netendpoint). The tag is the version and the
# first 12 hex digits of the manifest digest, so it changes with the content.
# IMAGES_VERSION: that version (default: the workspace's, from Cargo.toml).
# IMAGES_TRIPLE: the musl target to build for, x86_64-unknown-linux-musl
# (default; linux/amd64 images) or aarch64-unknown-linux-musl (linux/arm64,
# cross-compiled with Debian's aarch64 gcc as C compiler and linker; `make
# release` builds both, scripts/release-tools.sh installs the cross tools).
set -euo pipefail
cd "$(dirname "$0")/.."
repo_root=$PWD
src=$(cd "${IMAGES_SRC:-.}" && pwd)
out=${IMAGES_OUT:-$repo_root/target/images}
prefix=${IMAGES_REPO:-localhost/netendpoint}
triple=${IMAGES_TRIPLE:-x86_64-unknown-linux-musl}
case "$triple" in
  x86_64-unknown-linux-musl) arch=amd64 ;;
  aarch64-unknown-linux-musl) arch=arm64 ;;
  *) echo "images: IMAGES_TRIPLE=$triple: only x86_64- and aarch64-unknown-linux-musl are built" >&2; exit 1 ;;
esac
# Another tree builds in its own target directory: cargo hashes workspace
# members by their path relative to the workspace, and judges freshness by
# mtimes, so two trees sharing one target directory would take each other's
# binaries for up to date.
if [ "$src" = "$repo_root" ]; then
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo_root/target}
else
  export CARGO_TARGET_DIR=$src/target
fi

rustup target list --installed 2>/dev/null | grep -qx "$triple" ||
  { echo "images: the Rust target $triple is not installed (rustup target add $triple)" >&2; exit 1; }
triple_env=$(tr 'a-z-' 'A-Z_' <<<"$triple")
if [ "$arch" = amd64 ]; then
  command -v musl-gcc >/dev/null || { echo "images: musl-gcc missing (apt package musl-tools; scripts/deps.sh installs it)" >&2; exit 1; }
  # ring compiles its C and assembly for the target with musl-gcc (the cc
  # crate's default compiler for a musl target).
else
  # ring's C and assembly need no libc headers, so the aarch64 gcc of
  # Debian's cross toolchain compiles them; it also links, against the musl
  # libc and start files that Rust's musl target carries (self-contained).
  cross=${IMAGES_CROSS_PREFIX:-aarch64-linux-gnu-}
  command -v "${cross}gcc" >/dev/null ||
    { echo "images: ${cross}gcc missing (apt package gcc-aarch64-linux-gnu; scripts/release-tools.sh installs it)" >&2; exit 1; }
  cc_var=CC_${triple//-/_} ar_var=AR_${triple//-/_} linker_var=CARGO_TARGET_${triple_env}_LINKER
  export "$cc_var=${!cc_var:-${cross}gcc}" "$ar_var=${!ar_var:-${cross}ar}" "$linker_var=${!linker_var:-${cross}gcc}"
fi
# Paths of the crates.io sources are the only absolute paths left in the
# binaries (panic locations); with this, where cargo keeps them does not
# change the bytes.
export "CARGO_TARGET_${triple_env}_RUSTFLAGS=--remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
version=${IMAGES_VERSION:-$(sed -n '/^\[workspace.package\]/,/^\[/ s/^version *= *"\(.*\)"/\1/p' "$src/Cargo.toml")}
[ -n "$version" ] || { echo "images: no [workspace.package] version in $src/Cargo.toml" >&2; exit 1; }

# containerfile_stage FILE: the instructions of the final stage, one per line
# (continuation lines joined, comments dropped).
final_stage() {
  sed -e 's/^[[:space:]]*#.*$//' "$1" | sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta' |
    awk 'toupper($1) == "FROM" { buf = "" } NF { buf = buf $0 "\n" } END { printf "%s", buf }'
}
# The `cargo build` arguments that select packages and binaries (-p, --bin).
cargo_selection() {
  sed -e 's/^[[:space:]]*#.*$//' "$1" | sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta' |
    grep -o 'cargo build [^;&]*' | head -n1 |
    grep -oE '(-p|--package|--bin) +[A-Za-z0-9_-]+' | tr '\n' ' '
}

mkdir -p "$out"
: > "$out/images.txt.new"
images_yaml=""
for cf in "$src"/deploy/Containerfile.*; do
  stage=$(final_stage "$cf")
  title=$(grep -o 'org.opencontainers.image.title="[^"]*"' <<<"$stage" | head -n1 | cut -d'"' -f2)
  [ -n "$title" ] || { echo "images: $cf: no LABEL org.opencontainers.image.title in its final stage" >&2; exit 1; }
  read -r -a selection <<<"$(cargo_selection "$cf")"
  [ ${#selection[@]} -gt 0 ] || { echo "images: $cf: no cargo build -p/--bin arguments" >&2; exit 1; }
  echo "== image $title ($(basename "$cf")): cargo build --release --locked --target $triple ${selection[*]}"
  (cd "$src" && nice -n 19 cargo build --release --locked --target "$triple" "${selection[@]}")
  bins=$CARGO_TARGET_DIR/$triple/release

  rootfs=$(mktemp -d)
  trap 'rm -rf "$rootfs"' EXIT
  args=()
  while read -r instr rest; do
    case "${instr^^}" in
      FROM) ;;
      COPY)
        read -r -a words <<<"$rest"
        [[ "${words[0]}" == --from=* ]] || { echo "images: $cf: COPY without --from in the final stage: $rest" >&2; exit 1; }
        words=("${words[@]:1}")
        dest=${words[-1]}; unset 'words[-1]'
        for s in "${words[@]}"; do
          bin=$(basename "$s")
          [[ " ${selection[*]} " == *" --bin $bin "* ]] ||
            { echo "images: $cf copies $s, which its cargo build does not build (--bin $bin)" >&2; exit 1; }
          if [[ "$dest" == */ ]] || [ ${#words[@]} -gt 1 ]; then target_path=${dest%/}/$bin; else target_path=$dest; fi
          mkdir -p "$rootfs$(dirname "$target_path")"
          install -m 0755 "$bins/$bin" "$rootfs$target_path"
          "$repo_root/scripts/check-static.sh" "$rootfs$target_path" | sed "s#^$rootfs##"
        done ;;
      USER) args+=(--user "$rest") ;;
      EXPOSE) for p in $rest; do [[ "$p" == */* ]] || p=$p/tcp; args+=(--expose "$p"); done ;;
      ENTRYPOINT)
        while read -r e; do args+=(--entrypoint "$e"); done < <(jq -r '.[]' <<<"$rest") ;;
      LABEL)
        while read -r kv; do args+=(--label "$kv"); done < <(grep -oE '[A-Za-z0-9_.-]+="[^"]*"' <<<"$rest" | sed 's/="\(.*\)"$/=\1/') ;;
      *) echo "images: $cf: the final stage has $instr, which make images does not reproduce" >&2; exit 1 ;;
    esac
  done <<<"$stage"
  # What distroless/static gives the Containerfile build and a process may
  # look for: the root and nonroot (65532) users, and /tmp.
  mkdir -p "$rootfs/etc" "$rootfs/tmp"
  chmod 1777 "$rootfs/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$rootfs/etc/group"
  chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
  chmod 0755 "$rootfs" "$rootfs/etc"
  find "$rootfs" -type d -exec chmod go-w,a+rx {} + ; chmod 1777 "$rootfs/tmp"

  read -r ref digest size < <("$repo_root/scripts/mkimage.sh" "$prefix/$title:$version-{digest}" "$out/$title.tar" "$rootfs" \
    --arch "$arch" --env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" "${args[@]}")
  rm -rf "$rootfs"; trap - EXIT
  echo "$ref $digest $size" >> "$out/images.txt.new"
  echo "   $ref  $digest  $(( size / 1024 )) KiB"
  # The name the source tree's kustomization gives this image (an overlay
  # matches the base's newName).
  base_name=$(awk -v t="$title" '$1 == "-" && $2 == "name:" { n = $3 } $1 == "newName:" && n == t { print $2; exit }' \
    "$src/deploy/kustomization.yaml")
  images_yaml+="  - name: ${base_name:-$title}
    newName: ${ref%:*}
    newTag: ${ref##*:}
"
done
mv "$out/images.txt.new" "$out/images.txt"
# An overlay of the source tree's deploy/ that swaps the image references and
# nothing else.
rel=$(realpath --relative-to="$out" "$src/deploy")
cat > "$out/kustomization.yaml" <<YAML
# Written by scripts/images.sh: deploy/ with the images built by make images.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $rel
images:
$images_yaml
YAML
echo "images in $out (kubectl apply -k $out installs deploy/ with them)"
# The images against their Containerfiles and deploy/ (for this tree's build).
[ "$src" != "$repo_root" ] || "$repo_root/scripts/check-images.sh" "$out"
