#!/usr/bin/env bash
# Stops the real node started by up.sh and undoes what it did to the host, also
# after a failure half-way: pod sandboxes (CNI DEL while the API server still
# runs), kube-controller-manager, kube-scheduler, kubelet, containerd and its
# shims, runc containers, the node's mount namespace, mounts under $NODE_DIR,
# the bridge, the empty mount points it made on the host, and the API server.
# Idempotent; never fails.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
[ -d "$NODE_DIR" ] || exit 0

stop_pid() { # file
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 0
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$1"
}

# No more Pods made or scheduled while the node goes down.
stop_pid "$NODE_DIR/pids/kube-controller-manager"
stop_pid "$NODE_DIR/pids/kube-scheduler"
stop_pid "$NODE_DIR/pids/kubelet"
if [ -S "$sock" ]; then
  # Sandboxes go through CNI DEL while the API server is still up.
  crictl stopp $(crictl pods -q 2>/dev/null) >/dev/null 2>&1
  crictl rmp -af >/dev/null 2>&1
fi
stop_pid "$NODE_DIR/pids/containerd"
# Shims and containers outlive containerd: stop those that belong to this node.
for p in /proc/[0-9]*; do
  if tr '\0' ' ' 2>/dev/null < "$p/cmdline" | grep -q -- "containerd-shim-runc-v2 .*$NODE_DIR/ctd"; then
    kill -KILL "${p#/proc/}" 2>/dev/null
  fi
done
if [ -d "$NODE_DIR/ctd/runc" ]; then
  for c in $("$nbin/runc" --root "$NODE_DIR/ctd/runc" list -q 2>/dev/null); do
    "$nbin/runc" --root "$NODE_DIR/ctd/runc" kill "$c" KILL >/dev/null 2>&1
    "$nbin/runc" --root "$NODE_DIR/ctd/runc" delete -f "$c" >/dev/null 2>&1
  done
fi
# The node's mount namespace goes with its last process.
stop_pid "$NODE_DIR/pids/node-ns"
stop_pid "$NODE_DIR/pids/log-keeper"
# Every mount under $NODE_DIR left on the host (none is made there; this
# cleans up after older layouts and half-way failures), deepest first.
for _ in 1 2 3; do
  mounts=$(awk -v d="$NODE_DIR" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r)
  [ -n "$mounts" ] || break
  for m in $mounts; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
done
ip link del "$NODE_BRIDGE" 2>/dev/null
if [ -e "$NODE_DIR/kubelet/made-kubepods" ]; then
  find /sys/fs/cgroup -mindepth 2 -maxdepth 2 -name kubepods -type d 2>/dev/null |
    while read -r cg; do find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null; done
  rm -f "$NODE_DIR/kubelet/made-kubepods"
fi
if [ -e "$NODE_DIR/made-dirs" ]; then
  # The empty mount points up.sh made on the host, innermost first.
  tac "$NODE_DIR/made-dirs" | while read -r d; do rmdir "$d" 2>/dev/null; done
  rm -f "$NODE_DIR/made-dirs"
fi
"$repo/scripts/testenv.sh" stop "$NODE_DIR/api" >/dev/null 2>&1
exit 0
