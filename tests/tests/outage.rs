//! No single install object's absence stops a DEL: with the ConfigMap
//! netendpoint-agents or netendpoint-pools deleted, or after deploy/ was
//! deleted and applied again on the same API server (which then stops
//! reading the policies' parameters, kubernetes/kubernetes#133827), the
//! plugin's DEL, with its real node-bound token, still deletes its lease.
//! A lease create is refused with an error naming the ConfigMap and the
//! cure, and applying deploy/ again (or the controller, for the pools)
//! repairs.
//!
//! The first two tests delete objects of the shared test API server that
//! every other test needs, so they run one at a time and put back what
//! they deleted even when they fail; the reinstall runs on an API server
//! of its own, which it leaves broken.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kube::api::{Api, PostParams};
use netendpoint_tests::{self as h, CNI_SERVICE_ACCOUNT, DEPLOY_NAMESPACE, OwnServer, kubectl_ok};
use serde_json::{Value, json};

const AGENTS: &str = "netendpoint-agents";
const POOLS: &str = "netendpoint-pools";

/// The tests that delete a ConfigMap of the shared server, one at a time.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The names of the leases of `pool` on the server of `kc`.
fn leases(kc: &Path, pool: &str) -> Vec<String> {
    let selector = format!("{}={}", netendpoint_crd::LABEL_POOL, netendpoint_crd::label_value(pool));
    kubectl_ok(kc, &["get", "nep", "-l", &selector, "-o", "jsonpath={.items[*].metadata.name}"])
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// A network `pool` on `subnet` whose plugin authenticates with `kc` as the
/// plugin of `node`, with no finalizers.
fn conf(kc: &Path, pool: &str, subnet: &str, node: &str, data: &Path) -> Value {
    json!({"cniVersion": "1.1.0", "name": pool, "ipam": {
        "type": "netendpoint", "pool": pool, "ranges": [[{"subnet": subnet}]], "kubeconfig": kc,
        "nodeName": node, "finalizers": [], "dataDir": data, "waitForRelease": "3s"}})
}

fn env(ctr: &str) -> Vec<(&str, &str)> {
    vec![("CNI_CONTAINERID", ctr), ("CNI_IFNAME", "eth0")]
}

/// ADD of sandbox `ctr`; panics with the plugin's error when it fails.
fn add(conf: &Value, ctr: &str) -> String {
    let (ok, out, err) = h::invoke("ADD", conf, &env(ctr));
    assert!(ok, "ADD {ctr}: {out} {err}");
    out["ips"][0]["address"].as_str().unwrap().split('/').next().unwrap().to_string()
}

/// The error of an ADD of `ctr` that must fail for want of one of
/// `configmaps`: code 110, naming that ConfigMap and the cure.
fn add_refused_naming(conf: &Value, ctr: &str, configmaps: &[&str]) -> String {
    let (ok, out, err) = h::invoke("ADD", conf, &env(ctr));
    assert!(!ok, "ADD {ctr} succeeded without {configmaps:?}: {out}");
    let msg = out["msg"].as_str().unwrap_or_default().to_string();
    assert_eq!(out["code"], 110, "the ADD's error is not code 110: {out} {err}");
    assert!(
        configmaps.iter().any(|c| msg.contains(&format!("ConfigMap {c}"))),
        "the error names none of {configmaps:?}: {msg}"
    );
    assert!(msg.contains("restart the API servers"), "the error names no cure for a reinstall: {msg}");
    msg
}

/// A lease of `pool` at `ip` on `node`, as an administrator writes it.
fn lease_manifest(pool: &str, ip: &str, node: &str, finalizers: &[&str]) -> String {
    serde_json::to_string(&h::lease(pool, ip, &format!("ctr-{ip}"), node, finalizers)).unwrap()
}

/// Waits (up to 30 s) until the API server refuses an administrator's
/// create of a lease with "no params found" from a policy that reads
/// `configmap`: it has seen the ConfigMap go.
fn wait_until_it_misses(kc: &Path, configmap: &str, pool: &str, node: &str) {
    let policy = if configmap == POOLS { "netendpoint-lease-range" } else { "netendpoint-lease-create" };
    let manifest = lease_manifest(pool, "10.0.0.1", node, &[]);
    let file = std::env::temp_dir().join(h::unique("outage-probe.json"));
    std::fs::write(&file, manifest).unwrap();
    let start = Instant::now();
    loop {
        let out = h::kubectl_with(kc, &["create", "--dry-run=server", "-f", file.to_str().unwrap()]);
        let err = h::stderr(&out);
        if err.contains("no params found") && err.contains(policy) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the API server still reads {configmap}: {err}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = std::fs::remove_file(file);
}

/// A ConfigMap of deploy/ deleted from the shared server; put back on drop
/// if the test did not, with the data it had.
struct Deleted {
    name: &'static str,
    saved: Value,
}

impl Deleted {
    fn delete(name: &'static str) -> Self {
        let kc = h::kubeconfig();
        let mut saved: Value =
            serde_json::from_str(&kubectl_ok(&kc, &["get", "configmap", name, "-n", DEPLOY_NAMESPACE, "-o", "json"]))
                .unwrap();
        let meta = saved["metadata"].as_object_mut().unwrap();
        meta.retain(|k, _| ["name", "namespace", "labels", "annotations"].contains(&k.as_str()));
        kubectl_ok(&kc, &["delete", "configmap", name, "-n", DEPLOY_NAMESPACE]);
        Self { name, saved }
    }

    /// Its data as it was, as a merge patch.
    fn data_patch(&self) -> String {
        json!({"data": self.saved["data"]}).to_string()
    }
}

impl Drop for Deleted {
    fn drop(&mut self) {
        let kc = h::kubeconfig();
        let exists = h::kubectl_with(&kc, &["get", "configmap", self.name, "-n", DEPLOY_NAMESPACE]).status.success();
        if !exists {
            let _ = h::kubectl_input(&["create", "-f", "-"], &self.saved.to_string());
        }
    }
}

/// Without netendpoint-agents: the plugin's DEL deletes its lease; an ADD,
/// and an administrator's forced release (`kubectl netendpoint`), are
/// refused naming the ConfigMap; an administrator deletes a lease, and
/// `kubectl apply -k deploy/` brings the ConfigMap back, after which the
/// ADD and the forced release go through.
#[test]
fn without_the_agents_configmap_a_del_still_deletes() {
    let _one = one_at_a_time();
    h::apply_deploy();
    let kc = h::kubeconfig();
    let dir = h::TempDir::new("outage-agents");
    let node = h::unique("outage-an");
    let plugin_kc = dir.join("plugin.kubeconfig");
    h::node_bound_kubeconfig(DEPLOY_NAMESPACE, CNI_SERVICE_ACCOUNT, &node, &plugin_kc);
    let pool = h::unique("outage-agents");
    let _ranges = h::register_pool(&pool, &["10.84.1.0/24"]);
    let conf = conf(&plugin_kc, &pool, "10.84.1.0/24", &node, &dir.join("data"));
    add(&conf, "ctr-a1");
    let kept = add(&conf, "ctr-a2");
    // A release held by the reference agent's finalizer, for a forced release.
    let held = lease_manifest(&pool, "10.84.1.200", &node, &[h::trust::OWN]);
    let out = h::kubectl_input(&["create", "-f", "-"], &held);
    assert!(out.status.success(), "{}", h::stderr(&out));
    let held_name = netendpoint_crd::endpoint_name(&pool, "10.84.1.200".parse().unwrap());
    kubectl_ok(&kc, &["delete", "nep", &held_name, "--wait=false"]);

    let gone = Deleted::delete(AGENTS);
    wait_until_it_misses(&kc, AGENTS, &pool, &node);

    let (ok, out, err) = h::invoke("DEL", &conf, &env("ctr-a1"));
    assert!(ok, "the plugin's DEL without {AGENTS}: {out} {err}");
    let kept_name = netendpoint_crd::endpoint_name(&pool, kept.parse().unwrap());
    let mut left = leases(&kc, &pool);
    left.sort();
    let mut want = vec![kept_name.clone(), held_name.clone()];
    want.sort();
    assert_eq!(left, want, "the DEL deleted its lease, and only it");
    add_refused_naming(&conf, "ctr-a3", &[AGENTS]);
    let release = Command::new(h::built_bin("NETENDPOINT_KUBECTL_PLUGIN", "kubectl-netendpoint"))
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["release", "--force", "10.84.1.200", "--pool", &pool, "--yes"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!release.status.success(), "a forced release without {AGENTS}: {}", h::stdout(&release));
    let said = h::stderr(&release) + &h::stdout(&release);
    assert!(said.contains(&format!("ConfigMap {AGENTS}")), "kubectl netendpoint names no {AGENTS}: {said}");

    // The administrator's repair: a delete, and deploy/ applied again.
    kubectl_ok(&kc, &["delete", "nep", &kept_name]);
    kubectl_ok(&kc, &["apply", "-k", h::deploy_dir().to_str().unwrap()]);
    let back = kubectl_ok(&kc, &["get", "configmap", AGENTS, "-n", DEPLOY_NAMESPACE, "-o", "json"]);
    let back: Value = serde_json::from_str(&back).unwrap();
    assert_eq!(
        back["data"]["netendpoint-system.netendpoint-watcher-example"],
        h::trust::OWN,
        "kubectl apply -k deploy/ makes the agents list: {back}"
    );
    kubectl_ok(
        &kc,
        &["patch", "configmap", AGENTS, "-n", DEPLOY_NAMESPACE, "--type", "merge", "-p", &gone.data_patch()],
    );
    let start = Instant::now();
    loop {
        let (ok, out, _) = h::invoke("ADD", &conf, &env("ctr-a4"));
        if ok {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no ADD after the repair: {out}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ok, out, err) = h::invoke("DEL", &conf, &env("ctr-a4"));
    assert!(ok, "{out} {err}");
    let release = Command::new(h::built_bin("NETENDPOINT_KUBECTL_PLUGIN", "kubectl-netendpoint"))
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["release", "--force", "10.84.1.200", "--pool", &pool, "--yes"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(release.status.success(), "the forced release after the repair: {}", h::stderr(&release));
    let start = Instant::now();
    while !leases(&kc, &pool).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(30), "leases left: {:?}", leases(&kc, &pool));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Without netendpoint-pools: the plugin's DEL deletes its lease; an ADD is
/// refused naming the ConfigMap; `kubectl apply -k deploy/` makes it again.
#[test]
fn without_the_pools_configmap_a_del_still_deletes() {
    let _one = one_at_a_time();
    h::apply_deploy();
    let kc = h::kubeconfig();
    let dir = h::TempDir::new("outage-pools");
    let node = h::unique("outage-pn");
    let plugin_kc = dir.join("plugin.kubeconfig");
    h::node_bound_kubeconfig(DEPLOY_NAMESPACE, CNI_SERVICE_ACCOUNT, &node, &plugin_kc);
    let pool = h::unique("outage-pools");
    h::set_pool_ranges(&pool, Some("10.84.2.0/24"));
    let conf = conf(&plugin_kc, &pool, "10.84.2.0/24", &node, &dir.join("data"));
    add(&conf, "ctr-p1");

    let gone = Deleted::delete(POOLS);
    wait_until_it_misses(&kc, POOLS, &pool, &node);
    let (ok, out, err) = h::invoke("DEL", &conf, &env("ctr-p1"));
    assert!(ok, "the plugin's DEL without {POOLS}: {out} {err}");
    assert!(leases(&kc, &pool).is_empty(), "the DEL deleted its lease");
    let msg = add_refused_naming(&conf, "ctr-p2", &[POOLS]);
    assert!(msg.contains("netendpoint-controller writes it again"), "{msg}");

    // The repair: deploy/ applied again makes it, empty; the pools come back.
    kubectl_ok(&kc, &["apply", "-k", h::deploy_dir().to_str().unwrap()]);
    kubectl_ok(
        &kc,
        &["patch", "configmap", POOLS, "-n", DEPLOY_NAMESPACE, "--type", "merge", "-p", &gone.data_patch()],
    );
    let start = Instant::now();
    loop {
        let (ok, out, _) = h::invoke("ADD", &conf, &env("ctr-p3"));
        if ok {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no ADD after the repair: {out}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ok, out, err) = h::invoke("DEL", &conf, &env("ctr-p3"));
    assert!(ok, "{out} {err}");
    h::set_pool_ranges(&pool, None);
}

/// netendpoint-controller writes the pools ConfigMap again when it is
/// deleted, and the ranges of a pool of the network config again when
/// someone changed them (recording `PoolsParamChanged` about it).
#[tokio::test]
async fn the_controller_writes_a_deleted_or_changed_pools_configmap_again() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let pool = h::unique("outage-ctl");
    let conf = h::net_conf(&pool, json!([[{"subnet": "10.84.3.0/28"}]]), json!({}));
    let (net_conf, param) = (h::unique("outage-net-conf"), h::unique("outage-pools"));
    let cms: Api<ConfigMap> = Api::namespaced(h::client().await, "default");
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(net_conf.clone()), ..Default::default() },
        data: Some([("10-net.conflist".to_string(), conf.to_string())].into()),
        ..Default::default()
    };
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let (net_conf_flag, param_flag) = (format!("default/{net_conf}"), format!("default/{param}"));
    let ctl = h::ControllerProc::start(
        &h::unique("outage-ctl"),
        &h::unique("outage-ctl"),
        &[&pool],
        &["--pod-gone-grace", "off", "--net-conf", &net_conf_flag, "--pools-param", &param_flag],
    );
    ctl.wait_leader().await;
    let ranges = || async {
        cms.get_opt(&param).await.unwrap().and_then(|c| c.data).and_then(|d| d.get(&pool).cloned()).unwrap_or_default()
    };
    let start = Instant::now();
    while !ranges().await.contains("10.84.3.2/31") {
        assert!(start.elapsed() < Duration::from_secs(30), "no pools ConfigMap; the controller's log:\n{}", ctl.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cms.delete(&param, &Default::default()).await.unwrap();
    h::wait_for("the pools ConfigMap written again", Duration::from_secs(30), || async {
        ranges().await.contains("10.84.3.2/31")
    })
    .await;
    assert!(ctl.log().contains("pools for the admission policy are missing"), "{}", ctl.log());
    // Changed (by hand, or by whoever holds the controller's token: a wider
    // range would let the pool lease another pool's addresses): written back
    // within a pass, with a warning Event about the ConfigMap naming the pool.
    let wider = serde_json::json!({"data": {pool.clone(): "10.0.0.0/8"}});
    cms.patch(&param, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(wider)).await.unwrap();
    h::wait_for("the changed ranges written back", Duration::from_secs(30), || async {
        ranges().await.contains("10.84.3.2/31")
    })
    .await;
    h::wait_for("a PoolsParamChanged Event about the ConfigMap", Duration::from_secs(10), || async {
        let events = h::events_about(&param, netendpoint_crd::REASON_POOLS_PARAM_CHANGED).await;
        events.iter().any(|e| e.type_ == "Warning" && e.note.contains(&pool))
    })
    .await;
    let _ = cms.delete(&param, &Default::default()).await;
    let _ = cms.delete(&net_conf, &Default::default()).await;
}

/// Deletes and applies again deploy/ (but the CRDs and the namespace, as
/// a reinstall that keeps the leases) on its own API server, which then
/// stops reading the policies' parameters: the plugin's DEL, with a token
/// minted after the reinstall, still deletes its lease, and an ADD is
/// refused naming the cure (restart the API servers).
#[test]
fn after_a_reinstall_on_the_same_api_server_a_del_still_deletes() {
    let server = OwnServer::start();
    let kc = server.kubeconfig();
    let deploy = h::deploy_dir();
    kubectl_ok(&kc, &["apply", "-f", deploy.join("crd.yaml").to_str().unwrap()]);
    kubectl_ok(&kc, &["wait", "--for", "condition=established", "crd/networkendpoints.netendpoint.dev"]);
    kubectl_ok(&kc, &["apply", "-f", deploy.join("namespace.yaml").to_str().unwrap()]);
    kubectl_ok(&kc, &["apply", "-k", deploy.to_str().unwrap()]);
    // The same manifests, less the CRDs and the namespace: deleting those
    // would delete every lease, and a namespace needs a controller manager
    // to go.
    let copy = server.dir.join("deploy");
    std::fs::create_dir_all(&copy).unwrap();
    for entry in std::fs::read_dir(&deploy).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
        }
    }
    let kustomization = std::fs::read_to_string(copy.join("kustomization.yaml")).unwrap();
    let kustomization: String = kustomization
        .lines()
        .filter(|l| !l.contains("crd.yaml") && !l.contains("namespace.yaml"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(copy.join("kustomization.yaml"), kustomization).unwrap();

    let pool = h::unique("outage-reinstall");
    let patch = json!({"data": {pool.clone(): "10.84.4.0/24"}}).to_string();
    kubectl_ok(&kc, &["patch", "configmap", POOLS, "-n", DEPLOY_NAMESPACE, "--type", "merge", "-p", &patch]);
    let node = "outage-node";
    let plugin_kc = server.dir.join("plugin.kubeconfig");
    server.plugin_kubeconfig(node, &plugin_kc);
    let conf = conf(&plugin_kc, &pool, "10.84.4.0/24", node, &server.dir.join("data"));
    // Until the policies are in force, an ADD would pass them by: wait
    // until they refuse a lease whose labels do not mirror its spec.
    let mut drift: Value = serde_json::from_str(&lease_manifest(&pool, "10.84.4.250", node, &[])).unwrap();
    drift["metadata"]["labels"][netendpoint_crd::LABEL_NODE] = json!("drift");
    let file = server.dir.join("drift.json");
    std::fs::write(&file, drift.to_string()).unwrap();
    let refused = |kc: &Path| {
        let out = h::kubectl_with(kc, &["create", "--dry-run=server", "-f", file.to_str().unwrap()]);
        // netendpoint-lease-integrity refuses it; once the API server no
        // longer reads the parameters, a policy that takes them may refuse first.
        h::stderr(&out).contains("ValidatingAdmissionPolicy 'netendpoint-")
    };
    let wait = |what: &str, cond: &dyn Fn() -> bool| {
        let start = Instant::now();
        while !cond() {
            assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait("the policies are in force", &|| refused(&kc));
    // The API server may still be syncing the policies' ConfigMaps.
    wait("an ADD", &|| h::invoke("ADD", &conf, &env("ctr-r1")).0);
    assert_eq!(leases(&kc, &pool).len(), 1);

    // The reinstall: every policy and binding goes, long enough for the API
    // server to stop reading ConfigMaps for them, and comes back.
    kubectl_ok(&kc, &["delete", "-k", copy.to_str().unwrap()]);
    wait("the policies are gone", &|| !refused(&kc));
    std::thread::sleep(Duration::from_secs(5));
    kubectl_ok(&kc, &["apply", "-k", copy.to_str().unwrap()]);
    kubectl_ok(&kc, &["patch", "configmap", POOLS, "-n", DEPLOY_NAMESPACE, "--type", "merge", "-p", &patch]);
    wait("the policies are back", &|| refused(&kc));
    // The plugin's ServiceAccount went with its tokens: the installer mints
    // a new one, as on a node.
    server.plugin_kubeconfig(node, &plugin_kc);

    let (ok, out, err) = h::invoke("DEL", &conf, &env("ctr-r1"));
    assert!(ok, "the plugin's DEL after the reinstall: {out} {err}");
    assert!(leases(&kc, &pool).is_empty(), "the DEL deleted its lease");
    // The test server (kube-apiserver 1.36) has kubernetes/kubernetes#133827:
    // on one without it, this ADD succeeds, and the test says so here.
    add_refused_naming(&conf, "ctr-r2", &[AGENTS, POOLS]);
}
