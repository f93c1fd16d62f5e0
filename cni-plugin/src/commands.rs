//! ADD, DEL and CHECK over any [`Store`].
//!
//! The common ADD path costs one API call: the create at the next round-robin
//! candidate. A repeated ADD is recognised from the node's record of the
//! attachment ([`LocalState`]) and confirmed with a GET by name. Only when
//! several candidates in a row are taken does ADD list the pool (metadata
//! only) to pick from what is free, and only when nothing is free does it
//! watch for a release.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ipnet::IpNet;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;
use netendpoint_crd::{
    GROUP, LABEL_IP_FAMILY, LABEL_NODE, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID, LABEL_POOL,
    NetworkEndpoint, NetworkEndpointSpec, PodRef, REASON_FORCED_RELEASE, REASON_POOL_EXHAUSTED, endpoint_name,
    label_value,
};
use tracing::{debug, info, warn};

use crate::allocator::RangeSet;
use crate::config::IpamConfig;
use crate::error::{Error, Exhaustion, Result};
use crate::protocol::{IpConfig, IpamResult, PodIdentity};
use crate::store::{Claim, PoolEntry, PoolView, Release, Store};

/// Candidates tried by create alone before ADD lists the pool.
pub const PROBES_BEFORE_LIST: usize = 6;

/// Who is asking: the attachment and its Pod.
#[derive(Debug, Clone)]
pub struct Attachment {
    /// CNI_CONTAINERID
    pub container_id: String,
    /// CNI_IFNAME
    pub if_name: String,
    /// Node the plugin runs on.
    pub node: String,
    /// The Pod, when the runtime passed K8S_POD_*.
    pub pod: Option<PodIdentity>,
}

/// Node-local state under `dataDir/<pool>/`, like host-local's store:
/// - the round-robin cursor, the last address this node allocated in each
///   range set (`last_reserved_ip.<set>`): a hint, losing it only changes
///   where the next search starts;
/// - a record of the leases of each attachment (`attachments/<id>_<ifname>`),
///   so that ADD learns whether it is a repeat without a cluster-wide query.
///   An attachment's ADDs always run on its own node.
#[derive(Debug, Clone)]
pub struct LocalState {
    dir: Option<PathBuf>,
}

impl LocalState {
    /// A cursor kept under `data_dir/<pool>/`.
    pub fn new(data_dir: &std::path::Path, pool: &str) -> Self {
        Self { dir: Some(data_dir.join(pool)) }
    }

    /// A cursor that remembers nothing (tests).
    pub fn none() -> Self {
        Self { dir: None }
    }

    fn path(&self, set: usize) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("last_reserved_ip.{set}")))
    }

    fn record_path(&self, container_id: &str, if_name: &str) -> Option<PathBuf> {
        let clean = |s: &str| -> String {
            s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '.') { c } else { '_' }).collect()
        };
        self.dir.as_ref().map(|d| d.join("attachments").join(format!("{}_{}", clean(container_id), clean(if_name))))
    }

    /// The (name, UID) of the leases recorded for an attachment by an earlier ADD on this node.
    pub fn recorded(&self, container_id: &str, if_name: &str) -> Vec<(String, String)> {
        self.record_path(container_id, if_name)
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Records the leases of an attachment. Failures are logged, not returned:
    /// without a record a repeated ADD is simply not recognised as one.
    pub fn record(&self, container_id: &str, if_name: &str, leases: &[NetworkEndpoint]) {
        let Some(path) = self.record_path(container_id, if_name) else { return };
        let pairs: Vec<(String, String)> = leases
            .iter()
            .map(|ep| (ep.metadata.name.clone().unwrap_or_default(), ep.metadata.uid.clone().unwrap_or_default()))
            .collect();
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        let res = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&tmp, serde_json::to_vec(&pairs).unwrap_or_default()))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = res {
            debug!(path = %path.display(), error = %e, "cannot record the attachment's leases");
        }
    }

    /// Forgets an attachment (DEL).
    pub fn forget(&self, container_id: &str, if_name: &str) {
        if let Some(p) = self.record_path(container_id, if_name) {
            let _ = std::fs::remove_file(p);
        }
    }

    /// The last address allocated in range set `set`, if known.
    pub fn load(&self, set: usize) -> Option<IpAddr> {
        std::fs::read_to_string(self.path(set)?).ok()?.trim().parse().ok()
    }

    /// Returns the cursor of range set `i` and, under an exclusive file lock,
    /// advances it past the first candidate, so that concurrent ADDs on this
    /// node start at different addresses instead of racing for the same one.
    /// Falls back to a plain read when the file cannot be locked.
    pub fn reserve(&self, i: usize, set: &RangeSet) -> Option<IpAddr> {
        use std::io::{Read, Seek, Write};
        let path = self.path(i)?;
        let locked = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path))
            .and_then(|f| f.lock().map(|()| f));
        let mut file = match locked {
            Ok(f) => f,
            Err(e) => {
                debug!(path = %path.display(), error = %e, "cannot lock round-robin cursor");
                return self.load(i);
            }
        };
        let mut text = String::new();
        let last: Option<IpAddr> = file.read_to_string(&mut text).ok().and_then(|_| text.trim().parse().ok());
        if let Some(next) = set.candidates(last).next() {
            let res =
                file.set_len(0).and_then(|()| file.rewind()).and_then(|()| file.write_all(next.to_string().as_bytes()));
            if let Err(e) = res {
                debug!(path = %path.display(), error = %e, "cannot advance round-robin cursor");
            }
        }
        last
    }

    /// Records `ip` as the last allocation in `set`. Failures are logged, not returned.
    pub fn store(&self, set: usize, ip: IpAddr) {
        let Some(path) = self.path(set) else { return };
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        let res = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&tmp, ip.to_string()))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = res {
            debug!(path = %path.display(), error = %e, "cannot record round-robin cursor");
        }
    }
}

/// CNI ADD: one lease per range set for the attachment, all or nothing.
pub async fn add<S: Store>(store: &S, conf: &IpamConfig, who: &Attachment, cursor: &LocalState) -> Result<IpamResult> {
    // A repeated ADD is recognised from this node's record and checked with a
    // GET by name; a first ADD makes no query at all before its create.
    let mut existing: Vec<NetworkEndpoint> = Vec::new();
    for (name, uid) in cursor.recorded(&who.container_id, &who.if_name) {
        if let Some(ep) = store.get(&name).await?
            && ep.metadata.uid.as_deref() == Some(uid.as_str())
            && ep.spec.container_id == who.container_id
            && ep.spec.if_name == who.if_name
            && !ep.is_releasing()
        {
            existing.push(ep);
        }
    }

    let mut created: Vec<NetworkEndpoint> = Vec::new();
    let mut result = IpamResult { ips: Vec::new(), routes: conf.routes.clone() };
    for (i, set) in conf.range_sets.iter().enumerate() {
        if let Some(ep) = existing.iter().find(|ep| ep.ip().is_some_and(|ip| set.is_usable(ip))) {
            info!(ip = %ep.spec.ip, "ADD repeated: returning the existing lease");
            result.ips.push(ip_config(set, ep)?);
            continue;
        }
        let start = cursor.reserve(i, set);
        match claim_one(store, conf, who, set, start).await {
            Ok(ep) => {
                // The reservation already points at the first candidate; record only a different outcome.
                if let Some(ip) = ep.ip().filter(|ip| Some(*ip) != set.candidates(start).next()) {
                    cursor.store(i, ip);
                }
                result.ips.push(ip_config(set, &ep)?);
                created.push(ep);
            }
            Err(e) => {
                if let (Error::PoolExhausted(_), Some(pod)) = (&e, &who.pod) {
                    store.record_event(pod_ref(pod), REASON_POOL_EXHAUSTED, e.to_string(), true).await;
                }
                return Err(match rollback(store, &created).await {
                    Ok(()) => e,
                    Err(r) => Error::Many(vec![e, r]),
                });
            }
        }
    }
    if !created.is_empty() {
        existing.extend(created);
        cursor.record(&who.container_id, &who.if_name, &existing);
    }
    Ok(result)
}

/// Deletes what this ADD created. A rollback failure is reported with the original error's context.
async fn rollback<S: Store>(store: &S, created: &[NetworkEndpoint]) -> Result<()> {
    let mut errors = Vec::new();
    for ep in created {
        warn!(ip = %ep.spec.ip, "ADD failed after claiming: releasing the claim");
        if let Err(e) = store.delete(ep).await {
            errors.push(e);
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(Error::Many(errors)) }
}

fn ip_config(set: &RangeSet, ep: &NetworkEndpoint) -> Result<IpConfig> {
    let ip = ep.ip().ok_or_else(|| {
        Error::CheckFailed(format!("lease {:?} has unparsable ip {:?}", ep.metadata.name, ep.spec.ip))
    })?;
    let range = set.range_of(ip);
    let prefix = range.map_or(ep.spec.prefix_length, |r| r.subnet.prefix_len());
    let address =
        IpNet::new(ip, prefix).map_err(|_| Error::CheckFailed(format!("bad prefix length {prefix} for {ip}")))?;
    Ok(IpConfig { address, gateway: range.and_then(|r| r.gateway) })
}

/// The object that leases `ip` to the attachment.
pub fn lease_object(conf: &IpamConfig, who: &Attachment, set: &RangeSet, ip: IpAddr) -> NetworkEndpoint {
    let range = set.range_of(ip);
    let mut labels = BTreeMap::from([
        (LABEL_POOL.to_string(), label_value(&conf.pool)),
        (LABEL_NODE.to_string(), label_value(&who.node)),
        (LABEL_IP_FAMILY.to_string(), if ip.is_ipv4() { "4" } else { "6" }.to_string()),
    ]);
    if let Some(pod) = &who.pod {
        labels.insert(LABEL_POD_NAMESPACE.to_string(), label_value(&pod.namespace));
        labels.insert(LABEL_POD_NAME.to_string(), label_value(&pod.name));
        if !pod.uid.is_empty() {
            labels.insert(LABEL_POD_UID.to_string(), label_value(&pod.uid));
        }
    }
    NetworkEndpoint {
        metadata: ObjectMeta {
            name: Some(endpoint_name(&conf.pool, ip)),
            labels: Some(labels),
            finalizers: (!conf.finalizers.is_empty()).then(|| conf.finalizers.clone()),
            ..ObjectMeta::default()
        },
        spec: NetworkEndpointSpec {
            pool: conf.pool.clone(),
            ip: ip.to_string(),
            prefix_length: range.map_or(if ip.is_ipv4() { 32 } else { 128 }, |r| r.subnet.prefix_len()),
            gateway: range.and_then(|r| r.gateway).map(|g| g.to_string()),
            if_name: who.if_name.clone(),
            container_id: who.container_id.clone(),
            node: who.node.clone(),
            pod: who.pod.as_ref().map(|p| PodRef {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                uid: p.uid.clone(),
            }),
        },
    }
}

/// Claims one address of `set`: probe from the cursor, then list, then wait for a release.
async fn claim_one<S: Store>(
    store: &S,
    conf: &IpamConfig,
    who: &Attachment,
    set: &RangeSet,
    cursor: Option<IpAddr>,
) -> Result<NetworkEndpoint> {
    for ip in set.candidates(cursor).take(PROBES_BEFORE_LIST) {
        if let Claim::Created(ep) = store.create(&lease_object(conf, who, set, ip)).await? {
            info!(%ip, "claimed");
            return Ok(*ep);
        }
        debug!(%ip, "taken; next candidate");
    }

    let started = Instant::now();
    let deadline = started + conf.wait_for_release;
    let mut logged_wait = false;
    let mut checked_vanished = false;
    let mut rounds = 0;
    loop {
        let view = store.list_pool(&conf.pool).await?;
        let used: std::collections::HashSet<IpAddr> = view.entries.iter().map(|e| e.ip).collect();
        for ip in set.candidates(cursor).filter(|ip| !used.contains(ip)) {
            if let Claim::Created(ep) = store.create(&lease_object(conf, who, set, ip)).await? {
                if logged_wait {
                    info!(%ip, waited_ms = started.elapsed().as_millis() as u64, "claimed after waiting for a release");
                } else {
                    info!(%ip, "claimed");
                }
                return Ok(*ep);
            }
        }
        // Nothing free in this set.
        rounds += 1;
        let in_set: Vec<&PoolEntry> = view.entries.iter().filter(|e| set.is_usable(e.ip)).collect();
        let past_deadline = Instant::now() >= deadline;
        let now = Timestamp::now().as_second();
        let force_after = i64::try_from(conf.force_release_after.as_secs()).unwrap_or(i64::MAX);
        let age = |e: &PoolEntry| e.releasing_since.as_ref().map_or(0, |t| now - t.0.as_second());
        let (stuck, younger): (Vec<&PoolEntry>, Vec<&PoolEntry>) =
            in_set.iter().copied().filter(|e| e.releasing_since.is_some()).partition(|e| age(e) >= force_after);

        // Bounded release: take an IP whose finalizers outlived forceReleaseAfter,
        // but only when no younger release can serve this ADD.
        if let Some(victim) = stuck.iter().max_by_key(|e| age(e))
            && (younger.is_empty() || past_deadline)
            && rounds <= MAX_ROUNDS
        {
            if store.force_release(victim).await? {
                warn!(
                    ip = %victim.ip,
                    finalizers = ?victim.finalizers,
                    releasing_for_s = age(victim),
                    "forced release: finalizers did not answer within forceReleaseAfter"
                );
                let note = format!(
                    "IP {} of pool {} released by force after {}s: finalizers {:?} did not answer within forceReleaseAfter ({}s)",
                    victim.ip,
                    conf.pool,
                    age(victim),
                    victim.finalizers,
                    conf.force_release_after.as_secs()
                );
                store.record_event(endpoint_ref(victim), REASON_FORCED_RELEASE, note.clone(), true).await;
                if let Some(pod) = &who.pod {
                    store.record_event(pod_ref(pod), REASON_FORCED_RELEASE, note, true).await;
                }
            }
            if let Claim::Created(ep) = store.create(&lease_object(conf, who, set, victim.ip)).await? {
                info!(ip = %victim.ip, "claimed a force-released address");
                return Ok(*ep);
            }
            continue;
        }

        // Leases of nodes that no longer exist are released when their IPs are needed.
        if !checked_vanished {
            checked_vanished = true;
            if reclaim_vanished(store, who, &in_set).await? > 0 {
                continue;
            }
        }

        let releasing = younger.len() + stuck.len();
        if releasing == 0 || past_deadline || rounds > MAX_ROUNDS {
            return Err(Error::PoolExhausted(Box::new(exhaustion(conf, set, &view, started.elapsed()))));
        }
        if !logged_wait {
            let ex = exhaustion(conf, set, &view, started.elapsed());
            warn!(
                pool = %conf.pool,
                releasing,
                waiting_on = ?ex.waiting_on,
                wait_for_release_ms = conf.wait_for_release.as_millis() as u64,
                "pool full: waiting for a release in progress"
            );
            logged_wait = true;
        }
        // Wake up in time to force a stuck release once the younger ones had their chance.
        let mut wait = deadline.saturating_duration_since(Instant::now());
        if let Some(secs) = younger.iter().map(|e| force_after.saturating_sub(age(e))).min() {
            wait = wait.min(Duration::from_secs(u64::try_from(secs).unwrap_or(0) + 1));
        }
        match store.wait_for_release(&conf.pool, &view.resource_version, wait).await? {
            Release::Freed(ip) if set.is_usable(ip) => {
                if let Claim::Created(ep) = store.create(&lease_object(conf, who, set, ip)).await? {
                    info!(%ip, waited_ms = started.elapsed().as_millis() as u64, "claimed a just-released address");
                    return Ok(*ep);
                }
            }
            Release::Freed(_) | Release::Restart | Release::TimedOut => {}
        }
    }
}

/// Rounds of list-and-try before an ADD gives up, whatever the deadline says.
const MAX_ROUNDS: usize = 64;

/// Requests release of live leases whose node object is gone. Only acts when
/// the plugin's own node is registered, so that a node-name mismatch (e.g.
/// hostname versus Node name) can never make live leases look orphaned.
/// Finalizers are honoured as after DEL.
async fn reclaim_vanished<S: Store>(store: &S, who: &Attachment, in_set: &[&PoolEntry]) -> Result<usize> {
    if !in_set.iter().any(|e| e.releasing_since.is_none()) {
        return Ok(0);
    }
    let nodes = match store.node_names().await {
        Ok(n) => n,
        Err(e) => {
            debug!(error = %e, "cannot list nodes; not reclaiming leases of vanished nodes");
            return Ok(0);
        }
    };
    if !nodes.contains(&who.node) {
        debug!(node = %who.node, "own node is not registered; not reclaiming leases of vanished nodes");
        return Ok(0);
    }
    let known: std::collections::HashSet<String> = nodes.iter().map(|n| label_value(n)).collect();
    let mut reclaimed = 0;
    for e in in_set.iter().filter(|e| e.releasing_since.is_none() && !e.node.is_empty() && !known.contains(&e.node)) {
        warn!(ip = %e.ip, node = %e.node, "node no longer exists: releasing its lease");
        store.delete_entry(e).await?;
        reclaimed += 1;
    }
    Ok(reclaimed)
}

fn endpoint_ref(e: &PoolEntry) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{GROUP}/v1alpha1")),
        kind: Some("NetworkEndpoint".into()),
        name: Some(e.name.clone()),
        uid: Some(e.uid.clone()),
        ..ObjectReference::default()
    }
}

fn pod_ref(pod: &PodIdentity) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        uid: (!pod.uid.is_empty()).then(|| pod.uid.clone()),
        ..ObjectReference::default()
    }
}

fn exhaustion(conf: &IpamConfig, set: &RangeSet, view: &PoolView, waited: Duration) -> Exhaustion {
    let in_set: Vec<_> = view.entries.iter().filter(|e| set.is_usable(e.ip)).collect();
    let mut waiting: BTreeMap<String, usize> = BTreeMap::new();
    for e in in_set.iter().filter(|e| e.releasing_since.is_some()) {
        for f in &e.finalizers {
            *waiting.entry(f.clone()).or_default() += 1;
        }
    }
    Exhaustion {
        pool: conf.pool.clone(),
        capacity: set.capacity(),
        in_use: in_set.len(),
        releasing: in_set.iter().filter(|e| e.releasing_since.is_some()).count(),
        waiting_on: waiting.into_iter().collect(),
        waited,
    }
}

/// CNI DEL: requests deletion of the attachment's leases in this pool and
/// returns without waiting for finalizers. Leases of other sandboxes, even
/// with the same IP, are never touched. Missing leases are success.
pub async fn del<S: Store>(store: &S, conf: &IpamConfig, who: &Attachment, local: &LocalState) -> Result<()> {
    local.forget(&who.container_id, &who.if_name);
    let eps = match store.find_by_container(&who.container_id).await {
        Ok(eps) => eps,
        Err(Error::CrdMissing) => {
            warn!("NetworkEndpoint CRD not installed: nothing to release");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let mut errors = Vec::new();
    for ep in eps.iter().filter(|ep| {
        ep.spec.container_id == who.container_id && ep.spec.if_name == who.if_name && ep.spec.pool == conf.pool
    }) {
        if ep.is_releasing() {
            debug!(ip = %ep.spec.ip, "already releasing");
            continue;
        }
        match store.delete(ep).await {
            Ok(()) => info!(ip = %ep.spec.ip, finalizers = ?ep.metadata.finalizers, "release requested"),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(Error::Many(errors)) }
}

/// CNI CHECK: the attachment's leases exist, are not releasing, and match `prev`.
pub async fn check<S: Store>(store: &S, conf: &IpamConfig, who: &Attachment, prev: &[IpNet]) -> Result<()> {
    let eps: Vec<NetworkEndpoint> = store
        .find_by_container(&who.container_id)
        .await?
        .into_iter()
        .filter(|ep| ep.spec.if_name == who.if_name && ep.spec.pool == conf.pool)
        .collect();
    for (i, set) in conf.range_sets.iter().enumerate() {
        let Some(ep) = eps.iter().find(|ep| ep.ip().is_some_and(|ip| set.is_usable(ip))) else {
            return Err(Error::CheckFailed(format!("no lease in ipam.ranges[{i}] for this container and interface")));
        };
        if ep.is_releasing() {
            return Err(Error::CheckFailed(format!("lease {} is being released", ep.spec.ip)));
        }
        let want = ip_config(set, ep)?.address;
        if !prev.contains(&want) {
            return Err(Error::CheckFailed(format!("lease {want} is not in prevResult")));
        }
    }
    Ok(())
}
