//! ADD, DEL and CHECK over any [`Store`].
//!
//! The common ADD path costs one API call: the create at the next round-robin
//! candidate. A repeated ADD is recognised from the node's record of the
//! attachment ([`LocalState`]) and confirmed with a GET by name. Only when
//! several candidates in a row are taken does ADD list the pool (metadata
//! only) to pick from what is free, and only when nothing is free does it
//! watch for a release.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;
use netendpoint_crd::{
    ANNOTATION_FORCE_RELEASE_AFTER, GROUP, LABEL_BLOCK, LABEL_IP_FAMILY, LABEL_NETWORK, LABEL_NODE, LABEL_POD_NAME,
    LABEL_POD_NAMESPACE, LABEL_POD_UID, LABEL_POOL, NetworkEndpoint, NetworkEndpointSpec, PodRef,
    REASON_FORCED_RELEASE, REASON_POOL_EXHAUSTED, block_label_value, endpoint_name, label_value,
};
use tracing::{debug, info, warn};

use crate::allocator::{BLOCK_SIZE, RangeSet, block_of};
use crate::config::{CrossNode, IpamConfig};
use crate::error::{Error, Exhaustion, Result};
use crate::local::{LocalState, Record};
use crate::protocol::{AttachmentKey, IpConfig, IpamResult, PodIdentity};
use crate::static_ip;
use crate::store::{Claim, PoolEntry, PoolView, Release, Store};

/// Candidates tried by create alone before ADD lists, in a range set of at
/// most [`LARGE_SET`] addresses.
pub const PROBES_BEFORE_LIST: usize = 6;
/// Candidates tried by create alone before ADD lists, in a larger set.
pub const PROBES_BEFORE_LIST_LARGE: usize = 16;
/// Above this many addresses a range set probes more before it lists: the
/// API server answers any label-selected list by scanning every
/// NetworkEndpoint in its cache, and a cluster with pools this large holds
/// so many that one list costs the server as much CPU as dozens of
/// refused creates (see docs/design.md).
pub const LARGE_SET: u128 = 4096;

/// How many candidates ADD tries by create alone in `set` before it lists.
pub fn probes_before_list(set: &RangeSet) -> usize {
    if set.capacity() > LARGE_SET { PROBES_BEFORE_LIST_LARGE } else { PROBES_BEFORE_LIST }
}

/// Who is asking: the attachment, its node and its Pod.
#[derive(Debug, Clone)]
pub struct Attachment {
    /// CNI_CONTAINERID and CNI_IFNAME.
    pub key: AttachmentKey,
    /// Node the plugin runs on.
    pub node: String,
    /// The Pod, when the runtime passed K8S_POD_*.
    pub pod: Option<PodIdentity>,
    /// The Pod's sticky identity, which ADD sets when `ipam.sticky` applies
    /// to the Pod (see [`crate::sticky`]); its leases are then held.
    pub sticky: Option<crate::sticky::Identity>,
}

/// CNI ADD: one lease per range set for the attachment, all or nothing.
///
/// Before its first lease, ADD checks once per node that the node name is a
/// registered Node, so that no lease is ever written under a name that
/// vanished-node reclaim would take for a dead node. Whatever fails after a
/// claim, every lease this ADD created is released before the error returns;
/// a create whose outcome is unknown (timeout, connection lost) is found by
/// listing the container's leases.
pub async fn add<S: Store>(store: &S, conf: &IpamConfig, who: &Attachment, local: &LocalState) -> Result<IpamResult> {
    add_requesting(store, conf, who, local, &static_ip::Request::default()).await
}

/// [`add`], asked by the runtime for the static IPs of `asked` (see
/// [`static_ip`]). A request that cannot be served as asked fails before
/// any API call; the Pod is read (one GET) only for its annotation, when
/// `ipam.staticIPs.podAnnotation` is on and the runtime asked for nothing.
pub async fn add_requesting<S: Store>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    local: &LocalState,
    asked: &static_ip::Request,
) -> Result<IpamResult> {
    let mut plan = static_ip::plan(conf, asked)?;
    // A repeated ADD is recognised from this node's record and checked with a
    // GET by name; a first ADD makes no query at all before its create.
    let mut existing: Vec<NetworkEndpoint> = Vec::new();
    for (name, uid) in local.recorded(&who.key.container_id, &who.key.if_name) {
        if let Some(ep) = store.get(&name).await?
            && ep.metadata.uid.as_deref() == Some(uid.as_str())
            && ep.spec.container_id == who.key.container_id
            && ep.spec.if_name == who.key.if_name
            && !ep.is_releasing()
        {
            existing.push(ep);
        }
    }
    let missing =
        conf.range_sets.iter().any(|set| !existing.iter().any(|ep| ep.ip().is_some_and(|ip| set.is_usable(ip))));
    let mut pod_facts = None;
    if missing {
        // The ADD's one Pod GET, made only when a configured feature needs
        // it; every feature reads the same answer.
        let wants_annotation = static_ip::needs_pod(conf, asked, who);
        pod_facts = match &who.pod {
            Some(pod) if wants_annotation || conf.sticky.is_some() => {
                store.pod_facts(&pod.namespace, &pod.name).await?
            }
            _ => None,
        };
        if wants_annotation {
            plan = static_ip::plan(conf, &static_ip::from_pod(pod_facts.as_ref(), who)?)?;
        }
        verify_node(store, who, local).await?;
        local.mark_pending(&who.key.container_id, &who.key.if_name);
    }
    let (who_sticky, old) = sticky_identity(store, conf, who, pod_facts.as_ref()).await?;
    let who = who_sticky.as_ref().unwrap_or(who);

    let mut claimed = Claimed::default();
    let wanted = Wanted { plan: &plan, sticky_old: &old };
    match claim_all(store, conf, who, local, &existing, wanted, &mut claimed).await {
        Ok(result) => {
            if !claimed.leases.is_empty() || !claimed.adopted.is_empty() {
                existing.extend(claimed.leases);
                existing.extend(claimed.adopted);
                local.record(&who.key.container_id, &who.key.if_name, &existing);
            }
            Ok(result)
        }
        Err(e) => {
            if let (Error::PoolExhausted(_), Some(pod)) = (&e, &who.pod) {
                store.record_event(pod_ref(pod), REASON_POOL_EXHAUSTED, e.to_string(), true).await;
            }
            let mut cleanup = rollback(store, &claimed.leases).await;
            if claimed.ambiguous && cleanup.is_ok() {
                cleanup = sweep_unrecorded(store, conf, who, local).await;
            }
            Err(match cleanup {
                Ok(()) => e,
                Err(r) => Error::Many(vec![e, r]),
            })
        }
    }
}

/// The attachment with its sticky identity, and the identity's leases in
/// this pool (one label-selected list), when `ipam.sticky` applies to the Pod.
async fn sticky_identity<S: Store>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    facts: Option<&crate::store::PodFacts>,
) -> Result<(Option<Attachment>, Vec<NetworkEndpoint>)> {
    let (Some(sc), Some(pod)) = (&conf.sticky, &who.pod) else { return Ok((None, Vec::new())) };
    let Some(id) = crate::sticky::identity(sc, pod, facts) else { return Ok((None, Vec::new())) };
    let old: Vec<NetworkEndpoint> = store
        .find_by_identity(&conf.pool, &id.label)
        .await?
        .into_iter()
        .filter(|ep| crate::sticky::belongs_to(ep, &id))
        .collect();
    debug!(identity = %id.label, leases = old.len(), "sticky Pod");
    Ok((Some(Attachment { sticky: Some(id), ..who.clone() }), old))
}

/// What an ADD has claimed so far, for rollback.
#[derive(Default)]
pub(crate) struct Claimed {
    /// Leases created by this ADD.
    leases: Vec<NetworkEndpoint>,
    /// Leases of this attachment that this ADD found already made (kept on rollback).
    adopted: Vec<NetworkEndpoint>,
    /// A create failed in a way that leaves its outcome unknown.
    ambiguous: bool,
}

/// The addresses an ADD asks for before the allocator is asked: the static
/// request per range set, and the leases a sticky Pod's identity held.
#[derive(Clone, Copy)]
struct Wanted<'a> {
    /// Per range set, the static address asked for (see [`static_ip::plan`]).
    plan: &'a [Option<IpAddr>],
    /// The sticky identity's leases in this pool (empty when not sticky).
    sticky_old: &'a [NetworkEndpoint],
}

/// Claims one lease per range set not already served by `existing` and
/// builds the result. Every lease created is pushed to `claimed` as soon as
/// it exists, so that the caller can roll back whatever fails after it.
async fn claim_all<S: Store>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    local: &LocalState,
    existing: &[NetworkEndpoint],
    wanted: Wanted<'_>,
    claimed: &mut Claimed,
) -> Result<IpamResult> {
    let mut result = IpamResult { ips: Vec::new(), routes: conf.routes.clone() };
    let deadline = Deadline::after(conf.wait_for_release);
    for (i, set) in conf.range_sets.iter().enumerate() {
        if let Some(ep) = existing.iter().find(|ep| ep.ip().is_some_and(|ip| set.is_usable(ip))) {
            info!(ip = %ep.spec.ip, "ADD repeated: returning the existing lease");
            result.ips.push(ip_config(set, ep)?);
            continue;
        }
        if let Some(ip) = wanted.plan.get(i).copied().flatten() {
            // A static request names its address and takes precedence; its
            // lease holds no sticky claim.
            let plain = Attachment { sticky: None, ..who.clone() };
            let ep = match static_ip::claim(store, conf, &plain, set, ip, deadline, claimed).await? {
                static_ip::Got::Created(ep) => ep,
                static_ip::Got::Adopted(ep) => {
                    claimed.adopted.push(ep.clone());
                    ep
                }
            };
            result.ips.push(ip_config(set, &ep)?);
            continue;
        }
        if let Some(ep) = take_back_sticky(store, conf, who, set, wanted.sticky_old, claimed).await? {
            result.ips.push(ip_config(set, &ep)?);
            continue;
        }
        let start = local.reserve(i, set, set.spread_start(&who.node));
        let ep = claim_one(store, conf, who, local, set, start, deadline, claimed).await?;
        // The reservation already points at the first candidate; record only a different outcome.
        if let Some(ip) = ep.ip().filter(|ip| Some(*ip) != set.candidates(start).next()) {
            local.store(i, ip);
        }
        result.ips.push(ip_config(set, &ep)?);
    }
    Ok(result)
}

/// A sticky Pod's address in `set`, taken back from its identity's old
/// lease: `None` when it has none there, or when the address was taken in
/// the gap after the hold ended (then recorded as `StickyIPLost`, and the
/// Pod gets another address).
async fn take_back_sticky<S: Store>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    set: &RangeSet,
    old: &[NetworkEndpoint],
    claimed: &mut Claimed,
) -> Result<Option<NetworkEndpoint>> {
    let (Some(id), Some(sc)) = (&who.sticky, &conf.sticky) else { return Ok(None) };
    let Some(prev) = crate::sticky::old_lease_in(old, set) else { return Ok(None) };
    let outcome = crate::sticky::take_back(store, conf, id, who, prev, sc.wait_for_old).await?;
    let ip = match outcome {
        crate::sticky::Outcome::Own(ep) => {
            info!(ip = %ep.spec.ip, "ADD repeated: returning the existing sticky lease");
            return Ok(Some(*ep));
        }
        crate::sticky::Outcome::Free(ip) => ip,
    };
    let name = endpoint_name(&conf.pool, ip);
    for _ in 0..MAX_ROUNDS {
        if let Some(ep) = try_claim(store, conf, who, set, ip, claimed).await? {
            info!(%ip, identity = %id.label, "sticky IP taken back");
            return Ok(Some(ep));
        }
        // Taken: the old object on its way out, or another holder.
        match store.get(&name).await? {
            None => continue,
            Some(ep) if ep.metadata.uid == prev.metadata.uid => {
                let rv = ep.metadata.resource_version.clone().unwrap_or_default();
                store.wait_for_change(&name, &rv, sc.wait_for_old).await?;
            }
            Some(_) => break,
        }
    }
    let note = format!("sticky IP {ip} of pool {} was taken by another Pod after its hold ended", conf.pool);
    warn!(%ip, identity = %id.label, "sticky IP lost: taken in the gap after the hold ended");
    if let Some(pod) = &who.pod {
        store.record_event(pod_ref(pod), netendpoint_crd::REASON_STICKY_IP_LOST, note, true).await;
    }
    Ok(None)
}

/// Refuses to lease under a node name that is not a registered Node. The
/// answer is cached on the node, so this costs one GET per node, ever.
async fn verify_node<S: Store>(store: &S, who: &Attachment, local: &LocalState) -> Result<()> {
    if local.node_verified(&who.node) {
        return Ok(());
    }
    if store.node_exists(&who.node).await? {
        local.mark_node_verified(&who.node);
        info!(node = %who.node, "node name verified against the registered Nodes");
        Ok(())
    } else {
        Err(Error::NodeNotRegistered { node: who.node.clone() })
    }
}

/// Deletes what this ADD created. A rollback failure is reported with the original error's context.
async fn rollback<S: Store>(store: &S, created: &[NetworkEndpoint]) -> Result<()> {
    let mut errors = Vec::new();
    for ep in created {
        warn!(ip = %ep.spec.ip, "ADD failed after claiming: releasing the claim");
        if let Err(e) = store.delete(ep).await {
            errors.push(e);
        }
    }
    Error::collect(errors)
}

/// Releases the attachment's leases in this pool that no successful ADD
/// recorded: the leftovers of an ADD that failed or ran out of time, whose
/// creates may have reached the server even though no answer came back.
pub async fn sweep_unrecorded<S: Store>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    local: &LocalState,
) -> Result<()> {
    let recorded = local.recorded(&who.key.container_id, &who.key.if_name);
    let mut errors = Vec::new();
    for ep in store.find_by_container(&who.key.container_id).await? {
        let ours = ep.spec.container_id == who.key.container_id
            && ep.spec.if_name == who.key.if_name
            && ep.spec.pool == conf.pool;
        let kept = recorded.iter().any(|(_, uid)| ep.metadata.uid.as_deref() == Some(uid.as_str()));
        if !ours || kept || ep.is_releasing() {
            continue;
        }
        warn!(ip = %ep.spec.ip, "releasing a lease left by an unfinished ADD");
        if let Err(e) = store.delete(&ep).await {
            errors.push(e);
        }
    }
    Error::collect(errors)
}

/// The address and gateway a stored lease gives. A lease whose IP or prefix
/// length does not make an address is [`Error::InvalidLease`] (code 105), for
/// ADD and CHECK alike: the lease is unreadable, not different.
fn ip_config(set: &RangeSet, ep: &NetworkEndpoint) -> Result<IpConfig> {
    let invalid = |reason: String| Error::InvalidLease { name: ep.metadata.name.clone().unwrap_or_default(), reason };
    let ip = ep.ip().ok_or_else(|| invalid(format!("spec.ip {:?} is not an IP address", ep.spec.ip)))?;
    let range = set.range_of(ip);
    let prefix = range.map_or(ep.spec.prefix_length, |r| r.subnet.prefix_len());
    let address = IpNet::new(ip, prefix).map_err(|_| invalid(format!("prefix length {prefix} does not fit {ip}")))?;
    Ok(IpConfig { address, gateway: range.and_then(|r| r.gateway) })
}

/// The object that leases `ip` to the attachment.
pub fn lease_object(conf: &IpamConfig, who: &Attachment, set: &RangeSet, ip: IpAddr) -> NetworkEndpoint {
    let range = set.range_of(ip);
    let mut labels = BTreeMap::from([
        (LABEL_POOL.to_string(), label_value(&conf.pool)),
        (LABEL_NODE.to_string(), label_value(&who.node)),
        (LABEL_IP_FAMILY.to_string(), if ip.is_ipv4() { "4" } else { "6" }.to_string()),
        (LABEL_NETWORK.to_string(), label_value(&conf.network)),
        (LABEL_BLOCK.to_string(), block_label_value(ip)),
    ]);
    let force_release_after = netendpoint_crd::duration::format(conf.force_release_after);
    if let Some(pod) = &who.pod {
        labels.insert(LABEL_POD_NAMESPACE.to_string(), label_value(&pod.namespace));
        labels.insert(LABEL_POD_NAME.to_string(), label_value(&pod.name));
        if !pod.uid.is_empty() {
            labels.insert(LABEL_POD_UID.to_string(), label_value(&pod.uid));
        }
    }
    let mut ep = NetworkEndpoint {
        metadata: ObjectMeta {
            name: Some(endpoint_name(&conf.pool, ip)),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_FORCE_RELEASE_AFTER.to_string(),
                force_release_after.clone(),
            )])),
            finalizers: (!conf.finalizers.is_empty()).then(|| conf.finalizers.clone()),
            ..ObjectMeta::default()
        },
        spec: NetworkEndpointSpec {
            pool: conf.pool.clone(),
            ip: ip.to_string(),
            prefix_length: range.map_or(if ip.is_ipv4() { 32 } else { 128 }, |r| r.subnet.prefix_len()),
            gateway: range.and_then(|r| r.gateway).map(|g| g.to_string()),
            if_name: who.key.if_name.clone(),
            container_id: who.key.container_id.clone(),
            node: who.node.clone(),
            pod: who.pod.as_ref().map(|p| PodRef {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                uid: p.uid.clone(),
            }),
            network: Some(conf.network.clone()),
            force_release_after: Some(force_release_after),
            ..NetworkEndpointSpec::default()
        },
        status: None,
    };
    if let Some(id) = &who.sticky {
        crate::sticky::mark(&mut ep, id);
    }
    ep
}

/// When an ADD stops waiting for a release; time on the runtime's (tokio's) clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    started: tokio::time::Instant,
    at: tokio::time::Instant,
}

impl Deadline {
    fn after(wait: Duration) -> Self {
        let started = tokio::time::Instant::now();
        // `wait` is capped by config validation; saturate anyway.
        let at = started.checked_add(wait).unwrap_or(started);
        Self { started, at }
    }

    pub(crate) fn passed(&self) -> bool {
        tokio::time::Instant::now() >= self.at
    }

    pub(crate) fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(tokio::time::Instant::now())
    }

    pub(crate) fn waited(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Claims one address of `set`, in phases:
/// 1. [`probe`]: creates at the candidates after the cursor (the common case
///    ends here, after one API call);
/// 2. [`claim_from_blocks`]: in a set larger than one block, lists the block
///    of the candidates just probed, and up to [`BLOCKS_BEFORE_POOL`] blocks
///    after it, and creates at what they show free;
/// 3. then, in rounds until `deadline`: list the pool and [`claim_free`];
///    [`force_stuck`] a release that outlived its bound; [`reclaim_vanished`]
///    leases of nodes gone for their grace period; otherwise wait for a
///    release to begin and finish.
#[allow(clippy::too_many_arguments)]
async fn claim_one<S: Store>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    local: &LocalState,
    set: &RangeSet,
    cursor: Option<IpAddr>,
    deadline: Deadline,
    claimed: &mut Claimed,
) -> Result<NetworkEndpoint> {
    if let Some(ep) = probe(store, conf, who, set, cursor, claimed).await? {
        return Ok(ep);
    }
    if let Some(ep) = claim_from_blocks(store, conf, who, set, cursor, claimed).await? {
        return Ok(ep);
    }
    let mut logged_wait = false;
    let mut checked_vanished = false;
    let mut rounds = 0;
    // Addresses handed back to their sticky identity while this ADD waited:
    // never claimed by it, even if a list shows them free in the gap.
    let mut promised = std::collections::HashSet::new();
    loop {
        rounds += 1;
        let view = store.list_pool(&conf.pool).await?;
        if let Some(ep) = claim_free(store, conf, who, set, cursor, &view, &promised, claimed).await? {
            if logged_wait {
                info!(ip = %ep.spec.ip, waited_ms = deadline.waited().as_millis() as u64, "claimed after waiting for a release");
            }
            return Ok(ep);
        }
        let in_set: Vec<&PoolEntry> = view.entries.iter().filter(|e| set.is_usable(e.ip)).collect();
        let releases = Releases::of(&in_set, store.server_now(), conf.force_release_after);

        // Bounded release: only when no younger release can serve this ADD
        // within its wait (or the wait is over). With `crossNode: controller`
        // the controller forces and reclaims, once told that an IP is needed.
        let by_plugin = conf.cross_node == CrossNode::Plugin;
        if by_plugin
            && let Some(victim) = releases.oldest_stuck()
            && (releases.young.is_empty() || deadline.passed())
            && rounds <= MAX_ROUNDS
        {
            if let Some(ep) = force_stuck(store, conf, who, set, victim, claimed).await? {
                return Ok(ep);
            }
            continue;
        }

        if by_plugin && !checked_vanished {
            checked_vanished = true;
            if reclaim_vanished(store, conf, who, local, &in_set).await? > 0 {
                continue;
            }
        }

        if deadline.passed() || rounds > MAX_ROUNDS {
            return Err(Error::PoolExhausted(Box::new(exhaustion(conf, set, &view, deadline.waited()))));
        }
        if !logged_wait {
            let ex = exhaustion(conf, set, &view, deadline.waited());
            warn!(
                pool = %conf.pool,
                releasing = ex.releasing,
                waiting_on = ?ex.waiting_on,
                wait_for_release_ms = conf.wait_for_release.as_millis() as u64,
                "pool full: waiting for a release to begin and finish"
            );
            logged_wait = true;
            if !by_plugin {
                store.record_need(&conf.pool, need_regarding(who), deadline.remaining()).await;
            }
        }
        // The controller's forced release shows up as a deletion; without it
        // there is nothing to wake up for before the deadline.
        let next_stuck = if by_plugin { releases.next_stuck_in() } else { None };
        // Wake up in time to force a stuck release once the young ones had their chance.
        let wait = next_stuck.map_or(deadline.remaining(), |d| d.min(deadline.remaining()));
        match store.wait_for_release(&conf.pool, &view.resource_version, wait).await? {
            Release::Freed(ip) if set.is_usable(ip) => {
                if let Some(ep) = try_claim(store, conf, who, set, ip, claimed).await? {
                    info!(%ip, waited_ms = deadline.waited().as_millis() as u64, "claimed a just-released address");
                    return Ok(ep);
                }
            }
            Release::HandedOver(ip) => {
                debug!(%ip, "released to its sticky identity: not ours to claim");
                promised.insert(ip);
            }
            Release::Freed(_) | Release::Restart | Release::TimedOut => {}
        }
    }
}

/// Creates the lease of `ip` the allocator chose (see [`try_create`]).
async fn try_claim<S: Store>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    set: &RangeSet,
    ip: IpAddr,
    claimed: &mut Claimed,
) -> Result<Option<NetworkEndpoint>> {
    try_create(store, &lease_object(conf, who, set, ip), claimed).await
}

/// Creates `lease`: `Some` if it is ours now, `None` if its name is taken.
/// A failure whose outcome is unknown marks the ADD for a sweep on rollback.
pub(crate) async fn try_create<S: Store>(
    store: &S,
    lease: &NetworkEndpoint,
    claimed: &mut Claimed,
) -> Result<Option<NetworkEndpoint>> {
    match store.create(lease).await {
        Ok(Claim::Created(ep)) => {
            claimed.leases.push((*ep).clone());
            Ok(Some(*ep))
        }
        Ok(Claim::Taken) => Ok(None),
        Err(e) => {
            // Refused outright (401/403, CRD missing) means nothing was written; anything else may have been.
            claimed.ambiguous |= !matches!(e, Error::ApiDenied { .. } | Error::CrdMissing);
            Err(e)
        }
    }
}

/// Phase 1: creates at up to [`probes_before_list`] candidates after the cursor.
async fn probe<S: Store>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    set: &RangeSet,
    cursor: Option<IpAddr>,
    claimed: &mut Claimed,
) -> Result<Option<NetworkEndpoint>> {
    for ip in set.candidates(cursor).take(probes_before_list(set)) {
        if let Some(ep) = try_claim(store, conf, who, set, ip, claimed).await? {
            info!(%ip, "claimed");
            return Ok(Some(ep));
        }
        debug!(%ip, "taken; next candidate");
    }
    Ok(None)
}

/// Blocks an ADD lists, one at a time, before it lists the whole pool. Each
/// list returns at most one block (64 addresses) of leases, so an ADD's cost
/// does not grow with the pool until that many blocks in a row are full.
pub const BLOCKS_BEFORE_POOL: usize = 4;

/// Phase 2: lists the block of the candidates just probed and creates at
/// its free addresses; moves on to the next block in candidate order when
/// one is full. Only in sets larger than one block: in a small set the pool
/// list is no larger than a block list, and the order stays host-local's.
async fn claim_from_blocks<S: Store>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    set: &RangeSet,
    cursor: Option<IpAddr>,
    claimed: &mut Claimed,
) -> Result<Option<NetworkEndpoint>> {
    if set.capacity() <= BLOCK_SIZE {
        return Ok(None);
    }
    let Some(mut at) = set.candidates(cursor).take(probes_before_list(set)).last() else { return Ok(None) };
    let first_block = block_of(at);
    for _ in 0..BLOCKS_BEFORE_POOL {
        let block = block_of(at);
        let taken = store.taken_in_block(&conf.pool, &block_label_value(at)).await?;
        let used: std::collections::HashSet<IpAddr> = taken.iter().copied().collect();
        let free: Vec<IpAddr> = set.block_candidates(block, at).filter(|ip| !used.contains(ip)).collect();
        debug!(block = %block_label_value(at), leases = taken.len(), free = free.len(), "probes missed: listed one block");
        for ip in free {
            if let Some(ep) = try_claim(store, conf, who, set, ip, claimed).await? {
                info!(%ip, "claimed from the block list");
                return Ok(Some(ep));
            }
        }
        // Next block in candidate order, from the last usable address of this one.
        let Some(last) = set.block_candidates(block, at).last() else { return Ok(None) };
        match set.candidates(Some(last)).next() {
            Some(next) if block_of(next) != first_block && block_of(next) != block => at = next,
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// Phase 3: creates at the addresses the pool list shows free, in candidate order.
#[allow(clippy::too_many_arguments)]
async fn claim_free<S: Store>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    set: &RangeSet,
    cursor: Option<IpAddr>,
    view: &PoolView,
    promised: &std::collections::HashSet<IpAddr>,
    claimed: &mut Claimed,
) -> Result<Option<NetworkEndpoint>> {
    let used: std::collections::HashSet<IpAddr> = view.entries.iter().map(|e| e.ip).collect();
    for ip in set.candidates(cursor).filter(|ip| !used.contains(ip) && !promised.contains(ip)) {
        if let Some(ep) = try_claim(store, conf, who, set, ip, claimed).await? {
            info!(%ip, "claimed from the pool list");
            return Ok(Some(ep));
        }
    }
    Ok(None)
}

/// The releases in progress in a range set, split by their own bound.
struct Releases<'a> {
    /// Releases older than their bound, with their (lower-bound) age.
    stuck: Vec<(&'a PoolEntry, Duration)>,
    /// Younger releases, with the time left until they become stuck.
    young: Vec<(&'a PoolEntry, Duration)>,
}

impl<'a> Releases<'a> {
    /// Splits the releasing entries. A lease's own stamped bound wins over
    /// `default_bound` (this network's config), which serves only leases of
    /// older versions. Without a server time nothing counts as stuck.
    fn of(in_set: &[&'a PoolEntry], now: Option<Timestamp>, default_bound: Duration) -> Self {
        let mut stuck = Vec::new();
        let mut young = Vec::new();
        for e in in_set.iter().copied() {
            let Some(since) = &e.releasing_since else { continue };
            // A held release is not available: nothing forces a sticky hold.
            if crate::sticky::is_held(&e.finalizers) {
                continue;
            }
            let bound = e.force_release_after.unwrap_or(default_bound);
            let age = now.map_or(Duration::ZERO, |n| netendpoint_lease::clock::age_of(n, since));
            if now.is_some() && age >= bound {
                stuck.push((e, age));
            } else {
                young.push((e, bound.saturating_sub(age)));
            }
        }
        Self { stuck, young }
    }

    fn oldest_stuck(&self) -> Option<(&'a PoolEntry, Duration)> {
        self.stuck.iter().max_by_key(|(_, age)| *age).copied()
    }

    /// How long until the first young release becomes stuck (plus a margin
    /// for the whole-second timestamps).
    fn next_stuck_in(&self) -> Option<Duration> {
        self.young.iter().map(|(_, left)| *left).min().map(|d| d + Duration::from_millis(200))
    }
}

/// Removes the finalizers of a release that outlived its bound, records why,
/// and claims its address.
async fn force_stuck<S: Store>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    set: &RangeSet,
    (victim, age): (&PoolEntry, Duration),
    claimed: &mut Claimed,
) -> Result<Option<NetworkEndpoint>> {
    let bound = victim.force_release_after.unwrap_or(conf.force_release_after);
    if store.force_release(victim).await? {
        warn!(
            ip = %victim.ip,
            finalizers = ?victim.finalizers,
            releasing_for_ms = age.as_millis() as u64,
            bound = %netendpoint_crd::duration::format(bound),
            "forced release: finalizers did not answer within forceReleaseAfter"
        );
        let note = format!(
            "IP {} of pool {} released by force after {:.1}s: finalizers {:?} did not answer within forceReleaseAfter ({})",
            victim.ip,
            conf.pool,
            age.as_secs_f64(),
            victim.finalizers,
            netendpoint_crd::duration::format(bound),
        );
        store.record_event(endpoint_ref(victim), REASON_FORCED_RELEASE, note.clone(), true).await;
        if let Some(pod) = &who.pod {
            store.record_event(pod_ref(pod), REASON_FORCED_RELEASE, note, true).await;
        }
    }
    let ep = try_claim(store, conf, who, set, victim.ip, claimed).await?;
    if ep.is_some() {
        info!(ip = %victim.ip, "claimed a force-released address");
    }
    Ok(ep)
}

/// Rounds of list-and-try before an ADD gives up, whatever the deadline says.
const MAX_ROUNDS: usize = 64;

/// The kind of sightings kept for vanished nodes.
const SIGHTINGS_VANISHED: &str = "vanished-node";

/// Requests release of live leases whose node has been absent for
/// `vanishedNodeGrace`, seen by two invocations on this node. Acts only when
/// the plugin's own node is registered, so a node-name mismatch can never
/// make live leases look orphaned. Time is the API server's. Finalizers are
/// honoured as after DEL. Returns the number of leases whose release was requested.
async fn reclaim_vanished<S: Store>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    local: &LocalState,
    in_set: &[&PoolEntry],
) -> Result<usize> {
    if !in_set.iter().any(|e| e.releasing_since.is_none()) {
        return Ok(0);
    }
    let nodes = match store.node_names().await {
        Ok(n) => n,
        Err(e) => {
            debug!(error = %e, "cannot list nodes; not reclaiming leases of vanished nodes");
            return Ok(0);
        }
    };
    if !nodes.contains(&who.node) {
        debug!(node = %who.node, "own node is not registered; not reclaiming leases of vanished nodes");
        return Ok(0);
    }
    let Some(now) = store.server_now() else { return Ok(0) };
    let known: std::collections::HashSet<String> = nodes.iter().map(|n| label_value(n)).collect();
    let absent: std::collections::BTreeSet<&str> = in_set
        .iter()
        .filter(|e| e.releasing_since.is_none() && !e.node.is_empty() && !known.contains(&e.node))
        .map(|e| e.node.as_str())
        .collect();
    let before = local.sightings(SIGHTINGS_VANISHED);
    let now_s = now.as_second();
    // The evidence is "this node is not registered": a node seen again ends
    // its sighting; absent nodes that this range set holds no lease of keep theirs.
    let mut seen: BTreeMap<String, i64> =
        before.iter().filter(|(n, _)| !known.contains(*n)).map(|(n, t)| (n.clone(), *t)).collect();
    let mut gone = Vec::new();
    for node in absent {
        match before.get(node) {
            // Seen absent by an earlier invocation, long enough ago (whole seconds: one more to be safe).
            Some(first) if now_s.saturating_sub(*first).saturating_sub(1) >= secs(conf.vanished_node_grace) => {
                seen.remove(node);
                gone.push(node);
            }
            Some(_) => {}
            None => {
                info!(node, grace = %netendpoint_crd::duration::format(conf.vanished_node_grace),
                    "leases held by a node that is not registered; reclaimed if it stays absent");
                seen.insert(node.to_string(), now_s);
            }
        }
    }
    local.save_sightings(SIGHTINGS_VANISHED, &seen);
    let mut reclaimed = 0;
    for e in in_set.iter().filter(|e| e.releasing_since.is_none() && gone.contains(&e.node.as_str())) {
        warn!(ip = %e.ip, node = %e.node, "node absent for vanishedNodeGrace: releasing its lease");
        store.delete_entry(e).await?;
        reclaimed += 1;
    }
    Ok(reclaimed)
}

/// Whole seconds of a (capped) duration, rounded up.
fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs() + u64::from(d.subsec_nanos() > 0)).unwrap_or(i64::MAX)
}

fn endpoint_ref(e: &PoolEntry) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{GROUP}/v1alpha1")),
        kind: Some("NetworkEndpoint".into()),
        name: Some(e.name.clone()),
        uid: Some(e.uid.clone()),
        ..ObjectReference::default()
    }
}

fn pod_ref(pod: &PodIdentity) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        uid: (!pod.uid.is_empty()).then(|| pod.uid.clone()),
        ..ObjectReference::default()
    }
}

/// What an `IPNeeded` Event is about: the Pod that waits, when the runtime
/// named it, else the node the ADD runs on.
fn need_regarding(who: &Attachment) -> ObjectReference {
    match &who.pod {
        Some(pod) => pod_ref(pod),
        None => ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(who.node.clone()),
            ..ObjectReference::default()
        },
    }
}

fn exhaustion(conf: &IpamConfig, set: &RangeSet, view: &PoolView, waited: Duration) -> Exhaustion {
    let in_set: Vec<_> = view.entries.iter().filter(|e| set.is_usable(e.ip)).collect();
    let mut waiting: BTreeMap<String, usize> = BTreeMap::new();
    for e in in_set.iter().filter(|e| e.releasing_since.is_some()) {
        for f in &e.finalizers {
            *waiting.entry(f.clone()).or_default() += 1;
        }
    }
    Exhaustion {
        pool: conf.pool.clone(),
        capacity: set.capacity(),
        in_use: in_set.len(),
        releasing: in_set.iter().filter(|e| e.releasing_since.is_some()).count(),
        waiting_on: waiting.into_iter().collect(),
        waited,
    }
}

/// CNI DEL: requests deletion of the attachment's leases in this pool and
/// returns without waiting for finalizers. Leases of other sandboxes, even
/// with the same IP, are never touched. Missing leases are success.
pub async fn del<S: Store>(store: &S, conf: &IpamConfig, who: &Attachment, local: &LocalState) -> Result<()> {
    let record = local.record_of(&who.key.container_id, &who.key.if_name);
    local.forget(&who.key.container_id, &who.key.if_name);
    // A complete record names every lease of the attachment: delete them by
    // name and UID, one call each, with no list (a list by container ID
    // makes the API server scan every NetworkEndpoint in the cluster).
    if let Record::Complete(leases) = record
        && !leases.is_empty()
    {
        let mut errors = Vec::new();
        for (name, uid) in &leases {
            match store.delete_named(name, uid).await {
                Ok(()) => info!(lease = %name, "release requested"),
                Err(e) => errors.push(e),
            }
        }
        return Error::collect(errors);
    }
    let eps = match store.find_by_container(&who.key.container_id).await {
        Ok(eps) => eps,
        // A 404 on the collection may mean the CRD is gone, or a proxy or a
        // wrong server path: only discovery can tell, and only "not served"
        // makes DEL a no-op (there can be no lease to release).
        Err(Error::CrdMissing) => {
            return match store.crd_installed().await? {
                false => {
                    warn!("NetworkEndpoint CRD not installed (discovery): nothing to release");
                    Ok(())
                }
                true => Err(Error::Inconsistent(
                    "listing NetworkEndpoints answered 404 although discovery serves them".into(),
                )),
            };
        }
        Err(e) => return Err(e),
    };
    let mut errors = Vec::new();
    for ep in eps.iter().filter(|ep| {
        ep.spec.container_id == who.key.container_id && ep.spec.if_name == who.key.if_name && ep.spec.pool == conf.pool
    }) {
        if ep.is_releasing() {
            debug!(ip = %ep.spec.ip, "already releasing");
            continue;
        }
        match store.delete(ep).await {
            Ok(()) => info!(ip = %ep.spec.ip, finalizers = ?ep.metadata.finalizers, "release requested"),
            Err(e) => errors.push(e),
        }
    }
    Error::collect(errors)
}

/// CNI CHECK: the attachment's leases exist, are not releasing, and match `prev`.
pub async fn check<S: Store>(store: &S, conf: &IpamConfig, who: &Attachment, prev: &[IpNet]) -> Result<()> {
    let eps: Vec<NetworkEndpoint> = store
        .find_by_container(&who.key.container_id)
        .await?
        .into_iter()
        .filter(|ep| ep.spec.if_name == who.key.if_name && ep.spec.pool == conf.pool)
        .collect();
    for (i, set) in conf.range_sets.iter().enumerate() {
        let Some(ep) = eps.iter().find(|ep| ep.ip().is_some_and(|ip| set.is_usable(ip))) else {
            return Err(Error::CheckFailed(format!("no lease in ipam.ranges[{i}] for this container and interface")));
        };
        if ep.is_releasing() {
            return Err(Error::CheckFailed(format!("lease {} is being released", ep.spec.ip)));
        }
        let want = ip_config(set, ep)?.address;
        if !prev.contains(&want) {
            return Err(Error::CheckFailed(format!("lease {want} is not in prevResult")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Decisions of ADD and DEL, as tables over [`MemStore`] on tokio's paused clock.
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::memstore::{Fault, MemStore};
    use serde_json::json;

    const T0: &str = "2026-01-01T00:00:00Z";
    const FIN: &str = "test.example/agent";

    fn conf(subnet: &str, extra: serde_json::Value) -> IpamConfig {
        let mut ipam = json!({"ranges": [[{"subnet": subnet}]], "pool": "p", "waitForRelease": "10s"});
        for (k, v) in extra.as_object().unwrap() {
            ipam[k] = v.clone();
        }
        IpamConfig::parse(&ipam, "net").unwrap()
    }

    fn who(cid: &str) -> Attachment {
        Attachment {
            key: AttachmentKey { container_id: cid.into(), if_name: "eth0".into() },
            node: "n1".into(),
            pod: Some(PodIdentity { namespace: "default".into(), name: format!("pod-{cid}"), uid: String::new() }),
            sticky: None,
        }
    }

    fn scratch(name: &str) -> (LocalState, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("netendpoint-cmd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        (LocalState::new(&dir, "p"), dir)
    }

    /// Leases every usable address of `c`'s first range set to container `held-<i>` on `node`.
    fn fill(store: &MemStore, c: &IpamConfig, node: &str) -> Vec<String> {
        let set = &c.range_sets[0];
        set.candidates(None)
            .enumerate()
            .map(|(i, ip)| {
                let mut w = who(&format!("held-{i}"));
                w.node = node.into();
                let ep = lease_object(c, &w, set, ip);
                let name = ep.metadata.name.clone().unwrap();
                store.insert(ep);
                name
            })
            .collect()
    }

    fn ip_of(r: &IpamResult) -> String {
        r.ips[0].address.addr().to_string()
    }

    #[test]
    fn an_unreadable_stored_lease_is_code_105_never_106() {
        let c = conf("10.0.0.0/29", json!({}));
        let set = &c.range_sets[0];
        let good = lease_object(&c, &who("c1"), set, "10.0.0.2".parse().unwrap());
        assert_eq!(ip_config(set, &good).unwrap().address.to_string(), "10.0.0.2/29");
        let mut bad_ip = good.clone();
        bad_ip.spec.ip = "10.0.0.x".into();
        let mut bad_prefix = good.clone();
        bad_prefix.spec.ip = "192.168.0.1".into(); // outside the ranges: the lease's own prefix is used
        bad_prefix.spec.prefix_length = 33;
        for (ep, quoted) in [(bad_ip, "10.0.0.x"), (bad_prefix, "33")] {
            let e = ip_config(set, &ep).unwrap_err();
            assert!(matches!(e, Error::InvalidLease { .. }), "{e:?}");
            assert_eq!(e.code(), 105);
            assert!(e.to_string().contains(quoted) && e.to_string().contains("p.10.0.0.2"), "{e}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_add_is_one_create_and_stamps_network_and_bound() {
        let store = MemStore::new(T0, &["n1"]);
        let c = conf("10.0.0.0/29", json!({"forceReleaseAfter": "90s"}));
        let r = add(&store, &c, &who("c1"), &LocalState::none()).await.unwrap();
        assert_eq!(ip_of(&r), "10.0.0.2");
        assert_eq!((store.calls("create"), store.calls("get_node")), (1, 1));
        let ep = store.object("p.10.0.0.2").unwrap();
        assert_eq!(ep.spec.network.as_deref(), Some("net"));
        assert_eq!(ep.spec.force_release_after.as_deref(), Some("90s"));
        assert_eq!(ep.metadata.labels.unwrap()[LABEL_NETWORK], "net");
    }

    #[tokio::test(start_paused = true)]
    async fn an_unregistered_node_gets_no_lease_and_a_registered_one_is_checked_once() {
        let store = MemStore::new(T0, &[]);
        let (local, dir) = scratch("node");
        let c = conf("10.0.0.0/29", json!({}));
        let e = add(&store, &c, &who("c1"), &local).await.unwrap_err();
        assert_eq!(e.code(), 107, "{e}");
        assert!(e.to_string().contains("\"n1\""), "{e}");
        assert!(store.objects().is_empty());
        store.set_node("n1", true);
        add(&store, &c, &who("c2"), &local).await.unwrap();
        add(&store, &c, &who("c3"), &local).await.unwrap();
        assert_eq!(store.calls("get_node"), 2, "the positive answer is cached on the node");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test(start_paused = true)]
    async fn six_taken_candidates_switch_to_one_pool_list() {
        let store = MemStore::new(T0, &["n1"]);
        let c = conf("10.0.0.0/28", json!({}));
        let set = &c.range_sets[0];
        for ip in set.candidates(None).take(PROBES_BEFORE_LIST + 2) {
            store.insert(lease_object(&c, &who("other"), set, ip));
        }
        let r = add(&store, &c, &who("c1"), &LocalState::none()).await.unwrap();
        assert_eq!(ip_of(&r), "10.0.0.10");
        assert_eq!(store.calls("create"), PROBES_BEFORE_LIST + 1);
        assert_eq!(store.calls("list_pool"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn in_a_large_set_missed_probes_list_one_block_not_the_pool() {
        let store = MemStore::new(T0, &["n1"]);
        let c = conf("10.0.0.0/16", json!({}));
        let set = &c.range_sets[0];
        let local = LocalState::none();
        let start = set.spread_start("n1");
        // The probed candidates, and a few after them, are taken.
        let probes = probes_before_list(set);
        assert_eq!(probes, PROBES_BEFORE_LIST_LARGE);
        for ip in set.candidates(start).take(probes + 3) {
            store.insert(lease_object(&c, &who("other"), set, ip));
        }
        let r = add(&store, &c, &who("c1"), &local).await.unwrap();
        assert!(set.is_usable(r.ips[0].address.addr()));
        assert_eq!((store.calls("list_block"), store.calls("list_pool")), (1, 0));
        assert_eq!(store.calls("create"), probes + 1, "the block list shows what is free");
    }

    #[tokio::test(start_paused = true)]
    async fn at_ninety_percent_full_no_add_lists_more_than_a_block() {
        let store = MemStore::new(T0, &["n1"]);
        let c = conf("10.0.0.0/20", json!({}));
        let set = &c.range_sets[0];
        // Fill 90 % at random (a fixed LCG, so the table is the same every run).
        let mut x: u64 = 42;
        for ip in set.candidates(None) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if !(x >> 33).is_multiple_of(10) {
                store.insert(lease_object(&c, &who("filler"), set, ip));
            }
        }
        let (local, dir) = scratch("ninety");
        for i in 0..40 {
            add(&store, &c, &who(&format!("new-{i}")), &local).await.unwrap();
        }
        assert_eq!(store.calls("list_pool"), 0, "the pool is never listed while blocks have room");
        assert!(store.calls("list_block") <= 40, "at most one block list per ADD here");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test(start_paused = true)]
    async fn nodes_spread_out_and_do_not_collide_in_an_empty_pool() {
        let nodes: Vec<String> = (0..8).map(|i| format!("node-{i}")).collect();
        let refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
        let store = MemStore::new(T0, &refs);
        let c = conf("10.0.0.0/16", json!({}));
        let dirs: Vec<_> = nodes.iter().map(|n| scratch(&format!("spread-{n}"))).collect();
        for round in 0..50 {
            for (n, (local, _)) in nodes.iter().zip(&dirs) {
                let mut w = who(&format!("{n}-{round}"));
                w.node = n.clone();
                add(&store, &c, &w, local).await.unwrap();
            }
        }
        assert_eq!(store.calls("create"), 400, "no create met another node's lease");
        for (_, d) in dirs {
            let _ = std::fs::remove_dir_all(d);
        }
        // A set of one block keeps host-local's order: every node starts at the first address.
        let small = conf("10.0.0.0/29", json!({}));
        let (local, d) = scratch("spread-small");
        let mut w = who("first");
        w.node = "node-5".into();
        assert_eq!(ip_of(&add(&store, &small, &w, &local).await.unwrap()), "10.0.0.2");
        let _ = std::fs::remove_dir_all(d);
    }

    /// Forced release: (bound stamped on the lease, this ADD's bound, release age when the ADD
    /// comes, whether it may be forced).
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
            let holder_conf = conf("10.0.0.0/30", json!({"forceReleaseAfter": stamped, "finalizers": [FIN]}));
            let name = fill(&store, &holder_conf, "n1").remove(0);
            store.release(&name);
            tokio::time::advance(Duration::from_secs(age)).await;
            let c = conf("10.0.0.0/30", json!({"forceReleaseAfter": mine, "waitForRelease": "3s"}));
            let res = add(&store, &c, &who("new"), &LocalState::none()).await;
            let case = format!("stamped {stamped}, mine {mine}, age {age}s");
            if forced {
                assert_eq!(ip_of(&res.unwrap()), "10.0.0.2", "{case}");
                let ev = store.events();
                assert!(
                    ev.iter().any(|(r, n)| r == "NetworkEndpoint/ForcedRelease" && n.contains(FIN)),
                    "{case}: {ev:?}"
                );
                assert!(ev.iter().any(|(r, _)| r == "Pod/ForcedRelease"), "{case}");
            } else {
                let e = res.unwrap_err();
                assert_eq!(e.code(), 100, "{case}: {e}");
                let held = store.object(&name).unwrap();
                assert_eq!(held.metadata.finalizers.unwrap(), [FIN], "{case}: finalizer kept");
                assert!(store.events().iter().all(|(r, _)| !r.ends_with("ForcedRelease")), "{case}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_that_becomes_stuck_during_the_wait_is_forced_then() {
        let store = MemStore::new(T0, &["n1"]);
        let c = conf("10.0.0.0/30", json!({"forceReleaseAfter": "4s", "finalizers": [FIN], "waitForRelease": "20s"}));
        let name = fill(&store, &c, "n1").remove(0);
        store.release(&name);
        let started = tokio::time::Instant::now();
        let r = add(&store, &c, &who("new"), &LocalState::none()).await.unwrap();
        assert_eq!(ip_of(&r), "10.0.0.2");
        let waited = started.elapsed();
        // Never before the bound (plus the whole-second rounding of deletionTimestamp).
        assert!(waited >= Duration::from_secs(4), "forced after {waited:?}");
        assert!(waited < Duration::from_secs(7), "forced after {waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn with_cross_node_controller_an_add_never_forces_or_reclaims_and_signals_its_need_once() {
        let store = MemStore::new(T0, &["n1"]);
        let holder = conf("10.0.0.0/29", json!({"forceReleaseAfter": "1s", "finalizers": [FIN]}));
        let names = fill(&store, &holder, "gone");
        store.release(&names[0]);
        tokio::time::advance(Duration::from_secs(600)).await;
        let c =
            conf("10.0.0.0/29", json!({"crossNode": "controller", "waitForRelease": "5s", "vanishedNodeGrace": "1s"}));
        // A second ADD lets an earlier sighting of the absent node ripen, as in plugin mode.
        let (local, dir) = scratch("cross-node");
        for cid in ["a", "b"] {
            let e = add(&store, &c, &who(cid), &local).await.unwrap_err();
            assert_eq!(e.code(), 100, "{e}");
            tokio::time::advance(Duration::from_secs(5)).await;
        }
        assert_eq!(store.object(&names[0]).unwrap().metadata.finalizers.unwrap(), [FIN], "stuck release not forced");
        assert!(store.object(&names[1]).unwrap().metadata.deletion_timestamp.is_none(), "vanished node's lease kept");
        let needs: Vec<_> = store.events().into_iter().filter(|(r, _)| r == "Pod/IPNeeded").collect();
        assert_eq!(needs.len(), 2, "one need per waiting ADD: {needs:?}");
        assert!(needs.iter().all(|(_, pool)| pool == &c.pool));
        assert!(store.events().iter().all(|(r, _)| !r.ends_with("ForcedRelease")));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_pool_waits_for_a_release_that_has_not_begun_yet() {
        let store = std::sync::Arc::new(MemStore::new(T0, &["n1"]));
        let c = conf("10.0.0.0/29", json!({"waitForRelease": "5s"}));
        let names = fill(&store, &c, "n1");
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
        // And with no release at all, the same clear exhaustion error after the wait.
        let e = add(&*store, &c, &who("other"), &LocalState::none()).await.unwrap_err();
        assert_eq!(e.code(), 100);
        assert!(e.to_string().contains("5 of 5 IPs in use"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_vanished_nodes_lease_is_reclaimed_only_after_two_sightings_and_the_grace() {
        let store = MemStore::new(T0, &["n1"]);
        let (local, dir) = scratch("vanished");
        let c = conf("10.0.0.0/30", json!({"waitForRelease": "1s", "vanishedNodeGrace": "60s"}));
        fill(&store, &c, "gone-node");
        // First sighting: recorded, nothing released.
        assert_eq!(add(&store, &c, &who("a"), &local).await.unwrap_err().code(), 100);
        tokio::time::advance(Duration::from_secs(30)).await;
        // Second sighting, but within the grace: nothing released.
        assert_eq!(add(&store, &c, &who("b"), &local).await.unwrap_err().code(), 100);
        assert_eq!(store.objects().len(), 1);
        tokio::time::advance(Duration::from_secs(40)).await;
        let r = add(&store, &c, &who("c"), &local).await.unwrap();
        assert_eq!(ip_of(&r), "10.0.0.2");
        assert_eq!(store.objects()[0].spec.container_id, "c");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_that_comes_back_restarts_its_grace_and_an_unregistered_self_reclaims_nothing() {
        let store = MemStore::new(T0, &["n1"]);
        let (local, dir) = scratch("comeback");
        let c = conf("10.0.0.0/30", json!({"waitForRelease": "1s", "vanishedNodeGrace": "60s"}));
        fill(&store, &c, "flaky");
        assert!(add(&store, &c, &who("a"), &local).await.is_err());
        tokio::time::advance(Duration::from_secs(30)).await;
        store.set_node("flaky", true);
        assert!(add(&store, &c, &who("b"), &local).await.is_err());
        store.set_node("flaky", false);
        tokio::time::advance(Duration::from_secs(40)).await;
        assert!(add(&store, &c, &who("c"), &local).await.is_err(), "absent for 40 s since it came back");
        assert_eq!(store.objects()[0].spec.node, "flaky");
        // A plugin whose own node is not registered never judges other nodes.
        let (local2, dir2) = scratch("comeback-self");
        let mut stranger = who("d");
        stranger.node = "n1".into();
        local2.mark_node_verified("n1");
        store.set_node("n1", false);
        for _ in 0..2 {
            tokio::time::advance(Duration::from_secs(120)).await;
            assert!(add(&store, &c, &stranger, &local2).await.is_err());
        }
        assert_eq!(store.objects()[0].spec.node, "flaky");
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_dir_all(dir2);
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

    #[tokio::test(start_paused = true)]
    async fn a_create_whose_answer_was_lost_is_found_and_released() {
        let store = MemStore::new(T0, &["n1"]);
        let c = conf("10.0.0.0/29", json!({}));
        store.lose_creates(1);
        let e = add(&store, &c, &who("c1"), &LocalState::none()).await.unwrap_err();
        assert_eq!(e.code(), 101, "{e}");
        assert!(store.objects().is_empty(), "the ambiguous create was swept");
        assert_eq!(store.calls("list_container"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_repeated_add_returns_the_same_lease_and_del_releases_only_its_own() {
        let store = MemStore::new(T0, &["n1"]);
        let (local, dir) = scratch("repeat");
        let c = conf("10.0.0.0/29", json!({"finalizers": [FIN]}));
        let first = add(&store, &c, &who("c1"), &local).await.unwrap();
        let again = add(&store, &c, &who("c1"), &local).await.unwrap();
        assert_eq!(first, again);
        assert_eq!(store.objects().len(), 1);
        // A stale DEL from another sandbox frees nothing.
        del(&store, &c, &who("old-sandbox"), &local).await.unwrap();
        assert!(!store.objects()[0].is_releasing());
        del(&store, &c, &who("c1"), &local).await.unwrap();
        del(&store, &c, &who("c1"), &local).await.unwrap();
        assert!(store.objects()[0].is_releasing(), "held by the finalizer until the agent acks");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test(start_paused = true)]
    async fn del_of_a_recorded_attachment_deletes_by_name_without_a_list() {
        let store = MemStore::new(T0, &["n1"]);
        let (local, dir) = scratch("del-record");
        let c = conf("10.0.0.0/29", json!({}));
        add(&store, &c, &who("c1"), &local).await.unwrap();
        assert!(matches!(local.record_of("c1", "eth0"), Record::Complete(ref l) if l.len() == 1));
        del(&store, &c, &who("c1"), &local).await.unwrap();
        assert_eq!((store.calls("list_container"), store.calls("delete")), (0, 1));
        assert!(store.objects().is_empty());
        // The record is gone: a repeated DEL lists and finds nothing.
        del(&store, &c, &who("c1"), &local).await.unwrap();
        assert_eq!(store.calls("list_container"), 1);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// An ADD marks the record pending before it creates, so one that dies
    /// between its create and its record leaves no complete record, and DEL
    /// then lists: the unrecorded lease is released too.
    #[tokio::test(start_paused = true)]
    async fn del_after_an_add_that_died_before_its_record_lists_and_releases() {
        let store = MemStore::new(T0, &["n1"]);
        let (local, dir) = scratch("del-pending");
        let c = conf("10.0.0.0/29", json!({}));
        add(&store, &c, &who("c1"), &local).await.unwrap();
        // The lease is lost; a repeated ADD must claim again, and fails.
        let first = store.objects()[0].metadata.name.clone().unwrap();
        store.release(&first);
        store.lose_creates(1);
        add(&store, &c, &who("c1"), &local).await.unwrap_err();
        assert_eq!(local.record_of("c1", "eth0"), Record::Unknown, "pending from before the create");
        // Had that ADD died after its create, its lease would exist:
        store.insert(lease_object(&c, &who("c1"), &c.range_sets[0], "10.0.0.5".parse().unwrap()));
        let lists = store.calls("list_container");
        del(&store, &c, &who("c1"), &local).await.unwrap();
        assert_eq!(store.calls("list_container"), lists + 1);
        assert!(store.objects().is_empty(), "the unrecorded lease is released");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test(start_paused = true)]
    async fn del_decides_crd_missing_from_discovery_only() {
        let store = MemStore::new(T0, &["n1"]);
        let c = conf("10.0.0.0/29", json!({}));
        store.serve_crd(false);
        del(&store, &c, &who("c1"), &LocalState::none()).await.unwrap();
        assert_eq!(store.calls("discovery"), 1);
        // A 404 on the list while discovery serves the CRD is an error, and the runtime retries.
        let lying = MemStore::new(T0, &["n1"]);
        lying.serve_crd(false);
        let e = del_with_discovery(&lying, &c).await;
        assert_eq!(e.map_err(|e| e.code()), Err(105));
        let _ = Fault::Denied;
    }

    fn sticky_pod(store: &MemStore, name: &str, uid: &str) -> Attachment {
        let facts = crate::store::PodFacts {
            uid: uid.into(),
            owner: Some(("StatefulSet".into(), "web".into())),
            ..crate::store::PodFacts::default()
        };
        store.put_pod("default", name, facts);
        let mut w = who(&format!("{name}-{uid}"));
        w.pod = Some(PodIdentity { namespace: "default".into(), name: name.into(), uid: uid.into() });
        w
    }

    #[tokio::test(start_paused = true)]
    async fn with_sticky_on_a_non_sticky_pod_costs_exactly_the_pod_get() {
        for (sticky, pod_owner) in [(false, None), (true, None), (true, Some("ReplicaSet"))] {
            let store = MemStore::new(T0, &["n1"]);
            let extra = if sticky { json!({"sticky": {}}) } else { json!({}) };
            let c = conf("10.0.0.0/29", extra);
            let w = who("c1");
            if let Some(kind) = pod_owner {
                let facts = crate::store::PodFacts {
                    uid: "u1".into(),
                    owner: Some((kind.into(), "rs".into())),
                    ..crate::store::PodFacts::default()
                };
                store.put_pod("default", "pod-c1", facts);
            }
            add(&store, &c, &w, &LocalState::none()).await.unwrap();
            let expected = 2 + usize::from(sticky); // node check + create (+ pod GET)
            assert_eq!(store.total_calls(), expected, "sticky={sticky} owner={pod_owner:?}");
            assert_eq!(store.calls("get_pod"), usize::from(sticky));
            let ep = store.object("p.10.0.0.2").unwrap();
            assert!(ep.metadata.finalizers.is_none(), "no hold on a non-sticky lease");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_recreated_sticky_pod_gets_its_ip_back_after_the_agents_and_nobody_else_gets_it() {
        let store = std::sync::Arc::new(MemStore::new(T0, &["n1"]));
        let c =
            conf("10.0.0.0/29", json!({"finalizers": [FIN], "sticky": {"waitForOld": "20s"}, "waitForRelease": "20s"}));
        let first = sticky_pod(&store, "web-0", "u1");
        let ip = ip_of(&add(&*store, &c, &first, &LocalState::none()).await.unwrap());
        let name = format!("p.{ip}");
        let lease = store.object(&name).unwrap();
        assert_eq!(lease.metadata.finalizers.unwrap(), [FIN, netendpoint_crd::FINALIZER_STICKY_HOLD]);
        assert_eq!(lease.metadata.labels.unwrap()[netendpoint_crd::LABEL_STICKY_IDENTITY], "default.web-0");
        // Fill the rest of the pool with other pods.
        for i in 0..4 {
            add(&*store, &c, &who(&format!("o{i}")), &LocalState::none()).await.unwrap();
        }
        // The old sandbox's DEL; the agent acknowledges; the hold keeps the lease.
        del(&*store, &c, &first, &LocalState::none()).await.unwrap();
        store.ack(&name, FIN);
        let held = store.object(&name).expect("held after every agent acknowledged");
        assert_eq!(held.metadata.finalizers.unwrap(), [netendpoint_crd::FINALIZER_STICKY_HOLD]);
        // Another pod waiting in the full pool gets nothing.
        let e = add(&*store, &c, &who("intruder"), &LocalState::none()).await.unwrap_err();
        assert_eq!(e.code(), 100, "{e}");
        assert!(store.object(&name).is_some(), "a held release is never forced");
        // The new incarnation takes it back.
        let second = sticky_pod(&store, "web-0", "u2");
        let again = add(&*store, &c, &second, &LocalState::none()).await.unwrap();
        assert_eq!(ip_of(&again), ip);
        let now = store.object(&name).unwrap();
        assert_eq!(now.spec.pod.unwrap().uid, "u2");
        assert_ne!(now.metadata.uid, held.metadata.uid);
        assert_eq!(store.calls("end_hold"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_sticky_add_waits_for_the_old_del_and_agents_then_a_waiter_leaves_the_ip_to_it() {
        let store = std::sync::Arc::new(MemStore::new(T0, &["n1"]));
        let c =
            conf("10.0.0.0/29", json!({"finalizers": [FIN], "sticky": {"waitForOld": "20s"}, "waitForRelease": "20s"}));
        let first = sticky_pod(&store, "web-0", "u1");
        let ip = ip_of(&add(&*store, &c, &first, &LocalState::none()).await.unwrap());
        let name = format!("p.{ip}");
        let other = ip_of(&add(&*store, &c, &who("o"), &LocalState::none()).await.unwrap());
        for i in 1..4 {
            add(&*store, &c, &who(&format!("o{i}")), &LocalState::none()).await.unwrap();
        }
        // A competitor waits in the full pool; the other pod's release comes late.
        let s2 = store.clone();
        let c2 = c.clone();
        let waiter = tokio::spawn(async move { add(&*s2, &c2, &who("waiter"), &LocalState::none()).await });
        let second = sticky_pod(&store, "web-0", "u2");
        let s3 = store.clone();
        let (c3, f, n, o) = (c.clone(), first.clone(), name.clone(), format!("p.{other}"));
        let old_side = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            del(&*s3, &c3, &f, &LocalState::none()).await.unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
            s3.ack(&n, FIN);
            tokio::time::sleep(Duration::from_secs(1)).await;
            s3.release(&o);
            s3.ack(&o, FIN);
        });
        let started = tokio::time::Instant::now();
        let again = add(&*store, &c, &second, &LocalState::none()).await.unwrap();
        assert_eq!(ip_of(&again), ip, "same IP");
        assert!(started.elapsed() >= Duration::from_secs(3), "not before the old DEL and the agent");
        old_side.await.unwrap();
        let got = waiter.await.unwrap().unwrap();
        assert_eq!(ip_of(&got), other, "the waiter took the other release, never the sticky IP");
    }

    #[tokio::test(start_paused = true)]
    async fn when_wait_for_old_runs_out_the_add_says_what_it_waits_for_and_the_hold_stays() {
        let store = MemStore::new(T0, &["n1"]);
        let c = conf("10.0.0.0/29", json!({"finalizers": [FIN], "sticky": {"waitForOld": "3s"}}));
        let first = sticky_pod(&store, "web-0", "u1");
        let ip = ip_of(&add(&store, &c, &first, &LocalState::none()).await.unwrap());
        let second = sticky_pod(&store, "web-0", "u2");
        let e = add(&store, &c, &second, &LocalState::none()).await.unwrap_err();
        assert_eq!(e.code(), 11, "{e}");
        assert!(e.to_string().contains("DEL of its previous sandbox"), "{e}");
        del(&store, &c, &first, &LocalState::none()).await.unwrap();
        let e = add(&store, &c, &second, &LocalState::none()).await.unwrap_err();
        assert!(e.to_string().contains(FIN), "{e}");
        let held = store.object(&format!("p.{ip}")).unwrap();
        assert!(held.metadata.finalizers.unwrap().contains(&netendpoint_crd::FINALIZER_STICKY_HOLD.to_string()));
        assert!(store.objects().iter().all(|ep| ep.spec.pod.as_ref().unwrap().uid != "u2"), "no second lease");
    }

    #[tokio::test(start_paused = true)]
    async fn an_agent_that_never_answers_loses_its_finalizer_after_the_bound_and_the_hold_is_kept() {
        let store = MemStore::new(T0, &["n1"]);
        let c = conf(
            "10.0.0.0/29",
            json!({"finalizers": [FIN], "forceReleaseAfter": "5s", "sticky": {"waitForOld": "30s"}, "timeout": "60s"}),
        );
        let first = sticky_pod(&store, "web-0", "u1");
        let ip = ip_of(&add(&store, &c, &first, &LocalState::none()).await.unwrap());
        del(&store, &c, &first, &LocalState::none()).await.unwrap();
        let second = sticky_pod(&store, "web-0", "u2");
        let started = tokio::time::Instant::now();
        let again = add(&store, &c, &second, &LocalState::none()).await.unwrap();
        assert_eq!(ip_of(&again), ip);
        assert!(started.elapsed() >= Duration::from_secs(5), "not before the bound: {:?}", started.elapsed());
        assert!(started.elapsed() < Duration::from_secs(8), "soon after the bound: {:?}", started.elapsed());
        assert_eq!((store.calls("force_keep_hold"), store.calls("end_hold")), (1, 1));
    }

    /// DEL against a store whose list says 404 but whose discovery serves the CRD.
    async fn del_with_discovery(store: &MemStore, c: &IpamConfig) -> Result<()> {
        struct Lying<'a>(&'a MemStore);
        impl Store for Lying<'_> {
            fn server_now(&self) -> Option<Timestamp> {
                self.0.server_now()
            }
            async fn node_exists(&self, n: &str) -> Result<bool> {
                self.0.node_exists(n).await
            }
            async fn crd_installed(&self) -> Result<bool> {
                Ok(true)
            }
            async fn probe(&self) -> Result<()> {
                self.0.probe().await
            }
            async fn find_by_container(&self, c: &str) -> Result<Vec<NetworkEndpoint>> {
                self.0.find_by_container(c).await
            }
            async fn get(&self, n: &str) -> Result<Option<NetworkEndpoint>> {
                self.0.get(n).await
            }
            async fn find_by_node(&self, n: &str) -> Result<Vec<NetworkEndpoint>> {
                self.0.find_by_node(n).await
            }
            async fn create(&self, ep: &NetworkEndpoint) -> Result<Claim> {
                self.0.create(ep).await
            }
            async fn list_pool(&self, p: &str) -> Result<PoolView> {
                self.0.list_pool(p).await
            }
            async fn taken_in_block(&self, p: &str, b: &str) -> Result<Vec<IpAddr>> {
                self.0.taken_in_block(p, b).await
            }
            async fn wait_for_release(&self, p: &str, rv: &str, t: Duration) -> Result<Release> {
                self.0.wait_for_release(p, rv, t).await
            }
            async fn delete(&self, ep: &NetworkEndpoint) -> Result<()> {
                self.0.delete(ep).await
            }
            async fn delete_entry(&self, e: &PoolEntry) -> Result<()> {
                self.0.delete_entry(e).await
            }
            async fn delete_named(&self, n: &str, u: &str) -> Result<()> {
                self.0.delete_named(n, u).await
            }
            async fn force_release(&self, e: &PoolEntry) -> Result<bool> {
                self.0.force_release(e).await
            }
            async fn node_names(&self) -> Result<std::collections::HashSet<String>> {
                self.0.node_names().await
            }
            async fn record_event(&self, r: ObjectReference, reason: &str, note: String, w: bool) {
                self.0.record_event(r, reason, note, w).await
            }
            async fn record_need(&self, p: &str, r: ObjectReference, w: Duration) {
                self.0.record_need(p, r, w).await
            }
            async fn pod_facts(&self, ns: &str, n: &str) -> Result<Option<crate::store::PodFacts>> {
                self.0.pod_facts(ns, n).await
            }
            async fn wait_gone(&self, ep: &NetworkEndpoint, t: Duration) -> Result<Release> {
                self.0.wait_gone(ep, t).await
            }
            async fn find_by_identity(&self, p: &str, i: &str) -> Result<Vec<NetworkEndpoint>> {
                self.0.find_by_identity(p, i).await
            }
            async fn end_hold(&self, ep: &NetworkEndpoint, u: &str) -> Result<bool> {
                self.0.end_hold(ep, u).await
            }
            async fn force_keep_hold(&self, ep: &NetworkEndpoint) -> Result<bool> {
                self.0.force_keep_hold(ep).await
            }
            async fn wait_for_change(&self, n: &str, rv: &str, t: Duration) -> Result<bool> {
                self.0.wait_for_change(n, rv, t).await
            }
        }
        del(&Lying(store), c, &who("c1"), &LocalState::none()).await
    }
}
