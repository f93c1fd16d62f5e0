//! What the controller reads of an `IPAMClaim`, the same for the
//! snapshot the decisions run over and for the reads made just before a
//! write.

use kube::ResourceExt;
use netendpoint_crd::ipamclaim::{IPAMClaim, LABEL_STATEFULSET};

use crate::decide::ClaimFacts;

/// The facts the decisions read of claim `c`: its UID, the addresses of
/// its status that parse (prefix lengths dropped), the StatefulSet it was
/// created for and its network.
pub fn facts(c: &IPAMClaim) -> ClaimFacts {
    ClaimFacts {
        uid: c.metadata.uid.clone().unwrap_or_default(),
        ips: c.status.iter().flat_map(|s| &s.ips).filter_map(|a| a.split('/').next()?.parse().ok()).collect(),
        statefulset: c.labels().get(LABEL_STATEFULSET).cloned(),
        network: c.spec.network.clone(),
    }
}
