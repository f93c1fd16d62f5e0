#!/usr/bin/env bash
# Brings up a single-node cluster in $NODE_DIR: the project's test API server
# (scripts/testenv.sh), kube-controller-manager and kube-scheduler, containerd
# with its CRI plugin and runc, kubelet, and netendpoint installed as a user
# installs it: the images of `make images` imported into containerd, and
# deploy/ applied through the overlay that swaps the image references
# (target/images/kustomization.yaml), so the installer and the agent run as
# DaemonSet Pods and the controller as a Deployment, with their probes.
# Run tests/node/build.sh and scripts/images.sh first. Needs root.
# tests/node/down.sh undoes it all, also after a failure.
#
# NODE_POOL_SIZE: number of IPs in the pool (default 5: the controller's two
# Pods take two of them).
# NODE_IMAGES: the directory scripts/images.sh wrote (default target/images).
# NODE_NO_INSTALL=1: stop before installing netendpoint (the upgrade test
# installs an earlier release itself).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
pool_size=${NODE_POOL_SIZE:-5}
images=${NODE_IMAGES:-$repo/target/images}
[ "$(id -u)" = 0 ] || { echo "the real node needs root" >&2; exit 1; }
for b in containerd containerd-shim-runc-v2 ctr runc crictl kubelet kube-controller-manager kube-scheduler pause; do
  [ -x "$nbin/$b" ] || { echo "missing $nbin/$b: run tests/node/build.sh" >&2; exit 1; }
done
if [ "${NODE_NO_INSTALL:-0}" != 1 ]; then
  [ -s "$images/images.txt" ] && [ -s "$images/kustomization.yaml" ] ||
    { echo "missing $images/images.txt: run scripts/images.sh (make images)" >&2; exit 1; }
fi

"$repo/tests/node/down.sh" >/dev/null 2>&1 || true
rm -rf "$NODE_DIR"
mkdir -p "$NODE_DIR"/{api,logs/pods,pids,images,ctd,cni/bin,cni/conf,cni/varlib,install} \
  "$NODE_DIR"/kubelet/{root,fake,varlib,containers-logs,pod-logs}
started=$(now_ms)

say "bridge $NODE_BRIDGE with the API server's address $NODE_API_IP"
ip link add "$NODE_BRIDGE" type bridge
ip addr add "$NODE_API_IP/16" dev "$NODE_BRIDGE"
ip link set "$NODE_BRIDGE" up

say "API server on https://$NODE_API_IP:443, also the kubernetes Service's ClusterIP"
TESTENV_FLAGS="--address $NODE_API_IP --port 443 --service-cidr $NODE_SERVICE_CIDR" \
  "$repo/scripts/testenv.sh" start "$NODE_DIR/api"

say "kube-controller-manager and kube-scheduler $("$nbin/kube-scheduler" --version | awk '{print $2}')"
# Admin credentials and no serving port: nothing else listens on the host.
setsid "$nbin/kube-controller-manager" --kubeconfig="$NODE_DIR/api/kubeconfig" --leader-elect=false \
  --secure-port=0 --root-ca-file="$NODE_DIR/api/pki/ca.crt" \
  --service-account-private-key-file="$NODE_DIR/api/pki/sa.key" --v=1 \
  >"$NODE_DIR/logs/kube-controller-manager.log" 2>&1 </dev/null &
echo $! > "$NODE_DIR/pids/kube-controller-manager"
setsid "$nbin/kube-scheduler" --kubeconfig="$NODE_DIR/api/kubeconfig" --leader-elect=false \
  --secure-port=0 --v=1 >"$NODE_DIR/logs/kube-scheduler.log" 2>&1 </dev/null &
echo $! > "$NODE_DIR/pids/kube-scheduler"

# The node's mount namespace, where kubelet, containerd and all they start
# (shims, runc, the CNI plugins) run. In it the paths a node's software and
# deploy/'s hostPath volumes name are directories under $NODE_DIR:
#   /opt/cni/bin, /etc/cni/net.d       -> cni/bin, cni/conf (the installer writes there)
#   /var/lib/cni                       -> cni/varlib (the plugin's dataDir, libcni's cache)
#   /var/lib/kubelet, /var/log/containers -> kubelet/varlib, kubelet/containers-logs (hard-coded in kubelet)
#   /proc/sys/{vm/overcommit_memory,kernel/panic,kernel/panic_on_oops} -> files holding the
#     values kubelet insists on (protectKernelDefaults: it refuses to start rather than write them)
# Mounts propagate into it from the host, never out of it (slave). On the
# host, a missing path is made as an empty mount point and removed again by
# down.sh.
say "node mount namespace"
echo 1 > "$NODE_DIR/kubelet/fake/overcommit_memory"
echo 10 > "$NODE_DIR/kubelet/fake/panic"
echo 1 > "$NODE_DIR/kubelet/fake/panic_on_oops"
for d in /opt/cni/bin /etc/cni/net.d /var/lib/cni /var/lib/kubelet /var/log/containers; do
  # Record each directory made, outermost first, so down.sh removes them innermost first.
  missing=() p=$d
  while [ ! -e "$p" ]; do missing=("$p" "${missing[@]}"); p=$(dirname "$p"); done
  for m in ${missing[@]+"${missing[@]}"}; do mkdir "$m" && echo "$m" >> "$NODE_DIR/made-dirs"; done
done
NODE_DIR=$NODE_DIR setsid unshare -m --propagation slave /bin/sh -c '
  set -e
  n=$NODE_DIR
  mount --bind "$n/kubelet/fake/overcommit_memory" /proc/sys/vm/overcommit_memory
  mount --bind "$n/kubelet/fake/panic" /proc/sys/kernel/panic
  mount --bind "$n/kubelet/fake/panic_on_oops" /proc/sys/kernel/panic_on_oops
  mount --bind "$n/cni/bin" /opt/cni/bin
  mount --bind "$n/cni/conf" /etc/cni/net.d
  mount --bind "$n/cni/varlib" /var/lib/cni
  mount --bind "$n/kubelet/varlib" /var/lib/kubelet
  mount --bind "$n/kubelet/containers-logs" /var/log/containers
  touch "$n/pids/node-ns.ready"
  exec sleep infinity' >"$NODE_DIR/logs/node-ns.log" 2>&1 </dev/null &
echo $! > "$NODE_DIR/pids/node-ns"
for _ in $(seq 1 50); do [ -e "$NODE_DIR/pids/node-ns.ready" ] && break; sleep 0.1; done
[ -e "$NODE_DIR/pids/node-ns.ready" ] || { cat "$NODE_DIR/logs/node-ns.log" >&2; exit 1; }

say "containerd $("$nbin/containerd" --version | awk '{print $3}'), runc $("$nbin/runc" --version | awk 'NR==1{print $3}')"
sed -e "s#@NODE_DIR@#$NODE_DIR#g" -e "s#@NBIN@#$nbin#g" "$repo/tests/node/containerd.toml" > "$NODE_DIR/ctd/config.toml"
printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\n' "$sock" "$sock" > "$NODE_DIR/crictl.yaml"
# The CNI reference plugins, as in a node's /opt/cni/bin; the installer adds netendpoint.
cp "$tbin/cni/bridge" "$tbin/cni/loopback" "$tbin/cni/host-local" "$NODE_DIR/cni/bin/"
setsid nsenter --mount="/proc/$(cat "$NODE_DIR/pids/node-ns")/ns/mnt" -- \
  "$nbin/containerd" --config "$NODE_DIR/ctd/config.toml" >"$NODE_DIR/logs/containerd.log" 2>&1 </dev/null &
echo $! > "$NODE_DIR/pids/containerd"
for _ in $(seq 1 100); do ctr version >/dev/null 2>&1 && break; sleep 0.1; done
ctr version >/dev/null 2>&1 || { tail -n 20 "$NODE_DIR/logs/containerd.log" >&2; exit 1; }

say "images (built locally: no registry is reachable)"
mkdir -p "$NODE_DIR/images/pause"
install -m 0755 "$nbin/pause" "$NODE_DIR/images/pause/pause"
"$repo/scripts/mkimage.sh" localhost/netendpoint-e2e/pause:1 "$NODE_DIR/images/pause.tar" "$NODE_DIR/images/pause" \
  --entrypoint /pause >/dev/null
ctr -n k8s.io images import "$NODE_DIR/images/pause.tar" >/dev/null 2>&1
if [ "${NODE_NO_INSTALL:-0}" != 1 ]; then
  for tar in "$images"/*.tar; do
    ctr -n k8s.io images import "$tar" >/dev/null
  done
  while read -r ref digest _; do say "  $ref ($digest)"; done < "$images/images.txt"
fi

say "kubelet as node $NODE_NAME"
node_ip=$(ip -4 -o route get 192.0.2.255 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
[ -n "$node_ip" ] || node_ip=$(hostname -I | awk '{print $1}')
sed -e "s#@NODE_DIR@#$NODE_DIR#g" "$repo/tests/node/kubelet.yaml" > "$NODE_DIR/kubelet/config.yaml"
# kubelet makes the kubepods cgroups (cgroupfs driver); down.sh removes them if they were not there.
[ -n "$(find /sys/fs/cgroup -maxdepth 2 -name kubepods 2>/dev/null)" ] || touch "$NODE_DIR/kubelet/made-kubepods"
setsid nsenter --mount="/proc/$(cat "$NODE_DIR/pids/node-ns")/ns/mnt" -- \
  "$nbin/kubelet" --config="$NODE_DIR/kubelet/config.yaml" \
  --kubeconfig="$NODE_DIR/api/kubeconfig" --root-dir="$NODE_DIR/kubelet/root" \
  --cert-dir="$NODE_DIR/kubelet/root/pki" --hostname-override="$NODE_NAME" --node-ip="$node_ip" --v=2 \
  >"$NODE_DIR/logs/kubelet.log" 2>&1 </dev/null &
echo $! > "$NODE_DIR/pids/kubelet"
for _ in $(seq 1 120); do kc get node "$NODE_NAME" >/dev/null 2>&1 && break; sleep 0.5; done
kc get node "$NODE_NAME" >/dev/null || { tail -n 30 "$NODE_DIR/logs/kubelet.log" >&2; exit 1; }
# A single node is the control plane too: the controller's placement
# (control-plane nodes) must find it. No taint, so the test pods run on it.
kc label node "$NODE_NAME" node-role.kubernetes.io/control-plane= --overwrite >/dev/null

# Every netendpoint-system container log, kept by a hard link as soon as it
# appears, so that it outlives its Pod (rollouts delete Pods and kubelet
# their logs): logs/pods/<seq>_<pod>_<container>_<inode>.log, in order.
(
  seq=0
  while [ -d "$NODE_DIR/logs/pods" ]; do
    for f in "$NODE_DIR"/kubelet/pod-logs/netendpoint-system_*/*/*.log; do
      [ -f "$f" ] || continue
      ino=$(stat -c %i "$f" 2>/dev/null) || continue
      compgen -G "$NODE_DIR/logs/pods/*_$ino.log" >/dev/null && continue
      d=${f%/*} pod=${d%/*}; pod=${pod##*/}; pod=${pod#netendpoint-system_}; pod=${pod%_*}
      seq=$((seq + 1))
      ln "$f" "$NODE_DIR/logs/pods/$(printf %04d $seq)_${pod}_${d##*/}_$ino.log" 2>/dev/null || true
    done
    sleep 0.2
  done
) </dev/null >/dev/null 2>&1 &
echo $! > "$NODE_DIR/pids/log-keeper"

agent_finalizer=watcher.netendpoint.dev/rules
sed -e "s#@NODE_DIR@#$NODE_DIR#g" -e "s#@POOL_END@#$((9 + pool_size))#g" -e "s#@BRIDGE@#$NODE_BRIDGE#g" \
  -e "s#@FINALIZER@#$agent_finalizer#g" "$repo/tests/node/10-netendpoint.conflist" > "$NODE_DIR/install/10-netendpoint.conflist"

# Pods need the namespace's ServiceAccount, which kube-controller-manager makes.
for _ in $(seq 1 120); do kc get serviceaccount default >/dev/null 2>&1 && break; sleep 0.5; done
kc get serviceaccount default >/dev/null || { tail -n 30 "$NODE_DIR/logs/kube-controller-manager.log" >&2; exit 1; }

if [ "${NODE_NO_INSTALL:-0}" = 1 ]; then
  say "node up in $(( ($(now_ms) - started) / 1000 )) s, netendpoint not installed"
  exit 0
fi
"$repo/tests/node/install.sh" "$images"
say "waiting for node $NODE_NAME to be Ready"
kc wait --for=condition=Ready "node/$NODE_NAME" --timeout=120s >/dev/null ||
  { tail -n 30 "$NODE_DIR/logs/kubelet.log" >&2; exit 1; }
say "node up in $(( ($(now_ms) - started) / 1000 )) s; pool of $pool_size IPs (10.250.0.10-10.250.0.$((9 + pool_size)))"
