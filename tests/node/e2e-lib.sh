# Helpers of the real-node scenarios (scripts/e2e.sh, scripts/e2e-upgrade.sh):
# workloads, waits, leases, the agent's table changes. Sourced after
# tests/node/lib.sh, by a script that defines fail().
events=$NODE_DIR/agent-events.jsonl

# The agent's table changes, read from the logs of its Pods (kept by up.sh
# past each Pod's deletion, in the order the Pods started) into JSON lines
# {seq, kind, ip, uid, name, ts, removed_uid, replaced_uid}: the agent logs
# each change as it makes it, inside its table's lock. Rewrites $events.
agent_events() {
  local logs=("$NODE_DIR"/logs/pods/*_netendpoint-watcher-example-*_watcher_*.log)
  [ -f "${logs[0]}" ] || { : > "$events"; return; }
  cat "${logs[@]}" | awk '
    function field(k) { return (k in f) ? f[k] : "" }
    {
      kind = ""; prune = 0
      if ((i = index($0, ": rule installed ")) > 0) { kind = "add"; rest = substr($0, i + 17) }
      else if ((i = index($0, ": rule replaced ")) > 0) { kind = "add"; rest = substr($0, i + 16) }
      else if ((i = index($0, ": rule removed ")) > 0) { kind = "remove"; rest = substr($0, i + 15) }
      else if ((i = index($0, ": stale rule removed: its endpoint is gone ")) > 0) { kind = "remove"; prune = 1; rest = substr($0, i + 43) }
      if (kind == "") next
      split("", f); n = split(rest, kv, " ")
      for (j = 1; j <= n; j++) { p = index(kv[j], "="); if (p > 0) f[substr(kv[j], 1, p - 1)] = substr(kv[j], p + 1) }
      if (prune) f["removed_uid"] = f["uid"]
      printf "{\"seq\":%d,\"kind\":\"%s\",\"ip\":\"%s\",\"uid\":\"%s\",\"name\":\"%s\",\"ts\":\"%s\"", seq++, kind, field("ip"), field("uid"), field("endpoint"), $1
      if (field("removed_uid") != "") printf ",\"removed_uid\":\"%s\"", field("removed_uid")
      if (field("replaced_uid") != "") printf ",\"replaced_uid\":\"%s\"", field("replaced_uid")
      printf "}\n"
    }' > "$events"
}
# The lines of the netendpoint-system Pods whose name starts with $1 (every
# Pod that ever ran, in order).
pod_logs() { cat "$NODE_DIR"/logs/pods/*_"$1"*.log 2>/dev/null; }

# Workloads run the pause binary; the pool is the only limit.
deployment() { # name replicas
  kc apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1, namespace: default}
spec:
  replicas: $2
  selector: {matchLabels: {app: $1}}
  # A full pool has no IP for a surge pod: an update replaces pods one by one.
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 0, maxUnavailable: 1}}
  template:
    metadata: {labels: {app: $1}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 2
      containers:
      - {name: main, image: localhost/netendpoint-e2e/pause:1, imagePullPolicy: Never}
YAML
}
statefulset() { # name replicas
  kc apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: $1, namespace: default}
spec:
  replicas: $2
  serviceName: $1
  selector: {matchLabels: {app: $1}}
  template:
    metadata: {labels: {app: $1}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 2
      containers:
      - {name: main, image: localhost/netendpoint-e2e/pause:1, imagePullPolicy: Never}
YAML
}
bare_pod() { # name [grace_s [arg]]: a Pod bound to this node, no controller
  kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  nodeName: $NODE_NAME
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: ${2:-2}
  containers:
  - {name: main, image: localhost/netendpoint-e2e/pause:1, imagePullPolicy: Never, args: [${3:-}]}
YAML
}
# A bare pod made and Running, with its lease: prints "ip lease uid". Call it
# in a command substitution, so that its fail ends the script.
leased_bare_pod() { # name [grace_s [arg]]
  local ip lease uid
  bare_pod "$@"
  wait_until 120 running "$1" || fail "$1 not Running"
  ip=$(pod_ip "$1")
  read -r lease uid _ < <(lease_of "$ip")
  [ -n "$uid" ] || fail "no lease for $1's IP $ip"
  echo "$ip $lease $uid"
}
# "name uid ip" of each Running, not terminating pod with label app=$1.
running_pods() {
  kc get pods -l "app=$1" -o json | jq -r '.items[] | select(.metadata.deletionTimestamp == null
    and .status.phase == "Running" and .status.podIP != null) | "\(.metadata.name) \(.metadata.uid) \(.status.podIP)"'
}
pod_ip() { kc get pod "$1" -o jsonpath='{.status.podIP}'; }
pod_uid() { kc get pod "$1" -o jsonpath='{.metadata.uid}' 2>/dev/null; }
running() { [ "$(kc get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null)" = Running ]; }
wait_until() { # timeout_s command... : polls every 0.2 s
  local end=$(( $(date +%s) + $1 )); shift
  until "$@"; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.2; done
}
# The endpoint (the lease of an attachment) holding an IP, not a sticky
# hold (label netendpoint.dev/role=hold), which only keeps the IP's name for
# a StatefulSet Pod's next incarnation.
lease_of() { # ip -> "name uid deleting"
  kc get nep -l 'netendpoint.dev/role!=hold' -o json | jq -r --arg ip "$1" \
    '.items[] | select(.spec.ip == $ip) | "\(.metadata.name) \(.metadata.uid) \(.metadata.deletionTimestamp != null)"'
}
hold_of() { # ip -> name of the sticky hold of that IP, if any
  kc get nep -l netendpoint.dev/role=hold -o json | jq -r --arg ip "$1" '.items[] | select(.spec.ip == $ip) | .metadata.name'
}
# The leases of the scenarios' Pods (namespace default); the controller's Pods hold the others.
lease_count() { kc get nep -l netendpoint.dev/pod-namespace=default -o json | jq '.items | length'; }
no_leases() { [ "$(lease_count)" = 0 ]; }
live_leases() { kc get nep -o json | jq '[.items[] | select(.metadata.deletionTimestamp == null)] | length'; }
sandbox_ready() { # pod -> 0 when a READY sandbox of that pod exists
  [ -n "$(crictl pods --name "^$1\$" --state ready -q 2>/dev/null)" ]
}
# The agent saw DELETED(old lease UID) before ADDED(new lease UID): prints
# "seq_rm seq_add" or fails.
agent_order() { # old_uid new_uid what
  local rm add
  agent_events
  rm=$(jq -r --arg u "$1" 'select(.kind == "remove" and .uid == $u) | .seq' "$events" | head -n1)
  add=$(jq -r --arg u "$2" 'select(.kind == "add" and .uid == $u) | .seq' "$events" | head -n1)
  [ -n "$rm" ] || fail "$3: the agent's log has no DELETED for the old lease ($1)"
  [ -n "$add" ] || fail "$3: the agent's log has no ADDED for the new lease ($2)"
  [ "$rm" -lt "$add" ] || fail "$3: the agent saw ADDED(new) #$add before DELETED(old) #$rm"
  echo "$rm $add"
}
# A remove that took away a rule of another lease than the one removed.
lost_rules() { agent_events; jq -s '[.[] | select(.kind == "remove" and .removed_uid != null and .removed_uid != .uid)] | length' "$events"; }
# IPs for which the agent saw ADDED twice with no DELETED in between.
double_adds() {
  agent_events
  jq -s '[group_by(.ip)[] | sort_by(.seq) | map(.kind) | . as $k | range(1; length) | select($k[.] == "add" and $k[. - 1] == "add")] | length' "$events"
}
# The controller: the leader's identity (its Pod's name), and the Pods of
# the Deployment's current template.
leader() { kns get lease netendpoint-controller -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
current_controller_pods() {
  local rev hash
  rev=$(kns get deployment netendpoint-controller -o jsonpath='{.metadata.annotations.deployment\.kubernetes\.io/revision}')
  hash=$(kns get rs -l app.kubernetes.io/name=netendpoint-controller -o json | jq -r --arg r "$rev" \
    '.items[] | select(.metadata.annotations["deployment.kubernetes.io/revision"] == $r) | .metadata.labels["pod-template-hash"]')
  kns get pods -l "pod-template-hash=$hash" -o json | jq -r '.items[] | select(.metadata.deletionTimestamp == null) | .metadata.name'
}
new_leader() { local l; l=$(leader); [ -n "$l" ] && current_controller_pods | grep -qx "$l"; }
sandbox_failures() { # pod... -> FailedCreatePodSandBox events of those pods
  local n=0 p c
  for p in "$@"; do
    c=$(kc get events --field-selector "involvedObject.name=$p,reason=FailedCreatePodSandBox" -o json | jq '[.items[] | .count // 1] | add // 0')
    n=$((n + c))
  done
  echo "$n"
}
net_ready() { crictl info | jq -r '.status.conditions[] | select(.type == "NetworkReady") | .status'; }
node_ready() { kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null; }
wait_for() { # timeout_s expected command... : polls every 0.5 s until it prints expected
  local end=$(( $(date +%s) + $1 )) want=$2; shift 2
  until [ "$("$@")" = "$want" ]; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.5; done
}
# The current agent's table, replayed from its own log: "ip uid" lines, sorted.
agent_table() {
  local last
  last=$(ls "$NODE_DIR"/logs/pods/*_netendpoint-watcher-example-*_watcher_*.log | tail -n1)
  awk '
  (i = index($0, ": rule installed ")) || (i = index($0, ": rule replaced ")) { split(substr($0, i), a, " ");
    for (k in a) { if (a[k] ~ /^ip=/) ip = substr(a[k], 4); if (a[k] ~ /^uid=/) u = substr(a[k], 5) } r[ip] = u; next }
  (i = index($0, ": rule removed ")) || (i = index($0, ": stale rule removed")) { split(substr($0, i), a, " ");
    for (k in a) if (a[k] ~ /^ip=/) ip = substr(a[k], 4); delete r[ip] }
  END { for (ip in r) print ip, r[ip] }' "$last" | sort
}
# Every lease as the agent's table should hold it: "ip uid" lines, sorted.
leases_table() { kc get nep -o json | jq -r '.items[] | "\(.spec.ip) \(.metadata.uid)"' | sort; }
# The name of the network containerd uses for new sandboxes (its last: the
# first is loopback).
cni_net() { crictl info | jq -r '[.cniconfig.Networks[]?.Config.Name] | last'; }
# The Events of that reason (in namespace $2, or all), counted with their
# repetitions.
events_of() { # reason [namespace]
  local ns=(-A)
  [ -z "${2:-}" ] || ns=(-n "$2")
  kc get events "${ns[@]}" --field-selector "reason=$1" -o json | jq '[.items[] | [.series.count // 0, .count // 0, 1] | max] | add // 0'
}
# A metric of the controller (its /metrics on the node's loopback, host
# ports) for a pool: 0 when it has none yet.
controller_metric() { # name pool
  curl -sf --max-time 2 http://127.0.0.1:9466/metrics |
    awk -v m="$1" -v l="pool=\"$2\"" '$1 == m "{" l "}" { v = $2 } END { print v + 0 }'
}
# sampler FILE command...: "ms output" lines every 0.25 s until FILE.stop
# exists, or the script that started it ended (a failure).
sampler() {
  local f=$1; shift
  while [ ! -e "$f.stop" ] && kill -0 $$ 2>/dev/null; do echo "$(now_ms) $("$@" 2>/dev/null | tr '\n' ' ')" >> "$f"; sleep 0.25; done
}
