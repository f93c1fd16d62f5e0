#!/usr/bin/env bash
# cargo fmt --check, clippy -D warnings, the module-cycle check, then cargo-deny (deny.toml). Without rustfmt or clippy (which
# scripts/deps.sh tries to install), a developer machine skips the lint with
# a note; under CI=true that is a failure, so CI never passes unlinted.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
cargo clippy --version >/dev/null 2>&1 || missing+=(clippy)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "${CI:-}" = true ]; then
    echo "lint: ${missing[*]} missing and CI=true: failing (rustup component add rustfmt clippy)" >&2
    exit 1
  fi
  echo "lint: SKIPPED, ${missing[*]} missing (rustup component add rustfmt clippy); CI=true makes this an error" >&2
  exit 0
fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# Each crate's module import graph has no cycle (a module never imports its caller).
python3 scripts/module-cycles.py

# Dependency audit (deny.toml): licenses, duplicate versions, sources and
# RustSec advisories, with a pinned cargo-deny installed once from crates.io
# into a cache outside the repository and reused by later runs.
DENY_VERSION=0.18.3
deny_root="${NETENDPOINT_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/netendpoint}/cargo-deny-$DENY_VERSION"
if [ ! -x "$deny_root/bin/cargo-deny" ]; then
  echo "lint: installing cargo-deny $DENY_VERSION from crates.io into $deny_root (once; a few minutes)"
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
  echo "lint: advisory database not reachable; checking against the copy cached by an earlier run" >&2
  cargo deny --log-level error check --disable-fetch advisories
else
  echo "lint: advisories SKIPPED: the RustSec database cannot be fetched and no copy is cached" >&2
fi
