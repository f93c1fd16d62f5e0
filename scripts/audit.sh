#!/usr/bin/env bash
# Dependency audit (deny.toml): licenses, duplicate versions, sources and
# RustSec advisories, with a pinned cargo-deny installed once from crates.io
# into a cache outside the repository and reused by later runs. Compiling
# cargo-deny takes 13 to 25 minutes on 2 cores the first time, so it is off
# the path of `make test`: `make lint` and `make audit` run it, and so does CI
# after `make test` (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
DENY_VERSION=0.18.3
deny_root="${NETENDPOINT_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/netendpoint}/cargo-deny-$DENY_VERSION"
if [ ! -x "$deny_root/bin/cargo-deny" ]; then
  echo "audit: installing cargo-deny $DENY_VERSION from crates.io into $deny_root (once; 13 to 25 min on 2 cores)"
  cargo install --locked --quiet --version "$DENY_VERSION" --root "$deny_root" cargo-deny
fi
export PATH="$deny_root/bin:$PATH"
cargo deny --log-level error check licenses bans sources
# The advisory database is a git repository fetched from the network. When it
# cannot be fetched, a copy cached by an earlier run is used; without one the
# advisory check is skipped with a note (the other checks above still ran).
if cargo deny --log-level error fetch db >/dev/null 2>&1; then
  cargo deny --log-level error check --disable-fetch advisories
elif compgen -G "${CARGO_HOME:-$HOME/.cargo}/advisory-dbs/*/.git" >/dev/null; then
  echo "audit: advisory database not reachable; checking against the copy cached by an earlier run" >&2
  cargo deny --log-level error check --disable-fetch advisories
else
  echo "audit: advisories SKIPPED: the RustSec database cannot be fetched and no copy is cached" >&2
fi
