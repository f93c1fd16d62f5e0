//! The sticky hold protocol (see `docs/sticky-ips.md`).
//!
//! A hold is the NetworkEndpoint `<pool>.<ip>` with `spec.role: Hold`. It
//! owns that name for its claim's whole life, so no other create of the
//! address can succeed. Each incarnation of the claim is its own endpoint,
//! `<pool>.<ip>-<k>`, which only the controller creates, and only once the
//! previous incarnation is gone:
//! 1. a node's plugin asks for incarnation `k + 1` by writing
//!    `status.request` of the hold, testing its UID and resourceVersion (the
//!    first incarnation is asked for by the hold's own spec);
//! 2. the controller checks the request (the Pod, its UID and the node it
//!    is bound to), waits until incarnation `k` is gone, creates `k + 1`
//!    and records it in the hold's status.
//!
//! For a claim that is not a StatefulSet's, the controller may accept a
//! checked request while incarnation `k` is still live (a VM's live
//! migration: the target Pod starts while the source runs). The asking ADD
//! then answers with the address at once; its endpoint still comes only
//! once `k` is gone, so agents never see two endpoints of one address. A
//! sandbox that goes before that withdraws its request.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, TestOperation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use netendpoint_crd::{HoldPhase, IncarnationRequest, NetworkEndpoint, NetworkEndpointSpec, incarnation_name};

/// The incarnation a hold asks for and has not got yet: its
/// `status.request` when that names the next incarnation, or, before any
/// incarnation exists, the first one its spec describes. `None` while the
/// hold is releasing.
pub fn pending_request(hold: &NetworkEndpoint) -> Option<IncarnationRequest> {
    let status = hold.status.clone().unwrap_or_default();
    if status.phase == Some(HoldPhase::Releasing) {
        return None;
    }
    let current = status.incarnation.unwrap_or(0);
    if let Some(req) = status.request.filter(|r| r.incarnation == current.saturating_add(1)) {
        return Some(req);
    }
    // A refused first request (a message and no request) asks for nothing more.
    (current == 0 && status.message.is_none()).then(|| IncarnationRequest {
        incarnation: 1,
        node: hold.spec.node.clone(),
        container_id: hold.spec.container_id.clone(),
        if_name: hold.spec.if_name.clone(),
        pod: hold.spec.pod.clone().unwrap_or_default(),
        accepted: false,
        // The hold's create is the request; the controller reads the hold
        // again just before it creates, so a hold rolled back is never served.
        deadline: None,
    })
}

/// The endpoint of incarnation `req` of `hold`: the hold's address and
/// claim, the request's sandbox, Pod and node, and the hold's
/// `endpointFinalizers`.
pub fn incarnation_object(hold: &NetworkEndpoint, req: &IncarnationRequest) -> Option<NetworkEndpoint> {
    let ip = hold.ip()?;
    let spec = NetworkEndpointSpec {
        pool: hold.spec.pool.clone(),
        ip: hold.spec.ip.clone(),
        prefix_length: hold.spec.prefix_length,
        gateway: hold.spec.gateway.clone(),
        if_name: req.if_name.clone(),
        container_id: req.container_id.clone(),
        node: req.node.clone(),
        pod: Some(req.pod.clone()),
        network: hold.spec.network.clone(),
        force_release_after: hold.spec.force_release_after.clone(),
        claim: hold.spec.claim.clone(),
        incarnation: Some(req.incarnation),
        ..NetworkEndpointSpec::default()
    };
    let finalizers = hold.spec.endpoint_finalizers.clone().filter(|f| !f.is_empty());
    Some(NetworkEndpoint {
        metadata: ObjectMeta {
            name: Some(incarnation_name(&spec.pool, ip, req.incarnation)),
            labels: Some(crate::labels::of(&spec)),
            annotations: crate::labels::annotations_of(&spec),
            finalizers,
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    })
}

fn ptr(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

fn test(tokens: &[&str], value: serde_json::Value) -> PatchOperation {
    PatchOperation::Test(TestOperation { path: ptr(tokens), value })
}

/// The status patch a plugin sends to ask for `req`: it tests the hold's
/// UID and resourceVersion, so a request never lands on a hold that
/// changed since it was read (another node's request, a new incarnation,
/// the start of a release).
pub fn request_patch(hold: &NetworkEndpoint, req: &IncarnationRequest) -> Patch {
    let mut ops = vec![
        test(&["metadata", "uid"], hold.metadata.uid.clone().unwrap_or_default().into()),
        test(&["metadata", "resourceVersion"], hold.metadata.resource_version.clone().unwrap_or_default().into()),
    ];
    let value = serde_json::to_value(req).unwrap_or_default();
    if hold.status.is_none() {
        ops.push(PatchOperation::Add(AddOperation {
            path: ptr(&["status"]),
            value: serde_json::json!({ "request": value }),
        }));
    } else {
        ops.push(PatchOperation::Add(AddOperation { path: ptr(&["status", "request"]), value }));
    }
    Patch(ops)
}

/// The status patch the controller sends once it created incarnation
/// `req.incarnation` as `endpoint`: tests the resourceVersion it read, sets
/// the incarnation and endpoint, and clears a request it served.
pub fn created_patch(hold: &NetworkEndpoint, req: &IncarnationRequest, endpoint: &str) -> Patch {
    let mut ops =
        vec![test(&["metadata", "resourceVersion"], hold.metadata.resource_version.clone().unwrap_or_default().into())];
    let status = hold.status.clone().unwrap_or_default();
    let mut next = status.clone();
    next.incarnation = Some(req.incarnation);
    next.endpoint = Some(endpoint.to_string());
    next.message = None;
    if next.request.as_ref().is_some_and(|r| r.incarnation <= req.incarnation) {
        next.request = None;
    }
    ops.push(PatchOperation::Add(AddOperation {
        path: ptr(&["status"]),
        value: serde_json::to_value(&next).unwrap_or_default(),
    }));
    Patch(ops)
}

/// The status patch the controller sends to start ending a hold: tests the
/// resourceVersion it read (so a request that came in between wins), sets
/// the phase and says why.
pub fn releasing_patch(hold: &NetworkEndpoint, why: &str) -> Patch {
    let mut status = hold.status.clone().unwrap_or_default();
    status.phase = Some(HoldPhase::Releasing);
    status.request = None;
    status.message = Some(why.chars().take(1024).collect());
    Patch(vec![
        test(&["metadata", "resourceVersion"], hold.metadata.resource_version.clone().unwrap_or_default().into()),
        PatchOperation::Add(AddOperation {
            path: ptr(&["status"]),
            value: serde_json::to_value(&status).unwrap_or_default(),
        }),
    ])
}

/// The status patch the controller sends when it accepts `req` early (the
/// previous incarnation still live): tests the resourceVersion it read and
/// marks the request accepted.
pub fn accepted_patch(hold: &NetworkEndpoint, req: &IncarnationRequest) -> Patch {
    let mut status = hold.status.clone().unwrap_or_default();
    status.request = Some(IncarnationRequest { accepted: true, ..req.clone() });
    status.message = None;
    Patch(vec![
        test(&["metadata", "resourceVersion"], hold.metadata.resource_version.clone().unwrap_or_default().into()),
        PatchOperation::Add(AddOperation {
            path: ptr(&["status"]),
            value: serde_json::to_value(&status).unwrap_or_default(),
        }),
    ])
}

/// The status patch a plugin sends to withdraw its request (its sandbox
/// went before the incarnation was created): tests the resourceVersion it
/// read, so that an incarnation created meanwhile is seen, not overwritten.
pub fn withdraw_patch(hold: &NetworkEndpoint) -> Patch {
    let mut status = hold.status.clone().unwrap_or_default();
    status.request = None;
    Patch(vec![
        test(&["metadata", "resourceVersion"], hold.metadata.resource_version.clone().unwrap_or_default().into()),
        PatchOperation::Add(AddOperation {
            path: ptr(&["status"]),
            value: serde_json::to_value(&status).unwrap_or_default(),
        }),
    ])
}

/// The hold of incarnation endpoint `name` (`<pool>.<ip>-<k>`): `<pool>.<ip>` and `k`.
pub fn hold_of_incarnation(name: &str) -> Option<(&str, u32)> {
    let (hold, k) = name.rsplit_once('-')?;
    let k: u32 = k.parse().ok()?;
    (k > 0 && hold.contains('.')).then_some((hold, k))
}

/// The status patch the controller sends when it refuses a request: tests
/// the resourceVersion, drops the request and says why.
pub fn refused_patch(hold: &NetworkEndpoint, why: &str) -> Patch {
    let mut status = hold.status.clone().unwrap_or_default();
    status.request = None;
    status.message = Some(why.chars().take(1024).collect());
    Patch(vec![
        test(&["metadata", "resourceVersion"], hold.metadata.resource_version.clone().unwrap_or_default().into()),
        PatchOperation::Add(AddOperation {
            path: ptr(&["status"]),
            value: serde_json::to_value(&status).unwrap_or_default(),
        }),
    ])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use netendpoint_crd::{ClaimRef, NetworkEndpointStatus, PodRef, Role};

    fn hold() -> NetworkEndpoint {
        let spec = NetworkEndpointSpec {
            pool: "p".into(),
            ip: "10.0.0.5".into(),
            prefix_length: 24,
            if_name: "eth0".into(),
            container_id: "c1".into(),
            node: "n1".into(),
            pod: Some(PodRef { namespace: "ns".into(), name: "web-0".into(), uid: "u1".into() }),
            role: Some(Role::Hold),
            claim: Some(ClaimRef { namespace: "ns".into(), name: "web-0.p".into(), uid: "k1".into() }),
            endpoint_finalizers: Some(vec!["a.example/x".into()]),
            force_release_after: Some("600s".into()),
            ..NetworkEndpointSpec::default()
        };
        let mut h = NetworkEndpoint::new("p.10.0.0.5", spec);
        h.metadata.uid = Some("h1".into());
        h.metadata.resource_version = Some("7".into());
        h
    }

    fn req(k: u32, node: &str) -> IncarnationRequest {
        IncarnationRequest {
            incarnation: k,
            node: node.into(),
            container_id: format!("c{k}"),
            if_name: "eth0".into(),
            pod: PodRef { namespace: "ns".into(), name: "web-0".into(), uid: format!("u{k}") },
            accepted: false,
            deadline: None,
        }
    }

    #[test]
    fn the_first_incarnation_is_the_holds_spec_and_later_ones_are_requested() {
        let mut h = hold();
        let first = pending_request(&h).unwrap();
        assert_eq!((first.incarnation, first.node.as_str(), first.container_id.as_str()), (1, "n1", "c1"));
        let ep = incarnation_object(&h, &first).unwrap();
        assert_eq!(ep.metadata.name.as_deref(), Some("p.10.0.0.5-1"));
        assert_eq!(ep.spec.incarnation, Some(1));
        assert_eq!(ep.metadata.finalizers.as_deref(), Some(&["a.example/x".to_string()][..]));
        assert!(ep.spec.role.is_none(), "an incarnation is an endpoint");
        h.status = Some(NetworkEndpointStatus {
            incarnation: Some(1),
            endpoint: Some("p.10.0.0.5-1".into()),
            ..NetworkEndpointStatus::default()
        });
        assert_eq!(pending_request(&h), None, "served");
        // A request for anything but the next incarnation is stale.
        h.status.as_mut().unwrap().request = Some(req(3, "n2"));
        assert_eq!(pending_request(&h), None);
        h.status.as_mut().unwrap().request = Some(req(2, "n2"));
        assert_eq!(pending_request(&h).unwrap().node, "n2");
        h.status.as_mut().unwrap().phase = Some(HoldPhase::Releasing);
        assert_eq!(pending_request(&h), None, "a releasing hold serves nothing");
    }

    #[test]
    fn a_request_tests_uid_and_version() {
        let h = hold();
        let p = serde_json::to_value(request_patch(&h, &req(2, "n2"))).unwrap();
        assert_eq!(p[0], serde_json::json!({"op": "test", "path": "/metadata/uid", "value": "h1"}));
        assert_eq!(p[1], serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"}));
        assert_eq!(p[2]["path"], "/status");
        assert_eq!(p[2]["value"]["request"]["node"], "n2");
    }
}
