//! The manifests in deploy/ against the real API server: they apply (server
//! dry run, then for real), and each ServiceAccount can do exactly what its
//! component needs, proven with real tokens minted by the TokenRequest API.

#![allow(clippy::unwrap_used)]

use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use netendpoint_crd::NetworkEndpoint;
use netendpoint_tests::{
    self as h, CNI_SERVICE_ACCOUNT, DEPLOY_NAMESPACE, INSTALLER_SERVICE_ACCOUNT, WATCHER_SERVICE_ACCOUNT, stderr,
};
use serde_json::json;

fn sa_user(name: &str) -> String {
    h::service_account_user(DEPLOY_NAMESPACE, name)
}

/// `kubectl auth can-i` as ServiceAccount `sa`; a resource written
/// `resource/status` is asked as `--subresource=status` (any other
/// `type/name` is kubectl's own form, a named object).
fn can_i(sa: &str, args: &[&str]) -> bool {
    let user = sa_user(sa);
    let mut full = vec!["auth", "can-i"];
    let mut sub = String::new();
    for (i, a) in args.iter().enumerate() {
        match a.split_once('/') {
            Some((res, s)) if i == 1 && s == "status" => {
                full.push(res);
                sub = format!("--subresource={s}");
            }
            _ => full.push(a),
        }
    }
    if !sub.is_empty() {
        full.push(&sub);
    }
    full.extend_from_slice(&["--as", &user]);
    let out = h::kubectl(&full);
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(answer == "yes" || answer == "no", "can-i {args:?}: {answer} {}", String::from_utf8_lossy(&out.stderr));
    answer == "yes"
}

/// `can_i` for a resource the server may not serve (kubectl resolves names
/// through discovery): a SubjectAccessReview of `verb` on `group`/`resource`.
fn may(sa: &str, verb: &str, group: &str, resource: &str, subresource: &str) -> bool {
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": sa_user(sa), "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{DEPLOY_NAMESPACE}")],
                 "resourceAttributes": {"verb": verb, "group": group, "resource": resource, "subresource": subresource, "namespace": "default"}},
    });
    let out = h::kubectl_input(&["create", "-f", "-", "-o", "json"], &review.to_string());
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["status"]["allowed"] == true
}

#[test]
fn kustomization_applies_with_server_dry_run_then_for_real() {
    let deploy = h::repo_root().join("deploy");
    let deploy = deploy.to_str().unwrap();

    // The build itself: image overrides work, the examples are not resources.
    let built = h::kubectl(&["kustomize", deploy]);
    assert!(built.status.success(), "{}", stderr(&built));
    let yaml = String::from_utf8(built.stdout).unwrap();
    assert!(yaml.contains("image: ghcr.io/netendpoint/netendpoint:"), "image override of `netendpoint`");
    assert!(yaml.contains("image: ghcr.io/netendpoint/netendpoint-watcher-example:"), "watcher image override");
    assert!(!yaml.contains("NetworkAttachmentDefinition"), "examples must stay out of the kustomization");
    let crd = std::fs::read_to_string(h::repo_root().join("deploy/crd.yaml")).unwrap();
    assert!(yaml.contains("name: networkendpoints.netendpoint.dev") && crd.contains("kind: NetworkEndpoint"));

    // An overlay overrides the images by the names the base resolves them to.
    let overlay = h::TempDir::new("deploy-overlay");
    // Kustomize wants a relative path to the base.
    let base = format!("{}{}", "../".repeat(overlay.0.components().count() - 1), deploy.trim_start_matches('/'));
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources:\n  - {base}\nimages:\n  - name: ghcr.io/netendpoint/netendpoint\n    newName: registry.example.com/ne\n    newTag: dev\n  - name: ghcr.io/netendpoint/netendpoint-watcher-example\n    newName: registry.example.com/we\n    newTag: dev\n"
        ),
    )
    .unwrap();
    let built = h::kubectl(&["kustomize", overlay.0.to_str().unwrap()]);
    assert!(built.status.success(), "{}", stderr(&built));
    let yaml = String::from_utf8(built.stdout).unwrap();
    assert!(yaml.contains("image: registry.example.com/ne:dev") && yaml.contains("image: registry.example.com/we:dev"));
    // Pinned by digest, as docs/install.md shows.
    let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
    let pinned = std::fs::read_to_string(overlay.join("kustomization.yaml")).unwrap().replace(
        "newName: registry.example.com/ne\n    newTag: dev",
        &format!("newName: registry.example.com/ne\n    digest: {digest}"),
    );
    std::fs::write(overlay.join("kustomization.yaml"), pinned).unwrap();
    let built = h::kubectl(&["kustomize", overlay.0.to_str().unwrap()]);
    assert!(built.status.success(), "{}", stderr(&built));
    let yaml = String::from_utf8(built.stdout).unwrap();
    assert!(yaml.contains(&format!("image: registry.example.com/ne@{digest}")), "{yaml}");

    // A server dry run validates every object (schemas, admission, PodSecurity,
    // priority class). It cannot create objects in a namespace that does not
    // exist yet, so the namespace goes first.
    let ns = h::kubectl(&["apply", "-f", &format!("{deploy}/namespace.yaml")]);
    assert!(ns.status.success(), "{}", stderr(&ns));
    let dry = h::kubectl(&["apply", "--dry-run=server", "-k", deploy]);
    assert!(dry.status.success(), "dry run: {}", stderr(&dry));
    let dry_out = String::from_utf8_lossy(&dry.stdout);
    for obj in ["daemonset.apps/netendpoint-installer", "daemonset.apps/netendpoint-watcher-example"] {
        assert!(dry_out.contains(obj), "{obj} missing from: {dry_out}");
    }
    assert!(!stderr(&dry).contains("would violate PodSecurity"), "{}", stderr(&dry));
    let netpol = h::kubectl(&["apply", "--dry-run=server", "-f", &format!("{deploy}/examples/networkpolicy.yaml")]);
    assert!(netpol.status.success(), "example NetworkPolicy: {}", stderr(&netpol));

    h::apply_deploy();
    for obj in [
        "namespace/netendpoint-system",
        "serviceaccount/netendpoint-cni",
        "serviceaccount/netendpoint-watcher-example",
        "clusterrole/netendpoint-cni",
        "clusterrolebinding/netendpoint-watcher-example",
        "daemonset/netendpoint-installer",
        "daemonset/netendpoint-watcher-example",
        "configmap/netendpoint-pools",
        "validatingadmissionpolicy/netendpoint-lease-range",
        "validatingadmissionpolicy/netendpoint-controller",
        "validatingadmissionpolicy/netendpoint-need",
    ] {
        let out = h::kubectl(&["get", "-n", DEPLOY_NAMESPACE, obj, "-o", "name"]);
        assert!(out.status.success(), "{obj}: {}", stderr(&out));
    }
    // The installer's token is projected with a lifetime the kubelet rotates.
    let ds = h::kubectl(&["get", "-n", DEPLOY_NAMESPACE, "ds/netendpoint-installer", "-o", "json"]);
    let ds: serde_json::Value = serde_json::from_slice(&ds.stdout).unwrap();
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["serviceAccountName"], "netendpoint-installer");
    let container = &spec["containers"][0];
    let args: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(args.contains(&"--mint-for=netendpoint-system/netendpoint-cni"), "{args:?}");
    let probe: Vec<&str> = container["readinessProbe"]["exec"]["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(probe.contains(&"--check"), "the readiness probe checks the plugin's credentials: {probe:?}");
    let sources = spec["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "plugin-credentials").unwrap();
    let token = &sources["projected"]["sources"][0]["serviceAccountToken"];
    assert_eq!(token["expirationSeconds"], 3600);
    assert_eq!(spec["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");
}

/// What each ServiceAccount must not do, per `kubectl auth can-i --as`.
#[test]
fn service_accounts_have_least_privilege() {
    h::apply_deploy();
    let nep = "networkendpoints.netendpoint.dev";
    for verb in ["get", "list", "watch", "create", "delete", "patch"] {
        assert!(can_i(CNI_SERVICE_ACCOUNT, &[verb, nep]), "plugin must {verb} NetworkEndpoints");
    }
    assert!(can_i(CNI_SERVICE_ACCOUNT, &["patch", nep, "--subresource=status"]), "plugin asks holds for incarnations");
    // Its own queue entry: created, read and watched by name, deleted (patch:
    // the one need per node of plugins older than the queue).
    for verb in ["create", "get", "watch", "patch", "delete"] {
        assert!(
            can_i(CNI_SERVICE_ACCOUNT, &[verb, "networkendpointneeds.netendpoint.dev"]),
            "plugin must {verb} needs"
        );
    }
    assert!(
        !can_i(CNI_SERVICE_ACCOUNT, &["patch", "networkendpointneeds.netendpoint.dev", "--subresource=status"]),
        "only the controller writes where an entry stands in the queue"
    );
    for res in ["networkendpointpools.netendpoint.dev", "networkendpointshards.netendpoint.dev"] {
        for verb in ["get", "watch"] {
            assert!(can_i(CNI_SERVICE_ACCOUNT, &[verb, res]), "plugin must {verb} {res}");
        }
        assert!(!can_i(CNI_SERVICE_ACCOUNT, &["patch", res]), "plugin must not patch {res}");
    }
    assert!(may(CNI_SERVICE_ACCOUNT, "get", "k8s.cni.cncf.io", "ipamclaims", ""), "plugin must get IPAMClaims");
    assert!(may(CNI_SERVICE_ACCOUNT, "get", "apps", "statefulsets", ""), "plugin reads a StatefulSet by name");
    for verb in ["list", "watch", "update"] {
        assert!(!may(CNI_SERVICE_ACCOUNT, verb, "apps", "statefulsets", ""), "plugin must not {verb} StatefulSets");
    }
    assert!(
        !may(CNI_SERVICE_ACCOUNT, "update", "k8s.cni.cncf.io", "ipamclaims", ""),
        "plugin must not write IPAMClaims"
    );
    for (verb, res) in [("create", "events.events.k8s.io"), ("get", "nodes")] {
        assert!(can_i(CNI_SERVICE_ACCOUNT, &[verb, res, "-n", "default"]), "plugin must {verb} {res}");
    }
    // Pods only through deploy/optional/rbac-cni-pod-reader.yaml; no Node
    // list (the controller reclaims vanished nodes' leases); Events only
    // through events.k8s.io; queue entries are read by name only, never listed.
    for (verb, res) in [
        ("get", "pods"),
        ("list", "pods"),
        ("watch", "pods"),
        ("list", "nodes"),
        ("create", "events"),
        ("list", "networkendpointneeds.netendpoint.dev"),
    ] {
        assert!(!can_i(CNI_SERVICE_ACCOUNT, &[verb, res, "-n", "default"]), "plugin must not {verb} {res}");
    }
    for verb in ["get", "list", "watch", "patch"] {
        assert!(can_i(WATCHER_SERVICE_ACCOUNT, &[verb, nep]), "watcher must {verb} NetworkEndpoints");
    }
    for res in ["events", "events.events.k8s.io"] {
        assert!(can_i(WATCHER_SERVICE_ACCOUNT, &["create", res, "-n", "default"]), "watcher must create {res}");
    }

    for sa in [CNI_SERVICE_ACCOUNT, WATCHER_SERVICE_ACCOUNT, INSTALLER_SERVICE_ACCOUNT] {
        for (verb, res) in [
            ("get", "secrets"),
            ("list", "secrets"),
            ("create", "pods"),
            // A grant of `patch` is write access in its own right: it can do
            // whatever `update` can, so each is refused on its own.
            ("update", "nodes"),
            ("patch", "nodes"),
            ("patch", "pods"),
            ("patch", "secrets"),
            ("patch", "serviceaccounts"),
            ("update", nep),
            ("deletecollection", nep),
            ("create", "customresourcedefinitions.apiextensions.k8s.io"),
            ("patch", "customresourcedefinitions.apiextensions.k8s.io"),
            ("patch", "validatingadmissionpolicies.admissionregistration.k8s.io"),
            ("patch", "validatingadmissionpolicybindings.admissionregistration.k8s.io"),
            ("delete", "validatingadmissionpolicybindings.admissionregistration.k8s.io"),
            ("patch", "configmaps"),
            ("update", "configmaps"),
        ] {
            for ns in ["default", DEPLOY_NAMESPACE, "kube-system"] {
                assert!(!can_i(sa, &[verb, res, "-n", ns]), "{sa} must not {verb} {res} in {ns}");
            }
        }
    }
    for verb in ["create", "delete"] {
        assert!(!can_i(WATCHER_SERVICE_ACCOUNT, &[verb, nep]), "watcher must not {verb} NetworkEndpoints");
    }
    assert!(!can_i(WATCHER_SERVICE_ACCOUNT, &["get", "nodes"]), "watcher needs no nodes");
    // The installer mints the plugin's token and nothing else.
    let can_mint = |who: &str, for_sa: &str| {
        can_i(who, &["create", &format!("serviceaccounts/{for_sa}"), "--subresource=token", "-n", DEPLOY_NAMESPACE])
    };
    assert!(can_mint(INSTALLER_SERVICE_ACCOUNT, CNI_SERVICE_ACCOUNT), "the installer mints the plugin's token");
    for other in [WATCHER_SERVICE_ACCOUNT, INSTALLER_SERVICE_ACCOUNT] {
        assert!(!can_mint(INSTALLER_SERVICE_ACCOUNT, other), "the installer mints for {other}");
    }
    for verb in ["get", "list", "create", "delete", "patch"] {
        assert!(!can_i(INSTALLER_SERVICE_ACCOUNT, &[verb, nep]), "installer must not {verb} NetworkEndpoints");
    }
    assert!(!can_mint(CNI_SERVICE_ACCOUNT, CNI_SERVICE_ACCOUNT), "the plugin mints no tokens");

    // Every identity of deploy/ that may write leases (patch and update count
    // alike) is held by an admission policy: the plugin by netendpoint-plugin,
    // the controller by netendpoint-controller, an agent by netendpoint-agent
    // through its entry in the agents ConfigMap.
    let agents = h::kubectl(&["get", "configmap", "netendpoint-agents", "-n", DEPLOY_NAMESPACE, "-o", "json"]);
    let agents: serde_json::Value = serde_json::from_slice(&agents.stdout).unwrap();
    let sas =
        h::kubectl(&["get", "serviceaccounts", "-n", DEPLOY_NAMESPACE, "-o", "jsonpath={.items[*].metadata.name}"]);
    let sas = String::from_utf8(sas.stdout).unwrap();
    let mut writers = Vec::new();
    for sa in sas.split_whitespace().filter(|s| *s != "default") {
        if ["patch", "update"].iter().any(|verb| can_i(sa, &[verb, nep])) {
            writers.push(sa.to_string());
            let registered = agents["data"].get(format!("{DEPLOY_NAMESPACE}.{sa}")).is_some();
            // The controller is the one cluster-wide writer by design (cross-node
            // reclaim, the end of releases, incarnations of holds), held to
            // those writes by its own policy.
            let cluster_side = sa == "netendpoint-controller";
            assert!(
                sa == CNI_SERVICE_ACCOUNT || cluster_side || registered,
                "{sa} may write leases but no admission policy holds it"
            );
        }
    }
    assert!(
        writers.contains(&CNI_SERVICE_ACCOUNT.to_string()) && writers.contains(&WATCHER_SERVICE_ACCOUNT.to_string())
    );
}

/// The controller's ServiceAccount: what it must and must not do.
#[test]
fn controller_service_account_has_least_privilege() {
    h::apply_deploy();
    let sa = "netendpoint-controller";
    let nep = "networkendpoints.netendpoint.dev";
    // create: a sticky hold's next incarnation, after checking the requesting Pod.
    for verb in ["get", "list", "watch", "create", "delete", "patch"] {
        assert!(can_i(sa, &[verb, nep]), "controller must {verb} NetworkEndpoints");
    }
    assert!(can_i(sa, &["patch", nep, "--subresource=status"]), "controller writes holds' status");
    for (verb, res) in [
        ("list", "networkendpointneeds.netendpoint.dev"),
        ("watch", "networkendpointneeds.netendpoint.dev"),
        ("create", "networkendpointshards.netendpoint.dev"),
        ("patch", "networkendpointshards.netendpoint.dev"),
        ("create", "networkendpointpools.netendpoint.dev"),
        ("list", "nodes"),
        ("watch", "nodes"),
        ("get", "pods"),
        ("list", "pods"),
        ("watch", "pods"),
        ("list", "statefulsets.apps"),
        ("watch", "statefulsets.apps"),
        ("patch", "networkendpoints.netendpoint.dev/status"),
        ("patch", "networkendpointpools.netendpoint.dev/status"),
        ("create", "networkendpointshards.netendpoint.dev"),
        ("patch", "networkendpointshards.netendpoint.dev/status"),
        ("list", "networkendpointneeds.netendpoint.dev"),
        ("watch", "networkendpointneeds.netendpoint.dev"),
        ("delete", "networkendpointneeds.netendpoint.dev"),
        // Read by name before acting on a sticky hold (found missing by make e2e).
        ("get", "ipamclaims.k8s.cni.cncf.io"),
        ("create", "ipamclaims.k8s.cni.cncf.io"),
        ("delete", "ipamclaims.k8s.cni.cncf.io"),
        ("patch", "ipamclaims.k8s.cni.cncf.io/status"),
    ] {
        assert!(can_i(sa, &[verb, res, "-n", "default"]), "controller must {verb} {res}");
    }
    for verb in ["list", "watch", "create", "delete"] {
        assert!(may(sa, verb, "k8s.cni.cncf.io", "ipamclaims", ""), "controller must {verb} IPAMClaims");
    }
    assert!(may(sa, "patch", "k8s.cni.cncf.io", "ipamclaims", "status"), "controller writes the claims' status");
    assert!(!may(sa, "patch", "k8s.cni.cncf.io", "ipamclaims", ""), "controller never changes a claim's spec");
    assert!(can_i(sa, &["patch", "networkendpointshards.netendpoint.dev", "--subresource=status"]));
    assert!(can_i(sa, &["create", "events.events.k8s.io", "-n", "default"]));
    for verb in ["get", "create", "update"] {
        assert!(
            can_i(sa, &[verb, "leases.coordination.k8s.io", "-n", DEPLOY_NAMESPACE]),
            "controller must {verb} its Lease"
        );
    }
    assert!(can_i(sa, &["watch", "configmaps", "-n", DEPLOY_NAMESPACE]));
    // The ranges the policy netendpoint-lease-range reads: that ConfigMap only.
    assert!(can_i(sa, &["patch", "configmaps/netendpoint-pools", "-n", DEPLOY_NAMESPACE]));
    for (verb, res, ns) in [
        ("update", nep, "default"),
        ("patch", "configmaps", "default"),
        ("create", "networkendpointneeds.netendpoint.dev", "default"),
        ("patch", "ipamclaims.k8s.cni.cncf.io", "default"),
        ("get", "secrets", DEPLOY_NAMESPACE),
        ("list", "configmaps", "default"),
        ("patch", "configmaps/netendpoint-agents", DEPLOY_NAMESPACE),
        ("patch", "configmaps/netendpoint-net-conf", DEPLOY_NAMESPACE),
        ("update", "leases.coordination.k8s.io", "kube-system"),
        ("delete", "pods", "default"),
        ("update", "nodes", "default"),
        ("patch", "statefulsets.apps", "default"),
        // A need is a node's signal: the controller reads it and writes none.
        ("create", "networkendpointneeds.netendpoint.dev", "default"),
        ("patch", "networkendpointneeds.netendpoint.dev", "default"),
        // IPNeeded Events are no signal any more: nobody's Events are read.
        ("list", "events", "default"),
        ("watch", "events", "default"),
    ] {
        assert!(!can_i(sa, &[verb, res, "-n", ns]), "controller must not {verb} {res} in {ns}");
    }
}

/// Finding 1: the controller's token may end any release and delete any
/// live lease (a vanished node's, a gone Pod's: decisions that rest on its
/// reads, which no policy can check), so it runs where a compromised worker
/// node cannot take it. Its metrics serve on loopback only, and no Service
/// exposes them.
#[test]
fn the_controller_runs_on_the_control_plane_with_its_metrics_on_loopback() {
    h::apply_deploy();
    let out = h::kubectl(&["get", "deploy", "netendpoint-controller", "-n", DEPLOY_NAMESPACE, "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let deploy: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pod = &deploy["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"], json!({"node-role.kubernetes.io/control-plane": ""}), "{pod}");
    let tolerations = pod["tolerations"].as_array().unwrap();
    assert_eq!(
        tolerations.as_slice(),
        [json!({"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"})],
        "it tolerates the control plane's taint and nothing else"
    );
    assert!(pod["affinity"]["nodeAffinity"].is_null(), "no affinity widens the selector: {pod}");
    // In the node's network namespace: it writes the ranges every lease is
    // checked against, so it must not need a lease to start.
    assert_eq!(pod["hostNetwork"], true, "{pod}");
    // Its node's ports: two replicas never share a node, and an update
    // stops an old Pod before its successor needs the same ports (else a
    // one-control-plane cluster never finishes a rollout).
    let anti = &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(anti["topologyKey"], "kubernetes.io/hostname", "{pod}");
    assert_eq!(anti["labelSelector"]["matchLabels"]["app.kubernetes.io/name"], "netendpoint-controller");
    assert_eq!(deploy["spec"]["strategy"]["rollingUpdate"]["maxSurge"], 0, "{deploy}");
    assert_eq!(deploy["spec"]["replicas"], 1, "one replica fits a cluster with one control-plane node");
    let container = &pod["containers"][0];
    let env = |name: &str| {
        container["env"].as_array().unwrap().iter().find(|e| e["name"] == name).map(|e| e["value"].clone())
    };
    assert_eq!(env("NETENDPOINT_CONTROLLER_LISTEN"), Some(json!("127.0.0.1:9466")), "metrics on loopback");
    assert_eq!(env("NETENDPOINT_CONTROLLER_PROBE_LISTEN"), Some(json!("0.0.0.0:9467")), "probes on their own port");
    let ports: Vec<i64> =
        container["ports"].as_array().unwrap().iter().map(|p| p["containerPort"].as_i64().unwrap()).collect();
    assert_eq!(ports, [9467], "only the probe port is declared");
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(container[probe]["httpGet"]["port"], "probes", "{probe}");
    }
    // No Service in deploy/ selects it (its metrics are for port-forward or an authenticating proxy).
    let built = h::kubectl(&["kustomize", h::repo_root().join("deploy").to_str().unwrap()]);
    let yaml = String::from_utf8_lossy(&built.stdout).into_owned();
    assert!(!yaml.contains("kind: Service\n"), "deploy/ defines a Service");
}

/// The Pod reader of deploy/optional/ is no part of the base install, and
/// grants the plugin `get` on Pods and nothing else.
#[test]
fn the_pod_reader_is_optional_and_grants_get_only() {
    let deploy = h::repo_root().join("deploy");
    let built = h::kubectl(&["kustomize", deploy.to_str().unwrap()]);
    assert!(built.status.success(), "{}", stderr(&built));
    assert!(!String::from_utf8_lossy(&built.stdout).contains("netendpoint-cni-pod-reader"));
    let file = deploy.join("optional/rbac-cni-pod-reader.yaml");
    let dry = h::kubectl(&["apply", "--dry-run=server", "-f", file.to_str().unwrap(), "-o", "json"]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    let list: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    let items = list["items"].as_array().unwrap();
    let role = items.iter().find(|o| o["kind"] == "ClusterRole").unwrap();
    assert_eq!(role["rules"], json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]));
    let binding = items.iter().find(|o| o["kind"] == "ClusterRoleBinding").unwrap();
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": CNI_SERVICE_ACCOUNT, "namespace": DEPLOY_NAMESPACE}])
    );
}

fn assert_forbidden<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>) {
    match r {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{what}: {s:?}"),
        other => panic!("{what} must be forbidden: {other:?}"),
    }
}

/// The plugin's whole lifecycle (ADD, CHECK, STATUS, GC, DEL) with nothing but
/// its own ServiceAccount's token; and that token is refused what it must not do.
#[tokio::test]
async fn plugin_runs_its_full_cycle_as_its_service_account() {
    h::apply_deploy();
    let dir = h::TempDir::new("deploy-rbac-cni");
    let kc = dir.join("kubeconfig");
    let pool = h::unique("rbac-cni");
    let node = h::unique("rbac-node");
    h::node_bound_kubeconfig(DEPLOY_NAMESPACE, CNI_SERVICE_ACCOUNT, &node, &kc);
    let mut ipam = h::ipam(&pool, json!([[{"subnet": "10.77.1.0/29"}]]));
    let _ranges = h::register_pool(&pool, &["10.77.1.0/29"]);
    ipam["kubeconfig"] = json!(kc);
    h::ensure_node(&node);
    ipam["nodeName"] = json!(node);
    ipam["finalizers"] = json!([]);
    ipam["gcGrace"] = json!("0s");
    let conf = json!({"cniVersion": "1.1.0", "name": pool, "ipam": ipam});
    let env = |ctr: &'static str| vec![("CNI_CONTAINERID", ctr), ("CNI_IFNAME", "eth0")];

    let (ok, add, err) = h::invoke("ADD", &conf, &env("ctr-rbac-1"));
    assert!(ok, "ADD as {CNI_SERVICE_ACCOUNT}: {add} {err}");
    let ip = add["ips"][0]["address"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10.77.1."), "{add}");
    assert_eq!(h::pool_endpoints(&pool).await.len(), 1);

    let mut check = conf.clone();
    check["prevResult"] = add.clone();
    let (ok, out, err) = h::invoke("CHECK", &check, &env("ctr-rbac-1"));
    assert!(ok, "CHECK: {out} {err}");

    let (ok, out, err) = h::invoke("STATUS", &conf, &[]);
    assert!(ok, "STATUS: {out} {err}");

    // A second sandbox, then GC keeping only the first: the second is released
    // on the second sighting.
    let (ok, add2, err) = h::invoke("ADD", &conf, &env("ctr-rbac-2"));
    assert!(ok, "second ADD: {add2} {err}");
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "ctr-rbac-1", "ifname": "eth0"}]);
    for _ in 0..2 {
        let (ok, out, err) = h::invoke("GC", &gc, &[]);
        assert!(ok, "GC: {out} {err}");
    }
    let left: Vec<_> = h::pool_endpoints(&pool).await.into_iter().map(|e| e.spec.container_id).collect();
    assert_eq!(left, ["ctr-rbac-1"], "GC must release only the attachment not kept");

    let (ok, out, err) = h::invoke("DEL", &check, &env("ctr-rbac-1"));
    assert!(ok, "DEL: {out} {err}");
    assert!(h::pool_endpoints(&pool).await.is_empty());
    assert!(!err.contains("eyJ"), "a token leaked into stderr");

    // Real calls the plugin's token must be refused.
    let client = h::client_for(&kc).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), "kube-system");
    assert_forbidden("plugin lists Secrets", secrets.list(&ListParams::default()).await);
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, "default");
    let pod = h::PodFixture::new("rbac-probe").build();
    assert_forbidden("plugin creates a Pod", pods.create(&PostParams::default(), &pod).await);
    let out = h::kubectl_with(&kc, &["get", "secrets", "-n", DEPLOY_NAMESPACE]);
    assert!(!out.status.success() && stderr(&out).contains("Forbidden"), "{}", stderr(&out));
}

/// The watcher's token can watch and patch (remove its finalizer), and is
/// refused creating endpoints, reading Secrets and creating Pods.
#[tokio::test]
async fn watcher_can_watch_and_ack_but_not_lease() {
    h::apply_deploy();
    let dir = h::TempDir::new("deploy-rbac-watcher");
    let kc = dir.join("kubeconfig");
    let pool = h::unique("rbac-watch");
    let node = h::unique("rbac-wnode");
    h::node_bound_kubeconfig(DEPLOY_NAMESPACE, WATCHER_SERVICE_ACCOUNT, &node, &kc);
    let ep = h::lease(&pool, "10.77.2.5", "ctr-watcher-rbac", &node, &["watcher.netendpoint.dev/rules"]);
    let name = ep.metadata.name.clone().unwrap();

    let as_watcher: Api<NetworkEndpoint> = Api::all(h::client_for(&kc).await);
    assert_forbidden("watcher creates a NetworkEndpoint", as_watcher.create(&PostParams::default(), &ep).await);

    // The admin (standing in for the plugin) leases; the watcher sees it by node.
    let admin = h::endpoints().await;
    let created = admin.create(&PostParams::default(), &ep).await.unwrap();
    let by_node = ListParams::default().fields(&format!("spec.node={node}"));
    let listed = as_watcher.list(&by_node).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    let got = as_watcher.get(&name).await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);

    let wp = WatchParams::default().fields(&format!("spec.node={node}")).timeout(10);
    let mut stream =
        Box::pin(as_watcher.watch(&wp, listed.metadata.resource_version.as_deref().unwrap()).await.unwrap());
    admin.delete(&name, &Default::default()).await.unwrap();
    use futures::StreamExt;
    let ev = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next()).await.unwrap().unwrap().unwrap();
    assert!(matches!(ev, WatchEvent::Modified(ref o) if o.metadata.deletion_timestamp.is_some()), "{ev:?}");

    // Ack: remove only its own finalizer with test + remove.
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": "watcher.netendpoint.dev/rules"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]))
    .unwrap();
    as_watcher.patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch)).await.unwrap();
    h::wait_gone(&name, std::time::Duration::from_secs(1)).await;
    assert!(admin.get_opt(&name).await.unwrap().is_none(), "the ack must release the endpoint");

    let client = h::client_for(&kc).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client, DEPLOY_NAMESPACE);
    assert_forbidden("watcher reads a Secret", secrets.get("anything").await);
    let out = h::kubectl_with(&kc, &["run", "rbac-probe", "--image=busybox", "-n", "default"]);
    assert!(!out.status.success() && stderr(&out).contains("forbidden"), "{}", stderr(&out));
    h::cleanup_pool(&pool).await;
}

/// Each example's IPAM section is accepted by the plugin, which leases from
/// it (ADD then DEL, against the real server). The Multus example embeds its
/// config as a string.
#[test]
fn examples_are_valid_netendpoint_configs() {
    let examples = h::repo_root().join("deploy/examples");
    let read = |f: &str| std::fs::read_to_string(examples.join(f)).unwrap();
    let multus = read("multus-macvlan.yaml");
    let embedded = multus.split("config: |").nth(1).unwrap();
    let nad: serde_json::Value = serde_json::from_str(embedded).unwrap();
    let cm = read("net-conf-configmap.yaml");
    let cm_conf: serde_json::Value =
        serde_json::from_str(cm.split("10-netendpoint.conflist: |").nth(1).unwrap()).unwrap();
    let confs = [
        (
            "bridge-portmap.conflist",
            serde_json::from_str::<serde_json::Value>(&read("bridge-portmap.conflist")).unwrap(),
        ),
        ("dual-stack.conflist", serde_json::from_str(&read("dual-stack.conflist")).unwrap()),
        ("multus-macvlan.yaml", nad),
        ("net-conf-configmap.yaml", cm_conf),
    ];
    for (file, conf) in confs {
        let plugin = match conf.get("plugins") {
            Some(p) => p.as_array().unwrap().iter().find(|p| p.get("ipam").is_some()).unwrap().clone(),
            None => conf.clone(),
        };
        assert_eq!(plugin["ipam"]["type"], "netendpoint", "{file}");
        let mut ipam = plugin["ipam"].clone();
        let pool = h::unique("example");
        ipam["pool"] = json!(pool);
        ipam["kubeconfig"] = json!(h::kubeconfig());
        h::ensure_node("node-examples");
        ipam["nodeName"] = json!("node-examples");
        ipam["dataDir"] = json!(std::env::temp_dir().join("netendpoint-test-data"));
        if let Some(obj) = ipam.as_object_mut() {
            obj.remove("log");
            obj.remove("finalizers");
        }
        let run = json!({"cniVersion": conf["cniVersion"], "name": conf["name"], "ipam": ipam});
        let ctr = h::unique("ctr-example");
        let env = [("CNI_CONTAINERID", ctr.as_str())];
        let (ok, res, err) = h::invoke("ADD", &run, &env);
        assert!(ok, "{file}: {res} {err}");
        let families = plugin["ipam"]["ranges"].as_array().unwrap().len();
        assert_eq!(res["ips"].as_array().unwrap().len(), families, "{file}: one address per range set: {res}");
        let (ok, res, err) = h::invoke("DEL", &run, &env);
        assert!(ok, "{file} DEL: {res} {err}");
    }
}

/// The two components together, each with only its own ServiceAccount: the
/// watcher-example binary runs with the exact args of its DaemonSet, the
/// plugin leases with the watcher's finalizer, and after DEL the watcher's
/// acknowledgement releases the IP. No call of either is refused.
#[tokio::test]
async fn watcher_with_daemonset_args_acks_releases_of_the_plugin() {
    h::apply_deploy();
    let dir = h::TempDir::new("deploy-e2e");
    let (plugin_kc, watcher_kc) = (dir.join("plugin.kubeconfig"), dir.join("watcher.kubeconfig"));
    let node = h::unique("e2e-node");
    // Node-bound tokens, as the installer and the kubelet provide them: the
    // admission policies refuse tokens that name no node.
    h::node_bound_kubeconfig(DEPLOY_NAMESPACE, CNI_SERVICE_ACCOUNT, &node, &plugin_kc);
    h::node_bound_kubeconfig(DEPLOY_NAMESPACE, WATCHER_SERVICE_ACCOUNT, &node, &watcher_kc);

    let out = h::kubectl(&[
        "get",
        "ds",
        "netendpoint-watcher-example",
        "-n",
        DEPLOY_NAMESPACE,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].args}",
    ]);
    let ds_args: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let finalizer = ds_args.iter().find_map(|a| a.strip_prefix("--finalizer=")).unwrap().to_string();
    let args: Vec<String> = ds_args
        .iter()
        .map(|a| {
            if a.starts_with("--metrics-addr=") {
                format!("--metrics-addr={addr}")
            } else if a.starts_with("--probe-addr=") {
                "--probe-addr=127.0.0.1:0".to_string()
            } else {
                a.replace("$(NODE_NAME)", &node)
            }
        })
        .collect();
    let log_path = dir.join("watcher.log");
    let bin = h::plugin_bin().with_file_name("watcher-example");
    assert!(bin.exists(), "{} not built: run `cargo build --workspace --bins`", bin.display());
    let mut watcher = std::process::Command::new(bin)
        .env_clear()
        .env("RUST_LOG", "info")
        .args(&args)
        .arg("--kubeconfig")
        .arg(&watcher_kc)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let mut ready = false;
    for _ in 0..150 {
        if h::http_get(&addr, "/readyz").is_some_and(|(code, _)| code == 200) {
            ready = true;
            break;
        }
        assert!(
            watcher.try_wait().unwrap().is_none(),
            "watcher exited: {}",
            std::fs::read_to_string(&log_path).unwrap()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(ready, "watcher not ready: {}", std::fs::read_to_string(&log_path).unwrap());

    let pool = h::unique("e2e");
    let mut ipam = h::ipam(&pool, json!([[{"subnet": "10.77.3.0/29"}]]));
    let _ranges = h::register_pool(&pool, &["10.77.3.0/29"]);
    ipam["kubeconfig"] = json!(plugin_kc);
    h::ensure_node(&node);
    ipam["nodeName"] = json!(node);
    ipam["finalizers"] = json!([finalizer]);
    let conf = json!({"cniVersion": "1.1.0", "name": pool, "ipam": ipam});
    let env = [("CNI_CONTAINERID", "ctr-e2e-1")];
    let (ok, add, err) = h::invoke("ADD", &conf, &env);
    assert!(ok, "ADD: {add} {err}");
    let eps = h::pool_endpoints(&pool).await;
    assert_eq!(eps[0].metadata.finalizers.as_deref(), Some(&[finalizer.clone()][..]));
    let (ok, out, err) = h::invoke("DEL", &conf, &env);
    assert!(ok, "DEL: {out} {err}");
    let mut gone = false;
    for _ in 0..100 {
        if h::pool_endpoints(&pool).await.is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = std::process::Command::new("kill").args(["-TERM", &watcher.id().to_string()]).status();
    let _ = watcher.wait();
    let log = std::fs::read_to_string(&log_path).unwrap();
    if !gone {
        h::cleanup_pool(&pool).await;
    }
    assert!(gone, "the watcher did not acknowledge the release: {log}");
    assert!(!log.to_lowercase().contains("forbidden"), "watcher was refused a call: {log}");
}
