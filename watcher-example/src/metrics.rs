//! Prometheus metrics, rendered in the text exposition format.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (seconds) of the release-latency histogram buckets.
const BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// The agent's counters. All methods are cheap and lock-free except the histogram.
#[derive(Debug, Default)]
pub struct Metrics {
    rules_installed: AtomicU64,
    rules_removed: AtomicU64,
    stale_removes_skipped: AtomicU64,
    finalizers_removed: AtomicU64,
    finalizers_added: AtomicU64,
    teardown_failures: AtomicU64,
    release: Mutex<Histogram>,
}

impl Metrics {
    /// Counts an installed (or replaced) rule.
    pub fn rule_installed(&self) {
        self.rules_installed.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a removed rule.
    pub fn rule_removed(&self) {
        self.rules_removed.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a teardown that left the rule alone because it belongs to another UID.
    pub fn stale_remove_skipped(&self) {
        self.stale_removes_skipped.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a lazily added finalizer.
    pub fn finalizer_added(&self) {
        self.finalizers_added.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a failed teardown attempt.
    pub fn teardown_failed(&self) {
        self.teardown_failures.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a removed finalizer, `seconds` after the endpoint's deletionTimestamp.
    pub fn finalizer_removed(&self, seconds: f64) {
        self.finalizers_removed.fetch_add(1, Ordering::Relaxed);
        let seconds = seconds.max(0.0);
        if let Ok(mut h) = self.release.lock() {
            for (i, le) in BUCKETS.iter().enumerate() {
                if seconds <= *le {
                    h.counts[i] += 1;
                }
            }
            h.count += 1;
            h.sum += seconds;
        }
    }

    /// Number of finalizers removed so far.
    pub fn finalizers_removed(&self) -> u64 {
        self.finalizers_removed.load(Ordering::Relaxed)
    }

    /// The text exposition, with `rules` as the current table size.
    pub fn render(&self, rules: usize) -> String {
        let mut s = String::new();
        let counter = |s: &mut String, name: &str, help: &str, v: &AtomicU64| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", v.load(Ordering::Relaxed));
        };
        let _ = writeln!(s, "# HELP netendpoint_agent_rules Rules currently in the dataplane table.");
        let _ = writeln!(s, "# TYPE netendpoint_agent_rules gauge\nnetendpoint_agent_rules {rules}");
        counter(
            &mut s,
            "netendpoint_agent_rules_installed_total",
            "Rules installed or replaced.",
            &self.rules_installed,
        );
        counter(&mut s, "netendpoint_agent_rules_removed_total", "Rules removed.", &self.rules_removed);
        counter(
            &mut s,
            "netendpoint_agent_stale_removes_skipped_total",
            "Teardowns that left the rule alone because it belongs to another endpoint UID.",
            &self.stale_removes_skipped,
        );
        counter(&mut s, "netendpoint_agent_finalizers_added_total", "Finalizers added lazily.", &self.finalizers_added);
        counter(
            &mut s,
            "netendpoint_agent_finalizers_removed_total",
            "Finalizers removed after teardown.",
            &self.finalizers_removed,
        );
        counter(
            &mut s,
            "netendpoint_agent_teardown_failures_total",
            "Failed teardown attempts.",
            &self.teardown_failures,
        );
        let name = "netendpoint_agent_release_seconds";
        let _ = writeln!(
            s,
            "# HELP {name} Seconds from an endpoint's deletionTimestamp (1 s resolution) to our finalizer removal."
        );
        let _ = writeln!(s, "# TYPE {name} histogram");
        if let Ok(h) = self.release.lock() {
            for (i, le) in BUCKETS.iter().enumerate() {
                let _ = writeln!(s, "{name}_bucket{{le=\"{le}\"}} {}", h.counts[i]);
            }
            let _ =
                writeln!(s, "{name}_bucket{{le=\"+Inf\"}} {}\n{name}_sum {}\n{name}_count {}", h.count, h.sum, h.count);
        }
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
        assert!(text.contains("netendpoint_agent_release_seconds_bucket{le=\"5\"} 2"), "{text}");
        assert!(text.contains("netendpoint_agent_release_seconds_count 2"), "{text}");
        assert!(text.contains("netendpoint_agent_finalizers_removed_total 2"), "{text}");
        assert!(text.contains("netendpoint_agent_rules 2"), "{text}");
    }
}
