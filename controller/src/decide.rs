//! What the controller does, decided over plain data: no Kubernetes here.
//!
//! [`decide`] takes a snapshot of the cluster ([`World`]), the settings and
//! what earlier passes saw ([`Memory`]), and the API server's time, and
//! returns the [`Action`]s to take plus when to look again. It is a short
//! sequence of named passes; each action acts on exactly one object,
//! identified by name and UID (and, for holds, resourceVersion), so a
//! successor under the same name is never touched.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use netendpoint_netconf::RangeSet;

use k8s_openapi::jiff::Timestamp;
use netendpoint_crd::ipamclaim::{statefulset_claim_name, statefulset_ordinal, statefulset_pod_name};
use netendpoint_crd::{IncarnationRequest, IpFamily, NetworkEndpointNeedStatus};
use netendpoint_lease::addr::{from_u128, to_u128};
pub use netendpoint_lease::pools::Capacity;
pub use netendpoint_lease::queue::Waiter;
use netendpoint_lease::queue::{Supply, assign_where};
pub use netendpoint_lease::view::{Hold, Lease, Sticky};
use netendpoint_lease::{ReleaseState, Seen, Sightings, age_at_least, release_state};

/// How much of an incarnation request's wait must be left (on the API
/// server's clock, read as a lower bound) for the controller to create or
/// accept it, so that the asking ADD sees the answer before it gives up. A
/// refusal needs no margin. The margin only saves work: an incarnation
/// created after its request was withdrawn is deleted at once by the
/// controller that made it (its status write, which tests the hold's
/// resourceVersion, fails).
pub const DEADLINE_MARGIN: Duration = Duration::from_millis(500);

/// Most addresses of one set of announced spans looked at in a pass (a
/// full IPv4 /12): beyond it, a waiter is offered the pool's free addresses only.
const SPAN_SCAN_LIMIT: usize = 1 << 20;

/// An ADD that waits for an IP of `pool` (a `NetworkEndpointNeed` whose
/// Pod the controller checked: it exists, is bound to the need's node and
/// has not started).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    /// Stable key: the need's name and resourceVersion.
    pub key: String,
    /// The pool.
    pub pool: String,
    /// Until when the ADD waits, on the API server's clock.
    pub until: Timestamp,
}

/// An `IPAMClaim` as the controller reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClaimFacts {
    /// Its UID.
    pub uid: String,
    /// Its addresses (`status.ips`).
    pub ips: Vec<IpAddr>,
    /// The StatefulSet whose Pod it was created for (label `netendpoint.dev/statefulset`).
    pub statefulset: Option<String>,
    /// Its network (`spec.network`).
    pub network: String,
}

/// A network whose StatefulSet Pods are sticky (`ipam.sticky` with `StatefulSet`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickyNetwork {
    /// The network's pool.
    pub pool: String,
    /// The CNI network name.
    pub network: String,
}

/// A snapshot of what the controller watches.
#[derive(Debug, Default)]
pub struct World {
    /// Every endpoint (incarnations and leases of older versions included).
    pub leases: Vec<Arc<Lease>>,
    /// Every sticky hold.
    pub holds: Vec<Hold>,
    /// Names of the Node objects.
    pub nodes: HashSet<String>,
    /// UIDs of the Pod objects.
    pub pod_uids: HashSet<String>,
    /// Waiting ADDs of older plugins (one entry per node and pool) whose Pod was checked.
    pub needs: Vec<Need>,
    /// The queue entries of waiting ADDs, checked or not.
    pub waiters: Vec<Waiter>,
    /// The check of each entry's Pod, by entry UID: `Ok` when it waits for
    /// its sandbox on the entry's node, else why not. An entry not checked
    /// yet is neither served nor dropped.
    pub believed: HashMap<String, Result<(), String>>,
    /// The range sets of each pool whose network config is known: where
    /// its free addresses are.
    pub ranges: HashMap<String, Vec<RangeSet>>,
    /// Known capacities, by pool.
    pub capacity: HashMap<String, Capacity>,
    /// For pools without a known capacity: the addresses admission lets
    /// them lease, from their entry in `netendpoint-pools` (what the
    /// pool-ranges policy enforces). Every lease or hold of the pool is one
    /// of them, so a family is full once as many are in use.
    pub capacity_bound: HashMap<String, Capacity>,
    /// The StatefulSets, (namespace, name) → spec.replicas.
    pub statefulsets: HashMap<(String, String), i64>,
    /// True once the StatefulSets were listed: without that list no hold
    /// ends and no claim is made or deleted for a StatefulSet.
    pub statefulsets_known: bool,
    /// The claims, (namespace, name) → facts.
    pub claims: HashMap<(String, String), ClaimFacts>,
    /// True once the claims were listed (the IPAMClaim CRD is installed).
    pub claims_known: bool,
    /// Networks whose StatefulSet Pods get a claim.
    pub sticky_networks: Vec<StickyNetwork>,
    /// The leases of `leases` whose views were read for this snapshot
    /// (objects new or changed since the last one), when the snapshot knows
    /// them; `None` when it does not, and every lease counts as new.
    pub fresh: Option<Vec<Arc<Lease>>>,
}

/// The controller's settings that decisions depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// How long a lease's node must have been absent, seen twice, before its lease is deleted.
    pub vanished_node_grace: Duration,
    /// How long a lease's Pod must have been absent, seen twice, before the
    /// lease is deleted; `None` turns this cleanup off.
    pub pod_gone_grace: Option<Duration>,
    /// The forced-release bound of leases without their own stamp.
    pub default_force_release_after: Duration,
    /// How long a sticky claim must have had no Pod before pool pressure
    /// may end its hold (`--pressure-after`).
    pub pressure_after: Duration,
}

/// What earlier passes saw. Lost on restart or on a change of leader, which
/// only delays actions: every grace starts again.
#[derive(Debug, Default)]
pub struct Memory {
    nodes_absent: Sightings<String>,
    pods_absent: Sightings<String>,
    /// Holds without a live incarnation, by UID: stickyFor counts from the first sighting.
    holds_idle: Sightings<String>,
    /// Holds whose claim is gone or points elsewhere, and leases of older
    /// versions whose StatefulSet is gone or scaled down: (UID, reason).
    evidence: Sightings<(String, HoldEnd)>,
    /// StatefulSet claims beyond their StatefulSet's replicas, or of a gone one.
    surplus_claims: Sightings<(String, String)>,
    /// Needs already served.
    served: HashSet<String>,
    /// The status last written into each queue entry (by UID), so that a
    /// write the watch has not shown yet is not made again.
    promised: HashMap<String, NetworkEndpointNeedStatus>,
    /// The queue entries this pass promised nothing.
    unserved: Vec<Waiter>,
    /// Objects already acted on (UIDs, with the incarnation for a hold's
    /// request), until they leave the snapshot.
    acted: HashSet<String>,
    /// For each pool whose ranges the controller does not know (its
    /// network is configured elsewhere): every address it saw allocated
    /// there (a lease that is no static request, or a hold). Each was in the
    /// pool's dynamic ranges when the plugin chose it, so the queue may
    /// promise it once it is free again. At most one entry per address.
    allocated_seen: HashMap<String, BTreeSet<IpAddr>>,
    /// True once a full pass of this term noted every lease's address:
    /// later passes note only their snapshot's fresh leases.
    allocations_noted: bool,
}

/// Why a sticky hold ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HoldEnd {
    /// Its claim is gone (or is another claim under the same name).
    ClaimGone,
    /// Its claim points at another address.
    Superseded,
    /// The StatefulSet is gone (leases of older versions).
    OwnerDeleted,
    /// The StatefulSet was scaled below the Pod's ordinal (leases of older versions).
    ScaledDown,
    /// `stickyFor` passed with no incarnation.
    Expired,
    /// An ADD needs an address of the pool and no other release can serve it.
    PoolPressure,
}

impl HoldEnd {
    /// A short description for the Event and the log.
    pub fn describe(self) -> &'static str {
        match self {
            Self::ClaimGone => "its claim was deleted",
            Self::Superseded => "its claim holds another address",
            Self::OwnerDeleted => "its StatefulSet was deleted",
            Self::ScaledDown => "its StatefulSet was scaled below the Pod's ordinal",
            Self::Expired => "stickyFor passed with no incarnation",
            Self::PoolPressure => "an ADD needs an IP of the pool and no other release can serve it",
        }
    }
}

/// The waiting ADD pool pressure ends a hold for: its entry (a queue
/// entry's name and UID, or an older plugin's need as `name@resourceVersion`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PressureFor {
    /// The entry's name.
    pub entry: String,
    /// Its UID, or for an older plugin's need the resourceVersion it was believed at.
    pub version: String,
    /// True for an entry of the queue (the executor reads a need otherwise).
    pub queued: bool,
}

/// Why a release is forced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForceFor {
    /// A waiting ADD of the pool (the need's key).
    Need(String),
    /// The next incarnation of a hold (the hold's name).
    Incarnation(String),
}

/// One write the controller decided on.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Delete a live lease of a node absent for the grace (finalizers still gate the release).
    Reclaim {
        /// The lease.
        lease: Lease,
    },
    /// Delete a live lease whose Pod has been absent for the grace.
    DeleteLeak {
        /// The lease.
        lease: Lease,
    },
    /// Remove every finalizer of a release older than its bound.
    Force {
        /// The releasing lease.
        lease: Lease,
        /// Its age, a lower bound on the API server's clock.
        age: Duration,
        /// The bound it outlived.
        bound: Duration,
        /// What needs it.
        why: ForceFor,
    },
    /// Create the incarnation a hold asks for (after checking its Pod).
    CreateIncarnation {
        /// The hold.
        hold: Box<Hold>,
        /// The request.
        request: IncarnationRequest,
    },
    /// Accept a request while the previous incarnation is live (a claim
    /// that is not a StatefulSet's: a VM's live migration), after checking
    /// its Pod; the incarnation itself follows once the previous is gone.
    AcceptIncarnation {
        /// The hold.
        hold: Box<Hold>,
        /// The request.
        request: IncarnationRequest,
    },
    /// Start ending a hold.
    ReleaseHold {
        /// The hold.
        hold: Box<Hold>,
        /// Why.
        reason: HoldEnd,
        /// For pool pressure: the waiting ADD it is ended for. The executor
        /// reads that ADD's entry and the claim's Pod and StatefulSet from
        /// the API server first, and ends nothing if any read fails or
        /// shows the ADD served or the identity coming back.
        for_waiter: Option<PressureFor>,
    },
    /// Write a queue entry's status: its arrival and the address promised to it.
    Promise {
        /// The entry.
        waiter: Box<Waiter>,
        /// Its new status.
        status: NetworkEndpointNeedStatus,
        /// Its place in its queue (from 1), and the queue's length.
        place: (usize, usize),
    },
    /// Delete a queue entry: its Pod does not wait for its sandbox on its
    /// node, or its deadline passed.
    DropEntry {
        /// The entry.
        waiter: Box<Waiter>,
        /// Why.
        why: String,
    },
    /// Delete a releasing hold whose incarnation is gone.
    DeleteHold {
        /// The hold.
        hold: Box<Hold>,
    },
    /// Remove the sticky-hold finalizer of a lease of an older version.
    EndLegacyHold {
        /// The held lease.
        lease: Lease,
        /// Why.
        reason: HoldEnd,
    },
    /// Create the claim of a StatefulSet Pod.
    CreateClaim {
        /// Namespace.
        namespace: String,
        /// Claim name (`<pod>.<pool>`).
        name: String,
        /// The network.
        network: String,
        /// The StatefulSet.
        statefulset: String,
        /// The address (`<ip>/<prefix>`) a lease of an older version holds
        /// for the claim's Pod (the sticky-hold finalizer): written into
        /// the new claim's status, so that the Pod's next ADD continues it.
        legacy: Option<String>,
    },
    /// Delete a StatefulSet Pod's claim.
    DeleteClaim {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// UID (precondition).
        uid: String,
    },
}

/// What one pass decided.
#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    /// Writes to make, in order.
    pub actions: Vec<Action>,
    /// When a pending grace or bound ends, so the next pass comes in time.
    pub look_again_in: Option<Duration>,
}

/// Decides one pass. Guarantees:
/// - a lease is reclaimed only when its node was absent in an earlier pass
///   too, at least `vanished_node_grace` before `now`, and is absent now;
/// - a lease is deleted as leaked only when its Pod UID was absent in an
///   earlier pass too, at least `pod_gone_grace` before, and is absent now;
/// - a hold's next incarnation is created only once the previous one is gone
///   (the action's executor checks the Pod and reads the previous
///   incarnation again before it creates); a previous incarnation stuck past
///   its own bound is forced for it;
/// - each pool's queue is served in arrival order: every free address and
///   release in progress of its family is promised to one waiting ADD at
///   most, the one that waited longest ([`netendpoint_lease::queue::assign`]);
///   an entry whose Pod is not waiting on its node, or whose deadline
///   passed, is deleted;
/// - a release is forced for a waiting ADD only when the release is promised
///   to it (or, for an older plugin's need, its need is still open and the
///   family of its IP is full), and it is at least its own bound old; never
///   a hold or an incarnation;
/// - a hold ends (is marked releasing, then deleted once its incarnation is
///   gone) when its claim is gone or holds another address (seen twice),
///   or when it had no incarnation for `stickyFor`. Pool pressure ends one
///   only for a waiting ADD that nothing else can serve, in a pool whose
///   capacity is known and full, when the hold has been idle for
///   `pressure_after` and its StatefulSet (if any) no longer wants its
///   ordinal; the executor checks the ADD and the claim's Pod again first;
/// - a StatefulSet Pod's claim is created for each ordinal below
///   `replicas` of each sticky network, and deleted (seen twice) when the
///   StatefulSet is gone or scaled below it.
pub fn decide(world: &World, settings: &Settings, memory: &mut Memory, now: Timestamp) -> Decision {
    let mut pass = Pass { world, settings, memory, now, decision: Decision::default() };
    pass.forget_what_left();
    pass.reclaim_vanished_nodes();
    pass.delete_leases_of_gone_pods();
    pass.serve_holds();
    pass.serve_queue(true);
    pass.serve_needs();
    pass.end_holds();
    pass.end_legacy_holds();
    pass.statefulset_claims();
    pass.decision
}

/// The queues alone: what [`decide`] decides for the waiting ADDs (the
/// promises, the releases forced for them, the entries dropped), and
/// nothing else. `world` may hold only the leases and holds of the waiters'
/// pools, since serving a pool's queue reads nothing of another pool: a
/// release reaches its waiter without a pass over every lease of the
/// cluster. What it writes is remembered in `memory` as [`decide`] would,
/// so the next full pass does not write it again.
pub fn serve_queues(world: &World, settings: &Settings, memory: &mut Memory, now: Timestamp) -> Decision {
    let mut pass = Pass { world, settings, memory, now, decision: Decision::default() };
    pass.serve_queue(false);
    pass.decision
}

/// The key of a decision to end `hold` for its own reasons: per
/// resourceVersion, since the executor's releasing patch tests it. A
/// request that landed in between wins, and once the hold has changed the
/// end is decided again.
fn end_key(hold: &Hold) -> String {
    format!("{}#end@{}", hold.uid, hold.resource_version)
}

struct Pass<'a> {
    world: &'a World,
    settings: &'a Settings,
    memory: &'a mut Memory,
    now: Timestamp,
    decision: Decision,
}

impl Pass<'_> {
    fn secs(&self) -> i64 {
        self.now.as_second()
    }

    fn soonest(&mut self, d: Duration) {
        self.decision.look_again_in = Some(self.decision.look_again_in.map_or(d, |x| x.min(d)));
    }

    fn act(&mut self, key: String, action: Action) {
        if self.memory.acted.insert(key) {
            self.decision.actions.push(action);
        }
    }

    /// Keeps only what concerns objects still in the snapshot.
    fn forget_what_left(&mut self) {
        if self.memory.acted.is_empty() {
            return;
        }
        let present: HashSet<&str> = self
            .world
            .leases
            .iter()
            .map(|l| l.uid.as_str())
            .chain(self.world.holds.iter().map(|h| h.uid.as_str()))
            .chain(self.world.claims.values().map(|c| c.uid.as_str()))
            .chain(self.world.waiters.iter().map(|w| w.uid.as_str()))
            .collect();
        self.memory
            .acted
            .retain(|k| present.contains(k.split('#').next().unwrap_or_default()) || k.starts_with("claim/"));
    }

    /// Evidence `key` seen this pass; a pass soon if its grace is pending.
    fn sighted(&mut self, seen: Seen, grace: Duration) -> bool {
        let now = self.secs();
        if seen.ripe(now, grace) {
            return true;
        }
        let left = if seen.repeated { seen.ripens_in(now, grace) } else { grace };
        self.soonest(left.max(Duration::from_secs(1)) + Duration::from_secs(u64::from(!seen.repeated)));
        false
    }

    fn reclaim_vanished_nodes(&mut self) {
        let grace = self.settings.vanished_node_grace;
        let absent: Vec<String> = self
            .world
            .leases
            .iter()
            .filter(|l| l.releasing_since.is_none() && !l.node.is_empty() && !self.world.nodes.contains(&l.node))
            .map(|l| l.node.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut gone = HashSet::new();
        for node in absent {
            let seen = self.memory.nodes_absent.see(node.clone(), self.secs());
            if self.sighted(seen, grace) {
                gone.insert(node);
            }
        }
        self.memory.nodes_absent.end_pass();
        for l in self.world.leases.iter().filter(|l| l.releasing_since.is_none() && gone.contains(&l.node)) {
            self.act(l.uid.clone(), Action::Reclaim { lease: Lease::clone(l) });
        }
    }

    fn delete_leases_of_gone_pods(&mut self) {
        let Some(grace) = self.settings.pod_gone_grace else {
            self.memory.pods_absent = Sightings::default();
            return;
        };
        let absent: std::collections::BTreeSet<String> = self
            .world
            .leases
            .iter()
            .filter(|l| l.releasing_since.is_none())
            .filter_map(|l| l.pod_uid())
            .filter(|uid| !self.world.pod_uids.contains(*uid))
            .map(str::to_string)
            .collect();
        let mut gone = HashSet::new();
        for uid in absent {
            let seen = self.memory.pods_absent.see(uid.clone(), self.secs());
            if self.sighted(seen, grace) {
                gone.insert(uid);
            }
        }
        self.memory.pods_absent.end_pass();
        for l in self.world.leases.iter().filter(|l| l.releasing_since.is_none()) {
            if l.pod_uid().is_some_and(|u| gone.contains(u)) {
                self.act(l.uid.clone(), Action::DeleteLeak { lease: Lease::clone(l) });
            }
        }
    }

    fn lease_named(&self, name: &str) -> Option<&Lease> {
        self.world.leases.iter().map(|l| &**l).find(|l| l.name == name)
    }

    fn state_of(&self, l: &Lease) -> ReleaseState {
        release_state(
            l.releasing_since,
            l.force_release_after,
            self.settings.default_force_release_after,
            Some(self.now),
        )
    }

    /// Creates each incarnation a hold asks for once the previous one is
    /// gone; forces the previous one when it outlived its bound.
    fn serve_holds(&mut self) {
        for hold in self.world.holds.iter().filter(|h| !h.releasing) {
            let Some(request) = hold.pending.clone() else { continue };
            let previous = hold.incarnation.as_ref().and_then(|(_, name)| self.lease_named(name)).cloned();
            match previous {
                None => {
                    // Per request: a refused one must not hide the next
                    // request for the same incarnation (another sandbox or Pod).
                    let key =
                        format!("{}#{}#{}#{}", hold.uid, request.incarnation, request.container_id, request.pod.uid);
                    self.act(key, Action::CreateIncarnation { hold: Box::new(hold.clone()), request });
                }
                Some(prev) => {
                    if !request.accepted && self.migrates(hold) {
                        let key = format!(
                            "{}#{}#{}#{}#accept",
                            hold.uid, request.incarnation, request.container_id, request.pod.uid
                        );
                        let action = Action::AcceptIncarnation { hold: Box::new(hold.clone()), request };
                        self.act(key, action);
                    }
                    // Live: its sandbox's DEL has not come. Releasing: wait, or force once stuck.
                    if prev.releasing_since.is_some() {
                        match self.state_of(&prev) {
                            ReleaseState::Stuck { age, bound } => {
                                let why = ForceFor::Incarnation(hold.name.clone());
                                self.act(prev.uid.clone(), Action::Force { lease: prev, age, bound, why });
                            }
                            ReleaseState::Young { left: Some(left) } => self.soonest(left),
                            _ => {}
                        }
                    }
                }
            }
        }
    }

    /// True if `hold`'s claim is one whose next Pod may start while the
    /// current one runs (not a StatefulSet's: a VM's, which migrates).
    fn migrates(&self, hold: &Hold) -> bool {
        self.world.claims_known
            && self
                .world
                .claims
                .get(&(hold.claim.namespace.clone(), hold.claim.name.clone()))
                .is_some_and(|c| c.uid == hold.claim.uid && c.statefulset.is_none())
    }

    /// True if the family of `ip` in `pool` is full (or its capacity is unknown).
    fn family_full(&self, pool: &str, ip: Option<IpAddr>) -> bool {
        let (Some(cap), Some(ip)) = (self.world.capacity.get(pool), ip) else { return true };
        let in_family = |a: Option<IpAddr>| a.is_some_and(|a| a.is_ipv4() == ip.is_ipv4());
        let used =
            self.world.leases.iter().filter(|l| l.pool == pool && l.incarnation.is_none() && in_family(l.ip)).count()
                + self.world.holds.iter().filter(|h| h.pool == pool && in_family(Some(h.ip))).count();
        used as u128 >= cap.of(ip)
    }

    /// True if the family of `ip` in `pool` is known full: its capacity is
    /// known and every address is leased or held. A pool whose capacity is
    /// unknown is never full for ending a hold (invariant 15).
    fn known_full(&self, pool: &str, ip: IpAddr) -> bool {
        if self.world.capacity.contains_key(pool) {
            return self.world.capacity.get(pool).is_some_and(|c| c.of(ip) > 0) && self.family_full(pool, Some(ip));
        }
        let Some(bound) = self.world.capacity_bound.get(pool).map(|c| c.of(ip)).filter(|b| *b > 0) else {
            return false;
        };
        let in_family = |a: IpAddr| a.is_ipv4() == ip.is_ipv4();
        let used = self
            .world
            .leases
            .iter()
            .filter(|l| l.pool == pool && l.incarnation.is_none() && l.ip.is_some_and(in_family))
            .count()
            + self.world.holds.iter().filter(|h| h.pool == pool && in_family(h.ip)).count();
        used as u128 >= bound
    }

    /// The releases in progress of `pool` in `family` that a waiting ADD may
    /// be promised (never a hold's, an incarnation's or an older version's
    /// sticky lease), the oldest first.
    fn releases(&self, pool: &str, family: IpFamily) -> Vec<(IpAddr, String)> {
        let mut out: Vec<&Lease> = self
            .world
            .leases
            .iter()
            .map(|l| &**l)
            .filter(|l| l.pool == pool && l.releasing_since.is_some() && l.incarnation.is_none() && !l.is_held())
            .filter(|l| l.ip.is_some_and(|ip| IpFamily::of(ip) == family))
            .collect();
        out.sort_by(|a, b| (a.releasing_since, &a.name).cmp(&(b.releasing_since, &b.name)));
        out.into_iter().filter_map(|l| Some((l.ip?, l.name.clone()))).collect()
    }

    /// Addresses of `pool` in `family` that no lease or hold holds, for
    /// `queue`: up to one per waiter from the pool's ranges when they are
    /// known, otherwise among the addresses seen allocated there
    /// ([`Memory::allocated_seen`]); and for the waiters that announced the
    /// spans they can take, up to as many from those spans (inside the
    /// pool's ranges when they are known), so that a waiter is offered an
    /// address it can take even when the first free ones are not.
    fn free_addresses(&self, pool: &str, family: IpFamily, queue: &[Waiter]) -> Vec<IpAddr> {
        let n = queue.len();
        let taken: HashSet<IpAddr> = self
            .world
            .leases
            .iter()
            .filter(|l| l.pool == pool && l.incarnation.is_none())
            .filter_map(|l| l.ip)
            .chain(self.world.holds.iter().filter(|h| h.pool == pool).map(|h| h.ip))
            .collect();
        let free = |ip: &IpAddr| !taken.contains(ip) && IpFamily::of(*ip) == family;
        let known = self.world.ranges.get(pool);
        let mut out: Vec<IpAddr> = match known {
            Some(sets) => sets.iter().flat_map(|s| s.candidates(None)).filter(free).take(n).collect(),
            None => self.memory.allocated_seen.get(pool).into_iter().flatten().copied().filter(free).take(n).collect(),
        };
        let in_pool = |ip: &IpAddr| known.is_none_or(|sets| sets.iter().any(|s| s.is_usable(*ip)));
        let mut offered: HashSet<&[(IpAddr, IpAddr)]> = HashSet::new();
        for spans in queue.iter().filter_map(|w| w.spans.as_deref()) {
            if !offered.insert(spans) {
                continue;
            }
            let fresh: Vec<IpAddr> = spans
                .iter()
                .flat_map(|(a, b)| (to_u128(*a)..=to_u128(*b)).map(|v| from_u128(*a, v)))
                .take(SPAN_SCAN_LIMIT)
                .filter(|ip| free(ip) && in_pool(ip) && !out.contains(ip))
                .take(n)
                .collect();
            out.extend(fresh);
        }
        out
    }

    /// Notes the addresses allocated in pools whose ranges are unknown.
    /// A lease's pool and address never change, so once a full pass of
    /// this term (`whole`: its snapshot holds every lease) noted them all,
    /// only the snapshot's fresh leases are read: at 118,000 leases,
    /// noting every one again took about a third of a full pass.
    fn see_allocations(&mut self, whole: bool) {
        let ranges = &self.world.ranges;
        let leases = match &self.world.fresh {
            Some(fresh) if self.memory.allocations_noted => fresh,
            _ => {
                self.memory.allocations_noted |= whole;
                &self.world.leases
            }
        };
        let leased = leases.iter().filter(|l| !l.static_ip).filter_map(|l| Some((&l.pool, l.ip?)));
        let held = self.world.holds.iter().map(|h| (&h.pool, h.ip));
        for (pool, ip) in leased.chain(held).filter(|(pool, _)| !ranges.contains_key(*pool)) {
            // A pool's name is copied once, not per lease: a pass sees every lease.
            match self.memory.allocated_seen.get_mut(pool.as_str()) {
                Some(seen) => {
                    seen.insert(ip);
                }
                None => {
                    self.memory.allocated_seen.entry(pool.clone()).or_default().insert(ip);
                }
            }
        }
        self.memory.allocated_seen.retain(|pool, _| !ranges.contains_key(pool));
    }

    /// Serves each pool's queue in arrival order: promises its free
    /// addresses and its releases in progress ([`assign_where`]), forces a
    /// promised release that outlived its bound, and deletes the entries
    /// whose Pod does not wait on their node or whose deadline passed.
    /// `whole` when the snapshot holds every lease (a full pass).
    fn serve_queue(&mut self, whole: bool) {
        self.see_allocations(whole);
        let now = self.now;
        let mut queues: BTreeMap<(String, IpFamily), Vec<Waiter>> = BTreeMap::new();
        for w in &self.world.waiters {
            let why = match self.world.believed.get(&w.uid) {
                None => continue,
                Some(Err(why)) => Some(why.clone()),
                Some(Ok(())) if w.deadline <= now => Some("its deadline passed: the ADD no longer waits".to_string()),
                Some(Ok(())) => None,
            };
            match why {
                Some(why) => {
                    let action = Action::DropEntry { waiter: Box::new(w.clone()), why };
                    self.act(format!("{}#drop", w.uid), action);
                }
                None => queues.entry((w.pool.clone(), w.family)).or_default().push(w.clone()),
            }
        }
        self.memory.promised.retain(|uid, _| self.world.waiters.iter().any(|w| &w.uid == uid));
        self.memory.unserved.clear();
        for ((pool, family), mut queue) in queues {
            queue.sort_by_key(|w| w.arrival);
            let supply =
                Supply { free: self.free_addresses(&pool, family, &queue), releasing: self.releases(&pool, family) };
            let current: Vec<Option<&netendpoint_crd::Promise>> = queue.iter().map(Waiter::promise).collect();
            let promises = assign_where(&pool, &current, |i, ip| queue[i].can_take(ip), &supply);
            let n = queue.len();
            for (i, (w, promise)) in queue.iter().zip(promises).enumerate() {
                if let Some(lease) =
                    promise.as_ref().filter(|p| p.releasing).and_then(|p| self.lease_named(&p.lease)).cloned()
                {
                    match self.state_of(&lease) {
                        ReleaseState::Stuck { age, bound } => {
                            let why = ForceFor::Need(w.name.clone());
                            self.act(lease.uid.clone(), Action::Force { lease, age, bound, why });
                        }
                        ReleaseState::Young { left: Some(left) } => self.soonest(left),
                        _ => {}
                    }
                }
                if promise.is_none() {
                    self.memory.unserved.push(w.clone());
                }
                let status = NetworkEndpointNeedStatus { arrival: Some(w.arrival.to_string()), promise, message: None };
                let written = self.memory.promised.get(&w.uid);
                if w.status != status && written != Some(&status) {
                    self.memory.promised.insert(w.uid.clone(), status.clone());
                    self.decision.actions.push(Action::Promise {
                        waiter: Box::new(w.clone()),
                        status,
                        place: (i + 1, n),
                    });
                }
            }
            if let Some(w) = queue.first() {
                self.soonest(age_at_least(w.deadline, now).max(Duration::from_secs(1)));
            }
        }
    }

    /// For each open need of an older plugin, the oldest release past its
    /// bound that could serve it (never a hold or an incarnation); failing
    /// that, when no release at all is in progress, pool pressure. Then pool
    /// pressure for the first waiting ADD of each queue that nothing serves.
    fn serve_needs(&mut self) {
        let now = self.now;
        let open: Vec<Need> = self
            .world
            .needs
            .iter()
            .filter(|n| n.until > now && !self.memory.served.contains(&n.key))
            .cloned()
            .collect();
        self.memory.served.retain(|k| self.world.needs.iter().any(|n| &n.key == k));
        for need in open {
            let candidates: Vec<&Lease> = self
                .world
                .leases
                .iter()
                .map(|l| &**l)
                .filter(|l| {
                    l.pool == need.pool && l.releasing_since.is_some() && l.incarnation.is_none() && !l.is_held()
                })
                .filter(|l| !self.memory.acted.contains(&l.uid) && self.family_full(&need.pool, l.ip))
                .collect();
            let mut best: Option<(&Lease, Duration, Duration)> = None;
            let mut pending = None;
            for l in &candidates {
                match self.state_of(l) {
                    ReleaseState::Stuck { age, bound } if best.is_none_or(|(_, a, _)| age > a) => {
                        best = Some((l, age, bound))
                    }
                    ReleaseState::Young { left: Some(left) }
                        if now + left.min(Duration::from_secs(86_400)) < need.until =>
                    {
                        pending = Some(pending.map_or(left, |p: Duration| p.min(left)));
                    }
                    _ => {}
                }
            }
            if let Some(p) = pending {
                self.soonest(p);
            }
            if let Some((l, age, bound)) = best {
                let lease = (*l).clone();
                self.memory.served.insert(need.key.clone());
                self.act(lease.uid.clone(), Action::Force { lease, age, bound, why: ForceFor::Need(need.key.clone()) });
                continue;
            }
            let any_release =
                self.world.leases.iter().any(|l| {
                    l.pool == need.pool && l.releasing_since.is_some() && l.incarnation.is_none() && !l.is_held()
                });
            if any_release {
                continue;
            }
            let (entry, version) = need.key.rsplit_once('@').unwrap_or((need.key.as_str(), ""));
            let why = PressureFor { entry: entry.to_string(), version: version.to_string(), queued: false };
            if self.pressure(&need.pool, None, why) {
                self.memory.served.insert(need.key.clone());
            }
        }
        let unserved = std::mem::take(&mut self.memory.unserved);
        let mut pressed: HashSet<(String, IpFamily)> = HashSet::new();
        for w in &unserved {
            if !pressed.insert((w.pool.clone(), w.family)) {
                continue;
            }
            // The queue promised it nothing: every free address and release
            // went to a waiter before it, so nothing else can serve it.
            let why = PressureFor { entry: w.name.clone(), version: w.uid.clone(), queued: true };
            self.pressure(&w.pool, Some(w.family), why);
        }
        self.memory.unserved = unserved;
    }

    /// Ends, for `why`, the hold of `pool` (in `family`, if given) that has
    /// been idle longest, if one may be ended by pressure: the family is
    /// known full, the hold has been idle for `pressure_after`, and no
    /// StatefulSet still wants its ordinal. True if one was chosen (the
    /// executor still checks the waiting ADD and the claim's Pod first).
    fn pressure(&mut self, pool: &str, family: Option<IpFamily>, why: PressureFor) -> bool {
        let now = self.secs();
        let ripe = now - i64::try_from(self.settings.pressure_after.as_secs()).unwrap_or(i64::MAX);
        let idle_since = |h: &Hold| self.memory.holds_idle.remembered().get(&h.uid).copied();
        // Keyed by hold and waiting ADD, not by the hold alone: the executor
        // may refuse after its own reads, and a refusal must not keep the
        // hold from its other ends (stickyFor, its claim) or from another
        // waiting ADD.
        let key = |h: &Hold| format!("{}#pressure#{}@{}", h.uid, why.entry, why.version);
        let candidates: Vec<(i64, Hold)> = self
            .world
            .holds
            .iter()
            .filter(|h| h.pool == pool && family.is_none_or(|f| f == IpFamily::of(h.ip)))
            .filter(|h| {
                !h.releasing
                    && self.idle(h)
                    && !self.memory.acted.contains(&end_key(h))
                    && !self.memory.acted.contains(&key(h))
            })
            .filter(|h| self.known_full(pool, h.ip) && !self.ordinal_wanted(h))
            // Not seen idle before: [`Self::end_holds`] sees it idle from now, later in this pass.
            .map(|h| (idle_since(h).unwrap_or(now), h.clone()))
            .collect();
        let hold = candidates.iter().filter(|(t, _)| *t <= ripe).min_by_key(|(t, _)| *t).map(|(_, h)| h.clone());
        if hold.is_none() {
            // The pressure stays while the ADD waits: look again when the
            // first candidate has been idle for `pressure_after`, not at
            // the next idle pass.
            if let Some(t) = candidates.iter().map(|(t, _)| *t).min() {
                self.soonest(Duration::from_secs(u64::try_from(t - ripe).unwrap_or(0)));
            }
        }
        if let Some(hold) = hold {
            let key = key(&hold);
            let action =
                Action::ReleaseHold { hold: Box::new(hold), reason: HoldEnd::PoolPressure, for_waiter: Some(why) };
            self.act(key, action);
            return true;
        }
        let legacy = self.oldest_legacy_hold(pool).filter(|l| l.ip.is_some_and(|ip| self.known_full(pool, ip)));
        let Some((lease, since)) = legacy.and_then(|l| Some((l.clone(), l.releasing_since?.as_second()))) else {
            return false;
        };
        if since > ripe {
            self.soonest(Duration::from_secs(u64::try_from(since - ripe).unwrap_or(0)));
            return false;
        }
        self.act(lease.uid.clone(), Action::EndLegacyHold { lease, reason: HoldEnd::PoolPressure });
        true
    }

    /// True when `hold` is a StatefulSet claim's whose StatefulSet still
    /// wants its ordinal (and is not scaled to 0), or when the StatefulSets
    /// are not known: its Pod is coming back.
    fn ordinal_wanted(&self, hold: &Hold) -> bool {
        let key = (hold.claim.namespace.clone(), hold.claim.name.clone());
        let Some(sts) = self.world.claims.get(&key).and_then(|c| c.statefulset.clone()) else { return false };
        if !self.world.statefulsets_known {
            return true;
        }
        let pod = hold.claim.name.strip_suffix(&format!(".{}", hold.pool)).unwrap_or(&hold.claim.name);
        match (
            self.world.statefulsets.get(&(hold.claim.namespace.clone(), sts.clone())),
            statefulset_ordinal(&sts, pod),
        ) {
            (Some(replicas), Some(o)) => *replicas > 0 && o < *replicas,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// True if `hold` has no live incarnation and asks for none.
    fn idle(&self, hold: &Hold) -> bool {
        let current_live = hold
            .incarnation
            .as_ref()
            .and_then(|(_, name)| self.lease_named(name))
            .is_some_and(|l| l.releasing_since.is_none());
        !current_live && hold.pending.is_none()
    }

    fn oldest_legacy_hold(&self, pool: &str) -> Option<Lease> {
        self.world
            .leases
            .iter()
            .filter(|l| {
                l.pool == pool && l.is_held() && l.releasing_since.is_some() && !self.memory.acted.contains(&l.uid)
            })
            .filter(|l| self.family_full(pool, l.ip))
            .min_by_key(|l| l.releasing_since)
            .map(|l| Lease::clone(l))
    }

    /// Ends holds whose claim is gone or points elsewhere (seen twice), or
    /// that had no incarnation for `stickyFor`; deletes a releasing hold
    /// once its incarnation is gone.
    fn end_holds(&mut self) {
        let now = self.secs();
        let holds = self.world.holds.clone();
        for hold in &holds {
            let idle = self.idle(hold);
            if hold.releasing {
                // Its incarnation gone (the executor reads it again first): delete it.
                let current_gone = hold.incarnation.as_ref().is_none_or(|(_, name)| self.lease_named(name).is_none());
                if current_gone {
                    self.act(format!("{}#delete", hold.uid), Action::DeleteHold { hold: Box::new(hold.clone()) });
                }
                continue;
            }
            if idle {
                let seen = self.memory.holds_idle.see(hold.uid.clone(), now);
                if let Some(sticky_for) = hold.sticky_for
                    && self.sighted(seen, sticky_for)
                {
                    self.act(
                        end_key(hold),
                        Action::ReleaseHold {
                            hold: Box::new(hold.clone()),
                            reason: HoldEnd::Expired,
                            for_waiter: None,
                        },
                    );
                    continue;
                }
            }
            if !self.world.claims_known {
                continue;
            }
            let claim = self.world.claims.get(&(hold.claim.namespace.clone(), hold.claim.name.clone()));
            let reason = match claim {
                Some(c) if c.uid != hold.claim.uid => Some(HoldEnd::ClaimGone),
                None => Some(HoldEnd::ClaimGone),
                Some(c) if !c.ips.is_empty() && !c.ips.contains(&hold.ip) && idle => Some(HoldEnd::Superseded),
                _ => None,
            };
            if let Some(r) = reason {
                let seen = self.memory.evidence.see((hold.uid.clone(), r), now);
                if seen.repeated {
                    self.act(
                        end_key(hold),
                        Action::ReleaseHold { hold: Box::new(hold.clone()), reason: r, for_waiter: None },
                    );
                } else {
                    self.soonest(Duration::from_secs(1));
                }
            }
        }
        self.memory.holds_idle.end_pass_keeping(|_| false);
    }

    /// The address (`<ip>/<prefix>`) of Pod `namespace`/`pod` in `pool` that
    /// a lease of an older version keeps sticky (the sticky-hold finalizer),
    /// live or released: the claim made for that Pod starts with it.
    fn legacy_address(&self, namespace: &str, pod: &str, pool: &str) -> Option<String> {
        self.world
            .leases
            .iter()
            .filter(|l| l.pool == pool && l.is_held() && l.incarnation.is_none())
            .filter(|l| l.sticky.as_ref().is_some_and(|s| s.namespace == namespace && s.pod == pod))
            .find_map(|l| l.ip)
            .map(|ip| format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 }))
    }

    /// Leases of older versions held by the sticky-hold finalizer: the hold
    /// ends after its `stickyFor`, or when its StatefulSet is gone or scaled
    /// below the Pod's ordinal (seen twice).
    fn end_legacy_holds(&mut self) {
        let now = self.secs();
        let held: Vec<Lease> = self
            .world
            .leases
            .iter()
            .filter(|l| l.is_held() && l.releasing_since.is_some())
            .map(|l| Lease::clone(l))
            .collect();
        for l in held {
            let (Some(st), Some(since)) = (l.sticky.clone(), l.releasing_since) else { continue };
            let age = age_at_least(self.now, since);
            if age >= st.sticky_for {
                self.act(l.uid.clone(), Action::EndLegacyHold { lease: l, reason: HoldEnd::Expired });
                continue;
            }
            self.soonest(st.sticky_for - age + Duration::from_secs(1));
            if let Some(r) = self.owner_evidence(&st) {
                let seen = self.memory.evidence.see((l.uid.clone(), r), now);
                if seen.repeated {
                    self.act(l.uid.clone(), Action::EndLegacyHold { lease: l, reason: r });
                } else {
                    self.soonest(Duration::from_secs(1));
                }
            }
        }
        self.memory.evidence.end_pass();
    }

    /// What the StatefulSet says about a lease of an older version.
    fn owner_evidence(&self, st: &Sticky) -> Option<HoldEnd> {
        if st.owner_kind != "StatefulSet" || !self.world.statefulsets_known {
            return None;
        }
        match self.world.statefulsets.get(&(st.namespace.clone(), st.owner.clone())) {
            None => Some(HoldEnd::OwnerDeleted),
            Some(replicas) => {
                statefulset_ordinal(&st.owner, &st.pod).filter(|o| o >= replicas).map(|_| HoldEnd::ScaledDown)
            }
        }
    }

    /// One claim per StatefulSet Pod ordinal below `replicas` and sticky
    /// network; claims beyond them, or of a gone StatefulSet, deleted (seen twice).
    fn statefulset_claims(&mut self) {
        if !(self.world.statefulsets_known && self.world.claims_known) || self.world.sticky_networks.is_empty() {
            return;
        }
        let now = self.secs();
        let mut wanted: BTreeMap<(String, String), (String, String, Option<String>)> = BTreeMap::new();
        for ((namespace, sts), replicas) in &self.world.statefulsets {
            for net in &self.world.sticky_networks {
                for i in 0..(*replicas).clamp(0, 100_000) {
                    let pod = statefulset_pod_name(sts, i);
                    if let Some(name) = statefulset_claim_name(&pod, &net.pool) {
                        let legacy = self.legacy_address(namespace, &pod, &net.pool);
                        wanted.insert((namespace.clone(), name), (net.network.clone(), sts.clone(), legacy));
                    }
                }
            }
        }
        for ((namespace, name), (network, statefulset, legacy)) in &wanted {
            if !self.world.claims.contains_key(&(namespace.clone(), name.clone())) {
                let action = Action::CreateClaim {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    network: network.clone(),
                    statefulset: statefulset.clone(),
                    legacy: legacy.clone(),
                };
                self.act(format!("claim/{namespace}/{name}"), action);
            }
        }
        self.memory.acted.retain(|k| {
            !k.starts_with("claim/") || {
                let rest = &k["claim/".len()..];
                rest.split_once('/')
                    .is_some_and(|(ns, n)| !self.world.claims.contains_key(&(ns.to_string(), n.to_string())))
            }
        });
        let surplus: Vec<(String, String, String)> = self
            .world
            .claims
            .iter()
            // Only claims of this controller's sticky networks: another
            // controller (another selector) keeps its own.
            .filter(|((ns, name), c)| {
                c.statefulset.is_some()
                    && self.world.sticky_networks.iter().any(|n| n.network == c.network)
                    && !wanted.contains_key(&(ns.clone(), name.clone()))
            })
            .map(|((ns, name), c)| (ns.clone(), name.clone(), c.uid.clone()))
            .collect();
        for (namespace, name, uid) in surplus {
            let seen = self.memory.surplus_claims.see((namespace.clone(), name.clone()), now);
            if seen.repeated {
                self.act(uid.clone(), Action::DeleteClaim { namespace, name, uid });
            } else {
                self.soonest(Duration::from_secs(1));
            }
        }
        self.memory.surplus_claims.end_pass();
    }
}

/// The addresses promised to waiting ADDs once `decision` is written: what
/// each entry's status says, or what this pass writes into it.
pub fn promised(world: &World, decision: &Decision) -> Vec<(String, IpAddr)> {
    let mut by_uid: HashMap<&str, (&str, Option<&netendpoint_crd::Promise>)> =
        world.waiters.iter().map(|w| (w.uid.as_str(), (w.pool.as_str(), w.promise()))).collect();
    for a in &decision.actions {
        match a {
            Action::Promise { waiter, status, .. } => {
                by_uid.insert(waiter.uid.as_str(), (waiter.pool.as_str(), status.promise.as_ref()));
            }
            Action::DropEntry { waiter, .. } => {
                by_uid.remove(waiter.uid.as_str());
            }
            _ => {}
        }
    }
    by_uid.into_values().filter_map(|(pool, p)| Some((pool.to_string(), p?.ip.parse().ok()?))).collect()
}

#[cfg(test)]
mod tests;
