//! The guarantee at production edges, against the real API server with the
//! built plugin: the node name comes from the installer's file and must be a
//! registered Node; forced release reads the API server's clock, not the
//! node's; no configuration panics or hangs the plugin; and a full pool
//! waits for a release that has not begun yet.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use netendpoint_crd::endpoint_name;
use netendpoint_tests::{self as h, invoke};
use serde_json::json;

const AGENT: &str = "test.netendpoint.dev/edge-agent";

use h::{attach_env as env, first_ip as ip_of, net_conf as conf};

/// Before: the runtime passes no NODE_NAME, so a node whose hostname differs
/// from its Node object leased under its hostname, and every other node took
/// those live leases for a vanished node's.
#[tokio::test]
async fn the_node_name_comes_from_the_installers_file_and_must_be_registered() {
    let pool = h::unique("nodename");
    let registered = h::unique("named-node");
    h::ensure_node(&registered);
    let tmp = h::TempDir::new("nodename");
    let file = tmp.join("nodename");
    std::fs::write(&file, format!("{registered}\n")).unwrap();
    let mut c =
        conf(&pool, json!([[{"subnet": "10.81.0.0/24"}]]), json!({"nodeNameFile": file, "dataDir": tmp.join("data")}));
    c["ipam"].as_object_mut().unwrap().remove("nodeName");

    let (ok, r, e) = invoke("ADD", &c, &env("from-file"));
    assert!(ok, "{e}");
    let ep = h::endpoints().await.get(&endpoint_name(&pool, ip_of(&r))).await.unwrap();
    assert_eq!(ep.spec.node, registered, "the lease names the node from the installer's file");

    // A name that no Node has: refused, with nothing written.
    std::fs::write(&file, "not-a-registered-node").unwrap();
    let (ok, out, _) = invoke("ADD", &c, &env("stray"));
    assert!(!ok && out["code"] == 107, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("not-a-registered-node"), "{out}");
    assert_eq!(h::pool_endpoints(&pool).await.len(), 1);
    // The hostname fallback is checked the same way.
    std::fs::remove_file(&file).unwrap();
    let (ok, out, _) =
        invoke("ADD", &c, &[("NODE_NAME", "env-node-unregistered"), ("CNI_CONTAINERID", "env"), ("CNI_NETNS", "/x")]);
    assert!(!ok && out["code"] == 107, "{out}");
    h::cleanup_pool(&pool).await;
}

/// Before: the age of a release was the node's clock minus deletionTimestamp,
/// so a node whose clock ran an hour ahead forced a release a few seconds old.
#[tokio::test]
async fn a_node_clock_that_runs_ahead_never_forces_a_young_release() {
    let pool = h::unique("skew");
    let ranges = json!([[{"subnet": "10.82.0.0/29", "rangeStart": "10.82.0.2", "rangeEnd": "10.82.0.2"}]]);
    let c = conf(&pool, ranges, json!({"finalizers": [AGENT], "forceReleaseAfter": "30s", "waitForRelease": "0s"}));
    let (ok, a, e) = invoke("ADD", &c, &env("holder"));
    assert!(ok, "{e}");
    assert!(invoke("DEL", &c, &env("holder")).0);
    let name = endpoint_name(&pool, ip_of(&a));

    let ahead = ["faketime", "-f", "+1h"];
    let stdin = serde_json::to_vec(&c).unwrap();
    let mut skewed_env = env("skewed");
    skewed_env.push(("FAKETIME_DONT_FAKE_MONOTONIC", "1"));
    let (ok, out, err) = h::invoke_wrapped(&ahead, "ADD", &stdin, &skewed_env);
    assert!(
        !ok && out["code"] == 100,
        "a release seconds old is not forced, whatever the node's clock says: {out} {err}"
    );
    let held = h::endpoints().await.get(&name).await.unwrap();
    assert_eq!(held.metadata.finalizers.unwrap(), [AGENT]);
    assert_eq!(held.spec.force_release_after.as_deref(), Some("30s"), "the bound is stamped on the lease");
    h::cleanup_pool(&pool).await;
}

/// Before: `waitForRelease: "18446744073709551615"` panicked in ADD and in
/// DEL, so pods on that network could never be deleted.
#[tokio::test]
async fn out_of_range_durations_are_config_errors_not_panics() {
    let pool = h::unique("huge");
    for field in ["waitForRelease", "forceReleaseAfter", "timeout", "vanishedNodeGrace", "gcGrace"] {
        let c = conf(&pool, json!([[{"subnet": "10.83.0.0/24"}]]), json!({ field: "18446744073709551615" }));
        for cmd in ["ADD", "DEL", "CHECK", "GC"] {
            let (ok, out, err) = invoke(cmd, &c, &env("huge"));
            assert!(!ok && out["code"] == 7, "{cmd} with {field}: {out} {err}");
            assert!(out["msg"].as_str().unwrap().contains(&format!("ipam.{field}")), "{out}");
            assert!(!err.contains("panicked"), "{err}");
        }
        let (ok, out, _) = invoke("STATUS", &c, &[]);
        assert!(!ok && out["code"] == 50, "STATUS answers with its own code: {out}");
    }
    assert!(h::pool_endpoints(&pool).await.is_empty());
}

/// An API server that accepts connections and never answers: the invocation
/// ends at `ipam.timeout` with code 11 ("try again later"), never hangs.
#[tokio::test]
async fn an_api_server_that_never_answers_ends_at_the_deadline_with_code_11() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hold = std::thread::spawn(move || {
        // Accept and hold connections without a byte in reply, until the test ends.
        let mut held = Vec::new();
        listener.set_nonblocking(true).unwrap();
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until && held.len() < 64 {
            match listener.accept() {
                Ok((s, _)) => held.push(s),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    let tmp = h::TempDir::new("blackhole");
    let kubeconfig = tmp.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
        ),
    )
    .unwrap();
    let pool = h::unique("hang");
    let c = conf(
        &pool,
        json!([[{"subnet": "10.84.0.0/24"}]]),
        json!({"kubeconfig": kubeconfig, "timeout": "10s", "waitForRelease": "0s", "dataDir": tmp.join("data"), "nodeName": "node-a"}),
    );
    for cmd in ["ADD", "DEL"] {
        let started = Instant::now();
        let (ok, out, err) = invoke(cmd, &c, &env("hung"));
        let took = started.elapsed();
        assert!(!ok && out["code"] == 11, "{cmd}: {out} {err}");
        assert!(out["msg"].as_str().unwrap().contains("ipam.timeout"), "{out}");
        // Not a timing assertion: a hang would run until the harness kills it.
        eprintln!("{cmd} against a silent API server answered code 11 after {took:?}");
    }
    drop(hold);
}

/// Under kubelet a replacement pod's ADD often comes before the old pod's
/// DEL. Before, in a full pool with nothing releasing yet, it failed at once.
#[tokio::test]
async fn a_full_pool_waits_for_the_release_that_is_about_to_start() {
    let pool = h::unique("early");
    let ranges = json!([[{"subnet": "10.85.0.0/29", "rangeStart": "10.85.0.2", "rangeEnd": "10.85.0.3"}]]);
    let c = conf(&pool, ranges, json!({"waitForRelease": "8s"}));
    let (_, a, _) = invoke("ADD", &c, &env("old-0"));
    assert!(invoke("ADD", &c, &env("old-1")).0);
    let del_conf = c.clone();
    let del = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        invoke("DEL", &del_conf, &env("old-0"))
    });
    let (ok, b, e) = invoke("ADD", &c, &env("replacement"));
    assert!(ok, "the replacement waits for the old pod's DEL: {e}");
    assert!(del.join().unwrap().0);
    assert_eq!(ip_of(&a), ip_of(&b));
    // With no release at all, the same clear exhaustion error after the wait.
    let (ok, out, _) = invoke("ADD", &c, &env("no-luck"));
    assert!(!ok && out["code"] == 100, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("exhausted"), "{out}");
    h::cleanup_pool(&pool).await;
}

/// Invariant 11 against the real server: ADD in a set whose first 79
/// addresses are taken reads the controller's summaries by name and lists
/// no lease; without a controller it probes by create, and lists none
/// either. The plugin's own tally of its requests, logged per invocation,
/// is what is checked.
#[tokio::test]
async fn a_filled_set_is_searched_by_name_with_summaries_or_without() {
    let tmp = h::TempDir::new("by-name");
    let api = h::endpoints().await;
    let summarised = h::unique("by-name-sum");
    let blind = h::unique("by-name-blind");
    let ctl = h::ControllerProc::start(&h::unique("ctl-by-name"), &h::unique("ctl-by-name"), &[&summarised], &[]);
    for pool in [&summarised, &blind] {
        for i in 2..=80 {
            let ep = h::lease(pool, &format!("10.83.0.{i}"), &format!("fill-{i}"), "node-a", &[]);
            api.create(&Default::default(), &ep).await.unwrap();
        }
    }
    ctl.wait_leader().await;
    h::wait_for_summary(&summarised).await;

    for (pool, how) in [(&summarised, "claimed from the shard summary"), (&blind, "claimed by probing (no summary)")] {
        let log = tmp.join(&format!("{pool}.log"));
        // 10.83.0.0/25: usable .2 – .126 (.1 is the gateway).
        let c = conf(
            pool,
            json!([[{"subnet": "10.83.0.0/25"}]]),
            json!({"dataDir": tmp.join(pool), "log": {"level": "info", "file": log}}),
        );
        let (ok, r, e) = invoke("ADD", &c, &env("after-the-fill"));
        assert!(ok, "{e}");
        let ip = ip_of(&r).to_string();
        let log = std::fs::read_to_string(&log).unwrap();
        assert!(log.contains(how), "{pool}: {log}");
        let tally = log.lines().find(|l| l.contains("API requests of this ADD")).unwrap_or_else(|| panic!("{log}"));
        assert!(!tally.contains("LIST "), "{pool}: an ADD listed: {tally}");
        println!("{how}: {ip}; {}", tally.split_once("requests=").map_or(tally, |(_, t)| t));
        // One of the addresses the fill left free (after a refused create,
        // among the next few free ones, by a hash of the sandbox).
        let last: u8 = ip.rsplit('.').next().unwrap().parse().unwrap();
        assert!((81..=126).contains(&last), "{pool}: {ip} was not free");
    }
    h::cleanup_pool(&summarised).await;
    h::cleanup_pool(&blind).await;
}
