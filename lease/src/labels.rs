//! The labels of a lease: each one mirrors a spec field, as admission
//! checks (policy `netendpoint-lease-integrity`), so that people and agents
//! can select by them. Readers that decide anything compare the spec.

use std::collections::BTreeMap;

use netendpoint_crd::{
    ANNOTATION_FORCE_RELEASE_AFTER, LABEL_BLOCK, LABEL_CLAIM_NAME, LABEL_CLAIM_NAMESPACE, LABEL_IP_FAMILY,
    LABEL_NETWORK, LABEL_NODE, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID, LABEL_POOL, LABEL_ROLE,
    NetworkEndpointSpec, ROLE_HOLD, Role, block_label_value, label_value,
};

/// Every label a lease with `spec` carries.
pub fn of(spec: &NetworkEndpointSpec) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (LABEL_POOL.to_string(), label_value(&spec.pool)),
        (LABEL_NODE.to_string(), label_value(&spec.node)),
        (LABEL_IP_FAMILY.to_string(), if spec.ip.contains(':') { "6" } else { "4" }.to_string()),
    ]);
    if let Ok(ip) = spec.ip.parse() {
        labels.insert(LABEL_BLOCK.to_string(), block_label_value(ip));
    }
    if let Some(network) = &spec.network {
        labels.insert(LABEL_NETWORK.to_string(), label_value(network));
    }
    if let Some(pod) = &spec.pod {
        labels.insert(LABEL_POD_NAMESPACE.to_string(), label_value(&pod.namespace));
        labels.insert(LABEL_POD_NAME.to_string(), label_value(&pod.name));
        if !pod.uid.is_empty() {
            labels.insert(LABEL_POD_UID.to_string(), label_value(&pod.uid));
        }
    }
    if spec.role == Some(Role::Hold) {
        labels.insert(LABEL_ROLE.to_string(), ROLE_HOLD.to_string());
    }
    if let Some(claim) = &spec.claim {
        labels.insert(LABEL_CLAIM_NAMESPACE.to_string(), label_value(&claim.namespace));
        labels.insert(LABEL_CLAIM_NAME.to_string(), label_value(&claim.name));
    }
    labels
}

/// The annotations a lease with `spec` carries: its forced-release bound,
/// so that a metadata-only reader sees it.
pub fn annotations_of(spec: &NetworkEndpointSpec) -> Option<BTreeMap<String, String>> {
    spec.force_release_after.as_ref().map(|b| BTreeMap::from([(ANNOTATION_FORCE_RELEASE_AFTER.to_string(), b.clone())]))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use netendpoint_crd::{ClaimRef, PodRef};

    #[test]
    fn every_label_mirrors_the_spec() {
        let spec = NetworkEndpointSpec {
            pool: "pods".into(),
            ip: "10.0.0.70".into(),
            node: "n".repeat(70),
            network: Some("net_".into()),
            pod: Some(PodRef { namespace: "ns".into(), name: "web-0".into(), uid: "u1".into() }),
            role: Some(Role::Hold),
            claim: Some(ClaimRef { namespace: "ns".into(), name: "web-0.pods".into(), uid: "c1".into() }),
            force_release_after: Some("600s".into()),
            ..NetworkEndpointSpec::default()
        };
        let l = of(&spec);
        assert_eq!(l[LABEL_NODE], "n".repeat(63));
        assert_eq!(l[LABEL_NETWORK], "net");
        assert_eq!((l[LABEL_BLOCK].as_str(), l[LABEL_ROLE].as_str()), ("10.0.0.64", "hold"));
        assert_eq!(l[LABEL_CLAIM_NAME], "web-0.pods");
        assert_eq!(annotations_of(&spec).unwrap()[ANNOTATION_FORCE_RELEASE_AFTER], "600s");
    }
}
