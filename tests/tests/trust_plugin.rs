//! Trust boundaries of the plugin's identity (`netendpoint-cni`, with a real
//! token minted by the TokenRequest API and bound to its Node, so that the
//! server itself adds the `authentication.kubernetes.io/node-name` the
//! policies read), enforced by the real API server with the manifests of
//! deploy/ applied: its own node's leases, holds and need only, no
//! incarnation, no Pod; and the need signal, which no other identity can
//! raise. Each denial is the server's answer to a request the client did
//! send; each test names the finding of the trust issue it closes.

#![allow(clippy::unwrap_used)]

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use netendpoint_crd::{NetworkEndpoint, NetworkEndpointNeed};
use netendpoint_tests::trust::*;
use netendpoint_tests::{self as h, CNI_SERVICE_ACCOUNT, DEPLOY_NAMESPACE};
use serde_json::json;

#[tokio::test]
async fn a_plugin_token_acts_only_on_its_own_nodes_leases() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-plugin");
    let (node_a, node_b) = (h::unique("trust-pa"), h::unique("trust-pb"));
    h::ensure_node(&node_b);
    let plugin_a = as_node_bound(CNI_SERVICE_ACCOUNT, &node_a, &dir).await;
    let admin = h::endpoints().await;
    let pool = h::unique("trust-plugin");
    let _ranges = h::register_pool(&pool, &["10.79.1.0/24"]);
    let pp = PostParams::default();
    let patch_pp = PatchParams::default();

    // Create: only leases of its own node.
    let r = plugin_a.create(&pp, &full_lease(&pool, "10.79.1.1", &node_b, &[])).await;
    assert_refused("plugin A creates a lease of node B", r, 403, "may act only on its own node");
    let own = plugin_a.create(&pp, &full_lease(&pool, "10.79.1.2", &node_a, &[OWN])).await.unwrap();
    let own_name = own.metadata.name.clone().unwrap();
    // A static lease of its own node too.
    let mut own_static = full_lease(&pool, "10.79.1.5", &node_a, &[]);
    own_static.spec.static_ip = Some(true);
    plugin_a.create(&pp, &own_static).await.unwrap();

    // A token of the same ServiceAccount bound to no node may do nothing.
    let unbound_kc = dir.join("unbound.kubeconfig");
    h::sa_kubeconfig(DEPLOY_NAMESPACE, CNI_SERVICE_ACCOUNT, &unbound_kc, None);
    let unbound: Api<NetworkEndpoint> = Api::all(h::client_for(&unbound_kc).await);
    let r = unbound.create(&pp, &full_lease(&pool, "10.79.1.3", &node_a, &[])).await;
    assert_refused("unbound plugin token creates", r, 403, "bound to no node");

    // Delete: only leases of its own node.
    let theirs = admin.create(&pp, &full_lease(&pool, "10.79.1.4", &node_b, &[OWN])).await.unwrap();
    let theirs_name = theirs.metadata.name.clone().unwrap();
    let r = plugin_a.delete(&theirs_name, &DeleteParams::default()).await;
    assert_refused("plugin A deletes a lease of node B", r, 403, "may act only on its own node");

    // No spec or label change, not even on its own leases.
    let r = plugin_a.patch(&own_name, &patch_pp, &merge(json!({"spec": {"node": node_b}}))).await;
    assert_refused("plugin patches spec.node", r, 422, "spec is immutable");
    let r = plugin_a.patch(&own_name, &patch_pp, &merge(json!({"metadata": {"labels": {"team": "a"}}}))).await;
    assert_refused("plugin adds a label", r, 403, "only by removing finalizers");
    // Finalizers: never removed from a lease that is not being released.
    let strip = json_patch(json!([{"op": "remove", "path": "/metadata/finalizers/0"}]));
    let r = plugin_a.patch(&own_name, &patch_pp, &strip).await;
    assert_refused("plugin strips a live lease", r, 403, "only by removing finalizers");

    // DEL of its own lease is allowed; the lease then waits on its finalizer.
    plugin_a.delete(&own_name, &DeleteParams::default()).await.unwrap();
    let add = json_patch(json!([{"op": "add", "path": "/metadata/finalizers/-", "value": OTHER}]));
    // Refused by the policy, or by the API server itself (which refuses new finalizers on a release since 1.32).
    assert!(plugin_a.patch(&own_name, &patch_pp, &add).await.is_err(), "plugin adds a finalizer to a release");
    // Removing finalizers of another node's release is refused...
    admin.delete(&theirs_name, &DeleteParams::default()).await.unwrap();
    let r = plugin_a.patch(&theirs_name, &patch_pp, &strip).await;
    assert_refused("plugin A force-releases a lease of node B", r, 403, "may act only on its own node");
    assert!(admin.get(&theirs_name).await.unwrap().metadata.finalizers.is_some_and(|f| f == [OWN]));
    // ...and of its own node's release allowed (forced release on its own node).
    plugin_a.patch(&own_name, &patch_pp, &strip).await.unwrap();
    assert!(admin.get_opt(&own_name).await.unwrap().is_none(), "the release completed");
    h::cleanup_pool(&pool).await;
}

/// Finding 6: the plugin reads no Pod unless the optional binding of
/// deploy/optional/ is applied.
#[tokio::test]
async fn a_plugin_token_reads_no_pod() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-pods");
    let node = h::unique("trust-pods");
    let pods: Api<Pod> = Api::namespaced(node_bound(CNI_SERVICE_ACCOUNT, &node, &dir).await, "default");
    let admin: Api<Pod> = Api::namespaced(h::client().await, "default");
    let name = h::unique("secret-env");
    h::PodFixture::new(&name).env("PASSWORD", "hunter2").create().await;
    assert_refused("the plugin reads a Pod", pods.get(&name).await, 403, "cannot get resource \"pods\"");
    let _ = admin.delete(&name, &DeleteParams::default()).await;
}

/// Finding 2: only a node's plugin raises a need, and only for its own
/// node. A tenant ServiceAccount is refused by RBAC, and by the policy even
/// where RBAC would let it.
#[tokio::test]
async fn only_a_nodes_plugin_raises_a_need_and_only_for_its_own_node() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-need");
    let (node_a, node_b) = (h::unique("trust-na"), h::unique("trust-nb"));
    h::ensure_node(&node_b);
    let pool = h::unique("trust-need");
    let need = |node: &str| h::NeedFixture::new(&pool, node).build();
    let pp = PostParams::default();

    // A tenant's own ServiceAccount: no RBAC on needs...
    let tenant =
        ExtraServiceAccount::create(PROBE_NS, &h::unique("tenant"), &["view"], &["get", "pods", "-n", PROBE_NS]);
    let kc = dir.join("tenant.kubeconfig");
    h::sa_kubeconfig(PROBE_NS, &tenant.name, &kc, None);
    let as_tenant: Api<NetworkEndpointNeed> = Api::all(h::client_for(&kc).await);
    let r = as_tenant.create(&pp, &need(&node_b)).await;
    assert_refused("a tenant creates a need", r, 403, "cannot create resource \"networkendpointneeds\"");
    // ...and where RBAC lets it, the policy refuses.
    ensure_cluster_role("netendpoint-trust-need-writer", &["networkendpointneeds"], &["create", "patch", "delete"]);
    let writer = ExtraServiceAccount::create(
        PROBE_NS,
        &h::unique("need-writer"),
        &["netendpoint-trust-need-writer"],
        &["create", "networkendpointneeds.netendpoint.dev"],
    );
    let kc = dir.join("writer.kubeconfig");
    h::sa_kubeconfig(PROBE_NS, &writer.name, &kc, None);
    let as_writer: Api<NetworkEndpointNeed> = Api::all(h::client_for(&kc).await);
    let r = as_writer.create(&pp, &need(&node_b)).await;
    assert_refused("a ServiceAccount with RBAC creates a need", r, 403, "only the plugin");

    // The plugin of node A: its own node's need only.
    let plugin_a: Api<NetworkEndpointNeed> = Api::all(node_bound(CNI_SERVICE_ACCOUNT, &node_a, &dir).await);
    let r = plugin_a.create(&pp, &need(&node_b)).await;
    assert_refused("plugin A raises a need of node B", r, 403, "may act only on its own node");
    let mut decorated = need(&node_a);
    decorated.metadata.annotations = Some([("padding".to_string(), "x".repeat(100_000))].into());
    let r = plugin_a.create(&pp, &decorated).await;
    assert_refused("plugin A pads its need", r, 422, "carries no labels, annotations");
    plugin_a.create(&pp, &need(&node_a)).await.unwrap();
    plugin_a
        .patch(&format!("{pool}.{node_a}"), &PatchParams::default(), &merge(json!({"spec": {"waitSeconds": 5}})))
        .await
        .unwrap();
    let admin: Api<NetworkEndpointNeed> = Api::all(h::client().await);
    admin.create(&pp, &need(&node_b)).await.unwrap();
    let r = plugin_a.delete(&format!("{pool}.{node_b}"), &DeleteParams::default()).await;
    assert_refused("plugin A withdraws node B's need", r, 403, "may act only on its own node");
    plugin_a.delete(&format!("{pool}.{node_a}"), &DeleteParams::default()).await.unwrap();
    // The controller deletes a stale need, and writes none.
    let controller: Api<NetworkEndpointNeed> = Api::all(as_controller(&dir).await);
    let r = controller.create(&pp, &need(&node_a)).await;
    assert_refused("the controller raises a need", r, 403, "");
    controller.delete(&format!("{pool}.{node_b}"), &DeleteParams::default()).await.unwrap();
}

/// Finding 1 and the sticky holds: a plugin creates its own node's hold,
/// asks for the next incarnation only for its own node, never creates an
/// incarnation, and deletes its hold only before the first incarnation.
#[tokio::test]
async fn a_plugin_token_asks_for_incarnations_and_never_makes_one() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-hold");
    let (node_a, node_b) = (h::unique("trust-ha"), h::unique("trust-hb"));
    h::ensure_node(&node_b);
    let plugin_a = as_node_bound(CNI_SERVICE_ACCOUNT, &node_a, &dir).await;
    let admin = h::endpoints().await;
    let pool = h::unique("trust-hold");
    let _ranges = h::register_pool(&pool, &["10.79.5.0/24"]);
    let (pp, patch_pp) = (PostParams::default(), PatchParams::default());

    // Its own node's hold, and its rollback before the first incarnation.
    let fresh = plugin_a.create(&pp, &hold(&pool, "10.79.5.1", &node_a, "web-0.a")).await.unwrap();
    plugin_a.delete(fresh.metadata.name.as_deref().unwrap(), &DeleteParams::default()).await.unwrap();
    // Never an incarnation, not even of its own hold on its own node.
    let mine = plugin_a.create(&pp, &hold(&pool, "10.79.5.2", &node_a, "web-0.b")).await.unwrap();
    let r = plugin_a.create(&pp, &incarnation(&mine, 1, &node_a)).await;
    assert_refused("the plugin creates an incarnation", r, 403, "only netendpoint-controller creates the incarnation");

    // A hold of node B with its first incarnation (as the controller makes them).
    let theirs = admin.create(&pp, &hold(&pool, "10.79.5.3", &node_b, "web-0.c")).await.unwrap();
    let theirs_name = theirs.metadata.name.clone().unwrap();
    let first = admin.create(&pp, &incarnation(&theirs, 1, &node_b)).await.unwrap();
    let created =
        netendpoint_lease::hold::created_patch(&theirs, &request(1, &node_b), first.metadata.name.as_deref().unwrap());
    let theirs = admin.patch_status(&theirs_name, &patch_pp, &Patch::Json::<()>(created)).await.unwrap();
    // A request naming another node, or touching what the controller writes, is refused.
    let forged = netendpoint_lease::hold::request_patch(&theirs, &request(2, &node_b));
    let r = plugin_a.patch_status(&theirs_name, &patch_pp, &Patch::Json::<()>(forged)).await;
    assert_refused("plugin A asks for node B", r, 403, "naming its own node");
    let bump = json_patch(json!([{"op": "add", "path": "/status/request", "value": request(2, &node_a)},
                                 {"op": "replace", "path": "/status/incarnation", "value": 2}]));
    let r = plugin_a.patch_status(&theirs_name, &patch_pp, &bump).await;
    assert_refused("plugin A moves the incarnation", r, 403, "writes only status.request");
    let r = plugin_a
        .patch_status(
            first.metadata.name.as_deref().unwrap(),
            &patch_pp,
            &merge(json!({"status": {"request": request(2, &node_a)}})),
        )
        .await;
    assert_refused("plugin A writes the status of an endpoint", r, 403, "writes only status.request");
    // The hold of its own node that has an incarnation stays.
    let mine_first = admin.create(&pp, &incarnation(&mine, 1, &node_a)).await.unwrap();
    let created = netendpoint_lease::hold::created_patch(
        &mine,
        &request(1, &node_a),
        mine_first.metadata.name.as_deref().unwrap(),
    );
    admin.patch_status(mine.metadata.name.as_deref().unwrap(), &patch_pp, &Patch::Json::<()>(created)).await.unwrap();
    let r = plugin_a.delete(mine.metadata.name.as_deref().unwrap(), &DeleteParams::default()).await;
    assert_refused("the plugin deletes a hold that has an incarnation", r, 403, "deletes a hold only to roll back");
    // What it may do: ask for the next incarnation of any node's hold, for its own node,
    let ask = netendpoint_lease::hold::request_patch(&theirs, &request(2, &node_a));
    let asked = plugin_a.patch_status(&theirs_name, &patch_pp, &Patch::Json::<()>(ask)).await.unwrap();
    // and withdraw that request (its sandbox went before the incarnation came),
    let withdraw = netendpoint_lease::hold::withdraw_patch(&asked);
    let asked_again = plugin_a.patch_status(&theirs_name, &patch_pp, &Patch::Json::<()>(withdraw)).await.unwrap();
    assert_eq!(asked_again.status.as_ref().and_then(|s| s.request.clone()), None);
    // but never node B's request.
    let theirs_asked = netendpoint_lease::hold::request_patch(&asked_again, &request(2, &node_b));
    let theirs_asked = admin.patch_status(&theirs_name, &patch_pp, &Patch::Json::<()>(theirs_asked)).await.unwrap();
    let r = plugin_a
        .patch_status(
            &theirs_name,
            &patch_pp,
            &Patch::Json::<()>(netendpoint_lease::hold::withdraw_patch(&theirs_asked)),
        )
        .await;
    assert_refused("plugin A withdraws node B's request", r, 403, "writes only status.request");
    // A hold is no endpoint: even being released, the plugin removes nothing from it.
    let fin = admin.create(&pp, &hold(&pool, "10.79.5.4", &node_a, "web-0.d")).await.unwrap();
    let fin_name = fin.metadata.name.clone().unwrap();
    admin.patch(&fin_name, &patch_pp, &merge(json!({"metadata": {"finalizers": [OWN]}}))).await.unwrap();
    admin.delete(&fin_name, &DeleteParams::default()).await.unwrap();
    let strip = json_patch(json!([{"op": "remove", "path": "/metadata/finalizers/0"}]));
    let r = plugin_a.patch(&fin_name, &patch_pp, &strip).await;
    assert_refused("the plugin strips a hold", r, 403, "only by removing finalizers from its own node's endpoint");
    h::cleanup_pool(&pool).await;
}
