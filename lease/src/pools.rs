//! Pool accounting over plain data: how many addresses a pool has
//! ([`Capacity`]) and the health of each pool at one instant
//! ([`pool_stats`]), in the figures the controller's metrics, the
//! `NetworkEndpointPool` status and `kubectl netendpoint pools` all show.
//!
//! No API calls here: each caller feeds what it listed or watched.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use netendpoint_crd::NetworkEndpointPoolStatus;

use crate::clock::age_at_least;
use crate::view::Lease;

/// Usable addresses of a pool, per IP family, when its ranges are known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capacity {
    /// IPv4 addresses.
    pub v4: u128,
    /// IPv6 addresses.
    pub v6: u128,
}

impl Capacity {
    /// The capacity of the family of `ip`.
    pub fn of(&self, ip: IpAddr) -> u128 {
        if ip.is_ipv4() { self.v4 } else { self.v6 }
    }

    /// Both families together.
    pub fn total(&self) -> u128 {
        self.v4.saturating_add(self.v6)
    }
}

/// The health of one pool at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Pool label value.
    pub pool: String,
    /// Usable addresses, when the pool's ranges are known.
    pub capacity: Option<u128>,
    /// Leases not being released.
    pub in_use: u64,
    /// Leases being released, waiting on finalizers.
    pub releasing: u64,
    /// Releasing leases that still list each finalizer.
    pub releasing_by_finalizer: BTreeMap<String, u64>,
    /// Age of the oldest release, a lower bound.
    pub oldest_release: Option<Duration>,
    /// When the oldest release was requested.
    pub oldest_release_since: Option<Timestamp>,
}

impl PoolStats {
    /// Addresses neither in use nor releasing, when the capacity is known.
    pub fn free(&self) -> Option<u128> {
        self.capacity.map(|c| c.saturating_sub(u128::from(self.in_use + self.releasing)))
    }
}

/// Figures of every pool that has a lease or a known capacity, by pool.
pub fn pool_stats<L: Borrow<Lease>>(
    leases: &[L],
    capacity: &HashMap<String, Capacity>,
    now: Timestamp,
) -> Vec<PoolStats> {
    let mut pools: BTreeMap<String, PoolStats> = BTreeMap::new();
    for (pool, cap) in capacity {
        let s = pools.entry(pool.clone()).or_default();
        s.capacity = Some(cap.total());
    }
    for l in leases.iter().map(Borrow::borrow) {
        let s = pools.entry(l.pool.clone()).or_default();
        match l.releasing_since {
            None => s.in_use += 1,
            Some(since) => {
                s.releasing += 1;
                for f in &l.finalizers {
                    *s.releasing_by_finalizer.entry(f.clone()).or_default() += 1;
                }
                let age = age_at_least(now, since);
                s.oldest_release = Some(s.oldest_release.map_or(age, |a| a.max(age)));
                s.oldest_release_since = Some(s.oldest_release_since.map_or(since, |t| t.min(since)));
            }
        }
    }
    pools
        .into_iter()
        .map(|(pool, mut s)| {
            s.pool = pool;
            s
        })
        .collect()
}

/// The `NetworkEndpointPool` status of `stats` (without `updated_at`, which the writer stamps).
pub fn status_of(stats: &PoolStats) -> NetworkEndpointPoolStatus {
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let by: BTreeMap<String, i64> = stats.releasing_by_finalizer.iter().map(|(f, c)| (f.clone(), n(*c))).collect();
    NetworkEndpointPoolStatus {
        capacity: stats.capacity.map(|c| c.to_string()),
        used: n(stats.in_use),
        releasing: n(stats.releasing),
        free: stats.free().map(|f| f.to_string()),
        oldest_release_since: stats.oldest_release_since.map(Time),
        waiting_on: (!by.is_empty()).then(|| by.iter().map(|(f, c)| format!("{f}={c}")).collect::<Vec<_>>().join(",")),
        releasing_by_finalizer: by,
        ..NetworkEndpointPoolStatus::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn lease(ip: &str, releasing_at: Option<&str>, fins: &[&str]) -> Lease {
        Lease {
            name: format!("p.{ip}"),
            uid: ip.into(),
            resource_version: "1".into(),
            pool: "p".into(),
            ip: ip.parse().ok(),
            node: "n".into(),
            pod: None,
            releasing_since: releasing_at.map(|t| t.parse().unwrap()),
            finalizers: fins.iter().map(|f| f.to_string()).collect(),
            force_release_after: None,
            sticky: None,
            incarnation: None,
            static_ip: false,
        }
    }

    #[test]
    fn stats_count_in_use_releasing_holders_and_the_oldest_release() {
        let leases = vec![
            lease("10.0.0.1", None, &["a.example/x"]),
            lease("10.0.0.2", Some("2026-01-01T00:00:00Z"), &["a.example/x", "b.example/y"]),
            lease("10.0.0.3", Some("2026-01-01T00:00:30Z"), &["b.example/y"]),
        ];
        let cap = HashMap::from([("p".to_string(), Capacity { v4: 6, v6: 0 }), ("empty".into(), Capacity::default())]);
        let now: Timestamp = "2026-01-01T00:01:01Z".parse().unwrap();
        let stats = pool_stats(&leases, &cap, now);
        assert_eq!(stats.len(), 2);
        assert_eq!((stats[0].pool.as_str(), stats[0].capacity, stats[0].free()), ("empty", Some(0), Some(0)));
        let p = &stats[1];
        assert_eq!((p.pool.as_str(), p.capacity, p.in_use, p.releasing, p.free()), ("p", Some(6), 1, 2, Some(3)));
        assert_eq!(p.releasing_by_finalizer, BTreeMap::from([("a.example/x".into(), 1), ("b.example/y".into(), 2)]));
        assert_eq!(p.oldest_release, Some(Duration::from_secs(60)));
        assert_eq!(p.oldest_release_since, "2026-01-01T00:00:00Z".parse().ok());
        // Without known ranges: no capacity and no free figure, counts still.
        let stats = pool_stats(&leases, &HashMap::new(), now);
        assert_eq!((stats[0].capacity, stats[0].free(), stats[0].in_use), (None, None, 1));
    }

    #[test]
    fn status_carries_the_stats_and_unknown_capacity_stays_absent() {
        let stats = PoolStats {
            pool: "p".into(),
            capacity: Some(u128::from(u64::MAX) + 1),
            in_use: 3,
            releasing: 2,
            releasing_by_finalizer: [("a/x".to_string(), 2), ("b/y".to_string(), 1)].into(),
            oldest_release: None,
            oldest_release_since: Some("2026-01-01T00:00:00Z".parse().unwrap()),
        };
        let s = status_of(&stats);
        assert_eq!(s.capacity.as_deref(), Some("18446744073709551616"));
        assert_eq!(s.free.as_deref(), Some("18446744073709551611"));
        assert_eq!((s.used, s.releasing, s.waiting_on.as_deref()), (3, 2, Some("a/x=2,b/y=1")));
        let unknown = status_of(&PoolStats { in_use: 1, ..PoolStats::default() });
        let json = serde_json::to_value(&unknown).unwrap();
        assert_eq!(json, serde_json::json!({"used": 1, "releasing": 0}));
    }
}
