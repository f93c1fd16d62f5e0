//! Writes each pool's figures into its `NetworkEndpointPool` status, for
//! `kubectl get neppool`: on the leader only, when the figures change, at
//! most once per interval per pool (server-side apply on the status
//! subresource, field manager `netendpoint-controller`).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use netendpoint_crd::{NetworkEndpointPool, NetworkEndpointPoolStatus, REPORTER_CONTROLLER, is_dns1123_subdomain};
use netendpoint_lease::pools::{PoolStats, status_of};
use tracing::{debug, warn};

/// What was last written, per pool.
pub struct PoolStatusWriter {
    interval: Duration,
    written: HashMap<String, (NetworkEndpointPoolStatus, Instant)>,
    created: HashSet<String>,
    /// Set once the API server says the resource does not exist (CRD not installed).
    missing: bool,
}

/// Which pools to write now, and when to look again for the others: a pool
/// whose figures differ from what was written is due when `interval` has
/// passed since its last write; a pool that vanished from `stats` gets
/// zeros once.
pub fn due(
    stats: &[PoolStats],
    written: &HashMap<String, (NetworkEndpointPoolStatus, Instant)>,
    interval: Duration,
    now: Instant,
) -> (Vec<(String, NetworkEndpointPoolStatus)>, Option<Duration>) {
    let mut want: HashMap<String, NetworkEndpointPoolStatus> =
        stats.iter().map(|s| (s.pool.clone(), status_of(s))).collect();
    for pool in written.keys() {
        want.entry(pool.clone()).or_default();
    }
    let mut out = Vec::new();
    let mut later: Option<Duration> = None;
    let mut pools: Vec<_> = want.into_iter().collect();
    pools.sort_by(|a, b| a.0.cmp(&b.0));
    for (pool, status) in pools {
        match written.get(&pool) {
            Some((old, _)) if *old == status => {}
            Some((_, at)) if now.duration_since(*at) < interval => {
                let left = interval - now.duration_since(*at);
                later = Some(later.map_or(left, |l| l.min(left)));
            }
            _ => out.push((pool, status)),
        }
    }
    (out, later)
}

impl PoolStatusWriter {
    /// A writer that writes a pool at most once per `interval`.
    pub fn new(interval: Duration) -> Self {
        Self { interval, written: HashMap::new(), created: HashSet::new(), missing: false }
    }

    /// Forgets what was written (a new leadership term writes everything again).
    pub fn reset(&mut self) {
        self.written.clear();
        self.created.clear();
    }

    /// Writes the pools that are due; returns when to look again.
    pub async fn sync(&mut self, client: &Client, stats: &[PoolStats], now: Timestamp) -> Option<Duration> {
        if self.missing {
            return None;
        }
        let (pools, later) = due(stats, &self.written, self.interval, Instant::now());
        let api: Api<NetworkEndpointPool> = Api::all(client.clone());
        let pp = PatchParams::apply(REPORTER_CONTROLLER).force();
        for (pool, status) in pools {
            if !is_dns1123_subdomain(&pool) {
                continue;
            }
            let mut stamped = status.clone();
            stamped.updated_at = Some(Time(now));
            let meta = serde_json::json!({ "name": pool });
            let kind = ("netendpoint.dev/v1alpha1", "NetworkEndpointPool");
            let result = async {
                if !self.created.contains(&pool) {
                    let obj = serde_json::json!({ "apiVersion": kind.0, "kind": kind.1, "metadata": meta, "spec": {} });
                    api.patch(&pool, &pp, &Patch::Apply(&obj)).await?;
                }
                let st =
                    serde_json::json!({ "apiVersion": kind.0, "kind": kind.1, "metadata": meta, "status": stamped });
                api.patch_status(&pool, &pp, &Patch::Apply(&st)).await
            }
            .await;
            match result {
                Ok(_) => {
                    debug!(pool, "pool status written");
                    self.created.insert(pool.clone());
                    self.written.insert(pool, (status, Instant::now()));
                }
                Err(kube::Error::Api(s)) if s.is_not_found() && !self.created.contains(&pool) => {
                    warn!("the NetworkEndpointPool CRD is not installed (apply deploy/crd.yaml): no pool statuses");
                    self.missing = true;
                    return None;
                }
                Err(e) => {
                    warn!(pool, error = %e, "cannot write the pool status");
                    self.created.remove(&pool);
                }
            }
        }
        later
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(pool: &str, used: u64) -> PoolStats {
        PoolStats { pool: pool.into(), in_use: used, ..PoolStats::default() }
    }

    #[test]
    fn a_pool_is_written_when_it_changes_at_most_once_per_interval_and_zeroed_when_gone() {
        let t0 = Instant::now();
        let iv = Duration::from_secs(5);
        let mut written = HashMap::new();
        let (w, later) = due(&[stats("a", 1), stats("b", 2)], &written, iv, t0);
        assert_eq!(w.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(later, None);
        for (p, s) in w {
            written.insert(p, (s, t0));
        }
        // Unchanged: nothing. Changed within the interval: later, at the end of it.
        assert!(due(&[stats("a", 1), stats("b", 2)], &written, iv, t0 + Duration::from_secs(1)).0.is_empty());
        let (w, later) = due(&[stats("a", 3), stats("b", 2)], &written, iv, t0 + Duration::from_secs(2));
        assert!(w.is_empty());
        assert_eq!(later, Some(Duration::from_secs(3)));
        let (w, _) = due(&[stats("a", 3), stats("b", 2)], &written, iv, t0 + Duration::from_secs(5));
        assert_eq!((w.len(), w[0].0.as_str(), w[0].1.used), (1, "a", 3));
        // A pool that vanished (no lease, no known ranges) is written once with zeros.
        let (w, _) = due(&[stats("a", 1)], &written, iv, t0 + Duration::from_secs(10));
        let b = w.iter().find(|(p, _)| p == "b").unwrap();
        assert_eq!(b.1, NetworkEndpointPoolStatus::default());
    }
}
