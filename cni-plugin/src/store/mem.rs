//! An in-memory store for unit tests of the decisions, like host-local's
//! FakeStore: a second create of a name is `Taken` (the API server's 409),
//! a delete of an object with finalizers only sets its deletionTimestamp,
//! and the object disappears when its last finalizer is removed. Patches
//! are applied as JSON patches, with their tests, to the main resource or
//! to the status, as the API server does.
//!
//! Its server clock runs on tokio's clock from a start time the test
//! chooses, so `#[tokio::test(start_paused = true)]` drives every wait and
//! every age. Faults are injected per operation ([`MemStore::fail`]), and
//! the controller's part is played on demand: summaries computed from the
//! objects ([`SummaryMode`]) and holds served ([`MemStore::serve_holds`]).

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use netendpoint_crd::ipamclaim::IPAMClaim;
use netendpoint_crd::{NetworkEndpoint, NetworkEndpointNeed, NetworkEndpointNeedStatus};
use netendpoint_lease::summary::{ShardView, shard_first, shard_index};
use tokio::sync::Notify;

use super::{Change, Clock, Cluster, Created, Leases, PodFacts, PoolSummaryView, Queue, Signals, Summaries};
use crate::error::{Error, Result};

/// A failure the test wants an operation to return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The API server cannot be reached.
    Unreachable,
    /// The credentials are refused.
    Denied,
    /// The CRD is not installed.
    CrdMissing,
    /// The API server answers 503 (restarting, shedding load).
    Overloaded,
    /// The API server accepts the request and never answers.
    Hang,
    /// Admission refuses a lease: its pool's ranges are not registered yet
    /// (the policy netendpoint-lease-range, before the controller wrote them).
    Unregistered,
}

impl Fault {
    fn error(self, op: &str) -> Error {
        match self {
            Self::Unreachable => Error::ApiUnreachable {
                op: op.to_string(),
                source: kube::Error::Service(Box::new(std::io::Error::other("connection refused"))),
            },
            Self::Denied => Error::ApiDenied { op: op.to_string(), status: 403, message: "forbidden".into() },
            Self::Unregistered => Error::ApiDenied {
                op: op.to_string(),
                status: 403,
                message: "ValidatingAdmissionPolicy 'netendpoint-lease-range' with binding 'netendpoint-lease-range' \
                    denied request: pool p has no ranges (ConfigMap netendpoint-system/netendpoint-pools)"
                    .into(),
            },
            Self::CrdMissing => Error::CrdMissing,
            Self::Overloaded => Error::Api {
                op: op.to_string(),
                source: kube::Error::Api(Box::new(
                    kube::core::Status::failure("unavailable", "ServiceUnavailable").with_code(503),
                )),
            },
            Self::Hang => unreachable!("a hang is not an error"),
        }
    }
}

/// What the controller's summaries look like to the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SummaryMode {
    /// Computed from the objects at every read: a controller that keeps up.
    Live,
    /// None: no controller ever ran.
    Off,
    /// As they were when [`MemStore::freeze_summaries`] was called: a controller that stopped.
    Frozen,
    /// As they were when set, yet confirmed as current: a controller that
    /// runs but has not written the latest changes (they cancelled out
    /// between two of its writes).
    Behind,
}

#[derive(Default)]
struct State {
    objects: BTreeMap<String, NetworkEndpoint>,
    /// Per name, the resourceVersion of its last change (creation, update, deletion).
    last_change: HashMap<String, u64>,
    /// The same, for queue entries.
    entry_change: HashMap<String, u64>,
    rv: u64,
    uid_seq: u64,
    nodes: HashSet<String>,
    pods: BTreeMap<(String, String), (PodFacts, String)>,
    claims: BTreeMap<(String, String), IPAMClaim>,
    statefulsets: BTreeMap<(String, String), i64>,
    events: Vec<(String, String)>,
    entries: BTreeMap<String, NetworkEndpointNeed>,
    calls: BTreeMap<&'static str, usize>,
    /// Calls in flight now, and the pairs of operations seen in flight together.
    in_flight: Vec<&'static str>,
    together: BTreeMap<(&'static str, &'static str), usize>,
    faults: HashMap<&'static str, VecDeque<Fault>>,
    lost_creates: usize,
    crd_served: bool,
    summaries: Option<SummaryMode>,
    frozen: BTreeMap<String, BTreeMap<IpAddr, ShardView>>,
    frozen_rv: u64,
}

/// See the module docs.
pub struct MemStore {
    state: Mutex<State>,
    start: Timestamp,
    started: tokio::time::Instant,
    changed: Notify,
}

impl MemStore {
    /// An empty store whose server clock reads `start` now, with `nodes`
    /// registered and live summaries.
    pub fn new(start: &str, nodes: &[&str]) -> Self {
        let state = State {
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            crd_served: true,
            summaries: Some(SummaryMode::Live),
            ..State::default()
        };
        Self {
            state: Mutex::new(state),
            start: start.parse().unwrap(),
            started: tokio::time::Instant::now(),
            changed: Notify::new(),
        }
    }

    fn now(&self) -> Timestamp {
        self.start + SignedDuration::try_from(self.started.elapsed()).unwrap()
    }

    /// The API's whole-second form of the server time now.
    fn stamp(&self) -> Time {
        Time(Timestamp::from_second(self.now().as_second()).unwrap())
    }

    /// Counts a call, and returns the fault queued for it, if any.
    fn call(&self, op: &'static str) -> Option<Fault> {
        let mut st = self.state.lock().unwrap();
        *st.calls.entry(op).or_default() += 1;
        st.faults.get_mut(op).and_then(VecDeque::pop_front)
    }

    async fn enter(&self, op: &'static str) -> Result<()> {
        match self.call(op) {
            Some(Fault::Hang) => std::future::pending().await,
            Some(f) => Err(f.error(op)),
            None => {
                self.depart(op);
                // Every call is a round trip: let other ADDs run meanwhile, as they would.
                tokio::task::yield_now().await;
                let mut st = self.state.lock().unwrap();
                if let Some(i) = st.in_flight.iter().position(|o| *o == op) {
                    st.in_flight.swap_remove(i);
                }
                Ok(())
            }
        }
    }

    /// Notes `op` in flight, beside the calls already in flight.
    fn depart(&self, op: &'static str) {
        let mut st = self.state.lock().unwrap();
        let pairs: Vec<_> = st.in_flight.iter().map(|o| if *o < op { (*o, op) } else { (op, *o) }).collect();
        for pair in pairs {
            *st.together.entry(pair).or_default() += 1;
        }
        st.in_flight.push(op);
    }

    /// How often a call of `a` and one of `b` were in flight together: their
    /// round trips overlapped, as those of a `join` do.
    pub fn overlapped(&self, a: &'static str, b: &'static str) -> usize {
        self.state.lock().unwrap().together.get(&if a < b { (a, b) } else { (b, a) }).copied().unwrap_or(0)
    }

    /// How often `op` was called.
    pub fn calls(&self, op: &str) -> usize {
        self.state.lock().unwrap().calls.get(op).copied().unwrap_or(0)
    }

    /// Calls of every operation.
    pub fn total_calls(&self) -> usize {
        self.state.lock().unwrap().calls.values().sum()
    }

    /// The next `times` calls of `op` fail with `fault`.
    pub fn fail(&self, op: &'static str, fault: Fault, times: usize) {
        self.state.lock().unwrap().faults.entry(op).or_default().extend(std::iter::repeat_n(fault, times));
    }

    /// The next `n` creates store their object, then fail as if the answer was lost.
    pub fn lose_creates(&self, n: usize) {
        self.state.lock().unwrap().lost_creates = n;
    }

    /// Whether discovery serves the CRD.
    pub fn serve_crd(&self, served: bool) {
        self.state.lock().unwrap().crd_served = served;
    }

    /// How the controller's summaries look from now on.
    pub fn summaries(&self, mode: SummaryMode) {
        let mut st = self.state.lock().unwrap();
        if matches!(mode, SummaryMode::Frozen | SummaryMode::Behind) {
            let pools: HashSet<String> = st.objects.values().map(|o| o.spec.pool.clone()).collect();
            st.frozen = pools.into_iter().map(|p| (p.clone(), shards_of(&st, &p))).collect();
            st.frozen_rv = st.rv;
        }
        st.summaries = Some(mode);
    }

    fn bump(&self, st: &mut State, name: &str) -> u64 {
        st.rv += 1;
        st.last_change.insert(name.to_string(), st.rv);
        self.changed.notify_waiters();
        st.rv
    }

    /// Puts `ep` in the store as is (a lease made earlier, by anyone).
    pub fn insert(&self, mut ep: NetworkEndpoint) -> NetworkEndpoint {
        let mut st = self.state.lock().unwrap();
        let name = ep.metadata.name.clone().unwrap();
        st.uid_seq += 1;
        ep.metadata.uid.get_or_insert_with(|| format!("uid-{}", st.uid_seq));
        ep.metadata.creation_timestamp.get_or_insert_with(|| self.stamp());
        let rv = self.bump(&mut st, &name);
        ep.metadata.resource_version = Some(rv.to_string());
        st.objects.insert(name, ep.clone());
        ep
    }

    /// Requests deletion of `name` now, as DEL does.
    pub fn release(&self, name: &str) {
        let mut st = self.state.lock().unwrap();
        self.delete_locked(&mut st, name, None);
    }

    /// Removes finalizer `f` of `name`, as an agent acknowledging does.
    pub fn ack(&self, name: &str, f: &str) {
        let mut st = self.state.lock().unwrap();
        let Some(ep) = st.objects.get_mut(name) else { return };
        ep.metadata.finalizers.get_or_insert_default().retain(|x| x != f);
        self.settle(&mut st, name);
    }

    /// A lease by name.
    pub fn object(&self, name: &str) -> Option<NetworkEndpoint> {
        self.state.lock().unwrap().objects.get(name).cloned()
    }

    /// Every object.
    pub fn objects(&self) -> Vec<NetworkEndpoint> {
        self.state.lock().unwrap().objects.values().cloned().collect()
    }

    /// The Event reasons recorded (`Kind/Reason`), with their notes.
    pub fn events(&self) -> Vec<(String, String)> {
        self.state.lock().unwrap().events.clone()
    }

    /// The queue entries there are, by name.
    pub fn entries(&self) -> BTreeMap<String, NetworkEndpointNeed> {
        self.state.lock().unwrap().entries.clone()
    }

    /// Plays the controller's part for the queue of `set`'s pool and family
    /// once, with the same decision ([`netendpoint_lease::queue::assign`]):
    /// orders the entries by arrival, and promises the free addresses of
    /// `set` and its releases in progress. Returns the promises written.
    pub fn serve_queue(&self, pool: &str, set: &netendpoint_netconf::RangeSet) -> usize {
        use netendpoint_lease::queue::{Supply, arrival_of, assign};
        let mut st = self.state.lock().unwrap();
        let now = self.now();
        let family = set.family();
        let mut waiting: Vec<NetworkEndpointNeed> = st
            .entries
            .values()
            .filter(|e| e.spec.pool == pool && e.spec.ip_family == Some(family))
            .filter(|e| e.spec.deadline.as_ref().is_some_and(|d| d.0 > now))
            .cloned()
            .collect();
        let arrival = |e: &NetworkEndpointNeed| {
            e.status
                .as_ref()
                .and_then(|s| s.arrival.as_deref())
                .or(e.metadata.resource_version.as_deref())
                .and_then(arrival_of)
                .unwrap_or(u128::MAX)
        };
        waiting.sort_by_key(arrival);
        let taken: HashSet<IpAddr> = st
            .objects
            .values()
            .filter(|o| o.spec.pool == pool && o.spec.incarnation.is_none())
            .filter_map(|o| o.ip())
            .collect();
        let mut releasing: Vec<&NetworkEndpoint> = st
            .objects
            .values()
            .filter(|o| o.spec.pool == pool && o.is_releasing() && !o.is_hold() && o.spec.incarnation.is_none())
            .filter(|o| o.ip().is_some_and(|ip| set.is_usable(ip)))
            .collect();
        releasing.sort_by_key(|o| (o.metadata.deletion_timestamp.clone().map(|t| t.0), o.metadata.name.clone()));
        let supply = Supply {
            free: set.candidates(None).filter(|ip| !taken.contains(ip)).take(waiting.len()).collect(),
            releasing: releasing.iter().filter_map(|o| Some((o.ip()?, o.metadata.name.clone()?))).collect(),
        };
        let current: Vec<Option<&netendpoint_crd::Promise>> =
            waiting.iter().map(|e| e.status.as_ref().and_then(|s| s.promise.as_ref())).collect();
        let promises = assign(pool, &current, &supply);
        let mut written = 0;
        for (e, promise) in waiting.iter().zip(promises) {
            let status = NetworkEndpointNeedStatus { arrival: Some(arrival(e).to_string()), promise, message: None };
            if e.status.as_ref() == Some(&status) {
                continue;
            }
            let name = e.metadata.name.clone().unwrap();
            written += usize::from(status.promise.is_some());
            let rv = self.bump_entry(&mut st, &name);
            if let Some(stored) = st.entries.get_mut(&name) {
                stored.status = Some(status);
                stored.metadata.resource_version = Some(rv.to_string());
            }
        }
        written
    }

    /// Serves holds and the queue of `set`'s pool whenever the store
    /// changes, until the task is aborted.
    pub fn spawn_queue_controller(
        self: &std::sync::Arc<Self>,
        pool: &str,
        set: netendpoint_netconf::RangeSet,
    ) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        let pool = pool.to_string();
        tokio::spawn(async move {
            loop {
                let changed = me.changes();
                me.serve_holds();
                me.serve_queue(&pool, &set);
                changed.await;
            }
        })
    }

    fn bump_entry(&self, st: &mut State, name: &str) -> u64 {
        st.rv += 1;
        st.entry_change.insert(name.to_string(), st.rv);
        self.changed.notify_waiters();
        st.rv
    }

    /// Creates (or replaces) Pod `namespace`/`name` bound to `node`.
    pub fn put_pod(&self, namespace: &str, name: &str, facts: PodFacts, node: &str) {
        self.state.lock().unwrap().pods.insert((namespace.into(), name.into()), (facts, node.into()));
    }

    /// Creates (or replaces) a claim.
    pub fn put_claim(&self, claim: IPAMClaim) {
        let key =
            (claim.metadata.namespace.clone().unwrap_or_default(), claim.metadata.name.clone().unwrap_or_default());
        self.state.lock().unwrap().claims.insert(key, claim);
    }

    /// Creates (or replaces) StatefulSet `namespace`/`name` wanting `replicas`.
    pub fn put_statefulset(&self, namespace: &str, name: &str, replicas: i64) {
        self.state.lock().unwrap().statefulsets.insert((namespace.into(), name.into()), replicas);
    }

    /// A claim as it is now.
    pub fn claim_now(&self, namespace: &str, name: &str) -> Option<IPAMClaim> {
        self.state.lock().unwrap().claims.get(&(namespace.to_string(), name.to_string())).cloned()
    }

    /// Registers or removes a Node.
    pub fn set_node(&self, name: &str, present: bool) {
        let mut st = self.state.lock().unwrap();
        if present {
            st.nodes.insert(name.to_string());
        } else {
            st.nodes.remove(name);
        }
    }

    fn delete_locked(&self, st: &mut State, name: &str, uid: Option<&str>) {
        let stamp = self.stamp();
        let Some(ep) = st.objects.get_mut(name) else { return };
        if uid.is_some_and(|u| ep.metadata.uid.as_deref() != Some(u)) {
            return;
        }
        if ep.metadata.deletion_timestamp.is_none() {
            ep.metadata.deletion_timestamp = Some(stamp);
            self.settle(st, name);
        }
    }

    /// After a change: removes a releasing object with no finalizers left,
    /// else records the change.
    fn settle(&self, st: &mut State, name: &str) {
        let Some(ep) = st.objects.get(name) else { return };
        let gone =
            ep.metadata.deletion_timestamp.is_some() && ep.metadata.finalizers.as_ref().is_none_or(Vec::is_empty);
        let rv = self.bump(st, name);
        if gone {
            st.objects.remove(name);
        } else if let Some(ep) = st.objects.get_mut(name) {
            ep.metadata.resource_version = Some(rv.to_string());
        }
    }

    /// Waits until anything in the store changes.
    pub async fn changes(&self) {
        self.changed.notified().await;
    }

    /// Plays the controller's part for holds once: creates each incarnation
    /// a hold asks for whose Pod is bound to the asking node and whose
    /// previous incarnation is gone, and refuses one whose Pod is not, as
    /// `netendpoint-controller` does.
    /// Returns how many it created.
    pub fn serve_holds(&self) -> usize {
        let holds: Vec<NetworkEndpoint> = self.objects().into_iter().filter(NetworkEndpoint::is_hold).collect();
        let mut created = 0;
        for hold in holds {
            let Some(req) = netendpoint_lease::hold::pending_request(&hold) else { continue };
            let bound = {
                let st = self.state.lock().unwrap();
                st.pods
                    .get(&(req.pod.namespace.clone(), req.pod.name.clone()))
                    .is_some_and(|(f, node)| f.uid == req.pod.uid && *node == req.node)
            };
            if !bound {
                // Refused, with the reason on the hold, as the controller does.
                let why =
                    format!("Pod {}/{} is not bound to the asking node {}", req.pod.namespace, req.pod.name, req.node);
                let patch = netendpoint_lease::hold::refused_patch(&hold, &why);
                let mut st = self.state.lock().unwrap();
                let _ = self.apply(&mut st, hold.metadata.name.as_deref().unwrap(), &patch, true);
                continue;
            }
            let previous_gone = current_endpoint(&hold).is_none_or(|n| self.object(&n).is_none());
            if !previous_gone {
                // A claim that is not a StatefulSet's (a VM) is answered early.
                let migrates = {
                    let st = self.state.lock().unwrap();
                    hold.spec
                        .claim
                        .as_ref()
                        .and_then(|c| st.claims.get(&(c.namespace.clone(), c.name.clone())))
                        .is_some_and(|c| {
                            !c.metadata
                                .labels
                                .as_ref()
                                .is_some_and(|l| l.contains_key(netendpoint_crd::ipamclaim::LABEL_STATEFULSET))
                        })
                };
                if migrates && !req.accepted {
                    let patch = netendpoint_lease::hold::accepted_patch(&hold, &req);
                    let mut st = self.state.lock().unwrap();
                    let _ = self.apply(&mut st, hold.metadata.name.as_deref().unwrap(), &patch, true);
                }
                continue;
            }
            let Some(ep) = netendpoint_lease::hold::incarnation_object(&hold, &req) else { continue };
            let name = ep.metadata.name.clone().unwrap();
            if self.object(&name).is_some() {
                continue;
            }
            self.insert(ep);
            let patch = netendpoint_lease::hold::created_patch(&hold, &req, &name);
            let mut st = self.state.lock().unwrap();
            let _ = self.apply(&mut st, hold.metadata.name.as_deref().unwrap(), &patch, true);
            if let Some(claim) = hold.spec.claim.as_ref()
                && let Some(c) = st.claims.get_mut(&(claim.namespace.clone(), claim.name.clone()))
            {
                c.status = Some(netendpoint_crd::ipamclaim::IPAMClaimStatus {
                    ips: vec![format!("{}/{}", hold.spec.ip, hold.spec.prefix_length)],
                    owner_pod: Some(netendpoint_crd::ipamclaim::OwnerPod { name: req.pod.name.clone() }),
                });
            }
            created += 1;
        }
        created
    }

    /// Serves holds whenever the store changes, until the task is aborted.
    pub fn spawn_controller(self: &std::sync::Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                let changed = me.changes();
                me.serve_holds();
                changed.await;
            }
        })
    }

    /// Applies a JSON patch to `name`'s main resource (or its status), with
    /// the API server's rules; false when a test failed or it is gone.
    /// The lease as patched (before a release it ended removes it), or
    /// `None` when it is gone or the patch does not apply.
    fn apply(&self, st: &mut State, name: &str, patch: &json_patch::Patch, status: bool) -> Option<NetworkEndpoint> {
        let cur = st.objects.get(name)?;
        let mut doc = serde_json::to_value(cur).unwrap();
        json_patch::patch(&mut doc, patch).ok()?;
        let mut next = serde_json::from_value::<NetworkEndpoint>(doc).ok()?;
        if status {
            let mut kept = cur.clone();
            kept.status = next.status;
            next = kept;
        } else {
            next.status = cur.status.clone();
            if next.spec != cur.spec {
                return None;
            }
        }
        next.metadata.uid = cur.metadata.uid.clone();
        next.metadata.deletion_timestamp = cur.metadata.deletion_timestamp.clone();
        st.objects.insert(name.to_string(), next.clone());
        self.settle(st, name);
        // As the server answers: the new resourceVersion, even if the
        // patch ended the release and the lease is gone now.
        next.metadata.resource_version = Some(st.rv.to_string());
        Some(next)
    }
}

/// The name of `hold`'s current incarnation, if it has one (as the
/// controller reads it from the hold's status).
fn current_endpoint(hold: &NetworkEndpoint) -> Option<String> {
    let status = hold.status.as_ref()?;
    status.incarnation?;
    status.endpoint.clone()
}

/// The shard views of `pool` computed from the objects; a promised address
/// counts as leased, as the controller writes it.
fn shards_of(st: &State, pool: &str) -> BTreeMap<IpAddr, ShardView> {
    let mut out: BTreeMap<IpAddr, ShardView> = BTreeMap::new();
    for e in st.entries.values().filter(|e| e.spec.pool == pool) {
        if let Some(ip) = e.status.as_ref().and_then(|s| s.promise.as_ref()).and_then(|p| p.ip.parse::<IpAddr>().ok()) {
            out.entry(shard_first(ip)).or_default().leased.set(shard_index(ip));
        }
    }
    for ep in st.objects.values().filter(|o| o.spec.pool == pool && o.spec.incarnation.is_none()) {
        let Some(ip) = ep.ip() else { continue };
        let v = out.entry(shard_first(ip)).or_default();
        v.leased.set(shard_index(ip));
        if ep.metadata.deletion_timestamp.is_some() {
            v.releasing.set(shard_index(ip));
        }
    }
    out
}

impl Clock for MemStore {
    fn server_now(&self) -> Option<Timestamp> {
        Some(self.now())
    }
}

impl Leases for MemStore {
    async fn create(&self, ep: &NetworkEndpoint) -> Result<Created> {
        self.enter("create").await?;
        let name = ep.metadata.name.clone().unwrap();
        if self.state.lock().unwrap().objects.contains_key(&name) {
            return Ok(Created::Taken);
        }
        let stored = self.insert(ep.clone());
        let mut st = self.state.lock().unwrap();
        if st.lost_creates > 0 {
            st.lost_creates -= 1;
            return Err(Fault::Unreachable.error("create"));
        }
        Ok(Created::Ours(Box::new(stored)))
    }

    async fn get(&self, name: &str) -> Result<Option<NetworkEndpoint>> {
        self.enter("get").await?;
        Ok(self.object(name))
    }

    async fn delete(&self, name: &str, uid: &str) -> Result<()> {
        self.enter("delete").await?;
        let mut st = self.state.lock().unwrap();
        self.delete_locked(&mut st, name, Some(uid));
        Ok(())
    }

    async fn patch(&self, name: &str, patch: &json_patch::Patch, status: bool) -> Result<Option<NetworkEndpoint>> {
        self.enter(if status { "patch_status" } else { "patch" }).await?;
        let mut st = self.state.lock().unwrap();
        Ok(self.apply(&mut st, name, patch, status))
    }

    async fn next_change(&self, name: &str, resource_version: &str, timeout: Duration) -> Result<Change> {
        self.enter("watch").await?;
        let since: u64 = resource_version.parse().unwrap_or(0);
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changes();
            {
                let st = self.state.lock().unwrap();
                if st.last_change.get(name).is_some_and(|rv| *rv > since) {
                    return Ok(match st.objects.get(name) {
                        Some(o) => Change::Changed(Box::new(o.clone())),
                        None => Change::Gone,
                    });
                }
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(until) => return Ok(Change::Quiet),
            }
        }
    }

    async fn find_by_container(&self, container_id: &str) -> Result<Vec<NetworkEndpoint>> {
        self.enter("list_container").await?;
        let st = self.state.lock().unwrap();
        if !st.crd_served {
            return Err(Error::CrdMissing);
        }
        Ok(st.objects.values().filter(|e| e.spec.container_id == container_id).cloned().collect())
    }
}

impl Summaries for MemStore {
    async fn shard(&self, pool: &str, first: IpAddr) -> Result<Option<ShardView>> {
        self.enter("shard").await?;
        let st = self.state.lock().unwrap();
        Ok(match st.summaries {
            Some(SummaryMode::Live) => Some(shards_of(&st, pool).remove(&first).unwrap_or_default()),
            Some(SummaryMode::Frozen | SummaryMode::Behind) => st.frozen.get(pool).and_then(|s| s.get(&first)).copied(),
            _ => None,
        })
    }

    async fn pool_summary(&self, pool: &str) -> Result<Option<PoolSummaryView>> {
        self.enter("pool_summary").await?;
        let st = self.state.lock().unwrap();
        let (shards, confirmed, rv) = match st.summaries {
            Some(SummaryMode::Live) => (shards_of(&st, pool), Some(self.now()), st.rv),
            Some(SummaryMode::Frozen) => (st.frozen.get(pool).cloned().unwrap_or_default(), None, st.frozen_rv),
            Some(SummaryMode::Behind) => {
                (st.frozen.get(pool).cloned().unwrap_or_default(), Some(self.now()), st.frozen_rv)
            }
            _ => return Ok(None),
        };
        let counts = shards
            .into_iter()
            .map(|(first, v)| (first, (v.leased.count() as u16, v.releasing.count() as u16)))
            .collect();
        Ok(Some(PoolSummaryView { counts, confirmed_at: confirmed, resource_version: rv.to_string() }))
    }

    async fn pool_changed(&self, _pool: &str, resource_version: &str, timeout: Duration) -> Result<bool> {
        self.enter("watch_pool").await?;
        let since: u64 = resource_version.parse().unwrap_or(0);
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changes();
            {
                let st = self.state.lock().unwrap();
                if st.summaries == Some(SummaryMode::Live) && st.rv > since {
                    return Ok(true);
                }
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(until) => return Ok(false),
            }
        }
    }
}

impl Cluster for MemStore {
    async fn node_exists(&self, name: &str) -> Result<bool> {
        self.enter("get_node").await?;
        Ok(self.state.lock().unwrap().nodes.contains(name))
    }

    async fn pod_facts(&self, namespace: &str, name: &str) -> Result<Option<PodFacts>> {
        self.enter("get_pod").await?;
        Ok(self.state.lock().unwrap().pods.get(&(namespace.into(), name.into())).map(|(f, _)| f.clone()))
    }

    async fn claim(&self, namespace: &str, name: &str) -> Result<Option<IPAMClaim>> {
        self.enter("get_claim").await?;
        Ok(self.claim_now(namespace, name))
    }

    async fn statefulset_replicas(&self, namespace: &str, name: &str) -> Result<Option<i64>> {
        self.enter("get_statefulset").await?;
        Ok(self.state.lock().unwrap().statefulsets.get(&(namespace.to_string(), name.to_string())).copied())
    }

    async fn crd_installed(&self) -> Result<bool> {
        self.enter("discovery").await?;
        Ok(self.state.lock().unwrap().crd_served)
    }

    async fn probe(&self, _pool: &str) -> Result<()> {
        self.enter("probe").await
    }
}

impl Signals for MemStore {
    async fn record_event(&self, regarding: ObjectReference, reason: &str, note: String, _warning: bool) {
        let kind = regarding.kind.unwrap_or_default();
        self.state.lock().unwrap().events.push((format!("{kind}/{reason}"), note));
    }
}

impl Queue for MemStore {
    async fn join(&self, entry: &NetworkEndpointNeed) -> Result<Option<NetworkEndpointNeed>> {
        self.enter("join").await?;
        let mut st = self.state.lock().unwrap();
        let name = entry.metadata.name.clone().unwrap();
        if st.entries.contains_key(&name) {
            return Ok(None);
        }
        let mut e = entry.clone();
        st.uid_seq += 1;
        e.metadata.uid = Some(format!("entry-uid-{}", st.uid_seq));
        e.metadata.creation_timestamp = Some(self.stamp());
        let rv = self.bump_entry(&mut st, &name);
        e.metadata.resource_version = Some(rv.to_string());
        st.entries.insert(name, e.clone());
        Ok(Some(e))
    }

    async fn entry(&self, name: &str) -> Result<Option<NetworkEndpointNeed>> {
        self.enter("get_entry").await?;
        Ok(self.state.lock().unwrap().entries.get(name).cloned())
    }

    async fn next_entry_change(
        &self,
        name: &str,
        resource_version: &str,
        timeout: Duration,
    ) -> Result<Change<NetworkEndpointNeed>> {
        self.enter("watch_entry").await?;
        let since: u64 = resource_version.parse().unwrap_or(0);
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changes();
            {
                let st = self.state.lock().unwrap();
                if st.entry_change.get(name).is_some_and(|rv| *rv > since) {
                    return Ok(match st.entries.get(name) {
                        Some(o) => Change::Changed(Box::new(o.clone())),
                        None => Change::Gone,
                    });
                }
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(until) => return Ok(Change::Quiet),
            }
        }
    }

    async fn leave(&self, name: &str, uid: &str) -> Result<()> {
        self.enter("leave").await?;
        let mut st = self.state.lock().unwrap();
        if st.entries.get(name).is_some_and(|e| e.metadata.uid.as_deref() == Some(uid)) {
            st.entries.remove(name);
            self.bump_entry(&mut st, name);
        }
        Ok(())
    }
}
