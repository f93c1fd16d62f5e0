#!/bin/sh
# watcher-example under the agent conformance contract (README.md,
# "Conformance"): the contract's environment mapped to the agent's flags,
# with the in-memory dataplane kept in the contract's directory. Extra
# arguments are passed on (e.g. --naive-ip-keyed --no-finalizer, the broken
# agent the suite must fail). WATCHER_EXAMPLE_BIN overrides the binary.
set -eu
bin=${WATCHER_EXAMPLE_BIN:-watcher-example}
set -- --node "$NETENDPOINT_NODE" --metrics-addr "$NETENDPOINT_AGENT_ADDR" --serve-rules \
  --dataplane memory --state-file "$NETENDPOINT_AGENT_DIR/state.json" \
  --event-log "$NETENDPOINT_AGENT_DIR/events.jsonl" \
  --teardown-delay "${NETENDPOINT_AGENT_TEARDOWN_DELAY:-0ms}" ${KUBECONFIG:+--kubeconfig "$KUBECONFIG"} "$@"
case " $* " in
  *" --no-finalizer "*) ;;
  *) if [ -n "${NETENDPOINT_FINALIZER:-}" ]; then set -- "$@" --finalizer "$NETENDPOINT_FINALIZER"; else set -- "$@" --no-finalizer; fi ;;
esac
exec "$bin" "$@"
