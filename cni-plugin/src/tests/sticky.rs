//! Sticky addresses: the claim's hold owns `<pool>.<ip>` between
//! incarnations, the controller (played by the in-memory store) creates
//! each incarnation once the previous one is gone, and only for the node
//! where the claim's Pod is bound.

use std::sync::Arc;
use std::time::Duration;

use netendpoint_crd::ipamclaim::{IPAMClaim, IPAMClaimSpec, LABEL_STATEFULSET};
use netendpoint_crd::{NetworkEndpoint, incarnation_name};
use serde_json::json;

use super::{FIN, T0, ack_after, conf, fill, ip_of, who};
use crate::claim::Attachment;
use crate::claim::Deadline;
use crate::commands::{Asked, add, add_asked, del};
use crate::local::LocalState;
use crate::protocol::PodIdentity;
use crate::store::PodFacts;
use crate::store::mem::MemStore;

/// The claim `web-0.p` of StatefulSet Pod `default/web-0`.
fn claim(store: &MemStore) {
    let mut c = IPAMClaim::new("web-0.p", IPAMClaimSpec { network: "net".into(), interface: "eth0".into() });
    c.metadata.namespace = Some("default".into());
    c.metadata.uid = Some("claim-1".into());
    c.metadata.labels = Some([(LABEL_STATEFULSET.to_string(), "web".to_string())].into());
    store.put_claim(c);
}

/// The claim `vm1.net` of a VM (no StatefulSet), and sandbox `sandbox` of
/// its launcher Pod `pod` (UID `uid`), on `node`, referencing it.
fn vm_claim(store: &MemStore) {
    let mut c = IPAMClaim::new("vm1.net", IPAMClaimSpec { network: "net".into(), interface: "eth0".into() });
    c.metadata.namespace = Some("default".into());
    c.metadata.uid = Some("claim-vm".into());
    store.put_claim(c);
}

fn launcher(store: &MemStore, sandbox: &str, pod: &str, uid: &str, node: &str) -> (Attachment, Asked) {
    store.put_pod("default", pod, PodFacts { uid: uid.into(), ..PodFacts::default() }, node);
    let mut w = who(sandbox);
    w.node = node.into();
    w.pod = Some(PodIdentity { namespace: "default".into(), name: pod.into(), uid: uid.into() });
    (w, Asked { claim: Some("vm1.net".into()), ..Asked::default() })
}

/// Sandbox `sandbox` of incarnation `uid` of Pod `web-0`, on `node`, where the Pod is bound.
fn web0(store: &MemStore, sandbox: &str, uid: &str, node: &str) -> Attachment {
    store.put_pod("default", "web-0", PodFacts { uid: uid.into(), ..PodFacts::default() }, node);
    let mut w = who(sandbox);
    w.node = node.into();
    w.pod = Some(PodIdentity { namespace: "default".into(), name: "web-0".into(), uid: uid.into() });
    w
}

fn sticky_conf(extra: serde_json::Value) -> netendpoint_netconf::IpamConfig {
    let mut v = json!({"finalizers": [FIN], "sticky": {"waitForOld": "20s"}, "waitForRelease": "5s"});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    conf("10.0.0.0/29", v)
}

fn hold_of(store: &MemStore, ip: &str) -> NetworkEndpoint {
    store.object(&format!("p.{ip}")).unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_first_add_of_a_claim_creates_its_hold_and_the_controller_its_first_incarnation() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let _controller = store.spawn_controller();
    claim(&store);
    let c = sticky_conf(json!({}));
    let r = add(&*store, &c, &web0(&store, "s1", "u1", "n1"), &LocalState::none()).await.unwrap();
    let ip = ip_of(&r);
    let hold = hold_of(&store, &ip);
    assert!(hold.is_hold());
    assert_eq!(hold.metadata.finalizers, None, "agents never see a hold");
    assert_eq!(hold.spec.claim.as_ref().unwrap().uid, "claim-1");
    let ep = store.object(&format!("p.{ip}-1")).unwrap();
    assert_eq!((ep.spec.container_id.as_str(), ep.spec.incarnation), ("s1", Some(1)));
    assert_eq!(ep.metadata.finalizers.unwrap(), [FIN]);
    let status = store.claim_now("default", "web-0.p").unwrap().status.unwrap();
    assert_eq!(status.ips, [format!("{ip}/29")]);
}

/// The identity's next Pod, on another node, gets the same address, only
/// after the old incarnation is gone; and in the full pool nobody else can
/// take it meanwhile, at any timing: the hold owns its name throughout.
#[tokio::test(start_paused = true)]
async fn a_recreated_pod_gets_its_address_after_the_agents_and_nobody_else_ever_can() {
    let store = Arc::new(MemStore::new(T0, &["n1", "n2"]));
    let _controller = store.spawn_controller();
    claim(&store);
    let c = sticky_conf(json!({}));
    let first = web0(&store, "s1", "u1", "n1");
    let ip = ip_of(&add(&*store, &c, &first, &LocalState::none()).await.unwrap());
    // Fill the rest of the pool with other pods.
    for i in 0..4 {
        add(&*store, &c, &who(&format!("o{i}")), &LocalState::none()).await.unwrap();
    }
    // The old sandbox's DEL; the agent has not acknowledged yet.
    del(&*store, &c, &first, &LocalState::none()).await.unwrap();
    // A competitor in the full pool: the hold's name cannot be created.
    let e = add(&*store, &c, &who("intruder"), &LocalState::none()).await.unwrap_err();
    assert_eq!(e.code(), 100, "{e}");
    // The new incarnation on n2 waits for the agent, then gets the address.
    let second = web0(&store, "s2", "u2", "n2");
    let ack = ack_after(&store, &format!("p.{ip}-1"), Duration::from_secs(2));
    let started = tokio::time::Instant::now();
    let again = add(&*store, &c, &second, &LocalState::none()).await.unwrap();
    ack.await.unwrap();
    assert_eq!(ip_of(&again), ip);
    assert!(started.elapsed() >= Duration::from_secs(2), "not before the agent acknowledged");
    let ep = store.object(&format!("p.{ip}-2")).unwrap();
    assert_eq!((ep.spec.node.as_str(), ep.spec.pod.as_ref().unwrap().uid.as_str()), ("n2", "u2"));
    assert!(store.object(&format!("p.{ip}-1")).is_none(), "the old incarnation went first");
    assert!(hold_of(&store, &ip).is_hold(), "the hold stays");
}

#[tokio::test(start_paused = true)]
async fn when_wait_for_old_runs_out_the_add_says_what_it_waits_for_and_the_hold_stays() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let _controller = store.spawn_controller();
    claim(&store);
    let c = sticky_conf(json!({"sticky": {"waitForOld": "3s"}}));
    let first = web0(&store, "s1", "u1", "n1");
    let ip = ip_of(&add(&*store, &c, &first, &LocalState::none()).await.unwrap());
    let second = web0(&store, "s2", "u2", "n1");
    let e = add(&*store, &c, &second, &LocalState::none()).await.unwrap_err();
    assert_eq!(e.code(), 11, "{e}");
    assert!(e.to_string().contains("DEL of its previous sandbox s1"), "{e}");
    del(&*store, &c, &first, &LocalState::none()).await.unwrap();
    let e = add(&*store, &c, &second, &LocalState::none()).await.unwrap_err();
    assert!(e.to_string().contains(FIN), "{e}");
    assert!(hold_of(&store, &ip).is_hold());
    assert!(store.object(&incarnation_name("p", ip.parse().unwrap(), 2)).is_none(), "no second incarnation");
}

/// Only the node where the claim's Pod is bound continues the hold: a
/// request from another node is never served.
#[tokio::test(start_paused = true)]
async fn a_node_where_the_pod_is_not_bound_never_gets_the_address() {
    let store = Arc::new(MemStore::new(T0, &["n1", "n2", "n3"]));
    let _controller = store.spawn_controller();
    claim(&store);
    let c = sticky_conf(json!({"sticky": {"waitForOld": "3s"}}));
    let first = web0(&store, "s1", "u1", "n1");
    let ip = ip_of(&add(&*store, &c, &first, &LocalState::none()).await.unwrap());
    del(&*store, &c, &first, &LocalState::none()).await.unwrap();
    store.ack(&format!("p.{ip}-1"), FIN);
    // The Pod is bound to n2; n3 asks in its name.
    web0(&store, "s2", "u2", "n2");
    let mut rogue = who("s3");
    rogue.node = "n3".into();
    rogue.pod = Some(PodIdentity { namespace: "default".into(), name: "web-0".into(), uid: "u2".into() });
    let e = add(&*store, &c, &rogue, &LocalState::none()).await.unwrap_err();
    assert_eq!(e.code(), 11, "{e}");
    assert!(store.objects().iter().all(|ep| ep.spec.node != "n3"), "nothing on n3");
    // The bound node then gets it.
    let again = add(&*store, &c, &web0(&store, "s2", "u2", "n2"), &LocalState::none()).await.unwrap();
    assert_eq!(ip_of(&again), ip);
}

/// A hold of another claim at the address a claim lists blocks nothing:
/// the claim takes a new address.
#[tokio::test(start_paused = true)]
async fn a_decoy_hold_blocks_nothing() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let _controller = store.spawn_controller();
    claim(&store);
    let c = sticky_conf(json!({}));
    // A decoy at 10.0.0.2 naming the claim's name with another UID, and the claim pointing there.
    let mut decoy = crate::claim::hold_object(
        &c,
        &who("decoy"),
        &c.range_sets[0],
        "10.0.0.2".parse().unwrap(),
        &netendpoint_crd::ClaimRef { namespace: "default".into(), name: "web-0.p".into(), uid: "forged".into() },
    );
    decoy.spec.container_id = "decoy".into();
    store.insert(decoy);
    let mut k = store.claim_now("default", "web-0.p").unwrap();
    k.status = Some(netendpoint_crd::ipamclaim::IPAMClaimStatus { ips: vec!["10.0.0.2/29".into()], owner_pod: None });
    store.put_claim(k);
    let r = add(&*store, &c, &web0(&store, "s1", "u1", "n1"), &LocalState::none()).await.unwrap();
    assert_ne!(ip_of(&r), "10.0.0.2");
}

/// With `ipam.sticky` on, a Pod whose name has no ordinal costs nothing
/// more; one whose name has one costs one claim GET, and, with no claim of
/// that name, one StatefulSet GET.
#[tokio::test(start_paused = true)]
async fn with_sticky_on_a_non_sticky_add_costs_at_most_a_claim_and_a_statefulset_get() {
    for (pod, extra) in [("pod-c1", 0), ("web-7", 2)] {
        let store = MemStore::new(T0, &["n1"]);
        let c = sticky_conf(json!({}));
        let mut w = who("c1");
        w.pod.as_mut().unwrap().name = pod.into();
        add(&store, &c, &w, &LocalState::none()).await.unwrap();
        assert_eq!(store.total_calls(), 2 + extra, "{pod}");
        assert_eq!(store.calls("get_claim"), extra / 2, "{pod}");
        assert_eq!(store.calls("get_statefulset"), extra / 2, "{pod}");
        assert!(store.objects()[0].metadata.finalizers.as_ref().is_some_and(|f| f == &[FIN]));
    }
}

/// In a full pool, the addresses the claims hold are never forced and
/// never given to a waiter.
#[tokio::test(start_paused = true)]
async fn a_held_address_is_never_given_to_a_waiter_in_a_full_pool() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let _controller = store.spawn_controller();
    claim(&store);
    let c = sticky_conf(json!({"crossNode": "plugin", "forceReleaseAfter": "1s"}));
    let first = web0(&store, "s1", "u1", "n1");
    let ip = ip_of(&add(&*store, &c, &first, &LocalState::none()).await.unwrap());
    let others = fill(&store, &c, "n1", &[]);
    assert_eq!(others.len(), 4, "every address but the held one");
    del(&*store, &c, &first, &LocalState::none()).await.unwrap();
    tokio::time::advance(Duration::from_secs(600)).await;
    let e = add(&*store, &c, &who("waiter"), &LocalState::none()).await.unwrap_err();
    assert_eq!(e.code(), 100, "{e}");
    assert!(hold_of(&store, &ip).is_hold());
}

/// The node records the attachment's endpoint, never the hold its first
/// ADD created: the DEL (and a GC) of that sandbox ends the incarnation and
/// leaves the claim's address held.
#[tokio::test(start_paused = true)]
async fn the_del_of_the_first_sandbox_never_ends_the_hold() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let _controller = store.spawn_controller();
    claim(&store);
    let c = sticky_conf(json!({}));
    let s = super::Scratch::new("sticky-records");
    let first = web0(&store, "s1", "u1", "n1");
    let ip = ip_of(&add(&*store, &c, &first, &s.local).await.unwrap());
    del(&*store, &c, &first, &s.local).await.unwrap();
    let hold = hold_of(&store, &ip);
    assert!(hold.is_hold() && !hold.is_releasing(), "the hold stays live");
    tokio::time::advance(Duration::from_secs(120)).await;
    for _ in 0..2 {
        crate::lifecycle::gc(&*store, &c, "n1", Some(&[]), &s.local).await.unwrap();
    }
    assert!(!hold_of(&store, &ip).is_releasing(), "GC leaves it too");
    store.ack(&format!("p.{ip}-1"), FIN);
    let again = add(&*store, &c, &web0(&store, "s2", "u2", "n1"), &s.local).await.unwrap();
    assert_eq!(ip_of(&again), ip);
}

/// A first ADD of a claim from a node where its Pod is not bound: the
/// controller refuses the hold's first incarnation; the ADD says so at
/// once (not after waitForOld) and rolls its hold back.
#[tokio::test(start_paused = true)]
async fn a_refused_first_incarnation_fails_at_once_and_leaves_no_hold() {
    let store = Arc::new(MemStore::new(T0, &["n1", "n2"]));
    let _controller = store.spawn_controller();
    claim(&store);
    let c = sticky_conf(json!({"sticky": {"waitForOld": "20s"}}));
    web0(&store, "s0", "u1", "n1");
    let mut rogue = who("s1");
    rogue.node = "n2".into();
    rogue.pod = Some(PodIdentity { namespace: "default".into(), name: "web-0".into(), uid: "u1".into() });
    let started = tokio::time::Instant::now();
    let e = add(&*store, &c, &rogue, &LocalState::none()).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "refused, not timed out: {e}");
    assert!(e.to_string().contains("did not create"), "{e}");
    assert!(store.objects().iter().all(|ep| ep.is_releasing()), "the hold is rolled back");
}

/// A VM's live migration: the target launcher Pod, on another node, is
/// answered with the claim's address while the source still runs; its
/// endpoint is created only once the source's is gone, so an agent never
/// sees two endpoints of the address. A target that goes before withdraws
/// its request, and no endpoint is ever created for it.
#[tokio::test(start_paused = true)]
async fn a_vm_keeps_its_address_through_live_migration_without_two_endpoints() {
    let store = Arc::new(MemStore::new(T0, &["n1", "n2", "n3"]));
    let _controller = store.spawn_controller();
    vm_claim(&store);
    let c = sticky_conf(json!({}));
    let work = || Deadline::after(Duration::from_secs(50));
    let (src, asked) = launcher(&store, "src", "virt-launcher-vm1-a", "ua", "n1");
    let s1 = super::Scratch::new("migrate-src");
    let ip = ip_of(&add_asked(&*store, &c, &src, &s1.local, &asked, work()).await.unwrap());
    assert!(store.object(&format!("p.{ip}-1")).is_some());

    // The target starts while the source runs: answered at once, no endpoint yet.
    let (dst, asked) = launcher(&store, "dst", "virt-launcher-vm1-b", "ub", "n2");
    let s2 = super::Scratch::new("migrate-dst");
    let started = tokio::time::Instant::now();
    let r = add_asked(&*store, &c, &dst, &s2.local, &asked, work()).await.unwrap();
    assert_eq!(ip_of(&r), ip);
    assert!(started.elapsed() < Duration::from_secs(1), "not after the source");
    assert!(store.object(&format!("p.{ip}-2")).is_none(), "no second endpoint while the source's lives");
    // The source goes; its agent acknowledges; the target's endpoint follows.
    del(&*store, &c, &src, &s1.local).await.unwrap();
    assert!(store.object(&format!("p.{ip}-2")).is_none(), "not before the agent's acknowledgement");
    store.ack(&format!("p.{ip}-1"), FIN);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let ep = store.object(&format!("p.{ip}-2")).expect("the target's endpoint");
    assert_eq!((ep.spec.container_id.as_str(), ep.spec.node.as_str()), ("dst", "n2"));
    // The target's DEL ends that endpoint, recorded without a UID.
    del(&*store, &c, &dst, &s2.local).await.unwrap();
    assert!(store.object(&format!("p.{ip}-2")).unwrap().is_releasing());
    store.ack(&format!("p.{ip}-2"), FIN);

    // A migration that fails: the target goes before the source does.
    let (src, asked) = launcher(&store, "src3", "virt-launcher-vm1-c", "uc", "n3");
    let s3 = super::Scratch::new("migrate-src3");
    assert_eq!(ip_of(&add_asked(&*store, &c, &src, &s3.local, &asked, work()).await.unwrap()), ip);
    let (dst, asked) = launcher(&store, "dst4", "virt-launcher-vm1-d", "ud", "n1");
    let s4 = super::Scratch::new("migrate-dst4");
    assert_eq!(ip_of(&add_asked(&*store, &c, &dst, &s4.local, &asked, work()).await.unwrap()), ip);
    del(&*store, &c, &dst, &s4.local).await.unwrap();
    let hold = hold_of(&store, &ip);
    assert_eq!(hold.status.unwrap().request, None, "the request is withdrawn");
    del(&*store, &c, &src, &s3.local).await.unwrap();
    store.ack(&format!("p.{ip}-3"), FIN);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(store.object(&format!("p.{ip}-4")).is_none(), "never an endpoint for the target that went");
}

/// A StatefulSet Pod is never answered early: its new Pod would run while
/// the old one still serves the address.
#[tokio::test(start_paused = true)]
async fn a_statefulset_pod_is_never_answered_before_its_old_endpoint_is_gone() {
    let store = Arc::new(MemStore::new(T0, &["n1", "n2"]));
    let _controller = store.spawn_controller();
    claim(&store);
    let c = sticky_conf(json!({"sticky": {"waitForOld": "2s"}}));
    let first = web0(&store, "s1", "u1", "n1");
    add(&*store, &c, &first, &LocalState::none()).await.unwrap();
    let e = add(&*store, &c, &web0(&store, "s2", "u2", "n2"), &LocalState::none()).await.unwrap_err();
    assert_eq!(e.code(), 11, "{e}");
}

/// A dual-stack claim whose second family finds no address after the first
/// family's hold got its first incarnation: the ADD fails, its incarnation
/// is rolled back, and the hold stays the claim's (a plugin may not delete
/// a hold that has an incarnation; the controller ends holds).
#[tokio::test(start_paused = true)]
async fn a_failed_add_rolls_back_its_incarnation_and_leaves_a_hold_that_got_one() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let _controller = store.spawn_controller();
    claim(&store);
    let c = conf(
        "10.0.0.0/29",
        json!({"ranges": [[{"subnet": "10.0.0.0/29"}], [{"subnet": "fd00::/125"}]],
               "finalizers": [FIN], "sticky": {"waitForOld": "5s"}, "waitForRelease": "0s"}),
    );
    // The IPv6 set is full.
    let v6 = netendpoint_netconf::IpamConfig { range_sets: vec![c.range_sets[1].clone()], ..c.clone() };
    fill(&store, &v6, "n2", &[]);
    let e = add(&*store, &c, &web0(&store, "s1", "u1", "n1"), &LocalState::none()).await.unwrap_err();
    assert_eq!(e.code(), 100, "{e}");
    let hold = store.objects().into_iter().find(|ep| ep.is_hold() && ep.spec.ip.starts_with("10.")).expect("the hold");
    assert!(!hold.is_releasing(), "the hold stays the claim's");
    let ip = hold.spec.ip.clone();
    let first = store.object(&format!("p.{ip}-1"));
    assert!(first.is_none_or(|ep| ep.is_releasing()), "its incarnation is rolled back");
}

/// The first Pod of a StatefulSet may be ADDed before the controller made
/// its claim: it waits for the claim (its StatefulSet wants that ordinal)
/// and is sticky from the start. A Pod of an ordinal the StatefulSet does
/// not want, or of no StatefulSet, waits for nothing.
#[tokio::test(start_paused = true)]
async fn a_statefulsets_first_pod_waits_for_its_claim() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let _controller = store.spawn_controller();
    store.put_statefulset("default", "web", 1);
    let late = store.clone();
    let maker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        claim(&late);
    });
    let c = sticky_conf(json!({}));
    let started = tokio::time::Instant::now();
    let r = add(&*store, &c, &web0(&store, "s1", "u1", "n1"), &LocalState::none()).await.unwrap();
    maker.await.unwrap();
    assert!(hold_of(&store, &ip_of(&r)).is_hold(), "sticky from its first Pod");
    assert!(started.elapsed() >= Duration::from_millis(400), "after the claim, not before");
    // web-1 is beyond the StatefulSet's replicas: one GET, no wait, a plain lease.
    let started = tokio::time::Instant::now();
    let mut w = who("s2");
    w.pod = Some(PodIdentity { namespace: "default".into(), name: "web-1".into(), uid: "u2".into() });
    let r = add(&*store, &c, &w, &LocalState::none()).await.unwrap();
    assert!(!hold_of(&store, &ip_of(&r)).is_hold());
    assert_eq!(started.elapsed(), Duration::ZERO, "no wait");
    assert_eq!(store.calls("get_statefulset"), 2);
}

/// An upgrade from the version whose sticky leases carry the sticky-hold
/// finalizer: web-0's old lease, released, still keeps 10.0.0.4 for it in
/// a full pool, and the controller made web-0's claim starting with that
/// address. web-0's new sandbox ends the old hold (as that version's ADD
/// did), waits for the agent's acknowledgement, and continues the address
/// as the claim's hold, instead of waiting behind its own hold.
#[tokio::test(start_paused = true)]
async fn a_pod_continues_the_address_an_older_versions_sticky_lease_keeps_for_it() {
    use netendpoint_crd::{
        ANNOTATION_STICKY_FOR, ANNOTATION_STICKY_OWNER, FINALIZER_STICKY_HOLD, LABEL_STICKY_IDENTITY,
    };
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let _controller = store.spawn_controller();
    let c = sticky_conf(json!({}));
    let set = &c.range_sets[0];
    let mut old = crate::claim::lease_object(&c, &web0(&store, "s1", "u1", "n1"), set, "10.0.0.4".parse().unwrap());
    old.metadata.finalizers = Some(vec![FIN.into(), FINALIZER_STICKY_HOLD.into()]);
    old.metadata.labels.get_or_insert_default().insert(LABEL_STICKY_IDENTITY.into(), "web-0".into());
    let ann = old.metadata.annotations.get_or_insert_default();
    ann.insert(ANNOTATION_STICKY_OWNER.into(), "StatefulSet/web".into());
    ann.insert(ANNOTATION_STICKY_FOR.into(), "10m".into());
    store.insert(old);
    fill(&store, &c, "n1", &[FIN]);
    store.release("p.10.0.0.4");
    let ack = ack_after(&store, "p.10.0.0.4", Duration::from_millis(500));
    let mut claim = IPAMClaim::new("web-0.p", IPAMClaimSpec { network: "net".into(), interface: "eth0".into() });
    claim.metadata.namespace = Some("default".into());
    claim.metadata.uid = Some("claim-1".into());
    claim.status =
        Some(netendpoint_crd::ipamclaim::IPAMClaimStatus { ips: vec!["10.0.0.4/32".into()], ..Default::default() });
    store.put_claim(claim);
    let r = add(&*store, &c, &web0(&store, "s2", "u2", "n1"), &LocalState::none()).await.unwrap();
    ack.await.unwrap();
    assert_eq!(ip_of(&r), "10.0.0.4");
    let hold = hold_of(&store, "10.0.0.4");
    assert!(hold.is_hold(), "the address is the claim's hold now");
    assert_eq!(hold.spec.claim.as_ref().unwrap().uid, "claim-1");
    assert!(store.object(&incarnation_name("p", "10.0.0.4".parse().unwrap(), 1)).is_some());
}
