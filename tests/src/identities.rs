//! Identities of deploy/: its ServiceAccounts, and tokens minted for them
//! with the TokenRequest API (bound to a Node or Pod, or to nothing), as
//! kubeconfigs the plugin, agents, the controller and kubectl can use.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kube::api::Api;
use netendpoint_crd::NetworkEndpoint;

use crate::env::{client_for, repo_root, testenv_dir};
use crate::fixtures::ensure_node;
use crate::kubectl::{kubectl, kubectl_input, server_and_ca};
use crate::scratch::TempDir;

/// Namespace of the manifests in deploy/, and so of its ServiceAccounts.
pub const DEPLOY_NAMESPACE: &str = "netendpoint-system";
/// ServiceAccount of the CNI plugin (and of the installer pod that projects its token).
pub const CNI_SERVICE_ACCOUNT: &str = "netendpoint-cni";
/// ServiceAccount of the installer DaemonSet, which mints the plugin's token.
pub const INSTALLER_SERVICE_ACCOUNT: &str = "netendpoint-installer";
/// ServiceAccount of the watcher-example agent.
pub const WATCHER_SERVICE_ACCOUNT: &str = "netendpoint-watcher-example";
/// ServiceAccount of netendpoint-controller.
pub const CONTROLLER_SERVICE_ACCOUNT: &str = "netendpoint-controller";

/// The user name the API server gives ServiceAccount `ns/name`.
pub fn service_account_user(ns: &str, name: &str) -> String {
    format!("system:serviceaccount:{ns}:{name}")
}

/// Mints a token for ServiceAccount `ns/name` with the TokenRequest API and
/// writes a kubeconfig using it to `out`; with `token_out`, also the bare token.
pub fn sa_kubeconfig(ns: &str, name: &str, out: &Path, token_out: Option<&Path>) {
    let mut cmd = Command::new(repo_root().join("tests/bin/kube-testenv"));
    cmd.args(["sa-kubeconfig", "--dir"]).arg(testenv_dir()).args(["--namespace", ns, "--name", name, "--out"]).arg(out);
    if let Some(t) = token_out {
        cmd.arg("--token-out").arg(t);
    }
    let res = cmd.output().unwrap();
    assert!(res.status.success(), "sa-kubeconfig {ns}/{name}: {}", String::from_utf8_lossy(&res.stderr));
}

/// Mints a token for ServiceAccount `ns/name` with the TokenRequest API,
/// bound to the Node object `node` (registered first): the API server then
/// puts `authentication.kubernetes.io/node-name=<node>` in the caller's user
/// info, which the admission policies in deploy/ read.
pub fn node_bound_token(ns: &str, name: &str, node: &str) -> String {
    ensure_node(node);
    bound_token(ns, name, "Node", node)
}

/// Mints a token for ServiceAccount `ns/name` bound to the object `kind`
/// `name` (`Node`, or `Pod` in `ns`), valid for an hour or until that object
/// is deleted.
pub fn bound_token(ns: &str, sa: &str, kind: &str, name: &str) -> String {
    let out = kubectl(&[
        "create",
        "token",
        sa,
        "-n",
        ns,
        "--bound-object-kind",
        kind,
        "--bound-object-name",
        name,
        "--duration",
        "1h",
    ]);
    assert!(
        out.status.success(),
        "token for {ns}/{sa} bound to {kind} {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Writes a kubeconfig for the test API server that authenticates with `token`.
pub fn token_kubeconfig(token: &str, out: &Path) {
    let (server, _) = server_and_ca();
    let ca = testenv_dir().join("pki/ca.crt");
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: sa\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: sa\ncurrent-context: test\n",
        ca.display()
    );
    std::fs::write(out, yaml).unwrap();
}

/// A kubeconfig at `out` for ServiceAccount `ns/name` with a token bound to Node `node`.
pub fn node_bound_kubeconfig(ns: &str, name: &str, node: &str, out: &Path) {
    token_kubeconfig(&node_bound_token(ns, name, node), out);
}

/// Mints only a bare token for ServiceAccount `ns/name` into `token_out`.
pub fn sa_token(ns: &str, name: &str, token_out: &Path) {
    let mut cmd = Command::new(repo_root().join("tests/bin/kube-testenv"));
    cmd.args(["sa-kubeconfig", "--dir"]).arg(testenv_dir()).args(["--namespace", ns, "--name", name, "--token-out"]);
    let res = cmd.arg(token_out).output().unwrap();
    assert!(res.status.success(), "token for {ns}/{name}: {}", String::from_utf8_lossy(&res.stderr));
}

/// A client of ServiceAccount `sa` of deploy/ with a token bound to Node
/// `node` (registered first), its kubeconfig written in `dir`.
pub async fn node_bound(sa: &str, node: &str, dir: &TempDir) -> kube::Client {
    let kc = dir.join(&format!("{sa}-{node}.kubeconfig"));
    node_bound_kubeconfig(DEPLOY_NAMESPACE, sa, node, &kc);
    client_for(&kc).await
}

/// Leases as ServiceAccount `sa` of deploy/ with a token bound to `node`.
pub async fn as_node_bound(sa: &str, node: &str, dir: &TempDir) -> Api<NetworkEndpoint> {
    Api::all(node_bound(sa, node, dir).await)
}

/// A client of the controller's ServiceAccount (a TokenRequest token, as
/// the kubelet projects it into the controller's Pod), its kubeconfig
/// written in `dir`.
pub async fn as_controller(dir: &TempDir) -> kube::Client {
    let kc = dir.join("controller.kubeconfig");
    sa_kubeconfig(DEPLOY_NAMESPACE, CONTROLLER_SERVICE_ACCOUNT, &kc, None);
    client_for(&kc).await
}

/// A ServiceAccount `ns/name` that deploy/ does not define, bound to
/// ClusterRoles; it and its bindings are deleted on drop.
pub struct ExtraServiceAccount {
    /// Its namespace.
    pub ns: String,
    /// Its name.
    pub name: String,
    bindings: Vec<String>,
}

impl ExtraServiceAccount {
    /// Creates it (and `ns` if missing), binds it to `clusterroles`, and
    /// waits (up to 10 s) until RBAC answers `kubectl auth can-i <can>` for it.
    pub fn create(ns: &str, name: &str, clusterroles: &[&str], can: &[&str]) -> Self {
        let _ = kubectl(&["create", "namespace", ns]);
        let out = kubectl(&["create", "serviceaccount", name, "-n", ns]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut bindings = Vec::new();
        for role in clusterroles {
            let binding = format!("{name}-{role}");
            let out = kubectl(&[
                "create",
                "clusterrolebinding",
                &binding,
                &format!("--clusterrole={role}"),
                &format!("--serviceaccount={ns}:{name}"),
            ]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            bindings.push(binding);
        }
        let user = service_account_user(ns, name);
        let mut args = vec!["auth", "can-i"];
        args.extend_from_slice(can);
        args.extend_from_slice(&["--as", &user]);
        for _ in 0..100 {
            if kubectl(&args).status.success() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { ns: ns.into(), name: name.into(), bindings }
    }

    /// Its key in the agents ConfigMap (`<namespace>.<name>`).
    pub fn key(&self) -> String {
        format!("{}.{}", self.ns, self.name)
    }

    /// Leases as this ServiceAccount, with a token bound to `node`.
    pub async fn leases_on(&self, node: &str, dir: &TempDir) -> Api<NetworkEndpoint> {
        let kc = dir.join(&format!("{}-{node}.kubeconfig", self.name));
        token_kubeconfig(&node_bound_token(&self.ns, &self.name, node), &kc);
        Api::all(client_for(&kc).await)
    }
}

impl Drop for ExtraServiceAccount {
    fn drop(&mut self) {
        for binding in &self.bindings {
            let _ = kubectl(&["delete", "clusterrolebinding", binding]);
        }
        let _ = kubectl(&["delete", "serviceaccount", &self.name, "-n", &self.ns]);
    }
}

/// Applies ClusterRole `name`, granting `verbs` on `resources` of
/// netendpoint.dev: RBAC then lets its subjects ask, so that what refuses
/// them is the API server's admission policies.
pub fn ensure_cluster_role(name: &str, resources: &[&str], verbs: &[&str]) {
    let role = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
        "rules": [{"apiGroups": ["netendpoint.dev"], "resources": resources, "verbs": verbs}],
    });
    let out = kubectl_input(&["apply", "-f", "-"], &role.to_string());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
