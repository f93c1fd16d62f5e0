//! The API server's clock, and ages measured on it.
//!
//! Every age netendpoint acts on (a release against its bound, an absence
//! against a grace) is a lower bound on the API server's clock, so a node or
//! a controller whose wall clock is wrong never brings an action forward.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use tracing::debug;

/// The API server's clock, as read from the `Date` header of its responses.
///
/// [`ServerClock::now`] is a lower bound of the server's time: the last
/// `Date` seen (whole seconds, rounded down) plus the time elapsed since, on
/// this host's monotonic clock.
#[derive(Debug, Clone, Default)]
pub struct ServerClock(Arc<Mutex<Option<(Timestamp, Instant)>>>);

impl ServerClock {
    /// Records a response's `Date` header (RFC 9110 IMF-fixdate).
    pub fn observe(&self, date: &str) {
        let Ok(ts) = k8s_openapi::jiff::fmt::rfc2822::DateTimeParser::new().parse_timestamp(date) else {
            return debug!(date, "unparsable Date header");
        };
        self.set(ts);
    }

    /// Sets the clock to `ts` now (tests, and callers that read the time elsewhere).
    pub fn set(&self, ts: Timestamp) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some((ts, Instant::now()));
        }
    }

    /// A lower bound of the server's time now; `None` before any response.
    pub fn now(&self) -> Option<Timestamp> {
        let (ts, at) = (*self.0.lock().ok()?)?;
        SignedDuration::try_from(at.elapsed()).ok().and_then(|d| ts.checked_add(d).ok())
    }
}

/// The body type of kube's client responses.
type Body = Box<kube::client::DynBody>;

/// A tower layer for kube's `ClientBuilder` that feeds `clock` from the
/// `Date` header of every response.
pub fn date_layer(
    clock: ServerClock,
) -> tower::util::MapResponseLayer<impl Fn(http::Response<Body>) -> http::Response<Body> + Clone> {
    tower::util::MapResponseLayer::new(move |resp: http::Response<Body>| {
        if let Some(date) = resp.headers().get(http::header::DATE).and_then(|d| d.to_str().ok()) {
            clock.observe(date);
        }
        resp
    })
}

/// How long ago `since` (a whole-second API timestamp, rounded down) was, at
/// least, at `now`: an under-estimate, so no bound is reached early. Zero
/// when `since` is not at least a second in the past.
pub fn age_at_least(now: Timestamp, since: Timestamp) -> Duration {
    let d = now.duration_since(since).checked_sub(SignedDuration::from_secs(1));
    d.and_then(|d| Duration::try_from(d).ok()).unwrap_or(Duration::ZERO)
}

/// [`age_at_least`] of an API `Time`.
pub fn age_of(now: Timestamp, since: &Time) -> Duration {
    age_at_least(now, since.0)
}

/// Whole seconds of a duration, rounded up, saturating: how record files and
/// sightings compare ages against a bound.
pub fn secs_ceil(d: Duration) -> i64 {
    i64::try_from(d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn server_clock_reads_the_date_header() {
        let clock = ServerClock::default();
        assert_eq!(clock.now(), None);
        clock.observe("Wed, 02 Dec 2026 21:52:40 GMT");
        let now = clock.now().unwrap();
        assert_eq!(now.as_second(), t("2026-12-02T21:52:40Z").as_second());
        clock.observe("not a date");
        assert_eq!(clock.now().unwrap().as_second(), now.as_second());
    }

    #[test]
    fn ages_are_under_estimates() {
        assert_eq!(age_at_least(t("2026-01-01T00:00:10Z"), t("2026-01-01T00:00:00Z")), Duration::from_secs(9));
        // 10.9 s after a timestamp rounded down from up to 0.999 s later: at least 9.9 s.
        assert_eq!(age_at_least(t("2026-01-01T00:00:10.9Z"), t("2026-01-01T00:00:00Z")), Duration::from_millis(9900));
        assert_eq!(age_at_least(t("2026-01-01T00:00:00.5Z"), t("2026-01-01T00:00:00Z")), Duration::ZERO);
        assert_eq!(age_at_least(t("2026-01-01T00:00:00Z"), t("2026-01-01T00:00:10Z")), Duration::ZERO);
    }

    #[test]
    fn seconds_round_up_and_saturate() {
        assert_eq!(secs_ceil(Duration::from_millis(1500)), 2);
        assert_eq!(secs_ceil(Duration::from_secs(3)), 3);
        assert_eq!(secs_ceil(Duration::MAX), i64::MAX);
    }
}
