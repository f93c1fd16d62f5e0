//! The full-pool queue against the real API server, the controller and the
//! plugin binary (invariant 13): ADDs from several nodes wait in a full
//! pool, releases come one at a time, and each release goes to one waiter,
//! the one that arrived first, at a cost per waiter that does not grow with
//! its place in the queue.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DeleteParams, ListParams, WatchEvent, WatchParams};
use netendpoint_crd::NetworkEndpointNeed;
use netendpoint_tests as h;
use serde_json::{Value, json};

const FIN: &str = "test.example/slow-agent";

/// Every queue entry of `pool` in the order the API server created them
/// (a watch sends ADDED events in etcd's order: the queue's arrival order),
/// as the waiting sandbox's container ID.
struct Arrivals {
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Arrivals {
    async fn start(pool: &str) -> Self {
        let api: Api<NetworkEndpointNeed> = Api::all(h::client().await);
        let mut rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let (out, pool) = (seen.clone(), pool.to_string());
        let task = tokio::spawn(async move {
            loop {
                let mut s = api.watch(&WatchParams::default().timeout(5), &rv).await.unwrap().boxed();
                while let Some(ev) = s.next().await {
                    match ev.unwrap() {
                        WatchEvent::Added(n) => {
                            rv = n.metadata.resource_version.clone().unwrap();
                            if n.spec.pool == pool {
                                out.lock().unwrap().push(n.spec.container_id.clone().unwrap_or_default());
                            }
                        }
                        WatchEvent::Modified(n) | WatchEvent::Deleted(n) => {
                            rv = n.metadata.resource_version.unwrap();
                        }
                        WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                        WatchEvent::Error(e) => panic!("watch of the queue entries: {e:?}"),
                    }
                }
            }
        });
        Self { seen, task }
    }

    fn order(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Arrivals {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One waiting ADD's outcome.
struct Served {
    ok: bool,
    result: Value,
    log: String,
    done: Instant,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// 20 waiting ADDs from 4 nodes in a full pool of 20 addresses whose leases
/// a slow agent releases one at a time (delete, then its finalizer 150 ms
/// later, every 400 ms): every waiter is served, in the order its queue
/// entry was created, each by exactly one release, and what a waiter costs
/// does not grow with its place.
#[tokio::test]
async fn waiters_in_a_full_pool_are_served_in_arrival_order() {
    const N: usize = 20;
    let pool = h::unique("q-order");
    let net = "10.84.0";
    let ranges = json!([[{"subnet": format!("{net}.0/24"), "rangeStart": format!("{net}.2"), "rangeEnd": format!("{net}.{}", N + 1)}]]);
    h::ensure_node("node-a");
    let mut held = Vec::new();
    // .1 is the gateway: the pool is .2 to .21.
    for host in 2..=N + 1 {
        let ep =
            h::LeaseFixture::new(&pool, &format!("{net}.{host}")).container(&format!("held-{host}")).finalizers(&[FIN]);
        held.push(ep.create().await.metadata.name.unwrap());
    }
    let ctl =
        h::ControllerProc::start(&h::unique("ctl-q"), &h::unique("ctl-q"), &[&pool], &["--pod-gone-grace", "off"]);
    ctl.wait_leader().await;
    h::wait_for_summary(&pool).await;

    let nodes = ["node-q1", "node-q2", "node-q3", "node-q4"];
    let dir = h::TempDir::new("queue");
    let logs: Vec<_> = nodes.iter().map(|n| dir.join(&format!("{n}.log"))).collect();
    let confs: BTreeMap<&str, Value> = nodes
        .iter()
        .zip(&logs)
        .map(|(n, log)| {
            let ipam = json!({"nodeName": n, "waitForRelease": "40s", "dataDir": dir.join(n), "log": {"level": "info", "file": log}});
            (*n, h::net_conf(&pool, ranges.clone(), ipam))
        })
        .collect();
    let arrivals = Arrivals::start(&pool).await;
    let watch = h::PoolWatch::start(&pool).await;

    // The waiters start 100 ms apart, round robin over the nodes.
    let mut pods = Vec::new();
    let mut adds = Vec::new();
    for i in 0..N {
        let node = nodes[i % nodes.len()];
        let (name, uid) = h::waiting_pod("q-wait", node).await;
        pods.push(name.clone());
        let (conf, cid) = (confs[node].clone(), format!("w{i}"));
        adds.push(std::thread::spawn(move || {
            let (ok, result, log) = h::invoke("ADD", &conf, &h::pod_env(&cid, &h::pod_args(&name, &uid)));
            (cid, Served { ok, result, log, done: Instant::now() })
        }));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let queued = Instant::now();
    while arrivals.order().len() < N {
        if let Some(i) = adds.iter().position(std::thread::JoinHandle::is_finished) {
            let (cid, s) = adds.swap_remove(i).join().unwrap();
            panic!("waiter {cid} ended before any release: {} {}", s.result, s.log);
        }
        assert!(queued.elapsed() < Duration::from_secs(30), "entries after 30 s: {:?}", arrivals.order());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The slow agent: one release every 400 ms, each lease's finalizer
    // removed 150 ms after its deletion began.
    let api = h::endpoints().await;
    let mut released_at: HashMap<String, Instant> = HashMap::new();
    for (k, name) in held.iter().enumerate() {
        api.delete(name, &DeleteParams::default()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        h::remove_finalizer(name, FIN).await;
        released_at.insert(format!("{net}.{}", k + 2), Instant::now());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let served: BTreeMap<String, Served> =
        tokio::task::spawn_blocking(move || adds.into_iter().map(|a| a.join().unwrap()).collect()).await.unwrap();
    let seen = watch.stop().await;

    for (cid, s) in &served {
        assert!(s.ok, "waiter {cid} was not served: {} {}", s.result, s.log);
    }
    let ip_of: HashMap<&str, String> =
        served.iter().map(|(c, s)| (c.as_str(), h::first_ip(&s.result).to_string())).collect();
    let mut ips: Vec<&String> = ip_of.values().collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), N, "each release went to exactly one waiter: {ip_of:?}");

    // Served order: the order the API server created the waiters' leases.
    let created: Vec<&str> = seen
        .iter()
        .filter(|e| e.kind == "ADDED")
        .filter_map(|e| ip_of.iter().find(|(_, ip)| **ip == e.ip).map(|(c, _)| *c))
        .collect();
    let arrived = arrivals.order();
    assert_eq!(arrived.len(), N, "one entry per waiter: {arrived:?}");
    let place = |order: &[&str], cid: &str| order.iter().position(|c| *c == cid).unwrap();
    let arrived_refs: Vec<&str> = arrived.iter().map(String::as_str).collect();
    let mut overtakings = Vec::new();
    for (i, a) in arrived_refs.iter().enumerate() {
        for b in &arrived_refs[i + 1..] {
            if place(&created, b) < place(&created, a) {
                overtakings.push(format!("{b} before {a}"));
            }
        }
    }
    let log_text: String = logs.iter().map(|l| std::fs::read_to_string(l).unwrap_or_default()).collect();
    let requests = h::requests_per_add(&log_text);
    let costliest = log_text
        .lines()
        .filter(|l| l.contains("API requests of this ADD"))
        .max_by_key(|l| h::requests_per_add(l).first().copied().unwrap_or(0))
        .map(|l| l.split("by=").nth(1).unwrap_or(l).to_string())
        .unwrap_or_default();
    let mut reuse: Vec<Duration> =
        served.iter().map(|(c, s)| s.done.saturating_duration_since(released_at[&ip_of[c.as_str()]])).collect();
    reuse.sort();
    println!(
        "{N} waiters from {} nodes, one release every 400 ms: arrived {arrived:?}, served {created:?}, {} overtaking(s); \
         requests per waiter mean {:.1}, max {} ({costliest}); release -> waiter served p50 {} ms, max {} ms",
        nodes.len(),
        overtakings.len(),
        f64::from(requests.iter().sum::<u32>()) / requests.len().max(1) as f64,
        requests.iter().max().copied().unwrap_or(0),
        percentile(&reuse, 0.5).as_millis(),
        reuse.last().unwrap().as_millis(),
    );
    assert!(overtakings.is_empty(), "served out of arrival order: {overtakings:?}\ncontroller:\n{}", ctl.log());
    assert_eq!(requests.len(), N, "every ADD tallied its requests");
    // A waiter's cost does not grow with the pool or its place (356 on
    // average before the queue): its entry, a watch of it per status write
    // of the controller (its arrival, its promise) or renewal, the promised
    // release read and watched, its create.
    assert!(requests.iter().all(|r| *r <= 24), "requests per waiter: {requests:?}");
    assert!(ctl.log().contains("address promised to a waiting ADD"), "{}", ctl.log());

    let pods_api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(h::client().await, "default");
    for p in pods {
        let _ = pods_api.delete(&p, &DeleteParams::default().grace_period(0)).await;
    }
    h::cleanup_pool(&pool).await;
}
