//! Trust boundaries of the agents' identities (a ServiceAccount listed in
//! the agents ConfigMap of deploy/, with a real token bound to its Node),
//! enforced by the real API server with the manifests of deploy/ applied:
//! an agent removes or adds only its own finalizer, on its own node's
//! endpoints, never a hold's or a status, never a lease; a ServiceAccount
//! that is not listed changes nothing, in any namespace. Each denial is the
//! server's answer to a request the client did send; each test names the
//! finding of the trust issue it closes.

#![allow(clippy::unwrap_used)]

use kube::api::{Api, DeleteParams, PatchParams, PostParams};
use netendpoint_crd::NetworkEndpoint;
use netendpoint_tests::trust::*;
use netendpoint_tests::{self as h, DEPLOY_NAMESPACE, WATCHER_SERVICE_ACCOUNT};
use serde_json::json;
use watcher_example::finalizer::{Removal, add_own_finalizer, remove_own_finalizer};

#[tokio::test]
async fn an_agent_token_changes_only_its_own_finalizer_on_its_own_node() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-agent");
    let (node_a, node_b) = (h::unique("trust-aa"), h::unique("trust-ab"));
    h::ensure_node(&node_b);
    let agent_a = as_node_bound(WATCHER_SERVICE_ACCOUNT, &node_a, &dir).await;
    let admin = h::endpoints().await;
    let pool = h::unique("trust-agent");
    let pp = PostParams::default();
    let patch_pp = PatchParams::default();

    let mine = admin.create(&pp, &full_lease(&pool, "10.79.2.1", &node_a, &[OTHER, OWN])).await.unwrap();
    let mine_name = mine.metadata.name.clone().unwrap();
    let theirs = admin.create(&pp, &full_lease(&pool, "10.79.2.2", &node_b, &[OWN])).await.unwrap();
    let theirs_name = theirs.metadata.name.clone().unwrap();

    // Another agent's finalizer: neither removed nor added.
    let strip_first = json_patch(json!([{"op": "remove", "path": "/metadata/finalizers/0"}]));
    let r = agent_a.patch(&mine_name, &patch_pp, &strip_first).await;
    assert_refused("agent removes another agent's finalizer", r, 403, "only its own finalizer");
    let add_foreign =
        json_patch(json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "foreign.example.com/x"}]));
    let r = agent_a.patch(&mine_name, &patch_pp, &add_foreign).await;
    assert_refused("agent adds a foreign finalizer", r, 403, "only its own finalizer");
    // Rewriting the whole list, keeping its own, is no loophole.
    let r = agent_a.patch(&mine_name, &patch_pp, &merge(json!({"metadata": {"finalizers": [OWN]}}))).await;
    assert_refused("agent rewrites the list", r, 403, "only its own finalizer");
    // No spec, label or annotation change.
    let r = agent_a.patch(&mine_name, &patch_pp, &merge(json!({"spec": {"ip": "10.79.2.9"}}))).await;
    assert_refused("agent patches spec.ip", r, 422, "spec is immutable");
    let r = agent_a.patch(&mine_name, &patch_pp, &merge(json!({"metadata": {"labels": {"team": "a"}}}))).await;
    assert_refused("agent adds a label", r, 403, "changes nothing in a lease but its own finalizer");
    // Leases of node B: not even its own finalizer.
    let r = remove_own_finalizer(&agent_a, &theirs, OWN).await;
    assert!(
        matches!(&r, Err(watcher_example::error::Error::Finalizer { source: kube::Error::Api(s), .. }) if s.code == 403),
        "agent A removes its finalizer from a lease of node B: {r:?}"
    );
    assert_eq!(admin.get(&theirs_name).await.unwrap().metadata.finalizers.unwrap(), [OWN]);
    // Never a create or delete (RBAC already refuses both).
    let r = agent_a.create(&pp, &full_lease(&pool, "10.79.2.3", &node_a, &[])).await;
    assert_refused("agent creates a lease", r, 403, "forbidden");
    assert_refused(
        "agent deletes a lease",
        agent_a.delete(&mine_name, &DeleteParams::default()).await,
        403,
        "forbidden",
    );

    // What it may do: remove and add its own finalizer on its own node's lease.
    assert_eq!(remove_own_finalizer(&agent_a, &mine, OWN).await.unwrap(), Removal::Removed);
    let now = admin.get(&mine_name).await.unwrap();
    assert_eq!(now.metadata.finalizers.as_deref(), Some(&[OTHER.to_string()][..]));
    assert!(add_own_finalizer(&agent_a, &now, OWN).await.unwrap());

    // The same ServiceAccount with a token bound to no node may do nothing.
    let unbound_kc = dir.join("unbound.kubeconfig");
    h::sa_kubeconfig(DEPLOY_NAMESPACE, WATCHER_SERVICE_ACCOUNT, &unbound_kc, None);
    let unbound: Api<NetworkEndpoint> = Api::all(h::client_for(&unbound_kc).await);
    let now = admin.get(&mine_name).await.unwrap();
    let r = remove_own_finalizer(&unbound, &now, OWN).await;
    assert!(
        matches!(&r, Err(watcher_example::error::Error::Finalizer { source: kube::Error::Api(s), .. }) if s.code == 403),
        "an unbound agent token removes a finalizer: {r:?}"
    );
    h::cleanup_pool(&pool).await;
}

/// A ServiceAccount that RBAC allows to patch leases but that is not listed
/// in the agents ConfigMap owns no finalizer and may change nothing.
#[tokio::test]
async fn an_unregistered_agent_may_not_write_leases_whatever_rbac_grants() {
    h::apply_deploy();
    let rogue = ExtraServiceAccount::create(
        PROBE_NS,
        &h::unique("rogue-agent"),
        &["netendpoint-watcher-example"],
        &["patch", "networkendpoints.netendpoint.dev"],
    );
    let dir = h::TempDir::new("trust-rogue");
    let node = h::unique("trust-rn");
    let leases = rogue.leases_on(&node, &dir).await;
    let admin = h::endpoints().await;
    let pool = h::unique("trust-rogue");
    let ep = admin.create(&PostParams::default(), &full_lease(&pool, "10.79.3.1", &node, &[OWN])).await.unwrap();
    let r = remove_own_finalizer(&leases, &ep, OWN).await;
    assert!(
        matches!(&r, Err(watcher_example::error::Error::Finalizer { source: kube::Error::Api(s), .. })
            if s.code == 403 && s.message.contains("no registered agent")),
        "an unregistered ServiceAccount removes a finalizer: {r:?}"
    );
    assert_eq!(admin.get(&ep.metadata.name.clone().unwrap()).await.unwrap().metadata.finalizers.unwrap(), [OWN]);
    h::cleanup_pool(&pool).await;
}

/// Finding 4: no namespace is exempt. A kube-system ServiceAccount with an
/// agent's RBAC (as many CNIs run their node agents there) is an agent like
/// any other: unregistered, it may not remove another agent's finalizer.
#[tokio::test]
async fn a_kube_system_service_account_is_an_agent_like_any_other() {
    h::apply_deploy();
    let sa = ExtraServiceAccount::create(
        "kube-system",
        &h::unique("cni-agent"),
        &["netendpoint-watcher-example"],
        &["patch", "networkendpoints.netendpoint.dev"],
    );
    let dir = h::TempDir::new("trust-kube-system");
    let (node_a, node_b) = (h::unique("trust-ka"), h::unique("trust-kb"));
    h::ensure_node(&node_b);
    let leases = sa.leases_on(&node_a, &dir).await;
    let admin = h::endpoints().await;
    let pool = h::unique("trust-kube-system");
    let theirs = admin.create(&PostParams::default(), &full_lease(&pool, "10.79.9.1", &node_b, &[OWN])).await.unwrap();
    let name = theirs.metadata.name.clone().unwrap();
    admin.delete(&name, &DeleteParams::default()).await.unwrap();
    let strip = json_patch(json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": OWN},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]));
    let r = leases.patch(&name, &PatchParams::default(), &strip).await;
    assert_refused("a kube-system ServiceAccount removes another agent's finalizer", r, 403, "no registered agent");
    assert_eq!(admin.get(&name).await.unwrap().metadata.finalizers.unwrap(), [OWN]);
    h::cleanup_pool(&pool).await;
}

/// Finding 8 (agents ConfigMap): a line that grants a netendpoint.dev
/// finalizer grants nothing, and an agent never touches a hold or a status.
#[tokio::test]
async fn no_agent_owns_a_netendpoint_finalizer_nor_touches_holds_or_status() {
    h::apply_deploy();
    // RBAC lets it write statuses, create and delete leases too: the policy must refuse.
    ensure_cluster_role("netendpoint-trust-status-writer", &["networkendpoints/status"], &["patch"]);
    ensure_cluster_role("netendpoint-trust-lease-writer", &["networkendpoints"], &["create", "delete"]);
    let sa = ExtraServiceAccount::create(
        PROBE_NS,
        &h::unique("greedy-agent"),
        &["netendpoint-watcher-example", "netendpoint-trust-status-writer", "netendpoint-trust-lease-writer"],
        &["patch", "networkendpoints.netendpoint.dev", "--subresource=status"],
    );
    let dir = h::TempDir::new("trust-greedy");
    let node = h::unique("trust-ga");
    let leases = sa.leases_on(&node, &dir).await;
    let admin = h::endpoints().await;
    let pool = h::unique("trust-greedy");
    let pp = PostParams::default();
    let _greedy = h::AgentLines::set(&[(&sa.key(), netendpoint_crd::FINALIZER_STICKY_HOLD)]);
    // An old lease that still carries the hold finalizer, being released.
    let held =
        admin.create(&pp, &full_lease(&pool, "10.79.11.1", &node, &[netendpoint_crd::FINALIZER_STICKY_HOLD])).await;
    let name = held.unwrap().metadata.name.unwrap();
    admin.delete(&name, &DeleteParams::default()).await.unwrap();
    let strip = json_patch(json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": netendpoint_crd::FINALIZER_STICKY_HOLD},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]));
    let r = leases.patch(&name, &PatchParams::default(), &strip).await;
    assert_refused(
        "an agent removes the hold finalizer it was granted",
        r,
        403,
        "no agent owns a netendpoint.dev finalizer",
    );

    // A registered agent and a hold on its node: no finalizer, no status.
    let _own = h::AgentLines::set(&[(&sa.key(), "greedy.example.com/rules")]);
    let a_hold = admin.create(&pp, &hold(&pool, "10.79.11.2", &node, "web-0.greedy")).await.unwrap();
    let add = json_patch(json!([{"op": "add", "path": "/metadata/finalizers", "value": ["greedy.example.com/rules"]}]));
    let r = leases.patch(a_hold.metadata.name.as_deref().unwrap(), &PatchParams::default(), &add).await;
    assert_refused("an agent adds its finalizer to a hold", r, 403, "never touches a hold");
    let status = merge(json!({"status": {"message": "mine"}}));
    let r = leases.patch_status(a_hold.metadata.name.as_deref().unwrap(), &PatchParams::default(), &status).await;
    assert_refused("an agent writes the status of a hold", r, 403, "never writes the status");
    // Whatever RBAC grants, an agent neither leases nor releases.
    let _ranges = h::register_pool(&pool, &["10.79.11.0/24"]);
    let r = leases.create(&pp, &full_lease(&pool, "10.79.11.3", &node, &["greedy.example.com/rules"])).await;
    assert_refused("an agent creates a lease", r, 403, "never creates or deletes");
    let live = admin.create(&pp, &full_lease(&pool, "10.79.11.4", &node, &[])).await.unwrap();
    let r = leases.delete(live.metadata.name.as_deref().unwrap(), &DeleteParams::default()).await;
    assert_refused("an agent deletes a lease", r, 403, "never creates or deletes");
    h::cleanup_pool(&pool).await;
}
