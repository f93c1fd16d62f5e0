//! `netendpoint-install` against a temporary "host" directory and the real API
//! server: the plugin binary lands atomically (a running old binary is not
//! hurt), the kubeconfig it writes authenticates a real plugin ADD, kubelet
//! token rotations are followed, the token never reaches the logs, and the
//! node name reaches the `nodename` file the plugin reads.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netendpoint_tests::{self as h, CNI_SERVICE_ACCOUNT, DEPLOY_NAMESPACE, INSTALLER_SERVICE_ACCOUNT};
use serde_json::json;

/// A fake node: the host's CNI dirs, and the pod's projected credentials
/// volume laid out the way the kubelet writes it (`..data` symlink swap).
struct Host {
    root: h::TempDir,
    generation: u32,
}

impl Host {
    fn new() -> Self {
        let root = h::TempDir::new("deploy-host");
        for d in ["opt/cni/bin", "etc/cni/net.d", "creds"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        Self { root, generation: 0 }
    }

    fn bin_dir(&self) -> PathBuf {
        self.root.join("opt/cni/bin")
    }

    fn net_dir(&self) -> PathBuf {
        self.root.join("etc/cni/net.d")
    }

    fn kube_dir(&self) -> PathBuf {
        self.root.join("etc/cni/net.d/netendpoint.d")
    }

    /// Publishes a new token (and the CA) atomically, like the kubelet's AtomicWriter.
    fn project_token(&mut self, token: &[u8]) {
        self.generation += 1;
        let creds = self.root.join("creds");
        let gen_dir = format!("..gen_{}", self.generation);
        fs::create_dir_all(creds.join(&gen_dir)).unwrap();
        fs::write(creds.join(&gen_dir).join("token"), token).unwrap();
        fs::write(creds.join(&gen_dir).join("ca.crt"), h::server_and_ca().1).unwrap();
        let _ = fs::remove_file(creds.join("..data_tmp"));
        symlink(&gen_dir, creds.join("..data_tmp")).unwrap();
        fs::rename(creds.join("..data_tmp"), creds.join("..data")).unwrap();
        for f in ["token", "ca.crt"] {
            if fs::symlink_metadata(creds.join(f)).is_err() {
                symlink(format!("..data/{f}"), creds.join(f)).unwrap();
            }
        }
    }

    /// The installer with this host's paths, and `NODE_NAME` set as the DaemonSet sets it.
    fn installer(&self, extra: &[&str]) -> Command {
        let mut cmd = Command::new(h::installer_bin());
        cmd.env_clear()
            .env("RUST_LOG", "info")
            .env("NODE_NAME", "node-installer")
            .arg(format!("--plugin-src={}", h::plugin_bin().display()))
            .arg(format!("--cni-bin-dir={}", self.bin_dir().display()))
            .arg(format!("--kubeconfig-dir={}", self.kube_dir().display()))
            .arg(format!("--token-src={}", self.root.join("creds/token").display()))
            .arg(format!("--ca-src={}", self.root.join("creds/ca.crt").display()))
            .arg(format!("--net-conf-dir={}", self.net_dir().display()))
            .arg(format!("--server={}", h::server_and_ca().0))
            .args(extra);
        cmd
    }

    fn install_once(&self, extra: &[&str]) -> (bool, String) {
        let out = self.installer(&[&["--once"], extra].concat()).output().unwrap();
        assert!(out.stdout.is_empty(), "the installer writes nothing to stdout");
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    fn installed_token(&self) -> Vec<u8> {
        fs::read(self.kube_dir().join("token")).unwrap_or_default()
    }

    fn installed_node_name(&self) -> Option<String> {
        fs::read_to_string(self.kube_dir().join("nodename")).ok()
    }
}

/// A fresh plugin token, bound to the installer's node as the plugin policy requires.
fn mint_plugin_token(_dir: &h::TempDir, _name: &str) -> Vec<u8> {
    // Bound to the node the installer runs on, as the plugin policy requires.
    h::node_bound_token(DEPLOY_NAMESPACE, CNI_SERVICE_ACCOUNT, "node-installer").into_bytes()
}

/// ADD then DEL with the installed kubeconfig; returns the ADD's (ok, stdout, stderr).
fn plugin_add_del(kubeconfig: &Path) -> (bool, serde_json::Value, String) {
    plugin_add_del_on(kubeconfig, "node-installer")
}

/// ADD then DEL on `node` with `kubeconfig`; returns the ADD's (ok, stdout, stderr).
fn plugin_add_del_on(kubeconfig: &Path, node: &str) -> (bool, serde_json::Value, String) {
    let pool = h::unique("deploy-inst");
    // A range of its own: tests run at once, and pools may not overlap.
    static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    let subnet = format!("10.78.0.{}/28", 16 * (NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 16));
    let mut ipam = h::ipam(&pool, json!([[{"subnet": subnet}]]));
    let _ranges = h::register_pool(&pool, &[&subnet]);
    ipam["kubeconfig"] = json!(kubeconfig);
    h::ensure_node(node);
    ipam["nodeName"] = json!(node);
    let conf = json!({"cniVersion": "1.1.0", "name": pool, "ipam": ipam});
    let ctr = h::unique("ctr-inst");
    let env = [("CNI_CONTAINERID", ctr.as_str())];
    let add = h::invoke("ADD", &conf, &env);
    if add.0 {
        let (ok, out, err) = h::invoke("DEL", &conf, &env);
        assert!(ok, "DEL with the installed kubeconfig: {out} {err}");
    }
    add
}

fn files_equal(a: &Path, b: &Path) -> bool {
    fs::metadata(a).unwrap().len() == fs::metadata(b).unwrap().len() && fs::read(a).unwrap() == fs::read(b).unwrap()
}

fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn replaces_a_running_binary_atomically_and_writes_a_working_kubeconfig() {
    h::apply_deploy();
    let mut host = Host::new();
    let tokens = h::TempDir::new("deploy-tokens");
    let token = mint_plugin_token(&tokens, "t1");
    host.project_token(&token);

    // The "old plugin" is running from the destination path while we install.
    let dest = host.bin_dir().join("netendpoint");
    fs::copy("/bin/sleep", &dest).unwrap();
    let mut old: Child = Command::new(&dest).arg("3").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(100));

    let (ok, log) = host.install_once(&[]);
    assert!(ok, "install failed: {log}");
    assert!(old.try_wait().unwrap().is_none(), "the running old binary must keep running");
    let exe = fs::read_link(format!("/proc/{}/exe", old.id())).unwrap();
    assert!(exe.to_string_lossy().ends_with("(deleted)"), "old process keeps its own (now unlinked) inode: {exe:?}");
    assert!(old.wait().unwrap().success(), "the old binary was corrupted under the running process");

    assert!(files_equal(&dest, &h::plugin_bin()), "the new plugin binary is in place");
    assert_eq!(fs::metadata(&dest).unwrap().permissions().mode() & 0o777, 0o755);
    let leftovers: Vec<_> = fs::read_dir(host.bin_dir()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, ["netendpoint"], "no temp files left behind");
    assert!(log.contains("installed plugin binary"), "{log}");

    // The kubeconfig references the token by file; nothing secret inline.
    let kc_path = host.kube_dir().join("kubeconfig");
    let kc = fs::read_to_string(&kc_path).unwrap();
    assert!(kc.contains("tokenFile: token"), "{kc}");
    assert!(!kc.contains(String::from_utf8_lossy(&token).trim()), "the token must not be inline");
    assert_eq!(host.installed_token(), token);
    for (f, mode) in [("kubeconfig", 0o600), ("token", 0o600), ("ca.crt", 0o644)] {
        let m = fs::metadata(host.kube_dir().join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(m, mode, "mode of {f}");
    }
    assert_eq!(fs::metadata(host.kube_dir()).unwrap().permissions().mode() & 0o777, 0o700);

    let (ok, add, err) = plugin_add_del(&kc_path);
    assert!(ok, "plugin ADD with the installed kubeconfig: {add} {err}");

    // A second run changes nothing.
    let mtime = fs::metadata(&dest).unwrap().modified().unwrap();
    let (ok, log2) = host.install_once(&[]);
    assert!(ok, "{log2}");
    assert!(log2.contains("already up to date"), "{log2}");
    assert_eq!(fs::metadata(&dest).unwrap().modified().unwrap(), mtime);
    for l in [&log, &log2] {
        assert!(!l.contains(String::from_utf8_lossy(&token).trim()), "token in installer log");
    }
}

#[test]
fn follows_token_rotation_and_never_logs_the_token() {
    h::apply_deploy();
    let mut host = Host::new();
    let tokens = h::TempDir::new("deploy-tokens");
    let first = mint_plugin_token(&tokens, "t1");
    host.project_token(&first);
    let log_path = tokens.join("installer.log");
    let mut installer = host
        .installer(&["--interval=200ms"])
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let kc_path = host.kube_dir().join("kubeconfig");
    wait_until("first install", Duration::from_secs(30), || kc_path.exists() && host.installed_token() == first);
    let (ok, add, err) = plugin_add_del(&kc_path);
    assert!(ok, "ADD with the first token: {add} {err}");

    // The kubelet rotates the token: the installed copy follows.
    let second = mint_plugin_token(&tokens, "t2");
    assert_ne!(first, second);
    host.project_token(&second);
    wait_until("rotated token installed", Duration::from_secs(10), || host.installed_token() == second);
    let (ok, add, err) = plugin_add_del(&kc_path);
    assert!(ok, "ADD after rotation: {add} {err}");

    // The plugin really reads the installed file on each run: a bad token fails...
    let bogus = b"eyJhbGciOiJSUzI1NiJ9.bm90LWEtdG9rZW4.c2lnbmF0dXJl".to_vec();
    host.project_token(&bogus);
    wait_until("bogus token installed", Duration::from_secs(10), || host.installed_token() == bogus);
    let (ok, add, err) = plugin_add_del(&kc_path);
    assert!(!ok, "ADD with an invalid token must fail: {add}");
    assert!(add.to_string().contains("Unauthorized") || add.to_string().contains("401"), "{add} {err}");
    // ...and the next rotation heals it.
    let third = mint_plugin_token(&tokens, "t3");
    host.project_token(&third);
    wait_until("third token installed", Duration::from_secs(10), || host.installed_token() == third);
    let (ok, add, err) = plugin_add_del(&kc_path);
    assert!(ok, "ADD after healing rotation: {add} {err}");

    let status = Command::new("kill").args(["-TERM", &installer.id().to_string()]).status().unwrap();
    assert!(status.success());
    let exit = installer.wait().unwrap();
    assert!(exit.success(), "installer exits cleanly on SIGTERM: {exit:?}");
    let log = fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("installed ServiceAccount token"), "{log}");
    for t in [&first, &second, &bogus, &third] {
        let t = String::from_utf8_lossy(t);
        assert!(!log.contains(t.trim()), "a token value appeared in the installer log");
        assert!(!log.contains(&t.trim()[..24]), "a token prefix appeared in the installer log");
    }
    // Stopping leaves everything in place: running pods still need it for DEL.
    assert!(host.bin_dir().join("netendpoint").exists() && kc_path.exists());
}

#[test]
fn installs_a_network_config_only_when_valid() {
    let mut host = Host::new();
    host.project_token(b"not-used-by-this-test");
    let src_dir = h::TempDir::new("deploy-netconf");
    let src = src_dir.join("10-netendpoint.conflist");
    let conf = fs::read(h::repo_root().join("deploy/examples/bridge-portmap.conflist")).unwrap();
    fs::write(&src, &conf).unwrap();
    let flag = format!("--net-conf={}", src.display());

    let (ok, log) = host.install_once(&[&flag]);
    assert!(ok, "{log}");
    let dest = host.net_dir().join("10-netendpoint.conflist");
    assert_eq!(fs::read(&dest).unwrap(), conf);
    assert!(log.contains("installed network config"), "{log}");

    // Broken JSON is refused and the node keeps its working config.
    fs::write(&src, b"{\"cniVersion\": \"1.1.0\", \"name\": ").unwrap();
    let (ok, log) = host.install_once(&[&flag]);
    assert!(!ok, "invalid network config must fail the install: {log}");
    assert!(log.contains("not valid JSON"), "{log}");
    assert_eq!(fs::read(&dest).unwrap(), conf, "the previous config stays");

    // An absent optional source (ConfigMap not created) is not an error.
    fs::remove_file(&src).unwrap();
    let (ok, log) = host.install_once(&[&flag, "--net-conf-optional"]);
    assert!(ok, "{log}");
    let (ok, log) = host.install_once(&[&flag]);
    assert!(!ok, "a missing mandatory --net-conf is an error: {log}");
    let names: Vec<_> = fs::read_dir(host.net_dir()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(names.iter().all(|n| !n.to_string_lossy().starts_with('.')), "temp files left: {names:?}");
}

/// The installer DaemonSet's own args (paths mapped into a fake host), with
/// the API server address taken from KUBERNETES_SERVICE_HOST/PORT as in a
/// pod: the install succeeds and the plugin authenticates with the result.
#[test]
fn daemonset_args_install_a_working_plugin() {
    h::apply_deploy();
    let mut host = Host::new();
    // The DaemonSet's args mint the plugin's token: the projected token is
    // the installer's own, which names its node.
    let own = h::node_bound_token(DEPLOY_NAMESPACE, INSTALLER_SERVICE_ACCOUNT, "node-installer");
    host.project_token(own.as_bytes());
    let out = h::kubectl(&[
        "get",
        "ds",
        "netendpoint-installer",
        "-n",
        DEPLOY_NAMESPACE,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].args}",
    ]);
    let ds_args: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    let root = host.root.0.display().to_string();
    let args: Vec<String> = ds_args
        .iter()
        .map(|a| {
            a.replace("/opt/netendpoint/bin/netendpoint", &h::plugin_bin().display().to_string())
                .replace("/host/", &format!("{root}/"))
                .replace("/var/run/secrets/netendpoint/", &format!("{root}/creds/"))
                .replace("/etc/netendpoint/net-conf/", &format!("{root}/no-configmap/"))
        })
        .collect();
    let server = h::server_and_ca().0;
    let (host_port, _) =
        server.trim_start_matches("https://").split_once('/').unwrap_or((server.trim_start_matches("https://"), ""));
    let (svc_host, svc_port) = host_port.rsplit_once(':').unwrap();
    let out = Command::new(h::installer_bin())
        .env_clear()
        .env("KUBERNETES_SERVICE_HOST", svc_host)
        .env("KUBERNETES_SERVICE_PORT", svc_port)
        .env("NODE_NAME", "node-installer")
        .args(&args)
        .arg("--once")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "installer with the DaemonSet's args: {args:?}\n{log}");
    assert!(log.contains("no network config to install"), "{log}");
    let kc = host.kube_dir().join("kubeconfig");
    assert!(fs::read_to_string(&kc).unwrap().contains(&format!("server: \"https://{svc_host}:{svc_port}\"")));
    assert_eq!(host.installed_node_name().as_deref(), Some("node-installer"), "nodename holds NODE_NAME");
    let (ok, add, err) = plugin_add_del(&kc);
    assert!(ok, "plugin ADD with the kubeconfig from the DaemonSet's args: {add} {err}");
    assert!(!host.installed_token().is_empty() && host.installed_token() != own.as_bytes(), "a minted token");
    assert!(!log.contains(&own) && !log.contains(String::from_utf8_lossy(&host.installed_token()).as_ref()));
}

/// The node name goes to `<kubeconfig-dir>/nodename`: from NODE_NAME, or
/// `--node-name` which wins; without either, or with an invalid one, the
/// install fails and names the variable and the flag.
#[test]
fn writes_the_node_name_for_the_plugin() {
    let mut host = Host::new();
    host.project_token(b"not-used-by-this-test");
    let (ok, log) = host.install_once(&[]);
    assert!(ok, "{log}");
    assert_eq!(host.installed_node_name().as_deref(), Some("node-installer"));
    assert_eq!(fs::metadata(host.kube_dir().join("nodename")).unwrap().permissions().mode() & 0o777, 0o644);
    assert!(log.contains("wrote node name"), "{log}");
    let (ok, log) = host.install_once(&[]);
    assert!(ok && !log.contains("wrote node name"), "an unchanged name is not rewritten: {log}");

    let (ok, log) = host.install_once(&["--node-name=node-flag.example"]);
    assert!(ok, "{log}");
    assert_eq!(host.installed_node_name().as_deref(), Some("node-flag.example"), "the flag wins over NODE_NAME");

    for (bad, why) in [("Node_A", "not a DNS-1123 subdomain"), ("", "not a DNS-1123 subdomain")] {
        let (ok, log) = host.install_once(&[&format!("--node-name={bad}")]);
        assert!(!ok, "node name {bad:?} must fail the install: {log}");
        assert!(log.contains(why), "{log}");
    }
    let out = host.installer(&["--once"]).env_remove("NODE_NAME").output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "no node name must fail the install: {log}");
    assert!(log.contains("NODE_NAME") && log.contains("--node-name"), "{log}");
    assert_eq!(host.installed_node_name().as_deref(), Some("node-flag.example"), "failures leave the file as it was");
}

/// Creates a Pod object scheduled to `node` that runs as `sa` (no kubelet
/// runs it: the object is what a Pod-bound token is bound to).
fn create_pod(name: &str, sa: &str, node: &str) {
    h::ensure_node(node);
    let manifest = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": DEPLOY_NAMESPACE},
        "spec": {"nodeName": node, "serviceAccountName": sa, "automountServiceAccountToken": false,
                 "containers": [{"name": "c", "image": "installer"}]},
    });
    let file = h::TempDir::new("pod");
    fs::write(file.join("pod.json"), manifest.to_string()).unwrap();
    let out = h::kubectl(&["create", "-f", file.join("pod.json").to_str().unwrap()]);
    assert!(out.status.success(), "create pod {name}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Deletes a Pod object at once, as the kubelet confirms a pod's deletion.
fn delete_pod(name: &str) {
    let out = h::kubectl(&["delete", "pod", name, "-n", DEPLOY_NAMESPACE, "--grace-period=0", "--force"]);
    assert!(out.status.success(), "delete pod {name}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `netendpoint-install --check` against `host`'s installed credentials for `node`.
fn check(host: &Host, node: &str) -> (bool, String) {
    let out = host.installer(&["--check"]).env("NODE_NAME", node).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The installer mints the plugin's token bound to its Node. The plugin keeps
/// working after the installer pod object is deleted (a rollout, an
/// uninstall), while a copy of a Pod-bound token, the old way, stops working
/// once the API server notices its pod is gone. The readiness check tells
/// the two apart, and the installer cannot mint for another node.
#[test]
fn minted_credentials_outlive_the_installer_pod_and_a_pod_bound_copy_does_not() {
    h::apply_deploy();
    let node = h::unique("cred-node");
    let other = h::unique("cred-other");
    h::ensure_node(&other);
    let (minting_pod, copying_pod) = (h::unique("installer-mint"), h::unique("installer-copy"));
    create_pod(&minting_pod, INSTALLER_SERVICE_ACCOUNT, &node);
    create_pod(&copying_pod, CNI_SERVICE_ACCOUNT, &node);

    // New way: the projected token is the installer pod's own; it mints the plugin's.
    let mut minting = Host::new();
    let installer_token = h::bound_token(DEPLOY_NAMESPACE, INSTALLER_SERVICE_ACCOUNT, "Pod", &minting_pod);
    minting.project_token(installer_token.as_bytes());
    let mint = format!("--mint-for={DEPLOY_NAMESPACE}/{CNI_SERVICE_ACCOUNT}");
    let out = minting.installer(&["--once", &mint]).env("NODE_NAME", &node).output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "minting install: {log}");
    assert!(log.contains("minted node-bound plugin token"), "{log}");
    let minted = String::from_utf8(minting.installed_token()).unwrap();
    assert!(!log.contains(&minted) && !log.contains(&installer_token), "a token reached the log: {log}");
    let minted_expiry = token_expiry_secs(&minted) - now_secs();
    assert!((86_000..=86_400).contains(&minted_expiry), "24h by default: {minted_expiry}s");

    // It may not mint for another node: refused by the API server.
    let mut stray = Host::new();
    stray.project_token(installer_token.as_bytes());
    let out = stray.installer(&["--once", &mint]).env("NODE_NAME", &other).output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && log.contains("may mint only tokens bound to its own Node object"), "{log}");
    assert!(stray.installed_token().is_empty());

    // Old way: a copy of a Pod-bound token of the plugin's ServiceAccount.
    let mut copying = Host::new();
    copying.project_token(h::bound_token(DEPLOY_NAMESPACE, CNI_SERVICE_ACCOUNT, "Pod", &copying_pod).as_bytes());
    let out = copying.installer(&["--once"]).env("NODE_NAME", &node).output().unwrap();
    assert!(out.status.success(), "copying install: {}", String::from_utf8_lossy(&out.stderr));

    // Both work while the pods exist, and both pass the readiness check.
    for (what, host) in [("minted", &minting), ("copied", &copying)] {
        let (ok, log) = check(host, &node);
        assert!(ok, "{what}: check: {log}");
        let (ok, add, err) = plugin_add_del_on(&host.kube_dir().join("kubeconfig"), &node);
        assert!(ok, "{what}: ADD while the pod exists: {add} {err}");
    }
    let (ok, log) = check(&minting, &other);
    assert!(!ok && log.contains("bound to node"), "the check names the node: {log}");
    let (ok, log) = minting
        .installer(&["--check", "--check-min-validity=25h"])
        .env("NODE_NAME", &node)
        .output()
        .map(|o| (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned()))
        .unwrap();
    assert!(!ok && log.contains("expires in"), "the check refuses a token that expires too soon: {log}");

    // The installer pods are deleted (a rollout, or uninstall step 2).
    delete_pod(&minting_pod);
    delete_pod(&copying_pod);
    // The copy dies as soon as the API server's token cache notices.
    let dead = |host: &Host| !check(host, &node).0;
    let mut waited = 0;
    while !dead(&copying) {
        assert!(waited < 600, "the Pod-bound copy still works a minute after its pod was deleted");
        std::thread::sleep(Duration::from_millis(100));
        waited += 1;
    }
    let (ok, _, err) = plugin_add_del_on(&copying.kube_dir().join("kubeconfig"), &node);
    assert!(!ok && err.contains("401"), "ADD with a Pod-bound copy after its pod is gone: {err}");
    // The minted token keeps working: the readiness check and ADD/DEL.
    let (ok, log) = check(&minting, &node);
    assert!(ok, "minted credentials after the installer pod is gone: {log}");
    let (ok, add, err) = plugin_add_del_on(&minting.kube_dir().join("kubeconfig"), &node);
    assert!(ok, "ADD with minted credentials after the installer pod is gone: {add} {err}");
    eprintln!(
        "pod-bound copy refused {} ms after its pod was deleted; minted token valid {minted_expiry}s",
        waited * 100
    );
}

fn now_secs() -> i64 {
    i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()).unwrap()
}

/// The `exp` claim of a JWT, read with `kubectl`-free plain decoding.
fn token_expiry_secs(token: &str) -> i64 {
    let payload = token.split('.').nth(1).unwrap();
    let mut bytes = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in payload.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            _ => 63,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push(((acc >> bits) & 0xff) as u8);
        }
    }
    let claims: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    claims["exp"].as_i64().unwrap()
}

/// An install that would install nothing is not ready: the ConfigMap of
/// the network config (a directory of keys, as the kubelet mounts it) holds
/// a key of another name, as `--from-file=bridge-portmap.conflist` makes it.
/// With working credentials the check still fails and names both keys; the
/// installer says why it installed nothing; with the key, or with no
/// ConfigMap at all, the check passes.
#[test]
fn the_check_fails_while_the_net_conf_configmap_lacks_its_key() {
    h::apply_deploy();
    h::ensure_node("node-installer");
    let mut host = Host::new();
    let tokens = h::TempDir::new("deploy-tokens");
    host.project_token(&mint_plugin_token(&tokens, "t1"));
    let (ok, log) = host.install_once(&[]);
    assert!(ok, "{log}");
    let source = host.root.join("net-conf");
    fs::create_dir_all(source.join("..2026_12_08_00_00_00.1")).unwrap();
    let want = source.join("10-netendpoint.conflist");
    let flag = format!("--net-conf={}", want.display());
    let check = |host: &Host| {
        let out = host.installer(&["--check", &flag]).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, log) = check(&host);
    assert!(ok, "no key at all (no ConfigMap): optional, ready: {log}");

    let conf = serde_json::json!({"cniVersion": "1.1.0", "name": "pods", "plugins": [{"type": "bridge"}]});
    fs::write(source.join("bridge-portmap.conflist"), conf.to_string()).unwrap();
    let (ok, log) = check(&host);
    assert!(!ok, "a ConfigMap without its key must not be ready: {log}");
    assert!(log.contains("bridge-portmap.conflist") && log.contains("no key 10-netendpoint.conflist"), "{log}");
    let (ok, log) = host.install_once(&[&flag, "--net-conf-optional"]);
    assert!(ok && log.contains("nothing installed") && log.contains("bridge-portmap.conflist"), "{log}");
    assert!(!host.net_dir().join("10-netendpoint.conflist").exists());

    fs::write(&want, conf.to_string()).unwrap();
    let (ok, log) = check(&host);
    assert!(ok, "with its key: {log}");
}
