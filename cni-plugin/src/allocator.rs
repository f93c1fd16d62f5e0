//! Pure allocation logic: ranges, usable addresses and candidate order.
//!
//! No Kubernetes here. A [`RangeSet`] knows which addresses are usable and in
//! what order to try them: round-robin, starting right after the most recent
//! allocation, so that an address released just now is the last one reused.
//! Which candidates are taken is decided by the store (an atomic create per
//! address); this module never needs to know.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

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
    /// True if `ip` may be handed out: inside a range, not a gateway, not excluded.
    pub fn is_usable(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|r| r.contains(ip) && r.gateway != Some(ip))
            && !self.exclude.iter().any(|n| n.contains(&ip))
    }

    /// The range holding `ip`, if any.
    pub fn range_of(&self, ip: IpAddr) -> Option<&Range> {
        self.ranges.iter().find(|r| r.contains(ip))
    }

    /// Number of usable addresses (gateways and exclusions taken out).
    pub fn capacity(&self) -> u128 {
        let total: u128 = self
            .ranges
            .iter()
            .map(|r| {
                let n = to_u128(r.end) - to_u128(r.start) + 1;
                n - u128::from(r.gateway.is_some_and(|g| r.contains(g)))
            })
            .sum();
        // Exclusions are usually a handful of addresses; count them exactly
        // when small, and by size otherwise.
        let excluded: u128 = self
            .exclude
            .iter()
            .map(|n| {
                self.ranges
                    .iter()
                    .map(|r| overlap(r, n) - u128::from(r.gateway.is_some_and(|g| n.contains(&g) && r.contains(g))))
                    .sum::<u128>()
            })
            .sum();
        total.saturating_sub(excluded)
    }

    /// Every usable address exactly once, in round-robin order starting just
    /// after `after` (the most recent allocation). Without a cursor, or with
    /// one outside the set, it starts at the first range's start.
    pub fn candidates(&self, after: Option<IpAddr>) -> impl Iterator<Item = IpAddr> + '_ {
        let spans: Vec<(IpAddr, u128, u128)> =
            self.ranges.iter().map(|r| (r.start, to_u128(r.start), to_u128(r.end))).collect();
        let (first_range, first_offset) = after
            .and_then(|a| self.ranges.iter().position(|r| r.contains(a)).map(|i| (i, to_u128(a) - spans[i].1 + 1)))
            .unwrap_or((0, 0));
        let n = spans.len();
        // Visit: the rest of the cursor's range, the other ranges in order,
        // then the cursor's range from its start up to and including the cursor.
        let order = (0..=n).map(move |k| {
            let i = (first_range + k) % n.max(1);
            let (lo_off, hi_off) = match k {
                0 => (first_offset, None),
                k if k == n => (0, Some(first_offset)),
                _ => (0, None),
            };
            (i, lo_off, hi_off)
        });
        order
            .flat_map(move |(i, lo_off, hi_off)| {
                let (fam, lo, hi) = spans.get(i).copied().unwrap_or((IpAddr::V4(Ipv4Addr::UNSPECIFIED), 1, 0));
                let from = lo.saturating_add(lo_off);
                let to = match hi_off {
                    Some(0) => None,
                    Some(h) => Some(lo + h - 1),
                    None => Some(hi),
                };
                let to = to.filter(|t| *t >= from && n > 0);
                to.into_iter().flat_map(move |t| (from..=t).map(move |v| from_u128(fam, v)))
            })
            .filter(move |ip| self.is_usable(*ip))
    }
}

fn overlap(r: &Range, n: &IpNet) -> u128 {
    if r.start.is_ipv4() != n.addr().is_ipv4() {
        return 0;
    }
    let lo = to_u128(r.start).max(to_u128(n.network()));
    let hi = to_u128(r.end).min(to_u128(n.broadcast()));
    if lo > hi { 0 } else { hi - lo + 1 }
}

/// An address as an integer (IPv4 in the low 32 bits).
pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The address of family `like` with integer value `v` (truncated to 32 bits for IPv4).
pub fn from_u128(like: IpAddr, v: u128) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from((v & 0xffff_ffff) as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(v)),
    }
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

    #[test]
    fn every_address_once_for_any_cursor() {
        let s = RangeSet {
            ranges: vec![
                Range::with_defaults("10.1.0.0/29".parse().unwrap(), None, None, None).unwrap(),
                Range::with_defaults("10.2.0.0/30".parse().unwrap(), None, None, None).unwrap(),
            ],
            exclude: vec!["10.1.0.4/31".parse().unwrap()],
        };
        let reference: std::collections::BTreeSet<IpAddr> = s.candidates(None).collect();
        assert_eq!(reference.len() as u128, s.capacity());
        for cursor in reference.iter().copied().chain([ip("10.1.0.1"), ip("10.2.0.3")]) {
            let got: Vec<IpAddr> = s.candidates(Some(cursor)).collect();
            let uniq: std::collections::BTreeSet<IpAddr> = got.iter().copied().collect();
            assert_eq!(uniq, reference, "cursor {cursor}");
            assert_eq!(got.len(), reference.len(), "cursor {cursor}");
        }
    }
}
