//! Static IPs against the real API server: the `ips` capability through
//! cnitool (libcni) and the bridge plugin, CNI_ARGS `IP=`, and the Pod
//! annotation read from a real Pod object. Error codes are read from the
//! plugin invoked directly, with the stdin libcni would build.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use netendpoint_crd::endpoint_name;
use netendpoint_tests::{
    self as h, Bridge, NetDir, Netns, invoke, ip_of, ipam, lease_at as endpoint, net_conf as conf, pod_env as env,
    stderr,
};
use serde_json::{Value, json};
use tokio::sync::RwLock;

const AGENT: &str = "test.netendpoint.dev/agent";

/// Tests that count API requests at the server take this exclusively; every
/// other test of this file holds it shared, so no request of theirs is counted.
static SERVER: RwLock<()> = RwLock::const_new(());

/// The plugin alone as a conflist for cnitool, declaring the `ips` capability.
fn conflist(pool: &str, ranges: Value, extra: Value) -> Value {
    let mut plugin = conf(pool, ranges, extra);
    plugin.as_object_mut().unwrap().remove("cniVersion");
    plugin.as_object_mut().unwrap().remove("name");
    plugin["capabilities"] = json!({"ips": true});
    json!({"cniVersion": "1.1.0", "name": pool, "plugins": [plugin]})
}

/// `c` as libcni passes it when the runtime sends the `ips` capability.
fn with_runtime_ips(c: &Value, ips: &[&str]) -> Value {
    let mut c = c.clone();
    c["runtimeConfig"] = json!({"ips": ips});
    c
}

#[tokio::test]
async fn the_ips_capability_through_bridge_puts_the_requested_addresses_in_the_netns() {
    let _shared = SERVER.read().await;
    let pool = h::unique("st-cap");
    let bridge = Bridge::new("ns");
    let netns = Netns::new("ne-st");
    let ranges = json!([[{"subnet": "10.81.0.0/24"}], [{"subnet": "fd00:81::/64"}]]);
    let net = json!({
        "cniVersion": "1.1.0",
        "name": pool,
        "plugins": [{
            "type": "bridge",
            "bridge": bridge.name,
            "isGateway": true,
            "capabilities": {"ips": true},
            "ipam": ipam(&pool, ranges),
        }],
    });
    let dir = NetDir::new(&net);
    let cap = [("CAP_ARGS", r#"{"ips": ["10.81.0.77/24", "fd00:81::77/64"]}"#)];
    let out = dir.cnitool("add", &netns, &cap);
    assert!(out.status.success(), "cnitool add: {}", stderr(&out));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (ip_of(&result, 0).to_string(), ip_of(&result, 1).to_string()),
        ("10.81.0.77".into(), "fd00:81::77".into())
    );
    let addrs = netns.exec(&["ip", "-o", "addr", "show", "dev", "eth0"]);
    assert!(addrs.contains("10.81.0.77/24") && addrs.contains("fd00:81::77/64"), "{addrs}");
    for ip in ["10.81.0.77", "fd00:81::77"] {
        let ep = endpoint(&pool, ip).await.unwrap_or_else(|| panic!("no lease of {ip}"));
        assert_eq!(ep.spec.static_ip, Some(true), "{ip}");
        assert!(ep.spec.container_id.starts_with("cnitool-"));
    }
    // `kubectl get -o wide` shows the mark.
    let name = endpoint_name(&pool, "10.81.0.77".parse().unwrap());
    let wide = String::from_utf8(h::kubectl(&["get", "nep", &name, "-o", "wide"]).stdout).unwrap();
    let cell = h::table_cell(&wide, 0, "STATIC").unwrap_or_else(|| panic!("no STATIC column: {wide}"));
    assert_eq!(cell, "true", "{wide}");

    let describe = String::from_utf8(h::kubectl(&["describe", "nep", &name]).stdout).unwrap();
    assert!(
        describe.lines().any(|l| l.split_whitespace().eq(["Static:", "true"])),
        "kubectl describe lacks the mark: {describe}"
    );
    let out = dir.cnitool("del", &netns, &cap);
    assert!(out.status.success(), "cnitool del: {}", stderr(&out));
    assert!(h::pool_endpoints(&pool).await.is_empty());
}

#[tokio::test]
async fn cni_args_ip_of_a_live_lease_is_refused_naming_its_holder() {
    let _shared = SERVER.read().await;
    let pool = h::unique("st-taken");
    let dir = NetDir::new(&conflist(&pool, json!([[{"subnet": "10.82.0.0/24"}]]), json!({})));
    let (first, second) = (Netns::new("ne-st1"), Netns::new("ne-st2"));
    let holder_args = [("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=db-0;IP=10.82.0.5")];
    let out = dir.cnitool("add", &first, &holder_args);
    assert!(out.status.success(), "{}", stderr(&out));
    let holder = endpoint(&pool, "10.82.0.5").await.unwrap();
    assert_eq!(holder.spec.static_ip, Some(true));

    let out = dir.cnitool(
        "add",
        &second,
        &[("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=db-1;IP=10.82.0.5")],
    );
    assert!(!out.status.success());
    let msg = stderr(&out);
    for part in ["10.82.0.5", "pod shop/db-0", "node node-a", &holder.spec.container_id, "interface eth0"] {
        assert!(msg.contains(part), "{part:?} missing from {msg}");
    }
    let (ok, out, _) =
        invoke("ADD", &conf(&pool, json!([[{"subnet": "10.82.0.0/24"}]]), json!({})), &env("other", "IP=10.82.0.5"));
    assert!(!ok);
    assert_eq!(out["code"], 108, "{out}");
    let after = endpoint(&pool, "10.82.0.5").await.unwrap();
    assert_eq!(
        (after.metadata.uid, after.metadata.deletion_timestamp),
        (holder.metadata.uid, None),
        "the holder keeps it"
    );
    assert_eq!(h::pool_endpoints(&pool).await.len(), 1, "the refused ADDs left nothing");
    // A repeated ADD of the holder is idempotent.
    let out = dir.cnitool("add", &first, &holder_args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(ip_of(&serde_json::from_slice(&out.stdout).unwrap(), 0).to_string(), "10.82.0.5");
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn a_releasing_static_ip_is_never_forced_and_is_given_once_the_agent_acks() {
    let _shared = SERVER.read().await;
    let pool = h::unique("st-rel");
    let ranges = json!([[{"subnet": "10.83.0.0/24"}]]);
    // The release outlives forceReleaseAfter: a dynamic ADD in a full pool could force it; a static one never does.
    let quick =
        conf(&pool, ranges.clone(), json!({"finalizers": [AGENT], "forceReleaseAfter": "1s", "waitForRelease": "2s"}));
    let patient =
        conf(&pool, ranges, json!({"finalizers": [AGENT], "forceReleaseAfter": "1s", "waitForRelease": "30s"}));
    let (ok, _, e) = invoke("ADD", &quick, &env("st-old", "K8S_POD_NAMESPACE=db;K8S_POD_NAME=pg-0;IP=10.83.0.9"));
    assert!(ok, "{e}");
    let (ok, _, e) = invoke("DEL", &quick, &env("st-old", ""));
    assert!(ok, "{e}");
    let name = endpoint_name(&pool, "10.83.0.9".parse().unwrap());
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let (ok, out, _) = invoke("ADD", &quick, &env("st-new", "IP=10.83.0.9"));
    assert!(!ok);
    assert_eq!(out["code"], 109, "{out}");
    let msg = out["msg"].as_str().unwrap();
    assert!(msg.contains("pod db/pg-0") && msg.contains(AGENT) && msg.contains("forced nothing"), "{msg}");
    let held = endpoint(&pool, "10.83.0.9").await.unwrap();
    assert_eq!(held.metadata.finalizers.as_deref(), Some(&[AGENT.to_string()][..]), "the finalizer is kept");
    assert_eq!(held.spec.container_id, "st-old");

    let waiter = std::thread::spawn(move || invoke("ADD", &patient, &env("st-new", "IP=10.83.0.9")));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!waiter.is_finished(), "the ADD waits while the finalizer holds");
    assert_eq!(endpoint(&pool, "10.83.0.9").await.unwrap().spec.container_id, "st-old");
    h::remove_finalizer(&name, AGENT).await;
    let (ok, r, e) = waiter.join().unwrap();
    assert!(ok, "{e}");
    assert_eq!(ip_of(&r, 0).to_string(), "10.83.0.9");
    let ep = endpoint(&pool, "10.83.0.9").await.unwrap();
    assert_eq!((ep.spec.container_id.as_str(), ep.spec.static_ip), ("st-new", Some(true)));
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn out_of_range_excluded_and_a_second_address_of_a_family_are_code_7_and_write_nothing() {
    let _shared = SERVER.read().await;
    let pool = h::unique("st-bad");
    let ranges = json!([[{"subnet": "10.85.0.0/24", "rangeStart": "10.85.0.10", "rangeEnd": "10.85.0.99"}], [{"subnet": "fd00:85::/120"}]]);
    let c = conf(&pool, ranges.clone(), json!({"exclude": ["10.85.0.20/30"]}));
    let cases: &[(Value, &str, &str, &str)] = &[
        (with_runtime_ips(&c, &["10.85.0.100/24"]), "", "10.85.0.100", "outside every range"),
        (with_runtime_ips(&c, &["10.86.0.1"]), "", "10.86.0.1", "outside every range"),
        (c.clone(), "IP=10.85.0.21", "10.85.0.21", "excluded by ipam.exclude 10.85.0.20/30"),
        (c.clone(), "IP=10.85.0.11,10.85.0.12", "10.85.0.12", "at most one IPv4"),
        (with_runtime_ips(&c, &["fd00:85::5", "fd00:85::6"]), "", "fd00:85::6", "at most one IPv6"),
    ];
    for (stdin, args, ip, why) in cases {
        let (ok, out, _) = invoke("ADD", stdin, &env("st-bad", args));
        assert!(!ok);
        assert_eq!(out["code"], 7, "{ip}: {out}");
        let msg = out["msg"].as_str().unwrap();
        assert!(msg.contains(&format!("requested IP {ip} ")) && msg.contains(why), "{msg}");
    }
    // Malformed CNI_ARGS IP= is the environment's fault: code 4.
    let (ok, out, _) = invoke("ADD", &c, &env("st-bad", "IP=10.85.0"));
    assert!(!ok);
    assert_eq!(out["code"], 4, "{out}");
    // Through libcni: the same refusal.
    let dir = NetDir::new(&conflist(&pool, ranges, json!({"exclude": ["10.85.0.20/30"]})));
    let netns = Netns::new("ne-stb");
    let out = dir.cnitool("add", &netns, &[("CAP_ARGS", r#"{"ips": ["10.85.0.22/24"]}"#)]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("excluded by ipam.exclude"), "{}", stderr(&out));
    assert!(h::pool_endpoints(&pool).await.is_empty(), "nothing was written");
}

#[tokio::test]
async fn dual_stack_takes_one_address_per_family_and_the_allocator_serves_a_family_not_asked_for() {
    let _shared = SERVER.read().await;
    let pool = h::unique("st-dual");
    let ranges = json!([[{"subnet": "10.87.0.0/24"}], [{"subnet": "fd00:87::/120"}]]);
    let dir = NetDir::new(&conflist(&pool, ranges, json!({})));
    let (a, b) = (Netns::new("ne-sda"), Netns::new("ne-sdb"));
    let out = dir.cnitool("add", &a, &[("CAP_ARGS", r#"{"ips": ["fd00:87::44/120", "10.87.0.44/24"]}"#)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((ip_of(&r, 0).to_string(), ip_of(&r, 1).to_string()), ("10.87.0.44".into(), "fd00:87::44".into()));
    // Only IPv6 asked (CNI_ARGS): IPv4 comes from the allocator, unmarked.
    let out = dir.cnitool("add", &b, &[("CNI_ARGS", "IP=fd00:87::45")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let v4 = ip_of(&r, 0);
    assert_eq!(ip_of(&r, 1).to_string(), "fd00:87::45");
    assert_eq!(endpoint(&pool, &v4.to_string()).await.unwrap().spec.static_ip, None);
    assert_eq!(endpoint(&pool, "fd00:87::45").await.unwrap().spec.static_ip, Some(true));
    // The capability wins over CNI_ARGS when both ask.
    let c = Netns::new("ne-sdc");
    let out = dir.cnitool("add", &c, &[("CAP_ARGS", r#"{"ips": ["10.87.0.46"]}"#), ("CNI_ARGS", "IP=10.87.0.47")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(ip_of(&serde_json::from_slice(&out.stdout).unwrap(), 0).to_string(), "10.87.0.46");
    assert!(endpoint(&pool, "10.87.0.47").await.is_none());
    for ns in [&a, &b, &c] {
        let out = dir.cnitool("del", ns, &[]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert!(h::pool_endpoints(&pool).await.is_empty());
}

/// Creates Pod `name` in `default` with `annotations`.
async fn create_pod(name: &str, annotations: Value) -> Pod {
    h::PodFixture::new(name).meta(json!({"annotations": annotations})).create().await
}

fn pod_args(pod: &Pod) -> String {
    format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={};K8S_POD_UID={}",
        pod.metadata.name.as_deref().unwrap(),
        pod.metadata.uid.as_deref().unwrap()
    )
}

#[tokio::test]
async fn the_pod_annotation_of_a_real_pod_gives_its_address_when_enabled() {
    let _shared = SERVER.read().await;
    let pool = h::unique("st-ann");
    let ranges = json!([[{"subnet": "10.88.0.0/24"}], [{"subnet": "fd00:88::/120"}]]);
    let on = conf(&pool, ranges.clone(), json!({"staticIPs": {"podAnnotation": true}}));
    let off = conf(&pool, ranges, json!({}));
    let pod =
        create_pod(&h::unique("st-pod"), json!({"netendpoint.dev/ips": "[\"10.88.0.66\", \"fd00:88::66\"]"})).await;
    let args = pod_args(&pod);

    let (ok, r, e) = invoke("ADD", &on, &env("st-ann-1", &args));
    assert!(ok, "{e}");
    assert_eq!((ip_of(&r, 0).to_string(), ip_of(&r, 1).to_string()), ("10.88.0.66".into(), "fd00:88::66".into()));
    assert_eq!(endpoint(&pool, "10.88.0.66").await.unwrap().spec.static_ip, Some(true));

    // Off (the default): the annotation is not read.
    let (ok, r, e) = invoke("ADD", &off, &env("st-ann-2", &args));
    assert!(ok, "{e}");
    assert_ne!(ip_of(&r, 0).to_string(), "10.88.0.66");
    // A sandbox of an earlier Pod under the same name does not get the new Pod's addresses.
    let stale = args.replace(pod.metadata.uid.as_deref().unwrap(), "uid-of-an-older-pod");
    let (ok, r, e) = invoke("ADD", &on, &env("st-ann-3", &stale));
    assert!(ok, "{e}");
    assert_ne!(ip_of(&r, 0).to_string(), "10.88.0.66");
    // The runtime's own request wins over the annotation.
    let (ok, r, e) = invoke("ADD", &on, &env("st-ann-4", &format!("{args};IP=10.88.0.67")));
    assert!(ok, "{e}");
    assert_eq!(ip_of(&r, 0).to_string(), "10.88.0.67");
    // A bad annotation is code 7 and writes nothing.
    let bad = create_pod(&h::unique("st-pod-bad"), json!({"netendpoint.dev/ips": "10.88.0.x"})).await;
    let before = h::pool_endpoints(&pool).await.len();
    let (ok, out, _) = invoke("ADD", &on, &env("st-ann-5", &pod_args(&bad)));
    assert!(!ok);
    assert_eq!(out["code"], 7, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("pod annotation netendpoint.dev/ips"), "{out}");
    assert_eq!(h::pool_endpoints(&pool).await.len(), before);
    h::cleanup_pool(&pool).await;
}

/// Sums `apiserver_request_total` over the series whose labels contain every one of `labels`.
async fn requests(labels: &[&str]) -> f64 {
    h::apiserver_counter("apiserver_request_total", labels).await
}

/// NetworkEndpoint requests and Pod GETs made while `f` ran.
async fn counted<F: FnOnce()>(f: F) -> (f64, f64) {
    let nep = [r#"resource="networkendpoints""#];
    let pod_get = [r#"resource="pods""#, r#"verb="GET""#];
    let (n0, p0) = (requests(&nep).await, requests(&pod_get).await);
    f();
    (requests(&nep).await - n0, requests(&pod_get).await - p0)
}

#[tokio::test]
async fn a_default_add_makes_the_requests_it_made_before_and_the_annotation_costs_one_pod_get() {
    let _alone = SERVER.write().await;
    let pool = h::unique("st-count");
    let ranges = json!([[{"subnet": "10.89.0.0/24"}]]);
    let plain = conf(&pool, ranges.clone(), json!({}));
    let on = conf(&pool, ranges, json!({"staticIPs": {"podAnnotation": true}}));
    let pod = create_pod(&h::unique("st-count-pod"), json!({})).await;
    let args = pod_args(&pod);
    // Warm the node's record of its verified node name, so that no Node GET happens below.
    assert!(invoke("ADD", &plain, &env("st-warm", &args)).0);
    const N: usize = 10;
    let adds = |c: &Value, prefix: &str, asked: bool| {
        for i in 0..N {
            let cid = format!("{prefix}-{i}");
            let extra = if asked { format!(";IP=10.89.0.{}", 100 + i) } else { String::new() };
            let (ok, _, e) = invoke("ADD", c, &env(&cid, &format!("{args}{extra}")));
            assert!(ok, "{e}");
        }
    };
    let (nep, pods) = counted(|| adds(&plain, "st-plain", false)).await;
    assert_eq!((nep, pods), (N as f64, 0.0), "a default ADD: one create (BENCHMARKS.md), no Pod read");
    let (nep, pods) = counted(|| adds(&on, "st-asked", true)).await;
    assert_eq!((nep, pods), (N as f64, 0.0), "annotation enabled, the runtime asked: one create, no Pod read");
    let (nep, pods) = counted(|| adds(&on, "st-ann", false)).await;
    assert_eq!((nep, pods), (N as f64, N as f64), "annotation enabled, nothing asked: one Pod GET more");
    println!("per ADD: default 1 NetworkEndpoint request + 0 Pod GETs; with staticIPs.podAnnotation 1 + 1");
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn concurrent_requests_for_one_address_give_it_to_exactly_one() {
    let _shared = SERVER.read().await;
    let pool = h::unique("st-race");
    let c = conf(&pool, json!([[{"subnet": "10.90.0.0/24"}]]), json!({}));
    let racers: Vec<_> = (0..6)
        .map(|i| {
            let c = c.clone();
            std::thread::spawn(move || {
                let cid = format!("st-race-{i}");
                invoke("ADD", &c, &env(&cid, &format!("K8S_POD_NAMESPACE=race;K8S_POD_NAME=r-{i};IP=10.90.0.42")))
            })
        })
        .collect();
    let results: Vec<_> = racers.into_iter().map(|t| t.join().unwrap()).collect();
    let winners: Vec<_> = results.iter().filter(|(ok, _, _)| *ok).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let holder = endpoint(&pool, "10.90.0.42").await.unwrap();
    for (ok, out, _) in &results {
        if !ok {
            assert_eq!(out["code"], 108, "{out}");
            assert!(out["msg"].as_str().unwrap().contains(&holder.spec.container_id), "{out}");
        }
    }
    assert_eq!(h::pool_endpoints(&pool).await.len(), 1, "the losers left nothing");
    h::cleanup_pool(&pool).await;
}
