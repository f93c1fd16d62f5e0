//! Invariant 11 against the real API server, by its own counters
//! (`apiserver_request_total`, `apiserver_cache_list_fetched_objects_total`):
//! the plugin's paths list no lease and make the watch cache scan nothing.
//! An ADD into a 90 %-full pool, the full-pool wait, DEL and CHECK with the
//! node's record, STATUS, and ADDs with the controller stopped; a DEL whose
//! record was lost does list, once, and says so. And a storm during which
//! the controller is paused and resumed, so that its summaries fall behind:
//! never two holders of one address.
//!
//! The tests of this file run one at a time, so that the server's counters
//! move only for the plugin invocations under measurement.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube::api::PostParams;
use netendpoint_crd::endpoint_name;
use netendpoint_tests::{self as h, ControllerProc, LeaseScans, invoke};
use serde_json::{Value, json};

use h::attach_env as env;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const FIN: &str = "test.example/no-lists";

/// A net conf for `pool` over `range` on its own node and data directory.
fn conf(pool: &str, range: Value, extra: Value) -> (Value, h::TempDir) {
    let dir = h::TempDir::new("no-lists");
    let node = h::unique("no-lists-node");
    let mut ipam = json!({"nodeName": node, "dataDir": dir.join("data"), "log": {"level": "info", "file": dir.join("plugin.log")}});
    for (k, v) in extra.as_object().unwrap() {
        ipam[k] = v.clone();
    }
    (h::net_conf(pool, json!([[range]]), ipam), dir)
}

/// Creates leases of `pool` (on another node) at `ips`.
async fn fill(pool: &str, ips: impl IntoIterator<Item = String>, finalizers: &[&str]) {
    let api = h::endpoints().await;
    for ip in ips {
        let ep = h::lease(pool, &ip, &format!("fill-{ip}"), "node-a", finalizers);
        api.create(&PostParams::default(), &ep).await.unwrap();
    }
}

/// Starts a controller for `pool` and waits for its pool summary.
async fn summarised(pool: &str) -> ControllerProc {
    let ctl = ControllerProc::start(&h::unique("ctl-nolist"), &h::unique("ctl-nolist"), &[pool], &[]);
    ctl.wait_leader().await;
    h::wait_for_summary(pool).await;
    ctl
}

/// Runs `f`, and returns its result with what the server did for leases meanwhile.
async fn measured<T>(f: impl FnOnce() -> T) -> (T, LeaseScans) {
    let before = LeaseScans::now().await;
    let out = f();
    (out, LeaseScans::since(before).await)
}

fn assert_no_scan(what: &str, s: LeaseScans) {
    println!("{what}: {s:?}");
    assert_eq!((s.lists, s.fetched), (0.0, 0.0), "{what}: the API server listed or scanned leases");
}

#[tokio::test]
async fn an_add_into_a_90_percent_full_pool_lists_nothing() {
    let _serial = SERIAL.lock().await;
    let pool = h::unique("nolist-ninety");
    // 10.84.0.0/24: 253 usable; 228 leased, scattered.
    let taken: Vec<String> = (2..=254).filter(|i| i % 10 != 3).take(228).map(|i| format!("10.84.0.{i}")).collect();
    fill(&pool, taken, &[]).await;
    let _ctl = summarised(&pool).await;
    let (c, dir) = conf(&pool, json!({"subnet": "10.84.0.0/24"}), json!({}));
    let (oks, scans) = measured(|| (0..20).filter(|i| invoke("ADD", &c, &env(&format!("ninety-{i}"))).0).count()).await;
    assert_eq!(oks, 20);
    assert_no_scan("20 ADDs into a 90 %-full /24", scans);
    let per_add = h::requests_per_add(&std::fs::read_to_string(dir.join("plugin.log")).unwrap());
    let mean = f64::from(per_add.iter().sum::<u32>()) / per_add.len() as f64;
    println!("API requests per ADD at 90 %: mean {mean:.2}, first {} (node check, cold hint)", per_add[0]);
    assert!(mean <= 2.5, "{per_add:?}");
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn the_full_pool_wait_lists_nothing_small_or_large() {
    let _serial = SERIAL.lock().await;
    // 62 addresses (read name by name) and 125 (summaries): each full, one release in progress.
    for (subnet, usable, octet) in [("10.85.0.0/26", 62, 85), ("10.86.0.0/25", 125, 86)] {
        let pool = h::unique("nolist-wait");
        let ips: Vec<String> = (2..2 + usable).map(|i| format!("10.{octet}.0.{i}")).collect();
        fill(&pool, ips.clone(), &[FIN]).await;
        let _ctl = if usable > 64 { Some(summarised(&pool).await) } else { None };
        let victim = endpoint_name(&pool, ips[7].parse().unwrap());
        h::endpoints().await.delete(&victim, &Default::default()).await.unwrap();
        let (c, _dir) = conf(&pool, json!({"subnet": subnet}), json!({"waitForRelease": "20s"}));
        let ack = {
            let victim = victim.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(2)).await;
                h::remove_finalizer(&victim, FIN).await;
            })
        };
        let before = LeaseScans::now().await;
        let started = Instant::now();
        let add = tokio::task::spawn_blocking(move || invoke("ADD", &c, &env("waiter")));
        let (ok, r, e) = add.await.unwrap();
        let scans = LeaseScans::since(before).await;
        ack.await.unwrap();
        assert!(ok, "{e}");
        assert_eq!(h::first_ip(&r).to_string(), ips[7]);
        assert!(started.elapsed() >= Duration::from_secs(2));
        assert_no_scan(&format!("the full-pool wait in a set of {usable}"), scans);
        h::cleanup_pool(&pool).await;
    }
}

#[tokio::test]
async fn del_check_and_status_list_nothing_and_a_lost_record_lists_once_and_says_so() {
    let _serial = SERIAL.lock().await;
    let pool = h::unique("nolist-del");
    let (c, dir) = conf(&pool, json!({"subnet": "10.87.0.0/24"}), json!({}));
    let (ok, r, e) = invoke("ADD", &c, &env("kept"));
    assert!(ok, "{e}");
    let mut check = c.clone();
    check["prevResult"] = r.clone();
    let ((ok_check, ok_status, ok_del), scans) = measured(|| {
        (invoke("CHECK", &check, &env("kept")).0, invoke("STATUS", &c, &[]).0, invoke("DEL", &c, &env("kept")).0)
    })
    .await;
    assert!(ok_check && ok_status && ok_del);
    assert_no_scan("CHECK, STATUS and DEL with the node's record", scans);

    // The record is lost (another data directory): DEL lists by container ID, once, and logs why.
    assert!(invoke("ADD", &c, &env("orphaned")).0);
    let mut lost = c.clone();
    lost["ipam"]["dataDir"] = json!(dir.join("elsewhere"));
    let (ok, scans) = measured(|| invoke("DEL", &lost, &env("orphaned")).0).await;
    assert!(ok);
    println!("DEL without its record: {scans:?}");
    assert_eq!(scans.lists, 1.0, "one list by container ID");
    let log = std::fs::read_to_string(dir.join("plugin.log")).unwrap();
    assert!(log.contains("no complete node-local record of the attachment"), "{log}");
    assert!(h::pool_endpoints(&pool).await.is_empty(), "released all the same");
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn with_the_controller_stopped_adds_list_nothing() {
    let _serial = SERIAL.lock().await;
    let pool = h::unique("nolist-stopped");
    let taken: Vec<String> = (2..=254).filter(|i| i % 2 == 0).map(|i| format!("10.88.0.{i}")).collect();
    fill(&pool, taken, &[]).await;
    // A controller summarised the pool once, then stopped.
    let mut ctl = summarised(&pool).await;
    ctl.kill();
    let (c, dir) = conf(&pool, json!({"subnet": "10.88.0.0/24"}), json!({}));
    let (oks, scans) =
        measured(|| (0..10).filter(|i| invoke("ADD", &c, &env(&format!("stopped-{i}"))).0).count()).await;
    assert_eq!(oks, 10);
    assert_no_scan("10 ADDs at 50 % with the controller stopped", scans);
    // A pool no controller ever summarised: probing by create.
    let never = h::unique("nolist-never");
    let taken: Vec<String> = (2..=254).filter(|i| i % 2 == 0).map(|i| format!("10.89.0.{i}")).collect();
    fill(&never, taken, &[]).await;
    let (c2, _dir2) = conf(&never, json!({"subnet": "10.89.0.0/24"}), json!({}));
    let (oks, scans) = measured(|| (0..10).filter(|i| invoke("ADD", &c2, &env(&format!("never-{i}"))).0).count()).await;
    assert_eq!(oks, 10);
    assert_no_scan("10 ADDs at 50 % into a pool no controller summarised", scans);
    let log = std::fs::read_to_string(dir.join("plugin.log")).unwrap();
    let refused: usize = log.matches("refused=").count();
    println!("with the controller stopped: {refused} ADDs logged refused creates");
    h::cleanup_pool(&pool).await;
    h::cleanup_pool(&never).await;
}

/// Four nodes churn sandboxes in a 70-address set that other leases fill to
/// 60; the controller is paused for 4 s in the middle and resumed, so its
/// summaries fall behind and then catch up. A client watching the pool sees
/// one holder per address at every moment, and the plugin lists nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_with_the_controller_paused_never_gives_an_address_twice() {
    let _serial = SERIAL.lock().await;
    let pool = h::unique("nolist-storm");
    let ips: Vec<String> = (10..70).map(|i| format!("10.90.0.{i}")).collect();
    fill(&pool, ips, &[]).await;
    let ctl = summarised(&pool).await;
    let range = json!({"subnet": "10.90.0.0/24", "rangeStart": "10.90.0.10", "rangeEnd": "10.90.0.79"});

    let stop = Arc::new(AtomicBool::new(false));
    let watch = h::PoolWatch::start(&pool).await;
    let before = LeaseScans::now().await;
    let mut workers = Vec::new();
    for n in 0..4 {
        let (c, dir) = conf(&pool, range.clone(), json!({"waitForRelease": "10s"}));
        let stop = stop.clone();
        workers.push(std::thread::spawn(move || {
            let _dir = dir;
            let mut live: Vec<String> = Vec::new();
            let mut cycles = 0;
            let mut failed = 0;
            while !stop.load(Ordering::Relaxed) {
                let cid = format!("storm-{n}-{cycles}");
                if invoke("ADD", &c, &env(&cid)).0 {
                    live.push(cid);
                } else {
                    failed += 1;
                }
                if live.len() > 2 {
                    let old = live.remove(0);
                    assert!(invoke("DEL", &c, &env(&old)).0);
                }
                cycles += 1;
            }
            (cycles, failed)
        }));
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    ctl.pause();
    tokio::time::sleep(Duration::from_secs(4)).await;
    ctl.resume();
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, Ordering::Relaxed);
    let mut cycles = 0;
    let mut failed = 0;
    for w in workers {
        let (c, f) = w.join().unwrap();
        cycles += c;
        failed += f;
    }
    let scans = LeaseScans::since(before).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let events = watch.seen();
    let mut live: BTreeMap<String, String> = BTreeMap::new();
    for h::Seen { kind, name, ip, .. } in &events {
        match *kind {
            "ADDED" => {
                if let Some(prev) = live.insert(ip.clone(), name.clone()) {
                    panic!("{ip}: {name} added while {prev} held it");
                }
            }
            "DELETED" => {
                live.remove(ip);
            }
            _ => {}
        }
    }
    println!(
        "storm: {cycles} ADDs by 4 nodes, {failed} exhausted, controller paused 4 s: 0 addresses given twice; {scans:?}"
    );
    assert!(cycles > 20, "the storm ran");
    assert_no_scan("the storm", scans);
    stop.store(true, Ordering::Relaxed);
    h::cleanup_pool(&pool).await;
}
