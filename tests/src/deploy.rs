//! deploy/ applied to the test API server, once per test process: the
//! manifests and admission policies, and the parts of it tests change
//! (the agents list, the pools' ranges), each set and removed again.

use std::path::PathBuf;
use std::time::Duration;

use crate::env::repo_root;
use crate::fixtures::{NeedFixture, lease};
use crate::identities::{CNI_SERVICE_ACCOUNT, DEPLOY_NAMESPACE, service_account_user};
use crate::kubectl::{kubectl, kubectl_input};
use crate::scratch::{unique, unique_prefix};

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
        let sa = service_account_user(DEPLOY_NAMESPACE, CNI_SERVICE_ACCOUNT);
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
    let need = NeedFixture::new(PROBE_POOL, "probe").pod("default", "p", "").wait_seconds(1).build();
    let need = serde_json::to_string(&need).unwrap();
    let sa = |name: &str| service_account_user(DEPLOY_NAMESPACE, name);
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
        // netendpoint-agent matches updates only, which a dry-run create
        // cannot probe; it is applied in the same request as this one.
        (
            "netendpoint-agent-scope",
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
