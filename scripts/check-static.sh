#!/usr/bin/env bash
# check-static.sh FILE...: passes only if every FILE is an ELF executable that
# needs nothing from the machine it runs on: no program interpreter (the
# host's ld.so) and no shared library (no DT_NEEDED), as a static or
# static-pie binary. The CNI plugin runs on the host, not in its image, so a
# plugin linked against glibc would depend on the host's libc. Prints one
# line per file; exits 1 naming the first file that fails.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 FILE..." >&2; exit 2; }
command -v readelf >/dev/null || { echo "check-static.sh: readelf missing (apt package binutils; scripts/deps.sh)" >&2; exit 2; }
for f in "$@"; do
  if ! readelf -h "$f" >/dev/null 2>&1; then
    echo "$f: not an ELF file" >&2; exit 1
  fi
  interp=$(readelf -lW "$f" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
  if [ -n "$interp" ]; then
    echo "$f: dynamically linked: needs the program interpreter $interp" >&2; exit 1
  fi
  needed=$(readelf -dW "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  if [ -n "$needed" ]; then
    echo "$f: dynamically linked: needs ${needed% }" >&2; exit 1
  fi
  echo "$f: static ($(readelf -h "$f" | sed -n 's/^ *Type: *\([A-Z]*\).*/\1/p'), no interpreter, no shared library)"
done
