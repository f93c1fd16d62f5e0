//! Leases (NetworkEndpoints) read and cleaned up as the administrator.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use netendpoint_crd::NetworkEndpoint;

use crate::env::client;

/// All NetworkEndpoints.
pub async fn endpoints() -> Api<NetworkEndpoint> {
    Api::all(client().await)
}

/// The endpoints of `pool`.
pub async fn pool_endpoints(pool: &str) -> Vec<NetworkEndpoint> {
    endpoints()
        .await
        .list(&ListParams::default().labels(&format!(
            "{}={}",
            netendpoint_crd::LABEL_POOL,
            netendpoint_crd::label_value(pool)
        )))
        .await
        .unwrap()
        .items
}

/// The lease of `ip` (an address, written any way) in `pool`, if it exists.
pub async fn lease_at(pool: &str, ip: impl std::fmt::Display) -> Option<NetworkEndpoint> {
    let name = netendpoint_crd::endpoint_name(pool, ip.to_string().parse().unwrap());
    endpoints().await.get_opt(&name).await.unwrap()
}

/// True while the lease named `name` exists (releasing or not).
pub async fn lease_exists(name: &str) -> bool {
    endpoints().await.get_opt(name).await.unwrap().is_some()
}

/// True once the lease named `name` no longer exists.
pub async fn lease_gone(name: &str) -> bool {
    !lease_exists(name).await
}

/// Polls every 20 ms, for up to `limit`, until the lease named `name` is
/// gone; returns whether it is. A caller that requires it asserts so.
pub async fn wait_gone(name: &str, limit: Duration) -> bool {
    for _ in 0..limit.as_millis() / 20 {
        if lease_gone(name).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    lease_gone(name).await
}

/// The endpoints of `pool`, IP → (UID, releasing).
pub async fn pool_state(pool: &str) -> BTreeMap<String, (String, bool)> {
    pool_endpoints(pool)
        .await
        .into_iter()
        .map(|e| {
            let releasing = e.is_releasing();
            (e.spec.ip, (e.metadata.uid.unwrap_or_default(), releasing))
        })
        .collect()
}

/// Removes `finalizer` from endpoint `name` (test + remove JSON patch, like an agent).
pub async fn remove_finalizer(name: &str, finalizer: &str) {
    let api = endpoints().await;
    let ep = api.get(name).await.unwrap();
    let fins = ep.metadata.finalizers.unwrap_or_default();
    let Some(idx) = fins.iter().position(|f| f == finalizer) else { return };
    let patch = serde_json::json!([
        {"op": "test", "path": format!("/metadata/finalizers/{idx}"), "value": finalizer},
        {"op": "remove", "path": format!("/metadata/finalizers/{idx}")},
    ]);
    let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
    api.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch)).await.unwrap();
}

/// Deletes every endpoint of `pool`, clearing finalizers, and waits until they are gone.
pub async fn cleanup_pool(pool: &str) {
    let api = endpoints().await;
    for ep in pool_endpoints(pool).await {
        let name = ep.metadata.name.clone().unwrap();
        let _ = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})))
            .await;
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
    for _ in 0..100 {
        if pool_endpoints(pool).await.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
