//! The two rules every actor applies the same way: when a release is stuck
//! (invariant 6), and when evidence from outside the API server may be
//! acted on (invariant 8: seen twice, then a grace).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::clock::{age_at_least, secs_ceil};

/// Where a lease stands in its release, on the API server's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseState {
    /// No release was requested.
    Live,
    /// Released less than its bound ago: nothing may force it yet. `left`
    /// is the time until it becomes stuck (plus one second for the
    /// whole-second timestamps); `None` without a server time.
    Young {
        /// Time until it is stuck, when known.
        left: Option<Duration>,
    },
    /// Released at least its bound ago: its finalizers may be forced off
    /// when its address is needed.
    Stuck {
        /// Its age, a lower bound.
        age: Duration,
        /// The bound it outlived.
        bound: Duration,
    },
}

/// The [`ReleaseState`] of a lease released at `since` (its
/// deletionTimestamp), under its own stamped bound or, for leases of older
/// versions, `default_bound`, at server time `now`. Without a server time
/// nothing is stuck.
pub fn release_state(
    since: Option<Timestamp>,
    stamped: Option<Duration>,
    default_bound: Duration,
    now: Option<Timestamp>,
) -> ReleaseState {
    let Some(since) = since else { return ReleaseState::Live };
    let bound = stamped.unwrap_or(default_bound);
    let Some(now) = now else { return ReleaseState::Young { left: None } };
    let age = age_at_least(now, since);
    if age >= bound {
        ReleaseState::Stuck { age, bound }
    } else {
        ReleaseState::Young { left: Some(bound - age + Duration::from_secs(1)) }
    }
}

/// What a pass knows of one piece of evidence (an absent node, a stale
/// lease, a gone owner).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Server time (seconds) of its first sighting.
    pub first: i64,
    /// True when an earlier pass saw it too.
    pub repeated: bool,
}

impl Seen {
    /// Seen in an earlier pass too, and first seen at least `grace` before `now` (seconds).
    pub fn ripe(&self, now: i64, grace: Duration) -> bool {
        self.repeated && self.elapsed(now) >= secs_ceil(grace)
    }

    /// Seconds since the first sighting, less one for whole-second times (a lower bound).
    pub fn elapsed(&self, now: i64) -> i64 {
        now.saturating_sub(self.first).saturating_sub(1).max(0)
    }

    /// How long until [`Seen::ripe`] can hold (zero once it can).
    pub fn ripens_in(&self, now: i64, grace: Duration) -> Duration {
        let left = secs_ceil(grace).saturating_sub(self.elapsed(now)).max(0);
        Duration::from_secs(u64::try_from(left).unwrap_or(0))
    }
}

/// Evidence seen twice, then a grace (invariant 8): what each pass saw, keyed
/// by what the evidence is about, with the server time it was first seen.
///
/// A pass calls [`Sightings::see`] for every piece of evidence it finds and
/// then [`Sightings::end_pass`]: what was not seen again is forgotten, so
/// evidence that went away (a node that came back) starts its grace again.
/// The map is plain data, so the plugin keeps it in a node-local file and the
/// controller in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sightings<K: Ord> {
    first: BTreeMap<K, i64>,
    this_pass: BTreeMap<K, i64>,
}

impl<K: Ord> Default for Sightings<K> {
    fn default() -> Self {
        Self { first: BTreeMap::new(), this_pass: BTreeMap::new() }
    }
}

impl<K: Ord + Clone> Sightings<K> {
    /// Sightings remembered from earlier passes (key → first seen, seconds).
    pub fn from_map(first: BTreeMap<K, i64>) -> Self {
        Self { first, this_pass: BTreeMap::new() }
    }

    /// Records that `key` is seen at `now` (seconds).
    pub fn see(&mut self, key: K, now: i64) -> Seen {
        let seen = match self.first.get(&key) {
            Some(first) => Seen { first: *first, repeated: true },
            None => Seen { first: now, repeated: false },
        };
        self.this_pass.insert(key, seen.first);
        seen
    }

    /// Forgets `key` now (it was acted on).
    pub fn forget(&mut self, key: &K) {
        self.this_pass.remove(key);
        self.first.remove(key);
    }

    /// Ends a pass: keeps exactly what this pass saw, and returns it.
    pub fn end_pass(&mut self) -> &BTreeMap<K, i64> {
        self.first = std::mem::take(&mut self.this_pass);
        &self.first
    }

    /// Ends a pass but keeps, beside what this pass saw, the earlier
    /// sightings for which `keep` holds (evidence this pass did not look at).
    pub fn end_pass_keeping(&mut self, keep: impl Fn(&K) -> bool) -> &BTreeMap<K, i64> {
        let mut next = std::mem::take(&mut self.this_pass);
        for (k, t) in std::mem::take(&mut self.first) {
            if keep(&k) {
                next.entry(k).or_insert(t);
            }
        }
        self.first = next;
        &self.first
    }

    /// What is remembered (after [`Sightings::end_pass`]).
    pub fn remembered(&self) -> &BTreeMap<K, i64> {
        &self.first
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + secs).unwrap()
    }

    #[test]
    fn a_release_is_stuck_only_past_its_own_bound_on_the_servers_clock() {
        let s = Duration::from_secs;
        // (released at, stamped bound, default, now, expected)
        assert_eq!(release_state(None, None, s(10), Some(t(100))), ReleaseState::Live);
        assert_eq!(release_state(Some(t(0)), None, s(10), None), ReleaseState::Young { left: None });
        assert_eq!(release_state(Some(t(0)), None, s(10), Some(t(5))), ReleaseState::Young { left: Some(s(7)) });
        assert_eq!(
            release_state(Some(t(0)), None, s(10), Some(t(11))),
            ReleaseState::Stuck { age: s(10), bound: s(10) }
        );
        // The lease's own bound wins over the default, both ways.
        assert!(matches!(release_state(Some(t(0)), Some(s(3600)), s(1), Some(t(40))), ReleaseState::Young { .. }));
        assert!(matches!(release_state(Some(t(0)), Some(s(2)), s(3600), Some(t(5))), ReleaseState::Stuck { .. }));
        // Sub-second bounds are not truncated.
        assert!(matches!(
            release_state(Some(t(0)), Some(Duration::from_millis(1500)), s(1), Some(t(2))),
            ReleaseState::Young { .. }
        ));
        assert!(matches!(
            release_state(Some(t(0)), Some(Duration::from_millis(1500)), s(1), Some(t(3))),
            ReleaseState::Stuck { .. }
        ));
    }

    #[test]
    fn evidence_ripens_only_when_seen_twice_and_the_grace_passed() {
        let mut s: Sightings<String> = Sightings::default();
        let grace = Duration::from_secs(60);
        let first = s.see("n".into(), 1000);
        assert!(!first.repeated && !first.ripe(1000, grace));
        s.end_pass();
        let again = s.see("n".into(), 1030);
        assert!(again.repeated && !again.ripe(1030, grace), "seen twice, grace not over");
        assert_eq!(again.ripens_in(1030, grace), Duration::from_secs(31));
        s.end_pass();
        assert!(s.see("n".into(), 1061).ripe(1061, grace));
        s.end_pass();
        // Not seen in a pass: forgotten, and its grace starts again.
        s.end_pass();
        let back = s.see("n".into(), 2000);
        assert!(!back.repeated);
        assert_eq!(back.first, 2000);
    }

    #[test]
    fn a_pass_may_keep_evidence_it_did_not_look_at() {
        let mut s = Sightings::from_map(BTreeMap::from([("a".to_string(), 1), ("b".to_string(), 2)]));
        s.see("c".into(), 3);
        let kept = s.end_pass_keeping(|k| k == "a").clone();
        assert_eq!(kept, BTreeMap::from([("a".to_string(), 1), ("c".to_string(), 3)]));
        s.forget(&"a".to_string());
        assert!(!s.remembered().contains_key("a"));
    }
}
