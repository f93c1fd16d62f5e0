#!/usr/bin/env bash
# Brings up a single-node cluster in $NODE_DIR: the project's test API server
# (scripts/testenv.sh), kube-controller-manager and kube-scheduler, containerd
# with its CRI plugin and runc, kubelet, and netendpoint installed the way a
# user installs it (CRD, RBAC, admission policies, the net-conf ConfigMap, the
# installer writing the plugin, its credentials and the conflist into the
# node's CNI directories), with watcher-example as the node's agent and the
# netendpoint controller, each a host process with its ServiceAccount's
# kubeconfig. Run tests/node/build.sh and
# `cargo build --workspace --bins` first. Needs root. tests/node/down.sh undoes
# it all, also after a failure.
#
# NODE_POOL_SIZE: number of IPs in the pool (default 3).
# NODE_CARGO_PROFILE: the cargo profile whose binaries are installed (default
# debug; the benchmark uses release).
# NODE_POD_GONE_GRACE: the controller's --pod-gone-grace (default 10s, so a
# leaked lease is collected within the scenario; 15m in deploy/).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
pool_size=${NODE_POOL_SIZE:-3}
rbin=$repo/target/${NODE_CARGO_PROFILE:-debug}
[ "$(id -u)" = 0 ] || { echo "the real node needs root" >&2; exit 1; }
for b in containerd containerd-shim-runc-v2 ctr runc crictl kubelet kube-controller-manager kube-scheduler pause; do
  [ -x "$nbin/$b" ] || { echo "missing $nbin/$b: run tests/node/build.sh" >&2; exit 1; }
done
for b in netendpoint netendpoint-install netendpoint-controller watcher-example; do
  [ -x "$rbin/$b" ] || { echo "missing $rbin/$b: run cargo build --workspace --bins" >&2; exit 1; }
done

"$repo/tests/node/down.sh" >/dev/null 2>&1 || true
rm -rf "$NODE_DIR"
mkdir -p "$NODE_DIR"/{api,logs,pids,images,ctd,cni/bin,cni/conf,cni/data,agent,controller,install} \
  "$NODE_DIR"/kubelet/{root,fake,varlib,containers-logs,pod-logs}
started=$(now_ms)

say "API server"
"$repo/scripts/testenv.sh" start "$NODE_DIR/api"
server=$(kc config view --raw -o 'jsonpath={.clusters[0].cluster.server}')

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

say "containerd $("$nbin/containerd" --version | awk '{print $3}'), runc $("$nbin/runc" --version | awk 'NR==1{print $3}')"
sed -e "s#@NODE_DIR@#$NODE_DIR#g" -e "s#@NBIN@#$nbin#g" "$repo/tests/node/containerd.toml" > "$NODE_DIR/ctd/config.toml"
printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\n' "$sock" "$sock" > "$NODE_DIR/crictl.yaml"
# The CNI reference plugins next to netendpoint, as in a node's /opt/cni/bin.
cp "$tbin/cni/bridge" "$tbin/cni/loopback" "$tbin/cni/host-local" "$NODE_DIR/cni/bin/"
setsid "$nbin/containerd" --config "$NODE_DIR/ctd/config.toml" >"$NODE_DIR/logs/containerd.log" 2>&1 </dev/null &
echo $! > "$NODE_DIR/pids/containerd"
for _ in $(seq 1 100); do ctr version >/dev/null 2>&1 && break; sleep 0.1; done
ctr version >/dev/null 2>&1 || { tail -n 20 "$NODE_DIR/logs/containerd.log" >&2; exit 1; }

say "images (built locally: no registry is reachable)"
mkdir -p "$NODE_DIR/images/pause"
install -m 0755 "$nbin/pause" "$NODE_DIR/images/pause/pause"
"$repo/scripts/mkimage.sh" localhost/netendpoint-e2e/pause:1 "$NODE_DIR/images/pause.tar" "$NODE_DIR/images/pause" \
  --entrypoint /pause >/dev/null
ctr -n k8s.io images import "$NODE_DIR/images/pause.tar" >/dev/null 2>&1

say "kubelet as node $NODE_NAME"
node_ip=$(ip -4 -o route get 192.0.2.255 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
[ -n "$node_ip" ] || node_ip=$(hostname -I | awk '{print $1}')
sed -e "s#@NODE_DIR@#$NODE_DIR#g" "$repo/tests/node/kubelet.yaml" > "$NODE_DIR/kubelet/config.yaml"
# The values kubelet requires with protectKernelDefaults; it only reads them,
# from these files bind-mounted over /proc/sys in its own mount namespace.
echo 1 > "$NODE_DIR/kubelet/fake/overcommit_memory"
echo 10 > "$NODE_DIR/kubelet/fake/panic"
echo 1 > "$NODE_DIR/kubelet/fake/panic_on_oops"
# Volumes kubelet mounts under its root dir must reach containerd: a shared mount.
mount --bind "$NODE_DIR/kubelet/root" "$NODE_DIR/kubelet/root"
mount --make-shared "$NODE_DIR/kubelet/root"
# kubelet makes the kubepods cgroups (cgroupfs driver); down.sh removes them if they were not there.
[ -n "$(find /sys/fs/cgroup -maxdepth 2 -name kubepods 2>/dev/null)" ] || touch "$NODE_DIR/kubelet/made-kubepods"
# kubelet hard-codes /var/lib/kubelet/device-plugins and /var/log/containers:
# empty mount points on the host, covered in kubelet's namespace. down.sh
# removes those it made.
for d in /var/lib/kubelet /var/log/containers; do
  [ -e "$d" ] || { mkdir -p "$d" && echo "$d" >> "$NODE_DIR/kubelet/made-dirs"; }
done
NODE_DIR=$NODE_DIR setsid unshare -m --propagation unchanged /bin/sh -c '
  set -e
  f=$NODE_DIR/kubelet/fake
  mount --bind "$f/overcommit_memory" /proc/sys/vm/overcommit_memory
  mount --bind "$f/panic" /proc/sys/kernel/panic
  mount --bind "$f/panic_on_oops" /proc/sys/kernel/panic_on_oops
  mount --bind "$NODE_DIR/kubelet/varlib" /var/lib/kubelet
  mount --bind "$NODE_DIR/kubelet/containers-logs" /var/log/containers
  exec "$@"' kubelet "$nbin/kubelet" --config="$NODE_DIR/kubelet/config.yaml" \
  --kubeconfig="$NODE_DIR/api/kubeconfig" --root-dir="$NODE_DIR/kubelet/root" \
  --cert-dir="$NODE_DIR/kubelet/root/pki" --hostname-override="$NODE_NAME" --node-ip="$node_ip" --v=2 \
  >"$NODE_DIR/logs/kubelet.log" 2>&1 </dev/null &
echo $! > "$NODE_DIR/pids/kubelet"
for _ in $(seq 1 120); do kc get node "$NODE_NAME" >/dev/null 2>&1 && break; sleep 0.5; done
kc get node "$NODE_NAME" >/dev/null || { tail -n 30 "$NODE_DIR/logs/kubelet.log" >&2; exit 1; }

say "netendpoint: RBAC, admission policies, net-conf, installer (plugin, credentials, conflist), agent, controller"
# deploy/ without its workloads (no image of them on this node): each one
# runs below as a host process under its ServiceAccount instead.
kc apply -f "$repo/deploy/namespace.yaml" -f "$repo/deploy/rbac-cni.yaml" -f "$repo/deploy/rbac-installer.yaml" \
  -f "$repo/deploy/rbac-watcher-example.yaml" -f "$repo/deploy/admission-policies.yaml" >/dev/null
awk 'BEGIN { RS = "\n---\n"; ORS = "\n---\n" } !/\nkind: (Deployment|Service)\n/' "$repo/deploy/controller.yaml" |
  kc apply -f - >/dev/null
# Policies take effect a moment after they are created: wait until the API
# server refuses a lease from a plugin token bound to no node (a dry run).
"$tbin/kube-testenv" sa-kubeconfig --dir "$NODE_DIR/api" --namespace netendpoint-system \
  --name netendpoint-cni --out "$NODE_DIR/install/unbound-kubeconfig"
probe_lease='{"apiVersion": "netendpoint.dev/v1alpha1", "kind": "NetworkEndpoint",
  "metadata": {"name": "e2e.10.250.0.254", "labels": {}},
  "spec": {"pool": "e2e", "ip": "10.250.0.254", "prefixLength": 24, "node": "'"$NODE_NAME"'",
           "containerID": "policy-probe", "ifName": "eth0"}}'
refused() {
  local out
  out=$("$tbin/kubectl" --kubeconfig "$NODE_DIR/install/unbound-kubeconfig" create --dry-run=server -f - \
    <<<"$probe_lease" 2>&1) || true
  [[ "$out" == *"bound to no node"* ]]
}
for _ in $(seq 1 100); do refused && break; sleep 0.2; done
refused || { echo "the admission policies did not take effect" >&2; exit 1; }
rm -f "$NODE_DIR/install/unbound-kubeconfig"
agent_finalizer=watcher.netendpoint.dev/rules
sed -e "s#@NODE_DIR@#$NODE_DIR#g" -e "s#@POOL_END@#$((9 + pool_size))#g" -e "s#@BRIDGE@#$NODE_BRIDGE#g" \
  -e "s#@FINALIZER@#$agent_finalizer#g" "$repo/tests/node/10-netendpoint.conflist" > "$NODE_DIR/install/10-netendpoint.conflist"
# The ConfigMap the installer DaemonSet mounts and the controller reads.
kc -n netendpoint-system create configmap netendpoint-net-conf \
  --from-file="$NODE_DIR/install/10-netendpoint.conflist" >/dev/null
# The installer's own identity, as its DaemonSet's projected token would give
# it: bound to this node (the admission policies refuse a token bound to none).
"$tbin/kube-testenv" sa-kubeconfig --dir "$NODE_DIR/api" --namespace netendpoint-system \
  --name netendpoint-installer --bound-node "$NODE_NAME" --token-out "$NODE_DIR/install/token"
NODE_NAME=$NODE_NAME "$rbin/netendpoint-install" --once \
  --plugin-src="$rbin/netendpoint" --cni-bin-dir="$NODE_DIR/cni/bin" \
  --kubeconfig-dir="$NODE_DIR/cni/conf/netendpoint.d" --token-src="$NODE_DIR/install/token" \
  --ca-src="$NODE_DIR/api/pki/ca.crt" --server="$server" \
  --net-conf="$NODE_DIR/install/10-netendpoint.conflist" --net-conf-dir="$NODE_DIR/cni/conf" \
  --mint-for=netendpoint-system/netendpoint-cni >"$NODE_DIR/logs/installer.log" 2>&1 ||
  { cat "$NODE_DIR/logs/installer.log" >&2; exit 1; }

"$tbin/kube-testenv" sa-kubeconfig --dir "$NODE_DIR/api" --namespace netendpoint-system \
  --name netendpoint-watcher-example --bound-node "$NODE_NAME" --out "$NODE_DIR/agent/kubeconfig"
setsid "$rbin/watcher-example" --node "$NODE_NAME" --finalizer "$agent_finalizer" \
  --kubeconfig "$NODE_DIR/agent/kubeconfig" --dataplane memory --event-log "$NODE_DIR/agent/events.jsonl" \
  --metrics-addr 127.0.0.1:0 >"$NODE_DIR/logs/agent.log" 2>&1 </dev/null &
echo $! > "$NODE_DIR/pids/agent"

"$tbin/kube-testenv" sa-kubeconfig --dir "$NODE_DIR/api" --namespace netendpoint-system \
  --name netendpoint-controller --out "$NODE_DIR/controller/kubeconfig"
setsid "$rbin/netendpoint-controller" --kubeconfig "$NODE_DIR/controller/kubeconfig" \
  --identity "$NODE_NAME" --pod-gone-grace "${NODE_POD_GONE_GRACE:-10s}" --listen 127.0.0.1:0 \
  >"$NODE_DIR/logs/controller.log" 2>&1 </dev/null &
echo $! > "$NODE_DIR/pids/controller"

# Pods need the namespace's ServiceAccount, which kube-controller-manager makes.
for _ in $(seq 1 120); do kc get serviceaccount default >/dev/null 2>&1 && break; sleep 0.5; done
kc get serviceaccount default >/dev/null || { tail -n 30 "$NODE_DIR/logs/kube-controller-manager.log" >&2; exit 1; }

say "waiting for node $NODE_NAME to be Ready"
kc wait --for=condition=Ready "node/$NODE_NAME" --timeout=120s >/dev/null ||
  { tail -n 30 "$NODE_DIR/logs/kubelet.log" >&2; exit 1; }
say "node up in $(( ($(now_ms) - started) / 1000 )) s; pool of $pool_size IPs (10.250.0.10-10.250.0.$((9 + pool_size)))"
