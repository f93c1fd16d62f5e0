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
/// The annotation of a Pod's network-selection element
/// (`k8s.v1.cni.cncf.io/networks`) that names its claim.
pub const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";
