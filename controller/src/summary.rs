//! The summaries ADDs read instead of listing leases: per shard a bitmap of
//! the leased and the releasing addresses (`NetworkEndpointShard`), per
//! pool the counts of each shard (`NetworkEndpointPool` status).
//!
//! Written by the leader from its one watch of the leases, coalesced: a
//! shard or pool is written at once when it changes after a quiet spell,
//! and otherwise at most once per [`MIN_INTERVAL`], whatever the churn. A
//! pool summary is confirmed at least every [`CONFIRM_EVERY`], so an ADD can
//! tell a summary that a controller keeps from one left behind.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use netendpoint_crd::{
    NetworkEndpointPool, NetworkEndpointPoolSpec, NetworkEndpointShard, NetworkEndpointShardSpec, PoolSummary,
    endpoint_name,
};
use netendpoint_lease::summary::{ShardView, runs_of, shard_first, shard_index};
use tracing::{debug, warn};

use crate::decide::{Hold, Lease};

/// The least time between two writes of one shard or one pool summary.
pub const MIN_INTERVAL: Duration = Duration::from_millis(250);
/// How often a pool summary is confirmed even when nothing changed.
pub const CONFIRM_EVERY: Duration = Duration::from_secs(30);

/// What the summaries should say now.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    /// Per (pool, shard first address), its view.
    pub shards: BTreeMap<(String, IpAddr), ShardView>,
    /// Per pool, per shard: (leased, releasing).
    pub pools: BTreeMap<String, BTreeMap<IpAddr, (u16, u16)>>,
}

/// The summaries of `leases` and `holds`. A hold counts as leased, and
/// never as releasing: its address is the claim's. An incarnation is left
/// out (its hold already counts its address), and so is the release of a
/// lease of an older version held by the sticky-hold finalizer. An address
/// `promised` to a waiting ADD counts as leased, so that no ADD that reads
/// the summaries takes it before the ADD it is promised to.
pub fn wanted<'a, L: Borrow<Lease>>(
    leases: &'a [L],
    holds: &'a [Hold],
    promised: &'a [(String, IpAddr)],
    pools: &HashSet<String>,
) -> Wanted {
    let mut w = Wanted::default();
    // Keyed by borrowed pool names while marking: one String per shard, not per lease.
    let mut shards: HashMap<(&str, IpAddr), ShardView> = HashMap::new();
    let mut mark = |pool: &'a str, ip: IpAddr, releasing: bool| {
        let v = shards.entry((pool, shard_first(ip))).or_default();
        v.leased.set(shard_index(ip));
        if releasing {
            v.releasing.set(shard_index(ip));
        }
    };
    for l in leases.iter().map(Borrow::borrow).filter(|l: &&Lease| l.incarnation.is_none()) {
        if let Some(ip) = l.ip {
            mark(&l.pool, ip, l.releasing_since.is_some() && !l.is_held());
        }
    }
    for h in holds {
        mark(&h.pool, h.ip, false);
    }
    for (pool, ip) in promised {
        let v = shards.entry((pool.as_str(), shard_first(*ip))).or_default();
        v.leased.set(shard_index(*ip));
    }
    w.shards = shards.into_iter().map(|((pool, first), v)| ((pool.to_string(), first), v)).collect();
    for ((pool, first), v) in &w.shards {
        let counts = (
            u16::try_from(v.leased.count()).unwrap_or(u16::MAX),
            u16::try_from(v.releasing.count()).unwrap_or(u16::MAX),
        );
        w.pools.entry(pool.clone()).or_default().insert(*first, counts);
    }
    // A pool whose last lease went away still gets its (empty) summary.
    for pool in pools {
        w.pools.entry(pool.clone()).or_default();
    }
    w
}

/// Per shard of a pool (by its first address): leased and releasing addresses.
pub type PoolCounts = BTreeMap<IpAddr, (u16, u16)>;

/// The summary writes due in a sync.
#[derive(Debug, Default, PartialEq)]
struct Due {
    shards: Vec<((String, IpAddr), ShardView)>,
    pools: Vec<(String, PoolCounts)>,
    later: Option<Duration>,
}

/// What was last written, and when.
#[derive(Default)]
pub struct SummaryWriter {
    shards: HashMap<(String, IpAddr), (ShardView, Instant)>,
    pools: HashMap<String, (PoolCounts, Instant)>,
    created_shards: HashSet<String>,
    created_pools: HashSet<String>,
    /// Writes made, for the metrics and the benchmark.
    pub writes: u64,
    /// Set once the API server says a summary resource does not exist.
    missing: bool,
}

/// The field manager of the summaries (the pool figures have their own).
const MANAGER: &str = "netendpoint-controller-summary";

impl SummaryWriter {
    /// The writes made since the last call.
    pub fn take_writes(&mut self) -> u64 {
        std::mem::take(&mut self.writes)
    }

    /// Forgets what was written (a new leadership term writes everything again).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Writes what is due; returns when to look again for what is not.
    pub async fn sync(&mut self, client: &Client, wanted: &Wanted, now: Timestamp) -> Option<Duration> {
        self.sync_pools(client, wanted, now, None).await
    }

    /// [`Self::sync`] of the pools in `only` (all with `None`): `wanted`
    /// then says what those pools' summaries should say, and nothing of
    /// the others is written.
    pub async fn sync_pools(
        &mut self,
        client: &Client,
        wanted: &Wanted,
        now: Timestamp,
        only: Option<&HashSet<String>>,
    ) -> Option<Duration> {
        if self.missing {
            return None;
        }
        let at = Instant::now();
        let due = self.due(wanted, at, only);
        // Many shards change at once in a fill or a churn of a large pool:
        // written a few at a time, not one after the other, so that the
        // pass (and the queues it serves) does not wait seconds for them.
        let created = &self.created_shards;
        let writes = due.shards.into_iter().map(|((pool, first), view)| {
            let name = endpoint_name(&pool, first);
            let exists = created.contains(&name);
            async move {
                let outcome = write_shard(client, &pool, first, &view, now, exists).await;
                (name, (pool, first), view, outcome)
            }
        });
        // The pool summaries at the same time: a pass (and a queue pass
        // behind it) waits for one round of writes, not for two.
        let created_pools = &self.created_pools;
        let pool_writes = due.pools.into_iter().map(|(pool, counts)| {
            let exists = created_pools.contains(&pool);
            async move {
                let written = write_pool(client, &pool, &counts, now, exists).await;
                (pool, counts, written)
            }
        });
        let (outcomes, pool_outcomes): (Vec<_>, Vec<_>) = futures::join!(
            futures::stream::iter(writes).buffer_unordered(WRITES_IN_FLIGHT).collect(),
            futures::stream::iter(pool_writes).buffer_unordered(WRITES_IN_FLIGHT).collect(),
        );
        for (name, key, view, outcome) in outcomes {
            self.settle(name, key, view, outcome, at);
        }
        for (pool, counts, written) in pool_outcomes {
            if written {
                self.writes += 1;
                self.created_pools.insert(pool.clone());
                self.pools.insert(pool, (counts, at));
            } else {
                self.created_pools.remove(&pool);
            }
        }
        let later = due.later;
        match (later, self.confirm_in(wanted, at)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Notes how the write of shard `name` (`key`) as `view` at `at` ended:
    /// a written view is not written again until it changes, a failed one
    /// is due again, and a missing resource stops the summaries.
    fn settle(&mut self, name: String, key: (String, IpAddr), view: ShardView, outcome: ShardWrite, at: Instant) {
        match outcome {
            ShardWrite::Written => {
                self.writes += 1;
                self.created_shards.insert(name);
                self.shards.insert(key, (view, at));
            }
            ShardWrite::NotCreated => {}
            ShardWrite::NotPatched => {
                self.created_shards.remove(&name);
            }
            ShardWrite::NotInstalled => self.missing = true,
        }
    }

    /// The writes due at `at` for `wanted`, of the pools in `only` (all
    /// with `None`), and when the first of those held back by
    /// [`MIN_INTERVAL`] is due.
    fn due(&self, wanted: &Wanted, at: Instant, only: Option<&HashSet<String>>) -> Due {
        let ours = |pool: &str| only.is_none_or(|o| o.contains(pool));
        let mut later: Option<Duration> = None;
        let mut due = |last: Option<Instant>, changed: bool, confirm: bool| -> bool {
            match last {
                None => true,
                Some(t) => {
                    let since = at.duration_since(t);
                    if !(changed || confirm) {
                        return false;
                    }
                    if since >= MIN_INTERVAL {
                        return true;
                    }
                    let left = MIN_INTERVAL - since;
                    later = Some(later.map_or(left, |l: Duration| l.min(left)));
                    false
                }
            }
        };
        let mut shards = Vec::new();
        for (key, view) in wanted.shards.iter().filter(|((pool, _), _)| ours(pool)) {
            let last = self.shards.get(key);
            if due(last.map(|(_, t)| *t), last.is_none_or(|(v, _)| v != view), false) {
                shards.push((key.clone(), *view));
            }
        }
        // Shards that lost their last lease are written empty once.
        for (key, (view, t)) in self.shards.iter().filter(|((pool, _), _)| ours(pool)) {
            if !wanted.shards.contains_key(key) && *view != ShardView::default() && due(Some(*t), true, false) {
                shards.push((key.clone(), ShardView::default()));
            }
        }
        let mut pools = Vec::new();
        for (pool, counts) in wanted.pools.iter().filter(|(pool, _)| ours(pool)) {
            let last = self.pools.get(pool);
            let confirm = last.is_some_and(|(_, t)| at.duration_since(*t) >= CONFIRM_EVERY);
            if due(last.map(|(_, t)| *t), last.is_none_or(|(c, _)| c != counts), confirm) {
                pools.push((pool.clone(), counts.clone()));
            }
        }
        // Pools that lost their last lease (and are in no network config)
        // are written empty once, then no longer confirmed.
        for (pool, (counts, t)) in self.pools.iter().filter(|(pool, _)| ours(pool)) {
            if !wanted.pools.contains_key(pool) && !counts.is_empty() && due(Some(*t), true, false) {
                pools.push((pool.clone(), PoolCounts::new()));
            }
        }
        Due { shards, pools, later }
    }

    /// How long until the next pool summary is due to be confirmed. Only
    /// the pools still wanted are confirmed: a gone pool's last write would
    /// be due at once on every pass, for ever (a busy loop of whole passes
    /// that cost 0.9 of a core at 118,000 leases).
    fn confirm_in(&self, wanted: &Wanted, at: Instant) -> Option<Duration> {
        wanted
            .pools
            .keys()
            .filter_map(|p| self.pools.get(p))
            .map(|(_, t)| CONFIRM_EVERY.saturating_sub(at.duration_since(*t)))
            .min()
    }
}

/// Writes the summary of `pool` as `counts`, creating its object first
/// unless it `exists`; true when written.
async fn write_pool(
    client: &Client,
    pool: &str,
    counts: &BTreeMap<IpAddr, (u16, u16)>,
    now: Timestamp,
    exists: bool,
) -> bool {
    if !netendpoint_crd::is_dns1123_subdomain(pool) {
        return false;
    }
    let api: Api<NetworkEndpointPool> = Api::all(client.clone());
    if !exists {
        match api.create(&PostParams::default(), &NetworkEndpointPool::new(pool, NetworkEndpointPoolSpec {})).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_already_exists() => {}
            Err(e) => {
                warn!(pool, error = %e, "cannot create the pool object");
                return false;
            }
        }
    }
    let summary = PoolSummary { confirmed_at: Some(Time(now)), runs: runs_of(counts) };
    let patch = serde_json::json!({
        "apiVersion": "netendpoint.dev/v1alpha1", "kind": "NetworkEndpointPool",
        "status": { "summary": summary },
    });
    let pp = PatchParams::apply(MANAGER).force();
    match api.patch_status(pool, &pp, &Patch::Apply(patch)).await {
        Ok(_) => true,
        Err(e) => {
            warn!(pool, error = %e, "cannot write the pool summary");
            false
        }
    }
}

/// Summary writes in flight at once.
const WRITES_IN_FLIGHT: usize = 8;

/// How the write of one shard summary ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShardWrite {
    Written,
    /// Its object could not be created (nothing to patch).
    NotCreated,
    /// Its status could not be written; its object is created again next time.
    NotPatched,
    /// The NetworkEndpointShard resource is not installed.
    NotInstalled,
}

/// Writes the shard summary of `pool` from `first` as `view`,
/// creating its object first unless it `exists`.
async fn write_shard(
    client: &Client,
    pool: &str,
    first: IpAddr,
    view: &ShardView,
    now: Timestamp,
    exists: bool,
) -> ShardWrite {
    let name = &endpoint_name(pool, first);
    let api: Api<NetworkEndpointShard> = Api::all(client.clone());
    if !exists {
        let obj = NetworkEndpointShard::new(
            name,
            NetworkEndpointShardSpec { pool: pool.to_string(), first: first.to_string() },
        );
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_already_exists() => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {
                warn!("the NetworkEndpointShard resource is not installed: no summaries (apply deploy/crd.yaml)");
                return ShardWrite::NotInstalled;
            }
            Err(e) => {
                warn!(shard = %name, error = %e, "cannot create the shard summary");
                return ShardWrite::NotCreated;
            }
        }
    }
    let mut status = view.status();
    status.updated_at = Some(Time(now));
    let patch = serde_json::json!({ "apiVersion": "netendpoint.dev/v1alpha1", "kind": "NetworkEndpointShard", "status": status });
    let pp = PatchParams::apply(MANAGER).force();
    match api.patch_status(name, &pp, &Patch::Apply(patch)).await {
        Ok(_) => {
            debug!(shard = %name, leased = view.leased.count(), releasing = view.releasing.count(), "shard summary written");
            ShardWrite::Written
        }
        Err(e) => {
            warn!(shard = %name, error = %e, "cannot write the shard summary");
            ShardWrite::NotPatched
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netendpoint_crd::PodRef;

    fn lease(ip: &str, releasing: bool) -> Lease {
        Lease {
            name: format!("p.{ip}"),
            uid: ip.into(),
            resource_version: "1".into(),
            pool: "p".into(),
            ip: ip.parse().ok(),
            node: "n".into(),
            pod: Some(PodRef::default()),
            releasing_since: releasing.then(|| "2026-01-01T00:00:00Z".parse().unwrap()),
            finalizers: vec![],
            force_release_after: None,
            sticky: None,
            incarnation: None,
            static_ip: false,
        }
    }

    #[test]
    fn summaries_count_leases_and_releases_and_leave_incarnations_to_their_hold() {
        let mut inc = lease("10.0.0.5", true);
        inc.incarnation = Some(2);
        let leases = vec![lease("10.0.0.1", false), lease("10.0.0.2", true), lease("10.0.1.7", false), inc];
        // .9 is free, and promised to a waiting ADD: it counts as leased.
        let promised = [("p".to_string(), "10.0.0.9".parse().unwrap())];
        let w = wanted(&leases, &[], &promised, &["p".to_string(), "empty".to_string()].into());
        let first: IpAddr = "10.0.0.0".parse().unwrap();
        let v = w.shards[&("p".to_string(), first)];
        assert!(v.leased.get(1) && v.leased.get(2) && !v.leased.get(5));
        assert!(v.leased.get(9) && !v.releasing.get(9), "a promised address is leased to every reader");
        assert!(v.releasing.get(2) && !v.releasing.get(1));
        assert_eq!(w.pools["p"][&first], (3, 1));
        assert_eq!(w.pools["p"].len(), 2);
        assert!(w.pools["empty"].is_empty());
    }

    #[test]
    fn a_shard_written_is_due_again_only_when_it_changes_and_a_failed_write_is_due_at_once() {
        let at = Instant::now();
        let later = at + MIN_INTERVAL;
        let mut w = SummaryWriter::default();
        let mut view = ShardView::default();
        view.leased.set(2);
        let (a, b) = (("p".to_string(), "10.0.0.0".parse().unwrap()), ("p".to_string(), "10.0.1.0".parse().unwrap()));
        w.settle("p.10.0.0.0".into(), a.clone(), view, ShardWrite::Written, at);
        w.settle("p.10.0.1.0".into(), b.clone(), view, ShardWrite::NotPatched, at);
        assert_eq!(w.take_writes(), 1);
        assert!(w.created_shards.contains("p.10.0.0.0") && !w.created_shards.contains("p.10.0.1.0"));
        let wanted = Wanted { shards: [(a.clone(), view), (b.clone(), view)].into(), pools: BTreeMap::new() };
        let due = w.due(&wanted, later, None);
        assert_eq!(due.shards, [(b, view)], "the failed one only: the written one did not change");
        w.settle("p.10.0.2.0".into(), a, view, ShardWrite::NotInstalled, at);
        assert!(w.missing, "no summaries without their resource");
    }

    #[test]
    fn a_sync_of_some_pools_writes_nothing_of_the_others() {
        let at = Instant::now();
        let long_ago = at.checked_sub(Duration::from_secs(3600)).unwrap_or(at);
        let mut writer = SummaryWriter::default();
        // Both pools were written with a lease an hour ago.
        let mut view = ShardView::default();
        view.leased.set(2);
        for (pool, first) in [("p", "10.0.0.0"), ("big", "10.1.0.0")] {
            let first: IpAddr = first.parse().unwrap();
            writer.shards.insert((pool.to_string(), first), (view, long_ago));
            writer.pools.insert(pool.to_string(), (PoolCounts::from([(first, (1, 0))]), long_ago));
        }
        // A queue pass's snapshot: pool p only, whose lease is now releasing.
        let only: HashSet<String> = ["p".to_string()].into();
        let wanted_p = wanted(&[lease("10.0.0.2", true)], &[], &[], &only);
        let due = writer.due(&wanted_p, at, Some(&only));
        let written: Vec<&str> =
            due.shards.iter().map(|((p, _), _)| p.as_str()).chain(due.pools.iter().map(|(p, _)| p.as_str())).collect();
        assert_eq!(written, ["p", "p"], "p's shard and pool, and nothing of big: {due:?}");
        // The same snapshot synced as a whole would empty big's summaries.
        let all = writer.due(&wanted_p, at, None);
        assert!(all.shards.iter().any(|((p, _), v)| p == "big" && *v == ShardView::default()), "{all:?}");
        assert!(all.pools.iter().any(|(p, c)| p == "big" && c.is_empty()), "{all:?}");
    }

    #[test]
    fn a_pool_that_lost_its_last_lease_is_never_due_for_confirmation_again() {
        let at = Instant::now();
        let long_ago = at.checked_sub(Duration::from_secs(3600)).unwrap_or(at);
        let ten_s_ago = at.checked_sub(Duration::from_secs(10)).unwrap_or(at);
        let mut writer = SummaryWriter::default();
        // "gone" was written empty an hour ago and is in no network config;
        // "kept" was confirmed 10 s ago.
        writer.pools.insert("gone".into(), (PoolCounts::new(), long_ago));
        writer.pools.insert("kept".into(), (PoolCounts::new(), ten_s_ago));
        let only_kept = wanted::<Lease>(&[], &[], &[], &["kept".to_string()].into());
        assert_eq!(writer.confirm_in(&only_kept, at), Some(CONFIRM_EVERY - Duration::from_secs(10)));
        let none = wanted::<Lease>(&[], &[], &[], &HashSet::new());
        assert_eq!(writer.confirm_in(&none, at), None, "a gone pool would make every pass due at once");
    }
}
