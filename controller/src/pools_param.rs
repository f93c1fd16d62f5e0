//! The ConfigMap the admission policy `netendpoint-lease-range` reads
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
use netendpoint_netconf::IpamConfig;
use netendpoint_netconf::networks::admission_ranges;
use tracing::{info, warn};

/// The field manager of the keys the controller writes.
const MANAGER: &str = "netendpoint-controller-pools";

/// Writes the pools ConfigMap when its data changes.
#[derive(Default)]
pub struct PoolsParamWriter {
    written: Option<BTreeMap<String, String>>,
}

impl PoolsParamWriter {
    /// Applies the data of `networks` to `namespace`/`name`, when it differs from what was written.
    pub async fn sync(&mut self, client: &Client, namespace: &str, name: &str, networks: &[IpamConfig]) {
        let want = admission_ranges(networks);
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
