#!/usr/bin/env bash
# The real-node part of `make bench` (Spiderpool's ipam-performance method on
# one node): N pods of a Deployment to Running, then a rollout restart, then a
# scale to 0, with netendpoint and with host-local in the same run, in a pool
# of exactly N IPs and in one of 2N. Figures only, no assertions. Brings the
# node of tests/node up with netendpoint installed from `make images` (release
# binaries) and tears it down on exit. Needs root. Writes BENCHMARKS-node.md.
#
# BENCH_NODE_PODS: N (default 50, what 2 cores carry in a few minutes).
# BENCH_NODE_RUNS: runs of the four cases, interleaved (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/node/lib.sh
n=${BENCH_NODE_PODS:-50}
runs=${BENCH_NODE_RUNS:-2}
out=${BENCH_NODE_OUT:-BENCHMARKS-node.md}
timeout_s=900
trap 'tests/node/down.sh' EXIT
tests/node/build.sh
scripts/images.sh
node_lock
tests/node/up.sh
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
# The benchmark's network config sorts before the installer's (containerd
# uses the first), which the installer would rewrite from its ConfigMap.
conf=$NODE_DIR/cni/conf/05-bench.conflist
installed=$(cat "$NODE_DIR/install/10-netendpoint.conflist")

# The k-th address of 10.250.0.0/16.
ipn() { echo "10.250.$(($1 / 256)).$(($1 % 256))"; }
# Writes the node's conflist for IPAM $1 (netendpoint | host-local) with a
# pool of $2 IPs, under the network name $3.
write_conf() {
  local first=266 ranges
  ranges=$(jq -n --arg s "$(ipn $first)" --arg e "$(ipn $((first + $2 - 1)))" \
    '[[{subnet: "10.250.0.0/16", rangeStart: $s, rangeEnd: $e}]]')
  if [ "$1" = netendpoint ]; then
    # The default cost: no sticky IPs (one API call per ADD), warnings only in the log.
    jq --arg name "$3" --argjson r "$ranges" '.name = $name | .plugins[0].ipam.ranges = $r
      | .plugins[0].ipam.pool = "bench" | del(.plugins[0].ipam.sticky) | .plugins[0].ipam.log.level = "warn"' \
      <<<"$installed" > "$conf.tmp"
    # A network configured outside netendpoint-net-conf: its pool is added
    # to netendpoint-pools by hand (docs/install.md, "Configure a network"),
    # or the policy netendpoint-lease-range refuses every lease (10.250.1.0/24
    # holds the 2N addresses of either run; the node's own pool is 10.250.0.x).
    kc -n netendpoint-system patch configmap netendpoint-pools --type merge \
      -p '{"data":{"bench":"10.250.1.0/24"}}' >/dev/null
    # The policy reads its params through an informer: give it a moment.
    sleep 3
  else
    jq --arg name "$3" --argjson r "$ranges" --arg d "$NODE_DIR/cni/host-local" '.name = $name
      | .plugins[0].ipam = {type: "host-local", dataDir: $d, ranges: $r}' <<<"$installed" > "$conf.tmp"
  fi
  mv "$conf.tmp" "$conf"
  local end=$(( $(date +%s) + 30 ))
  until [ "$(crictl info | jq -r '[.cniconfig.Networks[]?.Config.Name] | last')" = "$3" ]; do
    [ "$(date +%s)" -lt "$end" ] || { echo "containerd did not load $3" >&2; exit 1; }
    sleep 0.2
  done
}
ready() { kc get deployment bench -o jsonpath='{.status.readyReplicas}'; }
failures() { kc get events --field-selector reason=FailedCreatePodSandBox -o json | jq '[.items[] | .count // 1] | add // 0'; }
wait_ready() { # replicas
  local end=$(( $(date +%s) + timeout_s ))
  until [ "$(ready)" = "$1" ] && [ "$(kc get pods -l app=bench -o name | wc -l)" = "$1" ]; do
    [ "$(date +%s)" -lt "$end" ] || { echo "bench did not reach $1 ready pods" >&2; exit 1; }
    sleep 0.5
  done
}
wait_empty() {
  local end=$(( $(date +%s) + timeout_s ))
  until [ "$(kc get pods -l app=bench -o name | wc -l)" = 0 ] && [ "$(kc get nep -l netendpoint.dev/pool=bench -o name | wc -l)" = 0 ]; do
    [ "$(date +%s)" -lt "$end" ] || { echo "bench pods or leases did not go away" >&2; exit 1; }
    sleep 0.5
  done
}
secs() { awk -v ms="$1" 'BEGIN { printf "%.1f s", ms / 1000 }'; }

kc apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: bench, namespace: default}
spec:
  replicas: 0
  selector: {matchLabels: {app: bench}}
  template:
    metadata: {labels: {app: bench}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 2
      containers:
      - {name: main, image: localhost/netendpoint-e2e/pause:1, imagePullPolicy: Never}
YAML

rows=()
for run in $(seq 1 "$runs"); do
for pool in "$n" $((2 * n)); do
  for ipam in netendpoint host-local; do
    name=bench-$ipam-$pool-$run
    say "== run $run: $ipam, pool of $pool IPs, $n pods"
    write_conf "$ipam" "$pool" "$name"
    f0=$(failures); start=$(now_ms)
    kc scale deployment bench --replicas="$n" >/dev/null
    wait_ready "$n"
    t_up=$(( $(now_ms) - start )); f1=$(failures)
    say "$n pods Running in $(secs "$t_up") ($((f1 - f0)) failed sandbox creations)"
    start=$(now_ms)
    kc rollout restart deployment bench >/dev/null
    kc rollout status deployment bench --timeout=${timeout_s}s >/dev/null
    wait_ready "$n"
    t_restart=$(( $(now_ms) - start )); f2=$(failures)
    say "rollout restart done in $(secs "$t_restart") ($((f2 - f1)) failed sandbox creations)"
    start=$(now_ms)
    kc scale deployment bench --replicas=0 >/dev/null
    wait_empty
    t_down=$(( $(now_ms) - start ))
    say "scaled to 0, every IP released, in $(secs "$t_down")"
    rows+=("| $run | $ipam | $pool | $(secs "$t_up") | $((f1 - f0)) | $(secs "$t_restart") | $((f2 - f1)) | $(secs "$t_down") |")
  done
done
done

{
  echo "# Benchmarks on a real node"
  echo
  echo "Generated by \`make bench\` (scripts/bench-node.sh) in one run on one machine ($(nproc) cores), on the"
  echo "single node of tests/node: kubelet, containerd and runc, kube-controller-manager and kube-scheduler, and the"
  echo "test API server, all on this machine. The method of Spiderpool's ipam-performance page, scaled to one"
  echo "node: a Deployment of N = $n pods (the pause binary) is scaled from 0 to N, restarted with"
  echo "\`kubectl rollout restart\` (default strategy: 25 % surge, 25 % unavailable), and scaled to 0; each"
  echo "time runs until every pod is Running (or gone, and for netendpoint every lease released)."
  echo "netendpoint runs with its default cost (no sticky IPs, one API call per ADD), the agent watcher-example"
  echo "acknowledging every release, and \`waitForRelease: 20s\`. host-local frees an IP at DEL. A pool of N IPs"
  echo "has no room for the surge pods of a rollout. Figures, not assertions; load average when the run began"
  echo "(1, 5, 15 min): $load_at_start. The four cases run interleaved, $runs times."
  echo
  echo "| run | IPAM | pool (IPs) | $n pods to Running | failed sandbox creations | rollout restart | failed sandbox creations | scale to 0 |"
  echo "|---:|---|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
} > "$out"
echo
cat "$out"
