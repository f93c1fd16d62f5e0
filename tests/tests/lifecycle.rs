//! Lifecycle safety against the real API server: GC (scoped to its node and
//! network, on evidence seen twice) and STATUS (also through bridge and
//! cnitool), bounded release of stuck finalizers by the plugin (`crossNode:
//! plugin`), and STATUS/ADD/DEL with the CRD missing or the API server
//! stopped. Leases of vanished nodes are the controller's (tests/controller.rs).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use netendpoint_crd::endpoint_name;
use netendpoint_tests::{self as h, NetDir, Netns, invoke, ipam};
use serde_json::{Value, json};

const AGENT: &str = "test.netendpoint.dev/stuck-agent";

use h::{attach_env as env, first_ip as ip_of, net_conf as conf};

#[tokio::test]
async fn gc_releases_only_this_nodes_stale_leases_on_the_second_sighting() {
    let pool = h::unique("gc");
    let here = conf(&pool, json!([[{"subnet": "10.72.0.0/24"}]]), json!({"nodeName": "gc-node", "gcGrace": "0s"}));
    let there = conf(&pool, json!([[{"subnet": "10.72.0.0/24"}]]), json!({"nodeName": "other-node"}));
    for cid in ["keep", "stale-1", "stale-2"] {
        assert!(invoke("ADD", &here, &env(cid)).0);
    }
    assert!(invoke("ADD", &there, &env("elsewhere")).0);
    let ids = || async {
        let mut left: Vec<String> = h::pool_endpoints(&pool).await.into_iter().map(|e| e.spec.container_id).collect();
        left.sort();
        left
    };

    let mut gc = here.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "keep", "ifname": "eth0"}]);
    let (ok, out, err) = invoke("GC", &gc, &[]);
    assert!(ok, "{out} {err}");
    assert_eq!(ids().await.len(), 4, "one sighting releases nothing");
    let (ok, out, err) = invoke("GC", &gc, &[]);
    assert!(ok, "{out} {err}");
    assert_eq!(ids().await, ["elsewhere", "keep"], "stale leases of this node go; valid ones and other nodes' stay");

    // cnitool gc sends no valid-attachments list: that is "unknown", not "nothing is valid".
    let dir = NetDir::new(&here);
    let netns = Netns::new("ne-gc");
    for _ in 0..2 {
        let out = dir.cnitool("gc", &netns, &[]);
        assert!(out.status.success(), "cnitool gc: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(ids().await, ["elsewhere", "keep"]);
    let mut null = here.clone();
    null["cni.dev/valid-attachments"] = Value::Null;
    assert!(invoke("GC", &null, &[]).0 && invoke("GC", &null, &[]).0);
    assert_eq!(ids().await, ["elsewhere", "keep"], "a null list releases nothing either");

    // A GC on a node with no leases, with an empty list, succeeds.
    let mut empty = conf(&pool, json!([[{"subnet": "10.72.0.0/24"}]]), json!({"nodeName": "empty-node"}));
    empty["cni.dev/valid-attachments"] = json!([]);
    assert!(invoke("GC", &empty, &[]).0);
    h::cleanup_pool(&pool).await;
}

/// Two networks share a pool; container C is on both (eth0 on X, net1 on Y).
/// GC for Y, whose list holds (C, net1), must never release X's (C, eth0).
#[tokio::test]
async fn gc_of_one_network_never_releases_another_networks_lease() {
    let pool = h::unique("gcnet");
    let net = |name: &str| {
        let mut c =
            conf(&pool, json!([[{"subnet": "10.79.0.0/24"}]]), json!({"nodeName": "gc-net-node", "gcGrace": "0s"}));
        c["name"] = json!(name);
        c
    };
    let (x, y) = (net(&format!("{pool}-x")), net(&format!("{pool}-y")));
    let on = |ifname: &'static str| {
        vec![("CNI_CONTAINERID", "c-both"), ("CNI_IFNAME", ifname), ("CNI_NETNS", "/run/netns/x")]
    };
    let (ok, rx, e) = invoke("ADD", &x, &on("eth0"));
    assert!(ok, "{e}");
    assert!(invoke("ADD", &y, &on("net1")).0);
    let mut gc = y.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c-both", "ifname": "net1"}]);
    for _ in 0..3 {
        let (ok, out, err) = invoke("GC", &gc, &[]);
        assert!(ok, "{out} {err}");
    }
    let ep = h::endpoints().await.get(&endpoint_name(&pool, ip_of(&rx))).await.unwrap();
    assert!(ep.metadata.deletion_timestamp.is_none(), "network X's lease is live");
    assert_eq!(ep.spec.network.as_deref(), Some(x["name"].as_str().unwrap()));
    assert_eq!(h::pool_endpoints(&pool).await.len(), 2);
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn gc_honours_finalizers_like_del() {
    let pool = h::unique("gcfin");
    let c = conf(
        &pool,
        json!([[{"subnet": "10.73.0.0/24"}]]),
        json!({"nodeName": "gc-fin", "finalizers": [AGENT], "gcGrace": "0s"}),
    );
    let (ok, r, _) = invoke("ADD", &c, &env("stale"));
    assert!(ok);
    let mut gc = c.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    assert!(invoke("GC", &gc, &[]).0 && invoke("GC", &gc, &[]).0);
    let ep = h::endpoints().await.get(&endpoint_name(&pool, ip_of(&r))).await.unwrap();
    assert!(ep.metadata.deletion_timestamp.is_some(), "GC requested the release");
    assert_eq!(ep.metadata.finalizers.unwrap(), [AGENT], "and the finalizer still gates it");
    h::cleanup_pool(&pool).await;
}

/// containerd turns a STATUS failure into NetworkReady=false, and kubelet
/// then marks the node NotReady: a full pool must not do that.
#[tokio::test]
async fn status_through_bridge_stays_ready_when_the_pool_is_full() {
    let pool = h::unique("status");
    let mut ipam =
        ipam(&pool, json!([[{"subnet": "10.74.0.0/29", "rangeStart": "10.74.0.2", "rangeEnd": "10.74.0.2"}]]));
    ipam["dataDir"] = json!(std::env::temp_dir().join(h::unique("status-data")));
    let bridged =
        json!({"cniVersion": "1.1.0", "name": pool, "type": "bridge", "bridge": "nest0", "ipam": ipam.clone()});
    let dir = NetDir::new(&bridged);
    let netns = Netns::new("ne-st");
    let out = dir.cnitool("status", &netns, &[]);
    assert!(out.status.success(), "healthy STATUS: {}", String::from_utf8_lossy(&out.stderr));

    let direct = json!({"cniVersion": "1.1.0", "name": pool, "type": "netendpoint", "ipam": ipam});
    assert!(invoke("ADD", &direct, &env("fills-pool")).0);
    let (ok, out, _) = invoke("STATUS", &direct, &[]);
    assert!(ok, "a full pool is no reason for NotReady: {out}");
    let out = dir.cnitool("status", &netns, &[]);
    assert!(out.status.success(), "bridge delegates STATUS: {}", String::from_utf8_lossy(&out.stderr));

    // Broken credentials are: code 50 (the spec's STATUS code), not 104.
    let mut broken = bridged.clone();
    broken["ipam"]["kubeconfig"] = json!("/nonexistent/kubeconfig");
    let broken_dir = NetDir::new(&broken);
    let out = broken_dir.cnitool("status", &netns, &[]);
    assert!(!out.status.success());
    let mut direct_broken = direct.clone();
    direct_broken["ipam"]["kubeconfig"] = json!("/nonexistent/kubeconfig");
    let (ok, out, _) = invoke("STATUS", &direct_broken, &[]);
    assert!(!ok && out["code"] == 50, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("/nonexistent/kubeconfig"), "{out}");
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn stuck_finalizers_are_forced_only_when_old_and_needed() {
    let pool = h::unique("force");
    // Two usable IPs: .2 and .3.
    let ranges = json!([[{"subnet": "10.75.0.0/29", "rangeStart": "10.75.0.2", "rangeEnd": "10.75.0.3"}]]);
    // The bound leaves room for the two ADDs below to finish before it passes
    // on a loaded machine: 2 s was too short to call the release young.
    let c = |wait: &str| {
        conf(
            &pool,
            ranges.clone(),
            json!({"finalizers": [AGENT], "forceReleaseAfter": "6s", "waitForRelease": wait, "crossNode": "plugin"}),
        )
    };
    let (_, a, _) = invoke("ADD", &c("0s"), &env("stuck-holder"));
    let stuck_ip = ip_of(&a);
    assert!(invoke("DEL", &c("0s"), &env("stuck-holder")).0);
    let name = endpoint_name(&pool, stuck_ip);

    // A free IP is available: it is taken, and the stuck one is left alone.
    let (ok, b, e) = invoke("ADD", &c("0s"), &env("second"));
    assert!(ok, "{e}");
    assert_ne!(ip_of(&b), stuck_ip);
    // Full now, and the release is younger than forceReleaseAfter: never forced.
    let (ok, out, _) = invoke("ADD", &c("0s"), &env("too-early"));
    assert!(!ok && out["code"] == 100, "{out}");
    let held = h::endpoints().await.get(&name).await.unwrap();
    assert_eq!(held.metadata.finalizers.unwrap(), [AGENT], "a young release is never forced");

    // Once older than forceReleaseAfter, an ADD that needs the IP forces it: two race, one wins.
    // Ages are lower bounds on the server's whole-second clock: up to 2 s late.
    tokio::time::sleep(Duration::from_millis(8500)).await;
    let conf_a = c("0s");
    let conf_b = c("0s");
    let ta = std::thread::spawn(move || invoke("ADD", &conf_a, &env("racer-a")));
    let tb = std::thread::spawn(move || invoke("ADD", &conf_b, &env("racer-b")));
    let (ra, rb) = (ta.join().unwrap(), tb.join().unwrap());
    let winners: Vec<_> = [&ra, &rb].into_iter().filter(|r| r.0).collect();
    assert_eq!(winners.len(), 1, "exactly one racer gets the stuck IP: {ra:?} {rb:?}");
    assert_eq!(ip_of(&winners[0].1), stuck_ip);
    let loser = if ra.0 { &rb } else { &ra };
    assert_eq!(loser.1["code"], 100, "{loser:?}");

    let now = h::endpoints().await.get(&name).await.unwrap();
    assert!(now.spec.container_id.starts_with("racer-"));
    assert!(now.metadata.deletion_timestamp.is_none());

    let forced = h::events_about(&name, "ForcedRelease").await;
    assert!(!forced.is_empty(), "a ForcedRelease event names the endpoint");
    assert!(forced[0].note.contains(AGENT), "the event names the finalizers: {:?}", forced[0].note);
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn a_waiting_add_forces_a_release_once_it_becomes_stuck() {
    let pool = h::unique("forcewait");
    let ranges = json!([[{"subnet": "10.76.0.0/29", "rangeStart": "10.76.0.2", "rangeEnd": "10.76.0.2"}]]);
    let c = conf(
        &pool,
        ranges,
        json!({"finalizers": [AGENT], "forceReleaseAfter": "2s", "waitForRelease": "15s", "crossNode": "plugin"}),
    );
    let (_, a, _) = invoke("ADD", &c, &env("old"));
    assert!(invoke("DEL", &c, &env("old")).0);
    let (ok, b, e) = invoke("ADD", &c, &env("new"));
    assert!(ok, "{e}");
    assert_eq!(ip_of(&a), ip_of(&b));
    h::cleanup_pool(&pool).await;
}

/// A private API server without the CRD, stopped half-way: STATUS and ADD
/// report the CRD missing, then the API server unreachable.
#[tokio::test]
async fn status_and_add_without_crd_and_without_server() {
    let mut server = h::OwnServer::start();
    let dir = server.dir.clone();
    let pool = h::unique("nocrd");
    let mut c = conf(&pool, json!([[{"subnet": "10.78.0.0/24"}]]), json!({}));
    c["ipam"]["kubeconfig"] = json!(dir.join("kubeconfig"));
    c["ipam"]["dataDir"] = json!(dir.join("data"));
    let node = h::kubectl_with(
        &dir.join("kubeconfig"),
        &["create", "-f", h::repo_root().join("tests/fixtures/node-a.yaml").to_str().unwrap()],
    );
    assert!(node.status.success(), "{}", String::from_utf8_lossy(&node.stderr));

    let (ok, out, err) = invoke("STATUS", &c, &[]);
    assert!(!ok && out["code"] == 50, "{out} {err}");
    assert!(out["msg"].as_str().unwrap().contains("CRD"), "{out}");
    let (ok, out, err) = invoke("ADD", &c, &env("no-crd"));
    assert!(!ok && out["code"] == 103, "{out} {err}");
    assert!(!err.contains("panicked"));

    server.stop();
    // One blip must not mark the node NotReady: STATUS stays ready within its window.
    let (ok, out, err) = invoke("STATUS", &c, &[]);
    assert!(ok, "{out} {err}");
    let (ok, out, _) = invoke("ADD", &c, &env("no-server"));
    assert!(!ok && out["code"] == 101, "{out}");
    let (ok, out, _) = invoke("DEL", &c, &env("no-server"));
    assert!(!ok && out["code"] == 101, "DEL with the API server down is an error the runtime retries: {out}");
}
