//! The plugin binary against the real API server, fed a malformed CNI
//! environment: an oversized or malformed CNI_CONTAINERID or CNI_IFNAME is
//! refused with code 4 before any API call, the error does not echo the
//! value, and no NetworkEndpoint is created.

#![allow(clippy::unwrap_used)]

use netendpoint_tests::{self as h, invoke, ipam};
use serde_json::{Value, json};

fn conf(pool: &str) -> Value {
    json!({"cniVersion": "1.1.0", "name": "net", "ipam": ipam(pool, json!([[{"subnet": "10.79.0.0/28"}]]))})
}

/// Asserts that `out` is a CNI error with code 4 about `var`, short enough
/// not to carry a 70,000-character value.
fn assert_invalid_env(what: &str, (ok, out, err): (bool, Value, String), var: &str) {
    assert!(!ok, "{what}: must fail: {out} {err}");
    assert_eq!(out["code"], 4, "{what}: {out}");
    let text = out.to_string();
    assert!(text.contains(var), "{what}: the error names {var}: {text}");
    assert!(text.len() < 1_000, "{what}: the error echoes the value ({} bytes): {text:.300}", text.len());
    assert!(err.len() < 1_000, "{what}: stderr echoes the value ({} bytes)", err.len());
}

#[tokio::test]
async fn malformed_container_id_or_ifname_is_code_4_and_leases_nothing() {
    let pool = h::unique("input");
    let conf = conf(&pool);
    let ctr = h::unique("ctr-input");
    let huge = "a".repeat(70_000);
    let cases: [(&str, &str, &str, &str); 3] = [
        ("70,000-character container ID", &huge, "eth0", "CNI_CONTAINERID"),
        ("70,000-character ifname", &ctr, &huge, "CNI_IFNAME"),
        ("ifname eth0/x", &ctr, "eth0/x", "CNI_IFNAME"),
    ];
    for (what, cid, ifname, var) in cases {
        let env = [("CNI_CONTAINERID", cid), ("CNI_IFNAME", ifname)];
        assert_invalid_env(what, invoke("ADD", &conf, &env), var);
        // Refused before any API call: an unusable kubeconfig changes nothing.
        let mut offline = conf.clone();
        offline["ipam"]["kubeconfig"] = json!("/nonexistent/kubeconfig");
        assert_invalid_env(&format!("{what}, no kubeconfig"), invoke("ADD", &offline, &env), var);
        assert!(h::pool_endpoints(&pool).await.is_empty(), "{what}: a lease was created");
    }

    // Control: the same pool and container with a valid ifname does lease,
    // so the empty listings above mean something.
    let (ok, out, err) = invoke("ADD", &conf, &[("CNI_CONTAINERID", &ctr), ("CNI_IFNAME", "net1")]);
    assert!(ok, "valid ADD: {out} {err}");
    assert_eq!(h::pool_endpoints(&pool).await.len(), 1);
    // A malformed DEL is refused too, and leaves the lease alone.
    let del = invoke("DEL", &conf, &[("CNI_CONTAINERID", &ctr), ("CNI_IFNAME", "net1/x")]);
    assert_invalid_env("DEL with ifname net1/x", del, "CNI_IFNAME");
    assert_eq!(h::pool_endpoints(&pool).await.len(), 1, "a malformed DEL released a lease");
    let (ok, out, err) = invoke("DEL", &conf, &[("CNI_CONTAINERID", &ctr), ("CNI_IFNAME", "net1")]);
    assert!(ok, "valid DEL: {out} {err}");
    h::cleanup_pool(&pool).await;
}
