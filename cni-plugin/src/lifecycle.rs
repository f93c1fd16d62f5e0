//! STATUS and GC (CNI 1.1.0).
//!
//! Both are called by the runtime on its own schedule, not for one pod, so
//! both are built to do no harm: STATUS fails only when no ADD on this node
//! can succeed (containerd turns a STATUS failure into NetworkReady=false and
//! kubelet marks the whole node NotReady), and GC releases a lease only on
//! evidence seen twice, after a grace period, inside its own network.

use std::collections::HashSet;
use std::time::Duration;

use netendpoint_netconf::IpamConfig;
use tracing::{debug, info, warn};

use crate::error::{Error, Result};
use crate::local::{LocalState, StatusState};
use crate::protocol::AttachmentKey;
use crate::store::{Clock, Cluster, Leases};
use netendpoint_lease::Sightings;

/// How long a successful STATUS is reused without asking the API server
/// again. containerd asks every 5 s on every node.
pub const STATUS_CACHE: Duration = Duration::from_secs(10);

/// How long the API server may be unreachable before STATUS reports the
/// node not ready. One blip, or an API server rollout, must not flap every
/// node's Ready condition.
pub const STATUS_UNREACHABLE_WINDOW: Duration = Duration::from_secs(60);

/// CNI STATUS: `Ok` unless no ADD on this node can succeed.
///
/// Makes at most one small request (a GET of the pool's summary object by
/// name, which a 404 naming it also answers), and none while a success
/// younger than [`STATUS_CACHE`] is remembered. Never lists the pool: a full pool is not a reason to refuse
/// new pods, since ADD itself waits for a release or reports exhaustion.
/// Fails (code 50) when the credentials are refused, the CRD is missing, or
/// the API server has been unreachable for longer than
/// [`STATUS_UNREACHABLE_WINDOW`]. `now` is this node's Unix time in seconds:
/// reachability is this node's own observation, with no server to ask.
pub async fn status<S: Cluster>(store: &S, conf: &IpamConfig, local: &LocalState, now: i64) -> Result<()> {
    let key = conf.kubeconfig.as_path();
    let state = local.status_state(key);
    if state.failing_since.is_none()
        && state
            .last_ok
            .is_some_and(|t| (0..netendpoint_lease::clock::secs_ceil(STATUS_CACHE)).contains(&now.saturating_sub(t)))
    {
        debug!("STATUS: recent success reused");
        return Ok(());
    }
    // A probe that hangs counts as unreachable, inside the invocation's deadline.
    let probed = match tokio::time::timeout(STATUS_PROBE_TIMEOUT, store.probe(&conf.pool)).await {
        Ok(r) => r,
        Err(_) => Err(Error::DeadlineExceeded { command: "STATUS", after: STATUS_PROBE_TIMEOUT }),
    };
    match probed {
        Ok(()) => {
            local.save_status_state(key, StatusState { last_ok: Some(now), failing_since: None });
            Ok(())
        }
        Err(e) if is_transient(&e) => {
            let since = state.failing_since.unwrap_or(now);
            local.save_status_state(key, StatusState { last_ok: state.last_ok, failing_since: Some(since) });
            if now.saturating_sub(since) >= netendpoint_lease::clock::secs_ceil(STATUS_UNREACHABLE_WINDOW) {
                Err(Error::NotReady(Box::new(e)))
            } else {
                warn!(error = %e, unreachable_for_s = now.saturating_sub(since), "STATUS: API server unreachable; still ready within the window");
                Ok(())
            }
        }
        Err(e) => {
            local.save_status_state(key, StatusState { last_ok: state.last_ok, failing_since: None });
            Err(Error::NotReady(Box::new(e)))
        }
    }
}

/// How long STATUS waits for its one request.
pub const STATUS_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

fn is_transient(e: &Error) -> bool {
    e.is_transient()
}

/// The sightings GC keeps for `network`: one record per network, so that
/// networks sharing a pool never erase each other's evidence.
fn sightings_gc(network: &str) -> String {
    format!("gc.{}", netendpoint_crd::label_value(network))
}

/// CNI GC: requests deletion of this node's leases of this network and pool
/// whose attachment is not in `valid`.
///
/// - `valid` is `cni.dev/valid-attachments`. When the runtime sent none
///   (absent or `null`), GC releases nothing: "no list" is not "nothing is
///   valid". An empty array does mean that nothing is valid.
/// - The leases are found from this node's records of its attachments and
///   read by name: GC lists nothing. A lease whose record was lost is left
///   to DEL and to the controller's cleanup of leases whose Pod is gone.
/// - Only leases of this node (`spec.node`; a record directory shared by
///   two node names must not let one release the other's) and whose
///   `spec.network` is this network are considered; leases without a
///   network (older versions) are left to DEL.
/// - A lease is released only when an earlier GC on this node also found it
///   stale (same UID), and it is at least `gcGrace` old by the API server's
///   clock, so that an ADD that finished after the runtime took its list is
///   never undone.
/// - Finalizers still gate the release, exactly as after DEL. Every failure
///   is reported, after all deletions were tried.
pub async fn gc<S: Clock + Leases>(
    store: &S,
    conf: &IpamConfig,
    node: &str,
    valid: Option<&[AttachmentKey]>,
    local: &LocalState,
) -> Result<()> {
    let Some(valid) = valid else {
        warn!("GC without cni.dev/valid-attachments: releasing nothing");
        return Ok(());
    };
    let keep: HashSet<(&str, &str)> = valid.iter().map(|a| (a.container_id.as_str(), a.if_name.as_str())).collect();
    // Tombstones of containers the runtime no longer lists are no use.
    local.prune_tombstones(|cid| keep.iter().any(|(c, _)| *c == cid));
    let kind = sightings_gc(&conf.network);
    let mut sightings = Sightings::from_map(local.sightings(&kind));
    let mut errors = Vec::new();
    for crate::local::AttachmentRecord { container_id, if_name, leases } in local.records() {
        if keep.contains(&(container_id.as_str(), if_name.as_str())) {
            continue;
        }
        let mut left = 0;
        for (name, uid) in &leases {
            let ep = match store.get(name).await {
                Ok(Some(ep)) if ep.metadata.uid.as_deref() == Some(uid.as_str()) => ep,
                // An incarnation answered early, recorded without a UID.
                Ok(Some(ep)) if uid.is_empty() && ep.spec.container_id == container_id => ep,
                Ok(None) if uid.is_empty() => {
                    // Not created yet: the record stays for the DEL, which withdraws the request.
                    left += 1;
                    continue;
                }
                Ok(_) => continue,
                Err(e) => {
                    left += 1;
                    errors.push(e);
                    continue;
                }
            };
            left += 1;
            // The lease's own UID (a record of an early incarnation has none).
            let uid = &ep.metadata.uid.clone().unwrap_or_default();
            let ours = ep.spec.pool == conf.pool
                && ep.spec.node == node
                && ep.spec.network.as_deref() == Some(conf.network.as_str())
                && !ep.is_releasing();
            let Some(now) = store.server_now() else { continue };
            if !ours {
                continue;
            }
            let seen = sightings.see(uid.clone(), now.as_second());
            let old_enough = ep
                .metadata
                .creation_timestamp
                .as_ref()
                .is_some_and(|t| netendpoint_lease::clock::age_of(now, t) >= conf.gc_grace);
            if !seen.repeated {
                debug!(lease = %name, container_id = %container_id, "GC: stale lease seen; released if still stale next time");
                continue;
            }
            if !old_enough {
                continue;
            }
            match store.delete(name, uid).await {
                Ok(()) => {
                    info!(lease = %name, container_id = %container_id, "GC: release requested for a stale lease");
                    sightings.forget(uid);
                    left -= 1;
                }
                Err(e) => errors.push(e),
            }
        }
        if left == 0 {
            local.forget(&container_id, &if_name);
        }
    }
    local.save_sightings(&kind, sightings.end_pass());
    Error::collect(errors)
}

#[cfg(test)]
mod tests {
    //! STATUS and GC decisions over the in-memory store on tokio's paused clock.
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::claim::Attachment;
    use crate::commands;
    use crate::store::mem::{Fault, MemStore};
    use serde_json::json;

    const T0: &str = "2026-01-01T00:00:00Z";

    fn conf(network: &str, extra: serde_json::Value) -> IpamConfig {
        let mut ipam = json!({"ranges": [[{"subnet": "10.0.0.0/29"}]], "pool": "shared", "waitForRelease": "1s", "gcGrace": "60s"});
        for (k, v) in extra.as_object().unwrap() {
            ipam[k] = v.clone();
        }
        IpamConfig::parse(&ipam, network).unwrap()
    }

    fn who(cid: &str, ifname: &str) -> Attachment {
        Attachment {
            key: AttachmentKey { container_id: cid.into(), if_name: ifname.into() },
            node: "n1".into(),
            pod: None,
        }
    }

    fn valid(list: &[(&str, &str)]) -> Vec<AttachmentKey> {
        list.iter().map(|(c, i)| AttachmentKey { container_id: c.to_string(), if_name: i.to_string() }).collect()
    }

    fn scratch(name: &str) -> (LocalState, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("netendpoint-life-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        (LocalState::new(&dir, "shared"), dir)
    }

    fn live(store: &MemStore) -> Vec<(String, String)> {
        store
            .objects()
            .into_iter()
            .filter(|e| !e.is_releasing())
            .map(|e| (e.spec.container_id, e.spec.if_name))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn gc_of_one_network_never_touches_another_network_in_the_same_pool() {
        let store = MemStore::new(T0, &["n1"]);
        let (local, dir) = scratch("networks");
        let (x, y) = (conf("net-x", json!({})), conf("net-y", json!({})));
        commands::add(&store, &x, &who("c", "eth0"), &local).await.unwrap();
        commands::add(&store, &y, &who("c", "net1"), &local).await.unwrap();
        commands::add(&store, &y, &who("dead", "net1"), &local).await.unwrap();
        tokio::time::advance(Duration::from_secs(120)).await;
        for _ in 0..3 {
            gc(&store, &y, "n1", Some(&valid(&[("c", "net1")])), &local).await.unwrap();
        }
        let mut left = live(&store);
        left.sort();
        assert_eq!(left, [("c".to_string(), "eth0".to_string()), ("c".to_string(), "net1".to_string())]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test(start_paused = true)]
    async fn gc_releases_only_on_two_sightings_of_an_old_enough_lease_and_lists_nothing() {
        let store = MemStore::new(T0, &["n1"]);
        let (local, dir) = scratch("sightings");
        let c = conf("net", json!({}));
        commands::add(&store, &c, &who("dead", "eth0"), &local).await.unwrap();
        // The runtime took its list before this ADD finished: GC must not undo it.
        gc(&store, &c, "n1", Some(&valid(&[])), &local).await.unwrap();
        gc(&store, &c, "n1", Some(&valid(&[])), &local).await.unwrap();
        assert_eq!(live(&store).len(), 1, "younger than gcGrace");
        tokio::time::advance(Duration::from_secs(61)).await;
        gc(&store, &c, "n1", Some(&valid(&[])), &local).await.unwrap();
        assert!(live(&store).is_empty(), "old enough, and seen stale before");
        // A fresh stale lease, old enough, still needs a second sighting.
        commands::add(&store, &c, &who("dead2", "eth0"), &local).await.unwrap();
        tokio::time::advance(Duration::from_secs(61)).await;
        gc(&store, &c, "n1", Some(&valid(&[])), &local).await.unwrap();
        assert_eq!(live(&store).len(), 1, "first sighting");
        gc(&store, &c, "n1", Some(&valid(&[])), &local).await.unwrap();
        assert!(live(&store).is_empty());
        assert_eq!((store.calls("list_container"), store.calls("list")), (0, 0), "GC reads by name only");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Two node names sharing one record directory (a renamed node, or a
    /// test): GC of one never releases the other's lease.
    #[tokio::test(start_paused = true)]
    async fn gc_releases_only_leases_of_its_own_node() {
        let store = MemStore::new(T0, &["n1", "n2"]);
        let (local, dir) = scratch("nodes");
        let c = conf("net", json!({}));
        let mut elsewhere = who("elsewhere", "eth0");
        elsewhere.node = "n2".into();
        commands::add(&store, &c, &elsewhere, &local).await.unwrap();
        commands::add(&store, &c, &who("dead", "eth0"), &local).await.unwrap();
        tokio::time::advance(Duration::from_secs(120)).await;
        for _ in 0..3 {
            gc(&store, &c, "n1", Some(&valid(&[])), &local).await.unwrap();
        }
        assert_eq!(live(&store), [("elsewhere".to_string(), "eth0".to_string())]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test(start_paused = true)]
    async fn gc_without_a_list_releases_nothing() {
        let store = MemStore::new(T0, &["n1"]);
        let (local, dir) = scratch("null");
        let c = conf("net", json!({}));
        commands::add(&store, &c, &who("c", "eth0"), &local).await.unwrap();
        tokio::time::advance(Duration::from_secs(120)).await;
        let before = store.total_calls();
        for _ in 0..3 {
            gc(&store, &c, "n1", None, &local).await.unwrap();
        }
        assert_eq!(live(&store).len(), 1);
        assert_eq!(store.total_calls(), before, "no call at all");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test(start_paused = true)]
    async fn gc_honours_finalizers() {
        let store = MemStore::new(T0, &["n1"]);
        let (local, dir) = scratch("fin");
        let c = conf("net", json!({"finalizers": ["a.example/x"]}));
        commands::add(&store, &c, &who("dead", "eth0"), &local).await.unwrap();
        tokio::time::advance(Duration::from_secs(120)).await;
        gc(&store, &c, "n1", Some(&valid(&[])), &local).await.unwrap();
        gc(&store, &c, "n1", Some(&valid(&[])), &local).await.unwrap();
        let ep = store.objects().remove(0);
        assert!(ep.is_releasing(), "release requested");
        store.ack(ep.metadata.name.as_deref().unwrap(), "a.example/x");
        assert!(store.objects().is_empty(), "gone once the agent acknowledged");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// STATUS: (fault, seconds since the fault began, expected code).
    #[tokio::test(start_paused = true)]
    async fn status_fails_only_when_no_add_can_succeed() {
        let cases = [
            (None, 0, None),
            (Some(Fault::Denied), 0, Some(50)),
            (Some(Fault::CrdMissing), 0, Some(50)),
            (Some(Fault::Unreachable), 0, None),
            (Some(Fault::Unreachable), 59, None),
            (Some(Fault::Unreachable), 60, Some(50)),
            (Some(Fault::Overloaded), 30, None),
            (Some(Fault::Overloaded), 60, Some(50)),
            (Some(Fault::Hang), 30, None),
            (Some(Fault::Hang), 60, Some(50)),
        ];
        for (fault, after, want) in cases {
            let store = MemStore::new(T0, &["n1"]);
            let (local, dir) = scratch("status");
            if let Some(f) = fault {
                store.fail("probe", f, 2);
            }
            let c = conf("net", json!({}));
            let _ = status(&store, &c, &local, 1000).await;
            let got = status(&store, &c, &local, 1000 + after).await.err().map(|e| e.code());
            assert_eq!(got, want, "{fault:?} for {after}s");
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn status_of_a_full_pool_is_ready_and_cheap() {
        let store = MemStore::new(T0, &["n1"]);
        let (local, dir) = scratch("cheap");
        let c = conf("net", json!({"ranges": [[{"subnet": "10.0.0.0/30"}]]}));
        commands::add(&store, &c, &who("c", "eth0"), &local).await.unwrap();
        let before = store.total_calls();
        for t in 0..6 {
            status(&store, &c, &local, 1000 + t * 5).await.unwrap();
        }
        // Every 5 s for 30 s: a success is reused for 10 s, so one probe (a GET by name) per 10 s.
        assert_eq!(store.total_calls() - before, 3);
        assert_eq!(store.calls("probe"), 3);
        let _ = std::fs::remove_dir_all(dir);
    }
}
