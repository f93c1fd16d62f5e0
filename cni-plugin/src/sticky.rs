//! Sticky addresses: a claim (an `IPAMClaim`) keeps its address across the
//! Pods that reference it, with no window in which anyone else can take it
//! (invariant 12; `docs/sticky-ips.md`).
//!
//! The address's name `<pool>.<ip>` belongs to the claim's hold for the
//! claim's whole life. Each Pod that continues the claim gets its own
//! endpoint, incarnation `k`, named `<pool>.<ip>-<k>`, which only the
//! controller creates, once incarnation `k - 1` is gone and once it checked
//! that the asking node is where the claim's Pod is bound. This module is
//! the plugin's side:
//! - [`identity`]: which claim, if any, this ADD's interface continues;
//! - [`claim`]: the first ADD of a claim creates its hold (the create is the
//!   claim of the address, as for any lease); a later one asks the hold for
//!   the next incarnation; both then wait for the controller to create it.

use std::net::IpAddr;

use netendpoint_crd::ipamclaim::{IPAMClaim, NETWORKS_ANNOTATION, statefulset_claim_name};
use netendpoint_crd::{ClaimRef, HoldPhase, IncarnationRequest, NetworkEndpoint, endpoint_name, incarnation_name};
use netendpoint_netconf::{RangeSet, StickyConfig};
use serde_json::Value;
use tracing::{debug, info, warn};

use crate::claim::{Claiming, Deadline, hold_object};
use crate::error::{Error, Result};
use crate::local::LocalState;
use crate::store::{Clock, Cluster, Leases, PodFacts, Queue, Signals, Summaries};
use crate::wait::{LeasesOf, Waited, await_condition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::time::Duration;

/// The claim an ADD's interface continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The claim.
    pub claim: ClaimRef,
    /// The claim's addresses (`status.ips`), without prefix lengths.
    pub ips: Vec<IpAddr>,
}

/// The interface a claim name is looked for: the pool and network of the
/// ADD, the interface's name, and its Pod's name.
#[derive(Debug, Clone, Copy)]
pub struct PodInterface<'a> {
    /// The pool (`ipam.pool`).
    pub pool: &'a str,
    /// The network (`ipam.network`).
    pub network: &'a str,
    /// The interface (`CNI_IFNAME`).
    pub if_name: &'a str,
    /// The Pod's name.
    pub pod: &'a str,
}

/// Where this ADD's claim name comes from, in order: the runtime's
/// reference, the Pod's network-selection annotation (with
/// `claimsFromPods`), and, for a Pod named like a StatefulSet's
/// (`<name>-<ordinal>`), its [`statefulset_claim_name`], `<pod>.<pool>`.
pub fn claim_name(
    conf: &StickyConfig,
    at: &PodInterface<'_>,
    runtime: Option<&str>,
    facts: Option<&PodFacts>,
) -> Option<String> {
    let PodInterface { pool, network, if_name, pod } = *at;
    if let Some(name) = runtime {
        return Some(name.to_string());
    }
    if conf.claims_from_pods
        && let Some(name) = facts.and_then(|f| from_networks_annotation(f, network, if_name))
    {
        return Some(name);
    }
    if !conf.stateful_sets {
        return None;
    }
    statefulset_claim_name(pod, pool)
}

/// The `ipam-claim-reference` of the Pod's network-selection element for
/// this network (by name) and interface, as Multus users and KubeVirt write
/// it (`k8s.v1.cni.cncf.io/networks`, a JSON list).
fn from_networks_annotation(facts: &PodFacts, network: &str, if_name: &str) -> Option<String> {
    let list: Vec<Value> = serde_json::from_str(facts.annotations.get(NETWORKS_ANNOTATION)?).ok()?;
    list.iter()
        .filter(|e| {
            let name = e.get("name").and_then(Value::as_str).unwrap_or_default();
            let iface = e.get("interface").and_then(Value::as_str);
            name.rsplit('/').next() == Some(network) || iface == Some(if_name)
        })
        .find_map(|e| e.get("ipam-claim-reference").and_then(Value::as_str).map(str::to_string))
        .filter(|n| netendpoint_crd::is_dns1123_subdomain(n))
}

/// The claim `namespace`/`name` as this ADD continues it; `None` when it
/// does not exist, has no UID, or belongs to another network.
pub async fn identity<S: Cluster>(store: &S, network: &str, namespace: &str, name: &str) -> Result<Option<Identity>> {
    let Some(claim) = store.claim(namespace, name).await? else {
        debug!(claim = %name, "no such IPAMClaim: not sticky");
        return Ok(None);
    };
    Ok(of_claim(&claim, network))
}

/// The identity of `claim` for `network`.
pub fn of_claim(claim: &IPAMClaim, network: &str) -> Option<Identity> {
    let uid = claim.metadata.uid.clone().filter(|u| !u.is_empty())?;
    if !claim.spec.network.is_empty() && claim.spec.network != network {
        warn!(claim = ?claim.metadata.name, claim_network = %claim.spec.network, network, "the claim is for another network: not sticky here");
        return None;
    }
    let ips = claim
        .status
        .iter()
        .flat_map(|s| &s.ips)
        .filter_map(|a| a.split('/').next().and_then(|ip| ip.parse().ok()))
        .collect();
    Some(Identity {
        claim: ClaimRef {
            namespace: claim.metadata.namespace.clone().unwrap_or_default(),
            name: claim.metadata.name.clone().unwrap_or_default(),
            uid,
        },
        ips,
    })
}

/// How long the first ADD of a StatefulSet Pod waits for the controller
/// to create its claim, at most.
pub const FIRST_CLAIM_WAIT: Duration = Duration::from_secs(5);

/// The claim of StatefulSet Pod `pod` that has none yet: the controller
/// creates a claim for each ordinal a StatefulSet wants as soon as it sees
/// the StatefulSet, but the StatefulSet's first Pod may be ADDed before
/// that. When the Pod's name is `<sts>-<ordinal>` and StatefulSet `<sts>`
/// wants that ordinal (one GET), this waits for the claim, at most
/// [`FIRST_CLAIM_WAIT`], so the first Pod is sticky too. Any other Pod costs
/// that one GET only when its name looks like a StatefulSet Pod's and no
/// claim of that name exists.
pub async fn first_claim<S: Cluster>(
    c: &Claiming<'_, S>,
    namespace: &str,
    pod: &str,
    claim: &str,
) -> Result<Option<Identity>> {
    let Some((sts, ordinal)) = netendpoint_crd::ipamclaim::statefulset_pod(pod) else { return Ok(None) };
    let replicas = c.retrying("read the StatefulSet", || c.store.statefulset_replicas(namespace, sts)).await?;
    if replicas.is_none_or(|r| ordinal >= r) {
        return Ok(None);
    }
    let until = Deadline::after(FIRST_CLAIM_WAIT.min(c.work.remaining()));
    info!(%claim, statefulset = %sts, "StatefulSet Pod without its claim yet: waiting for netendpoint-controller to create it");
    let mut pause = Duration::from_millis(50);
    while !until.passed() {
        tokio::time::sleep(pause.min(until.remaining())).await;
        pause = (pause * 2).min(Duration::from_millis(500));
        if let Some(id) = c.retrying("read the claim", || identity(c.store, &c.conf.network, namespace, claim)).await? {
            info!(%claim, waited_ms = until.waited().as_millis() as u64, "the claim exists now");
            return Ok(Some(id));
        }
    }
    warn!(%claim, "no claim after {}s: not sticky this time (is netendpoint-controller running?)", FIRST_CLAIM_WAIT.as_secs());
    Ok(None)
}

/// Rounds of read, ask and wait before an ADD gives up on its claim, whatever the deadline says.
const MAX_ROUNDS: usize = 64;

/// The incarnation of `id` in range set `index` (`set`) for the ADD `c`:
/// continues the claim's hold if it has one here, else creates one (at an
/// address the allocator chooses); then waits, until `wait`, for the
/// controller to create the incarnation.
pub async fn claim<S: Clock + Leases + Summaries + Queue + Signals>(
    c: &mut Claiming<'_, S>,
    local: &LocalState,
    index: usize,
    set: &RangeSet,
    id: &Identity,
    wait: Deadline,
) -> Result<NetworkEndpoint> {
    let held = id.ips.iter().copied().find(|ip| set.is_usable(*ip));
    let mut legacy = None;
    if let Some(ip) = held {
        let name = endpoint_name(&c.conf.pool, ip);
        match c.retrying("read the claim's hold", || c.store.get(&name)).await? {
            Some(hold) if is_hold_of(&hold, id) && !releasing(&hold) => {
                return continue_hold(c, local, hold, wait).await;
            }
            Some(hold) if is_hold_of(&hold, id) => {
                info!(%ip, claim = %id.claim.name, "the claim's hold is ending: taking a new address");
            }
            Some(lease) if is_legacy_hold_of(&lease, c.who) => legacy = Some(lease),
            _ => debug!(%ip, claim = %id.claim.name, "no hold of the claim at its address: taking a new one"),
        }
    }
    let make = |ip: IpAddr| hold_object(c.conf, c.who, set, ip, &id.claim);
    let from_legacy = match legacy {
        Some(lease) => end_legacy_hold(c, lease, &make, wait).await?,
        None => None,
    };
    let hold = match from_legacy {
        Some(hold) => hold,
        None => crate::dynamic::claim(c, local, index, set, &make, wait).await?,
    };
    // The hold's spec asks for incarnation 1; the hold itself is rolled back
    // with the rest if the ADD fails, so no address stays held for nothing.
    info!(ip = %hold.spec.ip, claim = %id.claim.name, "sticky hold created");
    if let Some(ip) = hold.ip() {
        c.asked.push(incarnation_name(&c.conf.pool, ip, 1));
    }
    wait_for_incarnation(c, &hold, 1, wait).await
}

/// True when `lease` is a lease of an older version that keeps its address
/// for this ADD's Pod (the sticky-hold finalizer, and the Pod's namespace
/// and name in its sticky annotations), released, on this node: the
/// upgrade's claim of that Pod starts with its address.
fn is_legacy_hold_of(lease: &NetworkEndpoint, who: &crate::claim::Attachment) -> bool {
    let Some(view) = netendpoint_lease::view::Lease::of(lease) else { return false };
    let (Some(sticky), Some(pod)) = (&view.sticky, &who.pod) else { return false };
    view.is_held()
        && view.releasing_since.is_some()
        && view.incarnation.is_none()
        && view.node == who.node
        && sticky.namespace == pod.namespace
        && sticky.pod == pod.name
}

/// Ends the hold `lease` of an older version keeps for this ADD's Pod (it
/// removes the sticky-hold finalizer, as that version's ADD did), waits
/// until the lease is gone (the agents acknowledged its release) and
/// creates the claim's hold at its address. `None` when the address went
/// to someone else meanwhile, or the wait ran out: the ADD then takes a new
/// address.
async fn end_legacy_hold<S: Leases>(
    c: &mut Claiming<'_, S>,
    lease: NetworkEndpoint,
    make: crate::dynamic::Make<'_>,
    wait: Deadline,
) -> Result<Option<NetworkEndpoint>> {
    let (Some(name), Some(ip)) = (lease.metadata.name.clone(), lease.ip()) else { return Ok(None) };
    let uid = lease.metadata.uid.clone().unwrap_or_default();
    let finalizers = lease.metadata.finalizers.clone().unwrap_or_default();
    if let Some(i) = finalizers.iter().position(|f| f == netendpoint_crd::FINALIZER_STICKY_HOLD) {
        let patch = netendpoint_lease::patch::remove_finalizer(&uid, i, netendpoint_crd::FINALIZER_STICKY_HOLD);
        c.retrying("end the older version's sticky hold", || c.store.patch(&name, &patch, false)).await?;
        info!(%ip, lease = %name, "sticky hold of an older version ended for this Pod's new sandbox: continuing its address");
    }
    let gone = crate::wait::gone_or_replaced(Some(uid));
    match await_condition(&LeasesOf(c.store), &name, Some(lease), wait, gone).await? {
        Waited::Met(_) => Ok(c.create(&make(ip)).await?),
        Waited::TimedOut(_) => Ok(None),
    }
}

fn is_hold_of(hold: &NetworkEndpoint, id: &Identity) -> bool {
    hold.is_hold() && hold.spec.claim.as_ref().is_some_and(|c| c.uid == id.claim.uid)
}

fn releasing(hold: &NetworkEndpoint) -> bool {
    hold.is_releasing() || hold.status.as_ref().is_some_and(|s| s.phase == Some(HoldPhase::Releasing))
}

/// The request this ADD makes for incarnation `k`, waiting until `wait`
/// ends: its deadline is on the API server's clock, so the controller
/// creates nothing for it once the ADD has given up.
fn request<S: Clock>(c: &Claiming<'_, S>, k: u32, wait: Deadline) -> IncarnationRequest {
    let deadline = c
        .store
        .server_now()
        .and_then(|now| now.checked_add(k8s_openapi::jiff::SignedDuration::try_from(wait.remaining()).ok()?).ok())
        .map(Time);
    IncarnationRequest {
        incarnation: k,
        node: c.who.node.clone(),
        container_id: c.who.key.container_id.clone(),
        if_name: c.who.key.if_name.clone(),
        pod: c.who.pod_ref().unwrap_or_default(),
        accepted: false,
        deadline,
    }
}

/// Continues `hold`: returns this attachment's current incarnation (a
/// repeated ADD), or asks for the next one and waits for it. A current
/// incarnation of a sandbox already gone from this node is ended first, so
/// that no retry waits for a DEL that already happened.
async fn continue_hold<S: Clock + Leases>(
    c: &mut Claiming<'_, S>,
    local: &LocalState,
    mut hold: NetworkEndpoint,
    wait: Deadline,
) -> Result<NetworkEndpoint> {
    let name = hold.metadata.name.clone().unwrap_or_default();
    for _ in 0..MAX_ROUNDS {
        let status = hold.status.clone().unwrap_or_default();
        let current = status.incarnation.unwrap_or(0);
        let current_ep = match status.endpoint.as_ref().filter(|_| current > 0) {
            Some(ep_name) => c.retrying("read the current incarnation", || c.store.get(ep_name)).await?,
            None => None,
        };
        if let Some(ep) = current_ep.filter(|ep| !ep.is_releasing()) {
            // A repeated ADD of this attachment (one whose record was lost)
            // may hold the current incarnation already; a new attachment cannot.
            if c.maybe_repeated && c.who.owns(&ep) {
                info!(lease = ?ep.metadata.name, "ADD repeated: returning the claim's current incarnation");
                c.adopted.push(ep.clone());
                return Ok(ep);
            }
            end_if_sandbox_gone(c, local, &ep).await?;
        }
        let k = current.saturating_add(1);
        let mine = request(c, k, wait);
        if status.request.as_ref().is_some_and(|r| same_request(r, &mine)) {
            c.asked.push(endpoint_of(&hold, k));
            return wait_for_incarnation(c, &hold, k, wait).await;
        }
        let patch = netendpoint_lease::hold::request_patch(&hold, &mine);
        if let Some(now) = c.retrying("ask the hold for an incarnation", || c.store.patch(&name, &patch, true)).await? {
            info!(hold = %name, incarnation = k, "asked the sticky hold for the next incarnation");
            c.asked.push(endpoint_of(&hold, k));
            return wait_for_incarnation(c, &now, k, wait).await;
        }
        // The hold changed since it was read (another request, a new incarnation): read it again.
        match c.retrying("read the claim's hold", || c.store.get(&name)).await? {
            Some(h) if !releasing(&h) => hold = h,
            _ => return Err(Error::Inconsistent(format!("the sticky hold {name} went away while asked"))),
        }
    }
    Err(Error::Inconsistent(format!("the sticky hold {name} kept changing")))
}

/// What a hold says of this ADD's incarnation `k`.
enum HoldSays {
    /// Accepted while the previous incarnation lives (a claim's live
    /// migration): the endpoint-to-be, answered at once.
    Early(Box<NetworkEndpoint>),
    /// Incarnation `k` (or a later one) exists: read it.
    Created,
    /// The request is not this ADD's any more, or the hold ends: why.
    Refused(String),
    /// Still asked for.
    Waiting,
}

/// What `hold` says of incarnation `k` for the ADD `c`.
fn hold_says<S>(c: &Claiming<'_, S>, hold: &NetworkEndpoint, k: u32) -> HoldSays {
    let status = hold.status.clone().unwrap_or_default();
    let current = status.incarnation.unwrap_or(0);
    if current < k
        && let Some(r) = status.request.as_ref().filter(|r| r.accepted && is_mine(c, r, k))
        && let Some(ep) = netendpoint_lease::hold::incarnation_object(hold, r)
    {
        return HoldSays::Early(Box::new(ep));
    }
    if current >= k {
        return HoldSays::Created;
    }
    // The first incarnation is asked by the hold's spec; the controller
    // refuses it by setting a message with no request.
    let first_refused = k == 1 && status.request.is_none() && status.message.is_some();
    let ours = status.request.as_ref().is_some_and(|r| is_mine(c, r, k))
        || (k == 1 && hold.spec.container_id == c.who.key.container_id && !first_refused);
    if !ours || releasing(hold) {
        return HoldSays::Refused(status.message.unwrap_or_else(|| "another request replaced this one".into()));
    }
    HoldSays::Waiting
}

/// The error of an ADD that waited for its incarnation in vain.
fn sticky_wait<S>(c: &Claiming<'_, S>, ip: IpAddr, hold: &str, waiting_for: String, wait: Deadline) -> Error {
    Error::StickyWait { pool: c.conf.pool.clone(), ip, lease: hold.to_string(), waiting_for, waited: wait.waited() }
}

/// Waits, until `wait`, for the controller to create incarnation `k` of
/// `hold` for this attachment, watching the hold by name.
async fn wait_for_incarnation<S: Leases>(
    c: &mut Claiming<'_, S>,
    hold: &NetworkEndpoint,
    k: u32,
    wait: Deadline,
) -> Result<NetworkEndpoint> {
    let hold_name = hold.metadata.name.clone().unwrap_or_default();
    let ip = hold.ip().ok_or_else(|| Error::InvalidLease { name: hold_name.clone(), reason: "spec.ip".into() })?;
    let endpoint = incarnation_name(&c.conf.pool, ip, k);
    info!(hold = %hold_name, incarnation = k, "waiting for the controller to create the claim's incarnation");
    let answered = |h: Option<&NetworkEndpoint>| h.is_none_or(|h| !matches!(hold_says(c, h, k), HoldSays::Waiting));
    let cur = match await_condition(&LeasesOf(c.store), &hold_name, Some(hold.clone()), wait, answered).await? {
        Waited::Met(Some(h)) => h,
        Waited::Met(None) => return Err(sticky_wait(c, ip, &hold_name, "a hold that ended meanwhile".into(), wait)),
        Waited::TimedOut(h) => {
            let h = h.unwrap_or_else(|| hold.clone());
            return Err(sticky_wait(c, ip, &hold_name, waiting_for(c, &h, k).await, wait));
        }
    };
    match hold_says(c, &cur, k) {
        HoldSays::Early(ep) => {
            info!(hold = %hold_name, incarnation = k, waited_ms = wait.waited().as_millis() as u64,
                "request accepted while the previous incarnation is live: answering with the claim's address");
            c.answered_early.push((*ep).clone());
            Ok(*ep)
        }
        HoldSays::Created => match c.retrying("read the new incarnation", || c.store.get(&endpoint)).await? {
            Some(ep) if c.who.owns(&ep) && !ep.is_releasing() => {
                info!(lease = %endpoint, waited_ms = wait.waited().as_millis() as u64, "the claim's incarnation is ours");
                // Created for this ADD: released again if the ADD fails.
                c.created.push(ep.clone());
                Ok(ep)
            }
            _ => Err(sticky_wait(c, ip, &hold_name, format!("incarnation {k}, which went to another sandbox"), wait)),
        },
        HoldSays::Refused(why) => {
            let what = format!("incarnation {k}, which the controller did not create: {why}");
            Err(sticky_wait(c, ip, &hold_name, what, wait))
        }
        HoldSays::Waiting => Err(sticky_wait(c, ip, &hold_name, waiting_for(c, &cur, k).await, wait)),
    }
}

/// True if `a` and `b` ask for the same incarnation for the same sandbox
/// and Pod (whether accepted or not, whatever their deadlines).
fn same_request(a: &IncarnationRequest, b: &IncarnationRequest) -> bool {
    let plain = |r: &IncarnationRequest| IncarnationRequest { accepted: false, deadline: None, ..r.clone() };
    plain(a) == plain(b)
}

/// The endpoint name of incarnation `k` of `hold`.
fn endpoint_of(hold: &NetworkEndpoint, k: u32) -> String {
    hold.ip().map_or_else(String::new, |ip| incarnation_name(&hold.spec.pool, ip, k))
}

/// Ends the live incarnation `ep` of this ADD's claim when its sandbox is
/// known gone: it is on this node, and this node completed its DEL (a
/// tombstone), or this ADD is a new sandbox of the same Pod (the runtime
/// starts one only once the old one is stopped). Its agents' finalizers
/// still gate the release; the controller creates the next incarnation once
/// it is gone.
async fn end_if_sandbox_gone<S: Leases>(c: &Claiming<'_, S>, local: &LocalState, ep: &NetworkEndpoint) -> Result<()> {
    if ep.spec.node != c.who.node || ep.spec.container_id == c.who.key.container_id {
        return Ok(());
    }
    let torn_down = local.deleted(&ep.spec.container_id, &ep.spec.if_name);
    let same_pod = c.who.pod.as_ref().is_some_and(|p| {
        !p.uid.is_empty() && ep.spec.pod.as_ref().is_some_and(|old| old.uid == p.uid && old.name == p.name)
    });
    if !(torn_down || same_pod) {
        return Ok(());
    }
    let name = ep.metadata.name.clone().unwrap_or_default();
    let uid = ep.metadata.uid.clone().unwrap_or_default();
    warn!(lease = %name, old_container = %ep.spec.container_id, torn_down, same_pod,
        "the claim's current incarnation belongs to a sandbox that is gone: releasing it");
    c.retrying("release a gone sandbox's incarnation", || c.store.delete(&name, &uid)).await
}

/// True if `r` is this attachment's request for incarnation `k`.
fn is_mine<S>(c: &Claiming<'_, S>, r: &IncarnationRequest, k: u32) -> bool {
    r.incarnation == k && r.container_id == c.who.key.container_id && r.if_name == c.who.key.if_name
}

/// What incarnation `k` still waits for, for the error when `waitForOld`
/// runs out: the previous incarnation (live, or waiting on finalizers), or
/// the controller.
async fn waiting_for<S: Leases>(c: &Claiming<'_, S>, hold: &NetworkEndpoint, k: u32) -> String {
    let previous = hold.status.as_ref().and_then(|s| s.endpoint.clone());
    match previous {
        Some(name) if k > 1 => match c.store.get(&name).await {
            Ok(Some(ep)) if !ep.is_releasing() => format!(
                "the DEL of its previous sandbox {} on node {} (incarnation {} is still live)",
                ep.spec.container_id,
                ep.spec.node,
                k - 1
            ),
            Ok(Some(ep)) => format!(
                "the agents' acknowledgement of incarnation {} (finalizers {:?})",
                k - 1,
                ep.metadata.finalizers.unwrap_or_default()
            ),
            _ => format!("netendpoint-controller to create incarnation {k}"),
        },
        _ => format!("netendpoint-controller to create incarnation {k}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    /// The `ipam.sticky` of a network whose config has `v` there.
    fn conf(v: Value) -> StickyConfig {
        let ipam = json!({"ranges": [[{"subnet": "10.0.0.0/24"}]], "sticky": v});
        netendpoint_netconf::IpamConfig::parse(&ipam, "net").unwrap().sticky.unwrap()
    }

    #[test]
    fn the_claim_name_comes_from_the_runtime_the_pod_or_the_statefulset_pattern() {
        let on = conf(json!({"claimsFromPods": true}));
        let facts = PodFacts {
            annotations: [(
                NETWORKS_ANNOTATION.to_string(),
                r#"[{"name": "ns/other", "ipam-claim-reference": "x"}, {"name": "ns/net", "ipam-claim-reference": "vm1.net"}]"#
                    .to_string(),
            )]
            .into(),
            ..PodFacts::default()
        };
        let name = |c: &StickyConfig, pod: &str, runtime: Option<&str>, f: Option<&PodFacts>| {
            claim_name(c, &PodInterface { pool: "pods", network: "net", if_name: "eth0", pod }, runtime, f)
        };
        assert_eq!(name(&on, "web-0", Some("given"), Some(&facts)).as_deref(), Some("given"));
        assert_eq!(name(&on, "virt-launcher-vm1-abcde", None, Some(&facts)).as_deref(), Some("vm1.net"));
        assert_eq!(name(&on, "web-3", None, None).as_deref(), Some("web-3.pods"));
        assert_eq!(name(&on, "web-abcde", None, None), None, "no ordinal: no StatefulSet claim");
        let no_sts = conf(json!({"kinds": []}));
        assert_eq!(name(&no_sts, "web-3", None, None), None);
        let off = conf(json!({}));
        assert_eq!(name(&off, "virt-launcher-vm1-abcde", None, Some(&facts)), None, "annotations only when enabled");
    }

    #[test]
    fn a_claim_without_uid_or_of_another_network_is_no_identity() {
        let mut claim = IPAMClaim::new("web-0.pods", netendpoint_crd::ipamclaim::IPAMClaimSpec::default());
        claim.metadata.namespace = Some("ns".into());
        assert_eq!(of_claim(&claim, "net"), None, "no UID");
        claim.metadata.uid = Some("k1".into());
        claim.status = Some(netendpoint_crd::ipamclaim::IPAMClaimStatus {
            ips: vec!["10.0.0.5/24".into(), "fd00::5/64".into()],
            owner_pod: None,
        });
        let id = of_claim(&claim, "net").unwrap();
        assert_eq!(id.ips, ["10.0.0.5".parse::<IpAddr>().unwrap(), "fd00::5".parse().unwrap()]);
        claim.spec.network = "other".into();
        assert_eq!(of_claim(&claim, "net"), None);
    }
}
