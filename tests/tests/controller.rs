//! netendpoint-controller against the real API server: leader election,
//! vanished-node reclaim, pod-gone cleanup, forced release for a waiting
//! ADD, and pool metrics. Each test scopes its controllers to its own pools
//! (`--selector`) and its own leader Lease, so tests run side by side.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease as CoordLease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use netendpoint_crd::{LABEL_POOL, NetworkEndpoint, label_value};
use netendpoint_tests::*;

const FIN: &str = "test.example/stuck-agent";

async fn create(ep: NetworkEndpoint) -> NetworkEndpoint {
    endpoints().await.create(&PostParams::default(), &ep).await.unwrap()
}

#[tokio::test]
async fn only_the_leader_acts_and_a_standby_takes_over_when_it_dies() {
    let pool = unique("ctl-le");
    let lease_name = unique("ctl-le");
    let gone_a = unique("gone-a");
    let gone_b = unique("gone-b");
    let args = ["--vanished-node-grace", "1s", "--pod-gone-grace", "off"];
    let mut a = ControllerProc::start(&unique("ctl-a"), &lease_name, &[&pool], &args);
    a.wait_leader().await;
    let b = ControllerProc::start(&unique("ctl-b"), &lease_name, &[&pool], &args);
    wait_for("the standby to be ready", Duration::from_secs(60), || async {
        b.get("/readyz").is_some_and(|s| s.starts_with("ready"))
    })
    .await;
    assert!(!b.is_leader(), "two leaders");

    // A vanished node's lease: released by the leader only.
    let first = create(lease(&pool, "10.77.0.1", "c1", &gone_a, &[])).await;
    let first_name = first.metadata.name.clone().unwrap();
    wait_for("the first reclaim", Duration::from_secs(60), || async { !lease_exists(&first_name).await }).await;
    let ev = events_about(&first_name, netendpoint_crd::REASON_NODE_VANISHED).await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].instance, a.identity, "acted by the leader");
    assert!(!b.log().contains("node absent for the grace"), "the standby acted:\n{}", b.log());

    // Kill the leader: the standby takes over within the Lease's duration
    // (3 s) plus its retry interval, and then acts.
    let killed = Instant::now();
    a.kill();
    wait_for("the standby to take over", Duration::from_secs(30), || async { b.is_leader() }).await;
    let took = killed.elapsed();
    println!("takeover after the leader was killed: {} ms (lease 3 s, grace 1 s)", took.as_millis());
    let coord: Api<CoordLease> = Api::namespaced(client().await, "default");
    let holder = coord.get(&lease_name).await.unwrap().spec.unwrap().holder_identity.unwrap_or_default();
    assert_eq!(holder, b.identity);

    let second = create(lease(&pool, "10.77.0.2", "c2", &gone_b, &[])).await;
    let second_name = second.metadata.name.clone().unwrap();
    wait_for("the second reclaim", Duration::from_secs(60), || async { !lease_exists(&second_name).await }).await;
    let ev = events_about(&second_name, netendpoint_crd::REASON_NODE_VANISHED).await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].instance, b.identity);
    let _ = coord.delete(&lease_name, &DeleteParams::default()).await;
    cleanup_pool(&pool).await;
}

#[tokio::test]
async fn reclaim_waits_for_the_grace_and_never_touches_a_present_nodes_lease() {
    let pool = unique("ctl-rc");
    let present = unique("present");
    ensure_node(&present);
    let gone = unique("gone");
    let kept = create(lease(&pool, "10.78.0.1", "c1", &present, &[])).await.metadata.name.unwrap();
    let orphan = create(lease(&pool, "10.78.0.2", "c2", &gone, &[FIN])).await.metadata.name.unwrap();
    let grace = Duration::from_secs(4);
    let started = Instant::now();
    let ctl = ControllerProc::start(
        &unique("ctl-rc"),
        &unique("ctl-rc"),
        &[&pool],
        &["--vanished-node-grace", "4s", "--pod-gone-grace", "off"],
    );
    ctl.wait_leader().await;
    wait_for("the reclaim", Duration::from_secs(60), || async {
        endpoints().await.get(&orphan).await.unwrap().metadata.deletion_timestamp.is_some()
    })
    .await;
    // Never before the node was absent for the grace, counted from when the controller first saw it.
    assert!(started.elapsed() >= grace, "reclaimed after {:?}", started.elapsed());
    // Finalizers still gate the release.
    assert!(lease_exists(&orphan).await, "released despite its finalizer");
    let kept_now = endpoints().await.get(&kept).await.unwrap();
    assert!(kept_now.metadata.deletion_timestamp.is_none(), "a present node's lease was touched");
    assert_eq!(ctl.metric(&format!("netendpoint_node_reclaims_total{{pool=\"{}\"}}", label_value(&pool))), Some(1.0));
    remove_finalizer(&orphan, FIN).await;
    cleanup_pool(&pool).await;
}

#[tokio::test]
async fn pod_gone_cleanup_respects_its_grace_and_off_switch_and_spares_living_pods() {
    let pool = unique("ctl-gc");
    let off_pool = unique("ctl-gc-off");
    let node = unique("gc-node");
    ensure_node(&node);
    let pods: Api<Pod> = Api::namespaced(client().await, "default");
    let pod_name = unique("ctl-pod");
    let pod = PodFixture::new(&pod_name).create().await;
    let live_uid = pod.metadata.uid.clone().unwrap();
    let of_pod = |pool: &str, ip: &str, container: &str, uid: &str| {
        LeaseFixture::new(pool, ip).container(container).node(&node).pod_uid(uid).create()
    };
    let living = of_pod(&pool, "10.79.0.1", "c1", &live_uid).await.metadata.name.unwrap();
    let leaked = of_pod(&pool, "10.79.0.2", "c2", "0000-gone-1").await.metadata.name.unwrap();
    let spared = of_pod(&off_pool, "10.79.0.3", "c3", "0000-gone-2").await.metadata.name.unwrap();

    let started = Instant::now();
    let on = ControllerProc::start(&unique("ctl-gc"), &unique("ctl-gc"), &[&pool], &["--pod-gone-grace", "3s"]);
    let off =
        ControllerProc::start(&unique("ctl-gc-off"), &unique("ctl-gc-off"), &[&off_pool], &["--pod-gone-grace", "off"]);
    on.wait_leader().await;
    off.wait_leader().await;
    wait_for("the leak deletion", Duration::from_secs(60), || async { !lease_exists(&leaked).await }).await;
    assert!(started.elapsed() >= Duration::from_secs(3), "deleted after {:?}", started.elapsed());
    assert!(!events_about(&leaked, netendpoint_crd::REASON_POD_GONE).await.is_empty());
    // Three more graces on: the living Pod's lease and the off switch's lease are untouched.
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(lease_exists(&living).await, "the lease of a Pod that exists was deleted");
    assert!(lease_exists(&spared).await, "pod-gone cleanup acted while off");
    assert!(off.log().contains("initial lists done"), "{}", off.log());
    let _ = pods.delete(&pod_name, &DeleteParams::default()).await;
    cleanup_pool(&pool).await;
    cleanup_pool(&off_pool).await;
}

/// Fills the /29 `net`.0 of `pool` with leases carrying `bound` and a finalizer, and releases `.3`.
/// Returns the names, the releasing one, and an instant just before its release began.
async fn full_pool_with_one_release(pool: &str, net: &str, bound: &str) -> (Vec<String>, String, Instant) {
    let node = "node-a";
    ensure_node(node);
    let mut names = Vec::new();
    for host in 1..=6 {
        let ip = format!("{net}.{host}");
        let ep = LeaseFixture::new(pool, &ip).container(&format!("held-{host}")).node(node).finalizers(&[FIN]);
        names.push(ep.force_release_after(bound).create().await.metadata.name.unwrap());
    }
    let victim = names[2].clone();
    let api = endpoints().await;
    let before = Instant::now();
    api.delete(&victim, &DeleteParams::default()).await.unwrap();
    (names, victim, before)
}

fn cross_node_conf(pool: &str, net: &str, wait: &str) -> serde_json::Value {
    net_conf(
        pool,
        serde_json::json!([[{"subnet": format!("{net}.0/29")}]]),
        serde_json::json!({"crossNode": "controller", "waitForRelease": wait, "finalizers": [FIN]}),
    )
}

#[tokio::test]
async fn a_stuck_release_is_forced_only_when_an_add_waits_and_only_one_waiter_gets_it() {
    let pool = unique("ctl-fr");
    let net = "10.80.0";
    let (_names, victim, _) = full_pool_with_one_release(&pool, net, "2s").await;
    let ctl = ControllerProc::start(&unique("ctl-fr"), &unique("ctl-fr"), &[&pool], &["--pod-gone-grace", "off"]);
    ctl.wait_leader().await;
    // Well past its bound, but nobody needs the IP: nothing is forced.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let held = endpoints().await.get(&victim).await.unwrap();
    assert_eq!(held.metadata.finalizers.unwrap_or_default(), [FIN], "forced with no ADD waiting");
    assert!(events_about(&victim, "ForcedRelease").await.is_empty());

    // Two ADDs of two waiting Pods wait at once: one gets the forced IP, the other times out.
    let conf = cross_node_conf(&pool, net, "8s");
    let mut waiting = Vec::new();
    for cid in ["w1", "w2"] {
        let (name, uid) = waiting_pod("ctl-fr-pod", "node-a").await;
        waiting.push((cid, pod_args(&name, &uid)));
    }
    let started = Instant::now();
    let adds: Vec<_> = waiting
        .into_iter()
        .map(|(cid, args)| {
            let conf = conf.clone();
            std::thread::spawn(move || {
                let out = invoke("ADD", &conf, &pod_env(cid, &args));
                (out, Instant::now())
            })
        })
        .collect();
    let results: Vec<_> = adds.into_iter().map(|h| h.join().unwrap()).collect();
    let won: Vec<_> = results.iter().filter(|((ok, _, _), _)| *ok).collect();
    assert_eq!(won.len(), 1, "exactly one waiter gets the IP: {results:?}");
    let ((_, res, _), at) = won[0];
    assert_eq!(first_ip(res).to_string(), format!("{net}.3"));
    println!("waiting ADD succeeded {} ms after it started (release eligible already)", (*at - started).as_millis());
    let lost = results.iter().find(|((ok, _, _), _)| !*ok).unwrap();
    assert_eq!(lost.0.1["code"], 100, "{:?}", lost.0);

    let ev = events_about(&victim, "ForcedRelease").await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].controller, netendpoint_crd::REPORTER_CONTROLLER);
    assert!(ev[0].note.contains(FIN), "{}", ev[0].note);
    // Each waiting ADD joined the queue with its own entry, believed after
    // a check of its Pod; the release was promised to the first, and both
    // entries were deleted when the waits ended.
    assert!(ctl.log().contains("address promised to a waiting ADD"), "{}", ctl.log());
    wait_for("the entries to be deleted", Duration::from_secs(30), || async {
        let needs: Api<netendpoint_crd::NetworkEndpointNeed> = Api::all(client().await);
        needs.list(&Default::default()).await.unwrap().items.iter().all(|n| n.spec.pool != pool)
    })
    .await;
    assert_eq!(ctl.metric(&format!("netendpoint_forced_releases_total{{pool=\"{}\"}}", label_value(&pool))), Some(1.0));
    cleanup_pool(&pool).await;
}

#[tokio::test]
async fn a_young_release_is_never_forced_and_the_time_to_serve_a_waiter_is_measured() {
    let pool = unique("ctl-yr");
    let net = "10.81.0";
    let (_names, victim, released_at) = full_pool_with_one_release(&pool, net, "4s").await;
    let ctl = ControllerProc::start(&unique("ctl-yr"), &unique("ctl-yr"), &[&pool], &["--pod-gone-grace", "off"]);
    ctl.wait_leader().await;
    // The ADD starts while the release is young and waits; the release is
    // forced once it is 4 s old (whole-second timestamps: up to ~2 s later).
    let (name, uid) = waiting_pod("ctl-yr-pod", "node-a").await;
    let args = pod_args(&name, &uid);
    let (ok, res, log) = invoke("ADD", &cross_node_conf(&pool, net, "20s"), &pod_env("young", &args));
    let served = released_at.elapsed();
    assert!(ok, "{res} {log}");
    assert_eq!(first_ip(&res).to_string(), format!("{net}.3"));
    assert!(served >= Duration::from_secs(4), "forced {served:?} after the release began, before its bound");
    println!("stuck release eligible at 4 s; waiting ADD served {} ms after the release began", served.as_millis());
    assert_eq!(events_about(&victim, "ForcedRelease").await.len(), 1);
    cleanup_pool(&pool).await;
}

#[tokio::test]
async fn metrics_match_a_pool_prepared_in_a_known_state() {
    let pool = unique("ctl-m");
    let node = unique("m-node");
    ensure_node(&node);
    let fin2 = "test.example/other-agent";
    for (i, fins) in [vec![FIN], vec![FIN, fin2], vec![fin2], vec![], vec![]].into_iter().enumerate() {
        create(lease(&pool, &format!("10.82.0.{}", i + 1), &format!("c{i}"), &node, &fins)).await;
    }
    for i in 1..=3 {
        let name = netendpoint_crd::endpoint_name(&pool, format!("10.82.0.{i}").parse().unwrap());
        endpoints().await.delete(&name, &DeleteParams::default()).await.unwrap();
    }
    // The pool's ranges come from the network config ConfigMap.
    let cm_name = unique("net-conf");
    let conf = net_conf(&pool, serde_json::json!([[{"subnet": "10.82.0.0/28"}]]), serde_json::json!({}));
    let cms: Api<ConfigMap> = Api::namespaced(client().await, "default");
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(cm_name.clone()), ..Default::default() },
        data: Some(BTreeMap::from([("10-net.conflist".to_string(), conf.to_string())])),
        ..Default::default()
    };
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let net_conf_flag = format!("default/{cm_name}");
    let ctl = ControllerProc::start(
        &unique("ctl-m"),
        &unique("ctl-m"),
        &[&pool],
        &["--pod-gone-grace", "off", "--net-conf", &net_conf_flag],
    );
    ctl.wait_leader().await;
    let p = label_value(&pool);
    let series = |name: &str| format!("netendpoint_{name}{{pool=\"{p}\"}}");
    wait_for("pool gauges", Duration::from_secs(30), || async { ctl.metric(&series("pool_releasing")) == Some(3.0) })
        .await;
    let capacity = ctl.metric(&series("pool_capacity")).unwrap();
    assert!(capacity >= 12.0, "a /28 has 14 hosts, less the gateway: {capacity}");
    assert_eq!(ctl.metric(&series("pool_in_use")), Some(2.0));
    assert_eq!(ctl.metric(&series("pool_free")), Some(capacity - 5.0));
    assert_eq!(
        ctl.metric(&format!("netendpoint_pool_releasing_by_finalizer{{pool=\"{p}\",finalizer=\"{FIN}\"}}")),
        Some(2.0)
    );
    assert_eq!(
        ctl.metric(&format!("netendpoint_pool_releasing_by_finalizer{{pool=\"{p}\",finalizer=\"{fin2}\"}}")),
        Some(2.0)
    );
    assert!(ctl.metric(&series("pool_oldest_release_age_seconds")).is_some());
    println!("capacity of the /28: {capacity}");

    // The same figures in the pool's NetworkEndpointPool status, for `kubectl get neppool`.
    let get = || kubectl(&["get", "neppool", &p, "-o", "json"]);
    wait_for("the pool status", Duration::from_secs(30), || async {
        let o = get();
        o.status.success()
            && serde_json::from_slice::<serde_json::Value>(&o.stdout)
                .is_ok_and(|j| j["status"]["releasing"] == 3 && j["status"]["used"] == 2)
    })
    .await;
    let j: serde_json::Value = serde_json::from_slice(&get().stdout).unwrap();
    let st = &j["status"];
    assert_eq!(st["capacity"], capacity.to_string(), "{j}");
    assert_eq!(st["free"], (capacity - 5.0).to_string(), "{j}");
    assert_eq!(st["releasingByFinalizer"], serde_json::json!({FIN: 2, fin2: 2}), "{j}");
    assert_eq!(st["waitingOn"], format!("{fin2}=2,{FIN}=2"), "{j}");
    assert!(st["oldestReleaseSince"].is_string(), "{j}");
    let table = String::from_utf8_lossy(&kubectl(&["get", "neppool", &p]).stdout).into_owned();
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "CAPACITY", "USED", "RELEASING", "FREE", "OLDEST-RELEASE", "WAITING-ON"], "{table}");
    // A release completes: the status follows (the writer is rate-limited, not stopped).
    remove_finalizer(&netendpoint_crd::endpoint_name(&pool, "10.82.0.3".parse().unwrap()), fin2).await;
    wait_for("the pool status to follow", Duration::from_secs(30), || async {
        serde_json::from_slice::<serde_json::Value>(&get().stdout).is_ok_and(|j| j["status"]["releasing"] == 2)
    })
    .await;
    let _ = cms.delete(&cm_name, &DeleteParams::default()).await;
    cleanup_pool(&pool).await;
}

/// The deployed ServiceAccount's rights are enough for the controller's whole job.
#[tokio::test]
async fn the_controller_works_as_its_deployed_service_account() {
    apply_deploy();
    let dir = TempDir::new("ctl-sa");
    let kc = dir.join("kubeconfig");
    sa_kubeconfig(DEPLOY_NAMESPACE, "netendpoint-controller", &kc, None);
    let pool = unique("ctl-sa");
    let gone = unique("gone-sa");
    let orphan = create(lease(&pool, "10.83.0.1", "c1", &gone, &[])).await.metadata.name.unwrap();
    let ctl = ControllerProc::start_as(
        &kc,
        &unique("ctl-sa"),
        &unique("ctl-sa"),
        &[&pool],
        &[
            "--lease-namespace",
            DEPLOY_NAMESPACE,
            "--net-conf",
            "netendpoint-system/netendpoint-net-conf",
            "--vanished-node-grace",
            "1s",
        ],
    );
    ctl.wait_leader().await;
    wait_for("the reclaim as the ServiceAccount", Duration::from_secs(60), || async { !lease_exists(&orphan).await })
        .await;
    assert_eq!(events_about(&orphan, netendpoint_crd::REASON_NODE_VANISHED).await.len(), 1, "{}", ctl.log());
    assert!(!ctl.log().contains("forbidden"), "{}", ctl.log());
    cleanup_pool(&pool).await;
}

/// Issue of trust boundaries, end to end with deploy/ applied (admission
/// policies included): the plugin runs with a token bound to its node and
/// `crossNode: controller`, the controller as its deployed ServiceAccount.
/// A stuck release is still forced once an ADD needs its IP, and a vanished
/// node's lease is still reclaimed: by the controller, which the policies
/// allow, where the node's own plugin identity is refused.
#[tokio::test]
async fn forced_release_and_reclaim_still_work_under_the_node_bound_identities() {
    apply_deploy();
    let dir = TempDir::new("ctl-e2e");
    let node = unique("e2e-node");
    ensure_node(&node);
    let plugin_kc = dir.join("plugin.kubeconfig");
    node_bound_kubeconfig(DEPLOY_NAMESPACE, CNI_SERVICE_ACCOUNT, &node, &plugin_kc);
    let ctl_kc = dir.join("controller.kubeconfig");
    sa_kubeconfig(DEPLOY_NAMESPACE, "netendpoint-controller", &ctl_kc, None);

    let pool = unique("ctl-e2e");
    // Under the deployed policies, a lease carries registered finalizers only, in its pool's ranges.
    let _ranges = netendpoint_tests::register_pool(&pool, &["10.86.0.0/29"]);
    let _agent = netendpoint_tests::AgentLines::finalizer(FIN);
    let conf = net_conf(
        &pool,
        serde_json::json!([[{"subnet": "10.86.0.0/29", "rangeStart": "10.86.0.2", "rangeEnd": "10.86.0.3"}]]),
        serde_json::json!({
            "crossNode": "controller", "kubeconfig": plugin_kc, "nodeName": node, "dataDir": dir.join("data"),
            "finalizers": [FIN], "forceReleaseAfter": "2s", "waitForRelease": "30s",
        }),
    );
    // The node's plugin fills the pool and releases one pod; no agent acknowledges.
    for cid in ["e2e-1", "e2e-2"] {
        let (ok, r, e) = invoke("ADD", &conf, &attach_env(cid));
        assert!(ok, "{r} {e}");
    }
    let (ok, r, e) = invoke("DEL", &conf, &attach_env("e2e-1"));
    assert!(ok, "{r} {e}");
    let stuck = endpoints()
        .await
        .list(&ListParams::default().labels(&format!("{LABEL_POOL}={}", label_value(&pool))))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|ep| ep.metadata.deletion_timestamp.is_some())
        .expect("one release in progress");
    let stuck_name = stuck.metadata.name.clone().unwrap();

    // The node's own identity may not reach across: a lease of another node
    // (in the pool, outside this network's ranges: when it is reclaimed, its
    // address is no promise for this network's waiter).
    let gone = unique("e2e-gone");
    let orphan = create(lease(&pool, "10.86.0.5", "e2e-orphan", &gone, &[])).await.metadata.name.unwrap();
    let as_plugin: Api<NetworkEndpoint> = Api::all(client_for(&plugin_kc).await);
    let refused = as_plugin.delete(&orphan, &DeleteParams::default()).await;
    assert!(matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 403), "{refused:?}");

    let ctl = ControllerProc::start_as(
        &ctl_kc,
        &unique("ctl-e2e"),
        &unique("ctl-e2e"),
        &[&pool],
        &["--lease-namespace", DEPLOY_NAMESPACE, "--vanished-node-grace", "1s", "--pod-gone-grace", "off"],
    );
    ctl.wait_leader().await;
    // A new pod's ADD waits; the controller forces the stuck release for it.
    let (name, uid) = waiting_pod("ctl-e2e-pod", &node).await;
    let args = pod_args(&name, &uid);
    let started = Instant::now();
    let (ok, r, e) = invoke("ADD", &conf, &pod_env("e2e-3", &args));
    assert!(ok, "{r} {e}\n{}", ctl.log());
    assert_eq!(first_ip(&r).to_string(), stuck.spec.ip, "the forced address");
    println!("under node-bound identities: waiting ADD served in {} ms", started.elapsed().as_millis());
    assert_eq!(events_about(&stuck_name, "ForcedRelease").await.len(), 1);
    // And the vanished node's lease is reclaimed by the controller.
    wait_for("the reclaim under the controller's identity", Duration::from_secs(60), || async {
        !lease_exists(&orphan).await
    })
    .await;
    assert!(!ctl.log().contains("forbidden"), "{}", ctl.log());
    cleanup_pool(&pool).await;
}

/// A leader asked to stop (SIGTERM, as a rollout does) gives its Lease
/// back: the Lease has no holder at once, and a new replica leads within
/// seconds, not after the Lease's 15 s.
#[tokio::test]
async fn a_leader_that_is_stopped_gives_its_lease_back() {
    let pool = unique("ctl-term");
    let lease = unique("ctl-term");
    let flags = ["--lease-seconds", "15", "--lease-grace-seconds", "5"];
    let mut first = ControllerProc::start(&unique("ctl-term-a"), &lease, &[&pool], &flags);
    first.wait_leader().await;
    first.terminate();
    let leases: Api<CoordLease> = Api::namespaced(client().await, "default");
    let holder = leases.get(&lease).await.unwrap().spec.and_then(|s| s.holder_identity).unwrap_or_default();
    assert!(holder.is_empty(), "the Lease was given back: holder {holder:?}\n{}", first.log());
    assert!(first.log().contains("releasing the leader Lease"), "{}", first.log());
    let started = Instant::now();
    let next = ControllerProc::start(&unique("ctl-term-b"), &lease, &[&pool], &flags);
    next.wait_leader().await;
    let took = started.elapsed();
    println!("a new replica led {} ms after it started, the old leader stopped by SIGTERM", took.as_millis());
    assert!(took < Duration::from_secs(10), "not after the Lease's expiry: {took:?}");
}
