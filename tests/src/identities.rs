//! Identities of deploy/: its ServiceAccounts, and tokens minted for them
//! with the TokenRequest API (bound to a Node or Pod, or to nothing), as
//! kubeconfigs the plugin, agents, the controller and kubectl can use.

use std::path::Path;
use std::process::Command;

use crate::env::{repo_root, testenv_dir};
use crate::fixtures::ensure_node;
use crate::kubectl::{kubectl, server_and_ca};

/// ServiceAccount of the CNI plugin (and of the installer pod that projects its token).
pub const CNI_SERVICE_ACCOUNT: &str = "netendpoint-cni";
/// ServiceAccount of the installer DaemonSet, which mints the plugin's token.
pub const INSTALLER_SERVICE_ACCOUNT: &str = "netendpoint-installer";
/// ServiceAccount of the watcher-example agent.
pub const WATCHER_SERVICE_ACCOUNT: &str = "netendpoint-watcher-example";

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
