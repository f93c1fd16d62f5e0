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
    assert_eq!(store.calls("shard"), 0, "no summary to read");
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

/// The summaries are written at most every 250 ms: a small set's wait reads
/// its names, so a release the summary does not show yet is found and
/// watched by name, and the ADD gets the address as soon as the agent
/// acknowledges, not at the controller's next write (which never comes here).
#[tokio::test(start_paused = true)]
async fn a_small_full_pools_wait_finds_a_release_the_summary_does_not_show_yet() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let c = conf("10.0.0.0/29", json!({"waitForRelease": "8s"}));
    let names = fill(&store, &c, "n1", &[FIN]);
    store.summaries(SummaryMode::Behind);
    store.release(&names[2]);
    let ack = ack_after(&store, &names[2], Duration::from_millis(300));
    let started = tokio::time::Instant::now();
    let r = add(&*store, &c, &who("new"), &LocalState::none()).await.unwrap();
    ack.await.unwrap();
    assert_eq!(ip_of(&r), "10.0.0.4");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "not before the agent's ack");
    assert!(waited < Duration::from_millis(400), "as soon as the release ended, not later: {waited:?}");
    no_list(&store);
}

#[tokio::test(start_paused = true)]
async fn a_full_pool_waits_for_a_release_that_has_not_begun_yet() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let c = conf("10.0.0.0/29", json!({"waitForRelease": "5s"}));
    let names = fill(&store, &c, "n1", &[]);
    let late = store.clone();
    let victim = names[2].clone();
    // The old pod's DEL comes 1.5 s after the replacement's ADD, as under kubelet.
    let del = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        late.release(&victim);
    });
    let r = add(&*store, &c, &who("new"), &LocalState::none()).await.unwrap();
    assert_eq!(ip_of(&r), "10.0.0.4");
    del.await.unwrap();
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
/// raises its node's need once, naming its Pod, and withdraws it after.
#[tokio::test(start_paused = true)]
async fn with_cross_node_controller_an_add_forces_nothing_and_raises_its_need() {
    let store = Arc::new(MemStore::new(T0, &["n1"]));
    let holder = conf("10.0.0.0/29", json!({"forceReleaseAfter": "1s"}));
    let names = fill(&store, &holder, "gone", &[FIN]);
    store.release(&names[0]);
    tokio::time::advance(Duration::from_secs(600)).await;
    let c = conf("10.0.0.0/29", json!({"waitForRelease": "5s"}));
    let watcher = store.clone();
    let seen = tokio::spawn(async move {
        loop {
            let needs = watcher.needs();
            if !needs.is_empty() {
                return needs;
            }
            watcher.changes().await;
        }
    });
    let e = add(&*store, &c, &who("a"), &LocalState::none()).await.unwrap_err();
    assert_eq!(e.code(), 100, "{e}");
    let needs = tokio::time::timeout(Duration::from_secs(1), seen).await.unwrap().unwrap();
    let need = &needs["p.n1"];
    assert_eq!((need.pool.as_str(), need.node.as_str(), need.pod.uid.as_str()), ("p", "n1", "uid-a"));
    assert!(store.needs().is_empty(), "withdrawn when the wait ended");
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
