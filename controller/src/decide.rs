//! What the controller does, decided over plain data: no Kubernetes here.
//!
//! [`decide`] takes a snapshot of the cluster ([`World`]), the settings and
//! what earlier passes saw ([`Memory`]), and the API server's time, and
//! returns the [`Action`]s to take plus when to look again. Each action acts
//! on exactly one lease, identified by name and UID, so a successor under the
//! same name is never touched.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

pub use netendpoint_lease::age_at_least;
pub use netendpoint_lease::pools::Capacity;
pub use netendpoint_lease::view::{Lease, Sticky};

/// The ordinal of StatefulSet `owner`'s Pod `pod` (`<owner>-<ordinal>`).
pub fn ordinal(owner: &str, pod: &str) -> Option<i64> {
    let n = pod.strip_prefix(owner)?.strip_prefix('-')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0')) {
        return None;
    }
    n.parse().ok()
}

/// An ADD that waits for an IP of `pool` (an `IPNeeded` Event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    /// Stable key of the Event (`namespace/name`).
    pub key: String,
    /// Pool label value.
    pub pool: String,
    /// Until when the ADD waits (the Event's creation on the API server's
    /// clock plus the wait it announced).
    pub until: Timestamp,
}

/// A snapshot of what the controller watches.
#[derive(Debug, Default)]
pub struct World {
    /// Every lease.
    pub leases: Vec<Lease>,
    /// Label values of the names of the Node objects.
    pub nodes: HashSet<String>,
    /// UIDs of the Pod objects.
    pub pod_uids: HashSet<String>,
    /// Waiting ADDs.
    pub needs: Vec<Need>,
    /// Known capacities, by pool label value.
    pub capacity: HashMap<String, Capacity>,
    /// The StatefulSets, (namespace, name) → spec.replicas.
    pub statefulsets: HashMap<(String, String), i64>,
    /// True once the StatefulSets were listed: without that list no hold
    /// ends for a deleted or scaled-down StatefulSet.
    pub statefulsets_known: bool,
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
}

/// What earlier passes saw. Lost on restart or on a change of leader, which
/// only delays actions: every grace starts again.
#[derive(Debug, Default)]
pub struct Memory {
    /// Node label value → when it was first seen absent.
    node_absent_since: HashMap<String, Timestamp>,
    /// Pod UID → when it was first seen absent.
    pod_absent_since: HashMap<String, Timestamp>,
    /// Needs already served by a forced release.
    served: HashSet<String>,
    /// UIDs of leases already forced or deleted, until they leave the snapshot.
    acted: HashSet<String>,
    /// UIDs of held leases whose StatefulSet was seen gone or scaled below
    /// their ordinal, with the reason: a hold ends on the second sighting.
    hold_evidence: HashMap<String, HoldEnd>,
}

/// Why the controller ends a sticky hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldEnd {
    /// The StatefulSet is gone.
    OwnerDeleted,
    /// The StatefulSet was scaled below the Pod's ordinal.
    ScaledDown,
    /// `stickyFor` passed since the release was requested.
    Expired,
    /// An ADD waits for an IP of the pool and no other release can serve it.
    PoolPressure,
}

impl HoldEnd {
    /// A short description for the Event and the log.
    pub fn describe(self) -> &'static str {
        match self {
            Self::OwnerDeleted => "its StatefulSet was deleted",
            Self::ScaledDown => "its StatefulSet was scaled below the Pod's ordinal",
            Self::Expired => "stickyFor passed since the release",
            Self::PoolPressure => "an ADD needs an IP of the pool and no other release can serve it",
        }
    }
}

/// One write the controller decided on.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Remove every finalizer of a release older than its bound, for a waiting ADD.
    Force {
        /// The releasing lease.
        lease: Lease,
        /// Its age, a lower bound on the API server's clock.
        age: Duration,
        /// The bound it outlived.
        bound: Duration,
        /// The need it serves.
        need: String,
    },
    /// Remove the sticky hold finalizer (only it) from a held release.
    EndHold {
        /// The held lease.
        lease: Lease,
        /// Why.
        reason: HoldEnd,
    },
}

/// What one pass decided.
#[derive(Debug, Default, PartialEq, Eq)]
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
///   a lease whose Pod exists, or that names no Pod UID, is never deleted;
/// - a release is forced only for a need that is still waiting and not yet
///   served, only when the release is at least its own bound old, and only
///   when the family of its IP is full (when the pool's capacity is known);
///   one need forces at most one release, the oldest eligible one;
/// - a sticky hold is never forced; it ends (the hold finalizer alone is
///   removed) when its StatefulSet was seen gone or scaled below the Pod's
///   ordinal in two passes, when `stickyFor` has passed since the release on
///   the server's clock, or, for a waiting need that no other release can
///   serve, the oldest hold of the pool.
pub fn decide(world: &World, settings: &Settings, memory: &mut Memory, now: Timestamp) -> Decision {
    let mut decision = Decision::default();
    let mut soonest = |d: Duration| {
        decision.look_again_in = Some(decision.look_again_in.map_or(d, |x: Duration| x.min(d)));
    };
    let present: HashSet<&str> = world.leases.iter().map(|l| l.uid.as_str()).collect();
    memory.acted.retain(|uid| present.contains(uid.as_str()));
    let mut actions = Vec::new();

    // Vanished nodes.
    let absent_nodes: HashSet<&str> = world
        .leases
        .iter()
        .filter(|l| l.releasing_since.is_none() && !l.node.is_empty() && !world.nodes.contains(&l.node))
        .map(|l| l.node.as_str())
        .collect();
    memory.node_absent_since.retain(|n, _| absent_nodes.contains(n.as_str()));
    let mut gone_nodes = HashSet::new();
    for node in &absent_nodes {
        match memory.node_absent_since.get(*node) {
            Some(first) => {
                let absent_for = age_at_least(now, *first);
                if absent_for >= settings.vanished_node_grace {
                    gone_nodes.insert(*node);
                } else {
                    soonest(settings.vanished_node_grace - absent_for);
                }
            }
            None => {
                memory.node_absent_since.insert((*node).to_string(), now);
                soonest(settings.vanished_node_grace + Duration::from_secs(1));
            }
        }
    }
    for l in world.leases.iter().filter(|l| l.releasing_since.is_none() && gone_nodes.contains(l.node.as_str())) {
        if memory.acted.insert(l.uid.clone()) {
            actions.push(Action::Reclaim { lease: l.clone() });
        }
    }

    // Leases of Pods that are gone.
    if let Some(grace) = settings.pod_gone_grace {
        let absent_pods: HashSet<&str> = world
            .leases
            .iter()
            .filter(|l| l.releasing_since.is_none())
            .filter_map(|l| l.pod_uid())
            .filter(|uid| !uid.is_empty() && !world.pod_uids.contains(*uid))
            .collect();
        memory.pod_absent_since.retain(|u, _| absent_pods.contains(u.as_str()));
        let mut gone_pods = HashSet::new();
        for uid in &absent_pods {
            match memory.pod_absent_since.get(*uid) {
                Some(first) => {
                    let absent_for = age_at_least(now, *first);
                    if absent_for >= grace {
                        gone_pods.insert(*uid);
                    } else {
                        soonest(grace - absent_for);
                    }
                }
                None => {
                    memory.pod_absent_since.insert((*uid).to_string(), now);
                    soonest(grace + Duration::from_secs(1));
                }
            }
        }
        for l in world.leases.iter().filter(|l| l.releasing_since.is_none()) {
            if l.pod_uid().is_some_and(|u| gone_pods.contains(u)) && memory.acted.insert(l.uid.clone()) {
                actions.push(Action::DeleteLeak { lease: l.clone() });
            }
        }
    } else {
        memory.pod_absent_since.clear();
    }

    // Forced release, one per waiting need.
    let waiting: HashSet<&str> = world.needs.iter().filter(|n| n.until > now).map(|n| n.key.as_str()).collect();
    memory.served.retain(|k| world.needs.iter().any(|n| &n.key == k));
    let mut by_pool: BTreeMap<&str, Vec<&Lease>> = BTreeMap::new();
    for l in &world.leases {
        by_pool.entry(l.pool.as_str()).or_default().push(l);
    }
    let open: Vec<&Need> =
        world.needs.iter().filter(|n| waiting.contains(n.key.as_str()) && !memory.served.contains(&n.key)).collect();
    for need in open {
        let leases = by_pool.get(need.pool.as_str()).map(Vec::as_slice).unwrap_or_default();
        let capacity = world.capacity.get(&need.pool);
        let mut best: Option<(&Lease, Duration, Duration)> = None;
        for l in leases.iter().copied() {
            let Some(since) = l.releasing_since else { continue };
            // A held release is never forced; pool pressure ends holds below.
            if memory.acted.contains(&l.uid) || l.is_held() {
                continue;
            }
            // With known ranges, force only in a family that is full.
            if let (Some(cap), Some(ip)) = (capacity, l.ip) {
                let family_leases = leases.iter().filter(|o| o.ip.is_some_and(|i| i.is_ipv4() == ip.is_ipv4())).count();
                if (family_leases as u128) < cap.of(ip) {
                    continue;
                }
            }
            let bound = l.force_release_after.unwrap_or(settings.default_force_release_after);
            let age = age_at_least(now, since);
            if age < bound {
                let left = bound - age + Duration::from_secs(1);
                if now + left.min(Duration::from_secs(86_400)) < need.until {
                    soonest(left);
                }
                continue;
            }
            if best.is_none_or(|(_, a, _)| age > a) {
                best = Some((l, age, bound));
            }
        }
        if let Some((l, age, bound)) = best {
            memory.acted.insert(l.uid.clone());
            memory.served.insert(need.key.clone());
            actions.push(Action::Force { lease: l.clone(), age, bound, need: need.key.clone() });
            continue;
        }
        // Pool pressure: no release in progress other than holds (none that
        // could free an address for this ADD, young or stuck): end the oldest hold.
        let other_release = leases.iter().any(|l| l.releasing_since.is_some() && !l.is_held());
        let full = |l: &Lease| match (capacity, l.ip) {
            (Some(cap), Some(ip)) => {
                leases.iter().filter(|o| o.ip.is_some_and(|i| i.is_ipv4() == ip.is_ipv4())).count() as u128
                    >= cap.of(ip)
            }
            _ => true,
        };
        if !other_release
            && let Some(oldest) = leases
                .iter()
                .filter(|l| l.is_held() && l.releasing_since.is_some() && !memory.acted.contains(&l.uid) && full(l))
                .min_by_key(|l| l.releasing_since)
        {
            memory.acted.insert(oldest.uid.clone());
            memory.served.insert(need.key.clone());
            actions.push(Action::EndHold { lease: (*oldest).clone(), reason: HoldEnd::PoolPressure });
        }
    }

    // Holds that end without a new Pod.
    let held: Vec<&Lease> = world.leases.iter().filter(|l| l.is_held() && l.releasing_since.is_some()).collect();
    memory.hold_evidence.retain(|uid, _| held.iter().any(|l| &l.uid == uid));
    for l in held {
        let (Some(st), Some(since)) = (&l.sticky, l.releasing_since) else { continue };
        if memory.acted.contains(&l.uid) {
            continue;
        }
        let age = age_at_least(now, since);
        let reason = if age >= st.sticky_for {
            Some(HoldEnd::Expired)
        } else {
            soonest(st.sticky_for - age + Duration::from_secs(1));
            owner_evidence(world, st)
        };
        let act = match reason {
            None => {
                memory.hold_evidence.remove(&l.uid);
                false
            }
            Some(HoldEnd::Expired) => true,
            // The StatefulSet's absence or scale is evidence seen twice, as for every other release.
            Some(r) => match memory.hold_evidence.insert(l.uid.clone(), r) {
                Some(before) if before == r => true,
                _ => {
                    soonest(Duration::from_secs(1));
                    false
                }
            },
        };
        if act && let Some(r) = reason {
            memory.acted.insert(l.uid.clone());
            memory.hold_evidence.remove(&l.uid);
            actions.push(Action::EndHold { lease: l.clone(), reason: r });
        }
    }
    decision.actions = actions;
    decision
}

/// What the StatefulSet says about a hold: gone, or scaled below the
/// ordinal. Other owner kinds end their holds by `stickyFor` and pressure only.
fn owner_evidence(world: &World, st: &Sticky) -> Option<HoldEnd> {
    if st.owner_kind != "StatefulSet" || !world.statefulsets_known {
        return None;
    }
    match world.statefulsets.get(&(st.namespace.clone(), st.owner.clone())) {
        None => Some(HoldEnd::OwnerDeleted),
        Some(replicas) => ordinal(&st.owner, &st.pod).filter(|o| o >= replicas).map(|_| HoldEnd::ScaledDown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "2026-01-01T00:00:00Z";

    fn t(secs: i64) -> Timestamp {
        T0.parse::<Timestamp>().unwrap() + k8s_openapi::jiff::SignedDuration::from_secs(secs)
    }

    trait TestLease {
        fn test(ip: &str) -> Self;
        fn held(ip: &str, ordinal: u32, at: i64) -> Self;
        fn on(self, node: &str) -> Self;
        fn releasing_since(self, at: i64, bound: u64) -> Self;
    }

    impl TestLease for Lease {
        fn test(ip: &str) -> Self {
            Lease {
                name: format!("p.{ip}"),
                uid: format!("uid-{ip}"),
                resource_version: "1".into(),
                pool: "p".into(),
                ip: ip.parse().ok(),
                node: "n1".into(),
                pod: Some(netendpoint_crd::PodRef {
                    namespace: "ns".into(),
                    name: "web-0".into(),
                    uid: format!("pod-{ip}"),
                }),
                releasing_since: None,
                finalizers: vec![],
                force_release_after: None,
                sticky: None,
            }
        }
        /// A released sticky lease of StatefulSet `web`'s Pod `web-<ordinal>`, held since `at`.
        fn held(ip: &str, ordinal: u32, at: i64) -> Self {
            let mut l = Lease::test(ip).releasing_since(at, 600);
            l.finalizers = vec![netendpoint_crd::FINALIZER_STICKY_HOLD.into()];
            l.sticky = Some(Sticky {
                namespace: "ns".into(),
                pod: format!("web-{ordinal}"),
                owner_kind: "StatefulSet".into(),
                owner: "web".into(),
                sticky_for: Duration::from_secs(3600),
            });
            l
        }
        fn on(mut self, node: &str) -> Self {
            self.node = node.into();
            self
        }
        fn releasing_since(mut self, at: i64, bound: u64) -> Self {
            self.releasing_since = Some(t(at));
            self.force_release_after = Some(Duration::from_secs(bound));
            self.finalizers = vec!["example.com/agent".into()];
            self
        }
    }

    fn settings() -> Settings {
        Settings {
            vanished_node_grace: Duration::from_secs(60),
            pod_gone_grace: Some(Duration::from_secs(900)),
            default_force_release_after: Duration::from_secs(600),
        }
    }

    fn world(leases: Vec<Lease>) -> World {
        let pod_uids = leases.iter().filter_map(|l| l.pod_uid().map(str::to_string)).collect();
        World { leases, nodes: ["n1".to_string()].into(), pod_uids, ..World::default() }
    }

    fn need(key: &str, until: i64) -> Need {
        Need { key: key.into(), pool: "p".into(), until: t(until) }
    }

    fn kinds(d: &Decision) -> Vec<String> {
        d.actions
            .iter()
            .map(|a| match a {
                Action::Reclaim { lease } => format!("reclaim {}", lease.name),
                Action::DeleteLeak { lease } => format!("leak {}", lease.name),
                Action::Force { lease, need, .. } => format!("force {} for {need}", lease.name),
                Action::EndHold { lease, reason } => format!("end hold {} {reason:?}", lease.name),
            })
            .collect()
    }

    #[test]
    fn a_vanished_nodes_lease_is_reclaimed_only_when_seen_absent_twice_across_the_grace() {
        let w = world(vec![Lease::test("10.0.0.1").on("gone"), Lease::test("10.0.0.2")]);
        let mut m = Memory::default();
        let s = settings();
        // First sighting: nothing, and a pass is asked for after the grace.
        let d = decide(&w, &s, &mut m, t(0));
        assert!(d.actions.is_empty());
        assert_eq!(d.look_again_in, Some(Duration::from_secs(61)));
        assert!(decide(&w, &s, &mut m, t(60)).actions.is_empty(), "whole-second rounding: not yet");
        assert_eq!(kinds(&decide(&w, &s, &mut m, t(61))), ["reclaim p.10.0.0.1"]);
        // Decided once, not again while the lease is still listed.
        assert!(decide(&w, &s, &mut m, t(62)).actions.is_empty());
    }

    #[test]
    fn a_node_that_comes_back_starts_its_grace_again_and_a_present_nodes_lease_is_never_reclaimed() {
        let mut w = world(vec![Lease::test("10.0.0.1").on("flaky")]);
        let mut m = Memory::default();
        let s = settings();
        decide(&w, &s, &mut m, t(0));
        w.nodes.insert("flaky".into());
        assert!(decide(&w, &s, &mut m, t(100)).actions.is_empty());
        w.nodes.remove("flaky");
        assert!(decide(&w, &s, &mut m, t(200)).actions.is_empty(), "grace restarted");
        assert!(decide(&w, &s, &mut m, t(230)).actions.is_empty());
        assert_eq!(kinds(&decide(&w, &s, &mut m, t(261))), ["reclaim p.10.0.0.1"]);
    }

    #[test]
    fn a_releasing_lease_of_a_vanished_node_is_left_to_its_finalizers() {
        let w = world(vec![Lease::test("10.0.0.1").on("gone").releasing_since(0, 600)]);
        let mut m = Memory::default();
        decide(&w, &settings(), &mut m, t(0));
        assert!(decide(&w, &settings(), &mut m, t(1000)).actions.is_empty());
    }

    #[test]
    fn pod_gone_cleanup_respects_its_grace_its_off_switch_and_living_pods() {
        let mut w = world(vec![Lease::test("10.0.0.1"), Lease::test("10.0.0.2"), Lease::test("10.0.0.3")]);
        w.pod_uids.remove("pod-10.0.0.1");
        w.leases[2].pod = None; // no Pod named: never a leak
        let mut m = Memory::default();
        let s = settings();
        assert!(decide(&w, &s, &mut m, t(0)).actions.is_empty());
        assert!(decide(&w, &s, &mut m, t(900)).actions.is_empty());
        assert_eq!(kinds(&decide(&w, &s, &mut m, t(901))), ["leak p.10.0.0.1"]);

        let off = Settings { pod_gone_grace: None, ..settings() };
        let mut m = Memory::default();
        assert!(decide(&w, &off, &mut m, t(0)).actions.is_empty());
        assert!(decide(&w, &off, &mut m, t(100_000)).actions.is_empty());

        // A Pod that reappears (a slow watch) restarts the grace.
        let mut m = Memory::default();
        decide(&w, &s, &mut m, t(0));
        w.pod_uids.insert("pod-10.0.0.1".into());
        assert!(decide(&w, &s, &mut m, t(500)).actions.is_empty());
        w.pod_uids.remove("pod-10.0.0.1");
        assert!(decide(&w, &s, &mut m, t(1000)).actions.is_empty());
    }

    #[test]
    fn a_release_is_forced_only_for_a_waiting_need_and_only_past_its_own_bound() {
        let leases = vec![
            Lease::test("10.0.0.1").releasing_since(0, 30),
            Lease::test("10.0.0.2").releasing_since(0, 3600),
            Lease::test("10.0.0.3").releasing_since(10, 30),
        ];
        let s = settings();
        // No need: nothing, however old.
        let w = world(leases.clone());
        assert!(decide(&w, &s, &mut Memory::default(), t(10_000)).actions.is_empty());
        // A need, but every release young: nothing now, a pass when the first ripens.
        let mut w = world(leases.clone());
        w.needs = vec![need("ns/a", 100)];
        let mut m = Memory::default();
        let d = decide(&w, &s, &mut m, t(20));
        assert!(d.actions.is_empty());
        assert_eq!(d.look_again_in, Some(Duration::from_secs(12)));
        // Past the bound of .1 only: .1 is forced, once.
        assert_eq!(kinds(&decide(&w, &s, &mut m, t(35))), ["force p.10.0.0.1 for ns/a"]);
        assert!(decide(&w, &s, &mut m, t(50)).actions.is_empty(), "the need is served");
        // A second waiter gets the next eligible release, never the same one.
        w.needs.push(need("ns/b", 100));
        assert_eq!(kinds(&decide(&w, &s, &mut m, t(50))), ["force p.10.0.0.3 for ns/b"]);
        // An expired need forces nothing.
        let mut w = world(leases);
        w.needs = vec![need("ns/old", 30)];
        assert!(decide(&w, &s, &mut Memory::default(), t(40)).actions.is_empty());
    }

    #[test]
    fn with_known_ranges_a_release_is_forced_only_when_its_family_is_full() {
        let mut w = world(vec![Lease::test("10.0.0.1").releasing_since(0, 30), Lease::test("10.0.0.2")]);
        w.needs = vec![need("ns/a", 1000)];
        w.capacity.insert("p".into(), Capacity { v4: 3, v6: 0 });
        assert!(decide(&w, &settings(), &mut Memory::default(), t(100)).actions.is_empty(), "one IPv4 free");
        w.capacity.insert("p".into(), Capacity { v4: 2, v6: 0 });
        assert_eq!(kinds(&decide(&w, &settings(), &mut Memory::default(), t(100))), ["force p.10.0.0.1 for ns/a"]);
    }

    #[test]
    fn the_oldest_eligible_release_is_forced_first_and_other_pools_are_untouched() {
        let mut other = Lease::test("10.0.0.9").releasing_since(0, 1);
        other.pool = "q".into();
        other.name = "q.10.0.0.9".into();
        let mut w = world(vec![
            Lease::test("10.0.0.1").releasing_since(50, 10),
            Lease::test("10.0.0.2").releasing_since(20, 10),
            other,
        ]);
        w.needs = vec![need("ns/a", 1000)];
        assert_eq!(kinds(&decide(&w, &settings(), &mut Memory::default(), t(100))), ["force p.10.0.0.2 for ns/a"]);
    }

    fn with_sts(leases: Vec<Lease>, replicas: Option<i64>) -> World {
        let mut w = world(leases);
        w.statefulsets_known = true;
        if let Some(r) = replicas {
            w.statefulsets.insert(("ns".into(), "web".into()), r);
        }
        w
    }

    #[test]
    fn ordinals_parse_only_from_the_owners_pod_names() {
        assert_eq!(ordinal("web", "web-0"), Some(0));
        assert_eq!(ordinal("web", "web-12"), Some(12));
        for bad in ["web", "web-", "web-01", "web-x", "webx-1", "web-1-2", "other-1"] {
            assert_eq!(ordinal("web", bad), None, "{bad}");
        }
    }

    #[test]
    fn a_hold_ends_when_its_statefulset_is_gone_or_scaled_below_it_seen_twice() {
        let s = settings();
        let leases = vec![Lease::held("10.0.0.1", 0, 0), Lease::held("10.0.0.2", 2, 0)];
        // Present and large enough: holds stay.
        let mut m = Memory::default();
        assert!(decide(&with_sts(leases.clone(), Some(3)), &s, &mut m, t(10)).actions.is_empty());
        // Scaled to 2: the ordinal-2 hold ends on the second sighting.
        let w = with_sts(leases.clone(), Some(2));
        assert!(decide(&w, &s, &mut m, t(11)).actions.is_empty(), "first sighting");
        assert_eq!(kinds(&decide(&w, &s, &mut m, t(12))), ["end hold p.10.0.0.2 ScaledDown"]);
        assert!(decide(&w, &s, &mut m, t(13)).actions.is_empty(), "once");
        // Scaled down and back up between two passes: the sighting is forgotten.
        let mut m = Memory::default();
        decide(&with_sts(leases.clone(), Some(1)), &s, &mut m, t(10));
        assert!(decide(&with_sts(leases.clone(), Some(3)), &s, &mut m, t(11)).actions.is_empty());
        assert!(decide(&with_sts(leases.clone(), Some(1)), &s, &mut m, t(12)).actions.is_empty());
        // Deleted: both holds end on the second sighting.
        let mut m = Memory::default();
        let w = with_sts(leases.clone(), None);
        assert!(decide(&w, &s, &mut m, t(10)).actions.is_empty());
        assert_eq!(
            kinds(&decide(&w, &s, &mut m, t(11))),
            ["end hold p.10.0.0.1 OwnerDeleted", "end hold p.10.0.0.2 OwnerDeleted"]
        );
        // Before the StatefulSets were listed, nothing is concluded from their absence.
        let mut w = with_sts(leases, None);
        w.statefulsets_known = false;
        let mut m = Memory::default();
        decide(&w, &s, &mut m, t(10));
        assert!(decide(&w, &s, &mut m, t(11)).actions.is_empty());
    }

    #[test]
    fn a_hold_ends_after_sticky_for_on_the_servers_clock_and_a_live_lease_is_never_touched() {
        let s = settings();
        let mut live = Lease::held("10.0.0.2", 0, 0);
        live.releasing_since = None;
        let w = with_sts(vec![Lease::held("10.0.0.1", 0, 0), live], Some(1));
        let mut m = Memory::default();
        let d = decide(&w, &s, &mut m, t(100));
        assert!(d.actions.is_empty());
        assert_eq!(d.look_again_in, Some(Duration::from_secs(3502)));
        assert!(decide(&w, &s, &mut m, t(3600)).actions.is_empty(), "whole-second rounding: not yet");
        assert_eq!(kinds(&decide(&w, &s, &mut m, t(3601))), ["end hold p.10.0.0.1 Expired"]);
    }

    #[test]
    fn pool_pressure_ends_the_oldest_hold_only_when_no_other_release_can_serve() {
        let s = settings();
        let mut w = with_sts(
            vec![Lease::held("10.0.0.1", 0, 50), Lease::held("10.0.0.2", 1, 20), Lease::test("10.0.0.3")],
            Some(3),
        );
        w.capacity.insert("p".into(), Capacity { v4: 3, v6: 0 });
        // No need: holds stay.
        assert!(decide(&w, &s, &mut Memory::default(), t(100)).actions.is_empty());
        // A need: the oldest hold ends, once per need; never forced.
        w.needs = vec![need("ns/a", 1000)];
        let mut m = Memory::default();
        assert_eq!(kinds(&decide(&w, &s, &mut m, t(100))), ["end hold p.10.0.0.2 PoolPressure"]);
        assert!(decide(&w, &s, &mut m, t(101)).actions.is_empty());
        // Another release in progress (young, not held) can serve it: no hold ends.
        let mut w2 =
            with_sts(vec![Lease::held("10.0.0.1", 0, 50), Lease::test("10.0.0.3").releasing_since(90, 600)], Some(3));
        w2.needs = vec![need("ns/a", 1000)];
        assert!(decide(&w2, &s, &mut Memory::default(), t(100)).actions.is_empty());
        // A family with room: no hold ends.
        w.capacity.insert("p".into(), Capacity { v4: 4, v6: 0 });
        assert!(decide(&w, &s, &mut Memory::default(), t(100)).actions.is_empty());
        // A held release past its forced-release bound is not forced.
        let mut old = Lease::held("10.0.0.1", 0, 0);
        old.force_release_after = Some(Duration::from_secs(1));
        let mut w3 = with_sts(vec![old], Some(3));
        w3.needs = vec![need("ns/a", 1000)];
        assert_eq!(kinds(&decide(&w3, &s, &mut Memory::default(), t(100))), ["end hold p.10.0.0.1 PoolPressure"]);
    }
}
