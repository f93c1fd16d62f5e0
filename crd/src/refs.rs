//! References from a NetworkEndpoint (and a need) to the objects it
//! belongs to: the Pod behind its sandbox, and the claim of a sticky
//! identity.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::{PATTERN_DNS_LABEL, PATTERN_DNS_SUBDOMAIN, PATTERN_UID};

/// Identity of the Pod behind a sandbox. Informational only: there is no
/// ownerReference, so deleting the Pod object does not release the IP.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema, Default)]
pub struct PodRef {
    /// Pod namespace (K8S_POD_NAMESPACE).
    #[schemars(length(min = 1, max = 63), pattern(PATTERN_DNS_LABEL))]
    pub namespace: String,
    /// Pod name (K8S_POD_NAME).
    #[schemars(length(min = 1, max = 253), pattern(PATTERN_DNS_SUBDOMAIN))]
    pub name: String,
    /// Pod UID (K8S_POD_UID), if known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 64), pattern(r"^[a-zA-Z0-9-]*$"))]
    pub uid: String,
}

/// The sticky identity a hold or an incarnation belongs to: an `IPAMClaim`
/// (`k8s.cni.cncf.io/v1alpha1`) in the Pod's namespace.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema, Default)]
pub struct ClaimRef {
    /// The claim's namespace (the Pod's).
    #[schemars(length(min = 1, max = 63), pattern(PATTERN_DNS_LABEL))]
    pub namespace: String,
    /// The claim's name.
    #[schemars(length(min = 1, max = 253), pattern(PATTERN_DNS_SUBDOMAIN))]
    pub name: String,
    /// The claim's UID: a claim deleted and created again under the same name is another identity.
    #[schemars(length(min = 1, max = 64), pattern(PATTERN_UID))]
    pub uid: String,
}
