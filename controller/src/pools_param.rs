//! The ConfigMap the admission policy `netendpoint-lease-address` reads
//! (`netendpoint-system/netendpoint-pools`): one key per pool, its value the
//! CIDRs the pool may lease, and, prefixed `!`, the gateways and exclusions
//! inside them. Rendered from the network config the installer renders the
//! nodes' conflists from, so both say the same.
//!
//! Written with server-side apply under its own field manager: keys added
//! by hand (pools whose networks are configured elsewhere) are kept, and a
//! pool that leaves the network config leaves the ConfigMap.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use netendpoint_cni::config::IpamConfig;
use tracing::{info, warn};

/// The field manager of the keys the controller writes.
const MANAGER: &str = "netendpoint-controller-pools";

/// The data of the pools ConfigMap for `networks`. Two networks of one pool
/// add their CIDRs together.
pub fn data(networks: &[IpamConfig]) -> BTreeMap<String, String> {
    let mut by_pool: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in networks {
        let entries = by_pool.entry(n.pool.clone()).or_default();
        for c in n.admission_cidrs() {
            if !entries.contains(&c) {
                entries.push(c);
            }
        }
    }
    by_pool.into_iter().map(|(pool, cidrs)| (pool, cidrs.join(","))).collect()
}

/// Writes the pools ConfigMap when its data changes.
#[derive(Default)]
pub struct PoolsParamWriter {
    written: Option<BTreeMap<String, String>>,
}

impl PoolsParamWriter {
    /// Applies the data of `networks` to `namespace`/`name`, when it differs from what was written.
    pub async fn sync(&mut self, client: &Client, namespace: &str, name: &str, networks: &[IpamConfig]) {
        let want = data(networks);
        if self.written.as_ref() == Some(&want) {
            return;
        }
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": want,
        });
        match api.patch(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(body)).await {
            Ok(_) => {
                info!(configmap = %format!("{namespace}/{name}"), pools = want.len(), "pools for the admission policy written");
                self.written = Some(want);
            }
            Err(e) => {
                warn!(configmap = %format!("{namespace}/{name}"), error = %e, "cannot write the pools for the admission policy")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pool_lists_its_ranges_and_what_they_must_not_lease() {
        // The gateway 10.0.0.1 is outside the range, 192.168.0.0/16 outside every range.
        let ipam = serde_json::json!({
            "pool": "pods",
            "ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.10", "rangeEnd": "10.0.0.20"}], [{"subnet": "fd00::/120"}]],
            "exclude": ["10.0.0.16/30", "192.168.0.0/16"],
        });
        let c = IpamConfig::parse(&ipam, "net").unwrap();
        let d = data(&[c]);
        assert_eq!(
            d["pods"],
            "10.0.0.10/31,10.0.0.12/30,10.0.0.16/30,10.0.0.20/32,!10.0.0.16/30,fd00::1/128,fd00::2/127,fd00::4/126,fd00::8/125,fd00::10/124,fd00::20/123,fd00::40/122,fd00::80/121,!fd00::1/128"
        );
    }
}
