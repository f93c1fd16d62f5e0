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

/// `ipam.kubeconfig`, `ipam.log.file` and `ipam.dataDir` are not followed
/// through a symbolic link planted as their last component: the kubeconfig
/// is refused with code 104 naming the link, nothing is appended to the
/// link's target, and a linked dataDir is left unused (the ADD still works).
#[tokio::test]
async fn planted_symlinks_in_config_paths_are_not_followed() {
    let pool = h::unique("links");
    let tmp = h::TempDir::new("links");
    let victim = tmp.join("victim");
    std::fs::write(&victim, "untouched\n").unwrap();
    let log_link = tmp.join("plugin.log");
    std::os::unix::fs::symlink(&victim, &log_link).unwrap();
    let kc_link = tmp.join("kubeconfig");
    std::os::unix::fs::symlink(h::kubeconfig(), &kc_link).unwrap();
    let real_data = tmp.join("real-data");
    std::fs::create_dir_all(&real_data).unwrap();
    let data_link = tmp.join("data");
    std::os::unix::fs::symlink(&real_data, &data_link).unwrap();

    let mut c = conf(&pool);
    c["ipam"]["kubeconfig"] = json!(kc_link);
    c["ipam"]["log"] = json!({"file": log_link, "level": "debug"});
    let (ok, out, _) = invoke("ADD", &c, &h::attach_env("link-1"));
    assert!(!ok && out["code"] == 104, "{out}");
    assert!(out.to_string().contains("symbolic link"), "{out}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n", "nothing logged through the link");

    // A linked dataDir: the ADD works and writes nothing through the link.
    let mut c = conf(&pool);
    c["ipam"]["dataDir"] = json!(data_link);
    let (ok, out, err) = invoke("ADD", &c, &h::attach_env("link-2"));
    assert!(ok, "{out} {err}");
    assert_eq!(std::fs::read_dir(&real_data).unwrap().count(), 0, "no state written through the link");
    assert!(!h::pool_endpoints(&pool).await.is_empty());
    h::cleanup_pool(&pool).await;
}
