//! Sticky addresses: the claim's hold owns `<pool>.<ip>` between
//! incarnations, the controller (played by the in-memory store) creates
//! each incarnation once the previous one is gone, and only for the node
//! where the claim's Pod is bound.

use std::sync::Arc;
use std::time::Duration;

use netendpoint_crd::ipamclaim::{IPAMClaim, IPAMClaimSpec};
use netendpoint_crd::{NetworkEndpoint, incarnation_name};
use serde_json::json;

use super::{FIN, T0, conf, fill, ip_of, who};
use crate::claim::Attachment;
use crate::commands::{add, del};
use crate::local::LocalState;
use crate::protocol::PodIdentity;
use crate::store::PodFacts;
use crate::store::mem::MemStore;

/// The claim `web-0.p` of StatefulSet Pod `default/web-0`.
fn claim(store: &MemStore) {
    let mut c = IPAMClaim::new("web-0.p", IPAMClaimSpec { network: "net".into(), interface: "eth0".into() });
    c.metadata.namespace = Some("default".into());
    c.metadata.uid = Some("claim-1".into());
    store.put_claim(c);
}

/// Sandbox `sandbox` of incarnation `uid` of Pod `web-0`, on `node`, where the Pod is bound.
fn web0(store: &MemStore, sandbox: &str, uid: &str, node: &str) -> Attachment {
    store.put_pod("default", "web-0", PodFacts { uid: uid.into(), ..PodFacts::default() }, node);
    let mut w = who(sandbox);
    w.node = node.into();
    w.pod = Some(PodIdentity { namespace: "default".into(), name: "web-0".into(), uid: uid.into() });
    w
}

fn sticky_conf(extra: serde_json::Value) -> crate::config::IpamConfig {
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
    let agent = store.clone();
    let old = format!("p.{ip}-1");
    let ack = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        agent.ack(&old, FIN);
    });
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
/// more; one whose name has one costs one claim GET.
#[tokio::test(start_paused = true)]
async fn with_sticky_on_a_non_sticky_add_costs_at_most_one_claim_get() {
    for (pod, extra) in [("pod-c1", 0), ("web-7", 1)] {
        let store = MemStore::new(T0, &["n1"]);
        let c = sticky_conf(json!({}));
        let mut w = who("c1");
        w.pod.as_mut().unwrap().name = pod.into();
        add(&store, &c, &w, &LocalState::none()).await.unwrap();
        assert_eq!(store.total_calls(), 2 + extra, "{pod}");
        assert_eq!(store.calls("get_claim"), extra, "{pod}");
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
