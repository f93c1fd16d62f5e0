//! Pool accounting over plain data: what a lease looks like from its
//! metadata ([`Lease`]), how many addresses a pool has ([`Capacity`]) and
//! the health of each pool at one instant ([`pool_stats`]).
//!
//! No API calls here: the controller (metrics, decisions) and the
//! `kubectl netendpoint` plugin (`pools`) feed the same functions with what
//! they listed or watched, so both count a pool the same way.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::{
    ANNOTATION_FORCE_RELEASE_AFTER, ANNOTATION_STICKY_FOR, ANNOTATION_STICKY_OWNER, FINALIZER_STICKY_HOLD, LABEL_NODE,
    LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID, LABEL_POOL, LABEL_STICKY_IDENTITY, duration,
    parse_endpoint_name,
};

/// One lease as seen from its metadata (a metadata-only list or watch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Object name (`<pool>.<ip>`).
    pub name: String,
    /// Object UID: the precondition of every write.
    pub uid: String,
    /// resourceVersion: the precondition of a forced release.
    pub resource_version: String,
    /// Pool label value.
    pub pool: String,
    /// The address, when the name parses in its pool.
    pub ip: Option<IpAddr>,
    /// Node label value of the holder.
    pub node: String,
    /// Pod UID label value, when the runtime named the Pod.
    pub pod_uid: Option<String>,
    /// Set once the release was requested.
    pub releasing_since: Option<Timestamp>,
    /// Finalizers still on the object.
    pub finalizers: Vec<String>,
    /// The lease's own forced-release bound, stamped at creation.
    pub force_release_after: Option<Duration>,
    /// What makes the lease sticky, when it is (see `docs/sticky-ips.md`).
    pub sticky: Option<Sticky>,
}

/// The sticky facts of a lease, from its labels and annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sticky {
    /// The Pod's namespace.
    pub namespace: String,
    /// The Pod's name.
    pub pod: String,
    /// The controller owner's kind (`StatefulSet`, or a kind added in `ipam.sticky.kinds`).
    pub owner_kind: String,
    /// The controller owner's name.
    pub owner: String,
    /// How long the hold lasts after the release was requested.
    pub sticky_for: Duration,
}

impl Sticky {
    /// The sticky facts of a NetworkEndpoint's metadata: its Pod (labels),
    /// owner and `stickyFor` (annotations the plugin stamps); `None` for a
    /// lease that is not sticky.
    pub fn from_meta(m: &ObjectMeta) -> Option<Self> {
        let labels = m.labels.as_ref()?;
        labels.get(LABEL_STICKY_IDENTITY)?;
        let ann = m.annotations.as_ref()?;
        let (kind, owner) = ann.get(ANNOTATION_STICKY_OWNER)?.split_once('/')?;
        Some(Sticky {
            namespace: labels.get(LABEL_POD_NAMESPACE)?.clone(),
            pod: labels.get(LABEL_POD_NAME)?.clone(),
            owner_kind: kind.to_string(),
            owner: owner.to_string(),
            sticky_for: ann.get(ANNOTATION_STICKY_FOR).and_then(|v| duration::parse(v))?,
        })
    }
}

impl Lease {
    /// True while the sticky hold finalizer is on the lease.
    pub fn is_held(&self) -> bool {
        self.finalizers.iter().any(|f| f == FINALIZER_STICKY_HOLD)
    }

    /// The lease described by a NetworkEndpoint's metadata; `None` without a
    /// name, a UID or a pool label (not a lease the plugin wrote).
    pub fn from_meta(m: &ObjectMeta) -> Option<Self> {
        let labels = m.labels.as_ref();
        let label = |k: &str| labels.and_then(|l| l.get(k)).cloned();
        let name = m.name.clone()?;
        Some(Lease {
            ip: ip_from_name(&name),
            uid: m.uid.clone()?,
            resource_version: m.resource_version.clone().unwrap_or_default(),
            pool: label(LABEL_POOL)?,
            node: label(LABEL_NODE).unwrap_or_default(),
            pod_uid: label(LABEL_POD_UID).filter(|u| !u.is_empty()),
            releasing_since: m.deletion_timestamp.as_ref().map(|t| t.0),
            finalizers: m.finalizers.clone().unwrap_or_default(),
            force_release_after: m
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_FORCE_RELEASE_AFTER))
                .and_then(|v| duration::parse(v)),
            sticky: Sticky::from_meta(m),
            name,
        })
    }
}

/// The IP of a lease name `<pool>.<ip>`, whatever the pool.
pub fn ip_from_name(name: &str) -> Option<IpAddr> {
    let parts: Vec<&str> = name.rsplitn(5, '.').collect();
    if parts.len() == 5 {
        let v4 = format!("{}.{}.{}.{}", parts[3], parts[2], parts[1], parts[0]);
        if let Some(ip) = parse_endpoint_name("x", &format!("x.{v4}")) {
            return Some(ip);
        }
    }
    let last = name.rsplit('.').next()?;
    parse_endpoint_name("x", &format!("x.{last}"))
}

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

    /// The sum of two capacities (one pool in several network configs adds up
    /// only when the configs describe different ranges; callers decide).
    pub fn plus(self, other: Capacity) -> Capacity {
        Capacity { v4: self.v4.saturating_add(other.v4), v6: self.v6.saturating_add(other.v6) }
    }
}

/// How long ago `since` (a whole-second API timestamp, rounded down) was, at
/// least, at `now`: an under-estimate, so no bound is reached early.
pub fn age_at_least(now: Timestamp, since: Timestamp) -> Duration {
    let d = now.duration_since(since).checked_sub(SignedDuration::from_secs(1));
    d.and_then(|d| Duration::try_from(d).ok()).unwrap_or(Duration::ZERO)
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
pub fn pool_stats(leases: &[Lease], capacity: &HashMap<String, Capacity>, now: Timestamp) -> Vec<PoolStats> {
    let mut pools: BTreeMap<String, PoolStats> = BTreeMap::new();
    for (pool, cap) in capacity {
        let s = pools.entry(pool.clone()).or_default();
        s.capacity = Some(cap.total());
    }
    for l in leases {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(ip: &str, releasing_at: Option<&str>, fins: &[&str]) -> Lease {
        Lease {
            name: format!("p.{ip}"),
            uid: ip.into(),
            resource_version: "1".into(),
            pool: "p".into(),
            ip: ip.parse().ok(),
            node: "n".into(),
            pod_uid: None,
            releasing_since: releasing_at.map(|t| t.parse().unwrap()),
            finalizers: fins.iter().map(|f| f.to_string()).collect(),
            force_release_after: None,
            sticky: None,
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
    fn a_lease_is_read_from_its_metadata_and_foreign_objects_are_not_leases() {
        let mut m = ObjectMeta {
            name: Some("pods.10.244.0.17".into()),
            uid: Some("u".into()),
            labels: Some([(LABEL_POOL.to_string(), "pods".to_string())].into()),
            annotations: Some([(ANNOTATION_FORCE_RELEASE_AFTER.to_string(), "90s".to_string())].into()),
            finalizers: Some(vec!["a.example/x".into()]),
            ..ObjectMeta::default()
        };
        let l = Lease::from_meta(&m).unwrap();
        assert_eq!(l.ip, "10.244.0.17".parse().ok());
        assert_eq!(l.force_release_after, Some(Duration::from_secs(90)));
        assert_eq!((l.releasing_since, l.finalizers.len()), (None, 1));
        m.labels = None;
        assert_eq!(Lease::from_meta(&m), None);
    }

    #[test]
    fn lease_names_give_their_ip_whatever_the_pool() {
        assert_eq!(ip_from_name("pods.10.244.0.17"), "10.244.0.17".parse().ok());
        assert_eq!(ip_from_name("a.b.c.10.0.0.1"), "10.0.0.1".parse().ok());
        assert_eq!(ip_from_name("v6.fd00-0000-0000-0000-0000-0000-0000-0011"), "fd00::11".parse().ok());
        assert_eq!(ip_from_name("pods.nonsense"), None);
    }

    #[test]
    fn ages_are_under_estimates() {
        let t = |s: &str| s.parse::<Timestamp>().unwrap();
        assert_eq!(age_at_least(t("2026-01-01T00:00:10Z"), t("2026-01-01T00:00:00Z")), Duration::from_secs(9));
        assert_eq!(age_at_least(t("2026-01-01T00:00:00Z"), t("2026-01-01T00:00:10Z")), Duration::ZERO);
    }
}
