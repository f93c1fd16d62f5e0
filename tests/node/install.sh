#!/usr/bin/env bash
# install.sh OVERLAY: installs netendpoint on the real node with the commands
# of docs/install.md, "Install", word for word (tests/node/docs-run.sh), where
# deploy/ is OVERLAY (scripts/images.sh writes it: the repository's deploy/
# with the image references of `make images`); then waits until the API
# server enforces the admission policies.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
overlay=$1
user_dir "$overlay"
start=$(now_ms)
"$repo/tests/node/docs-run.sh" install
say "installed and rolled out in $(( $(now_ms) - start )) ms"
"$repo/tests/node/policies-wait.sh"
