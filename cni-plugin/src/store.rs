//! The lease store: every Kubernetes call the plugin makes lives here.
//!
//! [`Store`] is what the commands need: find the leases of a sandbox, claim an
//! address atomically, list and watch a pool, and release. [`KubeStore`]
//! implements it with NetworkEndpoint objects; the claim is a plain create of
//! the object named after (pool, IP), so the API server's 409 AlreadyExists is
//! the only lock there is.

use std::net::IpAddr;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions, WatchEvent, WatchParams};
use netendpoint_crd::{FIELD_CONTAINER_ID, FIELD_NODE, LABEL_POOL, NetworkEndpoint};

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
    /// The leased address (parsed back from the object name).
    pub ip: IpAddr,
    /// Set once DEL requested the release; the lease waits on `finalizers`.
    pub releasing_since: Option<Time>,
    /// Finalizers still on the object.
    pub finalizers: Vec<String>,
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
    /// Nothing was released within the timeout.
    TimedOut,
    /// The watch ended early (e.g. the resource version expired): list again.
    Restart,
}

/// The lease operations the commands need. Implemented for Kubernetes by
/// [`KubeStore`], and in memory by the unit tests.
#[allow(async_fn_in_trait)]
pub trait Store {
    /// Leases whose `spec.containerID` is `container_id`.
    async fn find_by_container(&self, container_id: &str) -> Result<Vec<NetworkEndpoint>>;
    /// Leases on node `node`.
    async fn find_by_node(&self, node: &str) -> Result<Vec<NetworkEndpoint>>;
    /// Atomically claims `ep.metadata.name`.
    async fn create(&self, ep: &NetworkEndpoint) -> Result<Claim>;
    /// Every lease of `pool` (metadata only).
    async fn list_pool(&self, pool: &str) -> Result<PoolView>;
    /// Waits until a lease of `pool` disappears after `resource_version`, at most `timeout`.
    async fn wait_for_release(&self, pool: &str, resource_version: &str, timeout: Duration) -> Result<Release>;
    /// Requests deletion of exactly this object (UID precondition). Already gone is success.
    async fn delete(&self, ep: &NetworkEndpoint) -> Result<()>;
}

/// [`Store`] over the Kubernetes API.
#[derive(Clone)]
pub struct KubeStore {
    api: Api<NetworkEndpoint>,
}

impl KubeStore {
    /// A store using `client`.
    pub fn new(client: Client) -> Self {
        Self { api: Api::all(client) }
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
    async fn find_by_container(&self, container_id: &str) -> Result<Vec<NetworkEndpoint>> {
        self.list_by_field(FIELD_CONTAINER_ID, container_id, "container").await
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
        let lp = ListParams::default().labels(&format!("{LABEL_POOL}={}", netendpoint_crd::label_value(pool)));
        let list = self.api.list_metadata(&lp).await.map_err(|e| Error::from_kube(format!("list pool {pool}"), e))?;
        let entries = list
            .items
            .into_iter()
            .filter_map(|m| {
                let ip = netendpoint_crd::parse_endpoint_name(pool, m.metadata.name.as_deref()?)?;
                Some(PoolEntry {
                    ip,
                    releasing_since: m.metadata.deletion_timestamp,
                    finalizers: m.metadata.finalizers.unwrap_or_default(),
                })
            })
            .collect();
        Ok(PoolView { entries, resource_version: list.metadata.resource_version.unwrap_or_default() })
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
                            return Ok(Release::Freed(ip));
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
        let name = ep.metadata.name.as_deref().unwrap_or_default();
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: ep.metadata.uid.clone(), resource_version: None }),
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
