//! The `IPAMClaim` of the Kubernetes Network Plumbing Working Group
//! (`k8s.cni.cncf.io/v1alpha1`, namespaced), as far as netendpoint reads
//! and writes it: a sticky identity that keeps its addresses across the
//! Pods that reference it (KubeVirt creates one per VM interface with
//! persistent IPs; netendpoint-controller creates one per StatefulSet Pod
//! and sticky network).
//!
//! The CRD belongs to that project and is installed from its own release;
//! netendpoint never writes it. This type only names the fields used.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::is_dns1123_subdomain;

/// The claim's spec.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[kube(
    group = "k8s.cni.cncf.io",
    version = "v1alpha1",
    kind = "IPAMClaim",
    plural = "ipamclaims",
    singular = "ipamclaim",
    namespaced,
    status = "IPAMClaimStatus",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct IPAMClaimSpec {
    /// The network (the CNI network name) the claim's addresses belong to.
    #[serde(default)]
    pub network: String,
    /// The Pod interface the claim is for.
    #[serde(default)]
    pub interface: String,
}

/// The claim's status, written by the IPAM that serves it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPAMClaimStatus {
    /// The claim's addresses, with their prefix lengths (`10.244.0.17/24`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    /// The Pod that holds the claim now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_pod: Option<OwnerPod>,
}

/// The Pod that holds a claim.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
pub struct OwnerPod {
    /// Its name (in the claim's namespace).
    pub name: String,
}

/// The label netendpoint-controller puts on the claims it creates for
/// StatefulSet Pods: the StatefulSet's name.
pub const LABEL_STATEFULSET: &str = "netendpoint.dev/statefulset";

/// The StatefulSet and ordinal of a Pod named as a StatefulSet names its
/// Pods, `<statefulset>-<ordinal>` (the ordinal in decimal, without leading
/// zeros); `None` for any other name. The name alone cannot tell a bare Pod
/// named that way from a StatefulSet's: whoever acts on it checks the owner.
pub fn statefulset_pod(pod: &str) -> Option<(&str, i64)> {
    let (statefulset, n) = pod.rsplit_once('-')?;
    if statefulset.is_empty()
        || n.is_empty()
        || !n.bytes().all(|b| b.is_ascii_digit())
        || (n.len() > 1 && n.starts_with('0'))
    {
        return None;
    }
    Some((statefulset, n.parse().ok()?))
}

/// The ordinal of Pod `pod` of StatefulSet `statefulset`; `None` when the
/// name is not `<statefulset>-<ordinal>`.
pub fn statefulset_ordinal(statefulset: &str, pod: &str) -> Option<i64> {
    statefulset_pod(pod).filter(|(s, _)| *s == statefulset).map(|(_, o)| o)
}

/// The Pod of ordinal `ordinal` of StatefulSet `statefulset`: `<statefulset>-<ordinal>`.
pub fn statefulset_pod_name(statefulset: &str, ordinal: i64) -> String {
    format!("{statefulset}-{ordinal}")
}

/// The claim of StatefulSet Pod `pod` in `pool`: `<pod>.<pool>`, in the
/// Pod's namespace. netendpoint-controller creates it for each ordinal
/// below the replicas of a StatefulSet of a sticky network, and a Pod's ADD
/// continues it. `None` when `pod` is not named as a StatefulSet's Pod, or
/// the name would not be a valid object name.
pub fn statefulset_claim_name(pod: &str, pool: &str) -> Option<String> {
    statefulset_pod(pod)?;
    let name = format!("{pod}.{pool}");
    is_dns1123_subdomain(&name).then_some(name)
}

/// The annotation of a Pod's network-selection element
/// (`k8s.v1.cni.cncf.io/networks`) that names its claim.
pub const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_parse_only_from_the_owners_pod_names() {
        assert_eq!(statefulset_ordinal("web", "web-0"), Some(0));
        assert_eq!(statefulset_ordinal("web", "web-12"), Some(12));
        for bad in ["web", "web-", "web-01", "web-x", "webx-1", "web-1-2", "other-1"] {
            assert_eq!(statefulset_ordinal("web", bad), None, "{bad}");
        }
        assert_eq!(statefulset_pod("web-1-2"), Some(("web-1", 2)), "a StatefulSet name may hold '-'");
        assert_eq!(statefulset_pod("-1"), None);
        assert_eq!(statefulset_pod("web-99999999999999999999"), None, "beyond any ordinal");
        assert_eq!(statefulset_ordinal("web", &statefulset_pod_name("web", 7)), Some(7));
    }

    #[test]
    fn a_statefulset_pods_claim_is_pod_dot_pool() {
        assert_eq!(statefulset_claim_name("web-3", "pods").as_deref(), Some("web-3.pods"));
        assert_eq!(statefulset_claim_name(&statefulset_pod_name("db-a", 0), "net.b").as_deref(), Some("db-a-0.net.b"));
        for pod in ["web-abcde", "web", "web-01", "Web-1"] {
            assert_eq!(statefulset_claim_name(pod, "pods"), None, "{pod}");
        }
        assert_eq!(statefulset_claim_name(&format!("{}-1", "a".repeat(250)), "pods"), None, "too long a name");
    }
}
