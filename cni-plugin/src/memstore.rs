//! An in-memory [`Store`] for unit tests of the decisions, like host-local's
//! FakeStore: a second create of a name is `Taken` (the API server's 409),
//! a delete of an object with finalizers only sets its deletionTimestamp, and
//! the object disappears when its last finalizer is removed.
//!
//! Its server clock runs on tokio's clock from a start time the test chooses,
//! so `#[tokio::test(start_paused = true)]` drives every wait and every age.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use netendpoint_crd::{
    ANNOTATION_FORCE_RELEASE_AFTER, ANNOTATION_HANDOVER_TO, FINALIZER_STICKY_HOLD, LABEL_BLOCK, LABEL_NODE,
    LABEL_STICKY_IDENTITY, NetworkEndpoint,
};
use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::store::{Claim, PodFacts, PoolEntry, PoolView, Release, Store};

/// A failure the test wants the next matching call to return.
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
}

impl Fault {
    fn error(self, op: &str) -> Error {
        match self {
            Self::Unreachable => Error::ApiUnreachable {
                op: op.to_string(),
                source: kube::Error::Service(Box::new(std::io::Error::other("connection refused"))),
            },
            Self::Denied => Error::ApiDenied { op: op.to_string(), status: 403, message: "forbidden".into() },
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

#[derive(Default)]
struct State {
    objects: BTreeMap<String, NetworkEndpoint>,
    /// (resourceVersion, ip, handed over) of every object that disappeared.
    gone: Vec<(u64, IpAddr, bool)>,
    /// Pods by (namespace, name).
    pods: BTreeMap<(String, String), PodFacts>,
    rv: u64,
    nodes: HashSet<String>,
    events: Vec<(String, String)>,
    calls: BTreeMap<&'static str, usize>,
    /// Creates that store the object and then fail as if the answer was lost.
    lost_creates: usize,
    probe_fault: Option<Fault>,
    crd_served: bool,
}

/// See the module docs.
pub struct MemStore {
    state: Mutex<State>,
    start: Timestamp,
    started: tokio::time::Instant,
    freed: Notify,
    changed: Notify,
}

impl MemStore {
    /// An empty store whose server clock reads `start` now, with `nodes` registered.
    pub fn new(start: &str, nodes: &[&str]) -> Self {
        let state =
            State { nodes: nodes.iter().map(|n| n.to_string()).collect(), crd_served: true, ..State::default() };
        Self {
            state: Mutex::new(state),
            start: start.parse().unwrap(),
            started: tokio::time::Instant::now(),
            freed: Notify::new(),
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

    fn count(&self, call: &'static str) {
        *self.state.lock().unwrap().calls.entry(call).or_default() += 1;
    }

    /// How often `call` was made.
    pub fn calls(&self, call: &str) -> usize {
        self.state.lock().unwrap().calls.get(call).copied().unwrap_or(0)
    }

    /// Total calls that reached the "server".
    pub fn total_calls(&self) -> usize {
        self.state.lock().unwrap().calls.values().sum()
    }

    /// Puts `ep` in the store as is (a lease made earlier, by anyone).
    pub fn insert(&self, mut ep: NetworkEndpoint) {
        let mut st = self.state.lock().unwrap();
        st.rv += 1;
        let name = ep.metadata.name.clone().unwrap();
        ep.metadata.uid.get_or_insert_with(|| format!("uid-{name}-{}", st.rv));
        ep.metadata.resource_version = Some(st.rv.to_string());
        ep.metadata.creation_timestamp.get_or_insert_with(|| self.stamp());
        st.objects.insert(name, ep);
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

    /// Every lease.
    pub fn objects(&self) -> Vec<NetworkEndpoint> {
        self.state.lock().unwrap().objects.values().cloned().collect()
    }

    /// The Event reasons recorded, with their notes.
    pub fn events(&self) -> Vec<(String, String)> {
        self.state.lock().unwrap().events.clone()
    }

    /// Creates (or replaces) the Pod `namespace`/`name`.
    pub fn put_pod(&self, namespace: &str, name: &str, facts: PodFacts) {
        self.state.lock().unwrap().pods.insert((namespace.to_string(), name.to_string()), facts);
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

    /// The next `n` creates store their object, then fail as if the answer was lost.
    pub fn lose_creates(&self, n: usize) {
        self.state.lock().unwrap().lost_creates = n;
    }

    /// Makes every probe (STATUS) fail with `fault`, or succeed with `None`.
    pub fn fail_probe(&self, fault: Option<Fault>) {
        self.state.lock().unwrap().probe_fault = fault;
    }

    /// Whether discovery serves the CRD.
    pub fn serve_crd(&self, served: bool) {
        self.state.lock().unwrap().crd_served = served;
    }

    fn delete_locked(&self, st: &mut State, name: &str, uid: Option<&str>) {
        let stamp = self.stamp();
        let Some(ep) = st.objects.get_mut(name) else { return };
        if uid.is_some_and(|u| ep.metadata.uid.as_deref() != Some(u)) {
            return;
        }
        ep.metadata.deletion_timestamp.get_or_insert(stamp);
        self.settle(st, name);
    }

    /// Removes a releasing object with no finalizers left.
    fn settle(&self, st: &mut State, name: &str) {
        let Some(ep) = st.objects.get(name) else { return };
        if ep.metadata.deletion_timestamp.is_some() && ep.metadata.finalizers.as_ref().is_none_or(Vec::is_empty) {
            let ip = ep.ip().unwrap();
            let handed_over = ep.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(ANNOTATION_HANDOVER_TO));
            st.objects.remove(name);
            st.rv += 1;
            let rv = st.rv;
            st.gone.push((rv, ip, handed_over));
            self.freed.notify_waiters();
        } else if let Some(ep) = st.objects.get_mut(name) {
            st.rv += 1;
            ep.metadata.resource_version = Some(st.rv.to_string());
        }
        self.changed.notify_waiters();
    }

    fn entry(ep: &NetworkEndpoint) -> PoolEntry {
        PoolEntry {
            name: ep.metadata.name.clone().unwrap(),
            uid: ep.metadata.uid.clone().unwrap(),
            resource_version: ep.metadata.resource_version.clone().unwrap(),
            node: ep.metadata.labels.as_ref().and_then(|l| l.get(LABEL_NODE)).cloned().unwrap_or_default(),
            ip: ep.ip().unwrap(),
            releasing_since: ep.metadata.deletion_timestamp.clone(),
            finalizers: ep.metadata.finalizers.clone().unwrap_or_default(),
            force_release_after: ep
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_FORCE_RELEASE_AFTER))
                .and_then(|v| netendpoint_crd::duration::parse(v)),
        }
    }
}

impl Store for MemStore {
    fn server_now(&self) -> Option<Timestamp> {
        Some(self.now())
    }

    async fn node_exists(&self, name: &str) -> Result<bool> {
        self.count("get_node");
        Ok(self.state.lock().unwrap().nodes.contains(name))
    }

    async fn crd_installed(&self) -> Result<bool> {
        self.count("discovery");
        Ok(self.state.lock().unwrap().crd_served)
    }

    async fn probe(&self) -> Result<()> {
        self.count("probe");
        let fault = self.state.lock().unwrap().probe_fault;
        match fault {
            Some(Fault::Hang) => std::future::pending().await,
            Some(f) => Err(f.error("list one NetworkEndpoint")),
            None => Ok(()),
        }
    }

    async fn find_by_container(&self, container_id: &str) -> Result<Vec<NetworkEndpoint>> {
        self.count("list_container");
        let st = self.state.lock().unwrap();
        if !st.crd_served {
            return Err(Error::CrdMissing);
        }
        Ok(st.objects.values().filter(|e| e.spec.container_id == container_id).cloned().collect())
    }

    async fn get(&self, name: &str) -> Result<Option<NetworkEndpoint>> {
        self.count("get");
        Ok(self.object(name))
    }

    async fn find_by_node(&self, node: &str) -> Result<Vec<NetworkEndpoint>> {
        self.count("list_node");
        Ok(self.state.lock().unwrap().objects.values().filter(|e| e.spec.node == node).cloned().collect())
    }

    async fn create(&self, ep: &NetworkEndpoint) -> Result<Claim> {
        self.count("create");
        let name = ep.metadata.name.clone().unwrap();
        if self.state.lock().unwrap().objects.contains_key(&name) {
            return Ok(Claim::Taken);
        }
        self.insert(ep.clone());
        let mut st = self.state.lock().unwrap();
        if st.lost_creates > 0 {
            st.lost_creates -= 1;
            return Err(Fault::Unreachable.error("create"));
        }
        Ok(Claim::Created(Box::new(st.objects[&name].clone())))
    }

    async fn list_pool(&self, pool: &str) -> Result<PoolView> {
        self.count("list_pool");
        let st = self.state.lock().unwrap();
        Ok(PoolView {
            entries: st.objects.values().filter(|e| e.spec.pool == pool).map(Self::entry).collect(),
            resource_version: st.rv.to_string(),
        })
    }

    async fn taken_in_block(&self, pool: &str, block: &str) -> Result<Vec<IpAddr>> {
        self.count("list_block");
        let st = self.state.lock().unwrap();
        let in_block = |e: &&NetworkEndpoint| {
            e.metadata.labels.as_ref().and_then(|l| l.get(LABEL_BLOCK)).is_some_and(|b| b == block)
        };
        Ok(st.objects.values().filter(|e| e.spec.pool == pool).filter(in_block).map(|e| Self::entry(e).ip).collect())
    }

    async fn wait_for_release(&self, _pool: &str, resource_version: &str, timeout: Duration) -> Result<Release> {
        self.count("watch_pool");
        let since: u64 = resource_version.parse().unwrap_or(0);
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.freed.notified();
            if let Some((_, ip, handed_over)) = self.state.lock().unwrap().gone.iter().find(|(rv, ..)| *rv > since) {
                return Ok(if *handed_over { Release::HandedOver(*ip) } else { Release::Freed(*ip) });
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(until) => return Ok(Release::TimedOut),
            }
        }
    }

    async fn delete(&self, ep: &NetworkEndpoint) -> Result<()> {
        self.count("delete");
        let mut st = self.state.lock().unwrap();
        self.delete_locked(&mut st, ep.metadata.name.as_deref().unwrap(), ep.metadata.uid.as_deref());
        Ok(())
    }

    async fn delete_entry(&self, entry: &PoolEntry) -> Result<()> {
        self.count("delete");
        let mut st = self.state.lock().unwrap();
        self.delete_locked(&mut st, &entry.name, Some(&entry.uid));
        Ok(())
    }

    async fn delete_named(&self, name: &str, uid: &str) -> Result<()> {
        self.count("delete");
        let mut st = self.state.lock().unwrap();
        self.delete_locked(&mut st, name, Some(uid));
        Ok(())
    }

    async fn force_release(&self, entry: &PoolEntry) -> Result<bool> {
        self.count("force_release");
        let mut st = self.state.lock().unwrap();
        let Some(ep) = st.objects.get_mut(&entry.name) else { return Ok(false) };
        if ep.metadata.uid.as_deref() != Some(entry.uid.as_str())
            || ep.metadata.resource_version.as_deref() != Some(entry.resource_version.as_str())
        {
            return Ok(false);
        }
        ep.metadata.finalizers = None;
        self.settle(&mut st, &entry.name);
        Ok(true)
    }

    async fn node_names(&self) -> Result<HashSet<String>> {
        self.count("list_nodes");
        Ok(self.state.lock().unwrap().nodes.clone())
    }

    async fn record_event(&self, regarding: ObjectReference, reason: &str, note: String, _warning: bool) {
        let kind = regarding.kind.unwrap_or_default();
        self.state.lock().unwrap().events.push((format!("{kind}/{reason}"), note));
    }

    async fn record_need(&self, pool: &str, regarding: ObjectReference, _wait: std::time::Duration) {
        let kind = regarding.kind.unwrap_or_default();
        self.state
            .lock()
            .unwrap()
            .events
            .push((format!("{kind}/{}", netendpoint_crd::REASON_IP_NEEDED), pool.to_string()));
    }

    async fn pod_facts(&self, namespace: &str, name: &str) -> Result<Option<PodFacts>> {
        self.count("get_pod");
        Ok(self.state.lock().unwrap().pods.get(&(namespace.to_string(), name.to_string())).cloned())
    }

    async fn wait_gone(&self, ep: &NetworkEndpoint, timeout: Duration) -> Result<Release> {
        self.count("watch_lease");
        let name = ep.metadata.name.clone().unwrap();
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.freed.notified();
            let gone = self.state.lock().unwrap().objects.get(&name).is_none_or(|o| o.metadata.uid != ep.metadata.uid);
            if gone {
                return Ok(Release::Freed(ep.ip().unwrap()));
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(until) => return Ok(Release::TimedOut),
            }
        }
    }

    async fn find_by_identity(&self, pool: &str, identity: &str) -> Result<Vec<NetworkEndpoint>> {
        self.count("list_identity");
        let st = self.state.lock().unwrap();
        let ours = |e: &&NetworkEndpoint| {
            e.spec.pool == pool
                && e.metadata.labels.as_ref().and_then(|l| l.get(LABEL_STICKY_IDENTITY)).is_some_and(|v| v == identity)
        };
        Ok(st.objects.values().filter(ours).cloned().collect())
    }

    async fn end_hold(&self, ep: &NetworkEndpoint, new_pod_uid: &str) -> Result<bool> {
        self.count("end_hold");
        let mut st = self.state.lock().unwrap();
        let name = ep.metadata.name.clone().unwrap();
        let Some(cur) = st.objects.get_mut(&name) else { return Ok(false) };
        let only_hold = cur.metadata.finalizers.as_deref() == Some(&[FINALIZER_STICKY_HOLD.to_string()][..]);
        if cur.metadata.uid != ep.metadata.uid || cur.metadata.deletion_timestamp.is_none() || !only_hold {
            return Ok(false);
        }
        cur.metadata.finalizers = None;
        cur.metadata.annotations.get_or_insert_default().insert(ANNOTATION_HANDOVER_TO.into(), new_pod_uid.into());
        self.settle(&mut st, &name);
        Ok(true)
    }

    async fn force_keep_hold(&self, ep: &NetworkEndpoint) -> Result<bool> {
        self.count("force_keep_hold");
        let mut st = self.state.lock().unwrap();
        let name = ep.metadata.name.clone().unwrap();
        let Some(cur) = st.objects.get_mut(&name) else { return Ok(false) };
        if cur.metadata.uid != ep.metadata.uid || cur.metadata.resource_version != ep.metadata.resource_version {
            return Ok(false);
        }
        cur.metadata.finalizers = Some(vec![FINALIZER_STICKY_HOLD.to_string()]);
        self.settle(&mut st, &name);
        Ok(true)
    }

    async fn wait_for_change(&self, name: &str, resource_version: &str, timeout: Duration) -> Result<bool> {
        self.count("watch_lease");
        let since: u64 = resource_version.parse().unwrap_or(0);
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            {
                let st = self.state.lock().unwrap();
                let rv = st.objects.get(name).and_then(|e| e.metadata.resource_version.as_deref()?.parse::<u64>().ok());
                if rv.is_none_or(|rv| rv > since) {
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
