#!/usr/bin/env bash
# The registry of the release rig and its client, built from their Go
# modules in tests/registry-tools into tests/bin (only when missing, or when
# that go.mod, go.sum or tools.go changed; Go's caches are reused):
# distribution's registry server (scripts/registry.sh starts it on a
# loopback address) and oras, which pushes OCI archives and attaches
# referrers (scripts/release-push.sh). `make release-tools` runs it, and
# `make e2e-upgrade`, which installs both releases from that registry.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp() { cat "$1"/go.mod "$1"/go.sum "$1"/*.go 2>/dev/null | sha256sum | cut -c1-16; }
required() { awk -v m="$1" '$1 == m { print $2 } $1 == "require" && $2 == m { print $3 }' "$2/go.mod" | head -n1; }
bin=tests/bin
mkdir -p "$bin"
want=$(stamp tests/registry-tools)
if [ ! -x "$bin/registry" ] || [ ! -x "$bin/oras" ] || [ "$(cat "$bin/.registry-tools.stamp" 2>/dev/null)" != "$want" ]; then
  registry_version=$(required github.com/distribution/distribution/v3 tests/registry-tools)
  oras_version=$(required oras.land/oras tests/registry-tools)
  echo "building registry (distribution) $registry_version and oras $oras_version"
  (cd tests/registry-tools &&
    nice -n 19 go build -trimpath -o ../bin/registry \
      -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$registry_version" \
      github.com/distribution/distribution/v3/cmd/registry &&
    nice -n 19 go build -trimpath -o ../bin/oras \
      -ldflags "-s -w" \
      oras.land/oras/cmd/oras)
  echo "$want" > "$bin/.registry-tools.stamp"
fi
