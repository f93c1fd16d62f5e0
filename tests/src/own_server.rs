//! An API server of a test's own, for tests that leave it changed (a
//! reinstall that stops it reading the policies' parameters) or need a fresh
//! cluster: started empty (no CRD, no netendpoint object), killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::json;

use crate::env::repo_root;
use crate::identities::{CNI_SERVICE_ACCOUNT, DEPLOY_NAMESPACE};
use crate::kubectl::{kubectl_with, stderr, stdout};
use crate::scratch::unique;

/// `kubectl args` against the server of `kc`; panics with its stderr unless it succeeds.
pub fn kubectl_ok(kc: &Path, args: &[&str]) -> String {
    let out = kubectl_with(kc, args);
    assert!(out.status.success(), "kubectl {args:?}: {}", stderr(&out));
    stdout(&out)
}

/// An API server of the test's own; killed on drop.
pub struct OwnServer {
    /// Its directory (kubeconfig, PKI, data), removed on drop; a test may keep files there.
    pub dir: PathBuf,
    child: Child,
}

impl OwnServer {
    /// Starts an empty API server in a directory of its own and waits until it answers.
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(unique("own-apiserver"));
        let child = Command::new(repo_root().join("tests/bin/kube-testenv"))
            .args(["serve", "--dir"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let ready = Command::new(repo_root().join("tests/bin/kube-testenv"))
            .args(["wait", "--dir"])
            .arg(&dir)
            .args(["--timeout", "3m"])
            .output()
            .unwrap();
        assert!(ready.status.success(), "the test's own API server did not start");
        Self { dir, child }
    }

    /// Its admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// A kubeconfig at `out` for the plugin of `node` (registered first), with a node-bound token.
    pub fn plugin_kubeconfig(&self, node: &str, out: &Path) {
        let kc = self.kubeconfig();
        let node_json = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}).to_string();
        let file = self.dir.join(format!("{node}.json"));
        std::fs::write(&file, node_json).unwrap();
        kubectl_ok(&kc, &["apply", "-f", file.to_str().unwrap()]);
        let token = kubectl_ok(
            &kc,
            &[
                "create",
                "token",
                CNI_SERVICE_ACCOUNT,
                "-n",
                DEPLOY_NAMESPACE,
                "--bound-object-kind",
                "Node",
                "--bound-object-name",
                node,
                "--duration",
                "1h",
            ],
        );
        let server = kubectl_ok(&kc, &["config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.server}"]);
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: own\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: cni\n  user:\n    token: {}\ncontexts:\n- name: own\n  context:\n    cluster: own\n    user: cni\ncurrent-context: own\n",
            self.dir.join("pki/ca.crt").display(),
            token.trim()
        );
        std::fs::write(out, yaml).unwrap();
    }
}

impl OwnServer {
    /// Stops the server (SIGTERM), keeping its directory until drop.
    pub fn stop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
