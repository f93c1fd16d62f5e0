//! One watch-until primitive, as kube-runtime's `await_condition`: follow
//! one object by name until a condition holds, or a deadline passes. Every
//! wait for one object is this one loop with its own condition: a release
//! until its lease is gone ([`gone_or_replaced`]), a sticky hold until the
//! controller answers. The full-pool queue's wait (`dynamic::next_wake`)
//! is the one exception: it races its entry's next change against a
//! promised release and its look-again timer, so it takes one change of
//! the entry at a time (`Queue::next_entry_change`) rather than a loop.
//!
//! It touches the object by name only (a watch narrowed by
//! `fieldSelector=metadata.name`, and a GET when a watch ended without an
//! event, so a resourceVersion that expired meanwhile costs one read). A
//! transient failure (no connection, 429, 5xx) is retried with backoff
//! within the deadline: only time ends a wait.

use std::time::Duration;

use kube::Resource;
use netendpoint_crd::NetworkEndpoint;
use tracing::{debug, warn};

use crate::claim::Deadline;
use crate::error::Result;
use crate::store::{Change, Leases};

/// The first pause after a failed watch, and the longest.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// The longest single watch; a longer wait is several, each resumed where
/// the last one ended.
const LONGEST_WATCH: Duration = Duration::from_secs(30);

/// Objects the plugin follows by name.
#[allow(async_fn_in_trait)]
pub trait Watched {
    /// The object's type.
    type Object: kube::Resource + Clone;
    /// The object `name` now, if any.
    async fn read(&self, name: &str) -> Result<Option<Self::Object>>;
    /// Its first change after `resource_version`, within `timeout`.
    async fn next(&self, name: &str, resource_version: &str, timeout: Duration) -> Result<Change<Self::Object>>;
}

/// The leases of a store, as [`Watched`] objects.
pub struct LeasesOf<'s, S>(pub &'s S);

impl<S: Leases> Watched for LeasesOf<'_, S> {
    type Object = NetworkEndpoint;

    async fn read(&self, name: &str) -> Result<Option<NetworkEndpoint>> {
        self.0.get(name).await
    }

    async fn next(&self, name: &str, resource_version: &str, timeout: Duration) -> Result<Change> {
        self.0.next_change(name, resource_version, timeout).await
    }
}

/// How a wait ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Waited<T> {
    /// The condition held for this state of the object (`None`: it is gone).
    Met(Option<T>),
    /// The deadline passed first; the last state seen.
    TimedOut(Option<T>),
}

/// Follows object `name`, last seen as `seen` (`None`: absent), until
/// `done` holds for its state or `until` passes. The condition is tested on
/// `seen` first, so a wait whose condition already holds makes no request.
pub async fn await_condition<W: Watched>(
    w: &W,
    name: &str,
    mut seen: Option<W::Object>,
    until: Deadline,
    done: impl Fn(Option<&W::Object>) -> bool,
) -> Result<Waited<W::Object>> {
    let mut pause = RETRY_FIRST;
    loop {
        if done(seen.as_ref()) {
            return Ok(Waited::Met(seen));
        }
        if until.passed() {
            return Ok(Waited::TimedOut(seen));
        }
        let rv = seen.as_ref().and_then(|o| o.meta().resource_version.clone());
        let step = match rv {
            // Absent, or never stored: read it (a watch needs a version to start from).
            None => w.read(name).await.map(|o| (o, true)),
            Some(rv) => match w.next(name, &rv, until.remaining().min(LONGEST_WATCH)).await {
                Ok(Change::Changed(o)) => Ok((Some(*o), true)),
                Ok(Change::Gone) => Ok((None, true)),
                // Ended without an event: the version may have expired. Read again.
                Ok(Change::Quiet) if !until.passed() => w.read(name).await.map(|o| (o, false)),
                Ok(Change::Quiet) => Ok((seen.clone(), false)),
                Err(e) => Err(e),
            },
        };
        match step {
            Ok((now, _)) => {
                let absent_again = now.is_none() && seen.is_none();
                seen = now;
                pause = RETRY_FIRST;
                if absent_again && !done(None) {
                    // Nothing to watch from yet: look again after a pause.
                    tokio::time::sleep(until.remaining().min(RETRY_MAX)).await;
                }
            }
            Err(e) if e.is_transient() => {
                warn!(object = name, error = %e, retry_in_ms = pause.as_millis() as u64, "watch failed; retrying");
                tokio::time::sleep(pause.min(until.remaining())).await;
                pause = (pause * 2).min(RETRY_MAX);
            }
            Err(e) => {
                debug!(object = name, error = %e, "watch failed");
                return Err(e);
            }
        }
    }
}

/// The condition "the lease with UID `uid` is gone": absent, or its name
/// holds another object now.
pub fn gone_or_replaced(uid: Option<String>) -> impl Fn(Option<&NetworkEndpoint>) -> bool {
    move |now| now.is_none_or(|ep| ep.metadata.uid != uid)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::store::mem::{Fault, MemStore};

    fn lease(name: &str, finalizer: &str) -> NetworkEndpoint {
        let mut ep = NetworkEndpoint::new(name, netendpoint_crd::NetworkEndpointSpec::default());
        ep.metadata.finalizers = Some(vec![finalizer.into()]);
        ep
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_when_the_condition_holds_and_not_before() {
        let store = std::sync::Arc::new(MemStore::new("2026-01-01T00:00:00Z", &[]));
        let ep = store.insert(lease("p.10.0.0.1", "a/b"));
        store.release("p.10.0.0.1");
        let seen = store.object("p.10.0.0.1");
        let s2 = store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            s2.ack("p.10.0.0.1", "a/b");
        });
        let started = tokio::time::Instant::now();
        let done = gone_or_replaced(ep.metadata.uid.clone());
        let leases = LeasesOf(&*store);
        let r = await_condition(&leases, "p.10.0.0.1", seen, Deadline::after(Duration::from_secs(10)), done);
        assert_eq!(r.await.unwrap(), Waited::Met(None));
        assert_eq!(started.elapsed(), Duration::from_secs(3), "at the ack, not at the deadline");
        assert_eq!(store.calls("watch"), 1, "one watch: the last ack ends the release");
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_until_the_deadline_only() {
        let store = MemStore::new("2026-01-01T00:00:00Z", &[]);
        let ep = store.insert(lease("p.10.0.0.2", "a/b"));
        store.fail("watch", Fault::Overloaded, 3);
        let seen = store.object("p.10.0.0.2");
        let done = gone_or_replaced(ep.metadata.uid.clone());
        let leases = LeasesOf(&store);
        let r = await_condition(&leases, "p.10.0.0.2", seen, Deadline::after(Duration::from_secs(5)), done);
        assert!(matches!(r.await.unwrap(), Waited::TimedOut(Some(_))), "three 503s did not end the wait");
        assert!(store.calls("watch") >= 4);
        store.fail("watch", Fault::Denied, 1);
        let seen = store.object("p.10.0.0.2");
        let done = gone_or_replaced(ep.metadata.uid.clone());
        let r = await_condition(&leases, "p.10.0.0.2", seen, Deadline::after(Duration::from_secs(5)), done);
        assert!(r.await.is_err(), "a refusal is no transient failure");
    }

    #[tokio::test(start_paused = true)]
    async fn a_condition_that_holds_already_costs_nothing() {
        let store = MemStore::new("2026-01-01T00:00:00Z", &[]);
        let leases = LeasesOf(&store);
        let r = await_condition(&leases, "p.10.0.0.3", None, Deadline::after(Duration::from_secs(5)), |o| o.is_none());
        assert_eq!(r.await.unwrap(), Waited::Met(None));
        assert_eq!(store.total_calls(), 0);
    }
}
