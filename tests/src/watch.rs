//! A client's view of a pool: every watch event of its leases, in the
//! order the API server sent them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{ListParams, WatchEvent, WatchParams};
use netendpoint_crd::{LABEL_POOL, NetworkEndpoint, label_value};

use crate::leases::endpoints;

/// One watch event of a lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    /// The lease's name.
    pub name: String,
    /// The lease's UID.
    pub uid: String,
    /// The name of the lease's Pod, empty if none.
    pub pod: String,
    /// The lease's address.
    pub ip: String,
    /// The sandbox (container ID) it is the endpoint of.
    pub container: String,
    /// True for a sticky hold (no endpoint: agents skip it).
    pub hold: bool,
}

/// A watch of one pool's leases, recording what it sees until stopped or
/// dropped.
pub struct PoolWatch {
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl PoolWatch {
    /// Lists the leases of `pool` once, then watches from that list's
    /// resourceVersion: every event after the list is recorded, none is
    /// missed. The list is done when this returns.
    pub async fn start(pool: &str) -> Self {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let api = endpoints().await;
        let selector = format!("{LABEL_POOL}={}", label_value(pool));
        let mut rv =
            api.list(&ListParams::default().labels(&selector)).await.unwrap().metadata.resource_version.unwrap();
        let (out, stopped) = (seen.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while !stopped.load(Ordering::Relaxed) {
                let wp = WatchParams::default().labels(&selector).timeout(2);
                let mut s = api.watch(&wp, &rv).await.unwrap().boxed();
                while let Some(ev) = s.next().await {
                    let (kind, ep): (&'static str, NetworkEndpoint) = match ev.unwrap() {
                        WatchEvent::Added(ep) => ("ADDED", ep),
                        WatchEvent::Modified(ep) => ("MODIFIED", ep),
                        WatchEvent::Deleted(ep) => ("DELETED", ep),
                        WatchEvent::Bookmark(b) => {
                            rv = b.metadata.resource_version;
                            continue;
                        }
                        WatchEvent::Error(e) => panic!("watch error {e:?}"),
                    };
                    rv = ep.metadata.resource_version.clone().unwrap();
                    let hold = ep.is_hold();
                    let pod = ep.spec.pod.as_ref().map(|p| p.name.clone()).unwrap_or_default();
                    let (name, uid) = (ep.metadata.name.unwrap(), ep.metadata.uid.unwrap());
                    let container = ep.spec.container_id;
                    out.lock().unwrap().push(Seen { kind, name, uid, pod, ip: ep.spec.ip, container, hold });
                }
            }
        });
        Self { seen, stop, task: Some(task) }
    }

    /// Every event seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Stops watching once the current watch request ends (within 2 s),
    /// and returns every event seen; panics if the watch failed.
    pub async fn stop(mut self) -> Vec<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
        self.seen()
    }
}

impl Drop for PoolWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
