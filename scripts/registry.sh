#!/usr/bin/env bash
# registry.sh start DIR | stop DIR | addr DIR
#
# A local OCI registry for the release rig: distribution's registry server
# (tests/bin/registry, built from its Go module by scripts/release-tools.sh),
# listening on a loopback address over plain HTTP, its blobs kept in DIR.
#   start  starts it (stopping one left in DIR first), waits until /v2/
#          answers, and prints its address (host:port); REGISTRY_ADDR
#          chooses it (default 127.0.0.1:5117)
#   stop   stops it; its contents stay in DIR until DIR is removed
#   addr   prints the address of the one running from DIR
# Deletes are enabled, so a test can overwrite a tag (a tampered image or
# chart). distribution keeps no referrers index: oras attaches SBOMs and
# signatures with the OCI referrers tag scheme (sha256-<digest>), which every
# OCI client reads.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-} dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2p' "$0" >&2; exit 2; }
mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
bin=${REGISTRY_BIN:-$PWD/tests/bin/registry}

stop() {
  local pid
  pid=$(cat "$dir/pid" 2>/dev/null) || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/pid"
}

case "$cmd" in
  start)
    [ -x "$bin" ] || { echo "registry: $bin missing (scripts/release-tools.sh builds it)" >&2; exit 1; }
    stop
    addr=${REGISTRY_ADDR:-127.0.0.1:5117}
    case "$addr" in
      127.*:*|localhost:*|\[::1\]:*) ;;
      *) echo "registry: REGISTRY_ADDR=$addr: a loopback host:port only (it serves plain HTTP, with no authentication)" >&2; exit 2 ;;
    esac
    if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then
      echo "registry: $addr is already taken by another process; choose REGISTRY_ADDR" >&2; exit 1
    fi
    mkdir -p "$dir/data"
    cat > "$dir/config.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: false
storage:
  delete:
    enabled: true
  filesystem:
    rootdirectory: $dir/data
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: $addr
EOF
    # No OpenTelemetry exporter: there is no collector to send traces to.
    OTEL_TRACES_EXPORTER=none setsid "$bin" serve "$dir/config.yml" >"$dir/registry.log" 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    echo "$addr" > "$dir/addr"
    for _ in $(seq 1 100); do
      if curl -fs -o /dev/null "http://$addr/v2/"; then echo "$addr"; exit 0; fi
      kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
      sleep 0.1
    done
    echo "registry: not answering on http://$addr/v2/; its log:" >&2
    tail -n 20 "$dir/registry.log" >&2
    stop; exit 1
    ;;
  stop) stop ;;
  addr) cat "$dir/addr" ;;
  *) sed -n '2p' "$0" >&2; exit 2 ;;
esac
