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
//! 4. [`wait_for_release`]: a full pool's ADD joins the pool's queue and
//!    waits for the address promised to it (`crate::queue`), watching its
//!    entry and the promised release by name.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use netendpoint_crd::{NetworkEndpoint, Promise, REASON_FORCED_RELEASE, endpoint_name};
use netendpoint_lease::ReleaseState;
use netendpoint_lease::addr::{from_u128, to_u128};
use netendpoint_lease::summary::{Bitmap, ShardView, shard_first, shard_index};
use netendpoint_netconf::{CrossNode, RangeSet};
use tracing::{debug, info, warn};

use crate::claim::{Claiming, Deadline};
use crate::error::{Error, Exhaustion, Result};
use crate::local::{LocalState, ShardHint};
use crate::store::{Change, Clock, Leases, PoolSummaryView, Queue, Signals, Summaries};

/// Creates along the candidates before giving up, when no summary helps.
pub const BLIND_PROBES: usize = 16;
/// Of those, the ones right after the cursor; the rest are spread.
const BLIND_SEQUENTIAL: usize = 4;
/// Sets of at most this many addresses are read name by name when no
/// summary helps: cheaper than waiting blind.
pub const SCAN_AT_MOST: u128 = 64;
/// Shard summaries one ADD reads, at most, before it takes the pool as full.
pub const MAX_SHARD_READS: usize = 8;
/// A summary the controller has not confirmed for this long is stale.
pub const SUMMARY_STALE_AFTER: Duration = Duration::from_secs(90);

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
    /// The node's hint says the pool had summaries at its last ADD: a
    /// shard is read before the pool summary, which often is not needed.
    /// A node without such a hint (its first ADD, or a pool no controller
    /// summarises) reads the pool summary first, as a missing one ends the
    /// search by summaries at once.
    shard_first: bool,
    /// The node had a hint of this set at all.
    hinted: bool,
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

    /// True when the node's hint, with this ADD's refused creates marked,
    /// shows every usable address of `shard` leased.
    fn hinted_full(&self, shard: IpAddr) -> bool {
        self.views
            .get(&shard)
            .is_some_and(|(v, fresh)| !fresh && v.leased.count() as usize >= self.set.usable_in_shard(shard).max(1))
    }

    fn fresh(&self, shard: IpAddr) -> bool {
        self.views.get(&shard).is_some_and(|(_, fresh)| *fresh)
    }
}

/// Claims one address of range set `index` (`set`) with `make`, for the
/// ADD `c`, waiting for a release until `wait` in a full pool.
pub async fn claim<S: Clock + Leases + Summaries + Queue + Signals>(
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
        shard_first: false,
        hinted: false,
    };
    let hint = local.shard_hint(index);
    s.shard_first = hint.as_ref().is_some_and(|h| h.summarised);
    s.hinted = hint.is_some();
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
        None => wait_for_release(c, local, &mut s, make, wait).await?,
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
        // Summarised: this ADD read a summary, or the hint said so and this
        // ADD found nothing to the contrary.
        let summarised =
            s.summaries && (s.pool.is_some() || s.views.values().any(|(_, fresh)| *fresh) || s.shard_first);
        local.save_shard_hint(index, &ShardHint { first: shard, leased: leased.encode(), summarised });
    }
}

/// Phase 1: one create at the first candidate the hint does not show
/// leased. Without a hint for that shard, the create goes ahead unless the
/// hint shows the node's pool mostly full: then the shard is read first.
async fn from_hint<S: Leases>(
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
/// store has none or the controller stopped confirming them. With
/// `shard_first`, the shard is read first: an ADD whose first shard shows
/// room makes no other read, and only a shard without a summary needs the
/// pool summary, to tell a shard the controller saw no lease in from a pool
/// no controller summarises.
///
/// Both reads go out at once, one round trip instead of two, where the ADD
/// needs both: a node with no hint at all reads the pool summary anyway, and
/// one whose hint (with this ADD's refusals) shows the shard full is about
/// to wait. The pool summary missing (no controller) wastes the shard's
/// read, once per node: the hint it leaves says so.
async fn read_shard<S: Clock + Summaries>(c: &Claiming<'_, S>, s: &mut Search<'_>, shard: IpAddr) -> Result<bool> {
    let both = if s.shard_first { s.hinted_full(shard) } else { !s.hinted };
    if both && s.pool.is_none() {
        let (pool, view) = tokio::join!(
            c.retrying("read the pool summary", || c.store.pool_summary(&c.conf.pool)),
            c.retrying("read a shard summary", || c.store.shard(&c.conf.pool, shard)),
        );
        if !take_pool(c, s, pool?) {
            return Ok(false);
        }
        s.views.insert(shard, (view?.unwrap_or_default(), true));
        return Ok(true);
    }
    if !s.shard_first && !read_pool(c, s).await? {
        return Ok(false);
    }
    let view = c.retrying("read a shard summary", || c.store.shard(&c.conf.pool, shard)).await?;
    if let Some(v) = view {
        s.views.insert(shard, (v, true));
        return Ok(true);
    }
    if !read_pool(c, s).await? {
        return Ok(false);
    }
    // A pool summary without this shard: the controller saw no lease in it.
    s.views.insert(shard, (ShardView::default(), true));
    Ok(true)
}

/// Reads the pool summary into the search, once; false when the store has
/// none (no controller ever summarised this pool: probing by create).
async fn read_pool<S: Clock + Summaries>(c: &Claiming<'_, S>, s: &mut Search<'_>) -> Result<bool> {
    if s.pool.is_some() {
        return Ok(true);
    }
    // A stale summary is still a hint (its bits cost refused creates, never
    // a second holder); only the wait stops trusting it.
    let pool = c.retrying("read the pool summary", || c.store.pool_summary(&c.conf.pool)).await?;
    Ok(take_pool(c, s, pool))
}

/// Keeps the pool summary read; false when there is none.
fn take_pool<S: Clock>(c: &Claiming<'_, S>, s: &mut Search<'_>, pool: Option<PoolSummaryView>) -> bool {
    let Some(pool) = pool else {
        debug!(pool = %c.conf.pool, "no pool summary: probing by create");
        s.summaries = false;
        return false;
    };
    s.confirmed = summary_is_fresh(c.store, &pool);
    if !s.confirmed {
        warn!(pool = %c.conf.pool, "the pool summary is not confirmed by netendpoint-controller: a hint only");
    }
    s.pool = Some(pool);
    true
}

/// True while the controller confirms the summary (on the server's clock).
fn summary_is_fresh<S: Clock>(store: &S, pool: &PoolSummaryView) -> bool {
    match (pool.confirmed_at, store.server_now()) {
        (Some(at), Some(now)) => netendpoint_lease::age_at_least(now, at) < SUMMARY_STALE_AFTER,
        _ => false,
    }
}

/// Phase 2: the shard summaries, by name. Walks the candidates from the
/// cursor; in each shard it reads the summary once and creates at what the
/// summary shows free. Shards the pool summary shows full are skipped
/// without a read.
async fn from_summaries<S: Clock + Leases + Summaries>(
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
            // Past the first shard read, the pool summary says which shards
            // are full, so that they cost no read.
            if reads > 0 && !read_pool(c, s).await? {
                return Ok(None);
            }
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
async fn by_probing<S: Leases>(
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
async fn scan<S: Leases>(
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

/// Releases in progress the wait reads by name, at most, when it forces one
/// itself (`crossNode: plugin`, with no controller ordering the queue).
const READ_RELEASES: usize = 8;
/// How long a queued ADD waits for the controller to order its entry
/// before it also looks for addresses on its own.
pub const ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// How often a queued ADD checks that the controller still keeps the pool
/// summary, and that it shows no free address nobody was promised.
const QUEUED_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);
/// How soon an ADD outside the queue looks again, at first and at most
/// (doubling in between).
const UNORDERED_FIRST: std::time::Duration = std::time::Duration::from_millis(250);
const UNORDERED_MAX: std::time::Duration = std::time::Duration::from_secs(4);

/// The releases in progress this ADD knows of in its set, from the shards
/// it read (and, with summaries, from up to two more the pool summary shows
/// releases in).
async fn releases_in_progress<S: Clock + Summaries>(c: &Claiming<'_, S>, s: &mut Search<'_>) -> Result<Vec<IpAddr>> {
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

/// The releases in progress this ADD knows of, read by name (at most
/// [`READ_RELEASES`]): what it forces with `crossNode: plugin`, and what its
/// exhaustion error names (the finalizers they wait on). A failed read
/// leaves a release out.
async fn read_releases<S: Clock + Leases + Summaries>(c: &Claiming<'_, S>, s: &mut Search<'_>) -> Vec<NetworkEndpoint> {
    let Ok(ips) = releases_in_progress(c, s).await else { return Vec::new() };
    let mut read = Vec::new();
    for ip in ips.into_iter().take(READ_RELEASES) {
        if let Ok(Some(ep)) = c.store.get(&endpoint_name(&c.conf.pool, ip)).await
            && ep.is_releasing()
            && !ep.is_hold()
        {
            read.push(ep);
        }
    }
    read
}

/// What a promise gave.
enum Taken {
    /// The address is this ADD's.
    Ours(NetworkEndpoint),
    /// Its release is still in progress: wait until this lease is gone.
    Releasing(NetworkEndpoint),
    /// Someone else holds it (or it is no address of this set): the
    /// controller promises this ADD the next one.
    Lost,
}

/// Acts on `promise`: creates a free address at once; reads a release to
/// wait for it, or creates it if it is gone already.
async fn take_promise<S: Leases>(
    c: &mut Claiming<'_, S>,
    set: &RangeSet,
    make: Make<'_>,
    promise: &Promise,
) -> Result<Taken> {
    let Some(ip) = crate::queue::promised_address(&c.conf.pool, set, promise) else {
        warn!(ip = %promise.ip, lease = %promise.lease, "promised an address outside this network's ranges: ignoring it");
        return Ok(Taken::Lost);
    };
    if !promise.releasing
        && let Some(ep) = c.create(&make(ip)).await?
    {
        return Ok(Taken::Ours(ep));
    }
    match c.retrying("read the promised address", || c.store.get(&promise.lease)).await? {
        None => Ok(c.create(&make(ip)).await?.map_or(Taken::Lost, Taken::Ours)),
        Some(ep) if ep.is_releasing() && !ep.is_hold() => {
            debug!(%ip, "promised a release in progress: waiting for its end");
            Ok(Taken::Releasing(ep))
        }
        Some(_) => {
            info!(%ip, "the promised address is held by someone else now: waiting for the next promise");
            Ok(Taken::Lost)
        }
    }
}

/// What woke the wait.
enum Woke {
    /// The entry changed (or is gone: `None`).
    Entry(Option<Box<netendpoint_crd::NetworkEndpointNeed>>),
    /// The promised release ended.
    Released,
    /// Time to look again.
    Timer,
}

/// Waits, at most `pause`, for the entry to change or the promised release to end.
async fn next_wake<S: Leases + Queue>(
    store: &S,
    entry: Option<&crate::queue::Entry>,
    releasing: Option<&NetworkEndpoint>,
    pause: std::time::Duration,
) -> Result<Woke> {
    use crate::wait::{LeasesOf, Waited, await_condition, gone_or_replaced};
    let until = Deadline::after(pause);
    let entry_change = async {
        let Some(e) = entry else { return std::future::pending::<Result<Woke>>().await };
        let rv = e.seen.metadata.resource_version.clone().unwrap_or_default();
        match store.next_entry_change(&e.name, &rv, pause).await {
            Ok(Change::Changed(now)) => Ok(Woke::Entry(Some(now))),
            Ok(Change::Gone) => Ok(Woke::Entry(None)),
            Ok(Change::Quiet) => Ok(Woke::Timer),
            // Retried by the next round of the wait, within its deadline.
            Err(err) if err.is_transient() => {
                warn!(entry = %e.name, error = %err, "watch of the queue entry failed; retrying");
                tokio::time::sleep(pause.min(std::time::Duration::from_millis(500))).await;
                Ok(Woke::Timer)
            }
            Err(err) => Err(err),
        }
    };
    let release_end = async {
        let Some(ep) = releasing else { return std::future::pending::<Result<Woke>>().await };
        let name = ep.metadata.name.clone().unwrap_or_default();
        let done = gone_or_replaced(ep.metadata.uid.clone());
        match await_condition(&LeasesOf(store), &name, Some(ep.clone()), until, done).await? {
            Waited::Met(_) => Ok(Woke::Released),
            Waited::TimedOut(_) => Ok(Woke::Timer),
        }
    };
    tokio::select! {
        w = entry_change => w,
        w = release_end => w,
        () = tokio::time::sleep(pause) => Ok(Woke::Timer),
    }
}

/// Phase 4: the pool is full. Joins the pool's queue and waits, until
/// `wait`, for the address the controller promises this ADD (a release in
/// progress, watched by name until it is gone, or a free address); then
/// claims it. Without an ordered queue (no entry, or no controller
/// answering) it looks again on its own, backing off, and with `crossNode:
/// plugin` forces a release past its bound itself.
async fn wait_for_release<S: Clock + Leases + Summaries + Queue + Signals>(
    c: &mut Claiming<'_, S>,
    local: &LocalState,
    s: &mut Search<'_>,
    make: Make<'_>,
    wait: Deadline,
) -> Result<NetworkEndpoint> {
    // The pool summary, if the search did not need it: whether the
    // controller confirms it (so orders the queue), and the pool's counts.
    if s.summaries {
        read_pool(c, s).await?;
    }
    let ex = exhaustion(c, s, &[], wait);
    warn!(pool = %c.conf.pool, in_use = ex.in_use, releasing = ex.releasing,
        wait_for_release_ms = c.conf.wait_for_release.as_millis() as u64, "pool full: waiting for a release");
    // With `crossNode: plugin`, a release past its bound is forced at once
    // (the last resort while younger ones may still come in time).
    if c.conf.cross_node == CrossNode::Plugin {
        let read = read_releases(c, s).await;
        if let Some(ep) = force_stuck(c, &read, make, wait).await? {
            return Ok(ep);
        }
    }
    // A queue only a controller serves: one that summarises this pool.
    // Without one yet (no controller, or one older than the queue during an
    // upgrade), the ADD joins later, at the first look that finds a summary.
    let mut place = Place { entry: None, rejoin: None, join_later: !s.summaries };
    if s.summaries && join_queue(c, local, s, wait, &mut place.entry, 0).await {
        place.rejoin = Some(1);
    }
    let got = wait_in_queue(c, local, s, make, wait, &mut place).await;
    if let Some(e) = &place.entry {
        crate::queue::leave(c, &e.name).await;
    }
    local.note_entries(&c.who.key.container_id, &c.who.key.if_name, &c.entries);
    got
}

/// A waiting ADD's place in its pool's queue.
struct Place {
    /// Its entry, once it has one.
    entry: Option<crate::queue::Entry>,
    /// No entry for want of a free slot: the next round of slots to try.
    /// This node's other waiting ADDs are served one by one, so each look
    /// tries the next slots until it joins; outside the queue every address
    /// would go to those in it first.
    rejoin: Option<u8>,
    /// No entry for want of a summary: joined at the first look that finds one.
    join_later: bool,
}

impl Place {
    /// At a look: joins the queue if this ADD waits outside it for want of
    /// a summary that a confirmed one now gives (the new controller, during
    /// an upgrade from a version without the queue: the ADD takes its place
    /// behind those who joined before), or for want of a free slot. True
    /// when it joined.
    async fn join_at_look<S: Clock + Queue>(
        &mut self,
        c: &mut Claiming<'_, S>,
        local: &LocalState,
        s: &Search<'_>,
        wait: Deadline,
    ) -> bool {
        let summarised_now = self.join_later && s.summaries;
        self.join_later &= !s.summaries;
        if self.entry.is_some() || !s.confirmed {
            return false;
        }
        if summarised_now {
            join_queue(c, local, s, wait, &mut self.entry, 0).await;
        } else if let Some(round) = self.rejoin {
            let taken = join_queue(c, local, s, wait, &mut self.entry, round).await;
            self.rejoin = taken.then(|| round.wrapping_add(1));
        }
        self.entry.is_some()
    }
}

/// Joins the pool's queue in `round` (see [`crate::queue::join`]) and notes
/// the entry under `dataDir`, so that a DEL after this ADD was killed finds
/// it. True when every slot tried was taken (worth another round later).
async fn join_queue<S: Clock + Queue>(
    c: &mut Claiming<'_, S>,
    local: &LocalState,
    s: &Search<'_>,
    wait: Deadline,
    entry: &mut Option<crate::queue::Entry>,
    round: u8,
) -> bool {
    match crate::queue::join(c, s.set, wait, round).await {
        Ok(e) => {
            *entry = Some(e);
            local.note_entries(&c.who.key.container_id, &c.who.key.if_name, &c.entries);
            false
        }
        Err(why) => why == crate::queue::NoEntry::SlotsTaken,
    }
}

/// The wait of [`wait_for_release`], with the entry (if any) joined.
async fn wait_in_queue<S: Clock + Leases + Summaries + Queue + Signals>(
    c: &mut Claiming<'_, S>,
    local: &LocalState,
    s: &mut Search<'_>,
    make: Make<'_>,
    wait: Deadline,
    place: &mut Place,
) -> Result<NetworkEndpoint> {
    let mut acked_by = Deadline::after(ACK_WAIT.min(wait.remaining()));
    let mut unordered = place.entry.is_none() || !s.confirmed;
    let mut pause = if unordered { UNORDERED_FIRST } else { QUEUED_RECHECK };
    let mut next_look = Deadline::after(pause.min(wait.remaining()));
    let mut handled: Option<Promise> = None;
    let mut releasing: Option<NetworkEndpoint> = None;
    loop {
        // A promise not acted on yet.
        if let Some(p) =
            place.entry.as_ref().and_then(|e| e.promise()).filter(|p| handled.as_ref() != Some(*p)).cloned()
        {
            releasing = None;
            match take_promise(c, s.set, make, &p).await? {
                Taken::Ours(ep) => {
                    info!(ip = %ep.spec.ip, waited_ms = wait.waited().as_millis() as u64, "claimed the address promised to this ADD");
                    return Ok(ep);
                }
                Taken::Releasing(ep) => releasing = Some(ep),
                Taken::Lost => {}
            }
            handled = Some(p);
        }
        if wait.passed() {
            let read = match releasing.take() {
                Some(ep) => vec![ep],
                None => read_releases(c, s).await,
            };
            return Err(Error::PoolExhausted(Box::new(exhaustion_queued(c, s, &read, wait, &place.entry))));
        }
        if !unordered && place.entry.as_ref().is_some_and(|e| !e.acknowledged()) && acked_by.passed() {
            warn!(pool = %c.conf.pool, "netendpoint-controller has not ordered this ADD's queue entry: also looking on its own");
            unordered = true;
            pause = UNORDERED_FIRST;
            next_look = Deadline::after(pause.min(wait.remaining()));
        }
        let mut until_look = next_look.remaining().min(wait.remaining());
        if !unordered && place.entry.as_ref().is_some_and(|e| !e.acknowledged()) {
            until_look = until_look.min(acked_by.remaining());
        }
        match next_wake(c.store, place.entry.as_ref(), releasing.as_ref(), until_look).await? {
            Woke::Entry(Some(now)) => {
                if let Some(e) = place.entry.as_mut() {
                    e.seen = *now;
                    if let Some(why) = e.message() {
                        debug!(entry = %e.name, why, "the controller does not serve this entry");
                    }
                }
            }
            Woke::Entry(None) => {
                // Deleted by the controller: it does not believe the entry
                // (its Pod is gone, or not waiting for its sandbox here).
                warn!(pool = %c.conf.pool, "the queue entry was withdrawn by netendpoint-controller: waiting outside the queue");
                if let Some(e) = place.entry.take() {
                    c.entries.retain(|(n, _)| *n != e.name);
                }
                unordered = true;
                place.rejoin = None;
            }
            Woke::Released => {
                let Some(ep) = releasing.take() else { continue };
                let Some(ip) = ep.ip() else { continue };
                if let Some(mine) = c.create(&make(ip)).await? {
                    info!(%ip, waited_ms = wait.waited().as_millis() as u64, "claimed the promised address as its release ended");
                    return Ok(mine);
                }
                info!(%ip, "the promised address was taken as its release ended: waiting for the next promise");
            }
            Woke::Timer if next_look.passed() => {
                if let Some(ep) = look_again(c, s, make, wait, &mut unordered).await? {
                    return Ok(ep);
                }
                if place.join_at_look(c, local, s, wait).await {
                    unordered = false;
                    acked_by = Deadline::after(ACK_WAIT.min(wait.remaining()));
                }
                pause = if unordered { (pause * 2).clamp(UNORDERED_FIRST, UNORDERED_MAX) } else { QUEUED_RECHECK };
                next_look = Deadline::after(pause.min(wait.remaining()));
            }
            Woke::Timer => {}
        }
    }
}

/// A look of the wait's own, between promises. Queued, it reads the pool
/// summary (one GET): one that is no longer confirmed means no controller
/// orders the queue; one that shows room nobody was promised is searched.
/// Outside the queue it searches again (the summaries, or the probes), and
/// with `crossNode: plugin` forces a release past its bound.
async fn look_again<S: Clock + Leases + Summaries + Signals>(
    c: &mut Claiming<'_, S>,
    s: &mut Search<'_>,
    make: Make<'_>,
    wait: Deadline,
    unordered: &mut bool,
) -> Result<Option<NetworkEndpoint>> {
    s.views.retain(|_, (_, fresh)| !*fresh);
    s.pool = None;
    if !*unordered {
        let Some(pool) = c.retrying("read the pool summary", || c.store.pool_summary(&c.conf.pool)).await? else {
            *unordered = true;
            return Ok(None);
        };
        if !summary_is_fresh(c.store, &pool) {
            warn!(pool = %c.conf.pool, "the pool summary is no longer confirmed: netendpoint-controller is not ordering the queue");
            *unordered = true;
        }
        let in_use: u128 = pool
            .counts
            .iter()
            .filter(|(first, _)| s.set.touches_shard(**first))
            .map(|(_, (l, _))| u128::from(*l))
            .sum();
        let room = s.set.capacity() > in_use;
        s.pool = Some(pool);
        if !room {
            return Ok(None);
        }
    }
    if !s.summaries {
        summaries_appeared(c, s).await?;
    }
    let found =
        if s.summaries { from_summaries(c, s, None, make).await? } else { by_probing(c, s, None, make).await? };
    if found.is_some() || !*unordered || c.conf.cross_node != CrossNode::Plugin {
        return Ok(found);
    }
    let read = read_releases(c, s).await;
    force_stuck(c, &read, make, wait).await
}

/// An ADD that found no summary of its pool reads the pool summary again
/// (one GET): once a controller summarises the pool (a controller that
/// started, or that was upgraded from a version without summaries), the
/// ADD searches by the summaries, which count promised addresses as leased,
/// instead of probing blind.
async fn summaries_appeared<S: Clock + Summaries>(c: &Claiming<'_, S>, s: &mut Search<'_>) -> Result<()> {
    let Some(pool) = c.retrying("read the pool summary", || c.store.pool_summary(&c.conf.pool)).await? else {
        return Ok(());
    };
    s.confirmed = summary_is_fresh(c.store, &pool);
    info!(pool = %c.conf.pool, confirmed = s.confirmed, "the pool is summarised now: searching by its summaries");
    s.summaries = true;
    s.pool = Some(pool);
    Ok(())
}

/// Forces the oldest release of `read` that outlived its own bound
/// (`crossNode: plugin`), records why, and claims its address.
async fn force_stuck<S: Clock + Leases + Signals>(
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

fn state_of<S>(c: &Claiming<'_, S>, ep: &NetworkEndpoint, now: Option<k8s_openapi::jiff::Timestamp>) -> ReleaseState {
    let bound = ep.spec.force_release_after.as_deref().and_then(netendpoint_crd::duration::parse);
    netendpoint_lease::release_state(
        ep.metadata.deletion_timestamp.as_ref().map(|t| t.0),
        bound,
        c.conf.force_release_after,
        now,
    )
}

/// Why the set has no address to give, in figures.
fn exhaustion<S>(c: &Claiming<'_, S>, s: &Search<'_>, read: &[NetworkEndpoint], wait: Deadline) -> Exhaustion {
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
        queued: None,
    }
}

/// [`exhaustion`], with what the queue said.
fn exhaustion_queued<S>(
    c: &Claiming<'_, S>,
    s: &Search<'_>,
    read: &[NetworkEndpoint],
    wait: Deadline,
    entry: &Option<crate::queue::Entry>,
) -> Exhaustion {
    let mut ex = exhaustion(c, s, read, wait);
    ex.queued = entry.as_ref().map(|e| match e.message() {
        Some(why) => format!("{} ({why})", e.name),
        None => e.name.clone(),
    });
    ex
}
