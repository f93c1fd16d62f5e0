//! Pure allocation logic: ranges, usable addresses and candidate order.
//!
//! No Kubernetes here. A [`RangeSet`] knows which addresses are usable and in
//! what order to try them: round-robin, starting right after the most recent
//! allocation, so that an address released just now is the last one reused.
//! Which candidates are taken is decided by the store (an atomic create per
//! address); this module never needs to know.

use std::net::IpAddr;

use ipnet::IpNet;
use netendpoint_lease::addr::{from_u128, to_u128};

/// One contiguous range inside a subnet (host-local's `range`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// The subnet (host bits cleared).
    pub subnet: IpNet,
    /// First usable address, inclusive.
    pub start: IpAddr,
    /// Last usable address, inclusive.
    pub end: IpAddr,
    /// Gateway, never handed out.
    pub gateway: Option<IpAddr>,
}

impl Range {
    /// A range with host-local's defaults: from the subnet's first host
    /// address to its last (IPv4: the broadcast address excluded), with the
    /// first host address as gateway unless `gateway` says otherwise.
    /// Returns `None` when the subnet has no usable address.
    pub fn with_defaults(
        subnet: IpNet,
        start: Option<IpAddr>,
        end: Option<IpAddr>,
        gateway: Option<Option<IpAddr>>,
    ) -> Option<Self> {
        let subnet = subnet.trunc();
        let net = to_u128(subnet.network());
        let last = to_u128(subnet.broadcast());
        let (first_host, last_host) = match subnet {
            IpNet::V4(n) if n.prefix_len() >= 31 => (net, last),
            IpNet::V4(_) => (net + 1, last - 1),
            IpNet::V6(n) if n.prefix_len() == 128 => (net, last),
            IpNet::V6(_) => (net + 1, last),
        };
        let fam = subnet.addr();
        let gateway = gateway.unwrap_or_else(|| Some(from_u128(fam, net + 1)).filter(|_| first_host < last_host));
        Some(Self {
            subnet,
            start: start.unwrap_or(from_u128(fam, first_host)),
            end: end.unwrap_or(from_u128(fam, last_host)),
            gateway,
        })
        .filter(|r| to_u128(r.start) <= to_u128(r.end))
    }

    /// True if `ip` lies between start and end (same family).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.start.is_ipv4() && (to_u128(self.start)..=to_u128(self.end)).contains(&to_u128(ip))
    }
}

/// One range set: all ranges from which a single address per interface is
/// drawn (host-local's inner list of `ranges`). One family per set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSet {
    /// Ranges in configuration order.
    pub ranges: Vec<Range>,
    /// Addresses never handed out (`ipam.exclude`).
    pub exclude: Vec<IpNet>,
}

impl RangeSet {
    /// The family of the set's addresses (one family per set; IPv4 for a set without ranges).
    pub fn family(&self) -> netendpoint_crd::IpFamily {
        self.ranges.first().map_or(netendpoint_crd::IpFamily::IPv4, |r| netendpoint_crd::IpFamily::of(r.start))
    }

    /// True if `ip` may be handed out: inside a range, not a gateway, not excluded.
    pub fn is_usable(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|r| r.contains(ip) && r.gateway != Some(ip))
            && !self.exclude.iter().any(|n| n.contains(&ip))
    }

    /// The range holding `ip`, if any.
    pub fn range_of(&self, ip: IpAddr) -> Option<&Range> {
        self.ranges.iter().find(|r| r.contains(ip))
    }

    /// Number of usable addresses (gateways and exclusions taken out). An
    /// address covered by several exclusions, or a gateway that is also
    /// excluded, is counted once. Equals `candidates(_).count()` (saturating
    /// at `u128::MAX`).
    pub fn capacity(&self) -> u128 {
        self.usable_ranges().iter().map(UsableRange::len).fold(0, u128::saturating_add)
    }

    /// Every usable address exactly once, in round-robin order starting just
    /// after `after` (the most recent allocation). Without a cursor, or with
    /// one outside the set, it starts at the first range's start. Lazy:
    /// excluded spans are jumped over, so the cost per address does not
    /// depend on how many addresses are excluded.
    pub fn candidates(&self, after: Option<IpAddr>) -> impl Iterator<Item = IpAddr> + '_ {
        let ranges = self.usable_ranges();
        let n = ranges.len();
        let cursor = after
            .and_then(|a| self.ranges.iter().position(|r| r.contains(a)).map(|i| (i, to_u128(a))))
            .filter(|_| n > 0);
        let first = cursor.map_or(0, |(i, _)| i);
        // Visit: the rest of the cursor's range, the other ranges in order,
        // then the cursor's range from its start up to and including the cursor.
        let mut segments = Vec::with_capacity(n + 1);
        match cursor {
            Some((i, a)) if a < ranges[i].hi => segments.push((i, a + 1, ranges[i].hi)),
            Some(_) => {}
            None if n > 0 => segments.push((0, ranges[0].lo, ranges[0].hi)),
            None => {}
        }
        segments.extend((1..n).map(|k| (first + k) % n).map(|i| (i, ranges[i].lo, ranges[i].hi)));
        if let Some((i, a)) = cursor {
            segments.push((i, ranges[i].lo, a));
        }
        Candidates { ranges, segments: segments.into_iter(), walk: None }
    }

    /// Usable addresses in the shard starting at `first` (see
    /// [`netendpoint_lease::summary`]): at most one shard's worth are looked at.
    pub fn usable_in_shard(&self, first: IpAddr) -> usize {
        let lo = to_u128(first);
        (lo..lo.saturating_add(u128::from(netendpoint_crd::SHARD_SIZE)))
            .map(|v| from_u128(first, v))
            .filter(|ip| self.is_usable(*ip))
            .count()
    }

    /// True if some range of the set overlaps the shard starting at `first`.
    pub fn touches_shard(&self, first: IpAddr) -> bool {
        let lo = to_u128(first);
        let hi = lo.saturating_add(u128::from(netendpoint_crd::SHARD_SIZE) - 1);
        self.ranges
            .iter()
            .any(|r| r.start.is_ipv4() == first.is_ipv4() && to_u128(r.start) <= hi && to_u128(r.end) >= lo)
    }

    /// Where a node with no cursor yet starts its round-robin: a point
    /// spread over the set by a hash of `key` (the node name), so that nodes
    /// do not all probe the same first addresses. `None` in sets of at most
    /// [`SPREAD_ABOVE`] addresses: they keep host-local's order from the first address.
    pub fn spread_start(&self, key: &str) -> Option<IpAddr> {
        if self.capacity() <= SPREAD_ABOVE {
            return None;
        }
        self.point(key)
    }

    /// A point of the set chosen by a hash of `key`: the same key, the same
    /// point; different keys spread evenly. The point itself may be unusable
    /// (a gateway, an exclusion): use it as a start of [`Self::candidates`].
    pub fn point(&self, key: &str) -> Option<IpAddr> {
        let spans: Vec<(u128, u128)> =
            self.ranges.iter().map(|r| (to_u128(r.start), to_u128(r.end) - to_u128(r.start) + 1)).collect();
        let total = spans.iter().try_fold(0u128, |acc, (_, len)| acc.checked_add(*len))?;
        let mut offset = u128::from(spread_hash(key)) % total;
        for (r, (lo, len)) in self.ranges.iter().zip(spans) {
            if offset < len {
                return Some(from_u128(r.start, lo + offset));
            }
            offset -= len;
        }
        None
    }

    /// The usable addresses as inclusive spans `(first, last)`, in range
    /// order: each range with its gateway and exclusions cut out. What a
    /// waiting ADD's queue entry announces it can take.
    pub fn usable_spans(&self) -> Vec<(IpAddr, IpAddr)> {
        let mut out = Vec::new();
        for r in self.usable_ranges() {
            let mut from = Some(r.lo);
            for &(a, b) in &r.holes {
                if let Some(f) = from.filter(|f| *f < a) {
                    out.push((from_u128(r.family, f), from_u128(r.family, a - 1)));
                }
                from = b.checked_add(1);
            }
            if let Some(f) = from.filter(|f| *f <= r.hi) {
                out.push((from_u128(r.family, f), from_u128(r.family, r.hi)));
            }
        }
        out
    }

    fn usable_ranges(&self) -> Vec<UsableRange> {
        self.ranges.iter().map(|r| UsableRange::new(r, &self.exclude)).collect()
    }
}

/// Inclusive spans sorted and merged where they overlap or touch.
pub(crate) fn merge_spans(mut spans: Vec<(u128, u128)>) -> Vec<(u128, u128)> {
    spans.sort_unstable();
    let mut out: Vec<(u128, u128)> = Vec::with_capacity(spans.len());
    for (a, b) in spans {
        match out.last_mut() {
            Some((_, last)) if a <= last.saturating_add(1) => *last = (*last).max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// One range as integers, with its holes: the exclusions clipped to it and
/// its gateway, sorted, merged, and never adjacent to one another.
struct UsableRange {
    family: IpAddr,
    lo: u128,
    hi: u128,
    holes: Vec<(u128, u128)>,
}

impl UsableRange {
    fn new(r: &Range, exclude: &[IpNet]) -> Self {
        let (lo, hi) = (to_u128(r.start), to_u128(r.end));
        let spans: Vec<(u128, u128)> = exclude
            .iter()
            .filter(|n| n.addr().is_ipv4() == r.start.is_ipv4())
            .map(|n| (to_u128(n.network()).max(lo), to_u128(n.broadcast()).min(hi)))
            .chain(r.gateway.filter(|g| r.contains(*g)).map(|g| (to_u128(g), to_u128(g))))
            .filter(|(a, b)| a <= b)
            .collect();
        Self { family: r.start, lo, hi, holes: merge_spans(spans) }
    }

    /// Usable addresses in the range (saturating for a whole IPv6 space).
    fn len(&self) -> u128 {
        let size = (self.hi - self.lo).saturating_add(1);
        let holes = self.holes.iter().map(|(a, b)| (b - a).saturating_add(1)).fold(0, u128::saturating_add);
        size.saturating_sub(holes)
    }
}

/// The iterator behind [`RangeSet::candidates`]: segments `(range, from, to)`
/// walked in order, each jumping over the holes of its range.
struct Candidates {
    ranges: Vec<UsableRange>,
    segments: std::vec::IntoIter<(usize, u128, u128)>,
    walk: Option<Walk>,
}

/// Position inside one segment: the next value to consider, the last one,
/// and the first hole that may still lie ahead.
struct Walk {
    range: usize,
    next: Option<u128>,
    last: u128,
    hole: usize,
}

impl Walk {
    /// The next usable value of the segment. Holes are merged and never
    /// adjacent, so this makes at most one jump.
    fn step(&mut self, holes: &[(u128, u128)]) -> Option<u128> {
        let mut at = self.next?;
        while let Some(&(lo, hi)) = holes.get(self.hole) {
            if hi < at {
                self.hole += 1;
            } else if lo <= at {
                if hi >= self.last {
                    self.next = None;
                    return None;
                }
                self.hole += 1;
                at = hi + 1;
            } else {
                break;
            }
        }
        if at > self.last {
            self.next = None;
            return None;
        }
        self.next = (at < self.last).then(|| at + 1);
        Some(at)
    }
}

impl Iterator for Candidates {
    type Item = IpAddr;

    fn next(&mut self) -> Option<IpAddr> {
        loop {
            if let Some(walk) = &mut self.walk {
                let range = &self.ranges[walk.range];
                if let Some(v) = walk.step(&range.holes) {
                    return Some(from_u128(range.family, v));
                }
            }
            let (range, from, to) = self.segments.next()?;
            let hole = self.ranges[range].holes.partition_point(|&(_, hi)| hi < from);
            self.walk = Some(Walk { range, next: Some(from), last: to, hole });
        }
    }
}

/// Sets larger than this spread their nodes' start points (one IPv4 /24).
pub const SPREAD_ABOVE: u128 = 256;

/// A well-mixed 64-bit hash of `key` that spreads similar keys apart
/// (FNV-1a, then the splitmix64 finaliser), stable across versions and
/// platforms: nodes and sandboxes keep their spread points across upgrades.
pub fn spread_hash(key: &str) -> u64 {
    let mut h = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn set(subnet: &str) -> RangeSet {
        RangeSet {
            ranges: vec![Range::with_defaults(subnet.parse().unwrap(), None, None, None).unwrap()],
            exclude: vec![],
        }
    }

    #[test]
    fn usable_spans_are_the_candidates_without_gateways_and_exclusions() {
        let mut s = set("10.0.0.0/28");
        s.exclude = vec!["10.0.0.4/31".parse().unwrap(), "10.0.0.14/32".parse().unwrap()];
        assert_eq!(
            s.usable_spans(),
            [(ip("10.0.0.2"), ip("10.0.0.3")), (ip("10.0.0.6"), ip("10.0.0.13"))],
            "the gateway .1, .4-.5 and the last usable .14 cut out"
        );
        let spanned: Vec<IpAddr> =
            s.usable_spans().iter().flat_map(|(a, b)| (to_u128(*a)..=to_u128(*b)).map(|v| from_u128(*a, v))).collect();
        assert_eq!(spanned, s.candidates(None).collect::<Vec<_>>());
        let whole = set("fd00::/64");
        assert_eq!(whole.usable_spans(), [(ip("fd00::2"), ip("fd00::ffff:ffff:ffff:ffff"))]);
    }

    #[test]
    fn host_local_defaults() {
        let cases = [
            // subnet, start, end, gateway, capacity
            ("10.0.0.0/24", "10.0.0.1", "10.0.0.254", Some("10.0.0.1"), 253),
            ("10.0.0.0/30", "10.0.0.1", "10.0.0.2", Some("10.0.0.1"), 1),
            ("10.0.0.7/29", "10.0.0.1", "10.0.0.6", Some("10.0.0.1"), 5),
            ("fd00::/120", "fd00::1", "fd00::ff", Some("fd00::1"), 254),
            ("10.0.0.0/31", "10.0.0.0", "10.0.0.1", Some("10.0.0.1"), 1),
        ];
        for (subnet, start, end, gw, cap) in cases {
            let s = set(subnet);
            let r = &s.ranges[0];
            assert_eq!((r.start, r.end, r.gateway), (ip(start), ip(end), gw.map(ip)), "{subnet}");
            assert_eq!(s.capacity(), cap, "{subnet}");
            assert_eq!(s.candidates(None).count() as u128, cap, "{subnet}");
        }
        assert_eq!(set("10.0.0.1/32").capacity(), 1);
    }

    #[test]
    fn round_robin_starts_after_the_cursor_and_wraps() {
        let s = set("10.0.0.0/29"); // usable .2 .. .6 (.1 is the gateway)
        let order =
            |after: Option<&str>| -> Vec<String> { s.candidates(after.map(ip)).map(|i| i.to_string()).collect() };
        assert_eq!(order(None), ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]);
        assert_eq!(order(Some("10.0.0.4")), ["10.0.0.5", "10.0.0.6", "10.0.0.2", "10.0.0.3", "10.0.0.4"]);
        assert_eq!(order(Some("10.0.0.6")), ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]);
        // A cursor outside the set starts at the beginning.
        assert_eq!(order(Some("192.168.0.1"))[0], "10.0.0.2");
    }

    #[test]
    fn a_just_released_address_is_the_last_candidate() {
        // Allocated .2..=.5 in order; .3 is released. The cursor is still .5,
        // so .3 comes after every never-used address.
        let s = set("10.0.0.0/28");
        let order: Vec<IpAddr> = s.candidates(Some(ip("10.0.0.5"))).collect();
        let free: Vec<IpAddr> = order
            .iter()
            .copied()
            .filter(|a| !["10.0.0.2", "10.0.0.4", "10.0.0.5"].contains(&a.to_string().as_str()))
            .collect();
        assert_eq!(free.last(), Some(&ip("10.0.0.3")));
    }

    #[test]
    fn several_ranges_exclusions_and_gateways() {
        let s = RangeSet {
            ranges: vec![
                Range::with_defaults(
                    "10.0.0.0/24".parse().unwrap(),
                    Some(ip("10.0.0.10")),
                    Some(ip("10.0.0.12")),
                    None,
                )
                .unwrap(),
                Range::with_defaults("10.0.1.0/24".parse().unwrap(), Some(ip("10.0.1.1")), Some(ip("10.0.1.3")), None)
                    .unwrap(),
            ],
            exclude: vec!["10.0.0.11/32".parse().unwrap()],
        };
        let all: Vec<String> = s.candidates(Some(ip("10.0.0.10"))).map(|i| i.to_string()).collect();
        // 10.0.1.1 is the second range's default gateway.
        assert_eq!(all, ["10.0.0.12", "10.0.1.2", "10.0.1.3", "10.0.0.10"]);
        assert_eq!(s.capacity(), 4);
        assert!(!s.is_usable(ip("10.0.0.11")));
        assert!(!s.is_usable(ip("10.0.0.13")));
    }

    #[test]
    fn large_ranges_are_lazy() {
        let s = set("fd00::/64");
        assert_eq!(s.capacity(), (1u128 << 64) - 2);
        let first: Vec<IpAddr> = s.candidates(Some(ip("fd00::ffff"))).take(2).collect();
        assert_eq!(first, [ip("fd00::1:0"), ip("fd00::1:1")]);
    }

    /// The order `candidates` must keep, the slow way: every address of
    /// every range in order, rotated to start just after the cursor, filtered
    /// by `is_usable`.
    fn walk_and_filter(s: &RangeSet, after: Option<IpAddr>) -> Vec<IpAddr> {
        let all: Vec<IpAddr> = s
            .ranges
            .iter()
            .flat_map(|r| (to_u128(r.start)..=to_u128(r.end)).map(move |v| from_u128(r.start, v)))
            .collect();
        let at = after.filter(|a| s.range_of(*a).is_some()).and_then(|a| all.iter().position(|x| *x == a));
        let at = at.map_or(0, |p| p + 1);
        all[at..].iter().chain(&all[..at]).copied().filter(|a| s.is_usable(*a)).collect()
    }

    fn excluding(mut s: RangeSet, exclude: &[&str]) -> RangeSet {
        s.exclude = exclude.iter().map(|e| e.parse().unwrap()).collect();
        s
    }

    #[test]
    fn every_address_once_for_any_cursor() {
        let ranges = vec![
            Range::with_defaults("10.1.0.0/29".parse().unwrap(), None, None, None).unwrap(),
            Range::with_defaults("10.2.0.0/30".parse().unwrap(), None, None, None).unwrap(),
        ];
        let cases: [&[&str]; 6] = [
            &[],
            &["10.1.0.4/31"],
            // Overlapping, nested and adjacent exclusions.
            &["10.1.0.4/31", "10.1.0.4/30", "10.1.0.5/32"],
            &["10.1.0.2/32", "10.1.0.3/32", "10.1.0.4/31"],
            // Covering a gateway; spanning both ranges.
            &["10.1.0.0/30", "10.1.0.1/32"],
            &["10.1.0.6/32", "10.0.0.0/8", "10.2.0.2/32"],
        ];
        for exclude in cases {
            let s = excluding(RangeSet { ranges: ranges.clone(), exclude: vec![] }, exclude);
            let reference: std::collections::BTreeSet<IpAddr> = s.candidates(None).collect();
            assert_eq!(reference.len() as u128, s.capacity(), "{exclude:?}");
            let cursors =
                s.ranges.iter().flat_map(|r| (to_u128(r.start)..=to_u128(r.end)).map(|v| from_u128(r.start, v)));
            for cursor in cursors.map(Some).chain([None, Some(ip("192.168.0.1"))]) {
                let got: Vec<IpAddr> = s.candidates(cursor).collect();
                let uniq: std::collections::BTreeSet<IpAddr> = got.iter().copied().collect();
                assert_eq!(uniq, reference, "{exclude:?} cursor {cursor:?}");
                assert_eq!(got.len(), reference.len(), "{exclude:?} cursor {cursor:?}");
                assert_eq!(got, walk_and_filter(&s, cursor), "{exclude:?} cursor {cursor:?}");
            }
        }
    }

    #[test]
    fn the_top_of_the_address_space() {
        // The range ends at u128::MAX: no overflow, no duplicate, for any cursor.
        let top = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0/124";
        for exclude in [&[][..], &["ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc/126"], &["::/0"]] {
            let s = excluding(set(top), exclude);
            let r = &s.ranges[0];
            let cursors = (to_u128(r.start)..=to_u128(r.end)).map(|v| Some(from_u128(r.start, v)));
            for cursor in cursors.chain([None]) {
                let got: Vec<IpAddr> = s.candidates(cursor).collect();
                assert_eq!(got, walk_and_filter(&s, cursor), "{exclude:?} after {cursor:?}");
                assert_eq!(got.len() as u128, s.capacity(), "{exclude:?} after {cursor:?}");
            }
        }
    }

    #[test]
    fn exclusions_in_large_ranges_are_jumped_over() {
        let cases = [
            // exclude, cursor, first two candidates
            ("fd00::/104", None, ["fd00::100:0", "fd00::100:1"]),
            ("fd00::/100", None, ["fd00::1000:0", "fd00::1000:1"]),
            ("fd00::/100", Some("fd00::5"), ["fd00::1000:0", "fd00::1000:1"]),
            ("fd00::/100", Some("fd00::1"), ["fd00::1000:0", "fd00::1000:1"]),
            ("fd00::/100", Some("fd00::ffff:ffff:ffff:ffff"), ["fd00::1000:0", "fd00::1000:1"]),
            ("fd00::8000:0:0:0/65", Some("fd00::7fff:ffff:ffff:fffe"), ["fd00::7fff:ffff:ffff:ffff", "fd00::2"]),
        ];
        for (exclude, cursor, first) in cases {
            let s = excluding(set("fd00::/64"), &[exclude]);
            let got: Vec<IpAddr> = s.candidates(cursor.map(ip)).take(2).collect();
            assert_eq!(got, first.map(ip), "{exclude} after {cursor:?}");
        }
        assert_eq!(excluding(set("fd00::/64"), &["fd00::/100"]).capacity(), (1u128 << 64) - (1 << 28));
    }

    #[test]
    fn a_thousand_candidates_past_a_huge_exclusion() {
        // Hang guard, not a performance assertion: walking the 2^28 excluded
        // addresses one by one would take minutes; jumping takes microseconds.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let s = excluding(set("fd00::/64"), &["fd00::/100", "fd00::1000:0/104", "fd00::1100:0/120"]);
            let _ = tx.send(s.candidates(Some(ip("fd00::7"))).take(1000).collect::<Vec<IpAddr>>());
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("candidates hang");
        assert_eq!(got.len(), 1000);
        assert_eq!(got[0], ip("fd00::1100:100"));
        assert_eq!(got[999], ip("fd00::1100:4e7"));
    }

    #[test]
    fn overlapping_exclusions_are_counted_once() {
        let cases: [(&str, &[&str], u128); 6] = [
            // subnet, exclude, capacity
            ("10.0.0.0/29", &["10.0.0.2/31", "10.0.0.2/32"], 3),
            ("10.0.0.0/29", &["10.0.0.2/31", "10.0.0.3/32", "10.0.0.0/30"], 3),
            ("10.0.0.0/29", &["10.0.0.4/31", "10.0.0.4/30", "10.0.0.0/29"], 0),
            ("10.0.0.0/28", &["10.0.0.4/30", "10.0.0.8/30", "10.0.0.6/31"], 5),
            ("fd00::/120", &["fd00::/124", "fd00::8/125", "fd00::/122"], 192),
            ("fd00::/64", &["fd00::/100", "fd00::/104", "fd00::1000:0/104"], (1u128 << 64) - (1 << 28) - (1 << 24)),
        ];
        for (subnet, exclude, cap) in cases {
            let s = excluding(set(subnet), exclude);
            assert_eq!(s.capacity(), cap, "{subnet} {exclude:?}");
            if cap < 1 << 16 {
                assert_eq!(s.candidates(None).count() as u128, cap, "{subnet} {exclude:?}");
                assert_eq!(s.candidates(None).collect::<Vec<_>>(), walk_and_filter(&s, None), "{subnet} {exclude:?}");
            }
        }
    }

    #[test]
    fn exclusions_covering_the_gateway() {
        let cases: [(&[&str], &[&str]); 3] = [
            // exclude, candidates (gateway .1)
            (&["10.0.0.0/30"], &["10.0.0.4", "10.0.0.5", "10.0.0.6"]),
            (&["10.0.0.1/32", "10.0.0.0/31"], &["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]),
            (&["10.0.0.0/31", "10.0.0.2/31"], &["10.0.0.4", "10.0.0.5", "10.0.0.6"]),
        ];
        for (exclude, want) in cases {
            let s = excluding(set("10.0.0.0/29"), exclude);
            let got: Vec<String> = s.candidates(None).map(|a| a.to_string()).collect();
            assert_eq!(got, want, "{exclude:?}");
            assert_eq!(s.capacity(), want.len() as u128, "{exclude:?}");
        }
    }

    #[test]
    fn an_exclusion_spanning_two_ranges() {
        // Ranges .2-.5 and .6-.9 (gateway .1 lies outside both); .4-.7 excluded.
        let r = |start: &str, end: &str| {
            Range::with_defaults("10.0.0.0/24".parse().unwrap(), Some(ip(start)), Some(ip(end)), None).unwrap()
        };
        let s = RangeSet {
            ranges: vec![r("10.0.0.2", "10.0.0.5"), r("10.0.0.6", "10.0.0.9")],
            exclude: vec!["10.0.0.4/30".parse().unwrap()],
        };
        let cases = [
            // cursor, candidates
            (None, ["10.0.0.2", "10.0.0.3", "10.0.0.8", "10.0.0.9"]),
            (Some("10.0.0.3"), ["10.0.0.8", "10.0.0.9", "10.0.0.2", "10.0.0.3"]),
            (Some("10.0.0.5"), ["10.0.0.8", "10.0.0.9", "10.0.0.2", "10.0.0.3"]),
            (Some("10.0.0.6"), ["10.0.0.8", "10.0.0.9", "10.0.0.2", "10.0.0.3"]),
            (Some("10.0.0.8"), ["10.0.0.9", "10.0.0.2", "10.0.0.3", "10.0.0.8"]),
        ];
        for (cursor, want) in cases {
            let got: Vec<String> = s.candidates(cursor.map(ip)).map(|a| a.to_string()).collect();
            assert_eq!(got, want, "after {cursor:?}");
        }
        assert_eq!(s.capacity(), 4);
    }

    #[test]
    fn exclusions_of_the_other_family_are_ignored() {
        // Numerically, 0.0.0.0/0 covers ::/96 and ::/0 covers every IPv4 address.
        let cases: [(&str, &[&str], u128); 3] = [
            // subnet, exclude, capacity
            ("10.0.0.0/29", &["::/0", "fd00::/8"], 5),
            ("::/120", &["0.0.0.0/0"], 254),
            ("::/120", &["0.0.0.0/0", "::80/121"], 126),
        ];
        for (subnet, exclude, cap) in cases {
            let s = excluding(set(subnet), exclude);
            assert_eq!(s.capacity(), cap, "{subnet} {exclude:?}");
            assert_eq!(s.candidates(None).count() as u128, cap, "{subnet} {exclude:?}");
        }
    }

    #[test]
    fn nodes_start_spread_over_large_sets_and_at_the_first_address_of_small_ones() {
        assert_eq!(set("10.0.0.0/24").spread_start("node-1"), None, "one block: host-local's order");
        let s = set("10.0.0.0/16");
        let starts: Vec<u128> =
            (0..64).map(|i| to_u128(s.spread_start(&format!("node-{i}")).unwrap()) - to_u128(ip("10.0.0.1"))).collect();
        let mut sorted = starts.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 64, "distinct starts");
        // Spread: no quarter of the /16 holds more than half of the starts.
        for q in 0..4u128 {
            let n = starts.iter().filter(|o| **o / 16384 == q).count();
            assert!(n <= 32, "quarter {q} holds {n} of 64 starts");
        }
        assert!(s.is_usable(s.candidates(s.spread_start("node-1")).next().unwrap()));
        assert_eq!(s.spread_start("node-1"), s.spread_start("node-1"), "stable");
    }

    #[test]
    fn shards_count_their_usable_addresses_and_know_their_ranges() {
        let s = excluding(set("10.0.0.0/23"), &["10.0.1.16/28"]);
        assert_eq!(s.usable_in_shard(ip("10.0.0.0")), 254, "network address and gateway out");
        assert_eq!(s.usable_in_shard(ip("10.0.1.0")), 256 - 16 - 1, "exclusion and broadcast out");
        assert_eq!(s.usable_in_shard(ip("10.0.2.0")), 0);
        assert!(s.touches_shard(ip("10.0.1.0")) && !s.touches_shard(ip("10.0.2.0")));
        assert!(!s.touches_shard(ip("::")), "another family");
    }
}
