//! The store over the Kubernetes API. The claim is a plain create of the
//! object named after (pool, IP), so the API server's 409 AlreadyExists is
//! the only lock there is.

use std::net::IpAddr;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent, WatchParams,
};
use netendpoint_crd::ipamclaim::IPAMClaim;
use netendpoint_crd::{
    FIELD_CONTAINER_ID, GROUP, NetworkEndpoint, NetworkEndpointNeed, NetworkEndpointPool, NetworkEndpointShard,
    REPORTER_PLUGIN, endpoint_name,
};
use netendpoint_lease::ServerClock;
use netendpoint_lease::events::{Reporter, event_object};
use netendpoint_lease::outcome::{Guard, unless_changed};
use netendpoint_lease::summary::{ShardView, counts_of};
use tracing::{debug, warn};

use super::{Change, Clock, Cluster, Created, Leases, PodFacts, PoolSummaryView, Queue, Signals, Summaries};
use crate::error::{Error, Result};

/// The store over the Kubernetes API.
#[derive(Clone)]
pub struct KubeStore {
    client: Client,
    clock: ServerClock,
}

impl KubeStore {
    /// A store using `client`, whose responses feed `clock`.
    pub fn new(client: Client, clock: ServerClock) -> Self {
        Self { client, clock }
    }

    fn leases(&self) -> Api<NetworkEndpoint> {
        Api::all(self.client.clone())
    }

    fn needs(&self) -> Api<NetworkEndpointNeed> {
        Api::all(self.client.clone())
    }
}

/// A watch of the one object `name` of `api` from `resource_version`: its
/// first event, within `timeout`.
async fn watch_one<K>(api: &Api<K>, name: &str, resource_version: &str, timeout: Duration) -> Result<Change<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let what = K::kind(&K::DynamicType::default()).to_string();
    let secs = u32::try_from(timeout.as_secs().max(1)).unwrap_or(u32::MAX);
    let wp = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(secs);
    let watch = async {
        let mut stream = api
            .watch(&wp, resource_version)
            .await
            .map_err(|e| Error::from_kube(format!("watch {what} {name}"), e))?
            .boxed();
        loop {
            match stream.next().await {
                Some(Ok(WatchEvent::Deleted(_))) => return Ok(Change::Gone),
                Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => return Ok(Change::Changed(Box::new(o))),
                Some(Ok(WatchEvent::Bookmark(_))) => {}
                // Expired resourceVersion and the like: the caller reads again.
                Some(Ok(WatchEvent::Error(e))) => {
                    debug!(name, code = e.code, "watch ended: {}", e.message);
                    return Ok(Change::Quiet);
                }
                Some(Err(e)) => return Err(Error::from_kube(format!("watch {what} {name}"), e)),
                None => return Ok(Change::Quiet),
            }
        }
    };
    tokio::time::timeout(timeout, watch).await.unwrap_or(Ok(Change::Quiet))
}

impl Clock for KubeStore {
    fn server_now(&self) -> Option<Timestamp> {
        self.clock.now()
    }
}

impl Leases for KubeStore {
    async fn create(&self, ep: &NetworkEndpoint) -> Result<Created> {
        match self.leases().create(&PostParams::default(), ep).await {
            Ok(created) => Ok(Created::Ours(Box::new(created))),
            Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(Created::Taken),
            Err(e) => Err(Error::from_kube(
                format!("create NetworkEndpoint {}", ep.metadata.name.as_deref().unwrap_or("")),
                e,
            )),
        }
    }

    async fn get(&self, name: &str) -> Result<Option<NetworkEndpoint>> {
        self.leases().get_opt(name).await.map_err(|e| Error::from_kube(format!("get NetworkEndpoint {name}"), e))
    }

    async fn delete(&self, name: &str, uid: &str) -> Result<()> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: Some(uid.to_string()), resource_version: None }),
            ..DeleteParams::default()
        };
        // Gone already, or the name now belongs to a newer lease (UID precondition failed): done.
        unless_changed(self.leases().delete(name, &dp).await, Guard::Preconditions)
            .map(drop)
            .map_err(|e| Error::from_kube(format!("delete NetworkEndpoint {name}"), e))
    }

    async fn patch(&self, name: &str, patch: &json_patch::Patch, status: bool) -> Result<Option<NetworkEndpoint>> {
        let api = self.leases();
        let p = Patch::Json::<()>(patch.clone());
        let pp = PatchParams::default();
        let res = if status { api.patch_status(name, &pp, &p).await } else { api.patch(name, &pp, &p).await };
        // Gone, changed, or a test failed: nothing was changed.
        unless_changed(res, Guard::Tests).map_err(|e| Error::from_kube(format!("patch NetworkEndpoint {name}"), e))
    }

    async fn next_change(&self, name: &str, resource_version: &str, timeout: Duration) -> Result<Change> {
        watch_one(&self.leases(), name, resource_version, timeout).await
    }

    async fn find_by_container(&self, container_id: &str) -> Result<Vec<NetworkEndpoint>> {
        let lp = ListParams::default().fields(&format!("{FIELD_CONTAINER_ID}={container_id}"));
        self.leases()
            .list(&lp)
            .await
            .map(|l| l.items)
            .map_err(|e| Error::from_kube(format!("list NetworkEndpoints of container {container_id}"), e))
    }
}

impl Summaries for KubeStore {
    async fn shard(&self, pool: &str, first: IpAddr) -> Result<Option<ShardView>> {
        let api: Api<NetworkEndpointShard> = Api::all(self.client.clone());
        let name = endpoint_name(pool, first);
        match api.get_opt(&name).await {
            Ok(o) => Ok(o.and_then(|s| s.status).and_then(|st| ShardView::of(&st))),
            // No summary resource (an older install): no hint.
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(Error::from_kube(format!("get NetworkEndpointShard {name}"), e)),
        }
    }

    async fn pool_summary(&self, pool: &str) -> Result<Option<PoolSummaryView>> {
        let api: Api<NetworkEndpointPool> = Api::all(self.client.clone());
        let o = match api.get_opt(pool).await {
            Ok(o) => o,
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(e) => return Err(Error::from_kube(format!("get NetworkEndpointPool {pool}"), e)),
        };
        Ok(o.and_then(|p| {
            let rv = p.metadata.resource_version.unwrap_or_default();
            let summary = p.status?.summary?;
            Some(PoolSummaryView {
                counts: counts_of(&summary),
                confirmed_at: summary.confirmed_at.map(|t| t.0),
                resource_version: rv,
            })
        }))
    }

    async fn pool_changed(&self, pool: &str, resource_version: &str, timeout: Duration) -> Result<bool> {
        let api: Api<NetworkEndpointPool> = Api::all(self.client.clone());
        let secs = u32::try_from(timeout.as_secs().max(1)).unwrap_or(u32::MAX);
        let wp = WatchParams::default().fields(&format!("metadata.name={pool}")).timeout(secs);
        let watch = async {
            let mut stream = api
                .watch_metadata(&wp, resource_version)
                .await
                .map_err(|e| Error::from_kube(format!("watch NetworkEndpointPool {pool}"), e))?
                .boxed();
            loop {
                match stream.next().await {
                    Some(Ok(WatchEvent::Bookmark(_))) => {}
                    Some(Ok(WatchEvent::Error(_))) | None => return Ok(false),
                    Some(Ok(_)) => return Ok(true),
                    Some(Err(e)) => return Err(Error::from_kube(format!("watch NetworkEndpointPool {pool}"), e)),
                }
            }
        };
        tokio::time::timeout(timeout, watch).await.unwrap_or(Ok(false))
    }
}

impl Cluster for KubeStore {
    async fn node_exists(&self, name: &str) -> Result<bool> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        nodes
            .get_metadata_opt(name)
            .await
            .map(|n| n.is_some())
            .map_err(|e| Error::from_kube(format!("get node {name}"), e))
    }

    async fn pod_facts(&self, namespace: &str, name: &str) -> Result<Option<PodFacts>> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let meta = pods
            .get_metadata_opt(name)
            .await
            .map_err(|e| Error::from_kube(format!("get pod {namespace}/{name}"), e))?;
        Ok(meta.map(|m| PodFacts {
            uid: m.metadata.uid.unwrap_or_default(),
            annotations: m.metadata.annotations.unwrap_or_default(),
        }))
    }

    async fn claim(&self, namespace: &str, name: &str) -> Result<Option<IPAMClaim>> {
        let api: Api<IPAMClaim> = Api::namespaced(self.client.clone(), namespace);
        match api.get_opt(name).await {
            Ok(c) => Ok(c),
            // The IPAMClaim CRD is not installed: no claim can exist.
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(Error::from_kube(format!("get IPAMClaim {namespace}/{name}"), e)),
        }
    }

    async fn statefulset_replicas(&self, namespace: &str, name: &str) -> Result<Option<i64>> {
        let api: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(self.client.clone(), namespace);
        match api.get_opt(name).await {
            Ok(s) => Ok(s.map(|s| i64::from(s.spec.and_then(|sp| sp.replicas).unwrap_or(1)))),
            // An install whose RBAC predates this read: no StatefulSet is known.
            Err(kube::Error::Api(s)) if s.code == 403 => Ok(None),
            Err(e) => Err(Error::from_kube(format!("get StatefulSet {namespace}/{name}"), e)),
        }
    }

    async fn crd_installed(&self) -> Result<bool> {
        let path = format!("/apis/{GROUP}/v1alpha1");
        let req = http::Request::get(&path)
            .body(Vec::new())
            .map_err(|e| Error::Decode { what: "discovery request", reason: e.to_string() })?;
        match self.client.request::<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList>(req).await {
            Ok(list) => Ok(list.resources.iter().any(|r| r.name == "networkendpoints")),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(Error::from_kube(format!("discover {path}"), e)),
        }
    }

    async fn probe(&self, pool: &str) -> Result<()> {
        let api: Api<NetworkEndpointPool> = Api::all(self.client.clone());
        match api.get_metadata(pool).await {
            Ok(_) => Ok(()),
            // The object's own 404 names it; the resource's 404 (CRD not installed) names nothing.
            Err(kube::Error::Api(s)) if s.code == 404 && s.details.as_ref().is_some_and(|d| d.name == pool) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Err(Error::CrdMissing),
            Err(e) => Err(Error::from_kube(format!("get NetworkEndpointPool {pool}"), e)),
        }
    }
}

impl Signals for KubeStore {
    async fn record_event(&self, regarding: ObjectReference, reason: &str, note: String, warning: bool) {
        let me = Reporter::component(REPORTER_PLUGIN);
        let event = event_object(&me, regarding, reason, note, warning, Timestamp::now());
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        if let Err(e) = events.create(&PostParams::default(), &event).await {
            warn!(reason, error = %e, "cannot record event");
        }
    }
}

impl Queue for KubeStore {
    async fn join(&self, entry: &NetworkEndpointNeed) -> Result<Option<NetworkEndpointNeed>> {
        match self.needs().create(&PostParams::default(), entry).await {
            Ok(created) => Ok(Some(created)),
            Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(None),
            Err(e) => Err(Error::from_kube(
                format!("create NetworkEndpointNeed {}", entry.metadata.name.as_deref().unwrap_or("")),
                e,
            )),
        }
    }

    async fn entry(&self, name: &str) -> Result<Option<NetworkEndpointNeed>> {
        self.needs().get_opt(name).await.map_err(|e| Error::from_kube(format!("get NetworkEndpointNeed {name}"), e))
    }

    async fn next_entry_change(
        &self,
        name: &str,
        resource_version: &str,
        timeout: Duration,
    ) -> Result<Change<NetworkEndpointNeed>> {
        watch_one(&self.needs(), name, resource_version, timeout).await
    }

    async fn leave(&self, name: &str, uid: &str) -> Result<()> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: Some(uid.to_string()), resource_version: None }),
            ..DeleteParams::default()
        };
        match self.needs().delete(name, &dp).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => Ok(()),
            Err(e) => Err(Error::from_kube(format!("delete NetworkEndpointNeed {name}"), e)),
        }
    }
}
