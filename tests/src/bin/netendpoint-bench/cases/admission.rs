//! What the admission policies of deploy/ add to an ADD of the plugin's
//! node-bound identity.

use crate::prelude::*;

/// `kubectl` (tests/bin, beside the CNI tools) with the bench's kubeconfig.
pub(crate) fn kubectl(ctx: &Ctx, args: &[&str]) -> std::process::Output {
    let bin = ctx.cni.parent().map_or_else(|| PathBuf::from("kubectl"), |d| d.join("kubectl"));
    Command::new(bin).arg("--kubeconfig").arg(&ctx.kubeconfig).args(args).output().expect("kubectl")
}

/// A kubeconfig for the plugin's ServiceAccount with a token bound to the
/// Node `node`, as the installer writes it.
pub(crate) fn plugin_kubeconfig(ctx: &Ctx, node: &str) -> PathBuf {
    let out = kubectl(
        ctx,
        &[
            "create",
            "token",
            "netendpoint-cni",
            "-n",
            "netendpoint-system",
            "--bound-object-kind",
            "Node",
            "--bound-object-name",
            node,
            "--duration",
            "2h",
        ],
    );
    assert!(out.status.success(), "mint the plugin's token: {}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let server = kubectl(ctx, &["config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.server}"]);
    let server = String::from_utf8(server.stdout).unwrap();
    let ca = ctx.kubeconfig.parent().unwrap().join("pki/ca.crt");
    let path = ctx.work.join("plugin.kubeconfig");
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
        ca.display()
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

/// True once the API server refuses, as the plugin, a lease at an address
/// outside every range and a lease of another node (so the range and plugin
/// policies are in force), or, with `enforced` false, once it accepts both
/// (a server-side dry run; nothing is stored).
pub(crate) fn admission_is(ctx: &Ctx, plugin: &kube::Client, enforced: bool) -> bool {
    let api: Api<NetworkEndpoint> = Api::all(plugin.clone());
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    let outside = filler("bench-admission-probe", "192.0.2.1", "bench-node");
    let other_node = filler("bench-admission-probe", "192.0.2.2", "bench-other-node");
    ctx.rt.block_on(async {
        let a = api.create(&dry, &outside).await;
        let b = api.create(&dry, &other_node).await;
        let refused = |r: &kube::Result<NetworkEndpoint>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);
        if enforced { refused(&a) && refused(&b) } else { a.is_ok() && b.is_ok() }
    })
}

/// What admission costs an ADD: the plugin, authenticating as its
/// node-bound ServiceAccount (deploy/rbac-cni.yaml) as on a node, ADDs into
/// a fresh /20 with and without the admission policies of deploy/ in
/// force, in alternating rounds so that drift of the machine hits both.
pub(crate) fn bench_admission(ctx: &Ctx, report: &mut String) {
    let deploy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let policies = deploy.join("admission-policies.yaml");
    for f in ["namespace.yaml", "rbac-cni.yaml", "agents.yaml"] {
        let out = kubectl(ctx, &["apply", "-f", deploy.join(f).to_str().unwrap()]);
        assert!(out.status.success(), "apply {f}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let kc = plugin_kubeconfig(ctx, "bench-node");
    let plugin = ctx.rt.block_on(async {
        let cfg = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kc).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
        kube::Client::try_from(cfg).unwrap()
    });
    ctx.ensure_nodes(&["bench-other-node".to_string()]);
    // Some API servers (kubernetes/kubernetes#133827, 1.36 among them) stop
    // reading the parameters of a kind for good once no binding uses that
    // kind for a moment, and then refuse every lease ("no params found"). A
    // binding of ConfigMaps that matches nothing keeps the kind in use while
    // the rounds delete and apply the policies.
    let keepalive = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": "bench-param-keepalive"},
         "spec": {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                  "matchConstraints": {"resourceRules": [{"apiGroups": ["bench.invalid"], "apiVersions": ["*"],
                                                          "resources": ["nothing"], "operations": ["CREATE"]}]},
                  "validations": [{"expression": "true"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": "bench-param-keepalive"},
         "spec": {"policyName": "bench-param-keepalive", "validationActions": ["Deny"],
                  "paramRef": {"name": "bench-param-keepalive", "namespace": "netendpoint-system",
                               "parameterNotFoundAction": "Allow"}}}]});
    let keepalive_file = ctx.work.join("keepalive.json");
    std::fs::write(&keepalive_file, keepalive.to_string()).unwrap();
    let out = kubectl(ctx, &["apply", "-f", keepalive_file.to_str().unwrap()]);
    assert!(out.status.success(), "keep ConfigMap parameters read: {}", String::from_utf8_lossy(&out.stderr));
    let (rounds, n, levels): (usize, usize, &[usize]) = if ctx.quick { (1, 40, &[1]) } else { (3, 150, &[1, 8]) };
    // (with policies, concurrency) -> latencies of every round
    let mut lat: HashMap<(bool, usize), Vec<Duration>> = HashMap::new();
    let mut failed: HashMap<(bool, usize), usize> = HashMap::new();
    // (with policies, concurrency) -> (API server CPU seconds, ADDs)
    let mut cpu: HashMap<(bool, usize), (f64, usize)> = HashMap::new();
    let mut subnet = 0u32;
    for round in 0..rounds {
        for with in [false, true] {
            if with {
                let out = kubectl(ctx, &["apply", "-f", policies.to_str().unwrap()]);
                assert!(out.status.success(), "apply the policies: {}", String::from_utf8_lossy(&out.stderr));
            } else {
                let _ = kubectl(ctx, &["delete", "--ignore-not-found", "-f", policies.to_str().unwrap()]);
            }
            let mut settled = false;
            for _ in 0..300 {
                if admission_is(ctx, &plugin, with) {
                    settled = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            assert!(settled, "the policies did not {} within 30 s", if with { "take effect" } else { "go away" });
            for &c in levels {
                let pool = format!("bench-adm-{}-r{round}-c{c}", if with { "on" } else { "off" });
                let cidr = format!("10.{}.{}.0/20", 100 + subnet / 16, (subnet % 16) * 16);
                subnet += 1;
                if with {
                    let patch = json!({"data": {pool.clone(): cidr.clone()}}).to_string();
                    let out = kubectl(
                        ctx,
                        &[
                            "patch",
                            "configmap",
                            "netendpoint-pools",
                            "-n",
                            "netendpoint-system",
                            "--type",
                            "merge",
                            "-p",
                            &patch,
                        ],
                    );
                    assert!(out.status.success(), "register {pool}: {}", String::from_utf8_lossy(&out.stderr));
                }
                let conf = ctx.netconf(&pool, &cidr, json!({"kubeconfig": kc, "crossNode": "controller"}));
                let (ok, _, err) = run_one(&ctx.add(&conf, &format!("adm-warm-{pool}")));
                assert!(ok, "warm-up ADD as the plugin's identity: {err}");
                let cpu_before = ctx.apiserver_cpu_s();
                let (took, fails, _) =
                    run_many_timed(n, c, &|i| ctx.add(&conf, &format!("adm-{pool}-{i}")), &|_, _| {});
                if let (Some(a), Some(b)) = (cpu_before, ctx.apiserver_cpu_s()) {
                    let e = cpu.entry((with, c)).or_insert((0.0, 0));
                    e.0 += b - a;
                    e.1 += n;
                }
                report_failures(if with { "with policies" } else { "without policies" }, c, &fails);
                *failed.entry((with, c)).or_default() += fails.len();
                lat.entry((with, c)).or_default().extend(took);
                ctx.delete_pool(&pool);
            }
        }
    }
    let _ = kubectl(ctx, &["delete", "--ignore-not-found", "-f", policies.to_str().unwrap()]);
    let _ = kubectl(ctx, &["delete", "--ignore-not-found", "-f", keepalive_file.to_str().unwrap()]);

    let _ = writeln!(
        report,
        "## What admission costs an ADD
"
    );
    let _ = writeln!(
        report,
        "The plugin as its node-bound ServiceAccount (`deploy/rbac-cni.yaml`, a TokenRequest token bound to the Node), \
         ADDing into a fresh /20, with the admission policies of `deploy/admission-policies.yaml` in force and without, \
         {rounds} alternating rounds of {n} ADDs per concurrency.\n"
    );
    let _ =
        writeln!(report, "| concurrency | policies | ADDs | failed | p50 ms | p99 ms | API server CPU ms per ADD |");
    let _ = writeln!(report, "|---:|---|---:|---:|---:|---:|---:|");
    let mut added = Vec::new();
    for &c in levels {
        let mut p50 = [0.0; 2];
        for (i, with) in [false, true].into_iter().enumerate() {
            let mut v = lat.remove(&(with, c)).unwrap_or_default();
            let f = failed.get(&(with, c)).copied().unwrap_or(0);
            let count = v.len() + f;
            p50[i] = pct_ms(&mut v, 0.50);
            let p99 = pct_ms(&mut v, 0.99);
            let cpu_ms =
                cpu.get(&(with, c)).map_or("n/a".to_string(), |(s, n)| format!("{:.2}", s * 1000.0 / *n as f64));
            let _ = writeln!(
                report,
                "| {c} | {} | {count} | {f} | {:.1} | {p99:.1} | {cpu_ms} |",
                if with { "in force" } else { "none" },
                p50[i]
            );
        }
        added.push((c, p50[1] - p50[0]));
    }
    let _ = writeln!(report);
    for (c, d) in added {
        let _ = writeln!(report, "Admission adds {d:+.1} ms to the p50 of an ADD at concurrency {c}.");
    }
    let _ = writeln!(report);
}
