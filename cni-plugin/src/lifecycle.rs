//! STATUS and GC (CNI 1.1.0).

use std::collections::HashSet;

use tracing::info;

use crate::config::IpamConfig;
use crate::error::{Error, Exhaustion, Result};
use crate::protocol::Attachment;
use crate::store::Store;

/// CNI STATUS: `Ok` when an ADD can be served now. Otherwise a code 50 error
/// saying why: API server unreachable or refusing, CRD missing, or a range
/// set with no free address and nothing releasing.
pub async fn status<S: Store>(store: &S, conf: &IpamConfig) -> Result<()> {
    let view = store.list_pool(&conf.pool).await.map_err(|e| Error::NotReady(Box::new(e)))?;
    for set in &conf.range_sets {
        let in_set: Vec<_> = view.entries.iter().filter(|e| set.is_usable(e.ip)).collect();
        let releasing = in_set.iter().filter(|e| e.releasing_since.is_some()).count();
        if in_set.len() as u128 >= set.capacity() && releasing == 0 {
            return Err(Error::NotReady(Box::new(Error::PoolExhausted(Box::new(Exhaustion {
                pool: conf.pool.clone(),
                capacity: set.capacity(),
                in_use: in_set.len(),
                releasing: 0,
                waiting_on: Vec::new(),
                waited: std::time::Duration::ZERO,
            })))));
        }
    }
    Ok(())
}

/// CNI GC: requests deletion of this node's leases in this pool whose
/// attachment is not in `valid`. Other nodes' leases are never looked at.
/// Finalizers still gate the release, exactly as after DEL. Every failure is
/// reported, after all deletions were tried.
pub async fn gc<S: Store>(store: &S, conf: &IpamConfig, node: &str, valid: &[Attachment]) -> Result<()> {
    let keep: HashSet<(&str, &str)> = valid.iter().map(|a| (a.container_id.as_str(), a.ifname.as_str())).collect();
    let mut errors = Vec::new();
    for ep in store.find_by_node(node).await? {
        if ep.spec.node != node || ep.spec.pool != conf.pool || ep.is_releasing() {
            continue;
        }
        if keep.contains(&(ep.spec.container_id.as_str(), ep.spec.if_name.as_str())) {
            continue;
        }
        match store.delete(&ep).await {
            Ok(()) => {
                info!(ip = %ep.spec.ip, container_id = %ep.spec.container_id, "GC: release requested for a stale lease")
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(Error::Many(errors)) }
}
