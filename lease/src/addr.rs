//! Addresses as integers, the one arithmetic every part shares: the
//! allocator's ranges, the shards of the summaries, the controller's
//! accounting.
//!
//! An address maps to the integer of its family (IPv4 in the low 32 bits)
//! and back; [`from_u128`] is the inverse of [`to_u128`] on every value an
//! address of the family can take, and clamps the rest.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The address as an integer of its family: IPv4 in the low 32 bits, IPv6
/// as its 128 bits. Order-preserving within a family.
pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The address of the family of `like` whose integer is `v`.
///
/// For every `v` an address of that family can take, `to_u128(from_u128(like, v)) == v`.
/// An IPv4 value above `u32::MAX` saturates to `255.255.255.255`: it never
/// wraps to a low address, so the mapping stays monotonic and a walk past
/// the top of the IPv4 space cannot start again at `0.0.0.0`. Callers that
/// step past the top check [`u32::MAX`] themselves (as the shard walk does).
pub fn from_u128(like: IpAddr, v: u128) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(u32::try_from(v).unwrap_or(u32::MAX))),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(v)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_round_trip_and_ipv4_saturates_above_its_space() {
        let v4 = ip("10.0.0.1");
        let v6 = ip("fd00::1");
        let cases = [
            // like, value, address
            (v4, 0, "0.0.0.0"),
            (v4, 0x0a00_0001, "10.0.0.1"),
            (v4, u128::from(u32::MAX), "255.255.255.255"),
            (v4, u128::from(u32::MAX) + 1, "255.255.255.255"),
            (v4, u128::MAX, "255.255.255.255"),
            (v6, 0, "::"),
            (v6, 1, "::1"),
            (v6, u128::from(u32::MAX) + 1, "::1:0:0"),
            (v6, u128::MAX, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
        ];
        for (like, v, want) in cases {
            assert_eq!(from_u128(like, v), ip(want), "{like} {v:#x}");
        }
        for s in ["0.0.0.0", "10.244.3.77", "255.255.255.255", "::", "::ffff:10.1.2.3", "fd00::11", "ffff::"] {
            let a = ip(s);
            assert_eq!(from_u128(a, to_u128(a)), a, "{s}");
        }
        assert!(to_u128(ip("10.0.0.1")) < to_u128(ip("10.0.1.0")), "order-preserving");
    }
}
