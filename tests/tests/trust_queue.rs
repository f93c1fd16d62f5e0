//! What a compromised node can do to the full-pool queue and to sticky
//! holds under pressure, tried with its real node-bound plugin token against
//! the shipped policies, the real API server and the controller (the threat
//! model of docs/design.md, "Compromised nodes"). A node can always create a
//! free address itself, so the queue cannot bind it; what it cannot do:
//! - hold more than 32 entries per pool, or name an entry outside its slots;
//! - have an entry believed (ordered, promised an address) for a Pod that
//!   does not exist, is another Pod (UID), is not Pending or is bound to
//!   another node: the controller deletes such an entry and promises it nothing;
//! - keep an address promised to a waiter that is gone: the promise lapses
//!   at the entry's deadline and goes to the next waiter;
//! - turn pressure into theft: a hold idle for less than `pressureAfter`
//!   survives a node that fills the pool with its own leases and raises an
//!   entry for its own Pending Pod.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use netendpoint_crd::ipamclaim::{IPAMClaim, IPAMClaimSpec};
use netendpoint_crd::{NetworkEndpointNeed, need_name};
use netendpoint_tests::trust::*;
use netendpoint_tests::{self as h, CNI_SERVICE_ACCOUNT, ControllerProc};
use serde_json::{Value, json};

/// One controller at a time: each watches every Pod and StatefulSet.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const NS: &str = "default";

/// A network published in a ConfigMap that a controller reads (so it knows
/// the pool's ranges and capacity), the pool registered in
/// `netendpoint-pools` (so a node's token may lease there), and the
/// controller serving it.
struct Net {
    pool: String,
    conf: Value,
    cm: String,
    ctl: ControllerProc,
    _ranges: h::PoolRegistration,
}

impl Net {
    async fn start(pool: &str, cidr: &str, range: Value, ipam: Value, flags: &[&str]) -> Self {
        let ranges = h::register_pool(pool, &[cidr]);
        let conf = h::net_conf(pool, json!([[range]]), ipam);
        let cm = h::unique("trust-q-net");
        let cms: Api<ConfigMap> = Api::namespaced(h::client().await, NS);
        let obj = serde_json::from_value(json!({"metadata": {"name": cm}, "data": {"10-net.conf": conf.to_string()}}));
        cms.create(&PostParams::default(), &obj.unwrap()).await.unwrap();
        let ctl = Self::controller(pool, &cm, flags);
        ctl.wait_leader().await;
        Self { pool: pool.into(), conf, cm, ctl, _ranges: ranges }
    }

    fn controller(pool: &str, cm: &str, flags: &[&str]) -> ControllerProc {
        let net_conf = format!("{NS}/{cm}");
        let mut args = vec!["--net-conf", net_conf.as_str(), "--pod-gone-grace", "off"];
        args.extend_from_slice(flags);
        ControllerProc::start(&h::unique("trust-q-ctl"), &h::unique("trust-q-ctl"), &[pool], &args)
    }

    /// Replaces the controller by one with `flags`.
    async fn restart_controller(&mut self, flags: &[&str]) {
        self.ctl.kill();
        self.ctl = Self::controller(&self.pool, &self.cm, flags);
        self.ctl.wait_leader().await;
    }

    async fn stop(self) {
        let cms: Api<ConfigMap> = Api::namespaced(h::client().await, NS);
        let _ = cms.delete(&self.cm, &DeleteParams::default()).await;
        let needs: Api<NetworkEndpointNeed> = Api::all(h::client().await);
        for n in needs.list(&Default::default()).await.unwrap().items {
            if n.spec.pool == self.pool {
                let _ = needs.delete(n.metadata.name.as_deref().unwrap(), &DeleteParams::default()).await;
            }
        }
        h::cleanup_pool(&self.pool).await;
    }
}

/// Deleted at once: no kubelet runs these Pods to end them gracefully.
fn now() -> DeleteParams {
    DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() }
}

/// Entry `slot` of `node` in `pool` for Pod `default/name` (`uid`), waiting
/// `wait` seconds from now.
fn entry(pool: &str, node: &str, slot: u8, pod: (&str, &str), wait: u32) -> NetworkEndpointNeed {
    h::NeedFixture::new(pool, node).wait_seconds(wait).pod(NS, pod.0, pod.1).entry(slot).build()
}

async fn entry_now(needs: &Api<NetworkEndpointNeed>, name: &str) -> Option<NetworkEndpointNeed> {
    needs.get_opt(name).await.unwrap()
}

/// The address promised to entry `name`, if any.
async fn promised(needs: &Api<NetworkEndpointNeed>, name: &str) -> Option<String> {
    entry_now(needs, name).await.and_then(|n| n.status).and_then(|s| s.promise).map(|p| p.ip)
}

/// Queue, trust: a node's entries are bounded by its slots, and only an
/// entry for its own Pending Pod is believed. Entries for a Pod that does
/// not exist, for another Pod of the same name (UID), for a Pod already
/// running and for a Pod bound to another node are deleted by the
/// controller and promised nothing; the one real waiter is ordered and,
/// when its node releases an address, promised it.
#[tokio::test]
async fn a_nodes_queue_entries_are_bounded_and_stand_only_for_its_own_pending_pods() {
    let _serial = SERIAL.lock().await;
    h::apply_deploy();
    let dir = h::TempDir::new("trust-queue");
    let (node, other_node) = (h::unique("trust-qn"), h::unique("trust-qo"));
    h::ensure_node(&other_node);
    let pool = h::unique("trust-q");
    let range = json!({"subnet": "10.79.10.0/24", "rangeStart": "10.79.10.10", "rangeEnd": "10.79.10.12"});
    let net = Net::start(&pool, "10.79.10.0/24", range, json!({"nodeName": node}), &[]).await;
    let client = h::node_bound(CNI_SERVICE_ACCOUNT, &node, &dir).await;
    let (leases, needs): (Api<netendpoint_crd::NetworkEndpoint>, Api<NetworkEndpointNeed>) =
        (Api::all(client.clone()), Api::all(client));
    let pp = PostParams::default();
    // The node fills the pool with its own leases (allowed: it could run three Pods).
    let mut own = Vec::new();
    for host in 10..=12 {
        own.push(leases.create(&pp, &full_lease(&pool, &format!("10.79.10.{host}"), &node, &[])).await.unwrap());
    }

    // Slots: 0 to 31, and the name says the slot.
    let (real, real_uid) = h::waiting_pod("trust-q-real", &node).await;
    let mut beyond = entry(&pool, &node, 31, (&real, &real_uid), 60);
    beyond.spec.slot = Some(netendpoint_crd::MAX_NEED_SLOTS);
    beyond.metadata.name = Some(need_name(&pool, &node, Some(netendpoint_crd::MAX_NEED_SLOTS)));
    assert_refused("an entry in slot 32", needs.create(&pp, &beyond).await, 422, "spec.slot");
    let mut misnamed = entry(&pool, &node, 3, (&real, &real_uid), 60);
    misnamed.metadata.name = Some(need_name(&pool, &node, Some(7)));
    assert_refused("an entry named for another slot", needs.create(&pp, &misnamed).await, 422, "metadata.name must be");
    let mut padded = entry(&pool, &node, 3, (&real, &real_uid), 60);
    padded.metadata.name = Some(format!("{}0", need_name(&pool, &node, Some(3))));
    assert_refused("an entry of slot 3 named 30", needs.create(&pp, &padded).await, 422, "metadata.name must be");

    // Entries that stand for no Pod waiting on this node.
    let ghost = ("trust-q-ghost-does-not-exist", "0b5e7f7e-0000-4000-8000-000000000001");
    let (running, running_uid) = h::waiting_pod("trust-q-running", &node).await;
    let pods: Api<Pod> = Api::namespaced(h::client().await, NS);
    let status = json!({"status": {"phase": "Running"}});
    pods.patch_status(&running, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    let (elsewhere, elsewhere_uid) = h::waiting_pod("trust-q-elsewhere", &other_node).await;
    let liars = [
        ("a Pod that does not exist", entry(&pool, &node, 1, ghost, 60)),
        ("another Pod of the same name", entry(&pool, &node, 2, (&real, "0b5e7f7e-0000-4000-8000-000000000002"), 60)),
        ("a running Pod", entry(&pool, &node, 3, (&running, &running_uid), 60)),
        ("a Pod bound to another node", entry(&pool, &node, 4, (&elsewhere, &elsewhere_uid), 60)),
    ];
    let mut liar_uids = Vec::new();
    for (what, e) in &liars {
        let made =
            needs.create(&pp, e).await.unwrap_or_else(|err| panic!("the node raises an entry for {what}: {err}"));
        liar_uids.push(made.metadata.uid.unwrap());
    }
    let honest = needs.create(&pp, &entry(&pool, &node, 5, (&real, &real_uid), 60)).await.unwrap();
    let honest_name = honest.metadata.name.clone().unwrap();
    let admin_needs: Api<NetworkEndpointNeed> = Api::all(h::client().await);
    h::wait_for("the entries that stand for no waiting Pod are deleted", Duration::from_secs(20), || async {
        let mut gone = true;
        for (_, e) in &liars {
            gone &= entry_now(&admin_needs, e.metadata.name.as_deref().unwrap()).await.is_none();
        }
        gone
    })
    .await;
    h::wait_for("the real waiter is ordered", Duration::from_secs(20), || async {
        entry_now(&admin_needs, &honest_name).await.and_then(|n| n.status).and_then(|s| s.arrival).is_some()
    })
    .await;
    assert_eq!(promised(&admin_needs, &honest_name).await, None, "a full pool promises nothing");

    // The node releases one of its addresses: the real waiter, and no liar, is promised it.
    let freed = own[1].spec.ip.clone();
    leases.delete(own[1].metadata.name.as_deref().unwrap(), &DeleteParams::default()).await.unwrap();
    h::wait_for("the real waiter is promised the released address", Duration::from_secs(20), || async {
        promised(&admin_needs, &honest_name).await.as_deref() == Some(freed.as_str())
    })
    .await;
    let log = net.ctl.log();
    for ((what, _), uid) in liars.iter().zip(&liar_uids) {
        let said = log.lines().any(|l| l.contains(uid.as_str()) && l.contains("not believed"));
        assert!(said, "the controller says why it dropped the entry for {what}\n{log}");
    }
    admin_needs.delete(&honest_name, &DeleteParams::default()).await.unwrap();
    for p in [&real, &running, &elsewhere] {
        let _ = pods.delete(p, &now()).await;
    }
    net.stop().await;
}

/// Queue, trust: a promise to a waiter that is gone lapses. The first of
/// two real waiters is promised the address its node frees; its ADD never
/// takes it (killed, or its node died). At that entry's deadline the
/// controller deletes it, and the address is promised to the next waiter.
#[tokio::test]
async fn a_promise_to_a_waiter_that_is_gone_lapses_to_the_next_at_its_deadline() {
    let _serial = SERIAL.lock().await;
    h::apply_deploy();
    let dir = h::TempDir::new("trust-lapse");
    let node = h::unique("trust-ql");
    let pool = h::unique("trust-ql");
    let range = json!({"subnet": "10.79.12.0/24", "rangeStart": "10.79.12.10", "rangeEnd": "10.79.12.11"});
    let net = Net::start(&pool, "10.79.12.0/24", range, json!({"nodeName": node}), &[]).await;
    let client = h::node_bound(CNI_SERVICE_ACCOUNT, &node, &dir).await;
    let (leases, needs): (Api<netendpoint_crd::NetworkEndpoint>, Api<NetworkEndpointNeed>) =
        (Api::all(client.clone()), Api::all(client));
    let pp = PostParams::default();
    let mut own = Vec::new();
    for host in 10..=11 {
        own.push(leases.create(&pp, &full_lease(&pool, &format!("10.79.12.{host}"), &node, &[])).await.unwrap());
    }
    let (gone, gone_uid) = h::waiting_pod("trust-ql-gone", &node).await;
    let (next, next_uid) = h::waiting_pod("trust-ql-next", &node).await;
    let first = needs.create(&pp, &entry(&pool, &node, 0, (&gone, &gone_uid), 8)).await.unwrap();
    let second = needs.create(&pp, &entry(&pool, &node, 1, (&next, &next_uid), 90)).await.unwrap();
    let (first, second) = (first.metadata.name.unwrap(), second.metadata.name.unwrap());
    let freed = own[0].spec.ip.clone();
    leases.delete(own[0].metadata.name.as_deref().unwrap(), &DeleteParams::default()).await.unwrap();
    let admin_needs: Api<NetworkEndpointNeed> = Api::all(h::client().await);
    h::wait_for("the first waiter is promised the freed address", Duration::from_secs(15), || async {
        promised(&admin_needs, &first).await.as_deref() == Some(freed.as_str())
    })
    .await;
    let promised_at = Instant::now();
    assert_eq!(promised(&admin_needs, &second).await, None, "one release, one waiter");
    // Nobody takes it. At the first entry's deadline the promise lapses to the next.
    h::wait_for("the promise lapses to the next waiter", Duration::from_secs(25), || async {
        promised(&admin_needs, &second).await.as_deref() == Some(freed.as_str())
    })
    .await;
    assert!(entry_now(&admin_needs, &first).await.is_none(), "the entry of the waiter that is gone was deleted");
    println!("a promise to a waiter that is gone lapsed {} ms after it was made", promised_at.elapsed().as_millis());
    assert!(h::pool_endpoints(&pool).await.iter().all(|e| e.spec.ip != freed), "nobody took the promised address");
    admin_needs.delete(&second, &DeleteParams::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(h::client().await, NS);
    for p in [&gone, &next] {
        let _ = pods.delete(p, &now()).await;
    }
    net.stop().await;
}

/// Sticky issue, trust: theft by pressure is refused. A VM's hold is idle
/// (its Pod and sandbox gone, its claim kept). A compromised node fills
/// the rest of the pool with its own leases and raises a queue entry for
/// its own Pending Pod: while the hold is younger than `pressureAfter`
/// (default 5 min) it survives, and nothing is promised. The control: with
/// a `pressureAfter` of 2 s the same pressure ends it, so the setup does
/// reach the pressure rule.
#[tokio::test]
async fn theft_by_pressure_is_refused_while_a_hold_is_younger_than_pressure_after() {
    let _serial = SERIAL.lock().await;
    h::apply_deploy();
    let dir = h::TempDir::new("trust-pressure");
    let (vm_node, thief) = (h::unique("trust-pv"), h::unique("trust-pt"));
    h::ensure_node(&thief);
    let pool = h::unique("trust-p");
    let range = json!({"subnet": "10.79.13.0/24", "rangeStart": "10.79.13.10", "rangeEnd": "10.79.13.13"});
    let ipam = json!({"nodeName": vm_node, "sticky": {"kinds": [], "claimsFromPods": true, "waitForOld": "20s"}});
    let mut net = Net::start(&pool, "10.79.13.0/24", range, ipam, &[]).await;

    // The VM runs on its node, then its Pod goes: its hold stays, idle.
    let claim_name = format!("vm1.{pool}");
    let claims: Api<IPAMClaim> = Api::namespaced(h::client().await, NS);
    let claim = IPAMClaim::new(&claim_name, IPAMClaimSpec { network: pool.clone(), interface: "eth0".into() });
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let vm_pod = h::unique("virt-launcher-vm1");
    let annotation = json!([{"name": pool, "ipam-claim-reference": claim_name}]).to_string();
    let meta = json!({"annotations": {netendpoint_crd::ipamclaim::NETWORKS_ANNOTATION: annotation}});
    let vm_uid = h::PodFixture::new(&vm_pod).node(&vm_node).meta(meta).create().await.metadata.uid.unwrap();
    let mut conf = net.conf.clone();
    conf["ipam"]["dataDir"] = json!(dir.join("vm-node"));
    conf["ipam-claim-reference"] = json!(claim_name);
    let cid = h::unique("vm-sandbox");
    let (ok, result, log) = h::invoke("ADD", &conf, &h::pod_env(&cid, &h::pod_args(&vm_pod, &vm_uid)));
    assert!(ok, "the VM's ADD: {result} {log}");
    let vm_ip = h::first_ip(&result).to_string();
    let pods: Api<Pod> = Api::namespaced(h::client().await, NS);
    pods.delete(&vm_pod, &now()).await.unwrap();
    h::wait_for("the VM's Pod is gone", Duration::from_secs(10), || async {
        pods.get_opt(&vm_pod).await.unwrap().is_none()
    })
    .await;
    h::cni_del(&conf, &cid);
    let hold = h::pool_endpoints(&pool).await.into_iter().find(|e| e.is_hold()).expect("the VM's hold");
    let hold_name = hold.metadata.name.clone().unwrap();
    assert_eq!(hold.spec.ip, vm_ip);

    // The thief fills the pool and raises an entry for its own Pending Pod.
    let client = h::node_bound(CNI_SERVICE_ACCOUNT, &thief, &dir).await;
    let (leases, needs): (Api<netendpoint_crd::NetworkEndpoint>, Api<NetworkEndpointNeed>) =
        (Api::all(client.clone()), Api::all(client));
    let pp = PostParams::default();
    for host in 10..=13 {
        let ip = format!("10.79.13.{host}");
        if ip != vm_ip {
            leases.create(&pp, &full_lease(&pool, &ip, &thief, &[])).await.unwrap();
        }
    }
    let refused = leases.create(&pp, &full_lease(&pool, &vm_ip, &thief, &[])).await;
    assert_refused("the thief creates the held address", refused, 409, "already exists");
    let (waiting, waiting_uid) = h::waiting_pod("trust-p-thief", &thief).await;
    let e = needs.create(&pp, &entry(&pool, &thief, 0, (&waiting, &waiting_uid), 100)).await.unwrap();
    let e_name = e.metadata.name.unwrap();
    let admin_needs: Api<NetworkEndpointNeed> = Api::all(h::client().await);
    h::wait_for("the thief's entry is ordered", Duration::from_secs(20), || async {
        entry_now(&admin_needs, &e_name).await.and_then(|n| n.status).and_then(|s| s.arrival).is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let admin = h::endpoints().await;
    assert!(admin.get_opt(&hold_name).await.unwrap().is_some(), "the hold survives pressure\n{}", net.ctl.log());
    assert_eq!(promised(&admin_needs, &e_name).await, None, "nothing is promised to the thief");

    // The control: once idle for pressureAfter (2 s here), the same pressure ends the hold.
    net.restart_controller(&["--pressure-after", "2s"]).await;
    let t = Instant::now();
    while admin.get_opt(&hold_name).await.unwrap().is_some() {
        assert!(t.elapsed() < Duration::from_secs(30), "pressure never ended the hold\n{}", net.ctl.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    admin_needs.delete(&e_name, &DeleteParams::default()).await.unwrap();
    let _ = pods.delete(&waiting, &now()).await;
    let _ = claims.delete(&claim_name, &DeleteParams::default()).await;
    net.stop().await;
}
