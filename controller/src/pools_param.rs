//! The ConfigMap the admission policy `netendpoint-lease-range` reads
//! (`netendpoint-system/netendpoint-pools`): one key per pool, its value the
//! CIDRs the pool may lease, and, prefixed `!`, the gateways and exclusions
//! inside them. Rendered from the network config the installer renders the
//! nodes' conflists from, so both say the same.
//!
//! Written with server-side apply under its own field manager: keys added
//! by hand (pools whose networks are configured elsewhere) are kept, and a
//! pool that leaves the network config leaves the ConfigMap. Written again
//! whenever the watched ConfigMap lacks what the network config says: one
//! deleted (by hand, by `kubectl delete -k`) or changed by hand is back
//! within a pass, since without it no lease can be created.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event as Recorded, EventType};
use netendpoint_netconf::IpamConfig;
use netendpoint_netconf::networks::admission_ranges;
use tracing::{info, warn};

use crate::context::Context;

/// The field manager of the keys the controller writes.
const MANAGER: &str = "netendpoint-controller-pools";

/// Writes the pools ConfigMap when its data changes.
#[derive(Default)]
pub struct PoolsParamWriter {
    written: Option<BTreeMap<String, String>>,
}

/// True when `live` (the ConfigMap's data as watched, `None` when it does
/// not exist) lacks a key of `want` or holds another value for one.
pub fn stale(want: &BTreeMap<String, String>, live: Option<&BTreeMap<String, String>>) -> bool {
    live.is_none_or(|live| want.iter().any(|(k, v)| live.get(k) != Some(v)))
}

/// The pools of `want` for which `live` holds another value (not the
/// missing ones): what someone changed since the controller wrote it.
pub fn changed(want: &BTreeMap<String, String>, live: Option<&BTreeMap<String, String>>) -> Vec<String> {
    let Some(live) = live else { return Vec::new() };
    want.iter().filter(|(k, v)| live.get(*k).is_some_and(|l| l != *v)).map(|(k, _)| k.clone()).collect()
}

impl PoolsParamWriter {
    /// Applies the data of `networks` to `namespace`/`name`, when it differs
    /// from what was written or from `live`, the ConfigMap's data as
    /// watched (`None`: it does not exist).
    /// Pools whose ranges someone changed are written back, with a warning
    /// and a `PoolsParamChanged` Event about the ConfigMap.
    pub async fn sync(
        &mut self,
        ctl: &Context,
        namespace: &str,
        name: &str,
        networks: &[IpamConfig],
        live: Option<&BTreeMap<String, String>>,
    ) {
        let want = admission_ranges(networks);
        let missing = live.is_none();
        if self.written.as_ref() == Some(&want) && !stale(&want, live) {
            return;
        }
        if missing {
            warn!(configmap = %format!("{namespace}/{name}"), "the pools for the admission policy are missing: no lease can be created until they are written again");
        }
        let changed = changed(&want, live);
        if !changed.is_empty() {
            warn!(configmap = %format!("{namespace}/{name}"), pools = ?changed, "the ranges of pools the network config defines were changed in the pools for the admission policy: writing them back");
        }
        let api: Api<ConfigMap> = Api::namespaced(ctl.client.clone(), namespace);
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "netendpoint"}},
            "data": want,
        });
        match api.patch(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(body)).await {
            Ok(_) => {
                info!(configmap = %format!("{namespace}/{name}"), pools = want.len(), "pools for the admission policy written");
                self.written = Some(want);
                if !changed.is_empty() {
                    record_changed(ctl, namespace, name, &changed).await;
                }
            }
            Err(e) => {
                warn!(configmap = %format!("{namespace}/{name}"), error = %e, "cannot write the pools for the admission policy")
            }
        }
    }
}

/// Records that the ranges of `pools` were found changed and written back.
async fn record_changed(ctl: &Context, namespace: &str, name: &str, pools: &[String]) {
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        ..ObjectReference::default()
    };
    let note = format!(
        "the ranges of pool(s) {} differed from the network config; written back. Whoever changed them could let a pool lease another pool's addresses: check who holds write access to this ConfigMap",
        pools.join(", ")
    );
    let ev = Recorded {
        type_: EventType::Warning,
        reason: netendpoint_crd::REASON_POOLS_PARAM_CHANGED.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "WriteBack".into(),
        secondary: None,
    };
    if let Err(e) = ctl.recorder.publish(&ev, &regarding).await {
        warn!(error = %e, "cannot record event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_changed_configmap_is_stale() {
        let want: BTreeMap<String, String> = [("a".to_string(), "10.0.0.0/24".to_string())].into();
        assert!(stale(&want, None), "a deleted ConfigMap is written again");
        assert!(stale(&want, Some(&BTreeMap::new())));
        let mut live = want.clone();
        assert!(!stale(&want, Some(&live)));
        live.insert("by-hand".into(), "10.1.0.0/24".into());
        assert!(!stale(&want, Some(&live)), "keys added by hand are kept, not a reason to write");
        assert!(changed(&want, Some(&live)).is_empty(), "nothing of the config's was changed");
        live.insert("a".into(), "10.9.0.0/24".into());
        assert!(stale(&want, Some(&live)));
        assert_eq!(changed(&want, Some(&live)), ["a"], "a pool of the config given other ranges");
        assert!(changed(&want, None).is_empty(), "a missing ConfigMap is no change of a range");
    }
}
