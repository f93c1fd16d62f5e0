//! Sticky IPs for StatefulSet pods, against the real API server: a real
//! StatefulSet and Pod objects (created here with their ownerReference, as
//! the StatefulSet controller would; there is no kube-controller-manager),
//! the plugin run as a separate process per CNI call, and the reference
//! agent holding its finalizer with teardown delays.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use netendpoint_crd::{FINALIZER_STICKY_HOLD, LABEL_POOL, NetworkEndpoint, label_value};
use netendpoint_tests::{self as h, AgentOpts, AgentProc, CNI_SERVICE_ACCOUNT, DEPLOY_NAMESPACE};
use serde_json::json;
use watcher_example::eventlog::analyze;

/// The tests of this file share the API server's request counters: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const NS: &str = "default";
const FIN: &str = "agent.example.com/sticky";
const RECREATIONS: usize = 200;

/// Creates StatefulSet `name` with `replicas`.
async fn statefulset(name: &str, replicas: i32) -> StatefulSet {
    let sts: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas, "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "example.invalid/c"}]}
            }
        }
    }))
    .unwrap();
    ensure_default_service_account().await;
    Api::<StatefulSet>::namespaced(h::client().await, NS).create(&PostParams::default(), &sts).await.unwrap()
}

/// The test server runs no controller-manager: the ServiceAccount admission needs `default`.
async fn ensure_default_service_account() {
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(h::client().await, NS);
    let sa = serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
    let _ = sas.create(&PostParams::default(), &sa).await;
}

/// Creates Pod `<sts>-<ordinal>` owned by `sts` (as its controller); returns its UID.
async fn pod_of(sts: &StatefulSet, ordinal: u32) -> String {
    let name = sts.metadata.name.clone().unwrap();
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{name}-{ordinal}"), "namespace": NS, "labels": {"app": name},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
                "uid": sts.metadata.uid.clone().unwrap(), "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {"automountServiceAccountToken": false, "containers": [{"name": "c", "image": "example.invalid/c"}]}
    }))
    .unwrap();
    let pods = Api::<Pod>::namespaced(h::client().await, NS);
    pods.create(&PostParams::default(), &pod).await.unwrap().metadata.uid.unwrap()
}

/// Creates a Pod with no owner; returns its UID.
async fn lone_pod(name: &str) -> String {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
        "spec": {"automountServiceAccountToken": false, "containers": [{"name": "c", "image": "example.invalid/c"}]}
    }))
    .unwrap();
    ensure_default_service_account().await;
    let pods = Api::<Pod>::namespaced(h::client().await, NS);
    pods.create(&PostParams::default(), &pod).await.unwrap().metadata.uid.unwrap()
}

/// Deletes Pod `name` at once (no kubelet here to finish a graceful delete).
async fn delete_pod(name: &str) {
    let pods = Api::<Pod>::namespaced(h::client().await, NS);
    let _ = pods.delete(name, &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() }).await;
    for _ in 0..200 {
        if pods.get_opt(name).await.unwrap().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("pod {name} not gone");
}

/// Recreates Pod `<sts>-<ordinal>` (delete, create): a new incarnation; returns its UID.
async fn recreate(sts: &StatefulSet, ordinal: u32) -> String {
    delete_pod(&format!("{}-{ordinal}", sts.metadata.name.as_deref().unwrap())).await;
    pod_of(sts, ordinal).await
}

/// CNI ADD of `container` for Pod `pod` (UID `uid`): Ok(ip) or Err((code, message)).
fn add(conf: &serde_json::Value, container: &str, pod: &str, uid: &str) -> Result<String, (u64, String)> {
    let args = format!("K8S_POD_NAMESPACE={NS};K8S_POD_NAME={pod};K8S_POD_UID={uid}");
    let (ok, out, err) =
        h::invoke("ADD", conf, &[("CNI_CONTAINERID", container), ("CNI_IFNAME", "eth0"), ("CNI_ARGS", &args)]);
    if ok {
        Ok(h::first_ip(&out).to_string())
    } else {
        Err((out["code"].as_u64().unwrap_or(0), format!("{out} {}", err.lines().last().unwrap_or_default())))
    }
}

/// Watch events of one pool as seen by a client: (type, name, lease UID, Pod name).
type Seen = Arc<Mutex<Vec<(&'static str, String, String, String)>>>;

/// Records every watch event of `pool` until `stop`.
fn watch_pool(pool: &str, stop: Arc<AtomicBool>) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let (out, pool) = (seen.clone(), pool.to_string());
    let task = tokio::spawn(async move {
        let api = h::endpoints().await;
        let selector = format!("{LABEL_POOL}={}", label_value(&pool));
        let mut rv =
            api.list(&ListParams::default().labels(&selector)).await.unwrap().metadata.resource_version.unwrap();
        while !stop.load(Ordering::Relaxed) {
            let wp = WatchParams::default().labels(&selector).timeout(5);
            let mut s = api.watch(&wp, &rv).await.unwrap().boxed();
            while let Some(ev) = s.next().await {
                let (kind, ep): (&'static str, NetworkEndpoint) = match ev.unwrap() {
                    WatchEvent::Added(ep) => ("ADDED", ep),
                    WatchEvent::Modified(ep) => ("MODIFIED", ep),
                    WatchEvent::Deleted(ep) => ("DELETED", ep),
                    WatchEvent::Bookmark(b) => {
                        rv = b.metadata.resource_version;
                        continue;
                    }
                    WatchEvent::Error(e) => panic!("watch error {e:?}"),
                };
                rv = ep.metadata.resource_version.clone().unwrap();
                let pod = ep.spec.pod.map(|p| p.name).unwrap_or_default();
                out.lock().unwrap().push((kind, ep.metadata.name.unwrap(), ep.metadata.uid.unwrap(), pod));
            }
        }
    });
    (seen, task)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Requests to the resources an ADD touches (NetworkEndpoints, Pods, Nodes),
/// watches excluded, from the API server's `apiserver_request_total`.
async fn requests() -> f64 {
    let client = h::client().await;
    let text = client.request_text(http::Request::get("/metrics").body(Vec::new()).unwrap()).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| {
            ["resource=\"networkendpoints\"", "resource=\"pods\"", "resource=\"nodes\""].iter().any(|r| l.contains(r))
                && !l.contains("verb=\"WATCH\"")
                && l.contains("subresource=\"\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// 200 recreations of one StatefulSet pod in a full pool, with an agent
/// that holds its finalizer and tears down after up to 1 s, and five other
/// pods deleting and recreating themselves all along, competing for every
/// IP that is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_statefulset_pod_keeps_its_ip_across_200_recreations_in_a_full_pool_in_order() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let node = h::unique("sticky-node");
    let pool = h::unique("sticky");
    let range = json!({"subnet": "10.91.0.0/24", "rangeStart": "10.91.0.10", "rangeEnd": "10.91.0.15"});
    let mut conf = h::agent_net_conf(&pool, range, &node, &[FIN], "20s");
    conf["ipam"]["sticky"] = json!({"waitForOld": "30s"});
    let agent =
        AgentProc::start(AgentOpts { naive: true, delay: "0ms..1000ms".into(), ..AgentOpts::new(&node, Some(FIN)) });
    let stop = Arc::new(AtomicBool::new(false));
    let (seen, watcher) = watch_pool(&pool, stop.clone());

    let sts = statefulset(&h::unique("web"), 1).await;
    let pod = format!("{}-0", sts.metadata.name.as_deref().unwrap());
    let mut uid = pod_of(&sts, 0).await;
    let mut container = format!("{pool}-g0");
    let mut ip = add(&conf, &container, &pod, &uid).unwrap();
    let mut lost = Vec::new();

    // Five other pods fill the pool and churn: each cycle deletes its
    // sandbox and creates the next at the same moment.
    let competitors_got: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut competitors = Vec::new();
    for slot in 0..5 {
        let (conf, pool, stop, got) = (conf.clone(), pool.clone(), stop.clone(), competitors_got.clone());
        competitors.push(std::thread::spawn(move || {
            let cid = |g: usize| format!("{pool}-c{slot}-g{g}");
            let pod = format!("other-{slot}");
            got.lock().unwrap().push(h::cni_add_retrying(&conf, &cid(0), &pod, 200).ip);
            let mut g = 0;
            while !stop.load(Ordering::Relaxed) {
                g += 1;
                let (c, old) = (conf.clone(), cid(g - 1));
                let del = std::thread::spawn(move || h::cni_del(&c, &old));
                got.lock().unwrap().push(h::cni_add_retrying(&conf, &cid(g), &pod, 400).ip);
                del.join().unwrap();
            }
            g
        }));
    }

    let mut times = Vec::new();
    let mut retries = 0;
    for g in 1..=RECREATIONS {
        uid = recreate(&sts, 0).await;
        // Under kubelet the new sandbox's ADD may come before the old one's DEL.
        let (c, old, delay) = (conf.clone(), container.clone(), fastrand::u64(0..200));
        let del = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(delay));
            h::cni_del(&c, &old);
        });
        container = format!("{pool}-g{g}");
        let t = Instant::now();
        let got = loop {
            match add(&conf, &container, &pod, &uid) {
                Ok(ip) => break ip,
                Err((11, _)) if retries < 20 => retries += 1,
                Err(e) => panic!("recreation {g}: {e:?}"),
            }
        };
        times.push(t.elapsed());
        if got != ip {
            // Taken by another pod in the gap between the hold's end and the
            // new create (docs/sticky-ips.md, "The remaining race").
            lost.push((g, ip.clone(), got.clone()));
            ip = got;
        }
        del.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let cycles: usize = competitors.into_iter().map(|c| c.join().unwrap()).sum();
    h::wait_converged(&agent, &[&pool], "after the recreations").await;
    watcher.await.unwrap();

    // The agent's own log: no rule lost, every handover in order.
    let a = analyze(&agent.events());
    assert_eq!(a.lost_rules.len(), 0, "{:?}", a.lost_rules);
    assert_eq!(a.out_of_order().count(), 0, "a new holder's add came before the old holder's remove");
    let sticky_handovers = a.handovers.iter().filter(|h| h.ip.to_string() == ip).count();
    assert!(sticky_handovers > 0, "the sticky IP was handed over");
    // A client's watch of the pool: on every name, ADDED(n) … DELETED(n)
    // strictly alternate (DELETED of the old holder before ADDED of the
    // next), and the sticky IP went to another pod only in a reported loss.
    let seen = seen.lock().unwrap().clone();
    let mut live: BTreeMap<String, String> = BTreeMap::new();
    let mut sticky_adds = 0;
    for (kind, n, lease_uid, holder) in &seen {
        match *kind {
            "ADDED" => {
                if let Some(prev) = live.insert(n.clone(), lease_uid.clone()) {
                    panic!("{n}: ADDED {lease_uid} before DELETED {prev}");
                }
                sticky_adds += usize::from(holder == &pod);
            }
            "DELETED" => assert_eq!(live.remove(n).as_ref(), Some(lease_uid), "{n}"),
            _ => assert_eq!(live.get(n), Some(lease_uid), "{n}"),
        }
    }
    assert_eq!(sticky_adds, RECREATIONS + 1, "the first ADD and every recreation of the sticky pod");
    assert!(lost.len() * 10 <= RECREATIONS, "the gap race is rare: {lost:?}");

    times.sort();
    println!(
        "sticky: {RECREATIONS} recreations in a full pool; recreation ADD p50 {} ms p99 {} ms max {} ms; \
         {retries} retries (code 11); competitor cycles {cycles}; lost rules 0; out of order 0; \
         IP lost in the gap {} times {lost:?}; {:.1} s",
        percentile(&times, 0.5).as_millis(),
        percentile(&times, 0.99).as_millis(),
        times.last().unwrap().as_millis(),
        lost.len(),
        started.elapsed().as_secs_f64()
    );
    delete_pod(&pod).await;
    h::cleanup_pool(&pool).await;
}

/// API calls per ADD, counted at the API server: with `ipam.sticky` on, a
/// non-sticky Pod's ADD costs exactly one more request (the Pod GET).
#[tokio::test]
async fn with_sticky_on_a_non_sticky_add_costs_exactly_one_more_request() {
    let _serial = SERIAL.lock().await;
    const N: usize = 10;
    let node = h::unique("sticky-count");
    let pool = h::unique("sticky-count");
    let range = json!({"subnet": "10.92.0.0/24"});
    let plain = h::agent_net_conf(&pool, range, &node, &[], "5s");
    let mut sticky = plain.clone();
    sticky["ipam"]["sticky"] = json!({});
    // Warm up: the node check (one GET per node, ever).
    add(&plain, &h::unique("warm"), "warm", "u-warm").unwrap();

    let mut per_add = Vec::new();
    for (conf, what) in [(&plain, "sticky off"), (&sticky, "sticky on, Pod without a sticky owner")] {
        let pods: Vec<(String, String)> = futures::future::join_all((0..N).map(|i| async move {
            let name = h::unique(&format!("lone-{i}"));
            let uid = lone_pod(&name).await;
            (name, uid)
        }))
        .await;
        let before = requests().await;
        for (name, uid) in &pods {
            add(conf, &h::unique("c"), name, uid).unwrap();
        }
        let calls = (requests().await - before) / N as f64;
        println!("API calls per ADD, {what}: {calls:.2}");
        per_add.push(calls);
        for (name, _) in &pods {
            delete_pod(name).await;
        }
    }
    assert_eq!(per_add[0], 1.0, "a first ADD in a pool with room is one create");
    assert_eq!(per_add[1] - per_add[0], 1.0, "the one extra request is the Pod GET");

    // A sticky Pod: its first ADD, and a recreation (old lease held, no agent).
    let sts = statefulset(&h::unique("count"), 1).await;
    let pod = format!("{}-0", sts.metadata.name.as_deref().unwrap());
    let uid = pod_of(&sts, 0).await;
    let before = requests().await;
    let first = h::unique("s");
    add(&sticky, &first, &pod, &uid).unwrap();
    let first_calls = requests().await - before;
    h::cni_del(&sticky, &first);
    let uid = recreate(&sts, 0).await;
    let before = requests().await;
    add(&sticky, &h::unique("s"), &pod, &uid).unwrap();
    let again_calls = requests().await - before;
    println!(
        "API calls per ADD, sticky Pod: first {first_calls} (Pod GET, identity list, create), \
         recreation {again_calls} (Pod GET, identity list, hold patch, create)"
    );
    assert_eq!(first_calls, 3.0);
    assert_eq!(again_calls, 4.0);
    delete_pod(&pod).await;
    h::cleanup_pool(&pool).await;
}

/// The handover across nodes under the deployed policies: the new
/// incarnation lands on another node, whose plugin identity may end the
/// hold of the old node's lease, and only once the hold is its last finalizer.
#[tokio::test]
async fn the_hold_is_handed_over_across_nodes_under_the_node_bound_identities() {
    let _serial = SERIAL.lock().await;
    h::apply_deploy();
    let dir = h::TempDir::new("sticky-trust");
    let pool = h::unique("sticky-trust");
    let mut confs = Vec::new();
    for n in ["a", "b"] {
        let node = h::unique(&format!("sticky-{n}"));
        h::ensure_node(&node);
        let kc = dir.join(&format!("{n}.kubeconfig"));
        h::node_bound_kubeconfig(DEPLOY_NAMESPACE, CNI_SERVICE_ACCOUNT, &node, &kc);
        confs.push(h::net_conf(
            &pool,
            json!([[{"subnet": "10.93.0.0/29"}]]),
            json!({
                "crossNode": "controller", "kubeconfig": kc, "nodeName": node, "dataDir": dir.join(&format!("data-{n}")),
                "finalizers": [FIN], "sticky": {"waitForOld": "3s"},
            }),
        ));
    }
    let sts = statefulset(&h::unique("trust"), 1).await;
    let pod = format!("{}-0", sts.metadata.name.as_deref().unwrap());
    let uid = pod_of(&sts, 0).await;
    let old = h::unique("on-a");
    let ip = add(&confs[0], &old, &pod, &uid).unwrap();
    h::cni_del(&confs[0], &old);
    let name = netendpoint_crd::endpoint_name(&pool, ip.parse().unwrap());

    // Node b's identity may not end the hold while the agent still holds the lease.
    let kc_b = dir.join("b.kubeconfig");
    let as_b: Api<NetworkEndpoint> = Api::all(h::client_for(&kc_b).await);
    let strip = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    let refused = as_b.patch(&name, &PatchParams::default(), &strip).await;
    assert!(matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 403), "{refused:?}");
    let uid = recreate(&sts, 0).await;
    let (code, msg) = add(&confs[1], &h::unique("on-b"), &pod, &uid).unwrap_err();
    assert_eq!(code, 11, "{msg}");
    assert!(msg.contains(FIN), "the error names what it waits for: {msg}");
    let held = h::endpoints().await.get(&name).await.unwrap();
    assert_eq!(held.metadata.finalizers.unwrap(), [FIN, FINALIZER_STICKY_HOLD], "the hold stays after the timeout");

    // The agent acknowledges; node b's plugin takes the IP back.
    h::remove_finalizer(&name, FIN).await;
    let got = add(&confs[1], &h::unique("on-b"), &pod, &uid).unwrap();
    assert_eq!(got, ip);
    let now = h::endpoints().await.get(&name).await.unwrap();
    assert_eq!(now.spec.node, confs[1]["ipam"]["nodeName"].as_str().unwrap());
    assert_eq!(now.spec.pod.unwrap().uid, uid);
    delete_pod(&pod).await;
    h::cleanup_pool(&pool).await;
}

/// A `netendpoint-controller` for `pool`, as admin; killed on drop.
struct Controller(std::process::Child, std::path::PathBuf);

impl Controller {
    async fn start(pool: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::env::temp_dir().join(format!("{}.log", h::unique("sticky-ctl")));
        let identity = h::unique("sticky-ctl");
        let child = std::process::Command::new(h::built_bin("NETENDPOINT_CONTROLLER", "netendpoint-controller"))
            .arg("--kubeconfig")
            .arg(h::kubeconfig())
            .args(["--identity", &identity, "--lease-name", &identity, "--lease-namespace", NS])
            .args(["--lease-seconds", "3", "--lease-grace-seconds", "1", "--net-conf", "", "--pod-gone-grace", "off"])
            .args(["--selector", &format!("{LABEL_POOL}={}", label_value(pool))])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let ctl = Self(child, log);
        let leading = || {
            use std::io::{Read, Write};
            let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
            let _ = s.write_all(b"GET /metrics HTTP/1.0\r\nHost: c\r\n\r\n");
            let mut buf = String::new();
            let _ = s.read_to_string(&mut buf);
            buf.lines().any(|l| l == "netendpoint_controller_leader 1")
        };
        wait_until("the controller to lead", Duration::from_secs(60), || async { leading() }).await;
        ctl
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.1).unwrap_or_default()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_until<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn gone(name: &str) -> bool {
    h::endpoints().await.get_opt(name).await.unwrap().is_none()
}

/// Reasons of the `StickyHoldEnded` Events about lease `name`, as their notes.
async fn hold_ended(name: &str) -> Vec<String> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(h::client().await, NS);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(netendpoint_crd::REASON_STICKY_HOLD_ENDED))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

/// The controller ends holds: scale-down below the ordinal, deletion of the
/// StatefulSet, `stickyFor`, and pool pressure (an ADD that waits in a full
/// pool whose only releases are holds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_ends_holds_on_scale_down_deletion_sticky_for_and_pool_pressure() {
    let _serial = SERIAL.lock().await;
    let node = h::unique("sticky-ctl");
    let pool = h::unique("sticky-ctl");
    let range = json!({"subnet": "10.94.0.0/24", "rangeStart": "10.94.0.10", "rangeEnd": "10.94.0.14"});
    let mut conf = h::agent_net_conf(&pool, range, &node, &[], "20s");
    conf["ipam"]["crossNode"] = json!("controller");
    conf["ipam"]["sticky"] = json!({"stickyFor": "1h"});
    let mut short = conf.clone();
    short["ipam"]["sticky"] = json!({"stickyFor": "3s"});

    // Five sticky Pods fill the pool; their sandboxes go; five holds remain.
    let a = statefulset(&h::unique("a"), 3).await;
    let b = statefulset(&h::unique("b"), 1).await;
    let c = statefulset(&h::unique("c"), 1).await;
    let mut lease_of = BTreeMap::new();
    for (sts, ordinal, conf) in [(&a, 0, &conf), (&a, 1, &conf), (&a, 2, &conf), (&b, 0, &short), (&c, 0, &conf)] {
        let pod = format!("{}-{ordinal}", sts.metadata.name.as_deref().unwrap());
        let uid = pod_of(sts, ordinal).await;
        let cid = h::unique("ctl");
        let ip = add(conf, &cid, &pod, &uid).unwrap();
        h::cni_del(conf, &cid);
        lease_of.insert(pod, netendpoint_crd::endpoint_name(&pool, ip.parse().unwrap()));
    }
    for name in lease_of.values() {
        let ep = h::endpoints().await.get(name).await.unwrap();
        assert!(ep.metadata.deletion_timestamp.is_some());
        assert_eq!(ep.metadata.finalizers.unwrap(), [FINALIZER_STICKY_HOLD], "{name} held");
    }
    let lease = |sts: &StatefulSet, o: u32| lease_of[&format!("{}-{o}", sts.metadata.name.as_deref().unwrap())].clone();
    let ctl = Controller::start(&pool).await;

    // Scale-down below the ordinal: a-2's hold ends, a-0's and a-1's stay.
    let sts_api = Api::<StatefulSet>::namespaced(h::client().await, NS);
    let a_name = a.metadata.name.clone().unwrap();
    sts_api.patch(&a_name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 2}}))).await.unwrap();
    let a2 = lease(&a, 2);
    wait_until("the scale-down to end a-2's hold", Duration::from_secs(30), || gone(&a2)).await;
    assert!(hold_ended(&a2).await.iter().any(|n| n.contains("scaled below")), "{}", ctl.log());
    // stickyFor (3 s) ends b-0's hold.
    let b0 = lease(&b, 0);
    wait_until("stickyFor to end b-0's hold", Duration::from_secs(30), || gone(&b0)).await;
    assert!(hold_ended(&b0).await.iter().any(|n| n.contains("stickyFor")));
    assert!(!gone(&lease(&a, 0)).await && !gone(&lease(&a, 1)).await, "holds within the scale stay");
    // Deleting the StatefulSet ends the holds of all its Pods.
    sts_api.delete(&a_name, &DeleteParams::default()).await.unwrap();
    for o in [0, 1] {
        let l = lease(&a, o);
        wait_until("the deletion to end a's holds", Duration::from_secs(30), || gone(&l)).await;
        assert!(hold_ended(&l).await.iter().any(|n| n.contains("deleted")));
    }

    // Pool pressure: four other pods fill the pool around c-0's hold; a
    // fifth waits, and the controller ends the (oldest and only) hold for it.
    let c0 = lease(&c, 0);
    for i in 0..4 {
        add(&conf, &h::unique("filler"), &format!("filler-{i}"), &format!("u-filler-{i}")).unwrap();
    }
    let got = add(&conf, &h::unique("needy"), "needy", "u-needy").unwrap();
    assert_eq!(netendpoint_crd::endpoint_name(&pool, got.parse().unwrap()), c0, "{}", ctl.log());
    assert!(hold_ended(&c0).await.iter().any(|n| n.contains("needs an IP")));
    for p in [&a, &b, &c] {
        for o in 0..3 {
            delete_pod(&format!("{}-{o}", p.metadata.name.as_deref().unwrap())).await;
        }
    }
    h::cleanup_pool(&pool).await;
}
