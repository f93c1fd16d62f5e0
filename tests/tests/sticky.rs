//! Sticky IPs against the real API server (invariant 12, docs/sticky-ips.md):
//! the claim's hold keeps `<pool>.<ip>` for the claim's whole life, each Pod
//! that continues the claim gets its own incarnation `<pool>.<ip>-<k>`, and
//! only `netendpoint-controller` creates an incarnation, once the previous
//! one is gone and once it checked the asking Pod and node.
//!
//! Real StatefulSets and Pods (created here with their ownerReference and
//! `nodeName`, as the StatefulSet controller and the scheduler would; there
//! is no kube-controller-manager), the controller as a process reading its
//! network config from a ConfigMap, the plugin run as a separate process
//! per CNI call, and the reference agent holding its finalizer with
//! teardown delays.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use netendpoint_crd::endpoint_name;
use netendpoint_crd::ipamclaim::{IPAMClaim, IPAMClaimSpec};
use netendpoint_tests::{self as h, AgentOpts, AgentProc, ControllerProc};
use serde_json::{Value, json};
use watcher_example::eventlog::analyze;

/// The tests of this file start controllers that watch every StatefulSet: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const NS: &str = "default";
const FIN: &str = "agent.example.com/sticky";
const RECREATIONS: usize = 500;

/// A sticky network: its net conf (network name = pool name), published in
/// a ConfigMap the controller reads, and the controller serving it.
struct StickyNet {
    pool: String,
    conf: Value,
    cm: String,
    ctl: ControllerProc,
}

impl StickyNet {
    /// `conf` published, and a controller for its pool started and leading.
    async fn start(conf: Value) -> Self {
        Self::start_with(conf, &[]).await
    }

    /// As [`StickyNet::start`], with more flags for the controller.
    async fn start_with(conf: Value, flags: &[&str]) -> Self {
        let pool = conf["ipam"]["pool"].as_str().unwrap().to_string();
        let cm = h::unique("sticky-net-conf");
        let cms: Api<ConfigMap> = Api::namespaced(h::client().await, NS);
        let obj: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": cm},
            "data": {"10-sticky.conf": conf.to_string()},
        }))
        .unwrap();
        cms.create(&PostParams::default(), &obj).await.unwrap();
        let ctl = Self::controller(&pool, &cm, flags);
        ctl.wait_leader().await;
        Self { pool, conf, cm, ctl }
    }

    /// A new controller process for `pool`, reading ConfigMap `cm`, with `flags`.
    fn controller(pool: &str, cm: &str, flags: &[&str]) -> ControllerProc {
        let net_conf = format!("{NS}/{cm}");
        let mut args = vec!["--net-conf", net_conf.as_str(), "--pod-gone-grace", "off"];
        args.extend_from_slice(flags);
        ControllerProc::start(&h::unique("sticky-ctl"), &h::unique("sticky-ctl"), &[pool], &args)
    }

    /// Stops the controller (SIGKILL): nobody serves the pool's holds and queue.
    fn stop_controller(&mut self) {
        self.ctl.kill();
    }

    /// Replaces the controller by a new process with `flags` (the old one
    /// killed first, if it still runs); waits until the new one leads.
    async fn start_controller(&mut self, flags: &[&str]) {
        self.ctl.kill();
        self.ctl = Self::controller(&self.pool, &self.cm, flags);
        self.ctl.wait_leader().await;
    }

    /// Waits until the controller created the claim of StatefulSet Pod `pod`.
    async fn claim_of(&self, pod: &str) -> IPAMClaim {
        let name = format!("{pod}.{}", self.pool);
        let api: Api<IPAMClaim> = Api::namespaced(h::client().await, NS);
        h::wait_for(&format!("claim {name}"), Duration::from_secs(30), || async {
            api.get_opt(&name).await.unwrap().is_some()
        })
        .await;
        api.get(&name).await.unwrap()
    }

    async fn stop(self) {
        let cms: Api<ConfigMap> = Api::namespaced(h::client().await, NS);
        let _ = cms.delete(&self.cm, &DeleteParams::default()).await;
        h::cleanup_pool(&self.pool).await;
    }
}

/// A sticky net conf for `pool` on `node`, with `extra` merged into `ipam`.
fn sticky_conf(pool: &str, range: Value, node: &str, finalizers: &[&str], extra: Value) -> Value {
    let mut conf = h::agent_net_conf(pool, range, node, finalizers, "20s");
    conf["name"] = json!(pool);
    conf["ipam"]["sticky"] = json!({"waitForOld": "30s"});
    for (k, v) in extra.as_object().unwrap() {
        conf["ipam"][k] = v.clone();
    }
    conf
}

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
    h::ensure_default_service_account().await;
    Api::<StatefulSet>::namespaced(h::client().await, NS).create(&PostParams::default(), &sts).await.unwrap()
}

/// Creates Pod `name` bound to `node`, with `meta` merged into its
/// metadata; returns its UID.
async fn make_pod(name: &str, node: &str, meta: Value) -> String {
    h::PodFixture::new(name).node(node).meta(meta).create().await.metadata.uid.unwrap()
}

/// Creates Pod `<sts>-<ordinal>` owned by `sts` (as its controller) and
/// bound to `node`; returns its UID.
async fn pod_of(sts: &StatefulSet, ordinal: u32, node: &str) -> String {
    let name = sts.metadata.name.clone().unwrap();
    let meta = json!({
        "labels": {"app": name},
        "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
            "uid": sts.metadata.uid.clone().unwrap(), "controller": true, "blockOwnerDeletion": true
        }]
    });
    make_pod(&format!("{name}-{ordinal}"), node, meta).await
}

/// Deletes StatefulSet `sts` (its claims go with it).
async fn delete_statefulset(sts: &StatefulSet) {
    let api = Api::<StatefulSet>::namespaced(h::client().await, NS);
    let _ = api.delete(sts.metadata.name.as_deref().unwrap(), &DeleteParams::default()).await;
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

/// Recreates Pod `<sts>-<ordinal>` on `node`: a new incarnation; returns its UID.
async fn recreate(sts: &StatefulSet, ordinal: u32, node: &str) -> String {
    delete_pod(&format!("{}-{ordinal}", sts.metadata.name.as_deref().unwrap())).await;
    pod_of(sts, ordinal, node).await
}

/// CNI ADD of `container` for Pod `pod` (UID `uid`): Ok(ip) or Err((code, message)).
fn add(conf: &Value, container: &str, pod: &str, uid: &str) -> Result<String, (u64, String)> {
    let args = format!("K8S_POD_NAMESPACE={NS};K8S_POD_NAME={pod};K8S_POD_UID={uid}");
    let (ok, out, err) =
        h::invoke("ADD", conf, &[("CNI_CONTAINERID", container), ("CNI_IFNAME", "eth0"), ("CNI_ARGS", &args)]);
    if ok {
        Ok(h::first_ip(&out).to_string())
    } else {
        Err((out["code"].as_u64().unwrap_or(0), format!("{out} {}", err.lines().last().unwrap_or_default())))
    }
}

/// [`add`] with its own plugin log: the IP, and the plugin's tally of its
/// API requests (total, and by verb and resource).
fn add_counted(conf: &Value, container: &str, pod: &str, uid: &str) -> (String, u32, String) {
    let log = std::env::temp_dir().join(format!("{}.log", h::unique("sticky-tally")));
    let mut conf = conf.clone();
    conf["ipam"]["log"] = json!({"level": "info", "file": log});
    let ip = add(&conf, container, pod, uid);
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let ip = ip.unwrap_or_else(|e| panic!("{e:?}\nplugin log:\n{text}"));
    let line = text.lines().find(|l| l.contains("API requests of this ADD")).unwrap_or_else(|| panic!("{text}"));
    let total = line.split("requests=").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().parse().unwrap();
    let by = line.split("by=").nth(1).map(|b| b.split(" API requests").next().unwrap_or(b)).unwrap_or_default();
    (ip, total, by.trim().to_string())
}

/// Checks what a client of the pool saw: among endpoints (holds are not
/// endpoints, and agents skip them), one holder per IP at every moment:
/// the DELETED of an IP's endpoint always comes before the ADDED of its
/// next. Returns how many endpoints `pod` got.
fn one_holder_per_ip(seen: &[h::Seen], pod: &str) -> usize {
    let mut live: BTreeMap<String, String> = BTreeMap::new();
    let mut of_pod = 0;
    for h::Seen { kind, name, pod: holder, ip, hold, .. } in seen {
        if *hold {
            continue;
        }
        match *kind {
            "ADDED" => {
                if let Some(prev) = live.insert(ip.clone(), name.clone()) {
                    panic!("{ip}: ADDED {name} while {prev} still held it");
                }
                of_pod += usize::from(holder == pod);
            }
            "DELETED" => assert_eq!(live.remove(ip).as_ref(), Some(name), "{ip}: DELETED {name}"),
            _ => assert_eq!(live.get(ip), Some(name), "{ip}: MODIFIED {name} while not its holder"),
        }
    }
    of_pod
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// 500 recreations of one StatefulSet Pod in a full pool of six addresses,
/// with an agent that holds its finalizer and tears down after up to 1 s,
/// the old sandbox's DEL up to 200 ms after the new one's ADD began, and
/// five other Pods, real Pod objects bound to the node as a Deployment's
/// are, replaced all along (a new Pod and its ADD, the old Pod's DEL and
/// deletion at the same moment), so that their ADDs wait in the pool's
/// queue as believed entries and compete for every address that is
/// released. The sticky address is never lost and never has two holders;
/// the StatefulSet Pod's ADD never fails; a competitor fails only with the
/// full-pool error, and those failures are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_statefulset_pod_keeps_its_ip_across_500_recreations_in_a_full_pool_in_order() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let node = h::unique("sticky-node");
    let pool = h::unique("sticky");
    let range = json!({"subnet": "10.91.0.0/24", "rangeStart": "10.91.0.10", "rangeEnd": "10.91.0.15"});
    let net = StickyNet::start(sticky_conf(&pool, range, &node, &[FIN], json!({}))).await;
    let conf = net.conf.clone();
    let agent =
        AgentProc::start(AgentOpts { naive: true, delay: "0ms..1000ms".into(), ..AgentOpts::new(&node, Some(FIN)) });
    let stop = Arc::new(AtomicBool::new(false));
    let watch = h::PoolWatch::start(&pool).await;

    let sts = statefulset(&h::unique("web"), 1).await;
    let pod = format!("{}-0", sts.metadata.name.as_deref().unwrap());
    net.claim_of(&pod).await;
    let mut uid = pod_of(&sts, 0, &node).await;
    let mut container = format!("{pool}-g0");
    let ip = add(&conf, &container, &pod, &uid).unwrap();

    // Five other Pods fill the pool and are replaced all along, as a
    // rollout replaces a Deployment's Pods: each cycle creates the next Pod
    // and runs its ADD while the old Pod's sandbox is deleted (DEL, then
    // the Pod object). An ADD that fails is retried, as kubelet retries a
    // sandbox; only the full-pool error may fail it.
    let mut competitors = Vec::new();
    let runtime = tokio::runtime::Handle::current();
    for slot in 0..5 {
        let (conf, pool, stop, node, rt) = (conf.clone(), pool.clone(), stop.clone(), node.clone(), runtime.clone());
        competitors.push(std::thread::spawn(move || {
            let cid = |g: usize| format!("{pool}-c{slot}-g{g}");
            let next_pod = || rt.block_on(h::waiting_pod(&format!("other-{slot}"), &node));
            let mut failures = 0;
            let mut served = |cid: &str, pod: &str, uid: &str| loop {
                match add(&conf, cid, pod, uid) {
                    Ok(ip) => break ip,
                    Err((_, e)) if e.contains("exhausted") && failures < 1000 => failures += 1,
                    Err(e) => panic!("competitor {pod}: {e:?}"),
                }
            };
            let (mut current, current_uid) = next_pod();
            let mut got = vec![served(&cid(0), &current, &current_uid)];
            let mut g = 0;
            while !stop.load(Ordering::Relaxed) {
                g += 1;
                let (next, next_uid) = next_pod();
                let (c, old, old_pod, rt) = (conf.clone(), cid(g - 1), current.clone(), rt.clone());
                let del = std::thread::spawn(move || {
                    h::cni_del(&c, &old);
                    rt.block_on(delete_pod(&old_pod));
                });
                got.push(served(&cid(g), &next, &next_uid));
                del.join().unwrap();
                current = next;
            }
            h::cni_del(&conf, &cid(g));
            rt.block_on(delete_pod(&current));
            (g, got, failures)
        }));
    }

    let log = std::env::temp_dir().join(format!("{}.log", h::unique("sticky-adds")));
    let mut counted = conf.clone();
    counted["ipam"]["log"] = json!({"level": "info", "file": log});
    let mut times = Vec::new();
    let mut lost = Vec::new();
    let mut retries = 0;
    for g in 1..=RECREATIONS {
        uid = recreate(&sts, 0, &node).await;
        // Under kubelet the new sandbox's ADD may come before the old one's DEL.
        let (c, old, delay) = (conf.clone(), container.clone(), fastrand::u64(0..200));
        let del = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(delay));
            h::cni_del(&c, &old);
        });
        container = format!("{pool}-g{g}");
        let t = Instant::now();
        let got = loop {
            match add(&counted, &container, &pod, &uid) {
                Ok(ip) => break ip,
                Err((11, _)) if retries < 20 => retries += 1,
                Err(e) => panic!("recreation {g}: {e:?}\n{}", net.ctl.log()),
            }
        };
        times.push(t.elapsed());
        if got != ip {
            lost.push((g, got));
        }
        del.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let (mut cycles, mut competitor_failures) = (0, 0);
    for c in competitors {
        let (n, got, failures) = tokio::task::spawn_blocking(move || c.join().unwrap()).await.unwrap();
        cycles += n;
        competitor_failures += failures;
        assert!(!got.contains(&ip), "another Pod got the sticky address");
    }
    h::wait_converged(&agent, &[&pool], "after the recreations").await;
    let seen = watch.stop().await;

    assert_eq!(lost, [], "the sticky address is never lost");
    // The agent's own log: no rule lost, every handover in order.
    let a = analyze(&agent.events());
    assert_eq!(a.lost_rules.len(), 0, "{:?}", a.lost_rules);
    assert_eq!(a.out_of_order().count(), 0, "a new holder's add came before the old holder's remove");
    let sticky_handovers = a.handovers.iter().filter(|h| h.ip.to_string() == ip).count();
    assert!(sticky_handovers >= RECREATIONS, "every incarnation handed the address over: {sticky_handovers}");
    // A client's watch of the pool: one endpoint per IP at every moment.
    assert_eq!(one_holder_per_ip(&seen, &pod), RECREATIONS + 1, "the first ADD and every recreation");

    let per_add = h::requests_per_add(&std::fs::read_to_string(&log).unwrap());
    let mean = f64::from(per_add.iter().sum::<u32>()) / per_add.len().max(1) as f64;
    times.sort();
    println!(
        "sticky: {RECREATIONS} recreations in a full pool of 6; recreation ADD p50 {} ms p99 {} ms max {} ms; \
         {mean:.1} API requests per recreation ADD (max {}); {retries} retries (code 11); competitor Pods \
         replaced {cycles}, their ADDs failed (pool full) {competitor_failures}; address lost 0; lost rules 0; \
         out of order 0; two holders 0; {:.1} s",
        percentile(&times, 0.5).as_millis(),
        percentile(&times, 0.99).as_millis(),
        times.last().unwrap().as_millis(),
        per_add.iter().max().unwrap_or(&0),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(retries, 0, "the StatefulSet Pod's ADD never failed");
    delete_pod(&pod).await;
    delete_statefulset(&sts).await;
    net.stop().await;
}

/// API requests per ADD, as the plugin tallies them: with `ipam.sticky`
/// on, a Pod whose name has no ordinal costs nothing more, a `-<n>` Pod
/// without a claim one claim GET and one GET of the StatefulSet its name
/// names (does it want that ordinal? `sticky::first_claim`); and what a
/// sticky Pod's ADDs cost.
#[tokio::test]
async fn what_sticky_costs_an_add() {
    let _serial = SERIAL.lock().await;
    let node = h::unique("sticky-count");
    let pool = h::unique("sticky-count");
    let range = json!({"subnet": "10.92.0.0/24"});
    let net = StickyNet::start(sticky_conf(&pool, range, &node, &[], json!({}))).await;
    let mut plain = net.conf.clone();
    plain["ipam"].as_object_mut().unwrap().remove("sticky");
    // Warm up: the node check (one GET per node, ever) and the node's cursor.
    add(&plain, &h::unique("warm"), "warm", "u-warm").unwrap();

    let (_, off, off_by) = add_counted(&plain, &h::unique("c"), "lone", "u-lone");
    let (_, on, on_by) = add_counted(&net.conf, &h::unique("c"), "lone", "u-lone");
    let (_, ordinal, ordinal_by) = add_counted(&net.conf, &h::unique("c"), "batch-7", "u-batch");
    println!(
        "API requests per ADD: sticky off {off} ({off_by}); sticky on, no ordinal {on} ({on_by}); \"-7\" without a claim {ordinal} ({ordinal_by})"
    );
    assert_eq!(on, off, "a Pod that cannot be a StatefulSet's costs nothing more");
    assert_eq!(ordinal, off + 2, "a -<n> Pod costs one claim GET and one StatefulSet GET: {ordinal_by}");
    assert!(ordinal_by.contains("GET ipamclaims=1"), "{ordinal_by}");
    assert!(ordinal_by.contains("GET statefulsets=1"), "{ordinal_by}");

    // A sticky Pod: its first ADD (create the hold, wait for incarnation 1),
    // and a recreation (ask the hold, wait for incarnation 2).
    let sts = statefulset(&h::unique("count"), 1).await;
    let pod = format!("{}-0", sts.metadata.name.as_deref().unwrap());
    net.claim_of(&pod).await;
    let uid = pod_of(&sts, 0, &node).await;
    let first = h::unique("s");
    let (ip1, first_calls, first_by) = add_counted(&net.conf, &first, &pod, &uid);
    h::cni_del(&net.conf, &first);
    let uid = recreate(&sts, 0, &node).await;
    let (ip2, again_calls, again_by) = add_counted(&net.conf, &h::unique("s"), &pod, &uid);
    println!(
        "API requests per ADD, sticky Pod: first {first_calls} ({first_by}); recreation {again_calls} ({again_by})"
    );
    assert_eq!(ip1, ip2);
    for by in [&first_by, &again_by] {
        assert!(!by.contains("LIST "), "no list: {by}");
    }
    // Claim GET, then create the hold or read and ask it, watch it, read the incarnation.
    assert!(first_calls <= off + 4, "{first_by}");
    assert!(again_calls <= off + 5, "{again_by}");
    delete_pod(&pod).await;
    delete_statefulset(&sts).await;
    net.stop().await;
}

/// The notes of the Events about `name` with `reason`.
async fn events_about(name: &str, reason: &str) -> Vec<String> {
    h::events_about(name, reason).await.into_iter().map(|e| e.note).collect()
}

/// The controller creates an incarnation only for the claim's own Pod, on
/// the node it is bound to: a request from another node, from a bare Pod
/// of the StatefulSet Pod's name, or for a Pod that is not the claim's, is
/// refused, with the reason on the hold and in an Event; the address stays
/// the claim's.
#[tokio::test]
async fn an_incarnation_goes_only_to_the_claims_pod_on_its_bound_node() {
    let _serial = SERIAL.lock().await;
    let (node, other_node) = (h::unique("sticky-bound"), h::unique("sticky-elsewhere"));
    h::ensure_node(&other_node);
    let pool = h::unique("sticky-refuse");
    let range = json!({"subnet": "10.95.0.0/24", "rangeStart": "10.95.0.10", "rangeEnd": "10.95.0.13"});
    let net = StickyNet::start(sticky_conf(&pool, range, &node, &[], json!({"sticky": {"waitForOld": "3s"}}))).await;
    let mut elsewhere = net.conf.clone();
    elsewhere["ipam"]["nodeName"] = json!(other_node);
    elsewhere["ipam"]["dataDir"] = json!(std::env::temp_dir().join(h::unique("sticky-elsewhere")));

    let sts = statefulset(&h::unique("bound"), 1).await;
    let pod = format!("{}-0", sts.metadata.name.as_deref().unwrap());
    net.claim_of(&pod).await;
    let uid = pod_of(&sts, 0, &node).await;
    let first = h::unique("first");
    let ip = add(&net.conf, &first, &pod, &uid).unwrap();
    let hold = endpoint_name(&pool, ip.parse().unwrap());
    h::cni_del(&net.conf, &first);

    // The Pod is bound to `node`; a plugin on another node asks for it.
    let uid = recreate(&sts, 0, &node).await;
    let (code, msg) = add(&elsewhere, &h::unique("thief"), &pod, &uid).unwrap_err();
    assert!(msg.contains("not to the asking node"), "{code}: {msg}");
    let refused = events_about(&hold, netendpoint_crd::REASON_INCARNATION_REFUSED).await;
    assert!(refused.iter().any(|n| n.contains("not to the asking node")), "{refused:?}");

    // A bare Pod of the StatefulSet Pod's name (not controlled by it).
    delete_pod(&pod).await;
    let bare = make_pod(&pod, &node, json!({})).await;
    let (_, msg) = add(&net.conf, &h::unique("bare"), &pod, &bare).unwrap_err();
    assert!(msg.contains("is not the Pod of claim"), "{msg}");

    // The claim's own Pod, on its node, still gets the address.
    delete_pod(&pod).await;
    let uid = pod_of(&sts, 0, &node).await;
    assert_eq!(add(&net.conf, &h::unique("owner"), &pod, &uid).unwrap(), ip);
    assert!(!h::lease_gone(&hold).await, "the hold stays the claim's");
    delete_pod(&pod).await;
    delete_statefulset(&sts).await;
    net.stop().await;
}

/// A hold whose claim does not exist (a decoy, or a claim deleted while
/// the controller was down) blocks nothing: the controller ends it, seen
/// twice, and its address is free again; an ADD that needs the address
/// meanwhile gets it sooner, by pool pressure.
#[tokio::test]
async fn a_decoy_hold_blocks_nothing() {
    let _serial = SERIAL.lock().await;
    let node = h::unique("sticky-decoy");
    let pool = h::unique("sticky-decoy");
    let range = json!({"subnet": "10.96.0.0/24", "rangeStart": "10.96.0.10", "rangeEnd": "10.96.0.10"});
    let net = StickyNet::start(sticky_conf(&pool, range, &node, &[], json!({"waitForRelease": "30s"}))).await;
    let name = endpoint_name(&pool, "10.96.0.10".parse().unwrap());
    let plant = || async {
        let claim = netendpoint_crd::ClaimRef { namespace: NS.into(), name: "no-such-claim".into(), uid: "u".into() };
        let decoy = h::LeaseFixture::new(&pool, "10.96.0.10").container(&h::unique("decoy")).node(&node);
        decoy.hold(claim).create().await;
        Instant::now()
    };

    // Left alone: ended because its claim does not exist.
    let planted = plant().await;
    h::wait_for("the decoy to end", Duration::from_secs(30), || h::lease_gone(&name)).await;
    let alone = planted.elapsed();
    let ended = events_about(&name, netendpoint_crd::REASON_STICKY_HOLD_ENDED).await;
    assert!(ended.iter().any(|n| n.contains("its claim was deleted")), "{ended:?}\n{}", net.ctl.log());

    // With a Pod waiting for the pool's one address.
    let planted = plant().await;
    let (p, u) = h::waiting_pod("after-decoy", &node).await;
    let got = add(&net.conf, &h::unique("after-decoy"), &p, &u).unwrap_or_else(|e| panic!("{e:?}\n{}", net.ctl.log()));
    assert_eq!(got, "10.96.0.10");
    println!(
        "a decoy hold lived {} ms alone, and blocked a waiting ADD for {} ms",
        alone.as_millis(),
        planted.elapsed().as_millis()
    );
    net.stop().await;
}

/// The controller ends holds: scale-down below the ordinal (the claim goes,
/// then its hold), deletion of the StatefulSet, `stickyFor`, and pool
/// pressure (an ADD of a real waiting Pod in a full pool whose only
/// releasable address is the hold of a VM's claim whose Pod has been gone
/// for `--pressure-after`; the hold of a StatefulSet Pod whose ordinal is
/// still wanted is spared).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_ends_holds_on_scale_down_deletion_sticky_for_and_pool_pressure() {
    let _serial = SERIAL.lock().await;
    let node = h::unique("sticky-end");
    let pool = h::unique("sticky-end");
    let range = json!({"subnet": "10.94.0.0/24", "rangeStart": "10.94.0.10", "rangeEnd": "10.94.0.14"});
    let net =
        StickyNet::start_with(sticky_conf(&pool, range, &node, &[], json!({})), &["--pressure-after", "3s"]).await;
    let conf = net.conf.clone();
    let mut short = conf.clone();
    short["ipam"]["sticky"] = json!({"stickyFor": "3s"});

    // Five sticky Pods fill the pool; their sandboxes go; five holds remain.
    let a = statefulset(&h::unique("a"), 3).await;
    let b = statefulset(&h::unique("b"), 1).await;
    let c = statefulset(&h::unique("c"), 1).await;
    let mut hold_of = BTreeMap::new();
    for (sts, ordinal, conf) in [(&a, 0, &conf), (&a, 1, &conf), (&a, 2, &conf), (&b, 0, &short), (&c, 0, &conf)] {
        let pod = format!("{}-{ordinal}", sts.metadata.name.as_deref().unwrap());
        net.claim_of(&pod).await;
        let uid = pod_of(sts, ordinal, &node).await;
        let cid = h::unique("ctl");
        let ip = add(conf, &cid, &pod, &uid).unwrap();
        h::cni_del(conf, &cid);
        hold_of.insert(pod, endpoint_name(&pool, ip.parse().unwrap()));
    }
    for name in hold_of.values() {
        let ep = h::endpoints().await.get(name).await.unwrap();
        assert!(ep.is_hold() && ep.metadata.deletion_timestamp.is_none(), "{name} is a live hold");
    }
    let hold = |sts: &StatefulSet, o: u32| hold_of[&format!("{}-{o}", sts.metadata.name.as_deref().unwrap())].clone();

    // Scale-down below the ordinal: a-2's claim goes, then its hold; a-0's and a-1's stay.
    let sts_api = Api::<StatefulSet>::namespaced(h::client().await, NS);
    let a_name = a.metadata.name.clone().unwrap();
    sts_api.patch(&a_name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 2}}))).await.unwrap();
    let a2 = hold(&a, 2);
    h::wait_for("the scale-down to end a-2's hold", Duration::from_secs(30), || h::lease_gone(&a2)).await;
    let ended = events_about(&a2, netendpoint_crd::REASON_STICKY_HOLD_ENDED).await;
    assert!(ended.iter().any(|n| n.contains("its claim was deleted")), "{ended:?}\n{}", net.ctl.log());
    // stickyFor (3 s) ends b-0's hold.
    let b0 = hold(&b, 0);
    h::wait_for("stickyFor to end b-0's hold", Duration::from_secs(30), || h::lease_gone(&b0)).await;
    assert!(events_about(&b0, netendpoint_crd::REASON_STICKY_HOLD_ENDED).await.iter().any(|n| n.contains("stickyFor")));
    assert!(!h::lease_gone(&hold(&a, 0)).await && !h::lease_gone(&hold(&a, 1)).await, "holds within the scale stay");
    // Deleting the StatefulSet ends the holds of all its Pods.
    sts_api.delete(&a_name, &DeleteParams::default()).await.unwrap();
    for o in [0, 1] {
        let l = hold(&a, o);
        h::wait_for("the deletion to end a's holds", Duration::from_secs(30), || h::lease_gone(&l)).await;
    }

    // Pool pressure. A VM's claim keeps an address after its Pod is gone;
    // three other Pods fill the pool around it and c-0's hold; a fifth, a
    // real Pod waiting on the node, needs an address. c-0's StatefulSet still
    // wants ordinal 0, so its hold is spared; the VM's hold, idle for longer
    // than --pressure-after, ends for the waiting Pod.
    let c0 = hold(&c, 0);
    let claim_name = h::unique("vmp");
    let claims: Api<IPAMClaim> = Api::namespaced(h::client().await, NS);
    let claim = IPAMClaim::new(&claim_name, IPAMClaimSpec { network: pool.clone(), interface: "eth0".into() });
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let vm_pod = h::unique("virt-launcher-vmp");
    let annotation = json!([{"name": pool, "ipam-claim-reference": claim_name}]).to_string();
    let vm_uid =
        make_pod(&vm_pod, &node, json!({"annotations": {netendpoint_crd::ipamclaim::NETWORKS_ANNOTATION: annotation}}))
            .await;
    let mut vm_conf = conf.clone();
    vm_conf["ipam-claim-reference"] = json!(claim_name);
    let vm_cid = h::unique("vmp");
    let vm_ip = add(&vm_conf, &vm_cid, &vm_pod, &vm_uid).unwrap();
    let vm_hold = endpoint_name(&pool, vm_ip.parse().unwrap());
    h::cni_del(&vm_conf, &vm_cid);
    delete_pod(&vm_pod).await;
    for i in 0..3 {
        add(&conf, &h::unique("filler"), &format!("filler-{i}"), &format!("u-filler-{i}")).unwrap();
    }
    let (p, u) = h::waiting_pod("needy", &node).await;
    let got = add(&conf, &h::unique("needy"), &p, &u).unwrap_or_else(|e| panic!("{e:?}\n{}", net.ctl.log()));
    assert_eq!(endpoint_name(&pool, got.parse().unwrap()), vm_hold, "{}", net.ctl.log());
    let ended = events_about(&vm_hold, netendpoint_crd::REASON_STICKY_HOLD_ENDED).await;
    assert!(ended.iter().any(|n| n.contains("needs an IP")), "{ended:?}");
    let spared = h::endpoints().await.get(&c0).await.unwrap();
    assert!(spared.is_hold() && spared.status.and_then(|s| s.phase).is_none(), "c-0's hold is spared");
    let _ = claims.delete(&claim_name, &DeleteParams::default()).await;
    for s in [&a, &b, &c] {
        for o in 0..3 {
            delete_pod(&format!("{}-{o}", s.metadata.name.as_deref().unwrap())).await;
        }
    }
    let _ = sts_api.delete(b.metadata.name.as_deref().unwrap(), &DeleteParams::default()).await;
    let _ = sts_api.delete(c.metadata.name.as_deref().unwrap(), &DeleteParams::default()).await;
    net.stop().await;
}

/// An IPAMClaim a user (KubeVirt, for a VM) creates: three Pods that
/// reference it, each on another node, one after the other, keep its
/// address; the first names it in its network-selection annotation, the
/// next ones also through the runtime's `ipam-claim-reference`. The claim's
/// status shows the address. A live migration keeps it too, without two
/// endpoints at once. Deleting the claim frees it.
#[tokio::test]
async fn an_ipamclaim_keeps_its_address_across_pods_on_different_nodes() {
    let _serial = SERIAL.lock().await;
    let nodes: Vec<String> = (0..3).map(|i| h::unique(&format!("vm-node-{i}"))).collect();
    let pool = h::unique("vm");
    let range = json!({"subnet": "10.97.0.0/24", "rangeStart": "10.97.0.10", "rangeEnd": "10.97.0.12"});
    let sticky = json!({"sticky": {"kinds": [], "claimsFromPods": true, "waitForOld": "20s"}});
    let net = StickyNet::start(sticky_conf(&pool, range, &nodes[0], &[FIN], sticky)).await;
    let claim_name = format!("vm1.{pool}");
    let claims: Api<IPAMClaim> = Api::namespaced(h::client().await, NS);
    let claim = IPAMClaim::new(&claim_name, IPAMClaimSpec { network: pool.clone(), interface: "eth0".into() });
    claims.create(&PostParams::default(), &claim).await.unwrap();

    let annotation = json!([{"name": pool, "ipam-claim-reference": claim_name}]).to_string();
    let mut ip = None;
    let mut previous: Option<(String, Value, String)> = None;
    for (i, node) in nodes.iter().enumerate() {
        let name = h::unique("virt-launcher-vm1");
        // KubeVirt writes the reference in the Pod's annotation, which is
        // what the controller checks; Multus also passes it to the plugin.
        let meta = json!({"annotations": {netendpoint_crd::ipamclaim::NETWORKS_ANNOTATION: annotation}});
        let uid = make_pod(&name, node, meta).await;
        let mut conf = net.conf.clone();
        conf["ipam"]["nodeName"] = json!(node);
        h::ensure_node(node);
        conf["ipam"]["dataDir"] = json!(std::env::temp_dir().join(h::unique("vm-data")));
        if i > 0 {
            conf["ipam-claim-reference"] = json!(claim_name);
        }
        // The old Pod goes: its sandbox's DEL, the agent's acknowledgement.
        if let Some((old_pod, old_conf, old_cid)) = previous.take() {
            delete_pod(&old_pod).await;
            h::cni_del(&old_conf, &old_cid);
            let current = h::pool_endpoints(&pool).await.into_iter().find(|e| !e.is_hold()).unwrap();
            h::remove_finalizer(current.metadata.name.as_deref().unwrap(), FIN).await;
        }
        let cid = h::unique("vm-sandbox");
        let got = add(&conf, &cid, &name, &uid).unwrap_or_else(|e| panic!("pod {i}: {e:?}\n{}", net.ctl.log()));
        assert_eq!(ip.get_or_insert_with(|| got.clone()), &got, "pod {i} on {node}");
        let ep =
            h::pool_endpoints(&pool).await.into_iter().find(|e| !e.is_hold() && e.spec.container_id == cid).unwrap();
        assert_eq!(ep.spec.node, *node);
        previous = Some((name, conf, cid));
    }
    let ip = ip.unwrap();
    let shown = claims.get(&claim_name).await.unwrap().status.unwrap_or_default().ips;
    assert!(shown.iter().any(|a| a.starts_with(&format!("{ip}/"))), "the claim shows its address: {shown:?}");

    // A Pod that any Pod creator of the namespace could make names the
    // running VM's claim: it is not answered while the VM runs (KubeVirt
    // names no migration target), and gives up with nothing of the VM's.
    let (src_pod, src_conf, src_cid) = previous.unwrap();
    let hold_name = endpoint_name(&pool, ip.parse().unwrap());
    let vmi_uid = create_vmi("vm1").await;
    let rogue = h::unique("rogue");
    let meta = json!({"annotations": {netendpoint_crd::ipamclaim::NETWORKS_ANNOTATION: annotation}});
    let rogue_uid = make_pod(&rogue, &nodes[1], meta).await;
    let mut rogue_conf = net.conf.clone();
    rogue_conf["ipam"]["nodeName"] = json!(nodes[1]);
    rogue_conf["ipam"]["dataDir"] = json!(std::env::temp_dir().join(h::unique("vm-data")));
    rogue_conf["ipam"]["sticky"]["waitForOld"] = json!("4s");
    let (code, msg) = add(&rogue_conf, &h::unique("rogue"), &rogue, &rogue_uid).unwrap_err();
    assert_eq!(code, 11, "{msg}");
    assert!(!msg.contains(&format!("\"ips\":[{{\"address\":\"{ip}")), "{msg}");
    let waits = events_about(&hold_name, netendpoint_crd::REASON_INCARNATION_WAITS).await;
    assert!(waits.iter().any(|n| n.contains("names no Pod as its migration target")), "{waits:?}");
    let request = h::endpoints().await.get(&hold_name).await.unwrap().status.and_then(|s| s.request);
    assert!(request.is_none(), "the rogue's request went with its ADD: {request:?}");
    delete_pod(&rogue).await;

    // Live migration: KubeVirt starts the target Pod on another node while
    // the source runs, controlled by the VM's instance, which names it as
    // its migration target. It is answered with the address at once; its
    // endpoint comes only once the source's is gone (DELETED before ADDED).
    let target = h::unique("virt-launcher-vm1");
    migrate_vmi("vm1", &target).await;
    let meta = json!({
        "annotations": {netendpoint_crd::ipamclaim::NETWORKS_ANNOTATION: annotation},
        "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "name": "vm1", "uid": vmi_uid, "controller": true}],
    });
    let target_uid = make_pod(&target, &nodes[0], meta).await;
    let mut target_conf = net.conf.clone();
    target_conf["ipam"]["nodeName"] = json!(nodes[0]);
    target_conf["ipam"]["dataDir"] = json!(std::env::temp_dir().join(h::unique("vm-data")));
    let target_cid = h::unique("vm-target");
    let started = Instant::now();
    let got = add(&target_conf, &target_cid, &target, &target_uid).unwrap_or_else(|e| panic!("{e:?}"));
    let answered = started.elapsed();
    assert_eq!(got, ip, "the migration target gets the VM's address");
    let pool_ref = pool.as_str();
    let endpoints = move |cid: String| async move {
        h::pool_endpoints(pool_ref).await.into_iter().filter(|e| !e.is_hold() && e.spec.container_id == cid).count()
    };
    assert_eq!(endpoints(target_cid.clone()).await, 0, "no endpoint for the target while the source's lives");
    let accepted =
        events_about(&endpoint_name(&pool, ip.parse().unwrap()), netendpoint_crd::REASON_INCARNATION_ACCEPTED).await;
    assert!(!accepted.is_empty(), "the hold says why the target was answered");
    // The migration completes: the source goes, its agent acknowledges.
    delete_pod(&src_pod).await;
    h::cni_del(&src_conf, &src_cid);
    let source =
        h::pool_endpoints(&pool).await.into_iter().find(|e| !e.is_hold() && e.spec.container_id == src_cid).unwrap();
    h::remove_finalizer(source.metadata.name.as_deref().unwrap(), FIN).await;
    h::wait_for("the target's endpoint", Duration::from_secs(30), || endpoints(target_cid.clone()).map(|n| n == 1))
        .await;
    println!("live migration: the target was answered in {} ms, while the source ran", answered.as_millis());
    // Deleting the claim ends the hold once the last Pod is gone too.
    let (old_pod, old_conf, old_cid) = (target, target_conf, target_cid);
    delete_pod(&old_pod).await;
    h::cni_del(&old_conf, &old_cid);
    let current = h::pool_endpoints(&pool).await.into_iter().find(|e| !e.is_hold()).unwrap();
    h::remove_finalizer(current.metadata.name.as_deref().unwrap(), FIN).await;
    claims.delete(&claim_name, &DeleteParams::default()).await.unwrap();
    let hold = endpoint_name(&pool, ip.parse().unwrap());
    h::wait_for("the claim's hold to end", Duration::from_secs(30), || h::lease_gone(&hold)).await;
    delete_vmi("vm1").await;
    net.stop().await;
}

/// KubeVirt's VirtualMachineInstance API.
fn vmis_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstances",
    )
}

/// Creates VirtualMachineInstance `name`, running and not migrating; its UID.
async fn create_vmi(name: &str) -> String {
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(h::client().await, NS, &vmis_resource());
    let obj: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": NS},
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap().metadata.uid.unwrap()
}

/// Writes into VirtualMachineInstance `name`'s status that Pod `target` is
/// the target of its live migration, as virt-controller does.
async fn migrate_vmi(name: &str, target: &str) {
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(h::client().await, NS, &vmis_resource());
    let status = json!({"status": {"migrationState": {"targetPod": target, "completed": false}}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
}

async fn delete_vmi(name: &str) {
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(h::client().await, NS, &vmis_resource());
    let _ = api.delete(name, &DeleteParams::default()).await;
}

/// Sends `signal` (`-STOP`, `-CONT`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let ok = std::process::Command::new("kill").args([signal, &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill {signal} {pid}");
}

/// Waits until Pod `pod`'s ADD waits in `pool`'s queue (its entry exists).
async fn wait_queued(pool: &str, pod: &str) {
    let needs: Api<netendpoint_crd::NetworkEndpointNeed> = Api::all(h::client().await);
    h::wait_for(&format!("{pod}'s queue entry"), Duration::from_secs(15), || async {
        let list = needs.list(&Default::default()).await.unwrap();
        list.items.iter().any(|n| n.spec.pool == pool && n.spec.pod.name == pod)
    })
    .await;
}

/// Issue 33, item 1: a StatefulSet Pod recreated as kubelet does it (the
/// old sandbox's DEL, the Pod object deleted and, after a gap, created
/// again, then the new sandbox's ADD) gets its address back while another
/// real Pod waits in the full pool's queue; the waiter gets an address
/// released later, never the sticky one, and no address ever has two
/// endpoints. With a gap of 2 s and the default `--pressure-after` (5 min);
/// then with a gap of 10 s, longer than a `--pressure-after` of 3 s, where
/// only the StatefulSet still wanting ordinal 0 spares the hold (the Pod
/// object is absent for all but the last 500 ms of each gap, so the
/// controller's read of the claim's Pod does not spare it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_recreated_statefulset_pod_keeps_its_address_while_a_pod_waits_in_the_queue() {
    let _serial = SERIAL.lock().await;
    let node = h::unique("sticky-queue");
    let pool = h::unique("sticky-queue");
    let range = json!({"subnet": "10.98.0.0/24", "rangeStart": "10.98.0.10", "rangeEnd": "10.98.0.14"});
    let mut net = StickyNet::start(sticky_conf(&pool, range, &node, &[FIN], json!({}))).await;
    let conf = net.conf.clone();
    let agent = AgentProc::start(AgentOpts { delay: "0ms..300ms".into(), ..AgentOpts::new(&node, Some(FIN)) });
    let watch = h::PoolWatch::start(&pool).await;

    let sts = statefulset(&h::unique("web"), 1).await;
    let pod = format!("{}-0", sts.metadata.name.as_deref().unwrap());
    net.claim_of(&pod).await;
    let mut uid = pod_of(&sts, 0, &node).await;
    let mut container = h::unique("web0");
    let ip = add(&conf, &container, &pod, &uid).unwrap();
    let hold = endpoint_name(&pool, ip.parse().unwrap());

    // Four other real Pods on the node lease the other four addresses.
    let mut others = std::collections::VecDeque::new();
    for i in 0..4 {
        let (name, pod_uid) = h::waiting_pod(&format!("other-{i}"), &node).await;
        let cid = h::unique("other");
        let got = add(&conf, &cid, &name, &pod_uid).unwrap();
        assert_ne!(got, ip);
        others.push_back((name, cid, got));
    }
    h::wait_for_summary(&pool).await;

    let mut waiters = Vec::new();
    let mut figures = Vec::new();
    for (gap, pressure_after) in [(Duration::from_secs(2), None), (Duration::from_secs(10), Some("3s"))] {
        if let Some(after) = pressure_after {
            net.start_controller(&["--pressure-after", after]).await;
        }
        // A real Pod's ADD waits in the full pool.
        let (waiter, waiter_uid) = h::waiting_pod("waiter", &node).await;
        let waiter_cid = h::unique("waiter");
        let mut waiter_conf = conf.clone();
        waiter_conf["ipam"]["waitForRelease"] = json!("30s");
        let waiting = {
            let (c, w, u, cid) = (waiter_conf, waiter.clone(), waiter_uid, waiter_cid.clone());
            std::thread::spawn(move || {
                let t = Instant::now();
                let got = add(&c, &cid, &w, &u);
                (got, t.elapsed(), Instant::now())
            })
        };
        wait_queued(&pool, &waiter).await;

        // kubelet recreates web-0: the old sandbox's DEL, the Pod object
        // deleted; the StatefulSet creates it again late in the gap; the
        // new sandbox's ADD at its end.
        let started = Instant::now();
        h::cni_del(&conf, &container);
        delete_pod(&pod).await;
        tokio::time::sleep(gap - Duration::from_millis(500)).await;
        uid = pod_of(&sts, 0, &node).await;
        tokio::time::sleep(gap.saturating_sub(started.elapsed())).await;
        container = h::unique("web0");
        let t = Instant::now();
        let got = add(&conf, &container, &pod, &uid)
            .unwrap_or_else(|e| panic!("web-0 after a gap of {gap:?}: {e:?}\n{}", net.ctl.log()));
        let (add_took, recreated) = (t.elapsed(), started.elapsed());
        assert_eq!(got, ip, "web-0 keeps its address after a gap of {gap:?}\n{}", net.ctl.log());
        assert!(!waiting.is_finished(), "the waiter still waits: nothing was free for it");

        // One of the other Pods goes: the waiter gets its address.
        let (other, other_cid, other_ip) = others.pop_front().unwrap();
        let released = Instant::now();
        h::cni_del(&conf, &other_cid);
        delete_pod(&other).await;
        let (res, waited, served) = waiting.join().unwrap();
        let waiter_ip = res.unwrap_or_else(|e| panic!("the waiter: {e:?}\n{}", net.ctl.log()));
        assert_ne!(waiter_ip, ip, "the waiter never gets web-0's address");
        assert_eq!(waiter_ip, other_ip, "the waiter gets the address released for it");
        figures.push(format!(
            "gap {} s{}: web-0 back with {ip} {} ms after its DEL (its ADD {} ms); the waiter waited {} ms, \
             served {} ms after the release",
            gap.as_secs(),
            pressure_after.map(|a| format!(" (--pressure-after {a})")).unwrap_or_default(),
            recreated.as_millis(),
            add_took.as_millis(),
            waited.as_millis(),
            served.duration_since(released).as_millis()
        ));
        waiters.push(waiter.clone());
        others.push_back((waiter, waiter_cid, waiter_ip));
    }

    h::wait_converged(&agent, &[&pool], "after the recreations").await;
    let seen = watch.stop().await;
    assert_eq!(one_holder_per_ip(&seen, &pod), 3, "web-0's first ADD and its two recreations");
    let strangers: Vec<_> = seen.iter().filter(|s| !s.hold && s.ip == ip && s.pod != pod).collect();
    assert!(strangers.is_empty(), "only web-0 ever had an endpoint of {ip}: {strangers:?}");
    let ended = events_about(&hold, netendpoint_crd::REASON_STICKY_HOLD_ENDED).await;
    assert!(ended.is_empty(), "web-0's hold never ended: {ended:?}");
    let a = analyze(&agent.events());
    assert_eq!(a.lost_rules.len(), 0, "{:?}", a.lost_rules);
    assert_eq!(a.out_of_order().count(), 0, "a new holder's add came before the old holder's remove");
    for f in &figures {
        println!("sticky with a waiter in the queue, pool of 5: {f}");
    }

    delete_pod(&pod).await;
    for (name, cid, _) in &others {
        h::cni_del(&conf, cid);
        delete_pod(name).await;
    }
    delete_statefulset(&sts).await;
    drop(agent);
    net.stop().await;
}

/// Issue 33, item 2, a retry always converges: a recreation's ADD that ran
/// out of `waitForOld` (3 s; the agent was stalled on the previous
/// incarnation's finalizer) fails with code 11, withdraws its request and
/// gets its sandbox's DEL; once the agent is back, the next ADD (a new
/// sandbox of the same Pod) gets the address at once, and no incarnation
/// of the failed sandbox ever appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sticky_retry_after_waitforold_ran_out_gets_the_address_at_once() {
    let _serial = SERIAL.lock().await;
    let node = h::unique("sticky-retry");
    let pool = h::unique("sticky-retry");
    let range = json!({"subnet": "10.99.0.0/24", "rangeStart": "10.99.0.10", "rangeEnd": "10.99.0.12"});
    let net = StickyNet::start(sticky_conf(&pool, range, &node, &[FIN], json!({"sticky": {"waitForOld": "3s"}}))).await;
    let conf = net.conf.clone();
    let agent = AgentProc::start(AgentOpts::new(&node, Some(FIN)));
    let watch = h::PoolWatch::start(&pool).await;

    let sts = statefulset(&h::unique("retry"), 1).await;
    let pod = format!("{}-0", sts.metadata.name.as_deref().unwrap());
    net.claim_of(&pod).await;
    let uid = pod_of(&sts, 0, &node).await;
    let first = h::unique("first");
    let ip = add(&conf, &first, &pod, &uid).unwrap();
    let hold = endpoint_name(&pool, ip.parse().unwrap());

    // The agent stalls; web-0 is recreated; the old incarnation waits for
    // the agent's finalizer, so the new ADD runs out of waitForOld.
    signal(agent.child.id(), "-STOP");
    let uid = recreate(&sts, 0, &node).await;
    h::cni_del(&conf, &first);
    let failed = h::unique("failed");
    let t = Instant::now();
    let (code, msg) = add(&conf, &failed, &pod, &uid).unwrap_err();
    let gave_up = t.elapsed();
    assert_eq!(code, 11, "{msg}");
    assert!(msg.contains("acknowledgement of incarnation 1"), "says what it waits for: {msg}");
    // The runtime tears the failed sandbox down.
    h::cni_del(&conf, &failed);
    let request = h::endpoints().await.get(&hold).await.unwrap().status.and_then(|s| s.request);
    assert!(request.is_none(), "the failed ADD withdrew its request: {request:?}");

    // The agent comes back and acknowledges; kubelet retries with a new sandbox.
    signal(agent.child.id(), "-CONT");
    let back = Instant::now();
    let previous = format!("{hold}-1");
    h::wait_for("incarnation 1 to go", Duration::from_secs(30), || h::lease_gone(&previous)).await;
    let acknowledged = back.elapsed();
    let retry = h::unique("retry");
    let t = Instant::now();
    let got = add(&conf, &retry, &pod, &uid).unwrap_or_else(|e| panic!("the retry: {e:?}\n{}", net.ctl.log()));
    let retry_took = t.elapsed();
    assert_eq!(got, ip, "the retry gets the claim's address");
    assert!(retry_took < Duration::from_secs(3), "the retry waited for nothing: {retry_took:?}");

    h::wait_converged(&agent, &[&pool], "after the retry").await;
    let seen = watch.stop().await;
    let of_failed: Vec<_> = seen.iter().filter(|s| s.container == failed).collect();
    assert!(of_failed.is_empty(), "no incarnation of the failed sandbox: {of_failed:?}");
    assert_eq!(one_holder_per_ip(&seen, &pod), 2, "the first ADD and the retry");
    let ep = h::endpoints().await.get(&format!("{hold}-2")).await.unwrap();
    assert_eq!(ep.spec.container_id, retry, "incarnation 2 is the retry's");
    println!(
        "sticky retry: the ADD gave up after {} ms (code 11); the agent acknowledged {} ms after it came back; \
         the retry got {ip} in {} ms",
        gave_up.as_millis(),
        acknowledged.as_millis(),
        retry_took.as_millis()
    );
    delete_pod(&pod).await;
    delete_statefulset(&sts).await;
    drop(agent);
    net.stop().await;
}

/// Issue 33, item 3: the controller is down for 30 s across a recreation.
/// kubelet keeps retrying the new sandbox (each ADD runs out of its
/// `waitForOld` of 5 s with code 11, then its sandbox's DEL, then a pause
/// of 1 s); once a controller leads again, the first ADD that starts after
/// it gets the claim's address, and no failed sandbox ever got an
/// incarnation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_recreation_across_a_30_s_controller_outage_gets_its_address_on_the_first_retry_after() {
    let _serial = SERIAL.lock().await;
    let node = h::unique("sticky-outage");
    let pool = h::unique("sticky-outage");
    let range = json!({"subnet": "10.100.0.0/24", "rangeStart": "10.100.0.10", "rangeEnd": "10.100.0.12"});
    let mut net =
        StickyNet::start(sticky_conf(&pool, range, &node, &[FIN], json!({"sticky": {"waitForOld": "5s"}}))).await;
    let conf = net.conf.clone();
    let agent = AgentProc::start(AgentOpts::new(&node, Some(FIN)));
    let watch = h::PoolWatch::start(&pool).await;

    let sts = statefulset(&h::unique("outage"), 1).await;
    let pod = format!("{}-0", sts.metadata.name.as_deref().unwrap());
    net.claim_of(&pod).await;
    let uid = pod_of(&sts, 0, &node).await;
    let first = h::unique("first");
    let ip = add(&conf, &first, &pod, &uid).unwrap();

    // The controller goes; web-0 is recreated meanwhile.
    net.stop_controller();
    let down = Instant::now();
    h::cni_del(&conf, &first);
    let uid = recreate(&sts, 0, &node).await;
    // kubelet: sandbox after sandbox until one gets its address.
    let kubelet = {
        let (conf, pod, uid) = (conf.clone(), pod.clone(), uid.clone());
        std::thread::spawn(move || {
            let mut tries = Vec::new();
            loop {
                let cid = h::unique("sandbox");
                let start = Instant::now();
                let got = add(&conf, &cid, &pod, &uid);
                let ok = got.is_ok();
                if !ok {
                    h::cni_del(&conf, &cid);
                }
                tries.push((cid, start, Instant::now(), got));
                if ok || tries.len() > 20 {
                    return tries;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(30).saturating_sub(down.elapsed())).await;
    let restarted = Instant::now();
    net.start_controller(&[]).await;
    let leads = Instant::now();
    let tries = kubelet.join().unwrap();

    let (last_cid, last_start, last_end, last) = tries.last().unwrap();
    let got = last.clone().unwrap_or_else(|e| panic!("no try got an address: {e:?}\n{}", net.ctl.log()));
    assert_eq!(got, ip, "web-0 keeps its address across the outage");
    let failed: Vec<&String> = tries.iter().filter(|t| t.3.is_err()).map(|t| &t.0).collect();
    for (cid, start, _, res) in &tries[..tries.len() - 1] {
        let (code, msg) = res.clone().unwrap_err();
        assert!(*start < leads, "{cid}, started after the controller led, failed: {msg}");
        assert_eq!(code, 11, "{cid}: {msg}");
    }
    assert!(failed.len() >= 4, "the outage made tries fail: {}", failed.len());
    h::wait_converged(&agent, &[&pool], "after the outage").await;
    let seen = watch.stop().await;
    let of_failed: Vec<_> = seen.iter().filter(|s| failed.contains(&&s.container)).collect();
    assert!(of_failed.is_empty(), "no incarnation of a failed sandbox: {of_failed:?}");
    assert_eq!(one_holder_per_ip(&seen, &pod), 2, "the first ADD and the successful try");
    assert!(seen.iter().any(|s| !s.hold && &s.container == last_cid), "the successful try has its endpoint");
    let start = if *last_start >= leads {
        format!("started {} ms after it led", last_start.duration_since(leads).as_millis())
    } else {
        format!("in flight when it led, started {} ms before", leads.duration_since(*last_start).as_millis())
    };
    println!(
        "sticky across a controller outage of {} s: {} tries failed with code 11 meanwhile; the new controller led \
         {} ms after it started; web-0 got {ip} {} ms after that, by a try that took {} ms ({start})",
        restarted.duration_since(down).as_secs(),
        failed.len(),
        leads.duration_since(restarted).as_millis(),
        last_end.saturating_duration_since(leads).as_millis(),
        last_end.duration_since(*last_start).as_millis(),
    );
    delete_pod(&pod).await;
    delete_statefulset(&sts).await;
    drop(agent);
    net.stop().await;
}

/// A hold whose end by pool pressure the controller refused (its Pod
/// object still exists) still ends for its other reasons: StatefulSet
/// `web` is scaled from 2 to 1 while `web-1`'s sandbox is gone but its Pod
/// object remains, and a real Pod waits in the full pool. The controller
/// tries pressure on web-1's hold, refuses it on reading the Pod, then
/// deletes web-1's claim (scaled down, seen twice) and ends the hold for
/// that; the waiter gets web-1's address within its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hold_whose_pressure_was_refused_still_ends_when_its_statefulset_scales_down() {
    let _serial = SERIAL.lock().await;
    let node = h::unique("sticky-refused");
    let pool = h::unique("sticky-refused");
    let range = json!({"subnet": "10.101.0.0/24", "rangeStart": "10.101.0.10", "rangeEnd": "10.101.0.12"});
    let net =
        StickyNet::start_with(sticky_conf(&pool, range, &node, &[], json!({})), &["--pressure-after", "3s"]).await;
    let conf = net.conf.clone();

    let sts = statefulset(&h::unique("web"), 2).await;
    let name = sts.metadata.name.clone().unwrap();
    let mut ips = Vec::new();
    let mut sandboxes = Vec::new();
    for o in 0..2 {
        let pod = format!("{name}-{o}");
        net.claim_of(&pod).await;
        let uid = pod_of(&sts, o, &node).await;
        let cid = h::unique("web");
        ips.push(add(&conf, &cid, &pod, &uid).unwrap());
        sandboxes.push(cid);
    }
    // web-1's sandbox goes; its Pod object stays. A filler fills the pool.
    h::cni_del(&conf, &sandboxes[1]);
    let hold1 = endpoint_name(&pool, ips[1].parse().unwrap());
    let (filler, filler_uid) = h::waiting_pod("filler", &node).await;
    let filler_cid = h::unique("filler");
    add(&conf, &filler_cid, &filler, &filler_uid).unwrap();
    h::wait_for_summary(&pool).await;

    // A real Pod waits; web-1's hold is idle for longer than --pressure-after,
    // and spared while the StatefulSet wants ordinal 1.
    let (waiter, waiter_uid) = h::waiting_pod("waiter", &node).await;
    let waiting = {
        let mut c = conf.clone();
        c["ipam"]["waitForRelease"] = json!("30s");
        let (w, u, cid) = (waiter.clone(), waiter_uid, h::unique("waiter"));
        std::thread::spawn(move || add(&c, &cid, &w, &u))
    };
    wait_queued(&pool, &waiter).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!h::lease_gone(&hold1).await, "web-1's hold is spared while its ordinal is wanted");

    // Scaled down: pressure picks web-1's hold, and the controller refuses
    // it on reading web-1's Pod; then the claim goes, and the hold with it.
    let sts_api = Api::<StatefulSet>::namespaced(h::client().await, NS);
    let scaled = Instant::now();
    sts_api.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}}))).await.unwrap();
    let refused = format!("pool pressure ends no hold hold={hold1}");
    h::wait_for("the refused pressure attempt", Duration::from_secs(15), || async {
        net.ctl.log().lines().any(|l| l.contains(&refused) && l.contains("exists: its identity is coming back"))
    })
    .await;
    let got = waiting.join().unwrap().unwrap_or_else(|e| panic!("the waiter: {e:?}\n{}", net.ctl.log()));
    let served = scaled.elapsed();
    assert_eq!(got, ips[1], "the waiter gets web-1's address once its hold ended");
    let ended = events_about(&hold1, netendpoint_crd::REASON_STICKY_HOLD_ENDED).await;
    assert!(ended.iter().any(|n| n.contains("its claim was deleted")), "{ended:?}\n{}", net.ctl.log());
    println!(
        "a hold whose pressure was refused: the waiter got web-1's address {} ms after the scale-down",
        served.as_millis()
    );

    for o in 0..2 {
        delete_pod(&format!("{name}-{o}")).await;
    }
    delete_pod(&filler).await;
    delete_pod(&waiter).await;
    delete_statefulset(&sts).await;
    net.stop().await;
}
