#!/usr/bin/env bash
# docs-block.sh TAG [DOC]: prints the shell block that follows the marker
# `<!-- e2e: TAG -->` in DOC (docs/install.md by default), without its
# indentation, so that a test runs the docs' own lines word for word. Fails
# when the marker or its block is missing.
set -euo pipefail
tag=${1:?usage: docs-block.sh TAG [DOC]}
doc=${2:-$(dirname "$0")/../docs/install.md}
block=$(awk -v m="<!-- e2e: $tag -->" '
  { t = $0; sub(/^[ \t]+/, "", t) }
  t == m { found = 1; next }
  found && !inblock && t ~ /^```sh[ \t]*$/ { inblock = 1; ind = length($0) - length(t); next }
  inblock && t ~ /^```[ \t]*$/ { exit }
  inblock { print substr($0, ind + 1) }' "$doc")
[ -n "$block" ] || { echo "docs-block: no \`\`\`sh block after <!-- e2e: $tag --> in $doc" >&2; exit 1; }
printf '%s\n' "$block"
