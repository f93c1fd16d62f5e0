//! Trust boundaries, enforced by the real API server with the manifests of
//! deploy/ applied: the CRD's schema and CEL rules (name, bounds, immutable
//! spec), RBAC, and the admission policies (lease integrity, what a new
//! lease may carry, the pools' ranges, the plugin's, the controller's and
//! the agents' scope, the need signal, the installer's tokens). Every
//! identity below authenticates with a real token minted by the
//! TokenRequest API: the plugin's and the agents' bound to a Node, so the
//! server itself adds the `authentication.kubernetes.io/node-name` the
//! policies read. Each denial is the server's answer to a request the client
//! did send; each test names the finding of the trust issue it closes.

#![allow(clippy::unwrap_used)]

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use netendpoint_crd::{ClaimRef, IncarnationRequest, NetworkEndpoint, NetworkEndpointNeed, PodRef, Role};
use netendpoint_tests::{
    self as h, CNI_SERVICE_ACCOUNT, DEPLOY_NAMESPACE, INSTALLER_SERVICE_ACCOUNT, WATCHER_SERVICE_ACCOUNT,
};
use serde_json::json;
use watcher_example::finalizer::{Removal, add_own_finalizer, remove_own_finalizer};

/// The finalizer the agents ConfigMap in deploy/ binds to the watcher-example ServiceAccount.
const OWN: &str = "watcher.netendpoint.dev/rules";
/// Another agent's finalizer.
const OTHER: &str = "other-agent.example.com/rules";
/// The controller's ServiceAccount.
const CONTROLLER_SERVICE_ACCOUNT: &str = "netendpoint-controller";
/// A namespace of the tests' own, so that a failed run leaves deploy/'s as it was.
const PROBE_NS: &str = "netendpoint-trust-probe";

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

/// A client of the ServiceAccount `sa` with a token bound to `node`.
async fn node_bound(sa: &str, node: &str, dir: &h::TempDir) -> kube::Client {
    let kc = dir.join(&format!("{sa}-{node}.kubeconfig"));
    h::node_bound_kubeconfig(DEPLOY_NAMESPACE, sa, node, &kc);
    h::client_for(&kc).await
}

/// Leases as the ServiceAccount `sa` with a token bound to `node`.
async fn as_node_bound(sa: &str, node: &str, dir: &h::TempDir) -> Api<NetworkEndpoint> {
    Api::all(node_bound(sa, node, dir).await)
}

/// A client of the controller's ServiceAccount (a TokenRequest token, as
/// the kubelet projects it into the controller's Pod).
async fn as_controller(dir: &h::TempDir) -> kube::Client {
    let kc = dir.join("controller.kubeconfig");
    h::sa_kubeconfig(DEPLOY_NAMESPACE, CONTROLLER_SERVICE_ACCOUNT, &kc, None);
    h::client_for(&kc).await
}

/// Labels and annotation of `ep` as the plugin writes them for its spec.
fn relabel(ep: &mut NetworkEndpoint) {
    ep.metadata.labels = Some(netendpoint_lease::labels::of(&ep.spec));
    ep.metadata.annotations = netendpoint_lease::labels::annotations_of(&ep.spec);
}

/// A lease as the plugin writes it: every mirrored label and the annotation.
fn full_lease(pool: &str, ip: &str, node: &str, finalizers: &[&str]) -> NetworkEndpoint {
    let mut ep = h::lease(pool, ip, &h::unique("ctr"), node, finalizers);
    ep.spec.force_release_after = Some("600s".into());
    relabel(&mut ep);
    ep
}

/// The sticky hold of claim `claim` at `ip`, created on `node`, as the plugin writes it.
fn hold(pool: &str, ip: &str, node: &str, claim: &str) -> NetworkEndpoint {
    let mut ep = full_lease(pool, ip, node, &[]);
    ep.metadata.finalizers = None;
    ep.spec.role = Some(Role::Hold);
    ep.spec.claim = Some(ClaimRef { namespace: "default".into(), name: claim.into(), uid: h::unique("claim-uid") });
    ep.spec.endpoint_finalizers = Some(vec![OWN.into()]);
    relabel(&mut ep);
    ep
}

/// Incarnation `k` of `hold` on `node`, as the controller creates it.
fn incarnation(hold: &NetworkEndpoint, k: u32, node: &str) -> NetworkEndpoint {
    netendpoint_lease::hold::incarnation_object(hold, &request(k, node)).unwrap()
}

/// A request for incarnation `k` by a sandbox on `node`.
fn request(k: u32, node: &str) -> IncarnationRequest {
    IncarnationRequest {
        incarnation: k,
        node: node.into(),
        container_id: h::unique("ctr"),
        if_name: "eth0".into(),
        pod: PodRef { namespace: "default".into(), name: "web-0".into(), uid: h::unique("pod-uid") },
        accepted: false,
        deadline: None,
    }
}

/// A ServiceAccount `ns/name` bound to ClusterRoles, deleted with its bindings on drop.
struct ExtraServiceAccount {
    ns: String,
    name: String,
    bindings: Vec<String>,
}

impl ExtraServiceAccount {
    /// Creates it, binds it to `clusterroles`, and waits until RBAC answers `can-i <can>` for it.
    fn create(ns: &str, name: &str, clusterroles: &[&str], can: &[&str]) -> Self {
        let _ = h::kubectl(&["create", "namespace", ns]);
        let out = h::kubectl(&["create", "serviceaccount", name, "-n", ns]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut bindings = Vec::new();
        for role in clusterroles {
            let binding = format!("{name}-{role}");
            let out = h::kubectl(&[
                "create",
                "clusterrolebinding",
                &binding,
                &format!("--clusterrole={role}"),
                &format!("--serviceaccount={ns}:{name}"),
            ]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            bindings.push(binding);
        }
        let user = format!("system:serviceaccount:{ns}:{name}");
        let mut args = vec!["auth", "can-i"];
        args.extend_from_slice(can);
        args.extend_from_slice(&["--as", &user]);
        for _ in 0..100 {
            if h::kubectl(&args).status.success() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Self { ns: ns.into(), name: name.into(), bindings }
    }

    /// Its agents ConfigMap key.
    fn key(&self) -> String {
        format!("{}.{}", self.ns, self.name)
    }

    /// Leases as this ServiceAccount, with a token bound to `node`.
    async fn leases_on(&self, node: &str, dir: &h::TempDir) -> Api<NetworkEndpoint> {
        let kc = dir.join(&format!("{}-{node}.kubeconfig", self.name));
        h::token_kubeconfig(&h::node_bound_token(&self.ns, &self.name, node), &kc);
        Api::all(h::client_for(&kc).await)
    }
}

impl Drop for ExtraServiceAccount {
    fn drop(&mut self) {
        for binding in &self.bindings {
            let _ = h::kubectl(&["delete", "clusterrolebinding", binding]);
        }
        let _ = h::kubectl(&["delete", "serviceaccount", &self.name, "-n", &self.ns]);
    }
}

/// A ClusterRole for tests that RBAC lets do `verbs` on `resources` of
/// netendpoint.dev: the API server's policies, not RBAC, must then refuse.
fn ensure_cluster_role(name: &str, resources: &[&str], verbs: &[&str]) {
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
        "rules": [{"apiGroups": ["netendpoint.dev"], "resources": resources, "verbs": verbs}],
    });
    let out = h::kubectl_input(&["apply", "-f", "-"], &role.to_string());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
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
    // Labels and annotations of netendpoint.dev cannot drift, not even for an administrator.
    let drift = [
        json!({"metadata": {"labels": {"netendpoint.dev/node": "trust-n2"}}}),
        json!({"metadata": {"labels": {"netendpoint.dev/node": null}}}),
        json!({"metadata": {"labels": {"netendpoint.dev/block": "10.79.0.64"}}}),
        json!({"metadata": {"labels": {"netendpoint.dev/pod-name": "web-1"}}}),
        json!({"metadata": {"labels": {"netendpoint.dev/role": "hold"}}}),
        json!({"metadata": {"annotations": {"netendpoint.dev/force-release-after": "1s"}}}),
        json!({"metadata": {"annotations": {"netendpoint.dev/sticky-for": "876000h"}}}),
    ];
    for patch in drift {
        let r = admin.patch(&name, &PatchParams::default(), &merge(patch.clone())).await;
        assert_refused(&format!("{patch}"), r, 422, "netendpoint-lease-integrity");
    }
    let mut mislabelled = full_lease(&pool, "10.79.0.10", "trust-n1", &[]);
    mislabelled.metadata.labels.as_mut().unwrap().insert("netendpoint.dev/node".into(), "trust-n2".into());
    assert_refused(
        "create with a drifted label",
        admin.create(&pp, &mislabelled).await,
        422,
        "must be present and equal",
    );
    // A static lease is accepted, and its mark is frozen with the rest of spec.
    let mut marked = full_lease(&pool, "10.79.0.11", "trust-n1", &[]);
    marked.spec.static_ip = Some(true);
    let marked = admin.create(&pp, &marked).await.unwrap();
    assert_eq!(marked.spec.static_ip, Some(true), "the API server keeps spec.static");
    let marked_name = marked.metadata.name.unwrap();
    let r = admin.patch(&marked_name, &PatchParams::default(), &merge(json!({"spec": {"static": null}}))).await;
    assert_refused("unmark a static lease", r, 422, "spec is immutable");
    // Other labels stay free for an administrator.
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
    // The API server admits a Pod only with its ServiceAccount (no controller-manager creates `default` here).
    let _ = h::kubectl(&["create", "serviceaccount", "default", "-n", "default"]);
    let name = h::unique("secret-env");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox", "env": [{"name": "PASSWORD", "value": "hunter2"}]}]},
    }))
    .unwrap();
    admin.create(&PostParams::default(), &pod).await.unwrap();
    assert_refused("the plugin reads a Pod", pods.get(&name).await, 403, "cannot get resource \"pods\"");
    let _ = admin.delete(&name, &DeleteParams::default()).await;
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
    let need = |node: &str| -> NetworkEndpointNeed {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{pool}.{node}")},
            "spec": {"pool": pool, "node": node, "pod": {"namespace": "default", "name": "web-0", "uid": "u1"}, "waitSeconds": 10},
        }))
        .unwrap()
    };
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

/// Finding 3: every lease is created with every label that mirrors its
/// spec, and nothing else of netendpoint.dev; the controller and agents can
/// select by them, and the controller reads the spec.
#[tokio::test]
async fn every_lease_is_created_with_the_labels_that_mirror_its_spec() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-labels");
    let node = h::unique("trust-ln");
    let plugin = as_node_bound(CNI_SERVICE_ACCOUNT, &node, &dir).await;
    let pool = h::unique("trust-labels");
    let _ranges = h::register_pool(&pool, &["10.79.6.0/24", "fd00:79:6::/64"]);
    let pp = PostParams::default();
    type Change = fn(&mut NetworkEndpoint);
    fn labels(ep: &mut NetworkEndpoint) -> &mut std::collections::BTreeMap<String, String> {
        ep.metadata.labels.get_or_insert_default()
    }
    let cases: [(&str, Change, &str, bool); 13] = [
        ("no pool label", |ep| drop(labels(ep).remove("netendpoint.dev/pool")), "must be present and equal", false),
        ("no node label", |ep| drop(labels(ep).remove("netendpoint.dev/node")), "must be present and equal", false),
        (
            "no network label",
            |ep| drop(labels(ep).remove("netendpoint.dev/network")),
            "must be present and equal",
            false,
        ),
        (
            "no pod-uid label",
            |ep| drop(labels(ep).remove("netendpoint.dev/pod-uid")),
            "must be present and equal",
            false,
        ),
        (
            "no pod-name label",
            |ep| drop(labels(ep).remove("netendpoint.dev/pod-name")),
            "must be present and equal",
            false,
        ),
        (
            "another pod-namespace",
            |ep| drop(labels(ep).insert("netendpoint.dev/pod-namespace".into(), "kube-system".into())),
            "must be present and equal",
            false,
        ),
        ("no ip-family label", |ep| drop(labels(ep).remove("netendpoint.dev/ip-family")), "ip-family", false),
        ("no block label", |ep| drop(labels(ep).remove("netendpoint.dev/block")), "netendpoint.dev/block", false),
        (
            "a hold label on an endpoint",
            |ep| drop(labels(ep).insert("netendpoint.dev/role".into(), "hold".into())),
            "netendpoint.dev/role",
            false,
        ),
        (
            "an old sticky-identity label",
            |ep| drop(labels(ep).insert("netendpoint.dev/sticky-identity".into(), "default.web-0".into())),
            "no netendpoint.dev label but",
            false,
        ),
        (
            "no force-release annotation",
            |ep| ep.metadata.annotations = None,
            "netendpoint.dev/force-release-after is present exactly",
            false,
        ),
        (
            "a sticky-for annotation",
            |ep| {
                ep.metadata
                    .annotations
                    .get_or_insert_default()
                    .insert("netendpoint.dev/sticky-for".into(), "876000h".into());
            },
            "no other netendpoint.dev annotation",
            true,
        ),
        (
            "a claim without its labels",
            |ep| {
                ep.spec.claim =
                    Some(ClaimRef { namespace: "default".into(), name: "web-0.x".into(), uid: "k1".into() });
                ep.spec.incarnation = Some(1);
                let name = format!("{}-1", ep.metadata.name.clone().unwrap());
                ep.metadata.name = Some(name);
            },
            "must be present and equal",
            true,
        ),
    ];
    // An administrator is held to the labels too: the cases that another
    // policy would also refuse for the plugin (an annotation of its own, an
    // incarnation, which is the controller's) are sent as the administrator.
    for (i, (what, change, says, by_admin)) in cases.iter().enumerate() {
        let ip = if i % 2 == 0 { format!("10.79.6.{}", 10 + i) } else { format!("fd00:79:6::{:x}", 10 + i) };
        let mut ep = full_lease(&pool, &ip, &node, &[]);
        change(&mut ep);
        let r = if *by_admin { h::endpoints().await.create(&pp, &ep).await } else { plugin.create(&pp, &ep).await };
        assert_refused(what, r, 422, says);
    }
    // The hold: its role label is required.
    let mut unmarked = hold(&pool, "10.79.6.40", &node, "web-0.h");
    labels(&mut unmarked).remove("netendpoint.dev/role");
    assert_refused("a hold without its role label", plugin.create(&pp, &unmarked).await, 422, "netendpoint.dev/role");
    // As the plugin writes them, both families are accepted.
    plugin.create(&pp, &full_lease(&pool, "10.79.6.50", &node, &[])).await.unwrap();
    plugin.create(&pp, &full_lease(&pool, "fd00:79:6::50", &node, &[])).await.unwrap();
    plugin.create(&pp, &hold(&pool, "10.79.6.51", &node, "web-0.h")).await.unwrap();
    h::cleanup_pool(&pool).await;
}

/// Finding 8: a node name longer than 63 characters is labelled by its
/// prefix, which admission recomputes and checks like any other.
#[tokio::test]
async fn a_node_name_longer_than_63_characters_is_checked_by_its_label_prefix() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-long");
    // The 63rd character is a '-', which may not end a label value.
    let node = format!("{}-{}", "n".repeat(62), h::unique("long"));
    assert!(node.len() > 63);
    let plugin = as_node_bound(CNI_SERVICE_ACCOUNT, &node, &dir).await;
    let pool = h::unique("trust-long");
    let _ranges = h::register_pool(&pool, &["10.79.7.0/24"]);
    let pp = PostParams::default();
    let mut wrong = full_lease(&pool, "10.79.7.1", &node, &[]);
    let cut = netendpoint_crd::label_value(&node);
    assert_eq!(cut, "n".repeat(62), "the label loses the trailing '-' of the cut");
    wrong.metadata.labels.as_mut().unwrap().insert("netendpoint.dev/node".into(), "n".repeat(61));
    assert_refused("a long node's wrong label", plugin.create(&pp, &wrong).await, 422, "must be present and equal");
    // The prefix-and-hash form of earlier versions.
    wrong
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("netendpoint.dev/node".into(), format!("{}-0123456789", "n".repeat(52)));
    assert_refused("a long node's hashed label", plugin.create(&pp, &wrong).await, 422, "must be present and equal");
    let right = plugin.create(&pp, &full_lease(&pool, "10.79.7.2", &node, &[])).await.unwrap();
    assert_eq!(right.metadata.labels.unwrap()["netendpoint.dev/node"], cut);
    h::cleanup_pool(&pool).await;
}

/// Finding 3: a lease is bounded (its strings by the CRD) and inside its
/// own pool's ranges (netendpoint-lease-range): no address outside every
/// range, none excluded, none of another pool under an invented name.
#[tokio::test]
async fn a_lease_is_bounded_and_inside_its_own_pools_ranges() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-range");
    let node = h::unique("trust-rn");
    let plugin = as_node_bound(CNI_SERVICE_ACCOUNT, &node, &dir).await;
    let pp = PostParams::default();
    let (wide, narrow, carved) = (h::unique("trust-wide"), h::unique("trust-narrow"), h::unique("trust-carved"));
    let _w = h::register_pool(&wide, &["10.75.0.0/16"]);
    let _n = h::register_pool(&narrow, &["10.75.10.0/24"]);
    let _c = h::register_pool(&carved, &["10.76.20.0/24", "!10.76.20.0/28"]);

    let mut huge = full_lease(&carved, "10.76.20.100", &node, &[]);
    huge.spec.container_id = "c".repeat(1_000_000);
    assert_refused("a 1,000,000-byte containerID", plugin.create(&pp, &huge).await, 422, "Too long");
    let r = plugin.create(&pp, &full_lease(&carved, "8.8.8.8", &node, &[])).await;
    assert_refused("8.8.8.8", r, 403, "is not in the ranges of pool");
    let r = plugin.create(&pp, &full_lease(&carved, "10.76.20.5", &node, &[])).await;
    assert_refused("an excluded address", r, 403, "is not in the ranges of pool");
    let invented = h::unique("trust-invented");
    let r = plugin.create(&pp, &full_lease(&invented, "10.75.10.5", &node, &[])).await;
    assert_refused("another pool's address under an invented pool", r, 403, "has no ranges");
    let r = plugin.create(&pp, &full_lease(&wide, "10.75.10.5", &node, &[])).await;
    assert_refused(
        "another pool's address under a pool that overlaps it",
        r,
        403,
        &format!("belongs to pool {narrow}"),
    );
    // A pool whose ranges do not parse leases nothing.
    let garbled = h::unique("trust-garbled");
    let _g = h::register_pool(&garbled, &["10.76.30.0/24", "10.76.31.0/33"]);
    let r = plugin.create(&pp, &full_lease(&garbled, "10.76.30.5", &node, &[])).await;
    assert_refused("a pool with a malformed range", r, 403, "are not all CIDRs");
    plugin.create(&pp, &full_lease(&carved, "10.76.20.17", &node, &[])).await.unwrap();
    plugin.create(&pp, &full_lease(&wide, "10.75.11.5", &node, &[])).await.unwrap();
    // An administrator is not held to the ranges (a repair by hand).
    h::endpoints().await.create(&pp, &full_lease(&invented, "8.8.8.8", &node, &[])).await.unwrap();
    for pool in [&wide, &narrow, &carved, &invented, &garbled] {
        h::cleanup_pool(pool).await;
    }
}

/// Finding 8: a lease is created with no finalizer but registered agents'
/// (at most 16, never a netendpoint.dev one, none on a hold), no owner, no
/// annotation but the force-release bound and no label of its own.
#[tokio::test]
async fn a_lease_carries_only_the_finalizers_owners_and_annotations_of_the_design() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-shape");
    let node = h::unique("trust-sn");
    let plugin = as_node_bound(CNI_SERVICE_ACCOUNT, &node, &dir).await;
    let pool = h::unique("trust-shape");
    let _ranges = h::register_pool(&pool, &["10.79.8.0/24"]);
    let pp = PostParams::default();
    let many: Vec<(String, String)> =
        (0..17).map(|i| (format!("{PROBE_NS}.fin-{i}"), format!("trust.example.com/f{i}"))).collect();
    let _lines = h::AgentLines::set(&many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>());
    let seventeen: Vec<&str> = many.iter().map(|(_, v)| v.as_str()).collect();

    let r = plugin.create(&pp, &full_lease(&pool, "10.79.8.1", &node, &["never.example.com/registered"])).await;
    assert_refused("an unregistered finalizer", r, 422, "finalizers must be those of registered agents");
    let r = plugin.create(&pp, &full_lease(&pool, "10.79.8.2", &node, &[netendpoint_crd::FINALIZER_STICKY_HOLD])).await;
    assert_refused("the sticky-hold finalizer", r, 422, "no netendpoint.dev finalizer");
    let r = plugin.create(&pp, &full_lease(&pool, "10.79.8.3", &node, &seventeen)).await;
    assert_refused("17 finalizers", r, 422, "at most 16 finalizers");
    plugin.create(&pp, &full_lease(&pool, "10.79.8.4", &node, &seventeen[..16])).await.unwrap();

    let mut owned = full_lease(&pool, "10.79.8.5", &node, &[OWN]);
    owned.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "name": node, "uid": "00000000-0000-0000-0000-000000000001",
        }))
        .unwrap(),
    ]);
    assert_refused("an owner reference to a Node", plugin.create(&pp, &owned).await, 422, "a lease has no owner");
    let mut annotated = full_lease(&pool, "10.79.8.6", &node, &[OWN]);
    annotated.metadata.annotations.get_or_insert_default().insert("padding".into(), "x".repeat(200_000));
    assert_refused("a large annotation", plugin.create(&pp, &annotated).await, 422, "no annotation but");
    let mut labelled = full_lease(&pool, "10.79.8.7", &node, &[OWN]);
    labelled.metadata.labels.get_or_insert_default().insert("team".into(), "a".into());
    assert_refused("a label of its own", plugin.create(&pp, &labelled).await, 422, "no label outside netendpoint.dev");

    let mut held = hold(&pool, "10.79.8.8", &node, "web-0.s");
    held.metadata.finalizers = Some(vec![OWN.into()]);
    assert_refused("a hold with a finalizer", plugin.create(&pp, &held).await, 422, "a hold carries no finalizer");
    let mut asks = hold(&pool, "10.79.8.9", &node, "web-0.s");
    asks.spec.endpoint_finalizers = Some(vec![netendpoint_crd::FINALIZER_STICKY_HOLD.into()]);
    assert_refused(
        "a hold asking for the hold finalizer",
        plugin.create(&pp, &asks).await,
        422,
        "no netendpoint.dev finalizer",
    );
    asks.spec.endpoint_finalizers = Some(vec!["never.example.com/registered".into()]);
    assert_refused(
        "a hold asking for an unregistered finalizer",
        plugin.create(&pp, &asks).await,
        422,
        "registered agents",
    );
    plugin.create(&pp, &hold(&pool, "10.79.8.10", &node, "web-0.s")).await.unwrap();
    h::cleanup_pool(&pool).await;
}

/// Finding 7: the installer mints the plugin's token for its own node, for
/// at most 24 hours (what it asks for), for the API server's own audiences.
#[tokio::test]
async fn installer_tokens_are_bounded_to_what_the_installer_asks() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-installer");
    let node = h::unique("trust-in");
    let kc = dir.join("installer.kubeconfig");
    h::node_bound_kubeconfig(DEPLOY_NAMESPACE, INSTALLER_SERVICE_ACCOUNT, &node, &kc);
    let sas: Api<ServiceAccount> = Api::namespaced(h::client_for(&kc).await, DEPLOY_NAMESPACE);
    let ask = |seconds: i64, audiences: Vec<String>| TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(audiences),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.clone()),
                uid: None,
            }),
            expiration_seconds: Some(seconds),
        }),
        ..Default::default()
    };
    let pp = PostParams::default();
    let r = sas.create_token_request(CNI_SERVICE_ACCOUNT, &pp, &ask(7 * 86400, vec![])).await;
    assert_refused("a 7-day token", r, 403, "expire within 24 hours");
    let r = sas.create_token_request(CNI_SERVICE_ACCOUNT, &pp, &ask(86400, vec!["vault".into()])).await;
    assert_refused("a token for another audience", r, 403, "audiences of the API server only");
    let r = sas
        .create_token_request(
            CNI_SERVICE_ACCOUNT,
            &pp,
            &ask(86400, vec!["https://kubernetes.default.svc".into(), "vault".into()]),
        )
        .await;
    assert_refused("a token for the API server and another audience", r, 403, "not vault");
    let minted = sas.create_token_request(CNI_SERVICE_ACCOUNT, &pp, &ask(86400, vec![])).await.unwrap();
    assert!(minted.status.and_then(|s| s.token).is_some_and(|t| !t.is_empty()));
    // For another node, or with an installer token bound to no node: nothing.
    let other = h::unique("trust-in-other");
    h::ensure_node(&other);
    let mut for_other = ask(86400, vec![]);
    for_other.spec.as_mut().unwrap().bound_object_ref.as_mut().unwrap().name = Some(other);
    let r = sas.create_token_request(CNI_SERVICE_ACCOUNT, &pp, &for_other).await;
    assert_refused("a token for another node", r, 403, "only tokens bound to its own Node");
    let unbound_kc = dir.join("unbound-installer.kubeconfig");
    h::sa_kubeconfig(DEPLOY_NAMESPACE, INSTALLER_SERVICE_ACCOUNT, &unbound_kc, None);
    let unbound: Api<ServiceAccount> = Api::namespaced(h::client_for(&unbound_kc).await, DEPLOY_NAMESPACE);
    let r = unbound.create_token_request(CNI_SERVICE_ACCOUNT, &pp, &ask(86400, vec![])).await;
    assert_refused("an installer token bound to no node", r, 403, "bound to no node");
}
