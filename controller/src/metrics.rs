//! Pool health: per-pool figures computed from a snapshot ([`pool_stats`]),
//! and their Prometheus exposition ([`Metrics`]).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub use netendpoint_lease::pools::{PoolStats, pool_stats};

/// The content type of [`Metrics::render`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabel {
    pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FinalizerLabel {
    pool: String,
    finalizer: String,
}

/// The controller's Prometheus metrics.
pub struct Metrics {
    registry: Registry,
    capacity: Family<PoolLabel, Gauge>,
    in_use: Family<PoolLabel, Gauge>,
    releasing: Family<PoolLabel, Gauge>,
    free: Family<PoolLabel, Gauge>,
    by_finalizer: Family<FinalizerLabel, Gauge>,
    oldest: Family<PoolLabel, Gauge<f64, AtomicU64>>,
    forced: Family<PoolLabel, Counter>,
    reclaimed: Family<PoolLabel, Counter>,
    leaked: Family<PoolLabel, Counter>,
    needed: Family<PoolLabel, Counter>,
    waiting: Family<PoolLabel, Gauge>,
    oldest_wait: Family<PoolLabel, Gauge<f64, AtomicU64>>,
    summary_writes: Counter,
    leader: Gauge,
    pass_seconds: Histogram,
    queue_pass_seconds: Histogram,
}

/// Buckets of [`Metrics::observe_pass`], in seconds: a pass over a few
/// thousand leases takes milliseconds; one over a hundred thousand, tens.
const PASS_BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric, prefixed `netendpoint_`.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("netendpoint");
        let m = Self {
            capacity: Family::default(),
            in_use: Family::default(),
            releasing: Family::default(),
            free: Family::default(),
            by_finalizer: Family::default(),
            oldest: Family::default(),
            forced: Family::default(),
            reclaimed: Family::default(),
            leaked: Family::default(),
            needed: Family::default(),
            waiting: Family::default(),
            oldest_wait: Family::default(),
            summary_writes: Counter::default(),
            leader: Gauge::default(),
            pass_seconds: Histogram::new(PASS_BUCKETS),
            queue_pass_seconds: Histogram::new(PASS_BUCKETS),
            registry: Registry::default(),
        };
        registry.register(
            "pool_capacity",
            "Usable addresses of the pool (when its ranges are known)",
            m.capacity.clone(),
        );
        registry.register("pool_in_use", "Leases of the pool not being released", m.in_use.clone());
        registry.register(
            "pool_releasing",
            "Leases of the pool being released, waiting on finalizers",
            m.releasing.clone(),
        );
        registry.register(
            "pool_free",
            "Addresses neither in use nor releasing (when the capacity is known)",
            m.free.clone(),
        );
        registry.register(
            "pool_releasing_by_finalizer",
            "Releasing leases of the pool that still list the finalizer",
            m.by_finalizer.clone(),
        );
        registry.register(
            "pool_oldest_release_age_seconds",
            "Age of the pool's oldest release in progress (0 when none)",
            m.oldest.clone(),
        );
        registry.register("forced_releases", "Releases forced for a waiting ADD", m.forced.clone());
        registry.register("node_reclaims", "Leases of vanished nodes whose release was requested", m.reclaimed.clone());
        registry.register("leak_deletions", "Leases of gone Pods whose release was requested", m.leaked.clone());
        registry.register(
            "adds_waited",
            "ADDs that found their pool full and waited (NetworkEndpointNeed entries)",
            m.needed.clone(),
        );
        registry.register("pool_waiting", "ADDs waiting in the pool's queue now", m.waiting.clone());
        registry.register(
            "pool_oldest_wait_seconds",
            "How long the first ADD in the pool's queue has waited (0 when none waits)",
            m.oldest_wait.clone(),
        );
        registry.register(
            "summary_writes",
            "Writes of shard and pool summaries (at most one per shard or pool per 250 ms)",
            m.summary_writes.clone(),
        );
        registry.register("controller_leader", "1 while this replica holds the leader Lease", m.leader.clone());
        registry.register(
            "controller_pass_duration_seconds",
            "Time a pass took: the snapshot, the decisions, their writes and the summaries' (a release reaches its waiter a pass after it ends)",
            m.pass_seconds.clone(),
        );
        registry.register(
            "controller_queue_pass_duration_seconds",
            "Time a pass that served only the queues took, over the waiters' pools alone (the leader, while ADDs wait)",
            m.queue_pass_seconds.clone(),
        );
        Self { registry, ..m }
    }

    /// Replaces the pool gauges with `stats`.
    pub fn set_pools(&self, stats: &[PoolStats]) {
        for f in [&self.capacity, &self.in_use, &self.releasing, &self.free] {
            f.clear();
        }
        self.by_finalizer.clear();
        self.oldest.clear();
        let gauge = |v: u128| i64::try_from(v).unwrap_or(i64::MAX);
        for s in stats {
            let l = PoolLabel { pool: s.pool.clone() };
            if let Some(c) = s.capacity {
                self.capacity.get_or_create(&l).set(gauge(c));
            }
            if let Some(f) = s.free() {
                self.free.get_or_create(&l).set(gauge(f));
            }
            self.in_use.get_or_create(&l).set(gauge(u128::from(s.in_use)));
            self.releasing.get_or_create(&l).set(gauge(u128::from(s.releasing)));
            for (fin, n) in &s.releasing_by_finalizer {
                let fl = FinalizerLabel { pool: s.pool.clone(), finalizer: fin.clone() };
                self.by_finalizer.get_or_create(&fl).set(gauge(u128::from(*n)));
            }
            self.oldest.get_or_create(&l).set(s.oldest_release.map_or(0.0, |d| d.as_secs_f64()));
        }
    }

    /// Replaces the queue gauges: per pool, the entries still waiting at
    /// `now`, and how long the oldest of them has waited.
    pub fn set_queues(&self, waiters: &[netendpoint_lease::queue::Waiter], now: k8s_openapi::jiff::Timestamp) {
        self.waiting.clear();
        self.oldest_wait.clear();
        for (pool, d) in netendpoint_lease::queue::depths(waiters, now) {
            let l = PoolLabel { pool };
            self.waiting.get_or_create(&l).set(i64::try_from(d.waiting).unwrap_or(i64::MAX));
            self.oldest_wait.get_or_create(&l).set(d.oldest.as_secs_f64());
        }
    }

    /// Counts a forced release in `pool`.
    pub fn forced(&self, pool: &str) {
        self.forced.get_or_create(&PoolLabel { pool: pool.into() }).inc();
    }

    /// Counts a vanished-node reclaim in `pool`.
    pub fn reclaimed(&self, pool: &str) {
        self.reclaimed.get_or_create(&PoolLabel { pool: pool.into() }).inc();
    }

    /// Counts a leak deletion in `pool`.
    pub fn leaked(&self, pool: &str) {
        self.leaked.get_or_create(&PoolLabel { pool: pool.into() }).inc();
    }

    /// Counts an ADD of `pool` that waited.
    pub fn needed(&self, pool: &str) {
        self.needed.get_or_create(&PoolLabel { pool: pool.into() }).inc();
    }

    /// Counts `n` more summary writes.
    pub fn add_summary_writes(&self, n: u64) {
        self.summary_writes.inc_by(n);
    }

    /// Records a pass that took `d`.
    pub fn observe_pass(&self, d: std::time::Duration) {
        self.pass_seconds.observe(d.as_secs_f64());
    }

    /// Records a pass over the queues alone that took `d`.
    pub fn observe_queue_pass(&self, d: std::time::Duration) {
        self.queue_pass_seconds.observe(d.as_secs_f64());
    }

    /// Sets whether this replica leads.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;

    /// The accounting itself is tested with `netendpoint_lease::pools`;
    /// this is its exposition.
    #[test]
    fn the_exposition_carries_every_figure_by_pool() {
        let stats = vec![
            PoolStats { pool: "empty".into(), capacity: Some(0), ..PoolStats::default() },
            PoolStats {
                pool: "p".into(),
                capacity: Some(6),
                in_use: 1,
                releasing: 2,
                releasing_by_finalizer: BTreeMap::from([("a.example/x".into(), 1), ("b.example/y".into(), 2)]),
                oldest_release: Some(Duration::from_secs(60)),
                oldest_release_since: None,
            },
        ];
        let m = Metrics::new();
        m.set_pools(&stats);
        m.forced("p");
        m.observe_pass(Duration::from_millis(30));
        m.observe_queue_pass(Duration::from_millis(2));
        let text = m.render();
        for line in [
            "netendpoint_pool_in_use{pool=\"p\"} 1",
            "netendpoint_pool_releasing{pool=\"p\"} 2",
            "netendpoint_pool_free{pool=\"p\"} 3",
            "netendpoint_pool_releasing_by_finalizer{pool=\"p\",finalizer=\"b.example/y\"} 2",
            "netendpoint_pool_oldest_release_age_seconds{pool=\"p\"} 60.0",
            "netendpoint_forced_releases_total{pool=\"p\"} 1",
            "netendpoint_pool_capacity{pool=\"empty\"} 0",
            "netendpoint_controller_pass_duration_seconds_count 1",
            "netendpoint_controller_pass_duration_seconds_bucket{le=\"0.025\"} 0",
            "netendpoint_controller_pass_duration_seconds_bucket{le=\"0.05\"} 1",
            "netendpoint_controller_queue_pass_duration_seconds_bucket{le=\"0.0025\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
