#!/usr/bin/env bash
# What `make release` needs beyond `make images`, installed on a fresh machine
# and kept between runs (only what is missing is installed):
# - the Rust target aarch64-unknown-linux-musl (rustup), for the linux/arm64
#   binaries;
# - Debian's aarch64 cross gcc and binutils (gcc-aarch64-linux-gnu), which
#   compile ring's C and assembly for that target and link the binaries;
# - helm, built from its Go module by scripts/tools.sh (it packages the chart).
# `make test` does not run this: it never cross-builds.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v aarch64-linux-gnu-ar >/dev/null; then
  echo "installing: gcc-aarch64-linux-gnu (the linux/arm64 cross compiler and linker)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq gcc-aarch64-linux-gnu >/dev/null
fi
if ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-musl; then
  echo "installing: the Rust target aarch64-unknown-linux-musl"
  rustup target add aarch64-unknown-linux-musl >/dev/null
fi
scripts/tools.sh
