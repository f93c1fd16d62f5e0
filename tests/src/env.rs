//! The test API server and the workspace's binaries: where the admin
//! kubeconfig is, clients for it, and the paths of the built binaries.
//! Nothing here runs a process.

use std::path::{Path, PathBuf};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The admin kubeconfig of the test API server. Panics with instructions when
/// the server was not started: these tests must never pass without it.
pub fn kubeconfig() -> PathBuf {
    let path = std::env::var_os("NETENDPOINT_KUBECONFIG").map(PathBuf::from).unwrap_or_else(|| {
        panic!("NETENDPOINT_KUBECONFIG is not set: run the tests with `make test`, which starts the real API server")
    });
    assert!(path.exists(), "kubeconfig {} does not exist: is the test API server running?", path.display());
    path
}

/// Directory of the test API server's state (kubeconfig, pid, logs).
pub fn testenv_dir() -> PathBuf {
    kubeconfig().parent().unwrap().to_path_buf()
}

/// A client for the test API server, as admin.
pub async fn client() -> kube::Client {
    client_for(&kubeconfig()).await
}

/// A client authenticating with `kubeconfig`, built as the agent builds its own.
pub async fn client_for(kubeconfig: &Path) -> kube::Client {
    watcher_example::controller::client(Some(kubeconfig)).await.unwrap()
}

/// A workspace binary: `$override_var` if set, else `<target>/debug/<name>`.
pub fn built_bin(override_var: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(override_var) {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo_root().join("target"), PathBuf::from);
    let p = target.join("debug").join(name);
    assert!(p.exists(), "{} not built: run `cargo build --workspace --bins` (make test does)", p.display());
    p
}

/// The `netendpoint` plugin binary under test.
pub fn plugin_bin() -> PathBuf {
    built_bin("NETENDPOINT_PLUGIN", "netendpoint")
}

/// The installer binary under test (`netendpoint-install`, next to the plugin).
pub fn installer_bin() -> PathBuf {
    built_bin("NETENDPOINT_INSTALLER", "netendpoint-install")
}
