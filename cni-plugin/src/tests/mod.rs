//! Decisions of ADD, DEL and CHECK, as tables over the in-memory store on
//! tokio's paused clock: no test here contacts a cluster.

#![allow(clippy::unwrap_used)]

mod add_del;
mod dynamic;
mod sticky;

use std::sync::Arc;
use std::time::Duration;

use netendpoint_netconf::IpamConfig;
use serde_json::json;

use crate::claim::{Attachment, lease_object};
use crate::local::LocalState;
use crate::protocol::{AttachmentKey, IpamResult, PodIdentity};
use crate::store::mem::MemStore;

pub(crate) const T0: &str = "2026-01-01T00:00:00Z";
pub(crate) const FIN: &str = "test.example/agent";

/// Pool `p`, network `net`, one range set `subnet`, `extra` over it.
pub(crate) fn conf(subnet: &str, extra: serde_json::Value) -> IpamConfig {
    let mut ipam = json!({"ranges": [[{"subnet": subnet}]], "pool": "p", "waitForRelease": "10s"});
    for (k, v) in extra.as_object().unwrap() {
        ipam[k] = v.clone();
    }
    IpamConfig::parse(&ipam, "net").unwrap()
}

/// Sandbox `cid` of Pod `default/pod-<cid>` (UID `uid-<cid>`) on node n1.
pub(crate) fn who(cid: &str) -> Attachment {
    Attachment {
        key: AttachmentKey { container_id: cid.into(), if_name: "eth0".into() },
        node: "n1".into(),
        pod: Some(PodIdentity { namespace: "default".into(), name: format!("pod-{cid}"), uid: format!("uid-{cid}") }),
    }
}

/// A node-local state in a fresh directory, removed on drop.
pub(crate) struct Scratch {
    pub(crate) local: LocalState,
    dir: std::path::PathBuf,
}

impl Scratch {
    pub(crate) fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("netendpoint-decide-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Self { local: LocalState::new(&dir, "p"), dir }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Leases every free usable address of `c`'s first range set to container
/// `held-<i>` on `node`; their names.
pub(crate) fn fill(store: &MemStore, c: &IpamConfig, node: &str, finalizers: &[&str]) -> Vec<String> {
    let set = &c.range_sets[0];
    set.candidates(None)
        .enumerate()
        .filter(|(_, ip)| store.object(&netendpoint_crd::endpoint_name(&c.pool, *ip)).is_none())
        .map(|(i, ip)| {
            let mut w = who(&format!("held-{i}"));
            w.node = node.into();
            let mut ep = lease_object(c, &w, set, ip);
            ep.metadata.finalizers =
                (!finalizers.is_empty()).then(|| finalizers.iter().map(|f| f.to_string()).collect());
            let name = ep.metadata.name.clone().unwrap();
            store.insert(ep);
            name
        })
        .collect()
}

/// An agent that removes its finalizer `FIN` from lease `name` after `delay`.
pub(crate) fn ack_after(store: &Arc<MemStore>, name: &str, delay: Duration) -> tokio::task::JoinHandle<()> {
    let (agent, name) = (store.clone(), name.to_string());
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        agent.ack(&name, FIN);
    })
}

pub(crate) fn ip_of(r: &IpamResult) -> String {
    r.ips[0].address.addr().to_string()
}
