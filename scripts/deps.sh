#!/usr/bin/env bash
# Installs what the build and tests need and a fresh machine may lack:
# iproute2 (network namespaces), jq, iptables, faketime, musl-tools and
# binutils from apt, the Rust musl target, and rustfmt/clippy. Go and cargo themselves come with
# the machine image.
set -euo pipefail
missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v ss >/dev/null || missing+=(iproute2)
command -v jq >/dev/null || missing+=(jq)
command -v iptables >/dev/null || missing+=(iptables)
# libfaketime: runs the plugin with a node clock that is off (forced-release tests).
command -v faketime >/dev/null || missing+=(faketime)
# musl-gcc: the static (musl) build of the images' binaries (`make images`)
# compiles ring's C and assembly with it; readelf checks they are static.
command -v musl-gcc >/dev/null || missing+=(musl-tools)
command -v readelf >/dev/null || missing+=(binutils)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi
for tool in go cargo; do
  command -v "$tool" >/dev/null || { echo "$tool is required (it comes with the machine image)" >&2; exit 1; }
done
# The musl target of the active toolchain: `make images` builds the images'
# static binaries for it (rustup downloads it once; a fresh machine lacks it).
if ! rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
  echo "installing: the Rust target x86_64-unknown-linux-musl"
  rustup target add x86_64-unknown-linux-musl >/dev/null 2>&1 ||
    echo "note: rustup could not add x86_64-unknown-linux-musl; make images will fail" >&2
fi
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 ||
    echo "note: rustfmt/clippy unavailable; lint will be skipped (an error under CI=true)" >&2
fi
