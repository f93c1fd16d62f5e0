//! Trust boundaries, enforced by the real API server with the manifests of
//! deploy/ applied: the CRD's CEL rules (name, immutable spec) and the
//! admission policies (label integrity, the plugin's and the agents' scope).
//! Every identity below authenticates with a real token minted by the
//! TokenRequest API and bound to a Node, so the server itself adds the
//! `authentication.kubernetes.io/node-name` the policies read. Each denial is
//! the server's answer to a request the client did send.

#![allow(clippy::unwrap_used)]

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use netendpoint_crd::NetworkEndpoint;
use netendpoint_tests::{self as h, CNI_SERVICE_ACCOUNT, DEPLOY_NAMESPACE, WATCHER_SERVICE_ACCOUNT};
use serde_json::json;
use watcher_example::finalizer::{Removal, add_own_finalizer, remove_own_finalizer};

/// The finalizer the agents ConfigMap in deploy/ binds to the watcher-example ServiceAccount.
const OWN: &str = "watcher.netendpoint.dev/rules";
/// Another agent's finalizer.
const OTHER: &str = "other-agent.example.com/rules";

/// Asserts that the API server refused `r` with `code`, and that its message contains `says`.
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>, code: u16, says: &str) {
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, code, "{what}: {s:?}");
            assert!(s.message.contains(says), "{what}: expected {says:?} in {:?}", s.message);
        }
        other => panic!("{what} must be refused by the API server: {other:?}"),
    }
}

fn json_patch(ops: serde_json::Value) -> Patch<()> {
    Patch::Json(serde_json::from_value(ops).unwrap())
}

fn merge(v: serde_json::Value) -> Patch<serde_json::Value> {
    Patch::Merge(v)
}

/// `api` as the ServiceAccount `sa` with a token bound to `node`.
async fn as_node_bound(sa: &str, node: &str, dir: &h::TempDir) -> Api<NetworkEndpoint> {
    let kc = dir.join(&format!("{sa}-{node}.kubeconfig"));
    h::node_bound_kubeconfig(DEPLOY_NAMESPACE, sa, node, &kc);
    Api::all(h::client_for(&kc).await)
}

/// A lease as the plugin writes it: every mirrored label and the annotation.
fn full_lease(pool: &str, ip: &str, node: &str, finalizers: &[&str]) -> NetworkEndpoint {
    let mut ep = h::lease(pool, ip, &h::unique("ctr"), node, finalizers);
    let labels = ep.metadata.labels.get_or_insert_default();
    for (k, v) in [
        (netendpoint_crd::LABEL_IP_FAMILY, if ip.contains(':') { "6" } else { "4" }),
        (netendpoint_crd::LABEL_NETWORK, pool),
        (netendpoint_crd::LABEL_POD_NAMESPACE, "default"),
        (netendpoint_crd::LABEL_POD_NAME, "web-0"),
        (netendpoint_crd::LABEL_POD_UID, "u1"),
    ] {
        labels.insert(k.to_string(), v.to_string());
    }
    ep.spec.force_release_after = Some("600s".into());
    ep.metadata.annotations =
        Some([(netendpoint_crd::ANNOTATION_FORCE_RELEASE_AFTER.to_string(), "600s".to_string())].into());
    ep
}

#[tokio::test]
async fn the_crd_ties_the_name_to_pool_and_ip_and_freezes_spec() {
    h::apply_deploy();
    let admin = h::endpoints().await;
    let pool = h::unique("trust-crd");
    let pp = PostParams::default();

    // The plugin's own names are accepted, for both families.
    let v4 = admin.create(&pp, &full_lease(&pool, "10.79.0.5", "trust-n1", &[])).await.unwrap();
    let v6 = admin.create(&pp, &full_lease(&pool, "fd00::79:5", "trust-n1", &[])).await.unwrap();
    assert_eq!(v6.metadata.name.as_deref(), Some(&*format!("{pool}.fd00-0000-0000-0000-0000-0000-0079-0005")));

    // A name that is not pool + encoded IP is refused.
    let mut wrong_ip = full_lease(&pool, "10.79.0.6", "trust-n1", &[]);
    wrong_ip.metadata.name = Some(format!("{pool}.10.79.0.7"));
    assert_refused("name of another IPv4", admin.create(&pp, &wrong_ip).await, 422, "metadata.name must be");
    let mut wrong_pool = full_lease(&pool, "10.79.0.6", "trust-n1", &[]);
    wrong_pool.metadata.name = Some("elsewhere.10.79.0.6".into());
    assert_refused("name of another pool", admin.create(&pp, &wrong_pool).await, 422, "metadata.name must be");
    let mut wrong_v6 = full_lease(&pool, "fd00::79:6", "trust-n1", &[]);
    wrong_v6.metadata.name = Some(format!("{pool}.fd00-0000-0000-0000-0000-0000-0079-0007"));
    assert_refused("name of another IPv6", admin.create(&pp, &wrong_v6).await, 422, "metadata.name must be");
    let mut short_v6 = full_lease(&pool, "fd00::79:6", "trust-n1", &[]);
    short_v6.metadata.name = Some(format!("{pool}.fd00--79-6"));
    assert_refused("compressed IPv6 name", admin.create(&pp, &short_v6).await, 422, "metadata.name must be");

    // spec is immutable, for every field and every caller.
    let name = v4.metadata.name.clone().unwrap();
    for (field, value) in
        [("node", json!("trust-n2")), ("ip", json!("10.79.0.9")), ("containerID", json!("x")), ("static", json!(true))]
    {
        let r = admin.patch(&name, &PatchParams::default(), &merge(json!({"spec": {field: value}}))).await;
        assert_refused(&format!("patch spec.{field}"), r, 422, "spec is immutable");
    }
    // Labels and the annotation that mirror spec cannot drift, not even for an administrator.
    let drift = [
        json!({"metadata": {"labels": {"netendpoint.dev/node": "trust-n2"}}}),
        json!({"metadata": {"labels": {"netendpoint.dev/node": null}}}),
        json!({"metadata": {"labels": {"netendpoint.dev/block": "10.79.0.64"}}}),
        json!({"metadata": {"labels": {"netendpoint.dev/pod-name": "web-1"}}}),
        json!({"metadata": {"annotations": {"netendpoint.dev/force-release-after": "1s"}}}),
    ];
    for patch in drift {
        let r = admin.patch(&name, &PatchParams::default(), &merge(patch.clone())).await;
        assert_refused(&format!("{patch}"), r, 422, "netendpoint-lease-integrity");
    }
    let mut mislabelled = full_lease(&pool, "10.79.0.10", "trust-n1", &[]);
    mislabelled.metadata.labels.as_mut().unwrap().insert("netendpoint.dev/node".into(), "trust-n2".into());
    assert_refused("create with a drifted label", admin.create(&pp, &mislabelled).await, 422, "must equal");
    // A static lease is accepted, and its mark is frozen with the rest of spec.
    let mut marked = full_lease(&pool, "10.79.0.11", "trust-n1", &[]);
    marked.spec.static_ip = Some(true);
    let marked = admin.create(&pp, &marked).await.unwrap();
    assert_eq!(marked.spec.static_ip, Some(true), "the API server keeps spec.static");
    let marked_name = marked.metadata.name.unwrap();
    let r = admin.patch(&marked_name, &PatchParams::default(), &merge(json!({"spec": {"static": null}}))).await;
    assert_refused("unmark a static lease", r, 422, "spec is immutable");
    // Other labels stay free.
    admin.patch(&name, &PatchParams::default(), &merge(json!({"metadata": {"labels": {"team": "a"}}}))).await.unwrap();
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn a_plugin_token_acts_only_on_its_own_nodes_leases() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-plugin");
    let (node_a, node_b) = (h::unique("trust-pa"), h::unique("trust-pb"));
    h::ensure_node(&node_b);
    let plugin_a = as_node_bound(CNI_SERVICE_ACCOUNT, &node_a, &dir).await;
    let admin = h::endpoints().await;
    let pool = h::unique("trust-plugin");
    let pp = PostParams::default();
    let patch_pp = PatchParams::default();

    // Create: only leases of its own node.
    let r = plugin_a.create(&pp, &full_lease(&pool, "10.79.1.1", &node_b, &[])).await;
    assert_refused("plugin A creates a lease of node B", r, 403, "may act only on its own leases");
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
    assert_refused("plugin A deletes a lease of node B", r, 403, "may act only on its own leases");

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
    assert!(plugin_a.patch(&own_name, &patch_pp, &add).await.is_err(), "plugin adds a finalizer to a release");
    // Removing finalizers of another node's release is refused...
    admin.delete(&theirs_name, &DeleteParams::default()).await.unwrap();
    let r = plugin_a.patch(&theirs_name, &patch_pp, &strip).await;
    assert_refused("plugin A force-releases a lease of node B", r, 403, "may act only on its own leases");
    assert!(admin.get(&theirs_name).await.unwrap().metadata.finalizers.is_some_and(|f| f == [OWN]));
    // ...and of its own node's release allowed (forced release on its own node).
    plugin_a.patch(&own_name, &patch_pp, &strip).await.unwrap();
    assert!(admin.get_opt(&own_name).await.unwrap().is_none(), "the release completed");
    h::cleanup_pool(&pool).await;
}

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
    // In a namespace of its own, so that a failed run leaves deploy/'s namespace as it was.
    const NS: &str = "netendpoint-trust-probe";
    let _ = h::kubectl(&["create", "namespace", NS]);
    let sa = h::unique("rogue-agent");
    let out = h::kubectl(&["create", "serviceaccount", &sa, "-n", NS]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let binding = format!("{sa}-patch");
    let out = h::kubectl(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=netendpoint-watcher-example",
        &format!("--serviceaccount={NS}:{sa}"),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let user = format!("system:serviceaccount:{NS}:{sa}");
    for _ in 0..100 {
        if h::kubectl(&["auth", "can-i", "patch", "networkendpoints.netendpoint.dev", "--as", &user]).status.success() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    let dir = h::TempDir::new("trust-rogue");
    let node = h::unique("trust-rn");
    let kc = dir.join("rogue.kubeconfig");
    h::token_kubeconfig(&h::node_bound_token(NS, &sa, &node), &kc);
    let rogue: Api<NetworkEndpoint> = Api::all(h::client_for(&kc).await);
    let admin = h::endpoints().await;
    let pool = h::unique("trust-rogue");
    let ep = admin.create(&PostParams::default(), &full_lease(&pool, "10.79.3.1", &node, &[OWN])).await.unwrap();
    let r = remove_own_finalizer(&rogue, &ep, OWN).await;
    assert!(
        matches!(&r, Err(watcher_example::error::Error::Finalizer { source: kube::Error::Api(s), .. })
            if s.code == 403 && s.message.contains("no registered agent")),
        "an unregistered ServiceAccount removes a finalizer: {r:?}"
    );
    assert_eq!(admin.get(&ep.metadata.name.clone().unwrap()).await.unwrap().metadata.finalizers.unwrap(), [OWN]);
    let _ = h::kubectl(&["delete", "clusterrolebinding", &binding]);
    let _ = h::kubectl(&["delete", "serviceaccount", &sa, "-n", NS]);
    h::cleanup_pool(&pool).await;
}
