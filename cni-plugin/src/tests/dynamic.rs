//! The allocator's choice: by name only, at any fill, with the
//! controller's summaries, stale ones, or none; and the full pool's wait.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{FIN, Scratch, T0, ack_after, conf, fill, ip_of, who};
use crate::claim::lease_object;
use crate::commands::add;
use crate::local::LocalState;
use crate::store::mem::{MemStore, SummaryMode};

/// Fills `fraction` (per 10) of the set's addresses at random (a fixed LCG,
/// so the table is the same every run).
fn fill_random(store: &MemStore, c: &netendpoint_netconf::IpamConfig, tenths: u64) {
    let set = &c.range_sets[0];
    let mut x: u64 = 42;
    for ip in set.candidates(None) {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        if (x >> 33) % 10 < tenths {
            store.insert(lease_object(c, &who("filler"), set, ip));
        }
    }
}

fn no_list(store: &MemStore) {
    assert_eq!(store.calls("list_container"), 0, "no ADD path lists");
}

/// Invariant 11: at 90 % full, each ADD reads by name only, and the cost
/// stays within 2.5 requests and 0.5 refused creates per ADD once a node's
/// hint is warm.
#[tokio::test(start_paused = true)]
async fn at_ninety_percent_full_an_add_reads_by_name_only() {
    let store = MemStore::new(T0, &["n1"]);
    let c = conf("10.0.0.0/20", json!({}));
    fill_random(&store, &c, 9);
    let s = Scratch::new("ninety");
    let before = store.total_calls();
    let n = 40;
    for i in 0..n {
        add(&store, &c, &who(&format!("new-{i}")), &s.local).await.unwrap();
    }
    no_list(&store);
    let per_add = (store.total_calls() - before) as f64 / f64::from(n);
    let refused = (store.calls("create") - n as usize) as f64 / f64::from(n);
    assert!(per_add <= 2.5, "{per_add} requests per ADD");
    assert!(refused <= 0.5, "{refused} refused creates per ADD");
}

/// Near full, a node that has a shard hint reads its shard before the pool
/// summary: its ADD is one read and one create, and the pool summary is
/// not read at all. Reading the pool summary first, as a node without a
/// hint does, costs each of these ADDs a third request.
#[tokio::test(start_paused = true)]
async fn near_full_a_warm_node_reads_its_shard_and_not_the_pool_summary() {
    let store = MemStore::new(T0, &["n1"]);
    let c = conf("10.0.0.0/24", json!({}));
    fill_random(&store, &c, 9);
    let s = Scratch::new("warm-near-full");
    add(&store, &c, &who("warm-up"), &s.local).await.unwrap();
    let (before, pool_reads) = (store.total_calls(), store.calls("pool_summary"));
    let n = 10;
    for i in 0..n {
        add(&store, &c, &who(&format!("new-{i}")), &s.local).await.unwrap();
    }
    let per_add = (store.total_calls() - before) as f64 / f64::from(n);
    assert!(per_add <= 2.0, "{per_add} requests per ADD");
    assert_eq!(store.calls("pool_summary"), pool_reads, "the pool summary was read");
    no_list(&store);
}

/// Below half full, the common ADD is one create.
#[tokio::test(start_paused = true)]
async fn in_a_pool_with_room_an_add_is_one_create() {
    let store = MemStore::new(T0, &["n1"]);
    let c = conf("10.0.0.0/20", json!({}));
    fill_random(&store, &c, 4);
    let s = Scratch::new("forty");
    add(&store, &c, &who("warm-up"), &s.local).await.unwrap();
    let before = store.total_calls();
    for i in 0..40 {
        add(&store, &c, &who(&format!("new-{i}")), &s.local).await.unwrap();
    }
    let per_add = (store.total_calls() - before) as f64 / 40.0;
    assert!(per_add <= 1.1, "{per_add} requests per ADD");
    no_list(&store);
}

#[tokio::test(start_paused = true)]
async fn nodes_spread_out_and_do_not_collide_in_an_empty_pool() {
    let nodes: Vec<String> = (0..8).map(|i| format!("node-{i}")).collect();
    let refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let store = MemStore::new(T0, &refs);
    let c = conf("10.0.0.0/16", json!({}));
    let dirs: Vec<Scratch> = nodes.iter().map(|n| Scratch::new(&format!("spread-{n}"))).collect();
    for round in 0..50 {
        for (n, s) in nodes.iter().zip(&dirs) {
            let mut w = who(&format!("{n}-{round}"));
            w.node = n.clone();
            add(&store, &c, &w, &s.local).await.unwrap();
        }
    }
    assert_eq!(store.calls("create"), 400, "no create met another node's lease");
    // A set of one shard keeps host-local's order: every node starts at the first address.
    let small = conf("10.0.0.0/29", json!({}));
    let s = Scratch::new("spread-small");
    let mut w = who("first");
    w.node = "node-5".into();
    assert_eq!(ip_of(&add(&store, &small, &w, &s.local).await.unwrap()), "10.0.0.2");
}

/// No controller ever ran: an ADD probes by create, a bounded number of
/// times, and still lists nothing.
#[tokio::test(start_paused = true)]
async fn without_summaries_an_add_probes_by_create_and_lists_nothing() {
    let store = MemStore::new(T0, &["n1"]);
    store.summaries(SummaryMode::Off);
    let c = conf("10.0.0.0/20", json!({}));
    fill_random(&store, &c, 5);
    let s = Scratch::new("probing");
    for i in 0..40 {
        add(&store, &c, &who(&format!("new-{i}")), &s.local).await.unwrap();
    }
    no_list(&store);
    // A node's first search reads its shard beside the pool summary, before
    // it knows there is none; the hint it leaves says so, and no other does.
    assert_eq!(store.calls("shard"), 1, "no summary to read, after the first search");
}

/// A summary frozen while other ADDs go on (the controller stopped): its
/// stale bits cost refused creates, never a second holder.
#[tokio::test(start_paused = true)]
async fn a_stale_summary_never_gives_an_address_twice() {
    let store = Arc::new(MemStore::new(T0, &["n1", "n2"]));
    let c = conf("10.0.0.0/22", json!({}));
    fill_random(&store, &c, 8);
    store.summaries(SummaryMode::Frozen);
    let (a, b) = (Scratch::new("stale-a"), Scratch::new("stale-b"));
    for i in 0..60 {
        let mut w = who(&format!("a-{i}"));
        add(&*store, &c, &w, &a.local).await.unwrap();
        w = who(&format!("b-{i}"));
        w.node = "n2".into();
        add(&*store, &c, &w, &b.local).await.unwrap();
    }
    let mut ips: Vec<String> = store.objects().iter().map(|e| e.spec.ip.clone()).collect();
    let n = ips.len();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), n, "one holder per address");
    no_list(&store);
}

/// A full set of at most 64 addresses with no controller: the ADD reads
/// each name, and waits on the release in progress by name.
#[tokio::test(start_paused = true)]
async fn a_small_full_pool_without_a_controller_reads_names_and_waits() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    store.summaries(SummaryMode::Off);
    let c = conf("10.0.0.0/29", json!({"waitForRelease": "8s"}));
    let names = fill(&store, &c, "n1", &[FIN]);
    store.release(&names[2]);
    let ack = ack_after(&store, &names[2], Duration::from_secs(2));
    let started = tokio::time::Instant::now();
    let r = add(&*store, &c, &who("new"), &LocalState::none()).await.unwrap();
    ack.await.unwrap();
    assert_eq!(ip_of(&r), "10.0.0.4");
    assert!(started.elapsed() >= Duration::from_secs(2), "not before the agent's ack");
    no_list(&store);
}

/// An upgrade from a controller that wrote no summaries (nor served a
/// queue): an ADD that began waiting before any summary of its large pool
/// existed probes blind, which may miss the one free address. Once the new
/// controller summarises the pool, the ADD searches by the summaries and
/// joins the queue at its next look, so it is promised the next release and
/// takes it as soon as the agent acknowledges.
#[tokio::test(start_paused = true)]
async fn a_waiter_from_before_the_summaries_joins_the_queue_once_they_come() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    store.summaries(SummaryMode::Off);
    let c = conf("10.0.0.0/24", json!({"waitForRelease": "20s"}));
    let names = fill(&store, &c, "old", &[FIN]);
    let victim = names[200].clone();
    let upgrade = {
        let (store, set, victim) = (store.clone(), c.range_sets[0].clone(), victim.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            store.summaries(SummaryMode::Live);
            let controller = store.spawn_queue_controller("p", set);
            tokio::time::sleep(Duration::from_secs(5)).await;
            let joined = store.entries().len();
            store.release(&victim);
            tokio::time::sleep(Duration::from_millis(100)).await;
            store.ack(&victim, FIN);
            (controller, joined)
        })
    };
    let started = tokio::time::Instant::now();
    let r = add(&*store, &c, &who("waiter"), &LocalState::none()).await.unwrap();
    let waited = started.elapsed();
    let (controller, joined) = upgrade.await.unwrap();
    controller.abort();
    assert_eq!(joined, 1, "the waiter joined the queue once the pool was summarised");
    assert_eq!(r.ips[0].address.addr(), netendpoint_lease::view::ip_from_name(&victim).unwrap());
    assert!(waited < Duration::from_millis(6110), "as soon as the agent acknowledged: {waited:?}");
    assert!(store.entries().is_empty(), "the entry is gone with the wait");
    no_list(&store);
}

/// A queued ADD is promised the release in progress and watches that one
/// name: it gets the address as soon as the agent acknowledges, not at the
/// controller's next summary, and with a handful of requests.
#[tokio::test(start_paused = true)]
async fn a_queued_add_gets_its_promised_release_as_soon_as_it_ends() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let c = conf("10.0.0.0/29", json!({"waitForRelease": "8s"}));
    let names = fill(&store, &c, "n1", &[FIN]);
    let controller = store.spawn_queue_controller("p", c.range_sets[0].clone());
    store.release(&names[2]);
    let ack = ack_after(&store, &names[2], Duration::from_millis(300));
    let before = store.total_calls();
    let started = tokio::time::Instant::now();
    let r = add(&*store, &c, &who("new"), &LocalState::none()).await.unwrap();
    ack.await.unwrap();
    controller.abort();
    assert_eq!(ip_of(&r), "10.0.0.4");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "not before the agent's ack");
    assert!(waited < Duration::from_millis(310), "as soon as the release ended: {waited:?}");
    let requests = store.total_calls() - before;
    assert!(requests <= 14, "{requests} requests: search, join, promise, watch, create, leave");
    assert!(store.entries().is_empty(), "the entry is gone with the wait");
    no_list(&store);
}

/// An ADD about to wait reads its shard and the pool summary at once (one
/// round trip of the waiting ADD's few), with no more requests than reading
/// them in turn: a node with no hint yet, which reads both anyway, and a
/// node whose hint shows its shard full. ADDs that find room read neither.
#[tokio::test(start_paused = true)]
async fn an_add_about_to_wait_reads_its_shard_and_the_pool_summary_at_once() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let c = conf("10.0.0.0/29", json!({"waitForRelease": "8s", "finalizers": [FIN]}));
    let controller = store.spawn_queue_controller("p", c.range_sets[0].clone());
    let s = Scratch::new("about-to-wait");
    let mut held = Vec::new();
    for i in 0..5 {
        held.push(add(&*store, &c, &who(&format!("warm-{i}")), &s.local).await.unwrap());
    }
    assert_eq!(store.calls("shard") + store.calls("pool_summary"), 0, "ADDs with room read no summary");
    // The first wait has no hint (the ADDs before it read nothing); the second, the hint the first left.
    for (round, old) in [2, 4].into_iter().enumerate() {
        let victim = netendpoint_crd::endpoint_name("p", held[old].ips[0].address.addr());
        store.release(&victim);
        let ack = ack_after(&store, &victim, Duration::from_millis(300));
        let (before, shards, pools) = (store.total_calls(), store.calls("shard"), store.calls("pool_summary"));
        let r = add(&*store, &c, &who(&format!("new-{round}")), &s.local).await.unwrap();
        ack.await.unwrap();
        assert_eq!(ip_of(&r), ip_of(&held[old]));
        assert_eq!(store.overlapped("shard", "pool_summary"), round + 1, "round {round}: the two reads at once");
        let reads = (store.calls("shard") - shards, store.calls("pool_summary") - pools);
        assert_eq!(reads, (1, 1), "round {round}: each read once");
        let requests = store.total_calls() - before;
        // A refused create (the first round, without a hint), the two reads, the join, the entry's
        // watch (twice), the promised release read and watched, the create and the leave.
        assert!(requests <= 10 - round, "round {round}: {requests} requests");
    }
    controller.abort();
    no_list(&store);
}

/// The replacement's ADD comes before the old Pod's DEL: it waits in the
/// queue, and the address the DEL frees (no finalizer) is promised to it at once.
#[tokio::test(start_paused = true)]
async fn a_full_pool_waits_for_a_release_that_has_not_begun_yet() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let c = conf("10.0.0.0/29", json!({"waitForRelease": "5s"}));
    let names = fill(&store, &c, "n1", &[]);
    let controller = store.spawn_queue_controller("p", c.range_sets[0].clone());
    let late = store.clone();
    let victim = names[2].clone();
    // The old pod's DEL comes 1.5 s after the replacement's ADD, as under kubelet.
    let del = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        late.release(&victim);
    });
    let started = tokio::time::Instant::now();
    let r = add(&*store, &c, &who("new"), &LocalState::none()).await.unwrap();
    assert_eq!(ip_of(&r), "10.0.0.4");
    assert!(started.elapsed() < Duration::from_millis(1510), "at the DEL: {:?}", started.elapsed());
    del.await.unwrap();
    controller.abort();
    // And with no release at all, a clear exhaustion error after the wait.
    let e = add(&*store, &c, &who("other"), &LocalState::none()).await.unwrap_err();
    assert_eq!(e.code(), 100);
    assert!(e.to_string().contains("5 of 5 IPs in use"), "{e}");
    no_list(&store);
}

/// Forced release in plugin mode: (bound stamped on the lease, this ADD's
/// bound, release age when the ADD comes, whether it may be forced).
#[tokio::test(start_paused = true)]
async fn forced_release_follows_the_leases_own_bound_on_the_servers_clock() {
    let cases = [
        ("30s", "30s", 5, false),  // young: never forced, the ADD waits and fails
        ("30s", "30s", 40, true),  // stuck: forced
        ("1h", "1s", 40, false),   // the lease's own bound wins over a smaller one elsewhere
        ("2s", "1h", 5, true),     // and a smaller stamped bound is honoured
        ("1500ms", "1h", 2, true), // sub-second bounds are not truncated
    ];
    for (stamped, mine, age, forced) in cases {
        let store = MemStore::new(T0, &["n1"]);
        let holder = conf("10.0.0.0/30", json!({"forceReleaseAfter": stamped}));
        let name = fill(&store, &holder, "n1", &[FIN]).remove(0);
        store.release(&name);
        tokio::time::advance(Duration::from_secs(age)).await;
        let c = conf("10.0.0.0/30", json!({"forceReleaseAfter": mine, "waitForRelease": "3s", "crossNode": "plugin"}));
        let res = add(&store, &c, &who("new"), &LocalState::none()).await;
        let case = format!("stamped {stamped}, mine {mine}, age {age}s");
        if forced {
            assert_eq!(ip_of(&res.unwrap()), "10.0.0.2", "{case}");
            let ev = store.events();
            assert!(ev.iter().any(|(r, n)| r == "NetworkEndpoint/ForcedRelease" && n.contains(FIN)), "{case}: {ev:?}");
            assert!(ev.iter().any(|(r, _)| r == "Pod/ForcedRelease"), "{case}");
        } else {
            let e = res.unwrap_err();
            assert_eq!(e.code(), 100, "{case}: {e}");
            assert_eq!(store.object(&name).unwrap().metadata.finalizers.unwrap(), [FIN], "{case}: finalizer kept");
            assert!(store.events().iter().all(|(r, _)| !r.ends_with("ForcedRelease")), "{case}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_release_that_becomes_stuck_during_the_wait_is_forced_then() {
    let store = MemStore::new(T0, &["n1"]);
    let c = conf(
        "10.0.0.0/30",
        json!({"forceReleaseAfter": "4s", "finalizers": [FIN], "waitForRelease": "20s", "crossNode": "plugin"}),
    );
    let name = fill(&store, &c, "n1", &[FIN]).remove(0);
    store.release(&name);
    let started = tokio::time::Instant::now();
    let r = add(&store, &c, &who("new"), &LocalState::none()).await.unwrap();
    assert_eq!(ip_of(&r), "10.0.0.2");
    let waited = started.elapsed();
    // Never before the bound (plus the whole-second rounding of deletionTimestamp).
    assert!(waited >= Duration::from_secs(4), "forced after {waited:?}");
    assert!(waited < Duration::from_secs(7), "forced after {waited:?}");
}

/// The default, `crossNode: controller`: an ADD never forces a release; it
/// joins the pool's queue with an entry of its own, naming its Pod,
/// sandbox, family, deadline and the spans it can take, and deletes it when the wait ends.
#[tokio::test(start_paused = true)]
async fn with_cross_node_controller_an_add_forces_nothing_and_joins_the_queue() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let holder = conf("10.0.0.0/29", json!({"forceReleaseAfter": "1s"}));
    let names = fill(&store, &holder, "gone", &[FIN]);
    store.release(&names[0]);
    tokio::time::advance(Duration::from_secs(600)).await;
    let c = conf("10.0.0.0/29", json!({"waitForRelease": "5s"}));
    let watcher = store.clone();
    let seen = tokio::spawn(async move {
        loop {
            let entries = watcher.entries();
            if !entries.is_empty() {
                return entries;
            }
            watcher.changes().await;
        }
    });
    let e = add(&*store, &c, &who("a"), &LocalState::none()).await.unwrap_err();
    assert_eq!(e.code(), 100, "{e}");
    assert!(e.to_string().contains("in the pool's queue as NetworkEndpointNeed p.n1."), "{e}");
    let entries = tokio::time::timeout(Duration::from_secs(1), seen).await.unwrap().unwrap();
    let (name, entry) = entries.iter().next().unwrap();
    let spec = &entry.spec;
    assert_eq!(*name, netendpoint_crd::need_name("p", "n1", spec.slot));
    assert_eq!((spec.pool.as_str(), spec.node.as_str(), spec.pod.uid.as_str()), ("p", "n1", "uid-a"));
    assert_eq!((spec.container_id.as_deref(), spec.if_name.as_deref()), (Some("a"), Some("eth0")));
    assert_eq!(spec.ip_family, Some(netendpoint_crd::IpFamily::IPv4));
    assert_eq!(spec.spans, Some(vec!["10.0.0.2-10.0.0.6".to_string()]), "the addresses it can take");
    let deadline = spec.deadline.as_ref().unwrap().0;
    let created = entry.metadata.creation_timestamp.as_ref().unwrap().0;
    assert!(deadline.duration_since(created).as_secs() <= 5, "the deadline is the wait's end");
    assert!(store.entries().is_empty(), "deleted when the wait ended");
    assert_eq!(store.object(&names[0]).unwrap().metadata.finalizers.unwrap(), [FIN], "stuck release not forced");
    assert_eq!(store.calls("patch"), 0);
    assert!(store.events().iter().all(|(r, _)| !r.ends_with("ForcedRelease")));
}

/// A node's hint says its shard is full, but an address was freed since:
/// the hint is no reason to skip it; the ADD reads the summary and takes it.
#[tokio::test(start_paused = true)]
async fn a_hint_that_shows_a_full_shard_never_hides_a_freed_address() {
    let store = MemStore::new(T0, &["n1"]);
    let c = conf("10.0.0.0/25", json!({"waitForRelease": "0s"}));
    let s = Scratch::new("stale-hint");
    let names = fill(&store, &c, "n2", &[]);
    // The node's ADD finds the one free address through the summary, and
    // keeps the summary, full now, as its hint.
    store.release(&names[7]);
    let r = add(&store, &c, &who("first"), &s.local).await.unwrap();
    assert_eq!(netendpoint_crd::endpoint_name(&c.pool, ip_of(&r).parse().unwrap()), names[7]);
    assert!(store.calls("shard") >= 1, "the summary was read");
    store.release(&names[40]);
    let r = add(&store, &c, &who("after"), &s.local).await.unwrap();
    assert_eq!(netendpoint_crd::endpoint_name(&c.pool, ip_of(&r).parse().unwrap()), names[40]);
    no_list(&store);
}

/// The summary shows an address free that another ADD took, and that is
/// freed again before the summary ever shows it taken: the summary never
/// moves. The waiting ADD, whose create was refused there, looks again on
/// its own and gets the address soon after it is free.
#[tokio::test(start_paused = true)]
async fn an_add_that_saw_the_summary_behind_does_not_wait_for_it_to_move() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let c = conf("10.0.0.0/25", json!({"waitForRelease": "20s"}));
    let names = fill(&store, &c, "n2", &[]);
    store.release(&names[30]);
    store.summaries(SummaryMode::Behind);
    // Taken behind the summary's back, and freed again 2 s later.
    let set = &c.range_sets[0];
    let ip = netendpoint_lease::view::ip_from_name(&names[30]).unwrap();
    store.insert(lease_object(&c, &who("sneaky"), set, ip));
    let s2 = store.clone();
    let name = names[30].clone();
    let free = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        s2.release(&name);
    });
    let started = tokio::time::Instant::now();
    let r = add(&*store, &c, &who("waiter"), &LocalState::none()).await.unwrap();
    free.await.unwrap();
    assert_eq!(ip_of(&r), ip.to_string());
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(5), "looked again on its own: {waited:?}");
    no_list(&store);
}

/// Sixteen new nodes ADD at once into a /24 90 % full (every call a round
/// trip that lets the others run): once a create is refused, each ADD takes
/// one of the next free addresses by a hash of its sandbox, so they spread
/// instead of all racing for the same one. Measured: 26 refused creates
/// for 16 ADDs (16 of them each node's first create, at the set's first
/// address, before it knows anything), against 136 when every ADD takes
/// the first free address.
#[tokio::test(start_paused = true)]
async fn adds_that_meet_contention_spread_over_the_free_addresses() {
    let nodes: Vec<String> = (0..16).map(|i| format!("n{i}")).collect();
    let refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let store = MemStore::new(T0, &refs);
    let c = conf("10.0.0.0/24", json!({"waitForRelease": "0s"}));
    fill_random(&store, &c, 9);
    let dirs: Vec<Scratch> = nodes.iter().map(|n| Scratch::new(&format!("contend-{n}"))).collect();
    let adds = nodes.iter().zip(&dirs).map(|(n, s)| {
        let mut w = who(&format!("{n}-sandbox"));
        w.node = n.clone();
        let (store, c) = (&store, &c);
        async move { add(store, c, &w, &s.local).await }
    });
    let results = futures::future::join_all(adds).await;
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let refused = store.calls("create") - ok;
    assert!(ok >= 16.min(results.len()), "every ADD got an address: {ok}");
    assert!(refused as f64 / ok as f64 <= 2.0, "{refused} refused creates for {ok} ADDs");
    no_list(&store);
}

/// The summary shows two addresses free; one of them was taken behind its
/// back, and a racing ADD's refusal has it spreading. Whichever address its
/// hash picks first, the ADD still tries the other: a free address the
/// summary shows is never skipped (no false exhaustion).
#[tokio::test(start_paused = true)]
async fn a_spreading_add_never_skips_a_free_address_the_summary_shows() {
    for n in 0..20 {
        let store = MemStore::new(T0, &["n1", "n2"]);
        let c = conf("10.0.0.0/25", json!({"waitForRelease": "0s"}));
        let names = fill(&store, &c, "n2", &[]);
        // .10 and .20 free in the summary; .20 then taken behind its back.
        store.release(&names[8]);
        store.release(&names[18]);
        store.summaries(SummaryMode::Behind);
        let set = &c.range_sets[0];
        let taken = netendpoint_lease::view::ip_from_name(&names[18]).unwrap();
        store.insert(lease_object(&c, &who("sneaky"), set, taken));
        let r = add(&store, &c, &who(&format!("racer-{n}")), &LocalState::none()).await;
        let ip = ip_of(&r.unwrap_or_else(|e| panic!("racer-{n}: {e}")));
        assert_eq!(ip, netendpoint_lease::view::ip_from_name(&names[8]).unwrap().to_string(), "racer-{n}");
    }
}

/// Sandbox `cid` on node `node`.
fn on(node: &str, cid: &str) -> crate::claim::Attachment {
    let mut w = who(cid);
    w.node = node.into();
    w
}

/// Invariant 13: nine ADDs from three nodes wait in a full pool, arriving
/// 100 ms apart; releases come one at a time. Each release goes to the
/// waiter that has waited longest, so they are served in arrival order,
/// each after one release, with a bounded number of requests.
#[tokio::test(start_paused = true)]
async fn waiters_from_several_nodes_are_served_in_arrival_order() {
    let store = Arc::new(MemStore::new(T0, &["n1", "n2", "n3"]));
    let c = conf("10.0.0.0/29", json!({"waitForRelease": "20s"}));
    let names = fill(&store, &c, "old", &[FIN]);
    let controller = store.spawn_queue_controller("p", c.range_sets[0].clone());
    let before = store.total_calls();
    let waiters = (0..9).map(|i| {
        let (store, c) = (store.clone(), c.clone());
        let w = on(["n1", "n2", "n3"][i % 3], &format!("w{i}"));
        async move {
            tokio::time::sleep(Duration::from_millis(100 * i as u64)).await;
            let r = add(&*store, &c, &w, &LocalState::none()).await;
            (i, r.map(|r| ip_of(&r)), tokio::time::Instant::now())
        }
    });
    // The old Pods go one at a time; the agent acknowledges each 50 ms later,
    // and the replacements' own leases are released in turn.
    let releaser = {
        let store = store.clone();
        let first = names.clone();
        tokio::spawn(async move {
            let mut next = first.into_iter();
            for _ in 0..9 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let name = match next.next() {
                    Some(n) => n,
                    None => {
                        // A replacement leaves again (its Pod scaled away).
                        let ep = store
                            .objects()
                            .into_iter()
                            .find(|e| !e.is_releasing() && e.spec.container_id.starts_with('w'));
                        let Some(ep) = ep else { continue };
                        ep.metadata.name.unwrap()
                    }
                };
                store.release(&name);
                tokio::time::sleep(Duration::from_millis(50)).await;
                store.ack(&name, FIN);
            }
        })
    };
    let mut served = Vec::new();
    for (i, r, at) in futures::future::join_all(waiters).await {
        assert!(r.is_ok(), "waiter {i}: {r:?}");
        served.push((at, i));
    }
    releaser.await.unwrap();
    controller.abort();
    served.sort();
    let order: Vec<usize> = served.iter().map(|(_, i)| *i).collect();
    assert_eq!(order, (0..9).collect::<Vec<_>>(), "served in arrival order");
    let per_waiter = (store.total_calls() - before) as f64 / 9.0;
    assert!(per_waiter <= 14.0, "{per_waiter} requests per waiting ADD");
    assert!(store.entries().is_empty());
    no_list(&store);
}

/// A release promised to the first waiter is not taken by an ADD that
/// comes later: the summaries count a promised address as leased, so the
/// later ADD waits behind it.
#[tokio::test(start_paused = true)]
async fn a_later_add_never_takes_a_promised_address() {
    let store = Arc::new(MemStore::new(T0, &["n1", "n2"]));
    let c = conf("10.0.0.0/29", json!({"waitForRelease": "4s"}));
    let names = fill(&store, &c, "old", &[FIN]);
    let controller = store.spawn_queue_controller("p", c.range_sets[0].clone());
    store.release(&names[1]);
    let (first_who, none) = (on("n1", "first"), LocalState::none());
    let first = add(&*store, &c, &first_who, &none);
    let later = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(store.entries().values().any(|e| e.status.as_ref().is_some_and(|s| s.promise.is_some())), "promised");
        let ack = ack_after(&store, &names[1], Duration::from_millis(100));
        let later = add(&*store, &c, &on("n2", "later"), &LocalState::none()).await;
        ack.await.unwrap();
        later
    };
    let (first, later) = futures::future::join(first, later).await;
    assert_eq!(ip_of(&first.unwrap()), "10.0.0.3", "the promised release went to the first waiter");
    assert_eq!(later.unwrap_err().code(), 100, "the later ADD waited behind it");
    controller.abort();
}

/// A waiter that gives up deletes its entry; the release promised to it
/// goes to the next waiter in line (invariant 14: nothing outlives its ADD).
#[tokio::test(start_paused = true)]
async fn a_waiter_that_gives_up_passes_its_promise_to_the_next() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let short = conf("10.0.0.0/29", json!({"waitForRelease": "2s"}));
    let long = conf("10.0.0.0/29", json!({"waitForRelease": "10s"}));
    let names = fill(&store, &long, "old", &[FIN]);
    let controller = store.spawn_queue_controller("p", long.range_sets[0].clone());
    store.release(&names[0]);
    let (impatient_who, none) = (who("impatient"), LocalState::none());
    let impatient = add(&*store, &short, &impatient_who, &none);
    let patient = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let ack = ack_after(&store, &names[0], Duration::from_secs(5));
        let r = add(&*store, &long, &who("patient"), &LocalState::none()).await;
        ack.await.unwrap();
        r
    };
    let (impatient, patient) = futures::future::join(impatient, patient).await;
    assert_eq!(impatient.unwrap_err().code(), 100);
    assert_eq!(ip_of(&patient.unwrap()), "10.0.0.2");
    assert!(store.entries().is_empty(), "both entries deleted");
    controller.abort();
}

/// A watch of the entry that fails (429, 5xx) is retried within the wait:
/// only time ends it.
#[tokio::test(start_paused = true)]
async fn watch_failures_of_the_entry_are_retried() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let c = conf("10.0.0.0/29", json!({"waitForRelease": "8s"}));
    let names = fill(&store, &c, "old", &[FIN]);
    let controller = store.spawn_queue_controller("p", c.range_sets[0].clone());
    store.fail("watch_entry", crate::store::mem::Fault::Overloaded, 3);
    store.release(&names[3]);
    let ack = ack_after(&store, &names[3], Duration::from_secs(1));
    let r = add(&*store, &c, &who("new"), &LocalState::none()).await.unwrap();
    ack.await.unwrap();
    controller.abort();
    assert_eq!(ip_of(&r), "10.0.0.5");
}

/// A node's waiting ADDs take distinct slots, each its own entry.
#[tokio::test(start_paused = true)]
async fn a_nodes_waiting_adds_each_have_their_own_entry() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let c = conf("10.0.0.0/30", json!({"waitForRelease": "2s"}));
    fill(&store, &c, "old", &[]);
    let watcher = store.clone();
    let most = tokio::spawn(async move {
        let mut most = 0;
        loop {
            most = most.max(watcher.entries().len());
            if most == 12 {
                return most;
            }
            watcher.changes().await;
        }
    });
    let adds = (0..12).map(|i| {
        let (store, c) = (store.clone(), c.clone());
        async move { add(&*store, &c, &who(&format!("s{i}")), &LocalState::none()).await }
    });
    let results = futures::future::join_all(adds).await;
    assert!(results.iter().all(|r| r.as_ref().is_err_and(|e| e.code() == 100)));
    assert_eq!(tokio::time::timeout(Duration::from_secs(1), most).await.unwrap().unwrap(), 12);
    assert!(store.entries().is_empty());
}

/// An entry of another waiting ADD of node `node` in `slot`, waiting 60 s.
fn other_entry(store: &MemStore, pool: &str, node: &str, slot: u8, pod: &str) -> netendpoint_crd::NetworkEndpointNeed {
    use netendpoint_crd::{NetworkEndpointNeed, NetworkEndpointNeedSpec, PodRef};
    let now = crate::store::Clock::server_now(store).unwrap();
    let deadline = now.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(60)).unwrap();
    let spec = NetworkEndpointNeedSpec {
        pool: pool.into(),
        node: node.into(),
        pod: PodRef { namespace: "default".into(), name: pod.into(), uid: format!("uid-{pod}") },
        wait_seconds: 60,
        slot: Some(slot),
        ip_family: Some(netendpoint_crd::IpFamily::IPv4),
        container_id: Some(pod.into()),
        if_name: Some("eth0".into()),
        deadline: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(deadline)),
        spans: None,
    };
    let name = netendpoint_crd::need_name(pool, node, Some(slot));
    NetworkEndpointNeed {
        metadata: kube::api::ObjectMeta { name: Some(name), ..Default::default() },
        spec,
        status: None,
    }
}

/// Every slot of the node is taken by its other waiting ADDs when this one
/// comes. Once they are served, it joins the queue at a later look, ahead
/// of an ADD that comes after that, and is promised the next release: it
/// never starves outside the queue while every address goes to those in it.
#[tokio::test(start_paused = true)]
async fn an_add_that_found_every_slot_taken_joins_the_queue_once_one_frees() {
    use crate::store::Queue;
    let store = Arc::new(MemStore::new(T0, &["n1", "n2"]));
    let c = conf("10.0.0.0/29", json!({"waitForRelease": "12s"}));
    let names = fill(&store, &c, "n1", &[]);
    let mut others = Vec::new();
    for slot in 0..netendpoint_crd::MAX_NEED_SLOTS {
        let e = store.join(&other_entry(&store, "p", "n1", slot, &format!("o{slot}"))).await.unwrap().unwrap();
        others.push((e.metadata.name.unwrap(), e.metadata.uid.unwrap()));
    }
    let controller = store.spawn_queue_controller("p", c.range_sets[0].clone());
    let script = {
        let (store, victim) = (store.clone(), names[2].clone());
        tokio::spawn(async move {
            // The node's other waiters are served (or gone); a later ADD of
            // another node joins; then one address is released.
            tokio::time::sleep(Duration::from_secs(1)).await;
            for (name, uid) in &others {
                store.leave(name, uid).await.unwrap();
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
            store.join(&other_entry(&store, "p", "n2", 0, "late")).await.unwrap().unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
            store.release(&victim);
        })
    };
    let r = add(&*store, &c, &who("crowded"), &LocalState::none()).await;
    script.await.unwrap();
    controller.abort();
    assert_eq!(ip_of(&r.unwrap()), "10.0.0.4", "served in its place, before the later ADD");
    no_list(&store);
}
