//! An ADD's place in its pool's queue (invariant 13), the plugin's side.
//!
//! A waiting ADD creates its own entry, `NetworkEndpointNeed
//! <pool>.<node>.<slot>` ([`join`]), naming its Pod, sandbox, family and
//! the deadline of its wait on the API server's clock. netendpoint-controller
//! orders the entries of a pool by arrival (the resourceVersion of their
//! creation) and writes into each the address promised to it; the ADD
//! watches its entry by name and claims what it is promised
//! (`crate::dynamic`). It deletes the entry when it stops waiting, served
//! or not ([`leave`]); one it could not delete lapses at its deadline.
//!
//! The slot bounds a node's entries per pool ([`MAX_NEED_SLOTS`]), so even
//! a compromised node holds a bounded part of any queue.

use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;
use kube::api::ObjectMeta;
use netendpoint_crd::need::{MAX_NEED_SPANS, format_span};
use netendpoint_crd::{MAX_NEED_SLOTS, NetworkEndpointNeed, NetworkEndpointNeedSpec, Promise, need_name};
use tracing::{debug, info, warn};

use crate::claim::{Claiming, Deadline};
use crate::store::{Clock, Queue};
use netendpoint_netconf::RangeSet;

/// Slots one ADD tries before it waits without an entry.
pub const SLOT_TRIES: u8 = 8;

/// This ADD's entry in the queue.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its name.
    pub name: String,
    /// Its UID (the delete's precondition).
    pub uid: String,
    /// The entry as last seen.
    pub seen: NetworkEndpointNeed,
}

impl Entry {
    /// True once the controller ordered the entry (its arrival is written).
    pub fn acknowledged(&self) -> bool {
        self.seen.status.as_ref().is_some_and(|s| s.arrival.is_some())
    }

    /// The address promised to this ADD, if any.
    pub fn promise(&self) -> Option<&Promise> {
        self.seen.status.as_ref().and_then(|s| s.promise.as_ref())
    }

    /// Why the controller does not serve the entry, if it said so.
    pub fn message(&self) -> Option<&str> {
        self.seen.status.as_ref().and_then(|s| s.message.as_deref())
    }
}

/// The entry this ADD would create in `slot`, waiting until `wait` ends.
fn entry_object<S: Clock>(
    c: &Claiming<'_, S>,
    set: &RangeSet,
    slot: u8,
    wait: Deadline,
) -> Option<NetworkEndpointNeed> {
    let pod = c.who.pod_ref().filter(|p| !p.uid.is_empty())?;
    let now = c.store.server_now()?;
    let left = wait.remaining();
    let deadline = now.checked_add(SignedDuration::try_from(left).ok()?).ok()?;
    let name = need_name(&c.conf.pool, &c.who.node, Some(slot));
    if name.len() > 253 {
        return None;
    }
    let spec = NetworkEndpointNeedSpec {
        pool: c.conf.pool.clone(),
        node: c.who.node.clone(),
        pod,
        wait_seconds: u32::try_from(left.as_secs().saturating_add(1))
            .unwrap_or(u32::MAX)
            .min(netendpoint_crd::need::MAX_NEED_WAIT_SECONDS),
        slot: Some(slot),
        ip_family: Some(set.family()),
        container_id: Some(c.who.key.container_id.clone()),
        if_name: Some(c.who.key.if_name.clone()),
        deadline: Some(Time(deadline)),
        spans: announced_spans(set),
    };
    Some(NetworkEndpointNeed { metadata: ObjectMeta { name: Some(name), ..ObjectMeta::default() }, spec, status: None })
}

/// The spans an entry announces: the set's usable addresses, or none when
/// they take more than [`MAX_NEED_SPANS`] (the controller then promises
/// from the pool's ranges as it knows them).
fn announced_spans(set: &RangeSet) -> Option<Vec<String>> {
    let spans = set.usable_spans();
    (spans.len() <= MAX_NEED_SPANS).then(|| spans.into_iter().map(|(a, b)| format_span(a, b)).collect())
}

/// Why an ADD has no entry in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoEntry {
    /// Every slot tried was taken by this node's other waiting ADDs: worth
    /// trying again once some of them are served.
    SlotsTaken,
    /// This ADD cannot have one: the runtime passed no Pod UID, or the API
    /// server refused.
    Cannot,
}

/// Joins the queue of `set`'s family: creates this ADD's entry in a free slot.
/// The first slot tried is chosen by a hash of the sandbox, so that a
/// node's waiting ADDs rarely meet, and moves on by [`SLOT_TRIES`] each
/// `round`, so that the rounds of one ADD try every slot in turn. With no
/// entry, the ADD waits without a place in the queue, and says so.
pub async fn join<S: Clock + Queue>(
    c: &mut Claiming<'_, S>,
    set: &RangeSet,
    wait: Deadline,
    round: u8,
) -> Result<Entry, NoEntry> {
    let hash = netendpoint_netconf::allocator::spread_hash(&c.who.key.container_id);
    let first =
        (hash % u64::from(MAX_NEED_SLOTS) + u64::from(round) * u64::from(SLOT_TRIES)) % u64::from(MAX_NEED_SLOTS);
    for i in 0..u64::from(SLOT_TRIES) {
        let slot = u8::try_from((first + i) % u64::from(MAX_NEED_SLOTS)).unwrap_or(0);
        let Some(obj) = entry_object(c, set, slot, wait) else {
            debug!("no Pod UID from the runtime (or no answer from the API server yet): waiting without an entry");
            return Err(NoEntry::Cannot);
        };
        let name = obj.metadata.name.clone().unwrap_or_default();
        match c.retrying("join the queue", || c.store.join(&obj)).await {
            Ok(Some(created)) => {
                let uid = created.metadata.uid.clone().unwrap_or_default();
                info!(entry = %name, pool = %c.conf.pool, family = ?set.family(), round, "pool full: waiting in its queue");
                c.entries.push((name.clone(), uid.clone()));
                return Ok(Entry { name, uid, seen: created });
            }
            Ok(None) => debug!(entry = %name, "slot taken; trying the next"),
            Err(e) => {
                warn!(entry = %name, error = %e, "cannot join the queue: waiting without an entry");
                return Err(NoEntry::Cannot);
            }
        }
    }
    warn!(pool = %c.conf.pool, node = %c.who.node, tries = SLOT_TRIES, round,
        "every queue slot tried is taken by this node's other waiting ADDs: waiting without an entry, and trying again at the next look");
    Err(NoEntry::SlotsTaken)
}

/// Deletes this ADD's entry (served or not). A failure is logged: the
/// entry then lapses at its deadline, and the controller deletes it.
pub async fn leave<S: Queue>(c: &mut Claiming<'_, S>, name: &str) {
    let Some(pos) = c.entries.iter().position(|(n, _)| n == name) else { return };
    let (name, uid) = c.entries.remove(pos);
    if let Err(e) = c.retrying("leave the queue", || c.store.leave(&name, &uid)).await {
        warn!(entry = %name, error = %e, "cannot delete the queue entry; it lapses at its deadline");
    }
}

/// The address of `promise` if it is one this ADD may create in `set`: in
/// the set, and named as the pool names it.
pub fn promised_address(pool: &str, set: &RangeSet, promise: &Promise) -> Option<IpAddr> {
    let ip: IpAddr = promise.ip.parse().ok()?;
    (set.is_usable(ip) && promise.lease == netendpoint_crd::endpoint_name(pool, ip)).then_some(ip)
}
