#!/usr/bin/env bash
# docs-run.sh [--node] TAG: runs, word for word, the shell block that follows
# the marker `<!-- e2e: TAG -->` in docs/install.md, as a user would type it:
# in $NODE_DIR/user (made by user_dir below), where deploy/ is the overlay the
# test installs, 10-netendpoint.conflist the node's network config, and
# `kubectl` talks to the node's API server. With --node, the block runs as
# root on the node (in its mount namespace), as the docs' "on each node"
# steps are meant. Fails if the marker or its block is missing.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
on_node=0
[ "${1:-}" = --node ] && { on_node=1; shift; }
tag=${1:?usage: docs-run.sh [--node] TAG}
block=$("$repo/scripts/docs-block.sh" "$tag")
user=$NODE_DIR/user
[ -d "$user/deploy" ] || { echo "docs-run: $user/deploy missing (user_dir)" >&2; exit 1; }
say "docs/install.md, $tag:"
sed 's/^/    $ /' <<<"$block"
log=$NODE_DIR/logs/docs-$tag.log
if [ "$on_node" = 1 ]; then
  (cd "$user" && in_node bash -euo pipefail -c "$block") >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
else
  (cd "$user" && PATH="$user/bin:$PATH" timeout 600 bash -euo pipefail -c "$block") >"$log" 2>&1 ||
    { cat "$log" >&2; exit 1; }
fi
