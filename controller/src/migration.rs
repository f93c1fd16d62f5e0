//! Which Pod of a VM's claim may be answered while the VM still runs: only
//! the one KubeVirt names as the target of the VM's live migration.
//!
//! The evidence is what KubeVirt's own controller writes, which a Pod
//! creator of the namespace cannot: the `VirtualMachineInstance` of the
//! claim's VM names the Pod in `status.migrationState.targetPod` while its
//! migration runs (neither `completed` nor `failed`), and that Pod is
//! controlled by the VMI (its controller owner reference carries the VMI's
//! UID). A Pod creator can copy a name and an owner reference into a Pod
//! of its own; it cannot make the VMI's status name that Pod. Everything
//! else, including a VMI API this cluster does not serve or that the
//! controller may not read, answers "not a migration target": that Pod
//! then waits until the VM's current incarnation is gone, as a StatefulSet
//! Pod does.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use netendpoint_crd::IncarnationRequest;
use netendpoint_crd::ipamclaim::IPAMClaim;

use crate::context::Context;
use crate::decide::Hold;

/// KubeVirt's VirtualMachineInstance resource.
fn vmi_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstances",
    )
}

/// The VM a claim belongs to: its KubeVirt owner, or the claim name up to
/// its first `.` (`<vm>.<network>`, as KubeVirt names them).
pub fn vm_of(claim: &IPAMClaim) -> String {
    claim
        .owner_references()
        .iter()
        .find(|o| {
            o.api_version.starts_with("kubevirt.io/")
                && matches!(o.kind.as_str(), "VirtualMachine" | "VirtualMachineInstance")
        })
        .map(|o| o.name.clone())
        .unwrap_or_else(|| claim.name_any().split('.').next().unwrap_or_default().to_string())
}

/// `Ok(Ok(()))` when the Pod of `req` is the migration target of the VM of
/// `hold`'s claim; `Ok(Err(why))` when it is not (or nothing says so).
pub async fn target(ctl: &Context, hold: &Hold, req: &IncarnationRequest) -> kube::Result<Result<(), String>> {
    let ns = &hold.claim.namespace;
    let claims: Api<IPAMClaim> = Api::namespaced(ctl.client.clone(), ns);
    let Some(claim) = claims.get_opt(&hold.claim.name).await? else {
        return Ok(Err(format!("claim {ns}/{} is gone", hold.claim.name)));
    };
    let vm = vm_of(&claim);
    let vmis: Api<DynamicObject> = Api::namespaced_with(ctl.client.clone(), ns, &vmi_resource());
    let vmi = match vmis.get_opt(&vm).await {
        Ok(v) => v,
        // Not served here, or not readable by this controller: no evidence.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 403 => {
            return Ok(Err(format!("VirtualMachineInstance {ns}/{vm} cannot be read ({})", s.reason)));
        }
        Err(e) => return Err(e),
    };
    let Some(vmi) = vmi else { return Ok(Err(format!("no VirtualMachineInstance {ns}/{vm}"))) };
    let state = vmi.data.pointer("/status/migrationState");
    let named = state.and_then(|s| s.get("targetPod")).and_then(|v| v.as_str());
    if named != Some(req.pod.name.as_str()) {
        return Ok(Err(format!(
            "VirtualMachineInstance {ns}/{vm} names {} as its migration target",
            named.map_or_else(|| "no Pod".to_string(), |n| format!("Pod {n}"))
        )));
    }
    let ended = |k: &str| state.and_then(|s| s.get(k)).and_then(serde_json::Value::as_bool).unwrap_or(false);
    if ended("completed") || ended("failed") {
        return Ok(Err(format!("the migration of VirtualMachineInstance {ns}/{vm} has ended")));
    }
    let pods: Api<Pod> = Api::namespaced(ctl.client.clone(), ns);
    let Some(pod) = pods.get_metadata_opt(&req.pod.name).await? else {
        return Ok(Err(format!("Pod {ns}/{} does not exist", req.pod.name)));
    };
    let vmi_uid = vmi.metadata.uid.clone().unwrap_or_default();
    let controlled = pod.metadata.owner_references.iter().flatten().any(|o| {
        o.controller == Some(true) && o.kind == "VirtualMachineInstance" && !vmi_uid.is_empty() && o.uid == vmi_uid
    });
    if !controlled {
        return Ok(Err(format!("Pod {ns}/{} is not controlled by VirtualMachineInstance {ns}/{vm}", req.pod.name)));
    }
    Ok(Ok(()))
}
