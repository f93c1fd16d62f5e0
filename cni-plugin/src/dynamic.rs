//! An address the allocator chooses, touching leases by name only
//! (invariant 11): no path here lists leases, at any pool size or fill.
//!
//! The create of `<pool>.<ip>` stays the claim. What changed is how an ADD
//! finds a free address, in phases, each readable on its own:
//! 1. [`from_hint`]: one create at the next candidate after the node's
//!    cursor that the node's last shard summary shows free (the common
//!    ADD ends here, after one request);
//! 2. [`from_summaries`]: the shard summary of that candidate, read by
//!    name, then creates at what it shows free; when the shard is full, the
//!    pool summary (by name) says which shard has room;
//! 3. [`by_probing`]: without summaries (no controller, or a stale one),
//!    creates along the candidates, a bounded number; a set of at most 64
//!    addresses reads each name instead;
//! 4. [`wait_for_release`]: a full pool raises its need, and watches the
//!    releases in progress, each by name, and the pool summary by name.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use futures::future::{Either, select, select_all};
use netendpoint_crd::{NetworkEndpoint, NetworkEndpointNeedSpec, REASON_FORCED_RELEASE, endpoint_name};
use netendpoint_lease::ReleaseState;
use netendpoint_lease::addr::{from_u128, to_u128};
use netendpoint_lease::summary::{Bitmap, ShardView, shard_first, shard_index};
use netendpoint_netconf::{CrossNode, RangeSet};
use tracing::{debug, info, warn};

use crate::claim::{Claiming, Deadline};
use crate::error::{Error, Exhaustion, Result};
use crate::local::{LocalState, ShardHint};
use crate::store::{Change, Leases, PoolSummaryView, Store};

/// Creates along the candidates before giving up, when no summary helps.
pub const BLIND_PROBES: usize = 16;
/// Of those, the ones right after the cursor; the rest are spread.
const BLIND_SEQUENTIAL: usize = 4;
/// Sets of at most this many addresses are read name by name when no
/// summary helps: cheaper than waiting blind.
pub const SCAN_AT_MOST: u128 = 64;
/// Shard summaries one ADD reads, at most, before it takes the pool as full.
pub const MAX_SHARD_READS: usize = 8;
/// Releases in progress a full pool's ADD watches at once, each by name.
pub const WATCHED_RELEASES: usize = 4;
/// A summary the controller has not confirmed for this long is stale.
pub const SUMMARY_STALE_AFTER: Duration = Duration::from_secs(90);
/// Rounds of the full-pool wait before an ADD gives up, whatever the deadline says.
const MAX_ROUNDS: usize = 64;
/// How soon a full-pool wait looks again when a create showed the summary
/// behind, at first and at most (doubling in between).
const LAG_RECHECK_FIRST: Duration = Duration::from_millis(250);
const LAG_RECHECK_MAX: Duration = Duration::from_secs(4);

/// What to create at an address: a lease, or a sticky hold.
pub type Make<'m> = &'m dyn Fn(IpAddr) -> NetworkEndpoint;

/// One range set's allocation: what the node knows of its shards.
struct Search<'s> {
    set: &'s RangeSet,
    /// Shard views read (or hinted) in this ADD, by first address, and
    /// whether they were read now (fresh) or come from the node's hint.
    views: HashMap<IpAddr, (ShardView, bool)>,
    /// Creates refused with 409.
    refused: usize,
    /// False once the store said it has no summaries.
    summaries: bool,
    /// True while the controller confirms the summaries: the wait then
    /// trusts a watch of the pool summary to learn of a new release.
    confirmed: bool,
    /// Where blind probing stopped, to go on from there.
    probed_until: Option<IpAddr>,
    /// The pool summary, once read.
    pool: Option<PoolSummaryView>,
}

impl Search<'_> {
    /// True when the pool summary counts as many leases in `shard` as it
    /// has usable addresses (and the shard was not read in this ADD).
    fn pool_shows_full(&self, shard: IpAddr) -> bool {
        let Some(pool) = &self.pool else { return false };
        let leased = pool.counts.get(&shard).map_or(0, |(l, _)| usize::from(*l));
        leased > 0 && leased >= self.set.usable_in_shard(shard)
    }

    fn leased(&self, ip: IpAddr) -> bool {
        self.views.get(&shard_first(ip)).is_some_and(|(v, _)| v.leased.get(shard_index(ip)))
    }

    fn mark(&mut self, ip: IpAddr) {
        if let Some((v, _)) = self.views.get_mut(&shard_first(ip)) {
            v.leased.set(shard_index(ip));
        }
    }

    /// Remembers a refused blind probe, so that the next round skips it.
    fn mark_probed(&mut self, ip: IpAddr) {
        let (v, _) = self.views.entry(shard_first(ip)).or_insert((ShardView::default(), false));
        v.leased.set(shard_index(ip));
    }

    fn fresh(&self, shard: IpAddr) -> bool {
        self.views.get(&shard).is_some_and(|(_, fresh)| *fresh)
    }
}

/// Claims one address of range set `index` (`set`) with `make`, for the
/// ADD `c`, waiting for a release until `wait` in a full pool.
pub async fn claim<S: Store>(
    c: &mut Claiming<'_, S>,
    local: &LocalState,
    index: usize,
    set: &RangeSet,
    make: Make<'_>,
    wait: Deadline,
) -> Result<NetworkEndpoint> {
    let start = local.reserve(index, set, set.spread_start(&c.who.node));
    let mut s = Search {
        set,
        views: HashMap::new(),
        refused: 0,
        summaries: true,
        confirmed: false,
        probed_until: None,
        pool: None,
    };
    let hint = local.shard_hint(index);
    if let Some(h) = &hint
        && let Some(leased) = Bitmap::decode(&h.leased)
    {
        s.views.insert(h.first, (ShardView { leased, ..ShardView::default() }, false));
    }
    let got = match from_hint(c, &mut s, start, hint.as_ref(), make).await? {
        Some(ep) => Some(ep),
        None => match from_summaries(c, &mut s, start, make).await? {
            Some(ep) => Some(ep),
            None if !s.summaries => by_probing(c, &mut s, start, make).await?,
            None => None,
        },
    };
    let ep = match got {
        Some(ep) => ep,
        None => {
            let waited = wait_for_release(c, &mut s, make, wait).await;
            if c.conf.cross_node == CrossNode::Controller {
                // The wait is over, served or not: withdraw the need it raised.
                c.store.drop_need(&c.conf.pool, &c.who.node).await;
            }
            waited?
        }
    };
    remember(local, index, &s, &ep, start);
    Ok(ep)
}

/// Keeps the cursor and the shard hint for the next ADD on this node.
fn remember(local: &LocalState, index: usize, s: &Search<'_>, ep: &NetworkEndpoint, start: Option<IpAddr>) {
    let Some(ip) = ep.ip() else { return };
    // The reservation already points at the first candidate; record only a different outcome.
    if Some(ip) != s.set.candidates(start).next() {
        local.store(index, ip);
    }
    let shard = shard_first(ip);
    if let Some((view, _)) = s.views.get(&shard) {
        let mut leased = view.leased;
        leased.set(shard_index(ip));
        local.save_shard_hint(index, &ShardHint { first: shard, leased: leased.encode() });
    }
}

/// Phase 1: one create at the first candidate the hint does not show
/// leased. Without a hint for that shard, the create goes ahead unless the
/// hint shows the node's pool mostly full: then the shard is read first.
async fn from_hint<S: Store>(
    c: &mut Claiming<'_, S>,
    s: &mut Search<'_>,
    start: Option<IpAddr>,
    hint: Option<&ShardHint>,
    make: Make<'_>,
) -> Result<Option<NetworkEndpoint>> {
    let set = s.set;
    let Some(ip) = set.candidates(start).take(usize::from(u16::MAX)).find(|ip| !s.leased(*ip)) else {
        return Ok(None);
    };
    let hinted = s.views.contains_key(&shard_first(ip));
    let mostly_full = hint
        .and_then(|h| Bitmap::decode(&h.leased).map(|b| (b, h.first)))
        .is_some_and(|(b, first)| b.count() as usize * 2 >= set.usable_in_shard(first).max(1));
    if !hinted && mostly_full {
        return Ok(None);
    }
    match c.create(&make(ip)).await? {
        Some(ep) => {
            info!(%ip, "claimed");
            Ok(Some(ep))
        }
        None => {
            debug!(%ip, "taken; reading its shard");
            s.refused += 1;
            s.mark(ip);
            Ok(None)
        }
    }
}

/// Reads the shard summary of `shard` into the search; false when the
/// store has none or the controller stopped confirming them.
async fn read_shard<S: Store>(c: &Claiming<'_, S>, s: &mut Search<'_>, shard: IpAddr) -> Result<bool> {
    if s.pool.is_none() {
        // A missing pool summary means no controller ever summarised this
        // pool. A stale one is still a hint (its bits cost refused creates,
        // never a second holder); only the wait stops trusting it.
        let Some(pool) = c.retrying("read the pool summary", || c.store.pool_summary(&c.conf.pool)).await? else {
            debug!(pool = %c.conf.pool, "no pool summary: probing by create");
            s.summaries = false;
            return Ok(false);
        };
        s.confirmed = summary_is_fresh(c.store, &pool);
        if !s.confirmed {
            warn!(pool = %c.conf.pool, "the pool summary is not confirmed by netendpoint-controller: a hint only");
        }
        s.pool = Some(pool);
    }
    let view = c.retrying("read a shard summary", || c.store.shard(&c.conf.pool, shard)).await?;
    match view {
        Some(v) => {
            s.views.insert(shard, (v, true));
            Ok(true)
        }
        None => {
            // A pool summary without this shard: the controller saw no lease in it.
            s.views.insert(shard, (ShardView::default(), true));
            Ok(true)
        }
    }
}

/// True while the controller confirms the summary (on the server's clock).
fn summary_is_fresh<S: Leases>(store: &S, pool: &PoolSummaryView) -> bool {
    match (pool.confirmed_at, store.server_now()) {
        (Some(at), Some(now)) => netendpoint_lease::age_at_least(now, at) < SUMMARY_STALE_AFTER,
        _ => false,
    }
}

/// Phase 2: the shard summaries, by name. Walks the candidates from the
/// cursor; in each shard it reads the summary once and creates at what the
/// summary shows free. Shards the pool summary shows full are skipped
/// without a read.
async fn from_summaries<S: Store>(
    c: &mut Claiming<'_, S>,
    s: &mut Search<'_>,
    start: Option<IpAddr>,
    make: Make<'_>,
) -> Result<Option<NetworkEndpoint>> {
    let set = s.set;
    let mut reads = 0;
    let mut full_shards: HashMap<IpAddr, bool> = HashMap::new();
    for ip in set.candidates(start).take(MAX_WALK) {
        let shard = shard_first(ip);
        // A hint (or a refused probe) is no reason to skip an address: only
        // a summary read in this ADD is.
        if !s.fresh(shard) {
            let full = *full_shards.entry(shard).or_insert_with(|| s.pool_shows_full(shard));
            if full {
                continue;
            }
            if reads == MAX_SHARD_READS {
                break;
            }
            if !read_shard(c, s, shard).await? {
                return Ok(None);
            }
            reads += 1;
        }
        // Free by a fresh summary: create; a refusal marks what it tried.
        // Once a refusal showed other ADDs racing for the same addresses,
        // each takes one of the next few free ones by a hash of its sandbox,
        // so that they spread instead of all trying the same one; `ip`
        // itself stays a candidate until it is tried or seen taken.
        while !s.leased(ip) {
            let target = if s.refused > 0 { spread_pick(c, s, ip) } else { ip };
            if let Some(ep) = c.create(&make(target)).await? {
                info!(ip = %target, refused = s.refused, "claimed from the shard summary");
                return Ok(Some(ep));
            }
            s.refused += 1;
            s.mark(target);
        }
    }
    Ok(None)
}

/// Free candidates an ADD that met contention chooses among, and how far
/// it looks for them.
const SPREAD_AMONG: usize = 32;
const SPREAD_LOOK_AHEAD: usize = 4096;

/// One of the free candidates from `ip` on (at most [`SPREAD_AMONG`], in
/// shards read in this ADD), chosen by a hash of the sandbox and the
/// refusals so far.
fn spread_pick<S>(c: &Claiming<'_, S>, s: &Search<'_>, ip: IpAddr) -> IpAddr {
    let free: Vec<IpAddr> = std::iter::once(ip)
        .chain(s.set.candidates(Some(ip)))
        .take(SPREAD_LOOK_AHEAD)
        .filter(|a| s.fresh(shard_first(*a)) && !s.leased(*a))
        .take(SPREAD_AMONG)
        .collect();
    let key = format!("{}/{}", c.who.key.container_id, s.refused);
    let n = free.len().max(1) as u64;
    free.get(usize::try_from(netendpoint_netconf::allocator::spread_hash(&key) % n).unwrap_or(0)).copied().unwrap_or(ip)
}

/// Candidates one ADD walks, at most, through the summaries it read (a
/// walk over addresses already known leased costs no request).
const MAX_WALK: usize = 1 << 20;

/// Phase 3: no summaries to go by. Creates along the candidates, at most
/// [`BLIND_PROBES`]: the first few after the cursor, the rest at points
/// spread over the set by a hash of the container and the try (a node's
/// neighbourhood is the part most likely full, and other nodes' ADDs race
/// there too). A set of at most [`SCAN_AT_MOST`] addresses is read name by
/// name instead, and what it finds free is created.
async fn by_probing<S: Store>(
    c: &mut Claiming<'_, S>,
    s: &mut Search<'_>,
    start: Option<IpAddr>,
    make: Make<'_>,
) -> Result<Option<NetworkEndpoint>> {
    let set = s.set;
    if set.capacity() <= SCAN_AT_MOST {
        return scan(c, s, start, make).await;
    }
    let from = s.probed_until.or(start);
    let mut candidates: Vec<IpAddr> = set.candidates(from).filter(|ip| !s.leased(*ip)).take(BLIND_SEQUENTIAL).collect();
    for n in 0..BLIND_PROBES * 4 {
        if candidates.len() >= BLIND_PROBES {
            break;
        }
        let key = format!("{}/{}/{n}", c.who.key.container_id, s.refused);
        let point = set.point(&key);
        if let Some(ip) = set.candidates(point).next()
            && !s.leased(ip)
            && !candidates.contains(&ip)
        {
            candidates.push(ip);
        }
    }
    for (i, ip) in candidates.into_iter().enumerate() {
        if let Some(ep) = c.create(&make(ip)).await? {
            info!(%ip, refused = s.refused, "claimed by probing (no summary)");
            return Ok(Some(ep));
        }
        s.refused += 1;
        s.mark_probed(ip);
        if i < BLIND_SEQUENTIAL {
            s.probed_until = Some(ip);
        }
    }
    warn!(pool = %c.conf.pool, probes = BLIND_PROBES, "no summary of the pool and every probe was taken");
    Ok(None)
}

/// Reads every usable address of a small set by name (GET), creates at the
/// first one that is free, and keeps what it read for the wait.
async fn scan<S: Store>(
    c: &mut Claiming<'_, S>,
    s: &mut Search<'_>,
    start: Option<IpAddr>,
    make: Make<'_>,
) -> Result<Option<NetworkEndpoint>> {
    let set = s.set;
    for ip in set.candidates(start).collect::<Vec<_>>() {
        let name = endpoint_name(&c.conf.pool, ip);
        let held = c.retrying("read a lease", || c.store.get(&name)).await?;
        let shard = shard_first(ip);
        let (v, _) = s.views.entry(shard).or_insert((ShardView::default(), true));
        v.leased.clear(shard_index(ip));
        v.releasing.clear(shard_index(ip));
        match held {
            None => {
                if let Some(ep) = c.create(&make(ip)).await? {
                    info!(%ip, "claimed after reading the set by name (no summary)");
                    return Ok(Some(ep));
                }
                s.refused += 1;
                s.mark(ip);
            }
            Some(ep) => {
                let (v, _) = s.views.entry(shard).or_insert((ShardView::default(), true));
                v.leased.set(shard_index(ip));
                if ep.is_releasing() {
                    v.releasing.set(shard_index(ip));
                }
            }
        }
        s.views.entry(shard).and_modify(|e| e.1 = true);
    }
    Ok(None)
}

/// The releases in progress this ADD knows of in its set: from the shards
/// it read, and from up to two more the pool summary shows releases in. A
/// set of at most [`SCAN_AT_MOST`] addresses gives every address instead,
/// for the wait to read by name: the summaries are written at most every
/// 250 ms, and a release that began since would wait for the next write.
async fn releases_in_progress<S: Store>(c: &Claiming<'_, S>, s: &mut Search<'_>) -> Result<Vec<IpAddr>> {
    if s.set.capacity() <= SCAN_AT_MOST {
        return Ok(s.set.candidates(None).collect());
    }
    if s.summaries
        && let Some(pool) = &s.pool
    {
        let mut with_releases: Vec<IpAddr> = pool
            .counts
            .iter()
            .filter(|(first, (_, r))| *r > 0 && s.set.touches_shard(**first) && !s.fresh(**first))
            .map(|(first, _)| *first)
            .collect();
        with_releases.truncate(2);
        for first in with_releases {
            read_shard(c, s, first).await?;
        }
    }
    let mut out = Vec::new();
    for (first, (v, fresh)) in &s.views {
        if !fresh {
            continue;
        }
        for i in 0..netendpoint_crd::SHARD_SIZE as usize {
            if v.releasing.get(i) {
                let ip = from_u128(*first, to_u128(*first) + i as u128);
                if s.set.is_usable(ip) {
                    out.push(ip);
                }
            }
        }
    }
    Ok(out)
}

/// Phase 4: the pool is full. Raises the need (with `crossNode:
/// controller`), forces a release past its bound (with `crossNode:
/// plugin`), and waits, until `wait`, for a release in progress to finish
/// (a watch of each, by name) or a new one to begin (a watch of the pool
/// summary, by name). Then claims what it freed.
async fn wait_for_release<S: Store>(
    c: &mut Claiming<'_, S>,
    s: &mut Search<'_>,
    make: Make<'_>,
    wait: Deadline,
) -> Result<NetworkEndpoint> {
    let mut logged = false;
    let mut lag_recheck = LAG_RECHECK_FIRST;
    for round in 0..MAX_ROUNDS {
        let releases = releases_in_progress(c, s).await?;
        // Read the releases: their state (stuck or not), their finalizers, a resourceVersion to watch from.
        let mut read: Vec<NetworkEndpoint> = Vec::new();
        let reads = if s.set.capacity() <= SCAN_AT_MOST { releases.len() } else { WATCHED_RELEASES * 2 };
        for ip in releases.iter().take(reads) {
            let name = endpoint_name(&c.conf.pool, *ip);
            match c.retrying("read a release", || c.store.get(&name)).await? {
                None => {
                    if let Some(ep) = c.create(&make(*ip)).await? {
                        info!(%ip, waited_ms = wait.waited().as_millis() as u64, "claimed a just-released address");
                        return Ok(ep);
                    }
                }
                Some(ep) if ep.is_releasing() && !ep.is_hold() => read.push(ep),
                Some(_) => {}
            }
        }
        if c.conf.cross_node == CrossNode::Plugin
            && let Some(ep) = force_stuck(c, &read, make, wait).await?
        {
            return Ok(ep);
        }
        if wait.passed() || round + 1 == MAX_ROUNDS {
            return Err(Error::PoolExhausted(Box::new(exhaustion(c, s, &read, wait))));
        }
        if !logged {
            logged = true;
            let ex = exhaustion(c, s, &read, wait);
            warn!(pool = %c.conf.pool, releasing = ex.releasing, waiting_on = ?ex.waiting_on,
                wait_for_release_ms = c.conf.wait_for_release.as_millis() as u64,
                "pool full: waiting for a release to begin and finish");
            if c.conf.cross_node == CrossNode::Controller {
                raise_need(c, wait).await;
            }
        }
        // Until the first young release becomes stuck, in plugin mode.
        let until_stuck = if c.conf.cross_node == CrossNode::Plugin { next_stuck_in(c, &read) } else { None };
        let mut pause = until_stuck.map_or(wait.remaining(), |d| d.min(wait.remaining()));
        // A create refused where the summary showed a free address proves
        // the summary behind: a change it has not shown yet may never show
        // (an address taken and freed again between two writes). Look again
        // soon, backing off, instead of waiting for the summary to move.
        if s.refused > 0 {
            pause = pause.min(lag_recheck);
            lag_recheck = (lag_recheck * 2).min(LAG_RECHECK_MAX);
        }
        if let Some(ip) = watch_releases(c, s, &read, pause).await?
            && let Some(ep) = c.create(&make(ip)).await?
        {
            info!(%ip, waited_ms = wait.waited().as_millis() as u64, "claimed a just-released address");
            return Ok(ep);
        }
        // Something changed, or time passed: read the summaries again.
        s.views.retain(|_, (_, fresh)| !*fresh);
        s.pool = None;
        if s.summaries
            && let Some(ep) = from_summaries(c, s, None, make).await?
        {
            return Ok(ep);
        }
        if !s.summaries
            && let Some(ep) = by_probing(c, s, None, make).await?
        {
            return Ok(ep);
        }
    }
    Err(Error::PoolExhausted(Box::new(exhaustion(c, s, &[], wait))))
}

/// Watches, for at most `pause`, the releases `read` (each by name) and
/// the pool summary (by name). The address whose release finished, if one did.
async fn watch_releases<S: Store>(
    c: &Claiming<'_, S>,
    s: &Search<'_>,
    read: &[NetworkEndpoint],
    pause: Duration,
) -> Result<Option<IpAddr>> {
    let mut watches = Vec::new();
    for ep in read.iter().take(WATCHED_RELEASES) {
        let name = ep.metadata.name.clone().unwrap_or_default();
        let rv = ep.metadata.resource_version.clone().unwrap_or_default();
        let ip = ep.ip();
        let uid = ep.metadata.uid.clone();
        watches.push(Box::pin(async move {
            let mut rv = rv;
            loop {
                match c.store.next_change(&name, &rv, pause).await? {
                    Change::Gone => return Ok::<_, Error>(ip),
                    Change::Changed(now) if now.metadata.uid != uid => return Ok(ip),
                    Change::Changed(now) => rv = now.metadata.resource_version.unwrap_or_default(),
                    Change::Quiet => return Ok(None),
                }
            }
        }));
    }
    let pool_watch = async {
        match s.pool.as_ref().filter(|_| s.summaries && s.confirmed) {
            Some(p) => {
                c.store.pool_changed(&c.conf.pool, &p.resource_version, pause).await?;
            }
            None => tokio::time::sleep(pause.min(Duration::from_secs(2))).await,
        }
        Ok::<_, Error>(None)
    };
    if watches.is_empty() {
        return pool_watch.await;
    }
    match select(Box::pin(pool_watch), select_all(watches)).await {
        Either::Left((r, _)) => r,
        Either::Right(((r, _, _), _)) => r,
    }
}

/// Forces the oldest release of `read` that outlived its own bound
/// (`crossNode: plugin`), records why, and claims its address.
async fn force_stuck<S: Store>(
    c: &mut Claiming<'_, S>,
    read: &[NetworkEndpoint],
    make: Make<'_>,
    wait: Deadline,
) -> Result<Option<NetworkEndpoint>> {
    let now = c.store.server_now();
    let stuck = read
        .iter()
        .filter_map(|ep| match state_of(c, ep, now) {
            ReleaseState::Stuck { age, bound } => Some((ep, age, bound)),
            _ => None,
        })
        .max_by_key(|(_, age, _)| *age);
    let Some((victim, age, bound)) = stuck else { return Ok(None) };
    let young_left = read.iter().any(|ep| matches!(state_of(c, ep, now), ReleaseState::Young { .. }));
    if young_left && !wait.passed() {
        // A younger release may still come in time: forcing is the last resort.
        return Ok(None);
    }
    let name = victim.metadata.name.clone().unwrap_or_default();
    let uid = victim.metadata.uid.clone().unwrap_or_default();
    let rv = victim.metadata.resource_version.clone().unwrap_or_default();
    let finalizers = victim.metadata.finalizers.clone().unwrap_or_default();
    if c.store.patch(&name, &netendpoint_lease::patch::force_release(&uid, &rv), false).await?.is_some() {
        let bound_text = netendpoint_crd::duration::format(bound);
        warn!(lease = %name, ?finalizers, releasing_for_ms = age.as_millis() as u64, bound = %bound_text,
            "forced release: finalizers did not answer within forceReleaseAfter");
        let note = format!(
            "{name} released by force after {:.1}s: finalizers {finalizers:?} did not answer within forceReleaseAfter ({bound_text})",
            age.as_secs_f64()
        );
        c.store
            .record_event(netendpoint_lease::events::lease_ref(&name, &uid), REASON_FORCED_RELEASE, note.clone(), true)
            .await;
        if let Some(pod) = &c.who.pod {
            let r = netendpoint_lease::events::pod_ref(&pod.namespace, &pod.name, &pod.uid);
            c.store.record_event(r, REASON_FORCED_RELEASE, note, true).await;
        }
    }
    let Some(ip) = victim.ip() else { return Ok(None) };
    c.create(&make(ip)).await
}

fn state_of<S: Store>(
    c: &Claiming<'_, S>,
    ep: &NetworkEndpoint,
    now: Option<k8s_openapi::jiff::Timestamp>,
) -> ReleaseState {
    let bound = ep.spec.force_release_after.as_deref().and_then(netendpoint_crd::duration::parse);
    netendpoint_lease::release_state(
        ep.metadata.deletion_timestamp.as_ref().map(|t| t.0),
        bound,
        c.conf.force_release_after,
        now,
    )
}

/// How long until the first young release of `read` becomes stuck.
fn next_stuck_in<S: Store>(c: &Claiming<'_, S>, read: &[NetworkEndpoint]) -> Option<Duration> {
    let now = c.store.server_now();
    read.iter()
        .filter_map(|ep| match state_of(c, ep, now) {
            ReleaseState::Young { left } => left,
            _ => None,
        })
        .min()
}

/// Says that this ADD waits for an address of the pool: the need the
/// controller acts on (`crossNode: controller`).
async fn raise_need<S: Store>(c: &Claiming<'_, S>, wait: Deadline) {
    let Some(pod) = c.who.pod_ref().filter(|p| !p.uid.is_empty()) else {
        debug!("no Pod UID from the runtime: no need signal (the controller checks the Pod)");
        return;
    };
    if c.conf.pool.len() + 1 + c.who.node.len() > 253 {
        warn!(pool = %c.conf.pool, node = %c.who.node, "pool and node names too long for a need signal");
        return;
    }
    let need = NetworkEndpointNeedSpec {
        pool: c.conf.pool.clone(),
        node: c.who.node.clone(),
        pod,
        wait_seconds: u32::try_from(wait.remaining().as_secs()).unwrap_or(u32::MAX).min(110),
    };
    c.store.raise_need(&need).await;
}

/// Why the set has no address to give, in figures.
fn exhaustion<S: Store>(c: &Claiming<'_, S>, s: &Search<'_>, read: &[NetworkEndpoint], wait: Deadline) -> Exhaustion {
    let mut waiting: BTreeMap<String, usize> = BTreeMap::new();
    for ep in read {
        for f in ep.metadata.finalizers.iter().flatten() {
            *waiting.entry(f.clone()).or_default() += 1;
        }
    }
    let (mut in_use, mut releasing) = (0usize, 0usize);
    let mut counted = std::collections::HashSet::new();
    for (first, (v, fresh)) in &s.views {
        if *fresh && s.set.touches_shard(*first) {
            counted.insert(*first);
            in_use += v.leased.count() as usize;
            releasing += v.releasing.count() as usize;
        }
    }
    if let Some(pool) = &s.pool {
        for (first, (l, r)) in &pool.counts {
            if !counted.contains(first) && s.set.touches_shard(*first) {
                in_use += usize::from(*l);
                releasing += usize::from(*r);
            }
        }
    }
    Exhaustion {
        pool: c.conf.pool.clone(),
        capacity: s.set.capacity(),
        in_use,
        releasing,
        waiting_on: waiting.into_iter().collect(),
        waited: wait.waited(),
        // A small set read name by name is counted in full.
        blind_probes: (!s.summaries && s.set.capacity() > SCAN_AT_MOST).then_some(s.refused),
    }
}
