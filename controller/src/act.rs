//! The writes of the actions [`crate::decide`] chose. Each one names its
//! object by name and UID (and resourceVersion where it acts on what it
//! read); one that fails is logged and decided again on a later pass.
//!
//! The writes the API server cannot check rest on reads made here, live,
//! just before the write: an incarnation is created only after reading its
//! Pod (bound to the asking node, of the claim) and reading the previous
//! incarnation gone.

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event as Recorded, EventType};
use netendpoint_crd::ipamclaim::{
    IPAMClaim, IPAMClaimSpec, LABEL_STATEFULSET, NETWORKS_ANNOTATION, statefulset_claim_name,
};
use netendpoint_crd::{
    FINALIZER_STICKY_HOLD, IncarnationRequest, NetworkEndpoint, NetworkEndpointNeed, NetworkEndpointNeedStatus,
    REASON_FORCED_RELEASE, REASON_INCARNATION_ACCEPTED, REASON_INCARNATION_CREATED, REASON_INCARNATION_REFUSED,
    REASON_INCARNATION_WAITS, REASON_NODE_VANISHED, REASON_POD_GONE, REASON_STICKY_HOLD_ENDED, REASON_WAITING_FOR_IP,
    duration,
};
use netendpoint_lease::hold as proto;
use netendpoint_lease::outcome::{Guard, unless_changed};
use tracing::{debug, info, warn};

use crate::claims;
use crate::context::Context;
use crate::decide::{Action, ForceFor, Hold, HoldEnd, Lease, PressureFor, Waiter};

fn entries(ctl: &Context) -> Api<NetworkEndpointNeed> {
    Api::all(ctl.client.clone())
}

/// Writes a queue entry's status (testing its UID, so a successor in the
/// same slot is never touched); the first time, records on its Pod where
/// it stands in the queue.
async fn promise(
    ctl: &Context,
    w: &Waiter,
    status: &NetworkEndpointNeedStatus,
    (place, of): (usize, usize),
) -> kube::Result<()> {
    let p = json_patch::Patch(vec![
        json_patch::PatchOperation::Test(json_patch::TestOperation {
            path: json_patch::jsonptr::PointerBuf::from_tokens(["metadata", "uid"]),
            value: w.uid.clone().into(),
        }),
        json_patch::PatchOperation::Add(json_patch::AddOperation {
            path: json_patch::jsonptr::PointerBuf::from_tokens(["status"]),
            value: serde_json::to_value(status).unwrap_or_default(),
        }),
    ]);
    match entries(ctl).patch_status(&w.name, &PatchParams::default(), &Patch::Json::<()>(p)).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() || s.code == 422 => {
            debug!(entry = %w.name, "queue entry gone or replaced before its status was written");
            return Ok(());
        }
        Err(e) => return Err(e),
    }
    if let Some(p) = &status.promise {
        info!(entry = %w.name, pool = %w.pool, ip = %p.ip, releasing = p.releasing, place, of, "address promised to a waiting ADD");
    }
    if w.status.arrival.is_none() {
        let family = match w.family {
            netendpoint_crd::IpFamily::IPv4 => "IPv4",
            netendpoint_crd::IpFamily::IPv6 => "IPv6",
        };
        let note = format!(
            "ADD waits for an {family} address of full pool {}: place {place} of {of} in its queue \
             (NetworkEndpointNeed {}), served in arrival order as addresses are released",
            w.pool, w.name
        );
        let regarding = netendpoint_lease::events::pod_ref(&w.pod.namespace, &w.pod.name, &w.pod.uid);
        let ev = Recorded {
            type_: EventType::Normal,
            reason: REASON_WAITING_FOR_IP.into(),
            note: Some(note),
            action: REASON_WAITING_FOR_IP.into(),
            secondary: None,
        };
        // For people: written beside the pass, which the next promise may be waiting for.
        let recorder = ctl.recorder.clone();
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&ev, &regarding).await {
                warn!(error = %e, "cannot record event");
            }
        });
    }
    Ok(())
}

/// Deletes a queue entry nobody waits for (UID precondition).
async fn drop_entry(ctl: &Context, w: &Waiter, why: &str) -> kube::Result<()> {
    let dp = DeleteParams {
        preconditions: Some(Preconditions { uid: Some(w.uid.clone()), resource_version: None }),
        ..DeleteParams::default()
    };
    match entries(ctl).delete(&w.name, &dp).await {
        Ok(_) => {
            info!(entry = %w.name, pod = %format!("{}/{}", w.pod.namespace, w.pod.name), %why, "queue entry deleted");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Why pool pressure must not end `hold` for the waiting ADD `w`, read from
/// the API server now (never from the watch): the ADD no longer waits (its
/// entry is gone, replaced, promised an address, or past its deadline), or
/// the claim's identity is coming back (its Pod exists, or its StatefulSet
/// still wants its ordinal). `None` when it may end.
async fn pressure_refusal(ctl: &Context, hold: &Hold, w: &PressureFor) -> kube::Result<Option<String>> {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::Pod;
    let Some(entry) = entries(ctl).get_opt(&w.entry).await? else {
        return Ok(Some(format!("the waiting ADD's {} is gone: it was served or gave up", w.entry)));
    };
    if w.queued {
        let Some(now) = ctl.clock.now() else { return Ok(Some("no server time yet".into())) };
        match Waiter::of(&entry) {
            Some(x) if x.uid != w.version => return Ok(Some(format!("{} is another ADD's now", w.entry))),
            Some(x) if x.promise().is_some() => return Ok(Some(format!("{} was promised an address", w.entry))),
            Some(x) if x.deadline <= now => return Ok(Some(format!("{} stopped waiting", w.entry))),
            Some(_) => {}
            None => return Ok(Some(format!("{} is no queue entry", w.entry))),
        }
    }
    let ns = &hold.claim.namespace;
    let claims: Api<IPAMClaim> = Api::namespaced(ctl.client.clone(), ns);
    let claim = claims.get_opt(&hold.claim.name).await?;
    let pods: Api<Pod> = Api::namespaced(ctl.client.clone(), ns);
    let statefulset = claim.as_ref().and_then(|c| c.metadata.labels.as_ref()?.get(LABEL_STATEFULSET).cloned());
    let pod_name = match &statefulset {
        Some(_) => hold.claim.name.strip_suffix(&format!(".{}", hold.pool)).map(str::to_string),
        None => claim.as_ref().and_then(|c| c.status.as_ref()?.owner_pod.as_ref()).map(|o| o.name.clone()),
    };
    if let Some(pod) = &pod_name
        && pods.get_metadata_opt(pod).await?.is_some()
    {
        return Ok(Some(format!("the claim's Pod {ns}/{pod} exists: its identity is coming back")));
    }
    if let (Some(sts), Some(pod)) = (&statefulset, &pod_name) {
        let sets: Api<StatefulSet> = Api::namespaced(ctl.client.clone(), ns);
        let replicas = sets.get_opt(sts).await?.map(|s| s.spec.and_then(|sp| sp.replicas).unwrap_or(1));
        if let (Some(r), Some(o)) = (replicas, netendpoint_crd::ipamclaim::statefulset_ordinal(sts, pod))
            && r > 0
            && o < i64::from(r)
        {
            return Ok(Some(format!("StatefulSet {ns}/{sts} still wants ordinal {o}")));
        }
    }
    Ok(None)
}

/// Why `req` is not to be served now, read from the API server: the hold
/// is gone or another one, or no longer asks for it.
async fn stale_request(ctl: &Context, hold: &Hold, req: &IncarnationRequest) -> kube::Result<Option<String>> {
    let Some(now) = endpoints(ctl).get_opt(&hold.name).await? else { return Ok(Some("the hold is gone".into())) };
    if now.metadata.uid.as_deref() != Some(hold.uid.as_str()) {
        return Ok(Some("the hold is another one".into()));
    }
    let pending = proto::pending_request(&now);
    if pending.as_ref().is_none_or(|p| p.incarnation != req.incarnation || p.container_id != req.container_id) {
        return Ok(Some("the hold no longer asks for it".into()));
    }
    Ok(None)
}

/// True when too little of the asking ADD's wait is left for it to see an
/// incarnation or an acceptance before it gives up (its deadline, on the
/// API server's clock): then nothing is made for it.
fn too_late(ctl: &Context, req: &IncarnationRequest) -> bool {
    match (&req.deadline, ctl.clock.now()) {
        (Some(d), Some(now)) => netendpoint_lease::age_at_least(d.0, now) < crate::decide::DEADLINE_MARGIN,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

fn endpoints(ctl: &Context) -> Api<NetworkEndpoint> {
    Api::all(ctl.client.clone())
}

/// Records an Event about lease (or hold) `name`/`uid`.
async fn record(ctl: &Context, name: &str, uid: &str, reason: &str, note: String, warning: bool) {
    let regarding = netendpoint_lease::events::lease_ref(name, uid);
    let ev = Recorded {
        type_: if warning { EventType::Warning } else { EventType::Normal },
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: reason.into(),
        secondary: None,
    };
    if let Err(e) = ctl.recorder.publish(&ev, &regarding).await {
        warn!(reason, error = %e, "cannot record event");
    }
}

/// Deletes exactly `name`/`uid`; false when it is gone or the name holds another object.
async fn delete(ctl: &Context, name: &str, uid: &str, resource_version: Option<&str>) -> kube::Result<bool> {
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: resource_version.map(str::to_string),
        }),
        ..DeleteParams::default()
    };
    Ok(unless_changed(endpoints(ctl).delete(name, &dp).await, Guard::Preconditions)?.is_some())
}

/// Applies a JSON patch; false when it is gone or a test failed.
async fn patch(ctl: &Context, name: &str, p: json_patch::Patch, status: bool) -> kube::Result<bool> {
    let api = endpoints(ctl);
    let pp = PatchParams::default();
    let res = if status {
        api.patch_status(name, &pp, &Patch::Json::<()>(p)).await
    } else {
        api.patch(name, &pp, &Patch::Json::<()>(p)).await
    };
    Ok(unless_changed(res, Guard::Tests)?.is_some())
}

/// Takes one action.
pub async fn act(ctl: &Context, action: &Action) {
    let res = match action {
        Action::Reclaim { lease } => reclaim(ctl, lease).await,
        Action::DeleteLeak { lease } => delete_leak(ctl, lease).await,
        Action::Force { lease, age, bound, why } => force(ctl, lease, *age, *bound, why).await,
        Action::CreateIncarnation { hold, request } => create_incarnation(ctl, hold, request).await,
        Action::AcceptIncarnation { hold, request } => accept_incarnation(ctl, hold, request).await,
        Action::Promise { waiter, status, place } => promise(ctl, waiter, status, *place).await,
        Action::DropEntry { waiter, why } => drop_entry(ctl, waiter, why).await,
        Action::ReleaseHold { hold, reason, for_waiter } => release_hold(ctl, hold, reason, for_waiter.as_ref()).await,
        Action::DeleteHold { hold } => delete_hold(ctl, hold).await,
        Action::EndLegacyHold { lease, reason } => end_legacy_hold(ctl, lease, reason).await,
        Action::CreateClaim { namespace, name, network, statefulset, legacy } => {
            create_claim(ctl, namespace, name, network, statefulset, legacy.as_deref()).await
        }
        Action::DeleteClaim { namespace, name, uid } => delete_claim(ctl, namespace, name, uid).await,
    };
    if let Err(e) = res {
        if let Some(missing) = netendpoint_crd::admission::MissingParams::of_error(&e) {
            warn!(error = %missing, action = ?std::mem::discriminant(action), "action refused; decided again on a later pass");
            if let Some((name, uid)) = regarding(action)
                && first_report(name, &missing.policy)
            {
                let note = format!("netendpoint-controller could not act on {name}: {missing}");
                record(ctl, name, uid, netendpoint_crd::REASON_ADMISSION_PARAMS_MISSING, note, true).await;
            }
            return;
        }
        warn!(error = %e, action = ?std::mem::discriminant(action), "action failed; decided again on a later pass");
    }
}

/// The lease or hold `action` writes (name, UID), if it writes one.
fn regarding(action: &Action) -> Option<(&str, &str)> {
    match action {
        Action::Reclaim { lease } | Action::DeleteLeak { lease } | Action::Force { lease, .. } => {
            Some((&lease.name, &lease.uid))
        }
        Action::EndLegacyHold { lease, .. } => Some((&lease.name, &lease.uid)),
        Action::CreateIncarnation { hold, .. }
        | Action::AcceptIncarnation { hold, .. }
        | Action::ReleaseHold { hold, .. }
        | Action::DeleteHold { hold } => Some((&hold.name, &hold.uid)),
        _ => None,
    }
}

/// True the first time (in this process, of the last thousand) that the
/// refusal of `policy` is reported about object `name`: an Event each
/// pass would repeat what the first one said.
fn first_report(name: &str, policy: &str) -> bool {
    static REPORTED: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());
    let Ok(mut seen) = REPORTED.lock() else { return true };
    let key = (name.to_string(), policy.to_string());
    if seen.contains(&key) {
        return false;
    }
    if seen.len() >= 1000 {
        seen.remove(0);
    }
    seen.push(key);
    true
}

/// Ends sticky hold `hold` for `reason`; for pool pressure only after
/// [`pressure_refusal`] found nothing against it.
async fn release_hold(
    ctl: &Context,
    hold: &Hold,
    reason: &HoldEnd,
    for_waiter: Option<&PressureFor>,
) -> kube::Result<()> {
    if let Some(w) = for_waiter {
        match pressure_refusal(ctl, hold, w).await {
            Ok(None) => {}
            Ok(Some(why)) => {
                info!(hold = %hold.name, entry = %w.entry, %why, "pool pressure ends no hold");
                return Ok(());
            }
            Err(e) => {
                warn!(hold = %hold.name, error = %e, "cannot check pool pressure; ending no hold");
                return Ok(());
            }
        }
    }
    let why = reason.describe();
    match patch(ctl, &hold.name, proto::releasing_patch(&hold.object, why), true).await? {
        true => {
            info!(hold = %hold.name, reason = ?reason, "sticky hold ends: {why}");
            let note =
                format!("sticky hold {} of claim {}/{} ends: {why}", hold.name, hold.claim.namespace, hold.claim.name);
            record(ctl, &hold.name, &hold.uid, REASON_STICKY_HOLD_ENDED, note, false).await;
        }
        false => debug!(hold = %hold.name, "changed before its release began"),
    }
    Ok(())
}

/// Ends the sticky hold of a lease of an earlier version (its hold finalizer).
async fn end_legacy_hold(ctl: &Context, lease: &Lease, reason: &HoldEnd) -> kube::Result<()> {
    let Some(i) = lease.finalizers.iter().position(|f| f == FINALIZER_STICKY_HOLD) else { return Ok(()) };
    let p = netendpoint_lease::patch::remove_finalizer(&lease.uid, i, FINALIZER_STICKY_HOLD);
    if patch(ctl, &lease.name, p, false).await? {
        info!(lease = %lease.name, reason = ?reason, "legacy sticky hold ended: {}", reason.describe());
        let note = format!("sticky hold of {} ended: {}", lease.name, reason.describe());
        record(ctl, &lease.name, &lease.uid, REASON_STICKY_HOLD_ENDED, note, false).await;
    }
    Ok(())
}

/// Deletes the claim of a StatefulSet Pod, if it is still the one with `uid`.
async fn delete_claim(ctl: &Context, namespace: &str, name: &str, uid: &str) -> kube::Result<()> {
    let api: Api<IPAMClaim> = Api::namespaced(ctl.client.clone(), namespace);
    let dp = DeleteParams {
        preconditions: Some(Preconditions { uid: Some(uid.to_string()), resource_version: None }),
        ..DeleteParams::default()
    };
    if unless_changed(api.delete(name, &dp).await, Guard::Preconditions)?.is_some() {
        info!(claim = %format!("{namespace}/{name}"), "StatefulSet Pod claim deleted: scaled down or gone");
    }
    Ok(())
}

async fn reclaim(ctl: &Context, lease: &Lease) -> kube::Result<()> {
    if delete(ctl, &lease.name, &lease.uid, None).await? {
        warn!(lease = %lease.name, node = %lease.node, "node absent for the grace: releasing its lease");
        ctl.metrics.reclaimed(&lease.pool);
        let note = format!("node {} is gone: release of {} requested", lease.node, lease.name);
        record(ctl, &lease.name, &lease.uid, REASON_NODE_VANISHED, note, true).await;
    }
    Ok(())
}

async fn delete_leak(ctl: &Context, lease: &Lease) -> kube::Result<()> {
    if delete(ctl, &lease.name, &lease.uid, None).await? {
        let pod_uid = lease.pod_uid().unwrap_or_default();
        warn!(lease = %lease.name, pod_uid, "pod gone for the grace: releasing its lease");
        ctl.metrics.leaked(&lease.pool);
        let note = format!("pod UID {pod_uid} is gone: release of {} requested", lease.name);
        record(ctl, &lease.name, &lease.uid, REASON_POD_GONE, note, true).await;
    }
    Ok(())
}

async fn force(
    ctl: &Context,
    lease: &Lease,
    age: std::time::Duration,
    bound: std::time::Duration,
    why: &ForceFor,
) -> kube::Result<()> {
    let p = netendpoint_lease::patch::force_release(&lease.uid, &lease.resource_version);
    if !patch(ctl, &lease.name, p, false).await? {
        debug!(lease = %lease.name, "changed or gone before the forced release");
        return Ok(());
    }
    let for_what = match why {
        ForceFor::Need(key) => format!("a waiting ADD ({key})"),
        ForceFor::Incarnation(hold) => format!("the next incarnation of sticky hold {hold}"),
    };
    warn!(lease = %lease.name, finalizers = ?lease.finalizers, releasing_for_ms = age.as_millis() as u64,
        bound = %duration::format(bound), for_what = %for_what,
        "forced release: finalizers did not answer within forceReleaseAfter, and the address is needed");
    ctl.metrics.forced(&lease.pool);
    let note = format!(
        "{} released by force after {:.1}s for {for_what}: finalizers {:?} did not answer within forceReleaseAfter ({})",
        lease.name,
        age.as_secs_f64(),
        lease.finalizers,
        duration::format(bound)
    );
    record(ctl, &lease.name, &lease.uid, REASON_FORCED_RELEASE, note, true).await;
    Ok(())
}

/// Why the Pod named by `req` may not continue `hold`'s claim; `None` when
/// it may: it exists with the request's UID, is bound to the asking node,
/// is not being deleted, and is the claim's Pod (a StatefulSet claim's own
/// Pod, controlled by that StatefulSet, or a Pod whose network selection
/// names the claim).
async fn refusal(ctl: &Context, hold: &Hold, req: &IncarnationRequest) -> kube::Result<Option<String>> {
    use k8s_openapi::api::core::v1::Pod;
    if req.pod.namespace != hold.claim.namespace {
        return Ok(Some(format!("Pod {}/{} is not in the claim's namespace", req.pod.namespace, req.pod.name)));
    }
    let pods: Api<Pod> = Api::namespaced(ctl.client.clone(), &req.pod.namespace);
    let Some(pod) = pods.get_opt(&req.pod.name).await? else {
        return Ok(Some(format!("Pod {}/{} does not exist", req.pod.namespace, req.pod.name)));
    };
    if pod.metadata.uid.as_deref() != Some(req.pod.uid.as_str()) {
        return Ok(Some(format!("Pod {}/{} is another incarnation (UID)", req.pod.namespace, req.pod.name)));
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Ok(Some(format!("Pod {}/{} is being deleted", req.pod.namespace, req.pod.name)));
    }
    let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    if bound != Some(req.node.as_str()) {
        return Ok(Some(format!(
            "Pod {}/{} is bound to node {:?}, not to the asking node {}",
            req.pod.namespace,
            req.pod.name,
            bound.unwrap_or_default(),
            req.node
        )));
    }
    let claim_api: Api<IPAMClaim> = Api::namespaced(ctl.client.clone(), &hold.claim.namespace);
    let Some(claim) = claim_api.get_opt(&hold.claim.name).await? else {
        return Ok(Some(format!("claim {}/{} is gone", hold.claim.namespace, hold.claim.name)));
    };
    if claim.metadata.uid.as_deref() != Some(hold.claim.uid.as_str()) {
        return Ok(Some(format!("claim {}/{} is another claim now", hold.claim.namespace, hold.claim.name)));
    }
    // Per family: a dual-stack claim shows one address of each.
    let shown: Vec<_> = claims::facts(&claim).ips.into_iter().filter(|ip| ip.is_ipv4() == hold.ip.is_ipv4()).collect();
    if !shown.is_empty() && !shown.contains(&hold.ip) {
        return Ok(Some(format!(
            "claim {}/{} holds another address ({})",
            hold.claim.namespace,
            hold.claim.name,
            shown.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        )));
    }
    let statefulset = claim.metadata.labels.as_ref().and_then(|l| l.get(LABEL_STATEFULSET));
    let of_claim = if let Some(sts) = statefulset {
        // The StatefulSet's own Pod: named for the claim, and controlled by
        // that StatefulSet (a bare Pod of the same name is not).
        let owned = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.kind == "StatefulSet" && &o.name == sts);
        owned && statefulset_claim_name(&req.pod.name, &hold.pool).as_deref() == Some(hold.claim.name.as_str())
    } else {
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(NETWORKS_ANNOTATION))
            .and_then(|v| serde_json::from_str::<Vec<serde_json::Value>>(v).ok())
            .is_some_and(|list| {
                list.iter()
                    .any(|e| e.get("ipam-claim-reference").and_then(|r| r.as_str()) == Some(hold.claim.name.as_str()))
            })
    };
    if !of_claim {
        return Ok(Some(format!(
            "Pod {}/{} is not the Pod of claim {}",
            req.pod.namespace, req.pod.name, hold.claim.name
        )));
    }
    Ok(None)
}

/// Checks the request as for a creation and, if its Pod may continue the
/// claim, marks it accepted: the asking ADD answers with the address; the
/// endpoint follows once the previous incarnation is gone.
async fn accept_incarnation(ctl: &Context, hold: &Hold, req: &IncarnationRequest) -> kube::Result<()> {
    if let Some(why) = stale_request(ctl, hold, req).await? {
        debug!(hold = %hold.name, incarnation = req.incarnation, %why, "not serving the request");
        return Ok(());
    }
    if let Some(why) = refusal(ctl, hold, req).await? {
        warn!(hold = %hold.name, incarnation = req.incarnation, %why, "incarnation refused");
        if patch(ctl, &hold.name, proto::refused_patch(&hold.object, &why), true).await? {
            let note = format!("incarnation {} of {} refused: {why}", req.incarnation, hold.name);
            record(ctl, &hold.name, &hold.uid, REASON_INCARNATION_REFUSED, note, true).await;
        }
        return Ok(());
    }
    if too_late(ctl, req) {
        debug!(hold = %hold.name, incarnation = req.incarnation, "too little of the asking ADD's wait is left: not answered");
        return Ok(());
    }
    // Early only for the Pod the VM's own controller names as the target of
    // its live migration; any other Pod naming the claim waits until the
    // current incarnation is gone, as a StatefulSet's Pod does.
    if let Err(why) = crate::migration::target(ctl, hold, req).await? {
        info!(hold = %hold.name, incarnation = req.incarnation, %why, "not answered early");
        let note = format!(
            "incarnation {} for Pod {}/{} is not answered while incarnation {} lives: {why}; it is created once that one is gone",
            req.incarnation,
            req.pod.namespace,
            req.pod.name,
            req.incarnation.saturating_sub(1)
        );
        record(ctl, &hold.name, &hold.uid, REASON_INCARNATION_WAITS, note, false).await;
        return Ok(());
    }
    if patch(ctl, &hold.name, proto::accepted_patch(&hold.object, req), true).await? {
        info!(hold = %hold.name, incarnation = req.incarnation, node = %req.node,
            pod = %format!("{}/{}", req.pod.namespace, req.pod.name), "request accepted while the previous incarnation lives");
        let note = format!(
            "incarnation {} for Pod {}/{} on node {} accepted while incarnation {} lives (live migration): \
             its endpoint follows once that one is gone",
            req.incarnation,
            req.pod.namespace,
            req.pod.name,
            req.node,
            req.incarnation.saturating_sub(1)
        );
        record(ctl, &hold.name, &hold.uid, REASON_INCARNATION_ACCEPTED, note, false).await;
    }
    Ok(())
}

async fn create_incarnation(ctl: &Context, hold: &Hold, req: &IncarnationRequest) -> kube::Result<()> {
    if let Some(why) = stale_request(ctl, hold, req).await? {
        debug!(hold = %hold.name, incarnation = req.incarnation, %why, "not serving the request");
        return Ok(());
    }
    if let Some(why) = refusal(ctl, hold, req).await? {
        warn!(hold = %hold.name, incarnation = req.incarnation, %why, "incarnation refused");
        if patch(ctl, &hold.name, proto::refused_patch(&hold.object, &why), true).await? {
            let note = format!("incarnation {} of {} refused: {why}", req.incarnation, hold.name);
            record(ctl, &hold.name, &hold.uid, REASON_INCARNATION_REFUSED, note, true).await;
        }
        return Ok(());
    }
    if too_late(ctl, req) {
        debug!(hold = %hold.name, incarnation = req.incarnation, "too little of the asking ADD's wait is left: not created");
        return Ok(());
    }
    // The previous incarnation must be gone, read now (not from the watch).
    if let Some((_, previous)) = &hold.incarnation
        && endpoints(ctl).get_opt(previous).await?.is_some()
    {
        debug!(hold = %hold.name, %previous, "previous incarnation still there");
        return Ok(());
    }
    // The claim shows its address before any incarnation exists, so that
    // the Pod that continues the claim next finds the hold by it.
    if !write_claim_status(ctl, hold, Some(&req.pod.name)).await? {
        return Ok(());
    }
    let Some(ep) = proto::incarnation_object(&hold.object, req) else { return Ok(()) };
    let name = ep.metadata.name.clone().unwrap_or_default();
    match endpoints(ctl).create(&PostParams::default(), &ep).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_already_exists() => {
            // Created in an earlier pass whose status write did not land: go on if it is this request's.
            let same = endpoints(ctl).get_opt(&name).await?.is_some_and(|e| e.spec.container_id == req.container_id);
            if !same {
                return Ok(());
            }
        }
        Err(e) => return Err(e),
    }
    if !patch(ctl, &hold.name, proto::created_patch(&hold.object, req, &name), true).await? {
        // The hold changed since it was read. If it no longer asks for this
        // request (its ADD gave up and withdrew it), the incarnation is for
        // a sandbox that is gone: delete it now. Otherwise the status is
        // fixed on a later pass.
        let asks = endpoints(ctl).get_opt(&hold.name).await?.is_some_and(|h| {
            proto::pending_request(&h)
                .is_some_and(|p| p.incarnation == req.incarnation && p.container_id == req.container_id)
                || h.status.as_ref().and_then(|s| s.endpoint.as_deref()) == Some(name.as_str())
        });
        if !asks {
            if let Some(made) = endpoints(ctl).get_opt(&name).await?
                && made.spec.container_id == req.container_id
            {
                let uid = made.metadata.uid.clone().unwrap_or_default();
                delete(ctl, &name, &uid, None).await?;
                warn!(hold = %hold.name, endpoint = %name, "request withdrawn while its incarnation was made: deleted it");
            }
            return Ok(());
        }
        debug!(hold = %hold.name, "the hold changed since it was read; its status is fixed on a later pass");
    }
    info!(hold = %hold.name, endpoint = %name, node = %req.node, pod = %format!("{}/{}", req.pod.namespace, req.pod.name),
        "incarnation created");
    let note = format!(
        "incarnation {} ({name}) created for Pod {}/{} on node {}",
        req.incarnation, req.pod.namespace, req.pod.name, req.node
    );
    record(ctl, &hold.name, &hold.uid, REASON_INCARNATION_CREATED, note, false).await;
    Ok(())
}

/// Writes the claim's address of the hold's family and its owner Pod
/// (`None`: the claim keeps no address of that family); the address of the
/// other family, a dual-stack claim's other hold's, stays. Read, then
/// patched with the read resourceVersion: false when the claim is gone, is
/// another claim now, or changed meanwhile (a later pass writes it).
async fn write_claim_status(ctl: &Context, hold: &Hold, owner: Option<&str>) -> kube::Result<bool> {
    let api: Api<IPAMClaim> = Api::namespaced(ctl.client.clone(), &hold.claim.namespace);
    let Some(claim) = api.get_opt(&hold.claim.name).await? else { return Ok(false) };
    if claim.metadata.uid.as_deref() != Some(hold.claim.uid.as_str()) {
        return Ok(false);
    }
    let mut ips: Vec<String> = claim
        .status
        .iter()
        .flat_map(|s| &s.ips)
        .filter(|a| {
            a.split('/')
                .next()
                .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
                .is_some_and(|ip| ip.is_ipv4() != hold.ip.is_ipv4())
        })
        .cloned()
        .collect();
    let owner_pod = match owner {
        Some(pod) => {
            ips.push(format!("{}/{}", hold.ip, hold.object.spec.prefix_length));
            serde_json::json!({"name": pod})
        }
        None if ips.is_empty() => serde_json::Value::Null,
        None => serde_json::to_value(claim.status.as_ref().and_then(|s| s.owner_pod.clone())).unwrap_or_default(),
    };
    ips.sort();
    let now_ips: Vec<String> = claim.status.as_ref().map(|s| s.ips.clone()).unwrap_or_default();
    let now_owner = serde_json::to_value(claim.status.as_ref().and_then(|s| s.owner_pod.clone())).unwrap_or_default();
    if now_ips == ips && now_owner == owner_pod {
        return Ok(true);
    }
    let body = serde_json::json!({
        "metadata": { "uid": hold.claim.uid, "resourceVersion": claim.metadata.resource_version },
        "status": { "ips": ips, "ownerPod": owner_pod },
    });
    // The body's uid and resourceVersion are preconditions: a 422 is a status the schema refused.
    let res = api.patch_status(&hold.claim.name, &PatchParams::default(), &Patch::Merge(body)).await;
    Ok(unless_changed(res, Guard::Preconditions)?.is_some())
}

async fn delete_hold(ctl: &Context, hold: &Hold) -> kube::Result<()> {
    if let Some((_, current)) = &hold.incarnation
        && endpoints(ctl).get_opt(current).await?.is_some()
    {
        return Ok(());
    }
    if delete(ctl, &hold.name, &hold.uid, Some(&hold.resource_version)).await? {
        info!(hold = %hold.name, ip = %hold.ip, "sticky hold deleted: its address is free again");
        // The claim keeps no address any more (unless it already points elsewhere).
        let claim_api: Api<IPAMClaim> = Api::namespaced(ctl.client.clone(), &hold.claim.namespace);
        if let Some(c) = claim_api.get_opt(&hold.claim.name).await?
            && claims::facts(&c).ips.contains(&hold.ip)
        {
            write_claim_status(ctl, hold, None).await?;
        }
    }
    Ok(())
}

async fn create_claim(
    ctl: &Context,
    namespace: &str,
    name: &str,
    network: &str,
    statefulset: &str,
    legacy: Option<&str>,
) -> kube::Result<()> {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let sts: Api<StatefulSet> = Api::namespaced(ctl.client.clone(), namespace);
    let Some(owner) = sts.get_opt(statefulset).await? else { return Ok(()) };
    let mut claim = IPAMClaim::new(name, IPAMClaimSpec { network: network.to_string(), interface: String::new() });
    claim.metadata.namespace = Some(namespace.to_string());
    claim.metadata.labels = Some([(LABEL_STATEFULSET.to_string(), statefulset.to_string())].into());
    // Deleting the StatefulSet deletes its claims, and so ends their holds.
    claim.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".into(),
        kind: "StatefulSet".into(),
        name: statefulset.to_string(),
        uid: owner.metadata.uid.unwrap_or_default(),
        controller: Some(false),
        block_owner_deletion: Some(false),
    }]);
    let api: Api<IPAMClaim> = Api::namespaced(ctl.client.clone(), namespace);
    let created = match api.create(&PostParams::default(), &claim).await {
        Ok(created) => created,
        Err(kube::Error::Api(s)) if s.is_already_exists() => return Ok(()),
        Err(e) => return Err(e),
    };
    info!(claim = %format!("{namespace}/{name}"), "claim created for a StatefulSet Pod");
    let Some(address) = legacy else { return Ok(()) };
    // The address a lease of an older version keeps for this Pod: the
    // Pod's next ADD ends that hold and continues it under this claim.
    let body = serde_json::json!({
        "metadata": { "uid": created.metadata.uid, "resourceVersion": created.metadata.resource_version },
        "status": { "ips": [address] },
    });
    let res = api.patch_status(name, &PatchParams::default(), &Patch::Merge(body)).await;
    if unless_changed(res, Guard::Preconditions)?.is_some() {
        info!(claim = %format!("{namespace}/{name}"), %address, "the claim starts with the address an older version's lease keeps for its Pod");
    }
    Ok(())
}

#[cfg(test)]
mod tests;
