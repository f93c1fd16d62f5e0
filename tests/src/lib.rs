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
use std::time::{Duration, Instant};

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

/// A client authenticating with `kubeconfig`, built as the agent builds its own.
pub async fn client_for(kubeconfig: &Path) -> kube::Client {
    watcher_example::controller::client(Some(kubeconfig)).await.unwrap()
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
    built_bin("NETENDPOINT_PLUGIN", "netendpoint")
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

/// A lease object for `ip` in `pool`, named and labelled as the plugin
/// names and labels it (every mirrored label, `netendpoint_lease::labels`),
/// for tests that write leases directly.
pub fn lease(pool: &str, ip: &str, container: &str, node: &str, finalizers: &[&str]) -> NetworkEndpoint {
    use netendpoint_crd::{NetworkEndpointSpec, PodRef};
    let spec = NetworkEndpointSpec {
        pool: pool.into(),
        ip: ip.into(),
        prefix_length: 24,
        gateway: None,
        if_name: "eth0".into(),
        container_id: container.into(),
        node: node.into(),
        pod: Some(PodRef { namespace: "default".into(), name: "web-0".into(), uid: "u1".into() }),
        network: Some(pool.into()),
        force_release_after: None,
        static_ip: None,
        ..Default::default()
    };
    NetworkEndpoint {
        metadata: kube::api::ObjectMeta {
            name: Some(netendpoint_crd::endpoint_name(pool, ip.parse().unwrap())),
            labels: Some(netendpoint_lease::labels::of(&spec)),
            annotations: netendpoint_lease::labels::annotations_of(&spec),
            finalizers: Some(finalizers.iter().map(|f| f.to_string()).collect()),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

/// Registers a Node object named `name` (metadata only), once per test
/// process. The plugin refuses to create leases for a node that is not
/// registered, so every node name a test uses must exist.
pub fn ensure_node(name: &str) {
    static DONE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut done = DONE.lock().unwrap();
    if done.iter().any(|n| n == name) {
        return;
    }
    let manifest = format!("{{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{{\"name\":\"{name}\"}}}}");
    let mut child = Command::new(repo_root().join("tests/bin/kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(manifest.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "register node {name}: {}", String::from_utf8_lossy(&out.stderr));
    done.push(name.to_string());
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
    invoke_wrapped(&[], command, stdin, env)
}

/// Like [`invoke_raw`], with the plugin started through `wrapper` (e.g.
/// `["faketime", "-f", "+1h"]` to run it with a node clock that is off).
pub fn invoke_wrapped(
    wrapper: &[&str],
    command: &str,
    stdin: &[u8],
    env: &[(&str, &str)],
) -> (bool, serde_json::Value, String) {
    use std::io::Write;
    let mut cmd = match wrapper.split_first() {
        Some((prog, args)) => {
            let mut c = Command::new(prog);
            c.args(args).arg(plugin_bin());
            c
        }
        None => Command::new(plugin_bin()),
    };
    cmd.env_clear().env("CNI_COMMAND", command).env("CNI_PATH", cni_path());
    if let Ok(path) = std::env::var("PATH") {
        cmd.env("PATH", path);
    }
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
    ensure_node("node-a");
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

/// A network `pool` of plugin type netendpoint (spec 1.1.0) whose `ipam`
/// is [`ipam`] with the keys of `extra` set over it. A `nodeName` in `extra`
/// is registered as a Node.
pub fn net_conf(pool: &str, ranges: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    let mut ipam = ipam(pool, ranges);
    for (k, v) in extra.as_object().into_iter().flatten() {
        ipam[k] = v.clone();
    }
    if let Some(node) = extra.get("nodeName").and_then(serde_json::Value::as_str) {
        ensure_node(node);
    }
    serde_json::json!({"cniVersion": "1.1.0", "name": pool, "type": "netendpoint", "ipam": ipam})
}

/// Creates a Pod in `default` bound to `node` that never starts (no kubelet
/// runs it: it stays `Pending`), as a Pod waiting for its sandbox looks;
/// returns its name and UID. The controller believes a need only for such a Pod.
pub async fn waiting_pod(prefix: &str, node: &str) -> (String, String) {
    use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
    ensure_node(node);
    let sas: Api<ServiceAccount> = Api::namespaced(client().await, "default");
    let sa = serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}})).unwrap();
    let _ = sas.create(&kube::api::PostParams::default(), &sa).await;
    let name = unique(prefix);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": node, "automountServiceAccountToken": false,
                 "containers": [{"name": "c", "image": "example.invalid/none"}]}
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client().await, "default");
    let uid = pods.create(&kube::api::PostParams::default(), &pod).await.unwrap().metadata.uid.unwrap();
    (name, uid)
}

/// The CNI environment of container `cid` on eth0 for Pod `default/pod` (UID `uid`).
pub fn pod_env<'a>(cid: &'a str, args: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![("CNI_CONTAINERID", cid), ("CNI_IFNAME", "eth0"), ("CNI_NETNS", "/run/netns/x"), ("CNI_ARGS", args)]
}

/// `CNI_ARGS` naming Pod `default/name` with `uid`.
pub fn pod_args(name: &str, uid: &str) -> String {
    format!("K8S_POD_NAMESPACE=default;K8S_POD_NAME={name};K8S_POD_UID={uid}")
}

/// The CNI environment of container `cid` on eth0.
pub fn attach_env(cid: &str) -> Vec<(&str, &str)> {
    vec![("CNI_CONTAINERID", cid), ("CNI_IFNAME", "eth0"), ("CNI_NETNS", "/run/netns/x")]
}

/// The first address of a CNI result.
pub fn first_ip(result: &serde_json::Value) -> std::net::IpAddr {
    result["ips"][0]["address"].as_str().unwrap().split('/').next().unwrap().parse().unwrap()
}

// ---- deploy/ helpers (manifests, ServiceAccount identities, the installer) ----

/// Namespace of the manifests in deploy/.
pub const DEPLOY_NAMESPACE: &str = "netendpoint-system";
/// ServiceAccount of the CNI plugin (and of the installer pod that projects its token).
pub const CNI_SERVICE_ACCOUNT: &str = "netendpoint-cni";
/// ServiceAccount of the installer DaemonSet, which mints the plugin's token.
pub const INSTALLER_SERVICE_ACCOUNT: &str = "netendpoint-installer";
/// ServiceAccount of the watcher-example agent.
pub const WATCHER_SERVICE_ACCOUNT: &str = "netendpoint-watcher-example";

/// `kubectl` authenticating with `kubeconfig` instead of the admin one.
pub fn kubectl_with(kubeconfig: &Path, args: &[&str]) -> Output {
    let bin = repo_root().join("tests/bin/kubectl");
    Command::new(bin).arg("--kubeconfig").arg(kubeconfig).args(args).output().unwrap()
}

/// The manifests [`apply_deploy`] applies: deploy/, or the directory in
/// `NETENDPOINT_DEPLOY_DIR` (the `policy-mutants` tool points it at a copy
/// with one rule weakened).
pub fn deploy_dir() -> PathBuf {
    std::env::var_os("NETENDPOINT_DEPLOY_DIR").map_or_else(|| repo_root().join("deploy"), PathBuf::from)
}

/// Applies `kubectl apply -k deploy/` and `deploy/agents.yaml` once per test process (the namespace
/// first, since a server-side dry run cannot create objects in a namespace
/// that does not exist yet), then waits until RBAC grants the plugin
/// ServiceAccount its verbs.
pub fn apply_deploy() {
    static APPLIED: std::sync::Once = std::sync::Once::new();
    APPLIED.call_once(|| {
        let dir = deploy_dir();
        let ns = dir.join("namespace.yaml");
        let out = kubectl(&["apply", "-f", ns.to_str().unwrap()]);
        assert!(out.status.success(), "apply namespace: {}", String::from_utf8_lossy(&out.stderr));
        let out = kubectl(&["apply", "-k", dir.to_str().unwrap()]);
        assert!(out.status.success(), "apply -k deploy/: {}", String::from_utf8_lossy(&out.stderr));
        // The agents list, which users own apart from the kustomization.
        let agents = dir.join("agents.yaml");
        let out = kubectl(&["apply", "-f", agents.to_str().unwrap()]);
        assert!(out.status.success(), "apply deploy/agents.yaml: {}", String::from_utf8_lossy(&out.stderr));
        let sa = format!("system:serviceaccount:{DEPLOY_NAMESPACE}:{CNI_SERVICE_ACCOUNT}");
        for _ in 0..100 {
            let out = kubectl(&["auth", "can-i", "create", "networkendpoints.netendpoint.dev", "--as", &sa]);
            if out.status.success() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("RBAC for {sa} did not take effect");
    });
    POLICIES.call_once(wait_for_admission_policies);
}

static POLICIES: std::sync::Once = std::sync::Once::new();

/// `kubectl` (admin) with `input` on stdin.
pub fn kubectl_input(args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(repo_root().join("tests/bin/kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// A group that RBAC lets create leases and needs, and that is no identity
/// of deploy/: the harness probes with it the policies that hold every
/// caller but a cluster administrator.
const PROBE_GROUP: &str = "netendpoint:policy-probe";
/// The pool of the probes, registered with [`PROBE_RANGE`].
const PROBE_POOL: &str = "policy-probe";
const PROBE_RANGE: &str = "10.0.0.0/24";

/// Waits until the API server enforces each admission policy of deploy/:
/// a server-side dry run that each one, and only that one, must refuse is
/// refused by it.
fn wait_for_admission_policies() {
    let rbac = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "netendpoint-policy-probe"},
         "rules": [{"apiGroups": ["netendpoint.dev"], "resources": ["networkendpoints", "networkendpointneeds"],
                    "verbs": ["create"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "netendpoint-policy-probe"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "netendpoint-policy-probe"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": PROBE_GROUP}]}]})
    .to_string();
    let out = kubectl_input(&["apply", "-f", "-"], &rbac);
    assert!(out.status.success(), "probe RBAC: {}", String::from_utf8_lossy(&out.stderr));
    set_pool_ranges(PROBE_POOL, Some(PROBE_RANGE));

    let manifest = |ip: &str, finalizers: &[&str], drift: bool| {
        let mut ep = lease(PROBE_POOL, ip, "probe", "probe", finalizers);
        if drift {
            ep.metadata.labels.get_or_insert_default().insert(netendpoint_crd::LABEL_NODE.into(), "elsewhere".into());
        }
        serde_json::to_string(&ep).unwrap()
    };
    let need = serde_json::json!({
        "apiVersion": "netendpoint.dev/v1alpha1", "kind": "NetworkEndpointNeed",
        "metadata": {"name": format!("{PROBE_POOL}.probe")},
        "spec": {"pool": PROBE_POOL, "node": "probe", "pod": {"namespace": "default", "name": "p"}, "waitSeconds": 1},
    })
    .to_string();
    let sa = |name: &str| format!("system:serviceaccount:{DEPLOY_NAMESPACE}:{name}");
    let masters = ["--as-group", "system:masters"];
    let prober = ["--as", "policy-probe", "--as-group", PROBE_GROUP];
    let probes: Vec<(&str, Vec<String>, String)> = vec![
        ("netendpoint-lease-integrity", vec![], manifest("10.0.0.1", &[], true)),
        (
            "netendpoint-plugin",
            [&["--as", &sa(CNI_SERVICE_ACCOUNT)][..], &masters].concat().iter().map(|a| a.to_string()).collect(),
            manifest("10.0.0.1", &[], false),
        ),
        (
            "netendpoint-controller",
            [&["--as", &sa("netendpoint-controller")][..], &masters].concat().iter().map(|a| a.to_string()).collect(),
            manifest("10.0.0.1", &[], false),
        ),
        (
            "netendpoint-agent",
            [&["--as", &sa("policy-probe")][..], &masters].concat().iter().map(|a| a.to_string()).collect(),
            manifest("10.0.0.1", &[], false),
        ),
        (
            "netendpoint-lease-create",
            prober.iter().map(|a| a.to_string()).collect(),
            manifest("10.0.0.1", &["netendpoint.dev/probe"], false),
        ),
        ("netendpoint-lease-range", prober.iter().map(|a| a.to_string()).collect(), manifest("10.0.1.1", &[], false)),
        ("netendpoint-need", prober.iter().map(|a| a.to_string()).collect(), need),
    ];
    let refused_by = |policy: &str, as_user: &[String], manifest: &str| -> bool {
        let mut args = vec!["create", "--dry-run=server", "-f", "-"];
        args.extend(as_user.iter().map(String::as_str));
        let out = kubectl_input(&args, manifest);
        String::from_utf8_lossy(&out.stderr).contains(&format!("ValidatingAdmissionPolicy '{policy}'"))
    };
    let warn_only = std::env::var_os("NETENDPOINT_POLICY_PROBE").is_some_and(|v| v == "warn");
    let mut pending: Vec<_> = probes.iter().collect();
    for _ in 0..if warn_only { 50 } else { 300 } {
        pending.retain(|(policy, as_user, manifest)| !refused_by(policy, as_user, manifest));
        if pending.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let names: Vec<_> = pending.iter().map(|p| p.0).collect();
    // A deliberately weakened rule may be the one a probe relies on.
    if warn_only {
        eprintln!("warning: the admission policies of deploy/ did not all refuse their probe: {names:?}");
        return;
    }
    panic!("the admission policies of deploy/ did not take effect: {names:?}");
}

// ---- the pools' ranges (ConfigMap netendpoint-pools) ----

/// The ConfigMap that the admission policy `netendpoint-lease-range` reads
/// the pools' ranges from (deploy/admission-policies.yaml).
pub const POOLS_CONFIGMAP: &str = "netendpoint-pools";

/// Sets (`Some`) or removes (`None`) the ranges of `pool` in
/// [`POOLS_CONFIGMAP`]: a JSON merge patch of that one key, so concurrent
/// tests never overwrite each other's pools.
pub fn set_pool_ranges(pool: &str, ranges: Option<&str>) {
    let patch = serde_json::json!({"data": {pool: ranges}}).to_string();
    let out =
        kubectl(&["patch", "configmap", POOLS_CONFIGMAP, "-n", DEPLOY_NAMESPACE, "--type", "merge", "-p", &patch]);
    assert!(out.status.success(), "set the ranges of pool {pool}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The `prefix` of a name made by [`unique`], and the process part.
fn unique_prefix(name: &str) -> Option<(&str, &str)> {
    let mut parts = name.rsplitn(4, '-');
    let (n, t, pid) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(n) && digits(t) && digits(pid)).then(|| parts.next().map(|prefix| (prefix, pid))).flatten()
}

/// Lines of the agents ConfigMap `netendpoint-agents` (deploy/), each
/// `<namespace>.<serviceaccount>: <finalizer>`, set until dropped: one JSON
/// merge patch of their keys, so concurrent tests never overwrite each
/// other's lines. The policy `netendpoint-lease-create` lets a lease be
/// created only with the finalizers of these lines.
#[must_use = "the lines are removed again when dropped"]
pub struct AgentLines(Vec<String>);

impl AgentLines {
    /// Sets `lines` (key, finalizer).
    pub fn set(lines: &[(&str, &str)]) -> Self {
        let data: serde_json::Map<_, _> = lines.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect();
        patch_agents(&serde_json::json!({"data": data}));
        Self(lines.iter().map(|(k, _)| k.to_string()).collect())
    }

    /// Registers `finalizer` for a ServiceAccount that exists only in name,
    /// so that leases may carry it (tests whose finalizer no agent removes).
    pub fn finalizer(finalizer: &str) -> Self {
        let key = format!("netendpoint-tests.{}", unique("agent"));
        Self::set(&[(&key, finalizer)])
    }
}

impl Drop for AgentLines {
    fn drop(&mut self) {
        let data: serde_json::Map<_, _> = self.0.iter().map(|k| (k.clone(), serde_json::Value::Null)).collect();
        patch_agents(&serde_json::json!({"data": data}));
    }
}

fn patch_agents(patch: &serde_json::Value) {
    let out = kubectl(&[
        "patch",
        "configmap",
        "netendpoint-agents",
        "-n",
        DEPLOY_NAMESPACE,
        "--type",
        "merge",
        "-p",
        &patch.to_string(),
    ]);
    assert!(out.status.success(), "patch the agents ConfigMap: {}", String::from_utf8_lossy(&out.stderr));
}

/// The ranges of a pool, registered as netendpoint-controller registers
/// them from the network config, until dropped.
#[must_use = "the ranges are removed again when the registration is dropped"]
pub struct PoolRegistration(String);

impl Drop for PoolRegistration {
    fn drop(&mut self) {
        set_pool_ranges(&self.0, None);
    }
}

/// Registers `cidrs` (an entry starting with `!` excludes) as the ranges of
/// `pool` in [`POOLS_CONFIGMAP`], as netendpoint-controller would render
/// them from the network config, so that identities other than an
/// administrator may lease there (deploy/ must be applied). Pools must not
/// overlap: concurrent tests register distinct ranges, and a pool that an
/// earlier test process left behind (same [`unique`] prefix, another
/// process) is removed first.
pub fn register_pool(pool: &str, cidrs: &[&str]) -> PoolRegistration {
    if let Some((prefix, pid)) = unique_prefix(pool) {
        let out = kubectl(&["get", "configmap", POOLS_CONFIGMAP, "-n", DEPLOY_NAMESPACE, "-o", "json"]);
        let cm: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        for stale in cm["data"].as_object().into_iter().flat_map(|d| d.keys()) {
            if unique_prefix(stale).is_some_and(|(p, other)| p == prefix && other != pid) {
                set_pool_ranges(stale, None);
            }
        }
    }
    set_pool_ranges(pool, Some(&cidrs.join(",")));
    PoolRegistration(pool.to_string())
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

/// The installer binary under test (`netendpoint-install`, next to the plugin).
pub fn installer_bin() -> PathBuf {
    built_bin("NETENDPOINT_INSTALLER", "netendpoint-install")
}

/// The test API server's URL and CA bundle (PEM), read from the admin kubeconfig.
pub fn server_and_ca() -> (String, Vec<u8>) {
    let server = kubectl(&["config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.server}"]);
    let ca_path = testenv_dir().join("pki/ca.crt");
    (String::from_utf8(server.stdout).unwrap(), std::fs::read(&ca_path).unwrap())
}

/// A fresh, empty temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Creates `$TMPDIR/<unique(prefix)>`.
    pub fn new(prefix: &str) -> Self {
        let d = std::env::temp_dir().join(unique(prefix));
        std::fs::create_dir_all(&d).unwrap();
        Self(d)
    }

    /// `self/rel`.
    pub fn join(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------------------
// watcher-example helpers: run the reference agent as a separate process, and
// drive sandboxes through the plugin binary like a runtime does.
// ---------------------------------------------------------------------------

/// The `watcher-example` agent binary (built by `cargo build --workspace --bins`).
pub fn agent_bin() -> PathBuf {
    built_bin("NETENDPOINT_AGENT", "watcher-example")
}

/// How to start an agent.
#[derive(Clone, Debug)]
pub struct AgentOpts {
    /// `--node`.
    pub node: String,
    /// `--finalizer`, or `None` for `--no-finalizer`.
    pub finalizer: Option<String>,
    /// `--naive-ip-keyed`.
    pub naive: bool,
    /// `--teardown-delay`, e.g. `0ms..30ms`.
    pub delay: String,
    /// `memory` (default) or `linux`.
    pub dataplane: String,
    /// `--netns` for the linux dataplane.
    pub netns: Option<String>,
    /// Extra flags.
    pub extra: Vec<String>,
}

impl AgentOpts {
    /// A memory-table agent for `node` holding `finalizer`, with no delay.
    pub fn new(node: &str, finalizer: Option<&str>) -> Self {
        Self {
            node: node.into(),
            finalizer: finalizer.map(String::from),
            naive: false,
            delay: "0ms".into(),
            dataplane: "memory".into(),
            netns: None,
            extra: Vec::new(),
        }
    }
}

/// A running agent process with its own state directory (state file, event
/// log, log). Killed on drop; the directory is kept for a restart.
pub struct AgentProc {
    /// The process.
    pub child: std::process::Child,
    /// Port of /metrics, /healthz, /readyz, /rules.
    pub port: u16,
    /// State file, event log (`events.jsonl`) and stderr log (`agent.log`).
    pub dir: PathBuf,
    /// How it was started.
    pub opts: AgentOpts,
}

impl AgentProc {
    /// Starts an agent in a fresh directory and waits until it is ready.
    pub fn start(opts: AgentOpts) -> Self {
        let dir = std::env::temp_dir().join(unique(&format!("agent-{}", opts.node)));
        std::fs::create_dir_all(&dir).unwrap();
        Self::start_in(opts, dir)
    }

    /// Starts an agent in `dir` (reusing its state and event log, as a restart does).
    pub fn start_in(opts: AgentOpts, dir: PathBuf) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("agent.log")).unwrap();
        let mut cmd = Command::new(agent_bin());
        cmd.arg("--node")
            .arg(&opts.node)
            .arg("--kubeconfig")
            .arg(kubeconfig())
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--serve-rules")
            .arg("--dataplane")
            .arg(&opts.dataplane)
            .arg("--state-file")
            .arg(dir.join("state.json"))
            .arg("--event-log")
            .arg(dir.join("events.jsonl"))
            .arg("--teardown-delay")
            .arg(&opts.delay)
            .args(&opts.extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        match &opts.finalizer {
            Some(f) => cmd.arg("--finalizer").arg(f),
            None => cmd.arg("--no-finalizer"),
        };
        if opts.naive {
            cmd.arg("--naive-ip-keyed");
        }
        if let Some(ns) = &opts.netns {
            cmd.arg("--netns").arg(ns);
        }
        let child = cmd.spawn().unwrap();
        let mut agent = Self { child, port, dir, opts };
        agent.wait_ready();
        agent
    }

    fn wait_ready(&mut self) {
        for _ in 0..300 {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("agent exited with {status} before it was ready; log:\n{}", self.log());
            }
            if self.get("/readyz").is_some_and(|(code, _)| code == 200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("agent not ready after 30 s; log:\n{}", self.log());
    }

    /// SIGKILLs the agent (no graceful shutdown), keeping its directory.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills this agent and starts a new process on the same state.
    pub fn restart(mut self) -> Self {
        self.kill();
        let (opts, dir) = (self.opts.clone(), self.dir.clone());
        Self::start_in(opts, dir)
    }

    /// `GET path` → (status, body), or `None` if the agent does not answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: agent\r\n\r\n").as_bytes()).ok()?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).ok()?;
        let code = buf.split_whitespace().nth(1)?.parse().ok()?;
        let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        Some((code, body))
    }

    /// The agent's table, IP → UID (from `/rules`).
    pub fn rules(&self) -> std::collections::BTreeMap<String, String> {
        let (code, body) = self.get("/rules").expect("agent answers /rules");
        assert_eq!(code, 200, "{body}");
        let rules: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
        rules.iter().map(|r| (r["ip"].as_str().unwrap().to_string(), r["uid"].as_str().unwrap().to_string())).collect()
    }

    /// `/metrics` text.
    pub fn metrics(&self) -> String {
        self.get("/metrics").expect("agent answers /metrics").1
    }

    /// The value of an unlabelled metric.
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.metrics();
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("metric {name} missing:\n{text}"))
            .trim()
            .parse()
            .unwrap()
    }

    /// The event log written so far.
    pub fn events(&self) -> Vec<watcher_example::eventlog::Record> {
        watcher_example::eventlog::read(&self.dir.join("events.jsonl")).unwrap_or_default()
    }

    /// The agent's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A network config for `pool` (one range, e.g. `{"subnet": "10.1.0.0/29"}`)
/// on `node` holding `finalizers`, waiting up to `wait_for_release` for a
/// release in a full pool.
pub fn agent_net_conf(
    pool: &str,
    range: serde_json::Value,
    node: &str,
    finalizers: &[&str],
    wait_for_release: &str,
) -> serde_json::Value {
    let mut ipam = ipam(pool, serde_json::json!([[range]]));
    ensure_node(node);
    ipam["nodeName"] = node.into();
    ipam["finalizers"] = serde_json::json!(finalizers);
    ipam["waitForRelease"] = wait_for_release.into();
    ipam["dataDir"] = std::env::temp_dir().join("netendpoint-test-data").join(node).display().to_string().into();
    serde_json::json!({"cniVersion": "1.0.0", "name": "net", "ipam": ipam})
}

/// The outcome of [`cni_add_retrying`].
#[derive(Clone, Debug)]
pub struct Added {
    /// The IP the sandbox got.
    pub ip: String,
    /// ADDs that failed (pool full with no release in progress yet) before success.
    pub retries: u32,
}

/// CNI ADD of sandbox `container` (pod `pod`) through the plugin binary. A
/// failure is retried after a pause, like kubelet retrying sandbox creation,
/// up to `max_tries`; the last failure panics with the plugin's error.
pub fn cni_add_retrying(conf: &serde_json::Value, container: &str, pod: &str, max_tries: u32) -> Added {
    let args = format!("K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod};K8S_POD_UID=uid-{container}");
    let mut last = String::new();
    for attempt in 0..max_tries {
        let (ok, out, err) =
            invoke("ADD", conf, &[("CNI_CONTAINERID", container), ("CNI_IFNAME", "eth0"), ("CNI_ARGS", &args)]);
        if ok {
            let addr = out["ips"][0]["address"].as_str().unwrap();
            let ip = addr.split('/').next().unwrap().to_string();
            return Added { ip, retries: attempt };
        }
        last = format!("stdout {out} stderr {err}");
        std::thread::sleep(Duration::from_millis(20 + 10 * u64::from(attempt.min(10))));
    }
    panic!("ADD {container} failed {max_tries} times; last: {last}");
}

/// CNI DEL of sandbox `container` through the plugin binary. Panics on failure.
pub fn cni_del(conf: &serde_json::Value, container: &str) {
    let (ok, out, err) = invoke("DEL", conf, &[("CNI_CONTAINERID", container), ("CNI_IFNAME", "eth0")]);
    assert!(ok, "DEL {container}: stdout {out} stderr {err}");
}

/// The endpoints of `pool`, IP → (UID, releasing).
pub async fn pool_state(pool: &str) -> std::collections::BTreeMap<String, (String, bool)> {
    pool_endpoints(pool)
        .await
        .into_iter()
        .map(|e| {
            let releasing = e.is_releasing();
            (e.spec.ip, (e.metadata.uid.unwrap_or_default(), releasing))
        })
        .collect()
}

/// Waits (bounded) until no endpoint of `pools` is releasing and `agent`'s
/// table holds exactly the live endpoints (IP → UID) of `pools`. Panics with
/// both views otherwise.
pub async fn wait_converged(agent: &AgentProc, pools: &[&str], what: &str) {
    let mut last = String::new();
    for _ in 0..300 {
        let mut live = std::collections::BTreeMap::new();
        let mut releasing = 0;
        for pool in pools {
            for (ip, (uid, rel)) in pool_state(pool).await {
                if rel {
                    releasing += 1;
                } else {
                    live.insert(ip, uid);
                }
            }
        }
        let rules = agent.rules();
        if releasing == 0 && rules == live {
            return;
        }
        last = format!("releasing={releasing}\nendpoints={live:?}\nrules    ={rules:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: agent {} did not converge within 30 s:\n{last}\nlog tail:\n{}", agent.opts.node, {
        let log = agent.log();
        log.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    });
}

impl AgentProc {
    /// Number of rules in the agent's persisted state file (readable while it is down).
    pub fn rules_from_state_file(&self) -> usize {
        std::fs::read(self.dir.join("state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Vec<serde_json::Value>>(&b).ok())
            .map_or(0, |v| v.len())
    }
}

/// One `netendpoint-controller` process, scoped to its own pools (`--selector`)
/// and leader Lease, so that tests run side by side. Killed on drop.
pub struct ControllerProc {
    child: std::process::Child,
    port: u16,
    log: PathBuf,
    /// Its identity in the leader Lease.
    pub identity: String,
}

impl ControllerProc {
    /// Starts a controller as admin, for `pools`, with `extra` flags.
    pub fn start(identity: &str, lease: &str, pools: &[&str], extra: &[&str]) -> Self {
        Self::start_as(&kubeconfig(), identity, lease, pools, extra)
    }

    /// Starts a controller with kubeconfig `kc`.
    pub fn start_as(kc: &std::path::Path, identity: &str, lease: &str, pools: &[&str], extra: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::env::temp_dir().join(format!("{identity}.log"));
        let selector = format!(
            "{} in ({})",
            netendpoint_crd::LABEL_POOL,
            pools.iter().map(|p| netendpoint_crd::label_value(p)).collect::<Vec<_>>().join(",")
        );
        let child = std::process::Command::new(built_bin("NETENDPOINT_CONTROLLER", "netendpoint-controller"))
            .arg("--kubeconfig")
            .arg(kc)
            .args(["--identity", identity, "--lease-name", lease])
            .args(if extra.contains(&"--lease-namespace") { &[][..] } else { &["--lease-namespace", "default"][..] })
            .args(if extra.contains(&"--lease-seconds") {
                &[][..]
            } else {
                &["--lease-seconds", "3", "--lease-grace-seconds", "1"][..]
            })
            .args(if extra.contains(&"--net-conf") { &[][..] } else { &["--net-conf", ""][..] })
            .args(if extra.contains(&"--pools-param") { &[][..] } else { &["--pools-param", ""][..] })
            .args(["--selector", &selector, "--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Self { child, port, log, identity: identity.to_string() }
    }

    /// `GET path` on its metrics server.
    pub fn get(&self, path: &str) -> Option<String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: c\r\n\r\n").as_bytes()).ok()?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).ok()?;
        buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
    }

    /// The value of the metric line starting with `series` (name and labels).
    pub fn metric(&self, series: &str) -> Option<f64> {
        let text = self.get("/metrics")?;
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
    }

    /// True while it leads.
    pub fn is_leader(&self) -> bool {
        self.metric("netendpoint_controller_leader") == Some(1.0)
    }

    /// Waits (up to 60 s) until this process leads and has done its initial lists.
    pub async fn wait_leader(&self) {
        wait_for(&format!("{} to lead", self.identity), Duration::from_secs(60), || async {
            self.get("/readyz").is_some_and(|b| b.starts_with("ready")) && self.is_leader()
        })
        .await;
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Asks it to stop (SIGTERM), as a rollout or a drain does, and waits
    /// (up to 10 s) for it to end.
    pub fn terminate(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        for _ in 0..100 {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops it (SIGSTOP) without ending it: a controller that falls behind.
    pub fn pause(&self) {
        let _ = Command::new("kill").args(["-STOP", &self.child.id().to_string()]).status();
    }

    /// Lets it go on after [`Self::pause`] (SIGCONT).
    pub fn resume(&self) {
        let _ = Command::new("kill").args(["-CONT", &self.child.id().to_string()]).status();
    }
}

impl Drop for ControllerProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `cond` every 100 ms until it holds; panics after `limit`.
pub async fn wait_for<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The cell of column `column` in row `row` (0 = the first row after the
/// header) of a `kubectl get` table: by the header's column offsets, since
/// empty cells make whitespace splitting shift.
pub fn table_cell(table: &str, row: usize, column: &str) -> Option<String> {
    let mut lines = table.lines();
    let header = lines.next()?;
    let start = header.split_whitespace().find(|c| *c == column).and_then(|_| {
        let mut at = 0;
        header.split_whitespace().find_map(|c| {
            let i = header[at..].find(c)? + at;
            at = i + c.len();
            (c == column).then_some(i)
        })
    })?;
    // The cell runs to the next column's start; the last one to the line's end.
    let end = header[start..].find(char::is_whitespace).map_or(usize::MAX, |e| {
        let after = start + e;
        header[after..].find(|ch: char| !ch.is_whitespace()).map_or(usize::MAX, |n| after + n)
    });
    let line = lines.nth(row)?;
    let end = end.min(line.len());
    Some(line.get(start.min(line.len())..end)?.trim().to_string())
}

/// The sum of the API server's metric `name` over the series whose labels
/// contain every one of `labels` (`resource="networkendpoints"`, ...).
pub async fn apiserver_counter(name: &str, labels: &[&str]) -> f64 {
    let client = client().await;
    let text = client.request_text(http::Request::get("/metrics").body(Vec::new()).unwrap()).await.unwrap();
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{')))
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// What the API server did for NetworkEndpoints, from its own counters:
/// LISTs and WATCHes of the collection (not narrowed to one name), and the
/// objects its watch cache scanned for lists.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LeaseScans {
    /// LIST requests of the collection.
    pub lists: f64,
    /// WATCH requests of the collection (not of one name).
    pub collection_watches: f64,
    /// Objects the watch cache went through to answer lists.
    pub fetched: f64,
}

impl LeaseScans {
    /// The counters now.
    pub async fn now() -> Self {
        let r = r#"resource="networkendpoints""#;
        Self {
            lists: apiserver_counter("apiserver_request_total", &[r, r#"verb="LIST""#]).await,
            collection_watches: apiserver_counter(
                "apiserver_request_total",
                &[r, r#"verb="WATCH""#, r#"scope="cluster""#],
            )
            .await,
            fetched: apiserver_counter("apiserver_cache_list_fetched_objects_total", &[r]).await,
        }
    }

    /// What happened since `before`.
    pub async fn since(before: Self) -> Self {
        let now = Self::now().await;
        Self {
            lists: now.lists - before.lists,
            collection_watches: now.collection_watches - before.collection_watches,
            fetched: now.fetched - before.fetched,
        }
    }
}
