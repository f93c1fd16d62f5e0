//! ADD, DEL and CHECK: cost, idempotence, rollback, and what a lost
//! record or a flapping API server changes.

use std::time::Duration;

use netendpoint_netconf::IpamConfig;
use serde_json::json;

use super::{FIN, Scratch, T0, conf, ip_of, who};
use crate::claim::{Deadline, lease_object};
use crate::commands::{Asked, add, add_asked, check, del};
use crate::error::Error;
use crate::local::{LocalState, Record};
use crate::store::mem::{Fault, MemStore};

#[tokio::test(start_paused = true)]
async fn the_first_add_is_one_create_and_stamps_network_and_bound() {
    let store = MemStore::new(T0, &["n1"]);
    let c = conf("10.0.0.0/29", json!({"forceReleaseAfter": "90s"}));
    let r = add(&store, &c, &who("c1"), &LocalState::none()).await.unwrap();
    assert_eq!(ip_of(&r), "10.0.0.2");
    assert_eq!((store.calls("create"), store.calls("get_node"), store.total_calls()), (1, 1, 2));
    let ep = store.object("p.10.0.0.2").unwrap();
    assert_eq!(ep.spec.network.as_deref(), Some("net"));
    assert_eq!(ep.spec.force_release_after.as_deref(), Some("90s"));
    assert_eq!(ep.metadata.labels.unwrap()[netendpoint_crd::LABEL_NETWORK], "net");
}

/// Until netendpoint-controller has written a pool's ranges (after an
/// install, or an upgrade from a release without the range policy, until
/// the new controller leads), admission refuses every lease of the pool:
/// the ADD retries within its deadline and gets its address once they are
/// written. Any other refusal still fails at once, and a pool never
/// registered fails at the deadline.
#[tokio::test(start_paused = true)]
async fn a_pool_whose_ranges_are_not_registered_yet_is_retried_until_they_are() {
    let store = MemStore::new(T0, &["n1"]);
    let c = conf("10.0.0.0/29", json!({}));
    store.fail("create", Fault::Unregistered, 6);
    let started = tokio::time::Instant::now();
    let r = add(&store, &c, &who("c1"), &LocalState::none()).await.unwrap();
    assert_eq!(ip_of(&r), "10.0.0.2");
    assert!(started.elapsed() >= Duration::from_millis(100 + 200 + 400 + 800 + 1600 + 2000), "{:?}", started.elapsed());
    store.fail("create", Fault::Denied, 1);
    let e = add(&store, &c, &who("c2"), &LocalState::none()).await.unwrap_err();
    assert_eq!(e.code(), 102, "{e}");
    store.fail("create", Fault::Unregistered, 1000);
    let started = tokio::time::Instant::now();
    let e = add(&store, &c, &who("c3"), &LocalState::none()).await.unwrap_err();
    assert_eq!(e.code(), 102, "{e}");
    assert!(e.to_string().contains("has no ranges"), "{e}");
    assert!(started.elapsed() <= c.timeout, "within the invocation's deadline: {:?}", started.elapsed());
    assert_eq!(store.objects().len(), 1, "nothing but the first ADD's lease");
}

#[tokio::test(start_paused = true)]
async fn an_unregistered_node_gets_no_lease_and_a_registered_one_is_checked_once() {
    let store = MemStore::new(T0, &[]);
    let s = Scratch::new("node");
    let c = conf("10.0.0.0/29", json!({}));
    let e = add(&store, &c, &who("c1"), &s.local).await.unwrap_err();
    assert_eq!(e.code(), 107, "{e}");
    assert!(e.to_string().contains("\"n1\""), "{e}");
    assert!(store.objects().is_empty());
    store.set_node("n1", true);
    add(&store, &c, &who("c2"), &s.local).await.unwrap();
    add(&store, &c, &who("c3"), &s.local).await.unwrap();
    assert_eq!(store.calls("get_node"), 2, "the positive answer is cached on the node");
}

#[tokio::test(start_paused = true)]
async fn a_failed_second_range_set_rolls_back_the_first() {
    let store = MemStore::new(T0, &["n1"]);
    let ipam = json!({"ranges": [[{"subnet": "10.0.0.0/29"}], [{"subnet": "fd00::/126"}]], "pool": "p", "waitForRelease": "1s"});
    let c = IpamConfig::parse(&ipam, "net").unwrap();
    let set6 = &c.range_sets[1];
    for ip in set6.candidates(None) {
        store.insert(lease_object(&c, &who("v6-holder"), set6, ip));
    }
    let e = add(&store, &c, &who("c1"), &LocalState::none()).await.unwrap_err();
    assert_eq!(e.code(), 100);
    assert!(store.objects().iter().all(|ep| ep.spec.container_id == "v6-holder"), "the IPv4 claim was released");
}

/// A create that reached the server but whose answer was lost: the ADD
/// retries, finds the name taken, reads it by name, and keeps it as its
/// own. Nothing is listed.
#[tokio::test(start_paused = true)]
async fn a_create_whose_answer_was_lost_is_resolved_by_name_within_the_deadline() {
    let store = MemStore::new(T0, &["n1"]);
    let c = conf("10.0.0.0/29", json!({}));
    store.lose_creates(1);
    let r = add(&store, &c, &who("c1"), &LocalState::none()).await.unwrap();
    assert_eq!(ip_of(&r), "10.0.0.2");
    assert_eq!(store.objects().len(), 1, "one lease, not two");
    assert_eq!((store.calls("create"), store.calls("get"), store.calls("list_container")), (2, 1, 0));
}

/// The API server is down for a few seconds in the middle of an ADD: the
/// ADD retries its transient failures within its deadline and succeeds.
#[tokio::test(start_paused = true)]
async fn transient_failures_are_retried_until_the_work_deadline() {
    let store = MemStore::new(T0, &["n1"]);
    let c = conf("10.0.0.0/29", json!({}));
    store.fail("create", Fault::Unreachable, 3);
    store.fail("get_node", Fault::Overloaded, 2);
    let r = add(&store, &c, &who("c1"), &LocalState::none()).await.unwrap();
    assert_eq!(ip_of(&r), "10.0.0.2");
    // Past the deadline it gives up, and what it created is rolled back by name.
    let ipam = json!({"ranges": [[{"subnet": "10.0.0.0/29"}], [{"subnet": "fd00::/126"}]], "pool": "q"});
    let dual = IpamConfig::parse(&ipam, "net").unwrap();
    store.fail("create", Fault::Unreachable, 1000);
    let work = Deadline::after(Duration::from_secs(3));
    let e = add_asked(&store, &dual, &who("c2"), &LocalState::none(), &Asked::default(), work).await.unwrap_err();
    assert_eq!(e.code(), 101, "{e}");
    assert!(store.objects().iter().all(|ep| ep.spec.container_id == "c1"), "nothing of c2 left");
}

/// An unanswered create in an ADD that then fails: its lease is found by
/// name (the names it tried) and released, never by a list.
#[tokio::test(start_paused = true)]
async fn rollback_resolves_unanswered_creates_by_name() {
    let store = MemStore::new(T0, &["n1"]);
    let ipam = json!({"ranges": [[{"subnet": "10.0.0.0/29"}], [{"subnet": "fd00::/126"}]], "pool": "p", "waitForRelease": "1s"});
    let c = IpamConfig::parse(&ipam, "net").unwrap();
    let set6 = &c.range_sets[1];
    for ip in set6.candidates(None) {
        store.insert(lease_object(&c, &who("v6-holder"), set6, ip));
    }
    // The IPv4 create lands, its answer is lost, and its retry finds nothing of the server either.
    store.lose_creates(1);
    store.fail("create", Fault::Unreachable, 1);
    store.fail("get", Fault::Unreachable, 1);
    let e = add(&store, &c, &who("c1"), &LocalState::none()).await.unwrap_err();
    assert!(e.code() == 100 || e.code() == 101, "{e}");
    assert!(store.objects().iter().all(|ep| ep.spec.container_id == "v6-holder"), "nothing of c1 left");
    assert_eq!(store.calls("list_container"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_repeated_add_returns_the_same_lease_and_del_releases_only_its_own() {
    let store = MemStore::new(T0, &["n1"]);
    let s = Scratch::new("repeat");
    let c = conf("10.0.0.0/29", json!({"finalizers": [FIN]}));
    let first = add(&store, &c, &who("c1"), &s.local).await.unwrap();
    let again = add(&store, &c, &who("c1"), &s.local).await.unwrap();
    assert_eq!(first, again);
    assert_eq!(store.objects().len(), 1);
    // A stale DEL from another sandbox frees nothing.
    del(&store, &c, &who("old-sandbox"), &s.local).await.unwrap();
    assert!(!store.objects()[0].is_releasing());
    del(&store, &c, &who("c1"), &s.local).await.unwrap();
    del(&store, &c, &who("c1"), &s.local).await.unwrap();
    assert!(store.objects()[0].is_releasing(), "held by the finalizer until the agent acks");
}

#[tokio::test(start_paused = true)]
async fn del_and_check_of_a_recorded_attachment_read_by_name_without_a_list() {
    let store = MemStore::new(T0, &["n1"]);
    let s = Scratch::new("del-record");
    let c = conf("10.0.0.0/29", json!({}));
    let r = add(&store, &c, &who("c1"), &s.local).await.unwrap();
    assert!(matches!(s.local.record_of("c1", "eth0"), Record::Complete(ref l) if l.len() == 1));
    check(&store, &c, &who("c1"), &s.local, &[r.ips[0].address]).await.unwrap();
    del(&store, &c, &who("c1"), &s.local).await.unwrap();
    assert_eq!((store.calls("list_container"), store.calls("delete")), (0, 1));
    assert!(store.objects().is_empty());
    // The runtime repeats its DEL (containerd: two or three per sandbox):
    // the node's tombstone answers, with no request at all.
    assert_eq!(s.local.record_of("c1", "eth0"), Record::Deleted);
    let before = store.total_calls();
    del(&store, &c, &who("c1"), &s.local).await.unwrap();
    del(&store, &c, &who("c1"), &s.local).await.unwrap();
    assert_eq!(store.total_calls(), before, "a repeated DEL asks nothing");
    assert!(check(&store, &c, &who("c1"), &s.local, &[r.ips[0].address]).await.is_err(), "CHECK after DEL fails");
    // Only a DEL that truly lost its record lists.
    del(&store, &c, &who("never-recorded"), &s.local).await.unwrap();
    assert_eq!(store.calls("list_container"), 1);
}

/// Tombstones are bounded: GC drops those of containers the runtime no
/// longer lists, and an ADD of the same attachment starts a new life.
#[tokio::test(start_paused = true)]
async fn tombstones_go_with_gc_and_with_a_new_add() {
    let store = MemStore::new(T0, &["n1"]);
    let s = Scratch::new("tombstones");
    let c = conf("10.0.0.0/29", json!({}));
    for cid in ["t1", "t2"] {
        add(&store, &c, &who(cid), &s.local).await.unwrap();
        del(&store, &c, &who(cid), &s.local).await.unwrap();
        assert_eq!(s.local.record_of(cid, "eth0"), Record::Deleted);
    }
    s.local.prune_tombstones(|cid| cid == "t2");
    assert_eq!(s.local.record_of("t1", "eth0"), Record::Unknown, "not listed by the runtime any more");
    assert_eq!(s.local.record_of("t2", "eth0"), Record::Deleted);
    add(&store, &c, &who("t2"), &s.local).await.unwrap();
    assert!(matches!(s.local.record_of("t2", "eth0"), Record::Complete(_)), "a new ADD ends the tombstone");
}

/// An ADD marks the record pending before it creates, so one that dies
/// between its create and its record leaves no complete record, and DEL
/// then lists: the unrecorded lease is released too.
#[tokio::test(start_paused = true)]
async fn del_after_an_add_that_died_before_its_record_lists_and_releases() {
    let store = MemStore::new(T0, &["n1"]);
    let s = Scratch::new("del-pending");
    let c = conf("10.0.0.0/29", json!({}));
    s.local.mark_pending("c1", "eth0");
    store.insert(lease_object(&c, &who("c1"), &c.range_sets[0], "10.0.0.5".parse().unwrap()));
    assert_eq!(s.local.record_of("c1", "eth0"), Record::Unknown);
    del(&store, &c, &who("c1"), &s.local).await.unwrap();
    assert_eq!(store.calls("list_container"), 1);
    assert!(store.objects().is_empty(), "the unrecorded lease is released");
}

/// A lease another node planted with this node's container ID is not this
/// attachment's: a record-less DEL leaves it alone and succeeds.
#[tokio::test(start_paused = true)]
async fn a_record_less_del_acts_only_on_its_own_nodes_leases() {
    let store = MemStore::new(T0, &["n1", "n2"]);
    let c = conf("10.0.0.0/29", json!({}));
    let mut planted = who("c1");
    planted.node = "n2".into();
    store.insert(lease_object(&c, &planted, &c.range_sets[0], "10.0.0.5".parse().unwrap()));
    del(&store, &c, &who("c1"), &LocalState::none()).await.unwrap();
    assert!(!store.objects()[0].is_releasing(), "another node's lease is untouched");
    assert_eq!(store.calls("delete"), 0);
    let e = check(&store, &c, &who("c1"), &LocalState::none(), &["10.0.0.5/29".parse().unwrap()]).await.unwrap_err();
    assert_eq!(e.code(), 106, "{e}");
}

#[tokio::test(start_paused = true)]
async fn del_decides_crd_missing_from_discovery_only() {
    let c = conf("10.0.0.0/29", json!({}));
    let store = MemStore::new(T0, &["n1"]);
    store.serve_crd(false);
    del(&store, &c, &who("c1"), &LocalState::none()).await.unwrap();
    assert_eq!(store.calls("discovery"), 1);
    // A 404 on the list while discovery serves the CRD is an error, and the runtime retries.
    let lying = MemStore::new(T0, &["n1"]);
    lying.fail("list_container", Fault::CrdMissing, 1);
    let e = del(&lying, &c, &who("c1"), &LocalState::none()).await.unwrap_err();
    assert!(matches!(e, Error::Inconsistent(_)), "{e:?}");
    assert_eq!(e.code(), 105);
}

#[tokio::test(start_paused = true)]
async fn a_del_that_cannot_reach_the_server_keeps_its_record_for_the_retry() {
    let store = MemStore::new(T0, &["n1"]);
    let s = Scratch::new("del-retry");
    let c = IpamConfig::parse(
        &json!({"ranges": [[{"subnet": "10.0.0.0/29"}]], "pool": "p", "timeout": "10s", "waitForRelease": "0s"}),
        "net",
    )
    .unwrap();
    add(&store, &c, &who("c1"), &s.local).await.unwrap();
    store.fail("delete", Fault::Unreachable, 1000);
    let e = del(&store, &c, &who("c1"), &s.local).await.unwrap_err();
    assert_eq!(e.code(), 101, "{e}");
    assert!(matches!(s.local.record_of("c1", "eth0"), Record::Complete(_)), "kept for the runtime's retry");
}
