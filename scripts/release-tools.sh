#!/usr/bin/env bash
# What `make release` needs beyond `make images`, installed on a fresh machine
# and kept between runs (only what is missing is installed):
# - the Rust target aarch64-unknown-linux-musl (rustup), for the linux/arm64
#   binaries;
# - Debian's aarch64 cross gcc and binutils (gcc-aarch64-linux-gnu), which
#   compile ring's C and assembly for that target and link the binaries;
# - helm, built from its Go module by scripts/tools.sh (it packages the chart);
# - syft (writes the SBOMs, scripts/sbom.sh) and cosign (signs the release
#   and verifies the signatures), each built from its Go module into
#   tests/bin, at the version its go.mod in tests/syft-tools or
#   tests/cosign-tools requires. They are rebuilt only when that go.mod,
#   go.sum or tools.go changed; Go's module and build caches are reused as
#   scripts/tools.sh reuses them. The first build takes minutes (each 5 to
#   10 on 2 cores with GOFLAGS=-p=1, which keeps it to one core; more when
#   Go's build cache is empty);
# - the registry of the release rig (distribution) and oras, which pushes a
#   release to it (scripts/registry.sh, scripts/release-push.sh), built the
#   same way from tests/registry-tools.
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

stamp() { cat "$1"/go.mod "$1"/go.sum "$1"/*.go 2>/dev/null | sha256sum | cut -c1-16; }
# required MODULE DIR: the version DIR/go.mod requires of MODULE.
required() { awk -v m="$1" '$1 == m { print $2 } $1 == "require" && $2 == m { print $3 }' "$2/go.mod" | head -n1; }
bin=tests/bin
mkdir -p "$bin"

want=$(stamp tests/syft-tools)
if [ ! -x "$bin/syft" ] || [ "$(cat "$bin/.syft-tools.stamp" 2>/dev/null)" != "$want" ]; then
  syft_version=$(required github.com/anchore/syft tests/syft-tools)
  echo "building syft $syft_version"
  (cd tests/syft-tools && nice -n 19 go build -trimpath -o ../bin/syft \
    -ldflags "-s -w -X main.version=${syft_version#v}" github.com/anchore/syft/cmd/syft)
  echo "$want" > "$bin/.syft-tools.stamp"
fi

want=$(stamp tests/cosign-tools)
if [ ! -x "$bin/cosign" ] || [ "$(cat "$bin/.cosign-tools.stamp" 2>/dev/null)" != "$want" ]; then
  cosign_version=$(required github.com/sigstore/cosign/v2 tests/cosign-tools)
  echo "building cosign $cosign_version"
  pkg=sigs.k8s.io/release-utils/version
  (cd tests/cosign-tools && nice -n 19 go build -trimpath -o ../bin/cosign \
    -ldflags "-s -w -X $pkg.gitVersion=$cosign_version -X $pkg.gitTreeState=clean" github.com/sigstore/cosign/v2/cmd/cosign)
  echo "$want" > "$bin/.cosign-tools.stamp"
fi

scripts/registry-tools.sh
