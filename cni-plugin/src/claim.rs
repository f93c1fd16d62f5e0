//! The claim primitives every allocation mode (dynamic, static, sticky)
//! shares: who asks ([`Attachment`]), until when ([`Deadline`]), and a
//! claim in progress ([`Claiming`]) that creates leases, retries what the
//! API server could not answer, and rolls back whatever it created when the
//! ADD fails.
//!
//! This module never imports its callers: `dynamic`, `static_ip`, `sticky`
//! and `commands` build on it.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use kube::api::ObjectMeta;
use netendpoint_crd::{ClaimRef, NetworkEndpoint, NetworkEndpointSpec, PodRef, Role, endpoint_name};
use netendpoint_netconf::{IpamConfig, RangeSet};
use tracing::{debug, info, warn};

use crate::error::{Error, Result};
use crate::protocol::{AttachmentKey, PodIdentity};
use crate::store::{Created, Leases, Queue};

/// Who is asking: the attachment, its node and its Pod.
#[derive(Debug, Clone)]
pub struct Attachment {
    /// CNI_CONTAINERID and CNI_IFNAME.
    pub key: AttachmentKey,
    /// Node the plugin runs on.
    pub node: String,
    /// The Pod, when the runtime passed K8S_POD_*.
    pub pod: Option<PodIdentity>,
}

impl Attachment {
    /// The Pod as a lease records it.
    pub fn pod_ref(&self) -> Option<PodRef> {
        self.pod.as_ref().map(|p| PodRef { namespace: p.namespace.clone(), name: p.name.clone(), uid: p.uid.clone() })
    }

    /// True if `ep` is this attachment's lease: same sandbox, interface and node.
    pub fn owns(&self, ep: &NetworkEndpoint) -> bool {
        ep.spec.container_id == self.key.container_id
            && ep.spec.if_name == self.key.if_name
            && ep.spec.node == self.node
    }
}

/// When an ADD stops waiting; time on the runtime's (tokio's) clock.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    started: tokio::time::Instant,
    at: tokio::time::Instant,
}

impl Deadline {
    /// `wait` from now (saturating).
    pub fn after(wait: Duration) -> Self {
        let started = tokio::time::Instant::now();
        let at = started.checked_add(wait).unwrap_or(started);
        Self { started, at }
    }

    /// True once the deadline is reached.
    pub fn passed(&self) -> bool {
        tokio::time::Instant::now() >= self.at
    }

    /// Time left.
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(tokio::time::Instant::now())
    }

    /// Time since the deadline was set.
    pub fn waited(&self) -> Duration {
        self.started.elapsed()
    }
}

/// The lease that gives `ip` of `set` to `who`.
pub fn lease_object(conf: &IpamConfig, who: &Attachment, set: &RangeSet, ip: IpAddr) -> NetworkEndpoint {
    let range = set.range_of(ip);
    let spec = NetworkEndpointSpec {
        pool: conf.pool.clone(),
        ip: ip.to_string(),
        prefix_length: range.map_or(if ip.is_ipv4() { 32 } else { 128 }, |r| r.subnet.prefix_len()),
        gateway: range.and_then(|r| r.gateway).map(|g| g.to_string()),
        if_name: who.key.if_name.clone(),
        container_id: who.key.container_id.clone(),
        node: who.node.clone(),
        pod: who.pod_ref(),
        network: Some(conf.network.clone()),
        force_release_after: Some(netendpoint_crd::duration::format(conf.force_release_after)),
        ..NetworkEndpointSpec::default()
    };
    NetworkEndpoint {
        metadata: ObjectMeta {
            name: Some(endpoint_name(&conf.pool, ip)),
            labels: Some(netendpoint_lease::labels::of(&spec)),
            annotations: netendpoint_lease::labels::annotations_of(&spec),
            finalizers: (!conf.finalizers.is_empty()).then(|| conf.finalizers.clone()),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

/// The sticky hold of claim `claim` at `ip`, whose spec asks for the first
/// incarnation for `who` (see `docs/sticky-ips.md`). A hold carries no
/// finalizer: the agents never see it, and only the controller deletes it.
pub fn hold_object(
    conf: &IpamConfig,
    who: &Attachment,
    set: &RangeSet,
    ip: IpAddr,
    claim: &ClaimRef,
) -> NetworkEndpoint {
    let mut hold = lease_object(conf, who, set, ip);
    hold.spec.role = Some(Role::Hold);
    hold.spec.claim = Some(claim.clone());
    hold.spec.endpoint_finalizers = (!conf.finalizers.is_empty()).then(|| conf.finalizers.clone());
    hold.spec.sticky_for = conf.sticky.as_ref().map(|s| netendpoint_crd::duration::format(s.sticky_for));
    hold.metadata.labels = Some(netendpoint_lease::labels::of(&hold.spec));
    hold.metadata.finalizers = None;
    hold
}

/// An ADD's claims in progress: what it created (to roll back on failure),
/// what it found already its own (kept on rollback), and the names whose
/// create got no answer (resolved by name).
pub struct Claiming<'a, S> {
    /// The store.
    pub store: &'a S,
    /// The network's config.
    pub conf: &'a IpamConfig,
    /// Who asks.
    pub who: &'a Attachment,
    /// When the ADD's work must end (the invocation's deadline less the cleanup reserve).
    pub work: Deadline,
    /// Leases created by this ADD.
    pub created: Vec<NetworkEndpoint>,
    /// Leases of this attachment found already made (a repeated ADD).
    pub adopted: Vec<NetworkEndpoint>,
    /// Incarnations answered before their endpoint exists (a claim's live
    /// migration): recorded with no UID; a rollback withdraws them.
    pub answered_early: Vec<NetworkEndpoint>,
    /// False when this node had never seen the attachment before this ADD
    /// (no record, not even a pending one): nothing can be its already.
    pub maybe_repeated: bool,
    /// Its entries in a full pool's queue (name, UID): deleted when the ADD
    /// stops waiting, and by the rollback.
    pub entries: Vec<(String, String)>,
    /// Incarnations this ADD asked a sticky hold for (their endpoint names):
    /// a rollback withdraws the request, or deletes the incarnation if the
    /// controller created it for this sandbox meanwhile.
    pub asked: Vec<String>,
    /// Names whose create may have happened without an answer.
    unanswered: BTreeSet<String>,
}

/// How long a retry of a transient failure waits at first, and at most.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

impl<'a, S> Claiming<'a, S> {
    /// A claim for `who` that must finish its work by `work`.
    pub fn new(store: &'a S, conf: &'a IpamConfig, who: &'a Attachment, work: Deadline) -> Self {
        Self {
            store,
            conf,
            who,
            work,
            created: Vec::new(),
            adopted: Vec::new(),
            answered_early: Vec::new(),
            maybe_repeated: true,
            entries: Vec::new(),
            asked: Vec::new(),
            unanswered: BTreeSet::new(),
        }
    }

    /// Runs `op` again while it fails with a transient error (the API
    /// server restarting, shedding load) and the work deadline allows.
    pub async fn retrying<T, F>(&self, what: &str, mut op: impl FnMut() -> F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let mut pause = RETRY_FIRST;
        loop {
            match op().await {
                Err(e) if e.is_transient() && self.work.remaining() > pause => {
                    warn!(error = %e, retry_in_ms = pause.as_millis() as u64, "{what}: transient failure, retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MAX);
                }
                other => return other,
            }
        }
    }

    /// The leases this ADD holds now (created, adopted, and answered
    /// early: those have no UID yet).
    pub fn held(&self) -> impl Iterator<Item = &NetworkEndpoint> {
        self.created.iter().chain(&self.adopted).chain(&self.answered_early)
    }
}

impl<S: Leases> Claiming<'_, S> {
    /// Creates `lease`: `Some` once it is ours, `None` if its name is
    /// taken. A transient failure is retried within the work deadline; a
    /// create that got no answer and then finds its name taken reads the
    /// name, and adopts the lease if it is this attachment's.
    pub async fn create(&mut self, lease: &NetworkEndpoint) -> Result<Option<NetworkEndpoint>> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let mut pause = RETRY_FIRST;
        loop {
            match self.store.create(lease).await {
                Ok(Created::Ours(ep)) => {
                    self.unanswered.remove(&name);
                    self.created.push((*ep).clone());
                    return Ok(Some(*ep));
                }
                Ok(Created::Taken) if self.unanswered.contains(&name) => {
                    // Our earlier attempt may be the holder. Until this read
                    // answers, the name stays on the list the rollback reads.
                    let held = self.retrying("read an unanswered create", || self.store.get(&name)).await?;
                    self.unanswered.remove(&name);
                    return match held {
                        Some(ep) if self.who.owns(&ep) && ep.spec == lease.spec && !ep.is_releasing() => {
                            info!(lease = %name, "a create whose answer was lost did happen: it is ours");
                            self.created.push(ep.clone());
                            Ok(Some(ep))
                        }
                        _ => Ok(None),
                    };
                }
                Ok(Created::Taken) => return Ok(None),
                Err(e) => {
                    if !e.wrote_nothing() {
                        self.unanswered.insert(name.clone());
                    }
                    let unregistered = e.pool_not_registered();
                    if !((e.is_transient() || unregistered) && self.work.remaining() > pause) {
                        return Err(e);
                    }
                    if unregistered {
                        warn!(lease = %name, retry_in_ms = pause.as_millis() as u64,
                            "the pool's ranges are not registered yet (netendpoint-controller writes them): retrying");
                    } else {
                        warn!(lease = %name, error = %e, retry_in_ms = pause.as_millis() as u64, "create failed; retrying");
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MAX);
                }
            }
        }
    }
}

impl<S: Leases + Queue> Claiming<'_, S> {
    /// Deletes what this ADD created, and whatever of this attachment a
    /// create without an answer may have left under a name it tried (read
    /// by name); withdraws what it asked for and deletes its queue entries
    /// (invariant 14). Adopted leases stay. Every failure is reported.
    pub async fn roll_back(self) -> Result<()> {
        let mut errors = Vec::new();
        for (name, uid) in &self.entries {
            if let Err(e) = self.retrying("leave the queue", || self.store.leave(name, uid)).await {
                errors.push(e);
            }
        }
        for name in
            self.asked.iter().filter(|n| !self.answered_early.iter().any(|e| e.metadata.name.as_ref() == Some(*n)))
        {
            warn!(lease = %name, "ADD failed after asking for an incarnation: withdrawing the request");
            if let Err(e) = withdraw(self.store, self.who, name).await {
                errors.push(e);
            }
        }
        for ep in &self.created {
            let (name, uid) =
                (ep.metadata.name.clone().unwrap_or_default(), ep.metadata.uid.clone().unwrap_or_default());
            // A hold that got its first incarnation meanwhile is the claim's
            // now: its incarnation is rolled back, the hold left to the
            // controller (and the admission policy refuses the plugin a
            // delete of it).
            if ep.is_hold() {
                match self.retrying("read the hold", || self.store.get(&name)).await {
                    Ok(Some(now)) if now.status.as_ref().and_then(|s| s.incarnation).is_some() => {
                        info!(hold = %name, "ADD failed after its hold's first incarnation: the hold stays the claim's");
                        continue;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                }
            }
            warn!(lease = %name, "ADD failed after claiming: releasing the claim");
            if let Err(e) = self.retrying("roll back", || self.store.delete(&name, &uid)).await {
                errors.push(e);
            }
        }
        for ep in &self.answered_early {
            let name = ep.metadata.name.clone().unwrap_or_default();
            warn!(lease = %name, "ADD failed after its request was accepted: withdrawing it");
            if let Err(e) = withdraw(self.store, self.who, &name).await {
                errors.push(e);
            }
        }
        for name in &self.unanswered {
            match self.retrying("read an unanswered create", || self.store.get(name)).await {
                Ok(Some(ep)) if self.who.owns(&ep) && ep.spec.pool == self.conf.pool && !ep.is_releasing() => {
                    warn!(lease = %name, "releasing a lease an unanswered create left");
                    let uid = ep.metadata.uid.clone().unwrap_or_default();
                    if let Err(e) = self.retrying("roll back", || self.store.delete(name, &uid)).await {
                        errors.push(e);
                    }
                }
                Ok(_) => debug!(lease = %name, "the unanswered create left nothing of ours"),
                Err(e) => errors.push(e),
            }
        }
        Error::collect(errors)
    }
}

/// Ends incarnation `endpoint` of attachment `who`, answered early and
/// perhaps not created yet: deletes the endpoint if the controller created
/// it for this sandbox; otherwise withdraws the request from the hold (a
/// resourceVersion-tested patch, so an endpoint created meanwhile is seen
/// on the next read and deleted).
pub async fn withdraw<S: Leases>(store: &S, who: &Attachment, endpoint: &str) -> Result<()> {
    let Some((hold_name, k)) = netendpoint_lease::hold::hold_of_incarnation(endpoint) else { return Ok(()) };
    for _ in 0..8 {
        if let Some(ep) = store.get(endpoint).await? {
            if who.owns(&ep) && !ep.is_releasing() {
                store.delete(endpoint, ep.metadata.uid.as_deref().unwrap_or_default()).await?;
                info!(lease = %endpoint, "release requested");
            }
            return Ok(());
        }
        let Some(hold) = store.get(hold_name).await? else { return Ok(()) };
        let status = hold.status.clone().unwrap_or_default();
        let ours = status.request.as_ref().is_some_and(|r| {
            r.incarnation == k && r.container_id == who.key.container_id && r.if_name == who.key.if_name
        });
        if !ours && status.incarnation.unwrap_or(0) < k {
            debug!(hold = %hold_name, "no request of this sandbox left on the hold");
            return Ok(());
        }
        if ours && store.patch(hold_name, &netendpoint_lease::hold::withdraw_patch(&hold), true).await?.is_some() {
            info!(hold = %hold_name, incarnation = k, "request withdrawn: the sandbox went before its incarnation");
            return Ok(());
        }
        // The hold moved on (its incarnation may be ours now): read again.
    }
    Err(Error::Inconsistent(format!("the sticky hold {hold_name} kept changing while its request was withdrawn")))
}
