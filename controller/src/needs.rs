//! The needs of waiting ADDs (`NetworkEndpointNeed`), believed only after a
//! check of the Pod they name: the only signal that makes the controller
//! force a release or end a hold, and one only a node's plugin can raise,
//! for its own node (the admission policies see to that).
//!
//! A need is believed when its Pod exists with the UID the need names, is
//! bound to the need's node, is not being deleted and has not started
//! (phase `Pending`): a node cannot ask on behalf of a Pod that is not
//! waiting for its sandbox there. Each version of a need is checked once
//! (one Pod GET), and a need is served at most once per
//! [`MIN_INTERVAL`], however often its node rewrites it.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, DeleteParams};
use netendpoint_crd::{NetworkEndpointNeed, PodRef};
use tracing::{debug, info, warn};

use crate::decide::{Need, Waiter};

/// The least time between two needs of one node and pool that the controller believes.
pub const MIN_INTERVAL: Duration = Duration::from_secs(5);
/// How long past its wait a need object is left before the controller deletes it.
pub const STALE_AFTER: Duration = Duration::from_secs(120);

/// What was checked, per need object.
#[derive(Default)]
pub struct Checked {
    /// name → (resourceVersion, the need if believed, when it was checked).
    seen: HashMap<String, (String, Option<Need>, Timestamp)>,
    /// Queue entries, by UID: their check, done once (their spec never changes).
    entries: HashMap<String, Result<(), String>>,
}

impl Checked {
    /// The believed needs among `objects`, checking the new ones (one Pod
    /// GET each), and deleting those long past their wait.
    pub async fn check(
        &mut self,
        client: &Client,
        objects: &[std::sync::Arc<NetworkEndpointNeed>],
        now: Timestamp,
    ) -> Vec<Need> {
        // Queue entries are checked by `check_entries`; these are older plugins' needs.
        let objects: Vec<_> = objects.iter().filter(|o| o.spec.slot.is_none()).cloned().collect();
        let objects = objects.as_slice();
        let names: std::collections::HashSet<String> = objects.iter().filter_map(|o| o.metadata.name.clone()).collect();
        self.seen.retain(|n, _| names.contains(n));
        let mut out = Vec::new();
        for o in objects {
            let (Some(name), Some(rv)) = (o.metadata.name.clone(), o.metadata.resource_version.clone()) else {
                continue;
            };
            let fresh = self.seen.get(&name).is_none_or(|(seen_rv, _, at)| {
                *seen_rv != rv && now.duration_since(*at) >= SignedDuration::try_from(MIN_INTERVAL).unwrap_or_default()
            });
            if fresh {
                let need = believe(client, o, &name, &rv, now).await;
                self.seen.insert(name.clone(), (rv, need, now));
            }
            let Some((_, need, at)) = self.seen.get(&name) else { continue };
            match need {
                Some(n) => out.push(n.clone()),
                None => debug!(need = %name, "not believed"),
            }
            let wait = SignedDuration::from_secs(i64::from(o.spec.wait_seconds));
            let stale =
                at.checked_add(wait).ok().and_then(|t| t.checked_add(SignedDuration::try_from(STALE_AFTER).ok()?).ok());
            if stale.is_some_and(|t| now > t) {
                let api: Api<NetworkEndpointNeed> = Api::all(client.clone());
                if api.delete(&name, &DeleteParams::default()).await.is_ok() {
                    debug!(need = %name, "deleted a need long past its wait");
                }
            }
        }
        out
    }
}

impl Checked {
    /// The check of every queue entry among `waiters`, by UID: the new ones
    /// are checked now (one Pod GET each, all at once), the others as they
    /// were. A Pod that cannot be read leaves its entry unchecked (neither
    /// served nor dropped) until the next pass.
    pub async fn check_entries(&mut self, client: &Client, waiters: &[Waiter]) -> HashMap<String, Result<(), String>> {
        self.entries.retain(|uid, _| waiters.iter().any(|w| &w.uid == uid));
        let new: Vec<&Waiter> = waiters.iter().filter(|w| !self.entries.contains_key(&w.uid)).collect();
        let checks = new.iter().map(|w| async move { (w.uid.clone(), pod_waits(client, &w.pod, &w.node).await) });
        for (uid, res) in futures::future::join_all(checks).await {
            match res {
                Ok(r) => {
                    if let Err(why) = &r {
                        warn!(entry_uid = %uid, %why, "queue entry not believed");
                    }
                    self.entries.insert(uid, r);
                }
                Err(e) => {
                    warn!(entry_uid = %uid, error = %e, "cannot read the queue entry's Pod; checked again next pass")
                }
            }
        }
        self.entries.clone()
    }
}

/// Whether Pod `pod` waits for its sandbox on `node`: it exists with that
/// UID, is bound to `node`, is not being deleted, and has not started
/// (phase `Pending`). `Err` when the Pod cannot be read.
async fn pod_waits(client: &Client, pod: &PodRef, node: &str) -> kube::Result<Result<(), String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let found = pods.get_opt(&pod.name).await?;
    Ok(match &found {
        None => Err("its Pod does not exist".to_string()),
        Some(p) if p.metadata.uid.as_deref() != Some(pod.uid.as_str()) || pod.uid.is_empty() => {
            Err("its Pod is another one (UID)".into())
        }
        Some(p) if p.metadata.deletion_timestamp.is_some() => Err("its Pod is being deleted".into()),
        Some(p) if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node) => {
            Err(format!("its Pod is not bound to node {node}"))
        }
        Some(p) if p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Pending") => {
            Err("its Pod is not waiting for its sandbox (phase is not Pending)".into())
        }
        Some(_) => Ok(()),
    })
}

/// The need `o` if its Pod is waiting for its sandbox on the need's node.
async fn believe(client: &Client, o: &NetworkEndpointNeed, name: &str, rv: &str, now: Timestamp) -> Option<Need> {
    let pod = &o.spec.pod;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let found = match pods.get_opt(&pod.name).await {
        Ok(p) => p,
        Err(e) => {
            warn!(need = %name, error = %e, "cannot read the need's Pod; not believed for now");
            return None;
        }
    };
    let why_not = match &found {
        None => Some("its Pod does not exist".to_string()),
        Some(p) if p.metadata.uid.as_deref() != Some(pod.uid.as_str()) || pod.uid.is_empty() => {
            Some("its Pod is another one (UID)".into())
        }
        Some(p) if p.metadata.deletion_timestamp.is_some() => Some("its Pod is being deleted".into()),
        Some(p) if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(o.spec.node.as_str()) => {
            Some(format!("its Pod is not bound to node {}", o.spec.node))
        }
        Some(p) if p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Pending") => {
            Some("its Pod is not waiting for its sandbox (phase is not Pending)".into())
        }
        Some(_) => None,
    };
    if let Some(why) = why_not {
        warn!(need = %name, pod = %format!("{}/{}", pod.namespace, pod.name), %why, "need not believed");
        return None;
    }
    info!(need = %name, pool = %o.spec.pool, node = %o.spec.node, pod = %format!("{}/{}", pod.namespace, pod.name), "an ADD waits for an IP");
    let until = now.checked_add(SignedDuration::from_secs(i64::from(o.spec.wait_seconds))).ok()?;
    Some(Need { key: format!("{name}@{rv}"), pool: o.spec.pool.clone(), until })
}
