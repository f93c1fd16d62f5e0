//! The plugin against the real API server and the reference CNI plugins:
//! bridge delegating IPAM to `netendpoint`, driven by cnitool (libcni) in real
//! network namespaces, and the plugin binary invoked as separate processes.

#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use netendpoint_crd::{endpoint_name, is_dns1123_subdomain};
use netendpoint_tests::{self as h, Bridge, NetDir, Netns, invoke, ip_of, ipam, lease_at as endpoint};
use serde_json::{Value, json};

const AGENT: &str = "test.netendpoint.dev/agent";

fn bridge_conf(version: &str, net: &str, bridge: &Bridge, ipam: Value) -> Value {
    json!({
        "cniVersion": version,
        "name": net,
        "type": "bridge",
        "bridge": bridge.name,
        "isGateway": true,
        "ipam": ipam,
    })
}

fn conf(pool: &str, ranges: Value, extra: Value) -> Value {
    let mut ipam = ipam(pool, ranges);
    for (k, v) in extra.as_object().unwrap() {
        ipam[k] = v.clone();
    }
    json!({"cniVersion": "1.0.0", "name": "net", "ipam": ipam})
}

/// The CNI environment of container `cid` on eth0, with `extra` over it.
fn env<'a>(cid: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut v = h::attach_env(cid);
    v.extend_from_slice(extra);
    v
}

#[tokio::test]
async fn add_through_bridge_in_every_spec_version() {
    for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let pool = h::unique("bridge");
        let bridge = Bridge::new("nb");
        let netns = Netns::new("ne-br");
        let net = bridge_conf(version, &pool, &bridge, ipam(&pool, json!([[{"subnet": "10.61.0.0/24"}]])));
        let dir = NetDir::new(&net);
        let args = [("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_UID=uid-1")];

        let out = dir.cnitool("add", &netns, &args);
        assert!(out.status.success(), "{version}: cnitool add: {}", String::from_utf8_lossy(&out.stderr));
        let result: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(result["cniVersion"], version);
        let ip = ip_of(&result, 0);

        let addrs = netns.exec(&["ip", "-o", "-4", "addr", "show", "dev", "eth0"]);
        assert!(addrs.contains(&format!("{ip}/24")), "{version}: {ip} not on eth0 in the netns: {addrs}");

        let ep = endpoint(&pool, ip).await.unwrap_or_else(|| panic!("{version}: no NetworkEndpoint for {ip}"));
        assert_eq!(ep.spec.ip, ip.to_string());
        assert_eq!(ep.spec.pool, pool);
        assert_eq!(ep.spec.prefix_length, 24);
        assert_eq!(ep.spec.gateway.as_deref(), Some("10.61.0.1"));
        assert_eq!(ep.spec.if_name, "eth0");
        assert_eq!(ep.spec.node, "node-a");
        assert!(ep.spec.container_id.starts_with("cnitool-"), "{}", ep.spec.container_id);
        let pod = ep.spec.pod.clone().unwrap();
        assert_eq!((pod.namespace.as_str(), pod.name.as_str(), pod.uid.as_str()), ("default", "web-0", "uid-1"));
        assert!(ep.metadata.owner_references.is_none(), "the lease must not be owned by the Pod");

        if version != "0.3.0" && version != "0.3.1" {
            let out = dir.cnitool("check", &netns, &args);
            assert!(out.status.success(), "{version}: cnitool check: {}", String::from_utf8_lossy(&out.stderr));
        }
        let out = dir.cnitool("del", &netns, &args);
        assert!(out.status.success(), "{version}: cnitool del: {}", String::from_utf8_lossy(&out.stderr));
        assert!(endpoint(&pool, ip).await.is_none(), "{version}: lease must be gone after DEL without finalizers");
    }
}

#[tokio::test]
async fn dual_stack_through_bridge() {
    let pool = h::unique("dual");
    let bridge = Bridge::new("nb");
    let netns = Netns::new("ne-ds");
    let ranges = json!([[{"subnet": "10.62.0.0/24"}], [{"subnet": "fd00:62::/64"}]]);
    let net = bridge_conf("1.1.0", &pool, &bridge, ipam(&pool, ranges));
    let dir = NetDir::new(&net);
    let out = dir.cnitool("add", &netns, &[]);
    assert!(out.status.success(), "cnitool add: {}", String::from_utf8_lossy(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (v4, v6) = (ip_of(&result, 0), ip_of(&result, 1));
    assert!(v4.is_ipv4() && v6.is_ipv6(), "{result}");

    let addrs = netns.exec(&["ip", "-o", "addr", "show", "dev", "eth0"]);
    assert!(addrs.contains(&format!("{v4}/24")), "{addrs}");
    assert!(addrs.contains(&format!("{v6}/64")), "{addrs}");

    let eps = h::pool_endpoints(&pool).await;
    assert_eq!(eps.len(), 2);
    for ep in &eps {
        assert!(is_dns1123_subdomain(ep.metadata.name.as_deref().unwrap()));
        assert_eq!(ep.spec.container_id, eps[0].spec.container_id, "both leases belong to one attachment");
    }
    let v6_ep = endpoint(&pool, v6).await.unwrap();
    assert_eq!(v6_ep.spec.prefix_length, 64);

    let out = dir.cnitool("del", &netns, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(h::pool_endpoints(&pool).await.is_empty());
}

#[tokio::test]
async fn dual_stack_is_all_or_nothing() {
    let pool = h::unique("partial");
    // The IPv6 set has one usable address, held by someone else.
    let ranges = json!([[{"subnet": "10.63.0.0/24"}], [{"subnet": "fd00:63::/120", "rangeStart": "fd00:63::5", "rangeEnd": "fd00:63::5"}]]);
    let c = conf(&pool, ranges, json!({"waitForRelease": "0s"}));
    let (ok, _, err) = invoke("ADD", &c, &env("holder", &[]));
    assert!(ok, "{err}");
    let (ok, out, _) = invoke("ADD", &c, &env("victim", &[]));
    assert!(!ok);
    assert_eq!(out["code"], 100, "{out}");
    let eps = h::pool_endpoints(&pool).await;
    assert_eq!(eps.len(), 2, "only the holder's two leases remain: {eps:?}");
    assert!(eps.iter().all(|e| e.spec.container_id == "holder"), "the failed ADD left no claim behind");
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn finalizer_gates_reuse_and_a_waiting_add_gets_the_ip() {
    let pool = h::unique("gate");
    // Exactly two usable IPs: .2 and .3.
    let ranges = json!([[{"subnet": "10.64.0.0/29", "rangeStart": "10.64.0.2", "rangeEnd": "10.64.0.3"}]]);
    let quick = conf(&pool, ranges.clone(), json!({"finalizers": [AGENT], "waitForRelease": "1s"}));
    let patient = conf(&pool, ranges, json!({"finalizers": [AGENT], "waitForRelease": "30s"}));

    let (ok, r1, e) = invoke("ADD", &quick, &env("gate-1", &[]));
    assert!(ok, "{e}");
    let (ok, r2, e) = invoke("ADD", &quick, &env("gate-2", &[]));
    assert!(ok, "{e}");
    let (ip1, ip2) = (ip_of(&r1, 0), ip_of(&r2, 0));
    assert_ne!(ip1, ip2);

    let (ok, _, e) = invoke("DEL", &quick, &env("gate-1", &[]));
    assert!(ok, "{e}");
    let held = endpoint(&pool, ip1).await.expect("the lease stays while the finalizer is there");
    assert!(held.metadata.deletion_timestamp.is_some());

    // Without a release, an ADD fails with the exhaustion error once waitForRelease passed.
    let started = Instant::now();
    let (ok, out, _) = invoke("ADD", &quick, &env("gate-3", &[]));
    assert!(!ok, "no IP may be handed out while the finalizer holds: {out}");
    assert_eq!(out["code"], 100, "{out}");
    let msg = out["msg"].as_str().unwrap();
    assert!(msg.contains("2 of 2 IPs in use") && msg.contains("1 held by terminating"), "{msg}");
    assert!(msg.contains(AGENT), "the error names the finalizer it waits on: {msg}");
    assert!(started.elapsed() >= Duration::from_secs(1), "it waited for waitForRelease");
    assert_eq!(endpoint(&pool, ip1).await.unwrap().spec.container_id, "gate-1");

    // A waiting ADD gets the IP as soon as the finalizer is removed.
    let waiter = std::thread::spawn(move || invoke("ADD", &patient, &env("gate-4", &[])));
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!waiter.is_finished(), "the ADD must wait while the finalizer holds");
    assert_eq!(endpoint(&pool, ip1).await.unwrap().spec.container_id, "gate-1");
    h::remove_finalizer(&endpoint_name(&pool, ip1), AGENT).await;
    let (ok, r4, e) = waiter.join().unwrap();
    assert!(ok, "{e}");
    assert_eq!(ip_of(&r4, 0), ip1, "the waiting ADD takes the released IP");
    let ep = endpoint(&pool, ip1).await.unwrap();
    assert_eq!(ep.spec.container_id, "gate-4");
    assert_eq!(ep.metadata.finalizers.unwrap(), [AGENT], "declared finalizers are attached at creation");
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn concurrent_adds_from_four_nodes_never_share_an_ip() {
    let pool = h::unique("conc");
    // The controller summarises the pool, as deployed: without summaries an
    // ADD probes a bounded number of addresses and may give up early.
    let ctl = h::ControllerProc::start(&h::unique("ctl-conc"), &h::unique("ctl-conc"), &[&pool], &[]);
    ctl.wait_leader().await;
    // One /24 with 150 usable addresses, so 50 of the 200 ADDs must fail with exhaustion.
    let ranges = json!([[{"subnet": "10.65.0.0/24", "rangeStart": "10.65.0.10", "rangeEnd": "10.65.0.159"}]]);
    let nodes = ["node-1", "node-2", "node-3", "node-4"];
    let confs: Vec<Value> = nodes
        .iter()
        .map(|n| {
            let dir = std::env::temp_dir().join(format!("netendpoint-conc-{n}"));
            h::ensure_node(n);
            conf(&pool, ranges.clone(), json!({"nodeName": n, "waitForRelease": "0s", "dataDir": dir}))
        })
        .collect();
    // The first ADD goes alone; then the burst waits for the summary of
    // the pool it made. Leading is not yet summarising, and an ADD into a
    // pool no controller summarised yet probes a bounded number of
    // addresses blind (with waitForRelease 0s, it then gives up).
    let first = invoke("ADD", &confs[0], &env("conc-0", &[]));
    assert!(first.0, "the first ADD into an empty pool: {}", first.2);
    h::wait_for_summary(&pool).await;
    let results = std::sync::Mutex::new(vec![("conc-0".to_string(), first)]);
    let next = std::sync::atomic::AtomicUsize::new(1);
    std::thread::scope(|s| {
        for _ in 0..24 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i >= 200 {
                        break;
                    }
                    let cid = format!("conc-{i}");
                    let r = invoke("ADD", &confs[i % 4], &env(&cid, &[]));
                    results.lock().unwrap().push((cid, r));
                }
            });
        }
    });
    let results = results.into_inner().unwrap();
    let mut granted: HashMap<IpAddr, String> = HashMap::new();
    let mut exhausted = 0;
    for (cid, (ok, out, err)) in &results {
        if *ok {
            let ip = ip_of(out, 0);
            assert!(granted.insert(ip, cid.clone()).is_none(), "{ip} given twice");
        } else {
            assert_eq!(out["code"], 100, "{cid}: only exhaustion may fail: {out} {err}");
            let msg = out["msg"].as_str().unwrap_or_default();
            assert!(msg.contains("150 of 150 IPs in use"), "{cid}: exhausted only when full: {msg}");
            exhausted += 1;
        }
    }
    assert_eq!(granted.len(), 150, "every usable IP was handed out once");
    assert_eq!(exhausted, 50);
    let eps = h::pool_endpoints(&pool).await;
    assert_eq!(eps.len(), 150, "objects on the server match the grants");
    for ep in eps {
        assert_eq!(granted.get(&ep.ip().unwrap()), Some(&ep.spec.container_id), "server object disagrees");
    }
    println!("concurrency: 200 ADDs from 4 nodes: {} granted, {exhausted} exhausted, 0 duplicates", granted.len());
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn add_and_del_are_idempotent_and_a_stale_del_frees_nothing() {
    let pool = h::unique("idem");
    let one_ip = json!([[{"subnet": "10.66.0.0/29", "rangeStart": "10.66.0.4", "rangeEnd": "10.66.0.4"}]]);
    let c = conf(&pool, one_ip, json!({"waitForRelease": "0s"}));

    let (ok, a, e) = invoke("ADD", &c, &env("old-sandbox", &[]));
    assert!(ok, "{e}");
    let (ok, b, e) = invoke("ADD", &c, &env("old-sandbox", &[]));
    assert!(ok, "{e}");
    assert_eq!(a["ips"], b["ips"], "a repeated ADD returns the same IP");
    assert_eq!(h::pool_endpoints(&pool).await.len(), 1, "and creates nothing new");

    for _ in 0..2 {
        let (ok, out, e) = invoke("DEL", &c, &env("old-sandbox", &[]));
        assert!(ok, "a repeated DEL succeeds: {out} {e}");
    }
    assert!(h::pool_endpoints(&pool).await.is_empty());

    // The new sandbox gets the only IP, then a late DEL of the old one arrives.
    let (ok, n, e) = invoke("ADD", &c, &env("new-sandbox", &[]));
    assert!(ok, "{e}");
    assert_eq!(n["ips"], a["ips"]);
    let (ok, _, e) = invoke("DEL", &c, &env("old-sandbox", &[]));
    assert!(ok, "{e}");
    let ep = endpoint(&pool, ip_of(&n, 0)).await.expect("the new sandbox keeps its lease");
    assert_eq!(ep.spec.container_id, "new-sandbox");
    assert!(ep.metadata.deletion_timestamp.is_none());
    // A DEL for another interface of the same sandbox frees nothing either.
    let (ok, _, _) = invoke("DEL", &c, &env("new-sandbox", &[("CNI_IFNAME", "net1")]));
    assert!(ok);
    assert!(endpoint(&pool, ip_of(&n, 0)).await.unwrap().metadata.deletion_timestamp.is_none());
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn check_compares_the_lease_with_prev_result() {
    let pool = h::unique("check");
    let c = conf(&pool, json!([[{"subnet": "10.67.0.0/28"}]]), json!({}));
    let (ok, r, e) = invoke("ADD", &c, &env("chk", &[]));
    assert!(ok, "{e}");
    let mut with_prev = c.clone();
    with_prev["prevResult"] = r.clone();
    let (ok, out, e) = invoke("CHECK", &with_prev, &env("chk", &[]));
    assert!(ok, "{out} {e}");
    with_prev["prevResult"]["ips"][0]["address"] = json!("10.67.0.14/28");
    let (ok, out, _) = invoke("CHECK", &with_prev, &env("chk", &[]));
    assert!(!ok);
    assert_eq!(out["code"], 106, "{out}");
    let (ok, out, _) = invoke("CHECK", &with_prev, &env("someone-else", &[]));
    assert!(!ok, "{out}");
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn bad_input_gets_a_clear_error_and_leaves_nothing() {
    let pool = h::unique("bad");
    let good = conf(&pool, json!([[{"subnet": "10.68.0.0/24"}]]), json!({}));
    let with = |path: &[&str], v: Value| {
        let mut c = good.clone();
        let mut at = &mut c;
        for p in &path[..path.len() - 1] {
            at = &mut at[*p];
        }
        at[path[path.len() - 1]] = v;
        c
    };
    let tmp = std::env::temp_dir().join(h::unique("kc"));
    std::fs::create_dir_all(&tmp).unwrap();
    let garbage = tmp.join("garbage");
    std::fs::write(&garbage, "this: [is not a kubeconfig").unwrap();
    let unreachable = tmp.join("unreachable");
    let unreachable_cfg = std::fs::read_to_string(h::kubeconfig()).unwrap();
    let server_line = unreachable_cfg.lines().find(|l| l.trim_start().starts_with("server:")).unwrap();
    std::fs::write(&unreachable, unreachable_cfg.replace(server_line, "    server: https://127.0.0.1:1")).unwrap();
    let wrong_token = tmp.join("wrong-token");
    let admin = std::fs::read_to_string(h::kubeconfig()).unwrap();
    let token_line = admin.lines().find(|l| l.trim_start().starts_with("token:")).unwrap();
    std::fs::write(&wrong_token, admin.replace(token_line, "    token: not-a-valid-token")).unwrap();

    let stdin_cases: Vec<(&str, Vec<u8>, u64, &str)> = vec![
        ("malformed JSON", b"{\"cniVersion\": \"1.0.0\", ".to_vec(), 6, "decode"),
        ("unknown field", serde_json::to_vec(&with(&["ipam", "rangez"], json!([]))).unwrap(), 7, "rangez"),
        (
            "bad CIDR",
            serde_json::to_vec(&with(&["ipam", "ranges"], json!([[{"subnet": "10.68.0.0/40"}]]))).unwrap(),
            7,
            "10.68.0.0/40",
        ),
        (
            "range outside subnet",
            serde_json::to_vec(&with(
                &["ipam", "ranges"],
                json!([[{"subnet": "10.68.0.0/24", "rangeEnd": "10.69.0.9"}]]),
            ))
            .unwrap(),
            7,
            "rangeEnd",
        ),
        ("unsupported version", serde_json::to_vec(&with(&["cniVersion"], json!("9.9.9"))).unwrap(), 1, "9.9.9"),
        (
            "missing kubeconfig",
            serde_json::to_vec(&with(&["ipam", "kubeconfig"], json!("/nonexistent/kc"))).unwrap(),
            104,
            "/nonexistent/kc",
        ),
        (
            "garbage kubeconfig",
            serde_json::to_vec(&with(&["ipam", "kubeconfig"], json!(garbage))).unwrap(),
            104,
            "garbage",
        ),
        (
            "unreachable server",
            serde_json::to_vec(&with(&["ipam", "kubeconfig"], json!(unreachable))).unwrap(),
            101,
            "unreachable",
        ),
        (
            "wrong credentials",
            serde_json::to_vec(&with(&["ipam", "kubeconfig"], json!(wrong_token))).unwrap(),
            102,
            "401",
        ),
    ];
    for (what, stdin, code, needle) in stdin_cases {
        let (ok, out, err) = h::invoke_raw("ADD", &stdin, &env(&format!("bad-{code}"), &[]));
        assert!(!ok, "{what}: must fail");
        assert_eq!(out["code"], code, "{what}: {out}");
        let text = format!("{} {}", out["msg"], out["details"]);
        assert!(text.contains(needle), "{what}: error does not name {needle:?}: {out}");
        assert!(!err.contains("panicked"), "{what}: panic: {err}");
        assert!(out["cniVersion"].is_string(), "{what}: {out}");
    }
    for var in ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_NETNS"] {
        let mut cmd_env: Vec<_> = env("bad-env", &[]).into_iter().filter(|(k, _)| *k != var).collect();
        cmd_env.push((var, ""));
        let (ok, out, err) = invoke("ADD", &good, &cmd_env);
        assert!(!ok);
        assert_eq!(out["code"], 4, "{var}: {out}");
        assert!(out["msg"].as_str().unwrap().contains(var), "{var}: {out}");
        assert!(!err.contains("panicked"));
    }
    assert!(h::pool_endpoints(&pool).await.is_empty(), "no bad input may leave an object behind");
    let _ = std::fs::remove_dir_all(tmp);
}

#[tokio::test]
async fn stdout_carries_only_the_result_and_stdin_is_never_logged() {
    let pool = h::unique("quiet");
    let log = std::env::temp_dir().join(format!("{}.log", h::unique("plugin")));
    let mut c = conf(&pool, json!([[{"subnet": "10.69.0.0/24"}]]), json!({"log": {"level": "trace", "file": log}}));
    c["secretToken"] = json!("SECRET-d0-not-log-me");
    let (ok, out, err) = invoke("ADD", &c, &env("quiet", &[]));
    assert!(ok, "{err}");
    assert_eq!(out.as_object().unwrap().keys().collect::<Vec<_>>(), ["cniVersion", "dns", "ips", "routes"]);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("claimed"), "the log file receives the logs: {logged}");
    let admin_token = std::fs::read_to_string(h::kubeconfig())
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: ").map(str::to_string))
        .unwrap();
    for text in [&logged, &err] {
        assert!(!text.contains("SECRET-d0-not-log-me"), "stdin content leaked: {text}");
        assert!(!text.contains(&admin_token), "credentials leaked: {text}");
    }
    let (ok, out, _) = invoke("DEL", &c, &env("quiet", &[]));
    assert!(ok && out.is_null(), "DEL prints nothing on success: {out}");
    let (ok, out, _) = invoke("ADD", &json!({}), &env("quiet", &[]));
    assert!(!ok && out["code"].is_number(), "errors are the spec's JSON on stdout: {out}");
    let _ = std::fs::remove_file(log);
}

#[tokio::test]
async fn kubectl_shows_holder_release_state_and_finalizers() {
    let pool = h::unique("show");
    let c = conf(&pool, json!([[{"subnet": "10.70.0.0/24"}]]), json!({"finalizers": [AGENT]}));
    let (ok, r, e) = invoke("ADD", &c, &env("show-1", &[("CNI_ARGS", "K8S_POD_NAMESPACE=shop;K8S_POD_NAME=cart-7")]));
    assert!(ok, "{e}");
    let name = endpoint_name(&pool, ip_of(&r, 0));
    let get = String::from_utf8(h::kubectl(&["get", "nep", &name]).stdout).unwrap();
    for col in ["IP", "POD", "NODE", "INTERFACE", "RELEASING-SINCE", "FINALIZERS", "cart-7", "node-a", "eth0", AGENT] {
        assert!(get.contains(col), "kubectl get lacks {col}: {get}");
    }
    let (ok, _, e) = invoke("DEL", &c, &env("show-1", &[]));
    assert!(ok, "{e}");
    let describe = String::from_utf8(h::kubectl(&["describe", "nep", &name]).stdout).unwrap();
    for want in ["cart-7", "shop", "node-a", "show-1", "eth0", "Deletion Timestamp", AGENT] {
        assert!(describe.contains(want), "kubectl describe lacks {want}: {describe}");
    }
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn reuse_is_round_robin_so_a_released_ip_comes_last() {
    let pool = h::unique("rr");
    let dir = std::env::temp_dir().join(h::unique("rr-data"));
    let c = conf(&pool, json!([[{"subnet": "10.71.0.0/29"}]]), json!({"dataDir": dir}));
    // Usable: .2 .. .6 (.1 is the gateway).
    let mut got = Vec::new();
    for i in 0..3 {
        let (ok, r, e) = invoke("ADD", &c, &env(&format!("rr-{i}"), &[]));
        assert!(ok, "{e}");
        got.push(ip_of(&r, 0).to_string());
    }
    assert_eq!(got, ["10.71.0.2", "10.71.0.3", "10.71.0.4"]);
    let (ok, _, e) = invoke("DEL", &c, &env("rr-0", &[]));
    assert!(ok, "{e}");
    for i in 3..6 {
        let (ok, r, e) = invoke("ADD", &c, &env(&format!("rr-{i}"), &[]));
        assert!(ok, "{e}");
        got.push(ip_of(&r, 0).to_string());
    }
    assert_eq!(&got[3..], ["10.71.0.5", "10.71.0.6", "10.71.0.2"], "the released .2 is reused last");
    let distinct: HashSet<_> = got.iter().collect();
    assert_eq!(distinct.len(), 5);
    h::cleanup_pool(&pool).await;
}
