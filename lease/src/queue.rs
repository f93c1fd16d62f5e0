//! The full-pool queue: which waiting ADD each address is promised to.
//!
//! Each waiting ADD has an entry (`NetworkEndpointNeed <pool>.<node>.<slot>`)
//! whose arrival is the resourceVersion of its creation, an order the API
//! server establishes (resource versions of one resource compare as
//! numbers: KEP-5504, stable in Kubernetes 1.35). netendpoint-controller
//! promises addresses in that order, and this module decides which, over
//! plain data, for one pool and family at a time:
//! - an address that is free now goes to the waiters that arrived first;
//! - a release in progress goes to the next ones, the oldest release first;
//! - a promise that is still of its kind is kept, so a waiter already
//!   watching its release is not moved to another one;
//! - what is left is promised to nobody.
//!
//! So each release goes to exactly one waiter, and no waiter that arrived
//! later is promised an address that is free sooner. The create of the
//! address stays the claim: a promise only tells the honest paths (the
//! summaries count a promised address as leased) whose turn it is.

use std::collections::HashSet;
use std::net::IpAddr;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use netendpoint_crd::need::parse_span;
use netendpoint_crd::{IpFamily, NetworkEndpointNeed, NetworkEndpointNeedStatus, PodRef, Promise, endpoint_name};

/// Slack added to an entry's announced wait, for the whole-second
/// creation timestamp and the plugin's reading of the server clock.
pub const DEADLINE_SLACK: std::time::Duration = std::time::Duration::from_secs(2);

/// One waiting ADD's entry as the controller and `kubectl netendpoint`
/// read it (entries of older plugins, without a slot, are not in the queue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// The entry's name.
    pub name: String,
    /// Its UID: the precondition of every write.
    pub uid: String,
    /// The full pool.
    pub pool: String,
    /// The family it waits for.
    pub family: IpFamily,
    /// The node of the waiting ADD.
    pub node: String,
    /// Its Pod.
    pub pod: PodRef,
    /// Its sandbox and interface.
    pub container_id: String,
    /// Its interface.
    pub if_name: String,
    /// Its place in the queue (see [`arrival_of`]).
    pub arrival: u128,
    /// When the entry was created.
    pub created: Timestamp,
    /// When the ADD stops waiting: its own deadline, and never later than
    /// its creation plus the wait it announced (and [`DEADLINE_SLACK`]).
    pub deadline: Timestamp,
    /// Its status as read.
    pub status: NetworkEndpointNeedStatus,
    /// The addresses it can take, as inclusive spans (its entry's
    /// `spec.spans`); `None` when the entry does not say.
    pub spans: Option<Vec<(IpAddr, IpAddr)>>,
}

impl Waiter {
    /// The view of a queue entry; `None` for an entry of an older plugin
    /// or one without a UID, a creation time or an arrival.
    pub fn of(e: &NetworkEndpointNeed) -> Option<Self> {
        let spec = &e.spec;
        spec.slot?;
        let status = e.status.clone().unwrap_or_default();
        let arrival = status.arrival.as_deref().or(e.metadata.resource_version.as_deref()).and_then(arrival_of)?;
        let created = e.metadata.creation_timestamp.as_ref()?.0;
        let announced = std::time::Duration::from_secs(u64::from(spec.wait_seconds)) + DEADLINE_SLACK;
        let latest = created.checked_add(SignedDuration::try_from(announced).ok()?).ok()?;
        let deadline = spec.deadline.as_ref().map_or(latest, |d| d.0.min(latest));
        Some(Waiter {
            name: e.metadata.name.clone()?,
            uid: e.metadata.uid.clone()?,
            pool: spec.pool.clone(),
            family: spec.ip_family?,
            node: spec.node.clone(),
            pod: spec.pod.clone(),
            container_id: spec.container_id.clone()?,
            if_name: spec.if_name.clone()?,
            arrival,
            created,
            deadline,
            status,
            spans: spec.spans.as_ref().map(|v| v.iter().filter_map(|x| parse_span(x)).collect()),
        })
    }

    /// True if it can take `ip`: in one of its spans, or it named none.
    pub fn can_take(&self, ip: IpAddr) -> bool {
        self.spans.as_ref().is_none_or(|spans| spans.iter().any(|(a, b)| within(ip, *a, *b)))
    }

    /// The address promised to it, if any.
    pub fn promise(&self) -> Option<&Promise> {
        self.status.promise.as_ref()
    }
}

/// True if `ip` lies in the inclusive span `first..=last` (one family).
fn within(ip: IpAddr, first: IpAddr, last: IpAddr) -> bool {
    match (ip, first, last) {
        (IpAddr::V4(x), IpAddr::V4(a), IpAddr::V4(b)) => a <= x && x <= b,
        (IpAddr::V6(x), IpAddr::V6(a), IpAddr::V6(b)) => a <= x && x <= b,
        _ => false,
    }
}

/// An entry's arrival: the resourceVersion of its creation, as a number
/// (`None` when it is not a resource version the API server would write).
pub fn arrival_of(resource_version: &str) -> Option<u128> {
    let comparable = !resource_version.is_empty()
        && !resource_version.starts_with('0')
        && resource_version.len() <= 38
        && resource_version.bytes().all(|b| b.is_ascii_digit());
    comparable.then(|| resource_version.parse().ok()).flatten()
}

/// What one pool and family can give to its queue now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Supply {
    /// Addresses no lease or hold holds, in the order they should be given.
    pub free: Vec<IpAddr>,
    /// Releases in progress (address, lease name), oldest release first:
    /// never a hold or an incarnation, whose address is a claim's.
    pub releasing: Vec<(IpAddr, String)>,
}

/// The promise of free address `ip` of `pool`.
pub fn free_promise(pool: &str, ip: IpAddr) -> Promise {
    Promise { ip: ip.to_string(), lease: endpoint_name(pool, ip), releasing: false }
}

/// The promise of the release of lease `lease`, at `ip`.
pub fn release_promise(ip: IpAddr, lease: &str) -> Promise {
    Promise { ip: ip.to_string(), lease: lease.to_string(), releasing: true }
}

/// The promises of `waiting` (their current promises, in arrival order) out
/// of `supply` for `pool`: one per waiter, at most, in the same order.
///
/// A promise of an address that is free now is never moved (its waiter may
/// be creating it), and that includes a promised release that has ended. A
/// promised release still in progress stays with its waiter unless a free
/// address can be given to that waiter instead: then the release passes to
/// the next waiter in line.
pub fn assign(pool: &str, waiting: &[Option<&Promise>], supply: &Supply) -> Vec<Option<Promise>> {
    assign_where(pool, waiting, |_, _| true, supply)
}

/// [`assign`] where waiter `i` takes only an address `ip` with
/// `fits(i, ip)` (the spans its entry announced): an address it cannot
/// take goes to the next waiter in line that can, and a waiter that can
/// take none of the supply is promised nothing.
pub fn assign_where(
    pool: &str,
    waiting: &[Option<&Promise>],
    fits: impl Fn(usize, IpAddr) -> bool,
    supply: &Supply,
) -> Vec<Option<Promise>> {
    let free_set: HashSet<IpAddr> = supply.free.iter().copied().collect();
    let releasing_set: HashSet<&str> = supply.releasing.iter().map(|(_, l)| l.as_str()).collect();
    let mut used: HashSet<IpAddr> = HashSet::new();
    let mut out: Vec<Option<Promise>> = vec![None; waiting.len()];
    // 1. A promised address that is free now stays its waiter's.
    for (i, (slot, current)) in out.iter_mut().zip(waiting).enumerate() {
        if let Some(ip) = current.and_then(|p| p.ip.parse::<IpAddr>().ok())
            && free_set.contains(&ip)
            && fits(i, ip)
            && used.insert(ip)
        {
            *slot = Some(free_promise(pool, ip));
        }
    }
    // 2. The other free addresses go to the first waiters in line that can take them.
    for (i, slot) in out.iter_mut().enumerate().filter(|(_, s)| s.is_none()) {
        let Some(ip) = supply.free.iter().copied().find(|ip| !used.contains(ip) && fits(i, *ip)) else { continue };
        used.insert(ip);
        *slot = Some(free_promise(pool, ip));
    }
    // 3. A promised release still in progress stays with a waiter that got nothing better.
    for (i, (slot, current)) in out.iter_mut().zip(waiting).enumerate() {
        if slot.is_some() {
            continue;
        }
        if let Some(p) = current.filter(|p| p.releasing && releasing_set.contains(p.lease.as_str()))
            && let Ok(ip) = p.ip.parse::<IpAddr>()
            && fits(i, ip)
            && used.insert(ip)
        {
            *slot = Some(release_promise(ip, &p.lease));
        }
    }
    // 4. The other releases go to the next waiters in line that can take them, the oldest release first.
    for (i, slot) in out.iter_mut().enumerate().filter(|(_, s)| s.is_none()) {
        let Some((ip, lease)) = supply.releasing.iter().find(|(ip, _)| !used.contains(ip) && fits(i, *ip)) else {
            continue;
        };
        used.insert(*ip);
        *slot = Some(release_promise(*ip, lease));
    }
    out
}

/// One pool's queue as people and metrics see it: how many ADDs wait, and
/// how long the one that waited longest has waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Depth {
    /// Entries whose ADD still waits (deadline not passed).
    pub waiting: u64,
    /// Age of the oldest of them.
    pub oldest: std::time::Duration,
}

/// The queue of each pool with a waiting ADD at `now`, by pool. An entry
/// whose deadline passed is no longer waited on, so it is not counted.
pub fn depths(waiters: &[Waiter], now: Timestamp) -> std::collections::BTreeMap<String, Depth> {
    let mut by_pool: std::collections::BTreeMap<String, Depth> = std::collections::BTreeMap::new();
    for w in waiters.iter().filter(|w| w.deadline > now) {
        let waited = std::time::Duration::try_from(now.duration_since(w.created)).unwrap_or_default();
        let d = by_pool.entry(w.pool.clone()).or_default();
        d.waiting += 1;
        d.oldest = d.oldest.max(waited);
    }
    by_pool
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn supply(free: &[&str], releasing: &[&str]) -> Supply {
        Supply {
            free: free.iter().map(|s| ip(s)).collect(),
            releasing: releasing.iter().map(|s| (ip(s), endpoint_name("p", ip(s)))).collect(),
        }
    }

    fn ips(out: &[Option<Promise>]) -> Vec<Option<String>> {
        out.iter().map(|p| p.as_ref().map(|p| format!("{}{}", p.ip, if p.releasing { "~" } else { "" }))).collect()
    }

    fn s(v: &[Option<&str>]) -> Vec<Option<String>> {
        v.iter().map(|x| x.map(str::to_string)).collect()
    }

    #[test]
    fn arrivals_compare_as_numbers_and_odd_versions_are_none() {
        assert!(arrival_of("99").unwrap() < arrival_of("100").unwrap());
        for odd in ["", "0", "012", "12a", "-1", &"9".repeat(39)] {
            assert_eq!(arrival_of(odd), None, "{odd:?}");
        }
    }

    #[test]
    fn free_addresses_go_first_to_the_first_arrivals_then_releases_in_order() {
        // (free, releasing, waiters, promised)
        type Case<'a> = (&'a [&'a str], &'a [&'a str], usize, &'a [Option<&'a str>]);
        let cases: &[Case] = &[
            (&[], &[], 2, &[None, None]),
            (&["10.0.0.1"], &[], 2, &[Some("10.0.0.1"), None]),
            (&[], &["10.0.0.5", "10.0.0.6"], 3, &[Some("10.0.0.5~"), Some("10.0.0.6~"), None]),
            (&["10.0.0.1"], &["10.0.0.5"], 3, &[Some("10.0.0.1"), Some("10.0.0.5~"), None]),
            (&["10.0.0.1", "10.0.0.2"], &["10.0.0.5"], 1, &[Some("10.0.0.1")]),
        ];
        for (free, releasing, n, want) in cases {
            let waiting = vec![None; *n];
            assert_eq!(ips(&assign("p", &waiting, &supply(free, releasing))), s(want), "{free:?} {releasing:?}");
        }
    }

    #[test]
    fn a_kept_release_stays_with_its_waiter_and_a_free_address_moves_to_the_first() {
        let r6 = release_promise(ip("10.0.0.6"), "p.10.0.0.6");
        let r5 = release_promise(ip("10.0.0.5"), "p.10.0.0.5");
        // The second waiter keeps 6 (it watches it); the first takes 5.
        let out = assign("p", &[None, Some(&r6)], &supply(&[], &["10.0.0.5", "10.0.0.6"]));
        assert_eq!(ips(&out), s(&[Some("10.0.0.5~"), Some("10.0.0.6~")]));
        // A free address appears: it goes to the first waiter, whose release
        // passes to the next one in line.
        let out = assign("p", &[Some(&r5), Some(&r6), None], &supply(&["10.0.0.9"], &["10.0.0.5", "10.0.0.6"]));
        assert_eq!(ips(&out), s(&[Some("10.0.0.9"), Some("10.0.0.6~"), Some("10.0.0.5~")]));
    }

    #[test]
    fn a_promise_whose_release_ended_becomes_the_promise_of_a_free_address() {
        let r5 = release_promise(ip("10.0.0.5"), "p.10.0.0.5");
        // The lease of 5 is gone: 5 is free now, and still the same waiter's.
        let out = assign("p", &[Some(&r5), None], &supply(&["10.0.0.5"], &[]));
        assert_eq!(ips(&out), s(&[Some("10.0.0.5"), None]));
        // A free address once promised is never moved: its waiter may be creating it.
        let kept = free_promise("p", ip("10.0.0.5"));
        let out = assign("p", &[None, Some(&kept)], &supply(&["10.0.0.5"], &[]));
        assert_eq!(ips(&out), s(&[None, Some("10.0.0.5")]));
    }

    #[test]
    fn every_address_is_promised_once_at_most() {
        let r5 = release_promise(ip("10.0.0.5"), "p.10.0.0.5");
        let out = assign("p", &[Some(&r5), Some(&r5), None], &supply(&[], &["10.0.0.5", "10.0.0.6"]));
        assert_eq!(ips(&out), s(&[Some("10.0.0.5~"), Some("10.0.0.6~"), None]));
        let forged = Promise { ip: "10.0.0.7".into(), lease: "p.10.0.0.7".into(), releasing: true };
        let out = assign("p", &[Some(&forged)], &supply(&[], &[]));
        assert_eq!(out, vec![None], "a promise of nothing the pool can give is dropped");
    }

    #[test]
    fn an_address_a_waiter_cannot_take_goes_to_the_next_one_that_can() {
        // The first waiter's network is .2-.3 only (a config that changed, or another network of the pool).
        let narrow = |i: usize, ip: IpAddr| i != 0 || ["10.0.0.2", "10.0.0.3"].contains(&ip.to_string().as_str());
        let out = assign_where("p", &[None, None], narrow, &supply(&["10.0.0.5"], &["10.0.0.2"]));
        assert_eq!(ips(&out), s(&[Some("10.0.0.2~"), Some("10.0.0.5")]), "not the free .5 it cannot take");
        // A kept promise it cannot take is moved too, and an address nobody can take is promised to nobody.
        let p5 = free_promise("p", ip("10.0.0.5"));
        let out = assign_where("p", &[Some(&p5)], narrow, &supply(&["10.0.0.5"], &[]));
        assert_eq!(out, vec![None]);
        // The entry's spans are what it can take.
        let mut w = waiter("p", Timestamp::UNIX_EPOCH, Timestamp::UNIX_EPOCH);
        assert!(w.can_take(ip("10.9.9.9")), "an entry that names no spans");
        w.spans = Some(vec![(ip("10.0.0.2"), ip("10.0.0.3"))]);
        assert!(w.can_take(ip("10.0.0.3")) && !w.can_take(ip("10.0.0.4")) && !w.can_take(ip("fd00::2")));
    }

    fn waiter(pool: &str, created: Timestamp, deadline: Timestamp) -> Waiter {
        Waiter {
            name: format!("{pool}.n.0"),
            uid: "u".into(),
            pool: pool.into(),
            family: IpFamily::IPv4,
            node: "n".into(),
            pod: PodRef { namespace: "ns".into(), name: "p".into(), uid: String::new() },
            container_id: "c".into(),
            if_name: "eth0".into(),
            arrival: 1,
            created,
            deadline,
            status: NetworkEndpointNeedStatus::default(),
            spans: None,
        }
    }

    #[test]
    fn depths_count_live_entries_per_pool_and_the_oldest_wait() {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let at = |s: &str| -> Timestamp { format!("2026-01-01T00:00:{s}Z").parse().unwrap() };
        let later: Timestamp = "2026-01-01T00:02:00Z".parse().unwrap();
        let waiters = [
            waiter("a", at("10"), later),
            waiter("a", at("40"), later),
            waiter("b", at("50"), later),
            // Its ADD gave up: no longer waiting.
            waiter("c", at("00"), at("30")),
        ];
        let d = depths(&waiters, now);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d["a"], Depth { waiting: 2, oldest: std::time::Duration::from_secs(50) });
        assert_eq!(d["b"], Depth { waiting: 1, oldest: std::time::Duration::from_secs(10) });
        assert!(!d.contains_key("c"));
    }
}
