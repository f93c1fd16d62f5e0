//! Network configs for the plugin, pointing at the test API server, on a
//! registered node.

use crate::env::kubeconfig;
use crate::fixtures::ensure_node;

/// A netendpoint IPAM section for `pool` with `ranges`, pointing at the test server.
pub fn ipam(pool: &str, ranges: serde_json::Value) -> serde_json::Value {
    ensure_node("node-a");
    serde_json::json!({
        "type": "netendpoint",
        "pool": pool,
        "ranges": ranges,
        "kubeconfig": kubeconfig(),
        "nodeName": "node-a",
        "dataDir": std::env::temp_dir().join("netendpoint-test-data"),
        "waitForRelease": "3s",
    })
}

/// A network `pool` of plugin type netendpoint (spec 1.1.0) whose `ipam`
/// is [`ipam`] with the keys of `extra` set over it. A `nodeName` in `extra`
/// is registered as a Node.
pub fn net_conf(pool: &str, ranges: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    let mut ipam = ipam(pool, ranges);
    for (k, v) in extra.as_object().into_iter().flatten() {
        ipam[k] = v.clone();
    }
    if let Some(node) = extra.get("nodeName").and_then(serde_json::Value::as_str) {
        ensure_node(node);
    }
    serde_json::json!({"cniVersion": "1.1.0", "name": pool, "type": "netendpoint", "ipam": ipam})
}

/// A network config for `pool` (one range, e.g. `{"subnet": "10.1.0.0/29"}`)
/// on `node` holding `finalizers`, waiting up to `wait_for_release` for a
/// release in a full pool.
pub fn agent_net_conf(
    pool: &str,
    range: serde_json::Value,
    node: &str,
    finalizers: &[&str],
    wait_for_release: &str,
) -> serde_json::Value {
    let mut ipam = ipam(pool, serde_json::json!([[range]]));
    ensure_node(node);
    ipam["nodeName"] = node.into();
    ipam["finalizers"] = serde_json::json!(finalizers);
    ipam["waitForRelease"] = wait_for_release.into();
    ipam["dataDir"] = std::env::temp_dir().join("netendpoint-test-data").join(node).display().to_string().into();
    serde_json::json!({"cniVersion": "1.0.0", "name": "net", "ipam": ipam})
}
