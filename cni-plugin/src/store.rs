//! The lease store: every Kubernetes call the plugin makes lives here.
//!
//! [`Store`] is what the commands need: find the leases of a sandbox, claim an
//! address atomically, list and watch a pool, and release. [`KubeStore`]
//! implements it with NetworkEndpoint objects; the claim is a plain create of
//! the object named after (pool, IP), so the API server's 409 AlreadyExists is
//! the only lock there is. The unit tests use an in-memory implementation
//! (`memstore.rs`, compiled for tests only) with the same 409 and
//! finalizer semantics.

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;

use futures::StreamExt;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation, TestOperation};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions, WatchEvent, WatchParams};
use kube::api::{Patch, PatchParams};
use netendpoint_crd::{
    ANNOTATION_FORCE_RELEASE_AFTER, ANNOTATION_HANDOVER_TO, FIELD_CONTAINER_ID, FIELD_NODE, FINALIZER_STICKY_HOLD,
    GROUP, LABEL_BLOCK, LABEL_NODE, LABEL_POOL, LABEL_STICKY_IDENTITY, NetworkEndpoint,
};
use tracing::warn;

use crate::error::{Error, Result};

/// Outcome of a claim.
#[derive(Debug)]
pub enum Claim {
    /// The lease is ours; the stored object is returned (with its UID).
    Created(Box<NetworkEndpoint>),
    /// Another holder (live or releasing) has that address.
    Taken,
}

/// One lease of a pool, as seen by a metadata-only list.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolEntry {
    /// Object name.
    pub name: String,
    /// Object UID.
    pub uid: String,
    /// Object resourceVersion, the precondition of a forced release.
    pub resource_version: String,
    /// Node label value of the holder.
    pub node: String,
    /// The leased address (parsed back from the object name).
    pub ip: IpAddr,
    /// Set once DEL requested the release; the lease waits on `finalizers`.
    pub releasing_since: Option<Time>,
    /// Finalizers still on the object.
    pub finalizers: Vec<String>,
    /// The lease's own forced-release bound, stamped at creation (absent on
    /// leases of older versions).
    pub force_release_after: Option<Duration>,
}

/// What an ADD reads from its Pod: one GET, made only when a configured feature needs it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodFacts {
    /// metadata.uid
    pub uid: String,
    /// metadata.annotations
    pub annotations: std::collections::BTreeMap<String, String>,
    /// The controller owner reference (ownerReferences entry with controller=true): (kind, name).
    pub owner: Option<(String, String)>,
}

/// A consistent snapshot of a pool.
#[derive(Debug, Clone, Default)]
pub struct PoolView {
    /// Every lease of the pool, live and releasing.
    pub entries: Vec<PoolEntry>,
    /// Resource version of the snapshot, to watch from.
    pub resource_version: String,
}

/// What a wait for a release ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// A lease of the pool disappeared: this address is free now.
    Freed(IpAddr),
    /// A sticky lease's hold was ended to hand its address back to its own
    /// Pod identity: that address is promised, not free.
    HandedOver(IpAddr),
    /// Nothing was released within the timeout.
    TimedOut,
    /// The watch ended early (e.g. the resource version expired): list again.
    Restart,
}

pub use netendpoint_lease::ServerClock;

/// The lease operations the commands need. Implemented for Kubernetes by
/// [`KubeStore`], and in memory (`memstore.rs`) for the unit tests only.
#[allow(async_fn_in_trait)]
pub trait Store {
    /// A lower bound of the API server's time now (see [`ServerClock`]);
    /// `None` when no response was seen yet.
    fn server_now(&self) -> Option<Timestamp>;
    /// True if a Node object named `name` exists.
    async fn node_exists(&self, name: &str) -> Result<bool>;
    /// True if the API server serves the NetworkEndpoint API (discovery).
    async fn crd_installed(&self) -> Result<bool>;
    /// One small request that proves the API server answers, accepts the
    /// plugin's credentials and serves the CRD (STATUS).
    async fn probe(&self) -> Result<()>;
    /// Leases whose `spec.containerID` is `container_id`.
    async fn find_by_container(&self, container_id: &str) -> Result<Vec<NetworkEndpoint>>;
    /// The lease named `name`, if it exists.
    async fn get(&self, name: &str) -> Result<Option<NetworkEndpoint>>;
    /// Leases on node `node`.
    async fn find_by_node(&self, node: &str) -> Result<Vec<NetworkEndpoint>>;
    /// Atomically claims `ep.metadata.name`.
    async fn create(&self, ep: &NetworkEndpoint) -> Result<Claim>;
    /// Every lease of `pool` (metadata only).
    async fn list_pool(&self, pool: &str) -> Result<PoolView>;
    /// The addresses leased (live or releasing) in `pool`'s address block
    /// labelled `block` (see `netendpoint_crd::block_label_value`): at most
    /// one block's worth, whatever the size of the pool. Names only.
    async fn taken_in_block(&self, pool: &str, block: &str) -> Result<Vec<IpAddr>>;
    /// Waits until a lease of `pool` disappears after `resource_version`, at most `timeout`.
    async fn wait_for_release(&self, pool: &str, resource_version: &str, timeout: Duration) -> Result<Release>;
    /// Requests deletion of exactly this object (UID precondition). Already gone is success.
    async fn delete(&self, ep: &NetworkEndpoint) -> Result<()>;
    /// Requests deletion of the lease `entry` (UID precondition). Already gone is success.
    async fn delete_entry(&self, entry: &PoolEntry) -> Result<()>;
    /// Requests deletion of the lease `name` whose UID is `uid` (UID
    /// precondition). Already gone, or the name held by a newer lease, is success.
    async fn delete_named(&self, name: &str, uid: &str) -> Result<()>;
    /// Removes every finalizer of the releasing lease `entry`, only if it is
    /// unchanged since it was listed (resourceVersion precondition). Returns
    /// false when another writer got there first.
    async fn force_release(&self, entry: &PoolEntry) -> Result<bool>;
    /// Names of the cluster's Node objects.
    async fn node_names(&self) -> Result<HashSet<String>>;
    /// Records a Kubernetes Event about `regarding`. Best effort: failures are logged.
    async fn record_event(&self, regarding: ObjectReference, reason: &str, note: String, warning: bool);
    /// Records that an ADD waits for an IP of `pool` for up to `wait` (see
    /// [`need_event`]). Best effort: failures are logged.
    async fn record_need(&self, pool: &str, regarding: ObjectReference, wait: Duration);
    /// The Pod's facts; `Ok(None)` when the Pod does not exist.
    async fn pod_facts(&self, namespace: &str, name: &str) -> Result<Option<PodFacts>>;
    /// Waits, at most `timeout`, until exactly the object `ep` (as last read:
    /// name, UID and resourceVersion) is gone. [`Release::Freed`] with its IP
    /// once it is (or its name holds another object), [`Release::TimedOut`],
    /// or [`Release::Restart`] when the watch ended early.
    async fn wait_gone(&self, ep: &NetworkEndpoint, timeout: Duration) -> Result<Release>;
    /// The leases of `pool` labelled with the sticky identity `identity`
    /// (a `netendpoint_crd::sticky_identity` value).
    async fn find_by_identity(&self, pool: &str, identity: &str) -> Result<Vec<NetworkEndpoint>>;
    /// Ends the sticky hold of `ep` for Pod UID `new_pod_uid`: removes the
    /// hold finalizer and records the handover, only if `ep` (same UID) is
    /// being released and the hold is its last finalizer. The API server
    /// then deletes the object. False when that did not hold (changed, gone).
    async fn end_hold(&self, ep: &NetworkEndpoint, new_pod_uid: &str) -> Result<bool>;
    /// Removes every finalizer but the sticky hold from the releasing lease
    /// `ep`, only if it is unchanged (UID and resourceVersion preconditions):
    /// the forced release of a held lease, which never ends the hold.
    async fn force_keep_hold(&self, ep: &NetworkEndpoint) -> Result<bool>;
    /// Waits until the lease `name` changes after `resource_version` (any
    /// event, deletion included), at most `timeout`. True if it changed.
    async fn wait_for_change(&self, name: &str, resource_version: &str, timeout: Duration) -> Result<bool>;
}

/// The part of a `meta.k8s.io/v1` Table the block list reads: each row's
/// first cell, which is the object's name.
#[derive(serde::Deserialize)]
struct NameTable {
    #[serde(default)]
    rows: Vec<NameRow>,
}

#[derive(serde::Deserialize)]
struct NameRow {
    #[serde(default)]
    cells: Vec<serde_json::Value>,
}

impl NameRow {
    fn name(&self) -> Option<&str> {
        self.cells.first()?.as_str()
    }
}

/// Percent-encodes a label selector for a query string (`=`, `,` and the
/// characters a label value may hold are the only ones it can contain).
fn percent_encode_query(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(char::from(b)),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// [`Store`] over the Kubernetes API.
#[derive(Clone)]
pub struct KubeStore {
    api: Api<NetworkEndpoint>,
    clock: ServerClock,
}

impl KubeStore {
    /// A store using `client`, whose responses feed `clock` (see [`ServerClock`]).
    pub fn new(client: Client, clock: ServerClock) -> Self {
        Self { api: Api::all(client), clock }
    }

    async fn list_by_field(&self, field: &str, value: &str, what: &str) -> Result<Vec<NetworkEndpoint>> {
        let lp = ListParams::default().fields(&format!("{field}={value}"));
        self.api
            .list(&lp)
            .await
            .map(|l| l.items)
            .map_err(|e| Error::from_kube(format!("list NetworkEndpoints of {what} {value}"), e))
    }
}

impl Store for KubeStore {
    fn server_now(&self) -> Option<Timestamp> {
        self.clock.now()
    }

    async fn node_exists(&self, name: &str) -> Result<bool> {
        let nodes: Api<Node> = Api::all(self.api.clone().into_client());
        nodes
            .get_metadata_opt(name)
            .await
            .map(|n| n.is_some())
            .map_err(|e| Error::from_kube(format!("get node {name}"), e))
    }

    async fn crd_installed(&self) -> Result<bool> {
        let client = self.api.clone().into_client();
        let path = format!("/apis/{GROUP}/v1alpha1");
        let req = http::Request::get(&path)
            .body(Vec::new())
            .map_err(|e| Error::Decode { what: "discovery request", reason: e.to_string() })?;
        match client.request::<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList>(req).await {
            Ok(list) => Ok(list.resources.iter().any(|r| r.name == "networkendpoints")),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(Error::from_kube(format!("discover {path}"), e)),
        }
    }

    async fn probe(&self) -> Result<()> {
        self.api
            .list_metadata(&ListParams::default().limit(1))
            .await
            .map(|_| ())
            .map_err(|e| Error::from_kube("list one NetworkEndpoint", e))
    }
    async fn find_by_container(&self, container_id: &str) -> Result<Vec<NetworkEndpoint>> {
        self.list_by_field(FIELD_CONTAINER_ID, container_id, "container").await
    }

    async fn get(&self, name: &str) -> Result<Option<NetworkEndpoint>> {
        self.api.get_opt(name).await.map_err(|e| Error::from_kube(format!("get NetworkEndpoint {name}"), e))
    }

    async fn find_by_node(&self, node: &str) -> Result<Vec<NetworkEndpoint>> {
        self.list_by_field(FIELD_NODE, node, "node").await
    }

    async fn create(&self, ep: &NetworkEndpoint) -> Result<Claim> {
        match self.api.create(&PostParams::default(), ep).await {
            Ok(created) => Ok(Claim::Created(Box::new(created))),
            Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(Claim::Taken),
            Err(e) => Err(Error::from_kube(
                format!("create NetworkEndpoint {}", ep.metadata.name.as_deref().unwrap_or("")),
                e,
            )),
        }
    }

    async fn list_pool(&self, pool: &str) -> Result<PoolView> {
        self.list_selected(pool, &format!("{LABEL_POOL}={}", netendpoint_crd::label_value(pool)), "pool").await
    }

    async fn taken_in_block(&self, pool: &str, block: &str) -> Result<Vec<IpAddr>> {
        // A server-side Table without objects: a row is the name and the
        // printer columns, about a fifth of a lease's metadata (most of which
        // is managedFields), and the name is all a block list needs.
        let selector = format!("{LABEL_POOL}={},{LABEL_BLOCK}={block}", netendpoint_crd::label_value(pool));
        let what = || format!("list block {block} of pool {pool}");
        let path = format!(
            "/apis/{GROUP}/v1alpha1/networkendpoints?labelSelector={}&includeObject=None",
            percent_encode_query(&selector)
        );
        let req = http::Request::get(&path)
            .header(http::header::ACCEPT, "application/json;as=Table;v=v1;g=meta.k8s.io")
            .body(Vec::new())
            .map_err(|e| Error::Decode { what: "block list request", reason: e.to_string() })?;
        let table: NameTable =
            self.api.clone().into_client().request(req).await.map_err(|e| Error::from_kube(what(), e))?;
        Ok(table.rows.iter().filter_map(|r| netendpoint_crd::parse_endpoint_name(pool, r.name()?)).collect())
    }

    async fn wait_for_release(&self, pool: &str, resource_version: &str, timeout: Duration) -> Result<Release> {
        let secs = u32::try_from(timeout.as_secs().max(1)).unwrap_or(u32::MAX);
        let wp = WatchParams::default()
            .labels(&format!("{LABEL_POOL}={}", netendpoint_crd::label_value(pool)))
            .timeout(secs);
        let watch = async {
            let mut stream = self
                .api
                .watch_metadata(&wp, resource_version)
                .await
                .map_err(|e| Error::from_kube(format!("watch pool {pool}"), e))?
                .boxed();
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(WatchEvent::Deleted(m)) => {
                        if let Some(ip) =
                            m.metadata.name.as_deref().and_then(|n| netendpoint_crd::parse_endpoint_name(pool, n))
                        {
                            let handed_over =
                                m.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(ANNOTATION_HANDOVER_TO));
                            return Ok(if handed_over { Release::HandedOver(ip) } else { Release::Freed(ip) });
                        }
                    }
                    Ok(WatchEvent::Error(_)) => return Ok(Release::Restart),
                    Ok(_) => {}
                    Err(e) => return Err(Error::from_kube(format!("watch pool {pool}"), e)),
                }
            }
            Ok(Release::Restart)
        };
        match tokio::time::timeout(timeout, watch).await {
            Ok(r) => r,
            Err(_) => Ok(Release::TimedOut),
        }
    }

    async fn delete(&self, ep: &NetworkEndpoint) -> Result<()> {
        self.delete_uid(ep.metadata.name.as_deref().unwrap_or_default(), ep.metadata.uid.clone()).await
    }

    async fn delete_entry(&self, entry: &PoolEntry) -> Result<()> {
        self.delete_uid(&entry.name, Some(entry.uid.clone())).await
    }

    async fn delete_named(&self, name: &str, uid: &str) -> Result<()> {
        self.delete_uid(name, Some(uid.to_string())).await
    }

    async fn force_release(&self, entry: &PoolEntry) -> Result<bool> {
        let patch = netendpoint_lease::patch::force_release(&entry.uid, &entry.resource_version);
        match self.api.patch(&entry.name, &PatchParams::default(), &Patch::Json::<()>(patch)).await {
            Ok(_) => Ok(true),
            // Gone, changed, or the test failed (422): someone else acted first.
            Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() || s.code == 422 => Ok(false),
            Err(e) => Err(Error::from_kube(format!("remove finalizers of {}", entry.name), e)),
        }
    }

    async fn node_names(&self) -> Result<HashSet<String>> {
        let nodes: Api<Node> = Api::all(self.api.clone().into_client());
        let list = nodes.list_metadata(&ListParams::default()).await.map_err(|e| Error::from_kube("list nodes", e))?;
        Ok(list.items.into_iter().filter_map(|n| n.metadata.name).collect())
    }

    async fn record_event(&self, regarding: ObjectReference, reason: &str, note: String, warning: bool) {
        let event = event_object(regarding, reason, note, warning, Timestamp::now());
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let events: Api<Event> = Api::namespaced(self.api.clone().into_client(), &namespace);
        if let Err(e) = events.create(&PostParams::default(), &event).await {
            warn!(reason, error = %e, "cannot record event");
        }
    }

    async fn record_need(&self, pool: &str, regarding: ObjectReference, wait: Duration) {
        let event = need_event(pool, regarding, wait, Timestamp::now());
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let events: Api<Event> = Api::namespaced(self.api.clone().into_client(), &namespace);
        if let Err(e) = events.create(&PostParams::default(), &event).await {
            warn!(pool, error = %e, "cannot record that an IP is needed");
        }
    }

    async fn pod_facts(&self, namespace: &str, name: &str) -> Result<Option<PodFacts>> {
        let pods: Api<Pod> = Api::namespaced(self.api.clone().into_client(), namespace);
        let meta = pods
            .get_metadata_opt(name)
            .await
            .map_err(|e| Error::from_kube(format!("get pod {namespace}/{name}"), e))?;
        Ok(meta.map(|m| PodFacts {
            uid: m.metadata.uid.unwrap_or_default(),
            annotations: m.metadata.annotations.unwrap_or_default(),
            owner: m
                .metadata
                .owner_references
                .unwrap_or_default()
                .into_iter()
                .find(|o| o.controller == Some(true))
                .map(|o| (o.kind, o.name)),
        }))
    }

    async fn wait_gone(&self, ep: &NetworkEndpoint, timeout: Duration) -> Result<Release> {
        let name = ep.metadata.name.as_deref().unwrap_or_default();
        let uid = ep.metadata.uid.as_deref();
        let resource_version = ep.metadata.resource_version.as_deref().unwrap_or("0");
        let Some(ip) = ep.ip() else { return Ok(Release::Restart) };
        let secs = u32::try_from(timeout.as_secs().max(1)).unwrap_or(u32::MAX);
        let wp = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(secs);
        let watch = async {
            let mut stream = self
                .api
                .watch_metadata(&wp, resource_version)
                .await
                .map_err(|e| Error::from_kube(format!("watch NetworkEndpoint {name}"), e))?
                .boxed();
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(WatchEvent::Deleted(_)) => return Ok(Release::Freed(ip)),
                    // The name now holds another object: the one waited for is gone.
                    Ok(WatchEvent::Added(m) | WatchEvent::Modified(m)) if m.metadata.uid.as_deref() != uid => {
                        return Ok(Release::Freed(ip));
                    }
                    Ok(WatchEvent::Error(_)) => return Ok(Release::Restart),
                    Ok(_) => {}
                    Err(e) => return Err(Error::from_kube(format!("watch NetworkEndpoint {name}"), e)),
                }
            }
            Ok(Release::Restart)
        };
        match tokio::time::timeout(timeout, watch).await {
            Ok(r) => r,
            Err(_) => Ok(Release::TimedOut),
        }
    }

    async fn find_by_identity(&self, pool: &str, identity: &str) -> Result<Vec<NetworkEndpoint>> {
        let selector =
            format!("{LABEL_POOL}={},{LABEL_STICKY_IDENTITY}={identity}", netendpoint_crd::label_value(pool));
        self.api
            .list(&ListParams::default().labels(&selector))
            .await
            .map(|l| l.items)
            .map_err(|e| Error::from_kube(format!("list leases of sticky identity {identity} in pool {pool}"), e))
    }

    async fn end_hold(&self, ep: &NetworkEndpoint, new_pod_uid: &str) -> Result<bool> {
        let name = ep.metadata.name.as_deref().unwrap_or_default();
        let patch = end_hold_patch(ep, new_pod_uid);
        match self.api.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch)).await {
            Ok(_) => Ok(true),
            // Gone, changed, or a test failed (422): nothing was changed.
            Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() || s.code == 422 => Ok(false),
            Err(e) => Err(Error::from_kube(format!("end the sticky hold of {name}"), e)),
        }
    }

    async fn force_keep_hold(&self, ep: &NetworkEndpoint) -> Result<bool> {
        let name = ep.metadata.name.as_deref().unwrap_or_default();
        let ptr = |tokens: &[&str]| PointerBuf::from_tokens(tokens.iter().copied());
        let test = |field: &str, value: Option<&String>| {
            PatchOperation::Test(TestOperation {
                path: ptr(&["metadata", field]),
                value: value.cloned().unwrap_or_default().into(),
            })
        };
        let patch = json_patch::Patch(vec![
            test("uid", ep.metadata.uid.as_ref()),
            test("resourceVersion", ep.metadata.resource_version.as_ref()),
            PatchOperation::Replace(json_patch::ReplaceOperation {
                path: ptr(&["metadata", "finalizers"]),
                value: serde_json::json!([FINALIZER_STICKY_HOLD]),
            }),
        ]);
        match self.api.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() || s.code == 422 => Ok(false),
            Err(e) => Err(Error::from_kube(format!("remove the agents' finalizers of {name}"), e)),
        }
    }

    async fn wait_for_change(&self, name: &str, resource_version: &str, timeout: Duration) -> Result<bool> {
        let secs = u32::try_from(timeout.as_secs().max(1)).unwrap_or(u32::MAX);
        let wp = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(secs);
        let watch = async {
            let mut stream = self
                .api
                .watch_metadata(&wp, resource_version)
                .await
                .map_err(|e| Error::from_kube(format!("watch lease {name}"), e))?
                .boxed();
            match stream.next().await {
                Some(Ok(WatchEvent::Bookmark(_))) | None => Ok(false),
                Some(Ok(_)) => Ok(true),
                Some(Err(e)) => Err(Error::from_kube(format!("watch lease {name}"), e)),
            }
        };
        match tokio::time::timeout(timeout, watch).await {
            Ok(r) => r,
            Err(_) => Ok(false),
        }
    }
}

/// `test uid`, `test finalizers == [hold]`, `remove finalizers`, `add` the
/// handover annotation: ends the hold of exactly this releasing lease once
/// every agent has acknowledged, or changes nothing.
pub fn end_hold_patch(ep: &NetworkEndpoint, new_pod_uid: &str) -> json_patch::Patch {
    let ptr = |tokens: &[&str]| PointerBuf::from_tokens(tokens.iter().copied());
    let annotation = if ep.metadata.annotations.is_some() {
        PatchOperation::Add(AddOperation {
            path: ptr(&["metadata", "annotations", ANNOTATION_HANDOVER_TO]),
            value: new_pod_uid.into(),
        })
    } else {
        PatchOperation::Add(AddOperation {
            path: ptr(&["metadata", "annotations"]),
            value: serde_json::json!({ ANNOTATION_HANDOVER_TO: new_pod_uid }),
        })
    };
    json_patch::Patch(vec![
        PatchOperation::Test(TestOperation {
            path: ptr(&["metadata", "uid"]),
            value: ep.metadata.uid.clone().unwrap_or_default().into(),
        }),
        PatchOperation::Test(TestOperation {
            path: ptr(&["metadata", "finalizers"]),
            value: serde_json::json!([FINALIZER_STICKY_HOLD]),
        }),
        PatchOperation::Remove(RemoveOperation { path: ptr(&["metadata", "finalizers"]) }),
        annotation,
    ])
}

/// The `IPNeeded` Event of an ADD that waits up to `wait` for an IP of
/// `pool`: an [`event_object`] about `regarding` (the Pod when the runtime
/// named it, else the Node), labelled with the pool's label value and
/// annotated with its exact name and the wait. The controller watches these
/// by reason; only ADDs that find their pool full write one, so the common
/// path pays nothing.
pub fn need_event(pool: &str, regarding: ObjectReference, wait: Duration, now: Timestamp) -> Event {
    let note = format!("an ADD waits up to {} for an IP of pool {pool}", netendpoint_crd::duration::format(wait));
    let mut ev = event_object(regarding, netendpoint_crd::REASON_IP_NEEDED, note, false, now);
    ev.metadata.labels = Some([(LABEL_POOL.to_string(), netendpoint_crd::label_value(pool))].into());
    ev.metadata.annotations = Some(
        [
            (netendpoint_crd::ANNOTATION_NEEDED_POOL.to_string(), pool.to_string()),
            (netendpoint_crd::ANNOTATION_NEEDED_FOR.to_string(), netendpoint_crd::duration::format(wait)),
        ]
        .into(),
    );
    ev
}

/// The controller named in the plugin's Events (`reportingController`, and
/// `reportingInstance` too: the plugin has no long-lived instance).
pub const REPORTING_CONTROLLER: &str = "netendpoint-cni";

/// The Event the plugin records about `regarding` at `now`.
pub fn event_object(regarding: ObjectReference, reason: &str, note: String, warning: bool, now: Timestamp) -> Event {
    let me = netendpoint_lease::events::Reporter::component(REPORTING_CONTROLLER);
    netendpoint_lease::events::event_object(&me, regarding, reason, note, warning, now)
}

impl KubeStore {
    /// The leases of `pool` matching the label `selector` (metadata only).
    async fn list_selected(&self, pool: &str, selector: &str, what: &str) -> Result<PoolView> {
        let lp = ListParams::default().labels(selector);
        let list = self
            .api
            .list_metadata(&lp)
            .await
            .map_err(|e| Error::from_kube(format!("list {what} of pool {pool}"), e))?;
        let entries = list
            .items
            .into_iter()
            .filter_map(|m| {
                let ip = netendpoint_crd::parse_endpoint_name(pool, m.metadata.name.as_deref()?)?;
                Some(PoolEntry {
                    name: m.metadata.name.clone().unwrap_or_default(),
                    uid: m.metadata.uid.clone().unwrap_or_default(),
                    resource_version: m.metadata.resource_version.clone().unwrap_or_default(),
                    node: m.metadata.labels.as_ref().and_then(|l| l.get(LABEL_NODE)).cloned().unwrap_or_default(),
                    ip,
                    force_release_after: m
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(ANNOTATION_FORCE_RELEASE_AFTER))
                        .and_then(|v| netendpoint_crd::duration::parse(v)),
                    releasing_since: m.metadata.deletion_timestamp,
                    finalizers: m.metadata.finalizers.unwrap_or_default(),
                })
            })
            .collect();
        Ok(PoolView { entries, resource_version: list.metadata.resource_version.unwrap_or_default() })
    }

    async fn delete_uid(&self, name: &str, uid: Option<String>) -> Result<()> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid, resource_version: None }),
            ..DeleteParams::default()
        };
        match self.api.delete(name, &dp).await {
            Ok(_) => Ok(()),
            // Gone already, or the name now belongs to a newer lease (UID precondition failed).
            Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => Ok(()),
            Err(e) => Err(Error::from_kube(format!("delete NetworkEndpoint {name}"), e)),
        }
    }
}
