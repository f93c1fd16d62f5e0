//! Sticky IPs: a Pod identity (namespace/name of a Pod whose controller is
//! of a configured kind, StatefulSet by default) keeps its address across
//! recreations of its Pod.
//!
//! The lease of a sticky Pod carries the hold finalizer
//! ([`FINALIZER_STICKY_HOLD`]) from its creation on, and the identity label
//! ([`LABEL_STICKY_IDENTITY`]). DEL is unchanged: it deletes the lease, the
//! agents tear down and acknowledge as always, and the hold then keeps the
//! object, so no other sandbox can create `<pool>.<ip>`. The identity's next
//! ADD finds the old lease with one label-selected list, waits (bounded by
//! `ipam.sticky.waitForOld`) until only the hold is left, ends the hold with
//! a patch that tests the old lease's UID and finalizers, and creates the new
//! lease under the same name once the old one is gone. Every watcher
//! therefore sees DELETED(old) before ADDED(new), with the same IP.
//!
//! The hold also ends without a new Pod (StatefulSet deleted or scaled below
//! the ordinal, `stickyFor` passed, pool pressure): that is the controller's
//! part (see `docs/sticky-ips.md`).

use std::time::Duration;

use netendpoint_crd::{
    ANNOTATION_STICKY_FOR, ANNOTATION_STICKY_OWNER, FINALIZER_STICKY_HOLD, LABEL_STICKY_IDENTITY, NetworkEndpoint,
    duration, sticky_identity,
};
use serde::Deserialize;
use serde_json::Value;
use tracing::{info, warn};

use crate::allocator::RangeSet;
use crate::config::{IpamConfig, bounded};
use crate::error::{Error, Result};
use crate::protocol::PodIdentity;
use crate::store::{PodFacts, Store};

/// Default of `ipam.sticky.stickyFor`.
pub const DEFAULT_STICKY_FOR: Duration = Duration::from_secs(3600);
/// Largest `ipam.sticky.stickyFor`: 30 days.
pub const MAX_STICKY_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
/// Default of `ipam.sticky.kinds`.
pub const DEFAULT_KINDS: &[&str] = &["StatefulSet"];

/// `ipam.sticky`, validated. Absent means off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickyConfig {
    /// Controller owner kinds whose Pods are sticky (`kinds`, default `["StatefulSet"]`).
    pub kinds: Vec<String>,
    /// How long a hold lasts after its lease's release was requested (`stickyFor`).
    pub sticky_for: Duration,
    /// How long an ADD waits for its identity's old lease to be released
    /// and acknowledged by every agent (`waitForOld`, default `waitForRelease`).
    pub wait_for_old: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSticky {
    kinds: Option<Vec<String>>,
    sticky_for: Option<String>,
    wait_for_old: Option<String>,
}

impl StickyConfig {
    /// Validates `ipam.sticky`. `wait_for_release` is the default of
    /// `waitForOld`; `max_wait` its largest value (what `ipam.timeout` leaves).
    pub fn parse(v: &Value, wait_for_release: Duration, max_wait: Duration) -> Result<Self> {
        let raw: RawSticky =
            serde_json::from_value(v.clone()).map_err(|e| Error::config("ipam.sticky", &e.to_string()))?;
        let kinds = raw.kinds.unwrap_or_else(|| DEFAULT_KINDS.iter().map(|k| k.to_string()).collect());
        if kinds.is_empty() {
            return Err(Error::config(
                "ipam.sticky.kinds",
                "must list at least one owner kind, e.g. [\"StatefulSet\"]",
            ));
        }
        for (i, k) in kinds.iter().enumerate() {
            if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Err(Error::config(&format!("ipam.sticky.kinds[{i}]"), &format!("{k:?} is not a kind name")));
            }
        }
        let sticky_for =
            bounded("ipam.sticky.stickyFor", raw.sticky_for.as_deref(), DEFAULT_STICKY_FOR, MAX_STICKY_FOR)?;
        let wait_for_old =
            bounded("ipam.sticky.waitForOld", raw.wait_for_old.as_deref(), wait_for_release.min(max_wait), max_wait)
                .map_err(|e| match e {
                    Error::InvalidConfig { field, reason } => Error::InvalidConfig {
                        field,
                        reason: format!("{reason} (it must leave 10s of ipam.timeout for the rest of ADD)"),
                    },
                    other => other,
                })?;
        Ok(Self { kinds, sticky_for, wait_for_old })
    }
}

/// The sticky identity of an ADD's Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// The Pod object's UID now (the new incarnation's).
    pub pod_uid: String,
    /// The controller owner: (kind, name).
    pub owner: (String, String),
    /// The [`LABEL_STICKY_IDENTITY`] value.
    pub label: String,
    /// `stickyFor` stamped on its leases.
    pub sticky_for: Duration,
}

/// The Pod's sticky identity, when sticky IPs are configured and the Pod's
/// controller owner is of a configured kind. A Pod object whose UID is not
/// the one the runtime named is another incarnation: not sticky.
pub fn identity(conf: &StickyConfig, pod: &PodIdentity, facts: Option<&PodFacts>) -> Option<Identity> {
    let facts = facts?;
    let (kind, owner) = facts.owner.as_ref()?;
    if !conf.kinds.iter().any(|k| k == kind) || facts.uid.is_empty() {
        return None;
    }
    if !pod.uid.is_empty() && pod.uid != facts.uid {
        warn!(pod = %pod.name, runtime_uid = %pod.uid, object_uid = %facts.uid, "Pod object is another incarnation: not sticky");
        return None;
    }
    Some(Identity {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        pod_uid: facts.uid.clone(),
        owner: (kind.clone(), owner.clone()),
        label: sticky_identity(&pod.namespace, &pod.name),
        sticky_for: conf.sticky_for,
    })
}

/// Marks `ep` as the sticky lease of `id`: identity label, owner and
/// `stickyFor` annotations, and the hold finalizer, all from creation on.
pub fn mark(ep: &mut NetworkEndpoint, id: &Identity) {
    ep.metadata.labels.get_or_insert_default().insert(LABEL_STICKY_IDENTITY.into(), id.label.clone());
    let ann = ep.metadata.annotations.get_or_insert_default();
    ann.insert(ANNOTATION_STICKY_OWNER.into(), format!("{}/{}", id.owner.0, id.owner.1));
    ann.insert(ANNOTATION_STICKY_FOR.into(), duration::format(id.sticky_for));
    let f = ep.metadata.finalizers.get_or_insert_default();
    if !f.iter().any(|x| x == FINALIZER_STICKY_HOLD) {
        f.push(FINALIZER_STICKY_HOLD.into());
    }
}

/// True if `ep` is a lease of `id` (the label may be a hash: compare the Pod too).
pub fn belongs_to(ep: &NetworkEndpoint, id: &Identity) -> bool {
    ep.spec.pod.as_ref().is_some_and(|p| p.namespace == id.namespace && p.name == id.name)
        && ep.metadata.labels.as_ref().and_then(|l| l.get(LABEL_STICKY_IDENTITY)) == Some(&id.label)
}

/// True if `ep` still carries a sticky hold.
pub fn is_held(finalizers: &[String]) -> bool {
    finalizers.iter().any(|f| f == FINALIZER_STICKY_HOLD)
}

/// The identity's old lease in range set `set`, if any (the newest, should
/// there be several).
pub fn old_lease_in<'a>(old: &'a [NetworkEndpoint], set: &RangeSet) -> Option<&'a NetworkEndpoint> {
    old.iter()
        .filter(|ep| ep.ip().is_some_and(|ip| set.is_usable(ip)))
        .max_by_key(|ep| ep.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// What the old lease is waiting for, for the error an ADD returns when
/// `waitForOld` runs out.
pub fn waiting_for(ep: &NetworkEndpoint) -> String {
    if !ep.is_releasing() {
        return format!(
            "the DEL of its previous sandbox {} on node {} (the lease is still live)",
            ep.spec.container_id, ep.spec.node
        );
    }
    let agents: Vec<&String> =
        ep.metadata.finalizers.iter().flatten().filter(|f| f.as_str() != FINALIZER_STICKY_HOLD).collect();
    format!("the agents' acknowledgement of its release (finalizers {agents:?})")
}

/// The next step of taking the old lease back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The old lease is this attachment's own live lease (a repeated ADD whose record was lost).
    Own,
    /// Only the hold is left: end it, then create.
    EndHold,
    /// The old lease is live, or agents still hold it: wait for it to change.
    Wait,
}

/// Decides what to do with the identity's old lease `ep` for this attachment.
pub fn step(ep: &NetworkEndpoint, container_id: &str, if_name: &str) -> Step {
    let finalizers = ep.metadata.finalizers.as_deref().unwrap_or_default();
    if !ep.is_releasing() && ep.spec.container_id == container_id && ep.spec.if_name == if_name {
        Step::Own
    } else if ep.is_releasing() && finalizers.len() == 1 && is_held(finalizers) {
        Step::EndHold
    } else {
        Step::Wait
    }
}

/// What taking the old lease back ended with.
#[derive(Debug)]
pub enum Outcome {
    /// The old object is gone; the caller creates the new lease at this address.
    Free(std::net::IpAddr),
    /// The old lease is this attachment's own (a repeated ADD).
    Own(Box<NetworkEndpoint>),
}

/// Waits until the identity's old lease `old` is gone, ending its hold once
/// only the hold is left, within `deadline_wait`. On timeout the hold stays
/// and the error is [`Error::StickyWait`] (code 11): the runtime retries.
pub async fn take_back<S: Store>(
    store: &S,
    conf: &IpamConfig,
    id: &Identity,
    who: &crate::commands::Attachment,
    old: &NetworkEndpoint,
    wait: Duration,
) -> Result<Outcome> {
    let (who_container, who_if) = (who.key.container_id.as_str(), who.key.if_name.as_str());
    let started = tokio::time::Instant::now();
    let name = old.metadata.name.clone().unwrap_or_default();
    let ip = old.ip().ok_or_else(|| Error::InvalidLease { name: name.clone(), reason: "spec.ip".into() })?;
    let mut cur = old.clone();
    loop {
        match step(&cur, who_container, who_if) {
            Step::Own => return Ok(Outcome::Own(Box::new(cur))),
            Step::EndHold => {
                if store.end_hold(&cur, &id.pod_uid).await? {
                    // The API server deletes the object in that request: create at once,
                    // keeping the window in which the name is free to one round trip.
                    info!(lease = %name, %ip, pod_uid = %id.pod_uid, "sticky hold ended for the identity's new sandbox");
                    return Ok(Outcome::Free(ip));
                }
            }
            Step::Wait => {
                let left = wait.saturating_sub(started.elapsed());
                if left.is_zero() {
                    return Err(Error::StickyWait {
                        pool: conf.pool.clone(),
                        ip,
                        lease: name,
                        waiting_for: waiting_for(&cur),
                        waited: started.elapsed(),
                    });
                }
                // Agents that outlived the lease's forced-release bound lose their
                // finalizers, as in any forced release; the hold is kept.
                let stuck_in = stuck_in(store, conf, &cur);
                if stuck_in == Some(Duration::ZERO) && may_force(conf, who, &cur) {
                    if store.force_keep_hold(&cur).await? {
                        warn!(lease = %name, finalizers = ?cur.metadata.finalizers,
                            "forced release of a held lease: agents did not answer within forceReleaseAfter; hold kept");
                    }
                } else {
                    let rv = cur.metadata.resource_version.clone().unwrap_or_default();
                    let until_stuck = stuck_in.filter(|_| may_force(conf, who, &cur));
                    let pause = until_stuck.map_or(left, |d| left.min(d + Duration::from_millis(200)));
                    store.wait_for_change(&name, &rv, pause).await?;
                }
            }
        }
        match store.get(&name).await? {
            None => return Ok(Outcome::Free(ip)),
            // The same lease, changed: decide again.
            Some(ep) if ep.metadata.uid == cur.metadata.uid => cur = ep,
            // A successor under the name: of this identity (another of its
            // sandboxes) it is judged the same way; of anyone else, the IP is lost.
            Some(ep) if belongs_to(&ep, id) => cur = ep,
            Some(_) => return Ok(Outcome::Free(ip)),
        }
    }
}

/// How long until the releasing lease `ep` outlives its own forced-release
/// bound (zero once it has, on the API server's clock); `None` while it is live.
fn stuck_in<S: Store>(store: &S, conf: &IpamConfig, ep: &NetworkEndpoint) -> Option<Duration> {
    let since = ep.metadata.deletion_timestamp.as_ref()?;
    let bound = ep.spec.force_release_after.as_deref().and_then(duration::parse).unwrap_or(conf.force_release_after);
    let age = store.server_now().map_or(Duration::ZERO, |now| netendpoint_lease::clock::age_of(now, since));
    Some(bound.saturating_sub(age))
}

/// Whether this plugin may force the agents' finalizers off `ep`: its own
/// node's lease, or any lease with `crossNode: plugin`.
fn may_force(conf: &IpamConfig, who: &crate::commands::Attachment, ep: &NetworkEndpoint) -> bool {
    conf.cross_node == crate::config::CrossNode::Plugin || ep.spec.node == who.node
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<StickyConfig> {
        StickyConfig::parse(&v, Duration::from_secs(10), Duration::from_secs(50))
    }

    #[test]
    fn config_defaults_and_errors_name_the_field() {
        let c = parse(json!({})).unwrap();
        assert_eq!(c.kinds, vec!["StatefulSet".to_string()]);
        assert_eq!((c.sticky_for, c.wait_for_old), (Duration::from_secs(3600), Duration::from_secs(10)));
        let c =
            parse(json!({"kinds": ["StatefulSet", "VirtualMachineInstance"], "stickyFor": "5m", "waitForOld": "30s"}))
                .unwrap();
        assert_eq!(
            (c.kinds.len(), c.sticky_for, c.wait_for_old),
            (2, Duration::from_secs(300), Duration::from_secs(30))
        );
        for (bad, field) in [
            (json!({"kinds": []}), "ipam.sticky.kinds"),
            (json!({"kinds": ["apps/StatefulSet"]}), "ipam.sticky.kinds[0]"),
            (json!({"stickyFor": "forever"}), "ipam.sticky.stickyFor"),
            (json!({"stickyFor": "800h"}), "ipam.sticky.stickyFor"),
            (json!({"waitForOld": "55s"}), "ipam.sticky.waitForOld"),
            (json!({"waitFor": "5s"}), "ipam.sticky"),
            (json!("on"), "ipam.sticky"),
        ] {
            let e = parse(bad.clone()).unwrap_err();
            assert_eq!(e.code(), 7, "{bad}");
            assert!(e.to_string().contains(field), "{bad}: {e}");
        }
    }

    fn pod(uid: &str) -> PodIdentity {
        PodIdentity { namespace: "ns".into(), name: "web-0".into(), uid: uid.into() }
    }

    fn facts(uid: &str, kind: &str) -> PodFacts {
        PodFacts { uid: uid.into(), owner: Some((kind.into(), "web".into())), ..PodFacts::default() }
    }

    #[test]
    fn only_pods_of_a_configured_owner_kind_and_this_incarnation_are_sticky() {
        let c = parse(json!({})).unwrap();
        let id = identity(&c, &pod("u1"), Some(&facts("u1", "StatefulSet"))).unwrap();
        assert_eq!((id.label.as_str(), id.owner.1.as_str()), ("ns.web-0", "web"));
        assert_eq!(identity(&c, &pod("u1"), Some(&facts("u1", "ReplicaSet"))), None);
        assert_eq!(identity(&c, &pod("u1"), Some(&facts("u2", "StatefulSet"))), None, "another incarnation");
        assert_eq!(identity(&c, &pod("u1"), None), None, "no Pod object");
        let no_owner = PodFacts { uid: "u1".into(), ..PodFacts::default() };
        assert_eq!(identity(&c, &pod("u1"), Some(&no_owner)), None);
        assert!(identity(&c, &pod(""), Some(&facts("u1", "StatefulSet"))).is_some(), "runtime named no UID");
    }

    fn lease(container: &str, releasing: bool, finalizers: &[&str]) -> NetworkEndpoint {
        let spec = netendpoint_crd::NetworkEndpointSpec {
            pool: "p".into(),
            ip: "10.0.0.2".into(),
            prefix_length: 24,
            gateway: None,
            if_name: "eth0".into(),
            container_id: container.into(),
            node: "n1".into(),
            pod: None,
            network: None,
            force_release_after: None,
            static_ip: None,
            ..Default::default()
        };
        let mut ep = NetworkEndpoint::new("p.10.0.0.2", spec);
        ep.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
        if releasing {
            ep.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-01-01T00:00:00Z".parse().unwrap()));
        }
        ep
    }

    #[test]
    fn the_hold_ends_only_when_it_is_the_last_finalizer_of_a_release() {
        let hold = FINALIZER_STICKY_HOLD;
        assert_eq!(step(&lease("old", false, &[hold, "a/x"]), "new", "eth0"), Step::Wait, "old DEL not come");
        assert_eq!(step(&lease("old", true, &[hold, "a/x"]), "new", "eth0"), Step::Wait, "agent not done");
        assert_eq!(step(&lease("old", true, &["a/x", hold]), "new", "eth0"), Step::Wait);
        assert_eq!(step(&lease("old", true, &[hold]), "new", "eth0"), Step::EndHold);
        assert_eq!(step(&lease("new", false, &[hold]), "new", "eth0"), Step::Own, "repeated ADD");
        assert_eq!(step(&lease("new", true, &[hold]), "new", "eth0"), Step::EndHold, "own, released");
        assert!(waiting_for(&lease("old", false, &[hold])).contains("DEL of its previous sandbox old"));
        assert!(waiting_for(&lease("old", true, &[hold, "a/x"])).contains("[\"a/x\"]"));
    }

    #[test]
    fn a_sticky_lease_carries_label_owner_bound_and_hold_from_creation() {
        let c = parse(json!({"stickyFor": "2m"})).unwrap();
        let id = identity(&c, &pod("u1"), Some(&facts("u1", "StatefulSet"))).unwrap();
        let mut ep = lease("c", false, &["a/x"]);
        mark(&mut ep, &id);
        mark(&mut ep, &id);
        assert_eq!(ep.metadata.finalizers.as_deref().unwrap(), ["a/x".to_string(), FINALIZER_STICKY_HOLD.to_string()]);
        let ann = ep.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[ANNOTATION_STICKY_OWNER], "StatefulSet/web");
        assert_eq!(ann[ANNOTATION_STICKY_FOR], "120s");
        assert_eq!(ep.metadata.labels.as_ref().unwrap()[LABEL_STICKY_IDENTITY], "ns.web-0");
    }
}
