//! Trust boundaries of the controller's identity (`netendpoint-controller`,
//! with a real token minted by the TokenRequest API), enforced by the real
//! API server with the manifests of deploy/ applied: it takes no address
//! for itself and frees no live one but by a delete, and writes no
//! ConfigMap but the pools' ranges. Each denial is the server's answer to
//! a request the client did send; each test names the finding of the trust
//! issue it closes.

#![allow(clippy::unwrap_used)]

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use netendpoint_crd::NetworkEndpoint;
use netendpoint_tests::trust::*;
use netendpoint_tests::{self as h, DEPLOY_NAMESPACE};
use serde_json::json;

/// Finding 1: the controller's token cannot hand out an address. It
/// creates only incarnations of holds, never a lease or a hold; it removes
/// finalizers only from a release in progress and never adds one. Deleting
/// a live lease stays allowed (its reclaims of vanished nodes' and gone
/// Pods' leases rest on its reads, which no policy can check): placement
/// protects that token (deploy_manifests.rs,
/// `the_controller_runs_on_the_control_plane_with_its_metrics_on_loopback`).
#[tokio::test]
async fn the_controller_token_takes_no_address_and_frees_no_live_one() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-controller");
    let client = as_controller(&dir).await;
    let ctl: Api<NetworkEndpoint> = Api::all(client.clone());
    let admin = h::endpoints().await;
    let node = h::unique("trust-cn");
    let pool = h::unique("trust-controller");
    let _ranges = h::register_pool(&pool, &["10.79.4.0/24"]);
    let (pp, patch_pp) = (PostParams::default(), PatchParams::default());

    // No lease and no hold of its own.
    let r = ctl.create(&pp, &full_lease(&pool, "10.79.4.1", &node, &[])).await;
    assert_refused("the controller creates a plain lease", r, 403, "creates only incarnations");
    let r = ctl.create(&pp, &hold(&pool, "10.79.4.2", &node, "web-0.trust")).await;
    assert_refused("the controller creates a hold", r, 403, "creates only incarnations");

    // A live lease: its finalizers stay, and none is added.
    let live = admin.create(&pp, &full_lease(&pool, "10.79.4.3", &node, &[OWN])).await.unwrap();
    let live_name = live.metadata.name.clone().unwrap();
    let strip = json_patch(json!([{"op": "remove", "path": "/metadata/finalizers/0"}]));
    let r = ctl.patch(&live_name, &patch_pp, &strip).await;
    assert_refused("the controller strips a live lease", r, 403, "already being released");
    let add =
        json_patch(json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "never.example.com/removed"}]));
    let r = ctl.patch(&live_name, &patch_pp, &add).await;
    assert_refused("the controller adds a finalizer to a live lease", r, 403, "already being released");
    // A release in progress: finalizers may go, none may come, and nothing else changes with them.
    let releasing = admin.create(&pp, &full_lease(&pool, "10.79.4.4", &node, &[OWN, OTHER])).await.unwrap();
    let releasing_name = releasing.metadata.name.clone().unwrap();
    admin.delete(&releasing_name, &DeleteParams::default()).await.unwrap();
    assert!(ctl.patch(&releasing_name, &patch_pp, &add).await.is_err(), "the controller adds a finalizer to a release");
    let relabel = merge(json!({"metadata": {"finalizers": [OWN], "labels": {"team": "a"}}}));
    let r = ctl.patch(&releasing_name, &patch_pp, &relabel).await;
    assert_refused("the controller labels a release while it strips it", r, 403, "already being released");
    // The status of a lease that is no hold.
    let r = ctl.patch_status(&live_name, &patch_pp, &merge(json!({"status": {"message": "x"}}))).await;
    assert_refused("the controller writes the status of an endpoint", r, 403, "status of holds only");

    // What its decisions need: an incarnation of a hold, the hold's status,
    // the end of a release, a delete.
    let a_hold = admin.create(&pp, &hold(&pool, "10.79.4.5", &node, "web-0.trust")).await.unwrap();
    let first = ctl.create(&pp, &incarnation(&a_hold, 1, &node)).await.unwrap();
    let created =
        netendpoint_lease::hold::created_patch(&a_hold, &request(1, &node), first.metadata.name.as_deref().unwrap());
    ctl.patch_status(a_hold.metadata.name.as_deref().unwrap(), &patch_pp, &Patch::Json::<()>(created)).await.unwrap();
    ctl.patch(&releasing_name, &patch_pp, &json_patch(json!([{"op": "remove", "path": "/metadata/finalizers/1"}])))
        .await
        .unwrap();
    ctl.delete(&live_name, &DeleteParams::default()).await.unwrap();

    // ConfigMaps: netendpoint-pools only.
    let cms: Api<ConfigMap> = Api::namespaced(client, DEPLOY_NAMESPACE);
    let other: ConfigMap = serde_json::from_value(json!({"metadata": {"name": h::unique("not-pools")}})).unwrap();
    let r = cms.create(&pp, &other).await;
    assert_refused(
        "the controller creates another ConfigMap",
        r,
        403,
        "no ConfigMap but netendpoint-system/netendpoint-pools",
    );
    let pools: ConfigMap = serde_json::from_value(json!({"metadata": {"name": h::POOLS_CONFIGMAP}})).unwrap();
    assert_refused(
        "the controller creates netendpoint-pools again",
        cms.create(&pp, &pools).await,
        409,
        "already exists",
    );
    cms.patch(h::POOLS_CONFIGMAP, &patch_pp, &merge(json!({"data": {}}))).await.unwrap();
    let r = cms.patch("netendpoint-agents", &patch_pp, &merge(json!({"data": {"x.y": "evil.example.com/x"}}))).await;
    assert_refused("the controller registers an agent", r, 403, "cannot patch resource");
    h::cleanup_pool(&pool).await;
}
