//! The one view of a lease that every reader shares.
//!
//! It is read from the object's spec and name, never from labels alone:
//! labels mirror the spec for selectors and people, but a label value is a
//! prefix of a long spec value, and the spec is what admission ties to the
//! name (see `docs/design.md`, "Trust").

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use netendpoint_crd::{
    ANNOTATION_STICKY_FOR, ANNOTATION_STICKY_OWNER, ClaimRef, FINALIZER_STICKY_HOLD, IncarnationRequest,
    LABEL_STICKY_IDENTITY, NetworkEndpoint, PodRef, duration, endpoint_name,
};

/// One lease as its readers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Object name (`<pool>.<ip>`).
    pub name: String,
    /// Object UID: the precondition of every write.
    pub uid: String,
    /// resourceVersion: the precondition of a forced release.
    pub resource_version: String,
    /// `spec.pool`.
    pub pool: String,
    /// `spec.ip`, when it parses and the name is the pool's name for it.
    pub ip: Option<IpAddr>,
    /// `spec.node`: the node whose sandbox holds the address.
    pub node: String,
    /// `spec.pod`, when the runtime named the Pod.
    pub pod: Option<PodRef>,
    /// When the release was requested (deletionTimestamp).
    pub releasing_since: Option<Timestamp>,
    /// Finalizers still on the object.
    pub finalizers: Vec<String>,
    /// The lease's own forced-release bound, stamped at creation.
    pub force_release_after: Option<Duration>,
    /// What makes the lease sticky, when it is: a lease of an older version
    /// held by the sticky-hold finalizer (see `docs/sticky-ips.md`).
    pub sticky: Option<Sticky>,
    /// The incarnation of a claim this endpoint is, when it is one.
    pub incarnation: Option<u32>,
    /// True when its sandbox asked for this address (`spec.static`), which
    /// may lie outside what the allocator hands out.
    pub static_ip: bool,
}

/// A sticky hold as its readers see it (see [`crate::hold`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Hold {
    /// Object name (`<pool>.<ip>`).
    pub name: String,
    /// Object UID.
    pub uid: String,
    /// resourceVersion: the precondition of every status write and of the delete.
    pub resource_version: String,
    /// `spec.pool`.
    pub pool: String,
    /// The held address.
    pub ip: IpAddr,
    /// The claim it holds the address for.
    pub claim: ClaimRef,
    /// How long the hold lasts once no incarnation is left.
    pub sticky_for: Option<Duration>,
    /// The latest incarnation created, and its endpoint's name.
    pub incarnation: Option<(u32, String)>,
    /// The incarnation asked for and not yet created.
    pub pending: Option<IncarnationRequest>,
    /// True once the controller decided to end it.
    pub releasing: bool,
    /// The object as read (for the patches, which test its resourceVersion).
    pub object: NetworkEndpoint,
}

impl Hold {
    /// The view of a hold; `None` for anything that is not a well-formed hold.
    pub fn of(ep: &NetworkEndpoint) -> Option<Self> {
        if !ep.is_hold() {
            return None;
        }
        let name = ep.metadata.name.clone()?;
        let ip = ep.ip().filter(|ip| endpoint_name(&ep.spec.pool, *ip) == name)?;
        let status = ep.status.clone().unwrap_or_default();
        Some(Hold {
            uid: ep.metadata.uid.clone()?,
            resource_version: ep.metadata.resource_version.clone().unwrap_or_default(),
            pool: ep.spec.pool.clone(),
            ip,
            claim: ep.spec.claim.clone()?,
            sticky_for: ep.spec.sticky_for.as_deref().and_then(duration::parse),
            incarnation: status.incarnation.zip(status.endpoint.clone()),
            pending: crate::hold::pending_request(ep),
            releasing: status.phase == Some(netendpoint_crd::HoldPhase::Releasing) || ep.is_releasing(),
            object: ep.clone(),
            name,
        })
    }
}

/// The sticky facts of a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sticky {
    /// The Pod's namespace.
    pub namespace: String,
    /// The Pod's name.
    pub pod: String,
    /// The controller owner's kind.
    pub owner_kind: String,
    /// The controller owner's name.
    pub owner: String,
    /// How long the hold lasts after the release was requested.
    pub sticky_for: Duration,
}

impl Lease {
    /// The view of a NetworkEndpoint that is an endpoint (not a hold);
    /// `None` without a name or a UID, and for a hold.
    pub fn of(ep: &NetworkEndpoint) -> Option<Self> {
        if ep.is_hold() {
            return None;
        }
        let name = ep.metadata.name.clone()?;
        let ip = ep.ip().filter(|ip| endpoint_name(&ep.spec.pool, *ip) == name);
        let sticky = Sticky::of(ep);
        Some(Lease {
            uid: ep.metadata.uid.clone()?,
            resource_version: ep.metadata.resource_version.clone().unwrap_or_default(),
            pool: ep.spec.pool.clone(),
            ip,
            node: ep.spec.node.clone(),
            pod: ep.spec.pod.clone(),
            releasing_since: ep.metadata.deletion_timestamp.as_ref().map(|t| t.0),
            finalizers: ep.metadata.finalizers.clone().unwrap_or_default(),
            force_release_after: ep.spec.force_release_after.as_deref().and_then(duration::parse),
            sticky,
            incarnation: ep.spec.incarnation,
            static_ip: ep.spec.static_ip == Some(true),
            name,
        })
    }

    /// The Pod UID, when the runtime named one.
    pub fn pod_uid(&self) -> Option<&str> {
        self.pod.as_ref().map(|p| p.uid.as_str()).filter(|u| !u.is_empty())
    }

    /// True while the sticky hold finalizer is on the lease.
    pub fn is_held(&self) -> bool {
        is_held(&self.finalizers)
    }
}

/// True if `finalizers` carry the sticky hold.
pub fn is_held(finalizers: &[String]) -> bool {
    finalizers.iter().any(|f| f == FINALIZER_STICKY_HOLD)
}

impl Sticky {
    /// The sticky facts of a lease: its Pod (spec), owner and `stickyFor`
    /// (annotations the plugin stamps); `None` for a lease that is not sticky.
    pub fn of(ep: &NetworkEndpoint) -> Option<Self> {
        ep.metadata.labels.as_ref()?.get(LABEL_STICKY_IDENTITY)?;
        let ann = ep.metadata.annotations.as_ref()?;
        let (kind, owner) = ann.get(ANNOTATION_STICKY_OWNER)?.split_once('/')?;
        let pod = ep.spec.pod.as_ref()?;
        Some(Sticky {
            namespace: pod.namespace.clone(),
            pod: pod.name.clone(),
            owner_kind: kind.to_string(),
            owner: owner.to_string(),
            sticky_for: ann.get(ANNOTATION_STICKY_FOR).and_then(|v| duration::parse(v))?,
        })
    }
}

/// The IP of a lease name `<pool>.<ip>`, whatever the pool.
pub fn ip_from_name(name: &str) -> Option<IpAddr> {
    let parts: Vec<&str> = name.rsplitn(5, '.').collect();
    if parts.len() == 5 {
        let v4 = format!("{}.{}.{}.{}", parts[3], parts[2], parts[1], parts[0]);
        if let Some(ip) = netendpoint_crd::parse_endpoint_name("x", &format!("x.{v4}")) {
            return Some(ip);
        }
    }
    let last = name.rsplit('.').next()?;
    netendpoint_crd::parse_endpoint_name("x", &format!("x.{last}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use netendpoint_crd::NetworkEndpointSpec;

    fn ep(name: &str, pool: &str, ip: &str) -> NetworkEndpoint {
        let spec = NetworkEndpointSpec {
            pool: pool.into(),
            ip: ip.into(),
            prefix_length: 24,
            gateway: None,
            if_name: "eth0".into(),
            container_id: "c".into(),
            node: "a-very-long-node-name".into(),
            pod: Some(PodRef { namespace: "ns".into(), name: "web-0".into(), uid: "u".into() }),
            network: None,
            force_release_after: Some("90s".into()),
            static_ip: None,
            ..Default::default()
        };
        let mut ep = NetworkEndpoint::new(name, spec);
        ep.metadata.uid = Some("uid".into());
        ep
    }

    #[test]
    fn a_lease_is_read_from_its_spec_and_name() {
        let l = Lease::of(&ep("pods.10.244.0.17", "pods", "10.244.0.17")).unwrap();
        assert_eq!(l.ip, "10.244.0.17".parse().ok());
        assert_eq!((l.pool.as_str(), l.node.as_str(), l.pod_uid()), ("pods", "a-very-long-node-name", Some("u")));
        assert_eq!(l.force_release_after, Some(Duration::from_secs(90)));
        // A name that is not the pool's name for spec.ip gives no address.
        assert_eq!(Lease::of(&ep("pods.10.244.0.18", "pods", "10.244.0.17")).unwrap().ip, None);
        let mut no_uid = ep("pods.10.244.0.17", "pods", "10.244.0.17");
        no_uid.metadata.uid = None;
        assert_eq!(Lease::of(&no_uid), None);
    }

    #[test]
    fn lease_names_give_their_ip_whatever_the_pool() {
        assert_eq!(ip_from_name("pods.10.244.0.17"), "10.244.0.17".parse().ok());
        assert_eq!(ip_from_name("a.b.c.10.0.0.1"), "10.0.0.1".parse().ok());
        assert_eq!(ip_from_name("v6.fd00-0000-0000-0000-0000-0000-0000-0011"), "fd00::11".parse().ok());
        assert_eq!(ip_from_name("pods.nonsense"), None);
    }
}
