//! The agent's Prometheus metrics, kept and encoded by `prometheus-client`
//! (OpenMetrics text: counters carry the `_total` suffix, histograms
//! `_bucket`/`_sum`/`_count`, and the exposition ends with `# EOF`).

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds (seconds) of the release-latency histogram buckets.
const BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// The agent's metrics. Every method is cheap and lock-free, except the
/// histogram's, which takes a short lock.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    rules: Gauge,
    rules_installed: Counter,
    rules_removed: Counter,
    stale_removes_skipped: Counter,
    finalizers_removed: Counter,
    finalizers_added: Counter,
    teardown_failures: Counter,
    release: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let m = Self {
            registry: Registry::default(),
            rules: Gauge::default(),
            rules_installed: Counter::default(),
            rules_removed: Counter::default(),
            stale_removes_skipped: Counter::default(),
            finalizers_removed: Counter::default(),
            finalizers_added: Counter::default(),
            teardown_failures: Counter::default(),
            release: Histogram::new(BUCKETS),
        };
        let mut registry = Registry::default();
        registry.register("netendpoint_agent_rules", "Rules currently in the dataplane table.", m.rules.clone());
        registry.register(
            "netendpoint_agent_rules_installed",
            "Rules installed or replaced.",
            m.rules_installed.clone(),
        );
        registry.register("netendpoint_agent_rules_removed", "Rules removed.", m.rules_removed.clone());
        registry.register(
            "netendpoint_agent_stale_removes_skipped",
            "Teardowns that left the rule alone because it belongs to another endpoint UID.",
            m.stale_removes_skipped.clone(),
        );
        registry.register("netendpoint_agent_finalizers_added", "Finalizers added lazily.", m.finalizers_added.clone());
        registry.register(
            "netendpoint_agent_finalizers_removed",
            "Finalizers removed after teardown.",
            m.finalizers_removed.clone(),
        );
        registry.register(
            "netendpoint_agent_teardown_failures",
            "Failed teardown attempts.",
            m.teardown_failures.clone(),
        );
        registry.register_with_unit(
            "netendpoint_agent_release",
            "Seconds from an endpoint's deletionTimestamp (1 s resolution) to our finalizer removal.",
            Unit::Seconds,
            m.release.clone(),
        );
        Self { registry, ..m }
    }
}

impl Metrics {
    /// Counts an installed (or replaced) rule.
    pub fn rule_installed(&self) {
        self.rules_installed.inc();
    }
    /// Counts a removed rule.
    pub fn rule_removed(&self) {
        self.rules_removed.inc();
    }
    /// Counts a teardown that left the rule alone because it belongs to another UID.
    pub fn stale_remove_skipped(&self) {
        self.stale_removes_skipped.inc();
    }
    /// Counts a lazily added finalizer.
    pub fn finalizer_added(&self) {
        self.finalizers_added.inc();
    }
    /// Counts a failed teardown attempt.
    pub fn teardown_failed(&self) {
        self.teardown_failures.inc();
    }
    /// Counts a removed finalizer, `seconds` after the endpoint's deletionTimestamp.
    pub fn finalizer_removed(&self, seconds: f64) {
        self.finalizers_removed.inc();
        self.release.observe(seconds.max(0.0));
    }

    /// Number of finalizers removed so far.
    pub fn finalizers_removed(&self) -> u64 {
        self.finalizers_removed.get()
    }

    /// The exposition ([`CONTENT_TYPE`]), with `rules` as the current table size.
    pub fn render(&self, rules: usize) -> String {
        self.rules.set(i64::try_from(rules).unwrap_or(i64::MAX));
        let mut s = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut s, &self.registry);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_is_cumulative() {
        let m = Metrics::default();
        m.finalizer_removed(0.02);
        m.finalizer_removed(3.0);
        let text = m.render(2);
        assert!(text.contains("netendpoint_agent_release_seconds_bucket{le=\"0.025\"} 1"), "{text}");
        assert!(text.contains("netendpoint_agent_release_seconds_bucket{le=\"5.0\"} 2"), "{text}");
        assert!(text.contains("netendpoint_agent_release_seconds_bucket{le=\"+Inf\"} 2"), "{text}");
        assert!(text.contains("netendpoint_agent_release_seconds_count 2"), "{text}");
        assert!(text.contains("netendpoint_agent_finalizers_removed_total 2"), "{text}");
        assert!(text.contains("netendpoint_agent_rules 2"), "{text}");
    }

    #[test]
    fn every_metric_the_tests_read_keeps_its_name_and_type() {
        let m = Metrics::default();
        m.rule_installed();
        m.teardown_failed();
        let text = m.render(0);
        for (name, kind, sample) in [
            ("netendpoint_agent_rules", "gauge", "netendpoint_agent_rules 0"),
            ("netendpoint_agent_rules_installed", "counter", "netendpoint_agent_rules_installed_total 1"),
            ("netendpoint_agent_rules_removed", "counter", "netendpoint_agent_rules_removed_total 0"),
            ("netendpoint_agent_stale_removes_skipped", "counter", "netendpoint_agent_stale_removes_skipped_total 0"),
            ("netendpoint_agent_finalizers_added", "counter", "netendpoint_agent_finalizers_added_total 0"),
            ("netendpoint_agent_finalizers_removed", "counter", "netendpoint_agent_finalizers_removed_total 0"),
            ("netendpoint_agent_teardown_failures", "counter", "netendpoint_agent_teardown_failures_total 1"),
            ("netendpoint_agent_release_seconds", "histogram", "netendpoint_agent_release_seconds_count 0"),
        ] {
            assert!(text.contains(&format!("\n# TYPE {name} {kind}\n")), "{name} {kind}:\n{text}");
            assert!(text.lines().any(|l| l == sample), "{sample}:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(m.finalizers_removed(), 0);
    }
}
