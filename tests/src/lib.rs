//! Shared harness for netendpoint's integration tests.
//!
//! Every test here talks to the real kube-apiserver started by
//! `scripts/testenv.sh` (the Makefile's `test` target does this and exports
//! `NETENDPOINT_KUBECONFIG`), and to the reference CNI plugins built into
//! `tests/bin/cni`. Nothing is mocked. Tests isolate themselves by using a
//! unique pool (and so unique object names) and their own network namespaces.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use netendpoint_crd::NetworkEndpoint;

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

/// A client authenticating with `kubeconfig`.
pub async fn client_for(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// All NetworkEndpoints.
pub async fn endpoints() -> Api<NetworkEndpoint> {
    Api::all(client().await)
}

/// The endpoints of `pool`.
pub async fn pool_endpoints(pool: &str) -> Vec<NetworkEndpoint> {
    endpoints()
        .await
        .list(&ListParams::default().labels(&format!(
            "{}={}",
            netendpoint_crd::LABEL_POOL,
            netendpoint_crd::label_value(pool)
        )))
        .await
        .unwrap()
        .items
}

/// Removes `finalizer` from endpoint `name` (test + remove JSON patch, like an agent).
pub async fn remove_finalizer(name: &str, finalizer: &str) {
    let api = endpoints().await;
    let ep = api.get(name).await.unwrap();
    let fins = ep.metadata.finalizers.unwrap_or_default();
    let Some(idx) = fins.iter().position(|f| f == finalizer) else { return };
    let patch = serde_json::json!([
        {"op": "test", "path": format!("/metadata/finalizers/{idx}"), "value": finalizer},
        {"op": "remove", "path": format!("/metadata/finalizers/{idx}")},
    ]);
    let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
    api.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch)).await.unwrap();
}

/// Deletes every endpoint of `pool`, clearing finalizers, and waits until they are gone.
pub async fn cleanup_pool(pool: &str) {
    let api = endpoints().await;
    for ep in pool_endpoints(pool).await {
        let name = ep.metadata.name.clone().unwrap();
        let _ = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})))
            .await;
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
    for _ in 0..100 {
        if pool_endpoints(pool).await.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A name unique across tests and runs, usable as pool and netns name.
pub fn unique(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() % 1_000_000;
    format!("{prefix}-{}-{t}-{n}", std::process::id() % 100_000)
}

/// The `netendpoint` plugin binary under test.
pub fn plugin_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("NETENDPOINT_PLUGIN") {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo_root().join("target"), PathBuf::from);
    let p = target.join("debug").join("netendpoint");
    assert!(p.exists(), "{} not built: run `cargo build --workspace --bins` (make test does)", p.display());
    p
}

/// Directory holding the reference CNI plugins and cnitool.
pub fn cni_bin_dir() -> PathBuf {
    let d = repo_root().join("tests/bin/cni");
    assert!(d.join("bridge").exists(), "reference CNI plugins missing: run scripts/tools.sh (make test does)");
    d
}

/// `CNI_PATH` with the reference plugins and the plugin under test.
pub fn cni_path() -> String {
    format!("{}:{}", cni_bin_dir().display(), plugin_bin().parent().unwrap().display())
}

/// A kubectl as new as the server (built by scripts/tools.sh), with the admin kubeconfig.
pub fn kubectl(args: &[&str]) -> Output {
    let bin = repo_root().join("tests/bin/kubectl");
    Command::new(bin).arg("--kubeconfig").arg(kubeconfig()).args(args).output().unwrap()
}

/// A Linux network namespace, deleted on drop.
pub struct Netns {
    /// Its name under /run/netns.
    pub name: String,
}

impl Netns {
    /// Creates a fresh namespace.
    pub fn new(prefix: &str) -> Self {
        let name = unique(prefix);
        let out = Command::new("ip").args(["netns", "add", &name]).output().unwrap();
        assert!(out.status.success(), "ip netns add {name}: {}", String::from_utf8_lossy(&out.stderr));
        Self { name }
    }

    /// Its path, as a runtime passes it in CNI_NETNS.
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// Runs `cmd` inside the namespace.
    pub fn exec(&self, cmd: &[&str]) -> String {
        let out = Command::new("ip").args(["netns", "exec", &self.name]).args(cmd).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

/// A network config directory for cnitool (NETCONFPATH), with one network.
pub struct NetDir {
    /// The directory.
    pub dir: PathBuf,
    /// The network name.
    pub name: String,
}

impl NetDir {
    /// Writes `conf` (a single-plugin config or a conflist) as network `conf["name"]`.
    pub fn new(conf: &serde_json::Value) -> Self {
        let name = conf["name"].as_str().unwrap().to_string();
        let dir = std::env::temp_dir().join(unique("netconf"));
        std::fs::create_dir_all(&dir).unwrap();
        let ext = if conf.get("plugins").is_some() { "conflist" } else { "conf" };
        std::fs::write(dir.join(format!("10-{name}.{ext}")), serde_json::to_vec_pretty(conf).unwrap()).unwrap();
        Self { dir, name }
    }

    /// Runs `cnitool <op> <network> <netns>` with `extra_env`.
    pub fn cnitool(&self, op: &str, netns: &Netns, extra_env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(cni_bin_dir().join("cnitool"));
        cmd.args([op, &self.name, &netns.path()])
            .env("NETCONFPATH", &self.dir)
            .env("CNI_PATH", cni_path())
            .stdin(Stdio::null());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }
}

impl Drop for NetDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the plugin binary directly, as a runtime does: CNI_* in the
/// environment, the network config on stdin. Returns (exit ok, stdout, stderr).
pub fn invoke(command: &str, conf: &serde_json::Value, env: &[(&str, &str)]) -> (bool, serde_json::Value, String) {
    invoke_raw(command, &serde_json::to_vec(conf).unwrap(), env)
}

/// Like [`invoke`] with raw stdin bytes.
pub fn invoke_raw(command: &str, stdin: &[u8], env: &[(&str, &str)]) -> (bool, serde_json::Value, String) {
    use std::io::Write;
    let mut cmd = Command::new(plugin_bin());
    cmd.env_clear().env("CNI_COMMAND", command).env("CNI_PATH", cni_path());
    let defaults: HashMap<&str, &str> = [("CNI_NETNS", "/run/netns/none"), ("CNI_IFNAME", "eth0")].into();
    for (k, v) in &defaults {
        if !env.iter().any(|(ek, _)| ek == k) {
            cmd.env(k, v);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = if stdout.trim().is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout:?}"))
    };
    (out.status.success(), json, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A netendpoint IPAM section for `pool` with `ranges`, pointing at the test server.
pub fn ipam(pool: &str, ranges: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "type": "netendpoint",
        "pool": pool,
        "ranges": ranges,
        "kubeconfig": kubeconfig(),
        "nodeName": "node-a",
        "dataDir": std::env::temp_dir().join("netendpoint-test-data"),
        "waitForRelease": "3s",
    })
}
