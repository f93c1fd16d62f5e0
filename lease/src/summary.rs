//! The summaries the controller writes and ADDs read: per shard (an
//! aligned block of [`SHARD_SIZE`] addresses) a bitmap of leased and of
//! releasing addresses, and per pool the counts of each shard.
//!
//! They are hints: an ADD picks an address the summary shows free and still
//! claims it by creating its lease, so a stale summary costs a refused
//! create, never a second holder.

use std::collections::BTreeMap;
use std::net::IpAddr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use netendpoint_crd::{NetworkEndpointShardStatus, PoolSummary, SHARD_SIZE, ShardRun};

use crate::addr::{from_u128, to_u128};

/// Bytes of a shard bitmap.
pub const BITMAP_BYTES: usize = (SHARD_SIZE / 8) as usize;

/// The first address of the shard holding `ip`.
pub fn shard_first(ip: IpAddr) -> IpAddr {
    from_u128(ip, to_u128(ip) & !u128::from(SHARD_SIZE - 1))
}

/// The position of `ip` in its shard.
pub fn shard_index(ip: IpAddr) -> usize {
    (to_u128(ip) & u128::from(SHARD_SIZE - 1)) as usize
}

/// The shard after the one starting at `first`, if the family has one.
pub fn next_shard(first: IpAddr) -> Option<IpAddr> {
    let v = to_u128(first).checked_add(u128::from(SHARD_SIZE))?;
    let max = if first.is_ipv4() { u128::from(u32::MAX) } else { u128::MAX };
    (v <= max).then(|| from_u128(first, v))
}

/// One bit per address of a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bitmap(pub [u8; BITMAP_BYTES]);

impl Bitmap {
    /// Sets the bit of position `i`.
    pub fn set(&mut self, i: usize) {
        if let Some(b) = self.0.get_mut(i / 8) {
            *b |= 1 << (i % 8);
        }
    }

    /// Clears the bit of position `i`.
    pub fn clear(&mut self, i: usize) {
        if let Some(b) = self.0.get_mut(i / 8) {
            *b &= !(1 << (i % 8));
        }
    }

    /// The bit of position `i`.
    pub fn get(&self, i: usize) -> bool {
        self.0.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0)
    }

    /// How many bits are set.
    pub fn count(&self) -> u32 {
        self.0.iter().map(|b| b.count_ones()).sum()
    }

    /// Base64 of the bytes, as the shard status carries it.
    pub fn encode(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// The bitmap of a shard status field; `None` when it is not one.
    pub fn decode(s: &str) -> Option<Self> {
        let bytes = STANDARD.decode(s).ok()?;
        Some(Self(bytes.try_into().ok()?))
    }
}

/// A shard as an ADD reads it: the leased and the releasing addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShardView {
    /// Leased addresses, live or releasing.
    pub leased: Bitmap,
    /// Addresses whose lease is being released.
    pub releasing: Bitmap,
}

impl ShardView {
    /// The view of a shard status; `None` when a bitmap does not decode.
    pub fn of(status: &NetworkEndpointShardStatus) -> Option<Self> {
        Some(Self { leased: Bitmap::decode(&status.leased_bits)?, releasing: Bitmap::decode(&status.releasing_bits)? })
    }

    /// The status that carries this view (without `updated_at`).
    pub fn status(&self) -> NetworkEndpointShardStatus {
        NetworkEndpointShardStatus {
            leased_bits: self.leased.encode(),
            releasing_bits: self.releasing.encode(),
            leased: self.leased.count(),
            releasing: self.releasing.count(),
            updated_at: None,
        }
    }
}

/// The counts a pool summary carries, keyed by shard start (as an integer;
/// the two families never share a summary run).
pub fn counts_of(summary: &PoolSummary) -> BTreeMap<IpAddr, (u16, u16)> {
    let mut out = BTreeMap::new();
    for run in &summary.runs {
        let Ok(first) = run.first.parse::<IpAddr>() else { continue };
        let (Ok(leased), Ok(releasing)) = (STANDARD.decode(&run.leased), STANDARD.decode(&run.releasing)) else {
            continue;
        };
        let mut at = Some(first);
        for (l, r) in leased.chunks_exact(2).zip(releasing.chunks_exact(2)) {
            let Some(shard) = at else { break };
            let (l, r) = (u16::from_be_bytes([l[0], l[1]]), u16::from_be_bytes([r[0], r[1]]));
            if l > 0 {
                out.insert(shard, (l, r));
            }
            at = next_shard(shard);
        }
    }
    out
}

/// The runs of a pool summary for `counts` (shards without leases are left
/// out, and break a run).
pub fn runs_of(counts: &BTreeMap<IpAddr, (u16, u16)>) -> Vec<ShardRun> {
    let mut runs = Vec::new();
    let mut cur: Option<(IpAddr, IpAddr, Vec<u8>, Vec<u8>)> = None;
    for (&shard, &(l, r)) in counts.iter().filter(|(_, (l, _))| *l > 0) {
        match &mut cur {
            Some((_, last, leased, releasing)) if next_shard(*last) == Some(shard) => {
                leased.extend(l.to_be_bytes());
                releasing.extend(r.to_be_bytes());
                *last = shard;
            }
            _ => {
                if let Some((first, _, l0, r0)) = cur.take() {
                    runs.push(run(first, &l0, &r0));
                }
                cur = Some((shard, shard, l.to_be_bytes().to_vec(), r.to_be_bytes().to_vec()));
            }
        }
    }
    if let Some((first, _, l0, r0)) = cur {
        runs.push(run(first, &l0, &r0));
    }
    runs
}

fn run(first: IpAddr, leased: &[u8], releasing: &[u8]) -> ShardRun {
    ShardRun { first: first.to_string(), leased: STANDARD.encode(leased), releasing: STANDARD.encode(releasing) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn shards_are_aligned_blocks_of_each_family() {
        assert_eq!(shard_first(ip("10.244.3.77")), ip("10.244.3.0"));
        assert_eq!(shard_index(ip("10.244.3.77")), 77);
        assert_eq!(shard_first(ip("fd00::1:2ff")), ip("fd00::1:200"));
        assert_eq!(next_shard(ip("10.244.3.0")), Some(ip("10.244.4.0")));
        assert_eq!(next_shard(ip("255.255.255.0")), None);
    }

    #[test]
    fn bitmaps_round_trip_through_base64() {
        let mut b = Bitmap::default();
        for i in [0, 7, 8, 255] {
            b.set(i);
        }
        assert_eq!(b.count(), 4);
        let text = b.encode();
        assert_eq!(text.len(), 44);
        let back = Bitmap::decode(&text).unwrap();
        assert!(back.get(0) && back.get(7) && back.get(8) && back.get(255) && !back.get(1));
        assert_eq!(Bitmap::decode("AAAA"), None, "too short");
        let mut v = ShardView { leased: b, ..ShardView::default() };
        v.releasing.set(7);
        assert_eq!(ShardView::of(&v.status()), Some(v));
    }

    #[test]
    fn pool_summaries_round_trip_and_break_runs_at_empty_shards() {
        let counts = BTreeMap::from([
            (ip("10.0.0.0"), (250, 3)),
            (ip("10.0.1.0"), (256, 0)),
            (ip("10.0.3.0"), (1, 1)),
            (ip("fd00::"), (2, 0)),
        ]);
        let runs = runs_of(&counts);
        assert_eq!(runs.len(), 3, "{runs:?}");
        assert_eq!((runs[0].first.as_str(), runs[1].first.as_str()), ("10.0.0.0", "10.0.3.0"));
        let summary = PoolSummary { confirmed_at: None, runs };
        assert_eq!(counts_of(&summary), counts);
    }
}
