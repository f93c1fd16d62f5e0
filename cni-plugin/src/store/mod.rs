//! Every Kubernetes call the plugin makes, behind six narrow traits, one
//! per role:
//! - [`Clock`]: the API server's time, as its answers show it (no request);
//! - [`Leases`]: the NetworkEndpoints themselves, touched by name only
//!   (create, get, delete, patch, a watch of one name); the one list, by
//!   container ID, serves only a DEL or CHECK whose node-local record is lost;
//! - [`Summaries`]: the shard and pool summaries the controller writes;
//! - [`Cluster`]: facts about the cluster (Nodes, Pods, claims, discovery);
//! - [`Queue`]: this ADD's entry in its pool's queue when the pool is full;
//! - [`Signals`]: the Events an invocation records.
//!
//! [`kube::KubeStore`] implements them against the API server; the unit
//! tests use an in-memory store (`mem.rs`) with the same 409 and finalizer
//! semantics and injectable faults. [`Store`] is their union, for the
//! command that may need every role (ADD); every other function asks only
//! for the roles it uses.

pub mod kube;
#[cfg(test)]
pub mod mem;
pub mod tally;

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use netendpoint_crd::ipamclaim::IPAMClaim;
use netendpoint_crd::{NetworkEndpoint, NetworkEndpointNeed};
use netendpoint_lease::summary::ShardView;

use crate::error::Result;

/// Outcome of a create.
#[derive(Debug)]
pub enum Created {
    /// The name is ours now; the stored object (with its UID).
    Ours(Box<NetworkEndpoint>),
    /// Another object (live or releasing) holds the name.
    Taken,
}

/// The next change of one object (a lease, by default) after a resourceVersion.
#[derive(Debug)]
pub enum Change<T = NetworkEndpoint> {
    /// The object changed; its new state.
    Changed(Box<T>),
    /// The object is gone (its name may already hold a successor).
    Gone,
    /// Nothing happened within the timeout, or the watch ended early.
    Quiet,
}

/// The API server's clock, as the store's answers show it.
///
/// Guarantees: [`Clock::server_now`] makes no request and never runs ahead
/// of the server (it is a lower bound: the last `Date` an answer carried
/// plus the time elapsed since on this host's monotonic clock), so an age
/// measured on it is never overstated, whatever the node's wall clock says.
/// It is `None` until some answer arrived. Every deadline the plugin writes
/// for the controller and every age it acts on (a summary's confirmation, a
/// release against its bound, GC's grace) is taken on this clock.
pub trait Clock {
    /// A lower bound of the API server's time now (`None` before any answer).
    fn server_now(&self) -> Option<Timestamp>;
}

/// The NetworkEndpoints, by name.
///
/// Guarantees: every call but [`Leases::find_by_container`] names one
/// object. The create is the claim: [`Created::Ours`] only when this call
/// made the object, so a name has one holder at a time. A delete carries
/// the UID it means, so it never ends a successor under the same name, and
/// a patch changes nothing when one of its tests fails (the plugin's
/// patches test the UID or resourceVersion they were built from). A watch
/// ends with [`Change::Quiet`], not an error, when it times out or the
/// server ends it; the caller then reads the object again.
#[allow(async_fn_in_trait)]
pub trait Leases {
    /// Creates `ep`: the claim of its name.
    async fn create(&self, ep: &NetworkEndpoint) -> Result<Created>;
    /// The lease named `name`, if any.
    async fn get(&self, name: &str) -> Result<Option<NetworkEndpoint>>;
    /// Requests deletion of lease `name` whose UID is `uid` (UID
    /// precondition). Gone already, or the name holding a newer lease, is success.
    async fn delete(&self, name: &str, uid: &str) -> Result<()>;
    /// Applies a JSON patch to lease `name` (to its status with `status`):
    /// the lease as patched. `Ok(None)` when the lease is gone or a test of
    /// the patch failed: nothing was changed.
    async fn patch(&self, name: &str, patch: &json_patch::Patch, status: bool) -> Result<Option<NetworkEndpoint>>;
    /// The first change of lease `name` after `resource_version`, waiting
    /// at most `timeout` (a watch of that one name).
    async fn next_change(&self, name: &str, resource_version: &str, timeout: Duration) -> Result<Change>;
    /// The leases of sandbox `container_id`: a list, which makes the API
    /// server scan every NetworkEndpoint. Only a DEL or CHECK whose record
    /// is lost calls it.
    async fn find_by_container(&self, container_id: &str) -> Result<Vec<NetworkEndpoint>>;
}

/// A pool's summary as an ADD reads it.
#[derive(Debug, Clone, Default)]
pub struct PoolSummaryView {
    /// Leased and releasing addresses per shard (by the shard's first address).
    pub counts: std::collections::BTreeMap<IpAddr, (u16, u16)>,
    /// When the controller last confirmed it.
    pub confirmed_at: Option<Timestamp>,
    /// The pool object's resourceVersion, to watch it from.
    pub resource_version: String,
}

/// The summaries the controller writes (hints; never the lock).
///
/// Guarantees: reads only, each of one object by name (or a watch of one
/// name). What they say may be stale or missing, so a caller uses them to
/// choose where to create, never to decide that an address is its own; a
/// summary that does not exist, or a resource an older install does not
/// serve, is `Ok(None)`, not an error.
#[allow(async_fn_in_trait)]
pub trait Summaries {
    /// The shard of `pool` starting at `first`, if the controller wrote one.
    async fn shard(&self, pool: &str, first: IpAddr) -> Result<Option<ShardView>>;
    /// The pool's summary, if the controller wrote one.
    async fn pool_summary(&self, pool: &str) -> Result<Option<PoolSummaryView>>;
    /// Waits until the pool's summary changes after `resource_version`, at
    /// most `timeout`. True if it changed.
    async fn pool_changed(&self, pool: &str, resource_version: &str, timeout: Duration) -> Result<bool>;
}

/// What an ADD reads from its Pod: one GET, only when a feature needs it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodFacts {
    /// metadata.uid
    pub uid: String,
    /// metadata.annotations
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// Facts about the cluster.
///
/// Guarantees: reads only, each one request (a GET by name, or discovery).
/// An object that does not exist is `Ok(None)` or `false`, not an error.
#[allow(async_fn_in_trait)]
pub trait Cluster {
    /// True if a Node object named `name` exists.
    async fn node_exists(&self, name: &str) -> Result<bool>;
    /// The Pod's facts; `Ok(None)` when the Pod does not exist.
    async fn pod_facts(&self, namespace: &str, name: &str) -> Result<Option<PodFacts>>;
    /// The `IPAMClaim` `namespace`/`name`; `Ok(None)` when it (or its CRD) does not exist.
    async fn claim(&self, namespace: &str, name: &str) -> Result<Option<IPAMClaim>>;
    /// The replicas StatefulSet `namespace`/`name` wants; `Ok(None)` when it
    /// does not exist, or when the plugin may not read StatefulSets.
    async fn statefulset_replicas(&self, namespace: &str, name: &str) -> Result<Option<i64>>;
    /// True if the API server serves the NetworkEndpoint API (discovery).
    async fn crd_installed(&self) -> Result<bool>;
    /// One small request that proves the API server answers, accepts the
    /// plugin's credentials and serves netendpoint's API (STATUS): a GET of
    /// the pool's summary object by name.
    async fn probe(&self, pool: &str) -> Result<()>;
}

/// The entries of the full-pool queue (`NetworkEndpointNeed`), by name: a
/// waiting ADD creates its own, watches it for the address promised to it,
/// and deletes it when it stops waiting.
///
/// Guarantees: entries are touched by name only, as [`Leases`] touches
/// leases: a join is a create that is `Some` only when this call made the
/// entry, a leave carries the entry's UID and never deletes another's, and
/// a watch of an entry ends as [`Leases::next_change`] does.
#[allow(async_fn_in_trait)]
pub trait Queue {
    /// Creates `entry`: `Some` (as stored, with its UID and
    /// resourceVersion) once it is this ADD's, `None` if its name is taken.
    async fn join(&self, entry: &NetworkEndpointNeed) -> Result<Option<NetworkEndpointNeed>>;
    /// The entry `name`, if any.
    async fn entry(&self, name: &str) -> Result<Option<NetworkEndpointNeed>>;
    /// The first change of entry `name` after `resource_version`, waiting
    /// at most `timeout` (a watch of that one name).
    async fn next_entry_change(
        &self,
        name: &str,
        resource_version: &str,
        timeout: Duration,
    ) -> Result<Change<NetworkEndpointNeed>>;
    /// Deletes entry `name` whose UID is `uid`; gone already, or the name
    /// holding another entry, is success.
    async fn leave(&self, name: &str, uid: &str) -> Result<()>;
}

/// Events. Best effort: failures are logged.
///
/// Guarantees: recording an Event never fails the invocation and changes
/// no lease; what the API server refuses is logged and dropped.
#[allow(async_fn_in_trait)]
pub trait Signals {
    /// Records a Kubernetes Event about `regarding`.
    async fn record_event(&self, regarding: ObjectReference, reason: &str, note: String, warning: bool);
}

/// Everything an invocation may call: the union of the roles.
pub trait Store: Clock + Leases + Summaries + Cluster + Queue + Signals {}

impl<T: Clock + Leases + Summaries + Cluster + Queue + Signals> Store for T {}
