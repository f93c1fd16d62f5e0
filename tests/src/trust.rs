//! What the trust tests (`tests/tests/trust_*.rs`) share: the finalizers
//! deploy/ registers, leases and holds as the plugin writes them, clients
//! of deploy/'s identities, and the check that the API server itself
//! refused a request the client did send.

use kube::api::Patch;
use netendpoint_crd::{ClaimRef, NetworkEndpoint};

use crate::fixtures::LeaseFixture;
use crate::scratch::unique;

pub use crate::fixtures::{incarnation, incarnation_request as request};
pub use crate::identities::{
    CONTROLLER_SERVICE_ACCOUNT, ExtraServiceAccount, as_controller, as_node_bound, ensure_cluster_role, node_bound,
};

/// The finalizer the agents ConfigMap in deploy/ binds to the watcher-example ServiceAccount.
pub const OWN: &str = "watcher.netendpoint.dev/rules";
/// Another agent's finalizer.
pub const OTHER: &str = "other-agent.example.com/rules";
/// A namespace of the tests' own, so that a failed run leaves deploy/'s as it was.
pub const PROBE_NS: &str = "netendpoint-trust-probe";

/// Asserts that the API server refused `r` with `code`, and that its message contains `says`.
#[track_caller]
pub fn assert_refused<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>, code: u16, says: &str) {
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, code, "{what}: {s:?}");
            assert!(s.message.contains(says), "{what}: expected {says:?} in {:?}", s.message);
        }
        other => panic!("{what} must be refused by the API server: {other:?}"),
    }
}

/// Creates `ep` with `api`, again while admission answers that the lease's
/// pool has no ranges, for up to 10 s: the policy reads the ConfigMap
/// netendpoint-pools through the API server's informer, which may not have
/// a pool registered a moment ago. Any other answer is returned at once.
pub async fn create_once_the_pool_is_seen(
    api: &kube::Api<NetworkEndpoint>,
    ep: &NetworkEndpoint,
) -> Result<NetworkEndpoint, kube::Error> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match api.create(&kube::api::PostParams::default(), ep).await {
            Err(kube::Error::Api(s)) if s.message.contains("has no ranges") && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            r => return r,
        }
    }
}

/// A JSON patch of `ops`.
pub fn json_patch(ops: serde_json::Value) -> Patch<()> {
    Patch::Json(serde_json::from_value(ops).unwrap())
}

/// A JSON merge patch of `v`.
pub fn merge(v: serde_json::Value) -> Patch<serde_json::Value> {
    Patch::Merge(v)
}

/// A lease as the plugin writes it: every mirrored label and the
/// forced-release annotation (600 s), of a unique container on `node`.
pub fn full_lease(pool: &str, ip: &str, node: &str, finalizers: &[&str]) -> NetworkEndpoint {
    LeaseFixture::new(pool, ip)
        .container(&unique("ctr"))
        .node(node)
        .finalizers(finalizers)
        .force_release_after("600s")
        .build()
}

/// The sticky hold of claim `default/<claim>` (a unique UID) at `ip`,
/// created on `node`, as the plugin writes it: no finalizer, and [`OWN`]
/// for its incarnations.
pub fn hold(pool: &str, ip: &str, node: &str, claim: &str) -> NetworkEndpoint {
    LeaseFixture::new(pool, ip)
        .container(&unique("ctr"))
        .node(node)
        .force_release_after("600s")
        .hold(ClaimRef { namespace: "default".into(), name: claim.into(), uid: unique("claim-uid") })
        .endpoint_finalizers(&[OWN])
        .build()
}
