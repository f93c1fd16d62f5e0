#!/usr/bin/env bash
# sbom.sh OUT VERSION: an SBOM per image of deploy/Containerfile.*, written
# by syft as SPDX 2.3 JSON to OUT/<image>-VERSION.spdx.json.
#
# What it lists: the crates compiled into that image's binaries, for
# linux/amd64 or linux/arm64 (the union of the two; they differ by a few
# crates of CPU feature detection). These are the packages that
#   cargo tree -e normal,no-proc-macro --target <triple> -p ... -p ...
# names for the `cargo build -p/--bin` selection of the Containerfile (the one
# scripts/images.sh builds): normal dependencies with the features that
# selection enables. Left out are dev and build dependencies and proc macros
# (with what only they use): they run on the build machine and none of their
# code is in a binary. The workspace's own crates are listed too.
#
# How: the workspace's Cargo.lock cut down to those packages (and their
# dependency lists to the packages kept) is the one file syft catalogs
# (its rust-cargo-lock-cataloger), so names, versions, checksums, package
# URLs and the dependency graph come from Cargo.lock as syft reads it.
#
# Reproducible: syft stamps the document with the time and a random
# namespace; both are replaced, the time by the commit's (SOURCE_DATE_EPOCH),
# the namespace by one made from the image, VERSION and the SHA-256 of the
# cut-down Cargo.lock. Everything else syft writes is the same on every run.
# SYFT: the syft binary (default tests/bin/syft, scripts/release-tools.sh).
# SBOM_SRC: the source tree whose Containerfiles and Cargo.lock are read
# (default: this one; scripts/release.sh passes its RELEASE_SRC).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: sbom.sh OUT VERSION} version=${2:?usage: sbom.sh OUT VERSION}
syft=${SYFT:-tests/bin/syft}
[ -x "$syft" ] || { echo "sbom: $syft missing (scripts/release-tools.sh builds it)" >&2; exit 1; }
src=$(cd "${SBOM_SRC:-.}" && pwd)
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$src" log -1 --format=%ct)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# syft is asked about nothing but the file it is given, and never goes online.
export SYFT_CHECK_FOR_APP_UPDATE=false

# The final stage's title label and the `cargo build` package and binary
# selection of a Containerfile, read as scripts/images.sh reads them.
joined() { sed -e 's/^[[:space:]]*#.*$//' "$1" | sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta'; }
title_of() {
  joined "$1" | awk 'toupper($1) == "FROM" { buf = "" } NF { buf = buf $0 "\n" } END { printf "%s", buf }' |
    grep -o 'org.opencontainers.image.title="[^"]*"' | head -n1 | cut -d'"' -f2
}
packages_of() { joined "$1" | grep -o 'cargo build [^;&]*' | head -n1 | grep -oE '(-p|--package) +[A-Za-z0-9_-]+' | awk '{ print "-p", $2 }'; }

mkdir -p "$out"
for cf in "$src"/deploy/Containerfile.*; do
  title=$(title_of "$cf")
  read -r -a selection <<<"$(packages_of "$cf" | tr '\n' ' ')"
  if [ -z "$title" ] || [ ${#selection[@]} = 0 ]; then echo "sbom: $cf: no image title or no cargo build -p" >&2; exit 1; fi
  # "name version" of every package compiled into the binaries, either platform.
  for triple in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
    cargo tree --manifest-path "$src/Cargo.toml" --locked --offline -q -e normal,no-proc-macro --target "$triple" "${selection[@]}" \
      --prefix none --format '{p}'
  done | sed -e '/^$/d' -e 's/ (.*)$//' -e 's/ v\([^ ]*\)$/ \1/' | sort -u > "$work/$title.keep"
  mkdir -p "$work/$title"
  # Cargo.lock with only those [[package]] blocks; in each, a dependency
  # ("name", "name version" or "name version (source)") stays if it is kept.
  awk '
    FNR == NR { keep[$1 " " $2] = 1; name[$1] = 1; next }
    function flush() { if (blk != "" && (n " " v) in keep) printf "%s\n", blk; blk = "" }
    /^\[\[package\]\]$/ { flush(); inpkg = 1; blk = $0; n = v = ""; next }
    !inpkg { print; next }
    /^$/ { flush(); inpkg = 0; print; next }
    /^name = / { n = $3; gsub(/"/, "", n) }
    /^version = / { v = $3; gsub(/"/, "", v) }
    /^ "/ {
      d = $0; gsub(/^ "|",?$/, "", d); split(d, w, " ")
      if (!((w[2] == "" && w[1] in name) || (w[1] " " w[2]) in keep)) next
    }
    { blk = blk "\n" $0 }
    END { flush() }
  ' "$work/$title.keep" "$src/Cargo.lock" | cat -s > "$work/$title/Cargo.lock"
  kept=$(grep -c '^\[\[package\]\]$' "$work/$title/Cargo.lock")
  [ "$kept" = "$(wc -l < "$work/$title.keep")" ] ||
    { echo "sbom: $title: cargo tree names $(wc -l < "$work/$title.keep") packages, Cargo.lock has $kept of them" >&2; exit 1; }

  "$syft" scan -q "dir:$work/$title" --override-default-catalogers rust-cargo-lock-cataloger \
    --source-name "$title" --source-version "$version" -o "spdx-json=$work/$title.spdx.json"
  lock_sum=$(sha256sum "$work/$title/Cargo.lock" | cut -c1-64)
  jq --arg created "$created" --arg ns "https://netendpoint.dev/spdx/$title-$version-$lock_sum" \
    '.creationInfo.created = $created | .documentNamespace = $ns' \
    "$work/$title.spdx.json" > "$out/$title-$version.spdx.json"
  echo "   $title-$version.spdx.json: $kept crates, $(( $(stat -c %s "$out/$title-$version.spdx.json") / 1024 )) KiB"
done
