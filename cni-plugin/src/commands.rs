//! ADD, DEL and CHECK: the order of the steps, over the claim modes of
//! [`crate::dynamic`], [`crate::static_ip`] and [`crate::sticky`].
//!
//! The common ADD makes one API call: the create at the next candidate. A
//! repeated ADD is recognised from the node's record of the attachment
//! ([`LocalState`]) and confirmed with a GET by name. DEL deletes by name
//! from that record. No path lists leases while the record is there.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use netendpoint_crd::{NetworkEndpoint, REASON_POOL_EXHAUSTED};
use netendpoint_netconf::{IpamConfig, RangeSet};
use tracing::{debug, info, warn};

use crate::claim::{Attachment, Claiming, Deadline, lease_object};
use crate::error::{Error, Result};
use crate::local::{LocalState, Record};
use crate::protocol::{IpConfig, IpamResult};
use crate::static_ip;
use crate::sticky::{self, Identity};
use crate::store::{Clock, Cluster, Leases, PodFacts, Queue, Signals, Store, Summaries};

/// What an ADD was asked for, beside the attachment.
#[derive(Debug, Clone, Default)]
pub struct Asked {
    /// Static addresses from the runtime (see [`static_ip`]).
    pub ips: static_ip::Request,
    /// The `IPAMClaim` the runtime named for this interface.
    pub claim: Option<String>,
}

/// CNI ADD with nothing asked: see [`add_asked`].
pub async fn add<S: Store>(store: &S, conf: &IpamConfig, who: &Attachment, local: &LocalState) -> Result<IpamResult> {
    add_asked(store, conf, who, local, &Asked::default(), Deadline::after(conf.timeout)).await
}

/// CNI ADD: one address per range set for the attachment, all or nothing.
///
/// Before its first lease, ADD checks once per node that the node name is a
/// registered Node. Whatever fails after a claim, every lease this ADD
/// created is released before the error returns (invariant 5), including
/// one whose create got no answer, which is found by name. Transient API
/// errors are retried until `work` ends.
///
/// ADD is the one command that may use every role of the store (the Pod and
/// claim lookups, the summaries, a full pool's queue, Events), hence
/// [`Store`]; DEL, CHECK, STATUS and GC ask for less.
pub async fn add_asked<S: Store>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    local: &LocalState,
    asked: &Asked,
    work: Deadline,
) -> Result<IpamResult> {
    let mut plan = static_ip::plan(conf, &asked.ips)?;
    let mut c = Claiming::new(store, conf, who, work);
    let existing = recorded_leases(&c, local).await?;
    let missing = conf.range_sets.iter().any(|set| !existing.iter().any(|ep| in_set(ep, set)));
    let mut identity = None;
    if missing {
        let facts = pod_facts(&c, asked).await?;
        if static_ip::needs_pod(conf, &asked.ips, who) {
            plan = static_ip::plan(conf, &static_ip::from_pod(facts.as_ref(), who)?)?;
        }
        identity = sticky_identity(&c, asked, facts.as_ref()).await?;
        verify_node(&c, local).await?;
        c.maybe_repeated = local.seen(&who.key.container_id, &who.key.if_name);
        local.mark_pending(&who.key.container_id, &who.key.if_name);
    }
    c.adopted = existing;
    match claim_all(&mut c, local, &plan, identity.as_ref()).await {
        Ok(result) => {
            // The attachment's endpoints only: a sticky hold this ADD
            // created outlives the attachment, and its DEL or GC must not end it.
            let held: Vec<NetworkEndpoint> = c.held().filter(|ep| !ep.is_hold()).cloned().collect();
            if !held.is_empty() && missing {
                local.record(&who.key.container_id, &who.key.if_name, &held);
            }
            Ok(result)
        }
        Err(e) => {
            if let (Error::PoolExhausted(_), Some(pod)) = (&e, &who.pod) {
                let r = netendpoint_lease::events::pod_ref(&pod.namespace, &pod.name, &pod.uid);
                store.record_event(r, REASON_POOL_EXHAUSTED, e.to_string(), true).await;
            }
            Err(match c.roll_back().await {
                Ok(()) => e,
                Err(r) => Error::Many(vec![e, r]),
            })
        }
    }
}

/// The leases this node recorded for the attachment that are still its
/// own and live (a repeated ADD), read by name.
async fn recorded_leases<S: Leases>(c: &Claiming<'_, S>, local: &LocalState) -> Result<Vec<NetworkEndpoint>> {
    let mut existing = Vec::new();
    for (name, uid) in local.recorded(&c.who.key.container_id, &c.who.key.if_name) {
        if let Some(ep) = c.retrying("read a recorded lease", || c.store.get(&name)).await?
            && ep.metadata.uid.as_deref() == Some(uid.as_str())
            && c.who.owns(&ep)
            && !ep.is_releasing()
        {
            existing.push(ep);
        }
    }
    Ok(existing)
}

/// The ADD's one Pod GET, made only when a configured feature needs it:
/// static IPs from the annotation, or the claim from the network-selection
/// annotation. Every feature reads the same answer.
async fn pod_facts<S: Cluster>(c: &Claiming<'_, S>, asked: &Asked) -> Result<Option<PodFacts>> {
    let Some(pod) = &c.who.pod else { return Ok(None) };
    let for_static = static_ip::needs_pod(c.conf, &asked.ips, c.who);
    let for_claim = c.conf.sticky.as_ref().is_some_and(|s| s.claims_from_pods) && asked.claim.is_none();
    if !(for_static || for_claim) {
        return Ok(None);
    }
    c.retrying("read the Pod", || c.store.pod_facts(&pod.namespace, &pod.name)).await
}

/// The claim this interface continues, when `ipam.sticky` is on and one
/// exists: at most one GET by name.
async fn sticky_identity<S: Cluster>(
    c: &Claiming<'_, S>,
    asked: &Asked,
    facts: Option<&PodFacts>,
) -> Result<Option<Identity>> {
    let (Some(sc), Some(pod)) = (&c.conf.sticky, &c.who.pod) else { return Ok(None) };
    let at = sticky::PodInterface {
        pool: &c.conf.pool,
        network: &c.conf.network,
        if_name: &c.who.key.if_name,
        pod: &pod.name,
    };
    let name = sticky::claim_name(sc, &at, asked.claim.as_deref(), facts);
    let Some(name) = name else { return Ok(None) };
    let id = c.retrying("read the claim", || sticky::identity(c.store, &c.conf.network, &pod.namespace, &name)).await?;
    if id.is_some() || asked.claim.is_some() {
        return Ok(id);
    }
    sticky::first_claim(c, &pod.namespace, &pod.name, &name).await
}

/// Refuses to lease under a node name that is not a registered Node. The
/// answer is cached on the node, so this costs one GET per node, ever.
async fn verify_node<S: Cluster>(c: &Claiming<'_, S>, local: &LocalState) -> Result<()> {
    let node = &c.who.node;
    if local.node_verified(node) {
        return Ok(());
    }
    if c.retrying("verify the node", || c.store.node_exists(node)).await? {
        local.mark_node_verified(node);
        info!(%node, "node name verified against the registered Nodes");
        Ok(())
    } else {
        Err(Error::NodeNotRegistered { node: node.clone() })
    }
}

fn in_set(ep: &NetworkEndpoint, set: &RangeSet) -> bool {
    ep.ip().is_some_and(|ip| set.is_usable(ip))
}

/// One lease per range set not already served by what the ADD adopted, by
/// the mode that applies to it: a static request, the claim's sticky
/// address, or the allocator's choice.
async fn claim_all<S: Clock + Leases + Summaries + Queue + Signals>(
    c: &mut Claiming<'_, S>,
    local: &LocalState,
    plan: &[Option<IpAddr>],
    identity: Option<&Identity>,
) -> Result<IpamResult> {
    let conf = c.conf;
    let mut result = IpamResult { ips: Vec::new(), routes: conf.routes.clone() };
    let wait = Deadline::after(conf.wait_for_release.min(c.work.remaining()));
    for (i, set) in conf.range_sets.iter().enumerate() {
        if let Some(ep) = c.adopted.iter().find(|ep| in_set(ep, set)) {
            info!(ip = %ep.spec.ip, "ADD repeated: returning the existing lease");
            result.ips.push(ip_config(set, ep)?);
            continue;
        }
        let ep = match (plan.get(i).copied().flatten(), identity) {
            // A static request names its address and takes precedence over a claim.
            (Some(ip), _) => static_ip::claim(c, set, ip, wait).await?,
            (None, Some(id)) => {
                let sticky_wait =
                    conf.sticky.as_ref().map_or(wait, |s| Deadline::after(s.wait_for_old.min(c.work.remaining())));
                sticky::claim(c, local, i, set, id, sticky_wait).await?
            }
            (None, None) => {
                let make = |ip: IpAddr| lease_object(conf, c.who, set, ip);
                crate::dynamic::claim(c, local, i, set, &make, wait).await?
            }
        };
        result.ips.push(ip_config(set, &ep)?);
    }
    Ok(result)
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

/// Where the attachment's leases were found.
enum Found {
    /// Named by the node's complete record: (name, UID).
    Recorded(Vec<(String, String)>),
    /// Listed by container ID (the record was lost).
    Listed(Vec<NetworkEndpoint>),
}

/// The attachment's leases in this pool, on this node: from the node's
/// record by name, or, without a complete record, from a list by
/// container ID (which makes the API server scan every NetworkEndpoint, so
/// it is logged).
async fn attachment_leases<S: Leases + Cluster>(c: &Claiming<'_, S>, record: Record) -> Result<Found> {
    match record {
        Record::Complete(leases) if !leases.is_empty() => return Ok(Found::Recorded(leases)),
        Record::Deleted => return Ok(Found::Recorded(Vec::new())),
        _ => {}
    }
    warn!(container_id = %c.who.key.container_id, "no complete node-local record of the attachment: listing its leases by container ID");
    let listed = c.retrying("list the container's leases", || c.store.find_by_container(&c.who.key.container_id)).await;
    let eps = match listed {
        Ok(eps) => eps,
        // A 404 on the collection may mean the CRD is gone, or a proxy or a
        // wrong server path: only discovery can tell, and only "not served"
        // means there can be no lease to release.
        Err(Error::CrdMissing) => {
            if c.store.crd_installed().await? {
                return Err(Error::Inconsistent(
                    "listing NetworkEndpoints answered 404 although discovery serves them".into(),
                ));
            }
            warn!("NetworkEndpoint CRD not installed (discovery): nothing to release");
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    // Only this node's leases of this attachment and pool: a lease another
    // node planted with this container ID is not this attachment's.
    Ok(Found::Listed(
        eps.into_iter().filter(|ep| c.who.owns(ep) && ep.spec.pool == c.conf.pool && !ep.is_hold()).collect(),
    ))
}

/// How long DEL and CHECK retry a transient failure (an API server
/// restarting) before they fail with code 101. The runtime retries a failed
/// DEL on its own schedule; holding its teardown for the whole
/// `ipam.timeout` would only delay that.
pub const RETRY_WINDOW: Duration = Duration::from_secs(10);

/// CNI DEL: requests deletion of the attachment's leases in this pool, on
/// this node, and returns without waiting for finalizers. Leases of other
/// sandboxes or nodes, even with the same IP, are never touched. Missing
/// leases are success; an unreachable API server is an error the runtime
/// retries (after [`RETRY_WINDOW`] of retries here).
pub async fn del<S: Leases + Cluster + Queue>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    local: &LocalState,
) -> Result<()> {
    let c = Claiming::new(store, conf, who, Deadline::after(conf.timeout.min(RETRY_WINDOW)));
    let (container, if_name) = (&who.key.container_id, &who.key.if_name);
    let record = local.record_of(container, if_name);
    if record == Record::Deleted {
        // The runtime's second and third DEL of a sandbox: nothing to ask.
        debug!(container_id = %container, "DEL repeated: this attachment's DEL already completed on this node");
        return Ok(());
    }
    // Queue entries of an ADD that was killed while it waited.
    for (name, uid) in local.noted_entries(container, if_name) {
        match c.retrying("delete a queue entry", || store.leave(&name, &uid)).await {
            Ok(()) => info!(entry = %name, "queue entry of a torn-down sandbox deleted"),
            Err(e) => warn!(entry = %name, error = %e, "cannot delete the queue entry; it lapses at its deadline"),
        }
    }
    local.note_entries(container, if_name, &[]);
    let targets: Vec<(String, String)> = match attachment_leases(&c, record).await? {
        // By the record: one delete each, by name and UID, no list.
        Found::Recorded(named) => named,
        Found::Listed(eps) => eps
            .iter()
            .filter(|ep| !ep.is_releasing())
            .map(|ep| (ep.metadata.name.clone().unwrap_or_default(), ep.metadata.uid.clone().unwrap_or_default()))
            .collect(),
    };
    let mut errors = Vec::new();
    for (name, uid) in &targets {
        // No UID: an incarnation answered early, perhaps not created yet.
        let res = if uid.is_empty() {
            c.retrying("withdraw an early incarnation", || crate::claim::withdraw(store, who, name)).await
        } else {
            c.retrying("delete a lease", || store.delete(name, uid))
                .await
                .map(|()| info!(lease = %name, "release requested"))
        };
        if let Err(e) = res {
            errors.push(e);
        }
    }
    if errors.is_empty() {
        local.bury(container, if_name);
    }
    Error::collect(errors)
}

/// The endpoint-to-be of an incarnation answered early whose request the
/// hold still carries, accepted, for this attachment.
async fn early_incarnation<S: Leases>(c: &Claiming<'_, S>, name: &str) -> Result<Option<NetworkEndpoint>> {
    let Some((hold_name, k)) = netendpoint_lease::hold::hold_of_incarnation(name) else { return Ok(None) };
    let Some(hold) = c.retrying("read a sticky hold", || c.store.get(hold_name)).await? else { return Ok(None) };
    let accepted = hold.status.as_ref().and_then(|s| s.request.clone()).filter(|r| {
        r.accepted && r.incarnation == k && r.container_id == c.who.key.container_id && r.if_name == c.who.key.if_name
    });
    Ok(accepted.and_then(|r| netendpoint_lease::hold::incarnation_object(&hold, &r)))
}

/// CNI CHECK: the attachment's leases exist, are not releasing, and match `prev`.
pub async fn check<S: Leases + Cluster>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    local: &LocalState,
    prev: &[IpNet],
) -> Result<()> {
    let c = Claiming::new(store, conf, who, Deadline::after(conf.timeout.min(RETRY_WINDOW)));
    let record = local.record_of(&who.key.container_id, &who.key.if_name);
    let eps = match attachment_leases(&c, record).await? {
        Found::Listed(eps) => eps,
        Found::Recorded(named) => {
            let mut eps = Vec::new();
            for (name, uid) in named {
                match c.retrying("read a recorded lease", || store.get(&name)).await? {
                    Some(ep) if ep.metadata.uid.as_deref() == Some(uid.as_str()) => eps.push(ep),
                    // Answered early: the endpoint once created, else the accepted request stands for it.
                    Some(ep) if uid.is_empty() && who.owns(&ep) => eps.push(ep),
                    None if uid.is_empty() => {
                        if let Some(ep) = early_incarnation(&c, &name).await? {
                            eps.push(ep);
                        }
                    }
                    _ => debug!(lease = %name, "recorded lease gone"),
                }
            }
            eps
        }
    };
    for (i, set) in conf.range_sets.iter().enumerate() {
        let Some(ep) = eps.iter().find(|ep| in_set(ep, set)) else {
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
