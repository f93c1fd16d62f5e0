//! `kubectl netendpoint` against the real API server: a pool is prepared in
//! a known state (live leases, releases held by named finalizers, an agent's
//! Event), the built binary is run, and each command's output (table, JSON,
//! YAML) and exit code is checked, as is the forced release's write and Event.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use netendpoint_crd::{NetworkEndpoint, endpoint_name};
use netendpoint_tests::*;

const FIN_A: &str = "a.example/route-agent";
const FIN_B: &str = "b.example/firewall-agent";

fn plugin(args: &[&str]) -> Output {
    Command::new(built_bin("NETENDPOINT_KUBECTL_PLUGIN", "kubectl-netendpoint"))
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(o), stderr(o));
    stdout(o)
}

fn json(o: &Output) -> serde_json::Value {
    let out = ok(o);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"))
}

/// A lease of `ip` held by pod `default/<pod>`, labelled as the plugin labels it.
async fn hold(pool: &str, ip: &str, pod: &str, finalizers: &[&str]) -> NetworkEndpoint {
    let ep = LeaseFixture::new(pool, ip).container(&format!("ctr-{pod}")).node("kp-node").finalizers(finalizers);
    ep.pod("default", pod, &format!("uid-{pod}")).create().await
}

async fn release(name: &str) {
    endpoints().await.delete(name, &DeleteParams::default()).await.unwrap();
}

/// An agent's Event about a lease, as agents record them.
async fn agent_event(ep: &NetworkEndpoint, reason: &str, note: &str) {
    let ev = Event {
        metadata: ObjectMeta {
            generate_name: Some("kp-".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        action: Some(reason.into()),
        reason: Some(reason.into()),
        note: Some(note.into()),
        type_: Some("Normal".into()),
        event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        reporting_controller: Some("a.example/route-agent".into()),
        reporting_instance: Some("kp-node".into()),
        regarding: Some(ObjectReference {
            api_version: Some("netendpoint.dev/v1alpha1".into()),
            kind: Some("NetworkEndpoint".into()),
            name: ep.metadata.name.clone(),
            uid: ep.metadata.uid.clone(),
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<Event>::namespaced(client().await, "default").create(&PostParams::default(), &ev).await.unwrap();
}

/// The pool of these tests: 10.213.0.2-10.213.0.6 (5 addresses), with
/// .2 live, .3 releasing held by A and B, .4 releasing held by B, .5 live.
struct Fixture {
    pool: String,
    conf: TempDir,
}

impl Fixture {
    async fn new(prefix: &str, third_octet: u8) -> Self {
        let pool = unique(prefix);
        let net = |last: u8| format!("10.213.{third_octet}.{last}");
        hold(&pool, &net(2), &format!("{pool}-web-2"), &[FIN_A, FIN_B]).await;
        let held = hold(&pool, &net(3), &format!("{pool}-web-3"), &[FIN_A, FIN_B]).await;
        let held_b = hold(&pool, &net(4), &format!("{pool}-web-4"), &[FIN_B]).await;
        hold(&pool, &net(5), &format!("{pool}-web-5"), &[]).await;
        release(held.metadata.name.as_deref().unwrap()).await;
        release(held_b.metadata.name.as_deref().unwrap()).await;
        agent_event(&held, "RouteKept", "route of the old pod still in place").await;
        let conf = TempDir::new("kp-conf");
        let ranges = serde_json::json!([[{
            "subnet": format!("10.213.{third_octet}.0/29"),
            "rangeStart": net(2), "rangeEnd": net(6), "gateway": net(1)
        }]]);
        std::fs::write(conf.join("10-kp.conf"), net_conf(&pool, ranges, serde_json::json!({})).to_string()).unwrap();
        Fixture { pool, conf }
    }

    fn conf_file(&self) -> String {
        self.conf.join("10-kp.conf").display().to_string()
    }
}

#[tokio::test]
async fn pools_shows_capacity_used_releasing_free_and_who_holds_the_releases() {
    let f = Fixture::new("kp-pools", 1).await;
    let conf = f.conf_file();

    // Two ADDs wait in the pool's queue (entries as a node's plugin writes them).
    let needs: Api<netendpoint_crd::NetworkEndpointNeed> = Api::all(client().await);
    for slot in [0, 1] {
        let entry = NeedFixture::new(&f.pool, "kp-node").entry(slot).wait_seconds(100).build();
        needs.create(&PostParams::default(), &entry).await.unwrap();
    }

    let table = ok(&plugin(&["pools", &f.pool, "--config", &conf]));
    let lines: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert_eq!(
        lines[0],
        ["POOL", "CAPACITY", "USED", "RELEASING", "FREE", "OLDEST-RELEASE", "WAITING-ON", "QUEUED", "OLDEST-WAIT"]
    );
    assert_eq!(lines[1][..5], [f.pool.as_str(), "5", "2", "2", "1"], "{table}");
    assert_eq!(lines[1][6], format!("{FIN_A}=1,{FIN_B}=2"), "{table}");
    assert_eq!(lines[1][7], "2", "two ADDs wait in the queue: {table}");
    assert!(lines[1][8].ends_with('s'), "{table}");

    let j = json(&plugin(&["pools", &f.pool, "--config", &conf, "-o", "json"]));
    let p = &j["pools"][0];
    assert_eq!((p["pool"].as_str(), p["capacity"].as_u64()), (Some(f.pool.as_str()), Some(5)), "{j}");
    assert_eq!((p["used"].as_u64(), p["releasing"].as_u64(), p["free"].as_u64()), (Some(2), Some(2), Some(1)), "{j}");
    assert_eq!(p["waitingOn"], serde_json::json!({FIN_A: 1, FIN_B: 2}));
    assert!(p["oldestReleaseSeconds"].is_u64(), "{j}");
    assert_eq!((p["queued"].as_u64(), p["oldestWaitSeconds"].is_u64()), (Some(2), true), "{j}");
    assert_eq!(j["rangesFrom"], serde_json::json!([conf]));

    // No ranges known (no ConfigMap, no --config): counts, and capacity/free unknown.
    let j = json(&plugin(&["pools", &f.pool, "--net-conf", "", "-o", "json"]));
    let p = &j["pools"][0];
    assert!(p["capacity"].is_null() && p["free"].is_null(), "{j}");
    assert_eq!((p["used"].as_u64(), p["releasing"].as_u64()), (Some(2), Some(2)));
    let table = ok(&plugin(&["pools", &f.pool, "--net-conf", "default/kp-no-such-configmap"]));
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!((row[1], row[4]), ("-", "-"), "{table}");

    let yaml = ok(&plugin(&["pools", &f.pool, "--config", &conf, "-o", "yaml"]));
    assert!(yaml.contains(&format!("pool: {}", f.pool)) && yaml.contains("capacity: 5"), "{yaml}");
    let wide = ok(&plugin(&["pools", &f.pool, "--config", &conf, "-o", "wide"]));
    assert!(wide.lines().next().unwrap().ends_with("RANGES-FROM") && wide.contains(&conf), "{wide}");

    // kubectl itself finds the plugin on PATH.
    let path = format!(
        "{}:{}",
        built_bin("NETENDPOINT_KUBECTL_PLUGIN", "kubectl-netendpoint").parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let via_kubectl = Command::new(repo_root().join("tests/bin/kubectl"))
        .args(["netendpoint", "pools", &f.pool, "--config", &conf, "-o", "json"])
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig())
        .output()
        .unwrap();
    assert_eq!(json(&via_kubectl)["pools"][0]["used"], 2);
    for slot in [0, 1] {
        let _ =
            needs.delete(&netendpoint_crd::need_name(&f.pool, "kp-node", Some(slot)), &DeleteParams::default()).await;
    }
    cleanup_pool(&f.pool).await;
}

#[tokio::test]
async fn why_tells_who_holds_an_ip_on_what_its_release_waits_and_the_events() {
    let f = Fixture::new("kp-why", 2).await;
    let releasing = "10.213.2.3";

    let text = ok(&plugin(&["why", releasing]));
    for want in [
        &endpoint_name(&f.pool, releasing.parse().unwrap()),
        &format!("pod default/{}-web-3 (uid uid-{}-web-3)", f.pool, f.pool),
        "Node:         kp-node",
        "releasing since",
        &format!("Waiting on:   {FIN_A}, {FIN_B}"),
        "RouteKept",
        "route of the old pod still in place",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }

    let j = json(&plugin(&["why", releasing, "--pool", &f.pool, "-o", "json"]));
    let l = &j["leases"][0];
    assert_eq!(j["leases"].as_array().unwrap().len(), 1);
    assert_eq!((l["ip"].as_str(), l["releasing"].as_bool()), (Some(releasing), Some(true)), "{j}");
    assert_eq!(l["finalizers"], serde_json::json!([FIN_A, FIN_B]));
    assert_eq!(l["containerID"], format!("ctr-{}-web-3", f.pool));
    assert!(l["releasingSince"].is_string() && l["heldSince"].is_string(), "{j}");
    let ev = l["events"].as_array().unwrap();
    assert!(ev.iter().any(|e| e["reason"] == "RouteKept" && e["from"] == FIN_A), "{j}");

    // By pod: a live lease.
    let j = json(&plugin(&["why", &format!("default/{}-web-2", f.pool), "-o", "json"]));
    assert_eq!(j["leases"][0]["ip"], "10.213.2.2");
    assert_eq!(j["leases"][0]["releasing"], false);
    let yaml = ok(&plugin(&["why", &format!("default/{}-web-2", f.pool), "-o", "yaml"]));
    assert!(yaml.contains("releasing: false") && yaml.contains("ip: \"10.213.2.2\""), "{yaml}");
    let text = ok(&plugin(&["why", "10.213.2.5", "--pool", &f.pool]));
    assert!(text.contains("State:        in use") && text.contains("Finalizers:   <none>"), "{text}");

    // Nobody holds it: exit 1, a message on stderr, nothing on stdout.
    for args in [&["why", "10.213.2.6", "--pool", &f.pool][..], &["why", &format!("default/{}-nobody", f.pool)]] {
        let o = plugin(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stdout(&o).is_empty(), "{}", stdout(&o));
        assert!(stderr(&o).contains("no lease") || stderr(&o).contains("holds no lease"), "{}", stderr(&o));
    }
    let o = plugin(&["why", "not-an-ip"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("neither an IP address nor namespace/pod"), "{}", stderr(&o));
    cleanup_pool(&f.pool).await;
}

#[tokio::test]
async fn release_force_asks_refuses_live_leases_and_records_the_event() {
    let f = Fixture::new("kp-force", 3).await;
    let live = endpoint_name(&f.pool, "10.213.3.2".parse().unwrap());
    let held = endpoint_name(&f.pool, "10.213.3.4".parse().unwrap());
    let api = endpoints().await;

    // Without --force: refused.
    let o = plugin(&["release", "10.213.3.4", "--pool", &f.pool, "--yes"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));

    // A live lease is refused, even with --yes, and keeps its finalizers.
    let o = plugin(&["release", "--force", "10.213.3.2", "--pool", &f.pool, "--yes"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("not releasing"), "{}", stderr(&o));
    let ep = api.get(&live).await.unwrap();
    assert_eq!((ep.metadata.deletion_timestamp, ep.metadata.finalizers.unwrap().len()), (None, 2));

    // No terminal and no --yes: shows the plan, refuses, changes nothing.
    let o = plugin(&["release", "--force", "10.213.3.4", "--pool", &f.pool]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains(FIN_B), "the plan names the finalizers: {}", stdout(&o));
    assert!(stderr(&o).contains("without a terminal") && stderr(&o).contains("--yes"), "{}", stderr(&o));
    assert_eq!(api.get(&held).await.unwrap().metadata.finalizers, Some(vec![FIN_B.to_string()]));
    assert!(events_about(&held, "ForcedRelease").await.is_empty());

    // With --yes: the finalizers go, the IP is free, the Event names them and the user.
    let j = json(&plugin(&["release", "--force", "10.213.3.4", "--pool", &f.pool, "--yes", "-o", "json"]));
    assert_eq!((j["lease"].as_str(), j["forced"].as_bool()), (Some(held.as_str()), Some(true)), "{j}");
    assert_eq!(j["finalizersRemoved"], serde_json::json!([FIN_B]));
    let start = Instant::now();
    while api.get_opt(&held).await.unwrap().is_some() {
        assert!(start.elapsed() < Duration::from_secs(30), "{held} still exists after the forced release");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ev = events_about(&held, "ForcedRelease").await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].controller, "kubectl-netendpoint");
    let note = ev[0].note.clone();
    assert!(note.contains(FIN_B) && note.contains("on the request of"), "{note}");
    assert!(!ev[0].instance.is_empty());
    let o = plugin(&["why", "10.213.3.4", "--pool", &f.pool]);
    assert_eq!(o.status.code(), Some(1), "the IP is free now");
    cleanup_pool(&f.pool).await;
}

/// `agents` reads the agents list and the network config from the API
/// server, and the leases: a finalizer stamped but registered by nobody, and
/// one registered but stamped nowhere, are each reported and fail the
/// command; one registered and stamped, and one only added lazily to a
/// lease, are not.
#[tokio::test]
async fn agents_reports_finalizers_stamped_but_not_registered_and_registered_but_stamped_nowhere() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let tag = unique("kpa");
    let fin = |what: &str| format!("{what}.{tag}.example/agent");
    let (routes, policy, nat, lazy) = (fin("routes"), fin("policy"), fin("nat"), fin("lazy"));
    let pool = unique("kp-agents");
    let maps: Api<ConfigMap> = Api::namespaced(client().await, "default");
    let map = |name: &str, data: serde_json::Value| {
        serde_json::from_value::<ConfigMap>(serde_json::json!({"metadata": {"name": name}, "data": data})).unwrap()
    };
    let agents_map = format!("{tag}-agents");
    let registered = serde_json::json!({"ops.routes": routes, "ops.nat": nat, "ops.lazy": lazy});
    maps.create(&PostParams::default(), &map(&agents_map, registered)).await.unwrap();
    let ranges = serde_json::json!([[{"subnet": "10.213.9.0/29"}]]);
    let conf = net_conf(&pool, ranges, serde_json::json!({"finalizers": [routes, policy]}));
    let conf_map = format!("{tag}-net-conf");
    maps.create(&PostParams::default(), &map(&conf_map, serde_json::json!({"10-kp.conf": conf.to_string()})))
        .await
        .unwrap();
    hold(&pool, "10.213.9.2", &format!("{pool}-web-2"), &[&routes, &policy, &lazy]).await;

    let run = |format: &str| {
        plugin(&[
            "agents",
            "--agents",
            &format!("default/{agents_map}"),
            "--net-conf",
            &format!("default/{conf_map}"),
            "-o",
            format,
        ])
    };
    let out = run("json");
    assert_eq!(out.status.code(), Some(1), "a problem fails the command: {}", stderr(&out));
    assert!(stderr(&out).contains("registration problem"), "{}", stderr(&out));
    let j: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let row = |f: &str| j["agents"].as_array().unwrap().iter().find(|r| r["finalizer"] == f).cloned().unwrap();
    let network = format!("{} (pool {pool})", conf["name"].as_str().unwrap());
    assert_eq!(row(&routes)["problem"], serde_json::Value::Null, "{j}");
    assert_eq!(row(&routes)["registeredBy"], serde_json::json!(["ops.routes"]));
    assert_eq!(row(&routes)["stampedBy"], serde_json::json!([network]));
    assert_eq!(row(&routes)["onLeases"], 1);
    assert_eq!(row(&policy)["problem"], "NotRegistered", "{j}");
    assert_eq!(row(&nat)["problem"], "NotStamped", "{j}");
    assert_eq!((row(&lazy)["problem"].is_null(), row(&lazy)["onLeases"].as_u64()), (true, Some(1)), "{j}");
    assert_eq!(j["registeredFrom"], format!("configmap/default/{agents_map}"));

    let table = stdout(&run("table"));
    assert!(table.starts_with("FINALIZER"), "{table}");
    assert!(table.lines().any(|l| l.starts_with(&policy) && l.ends_with("NotRegistered")), "{table}");
    assert!(table.contains(&format!("problem: {nat} is registered but no network stamps it")), "{table}");

    // The agents list missing: nothing counts as registered, and it says so.
    let out =
        plugin(&["agents", "--agents", "default/kp-no-such-agents", "--net-conf", &format!("default/{conf_map}")]);
    assert!(stderr(&out).contains("ConfigMap default/kp-no-such-agents not found"), "{}", stderr(&out));
    assert!(stdout(&out).lines().any(|l| l.starts_with(&routes) && l.ends_with("NotRegistered")), "{}", stdout(&out));

    for name in [&agents_map, &conf_map] {
        maps.delete(name, &DeleteParams::default()).await.unwrap();
    }
    cleanup_pool(&pool).await;
}

/// `status` on a fresh API server where deploy/ was applied as the docs
/// say, with no node and no controller running: each missing part is named
/// and the command fails; a deleted binding and an installer Pod whose
/// readiness probe fails (with the kubelet's Event) are named too. Once the
/// parts are made healthy (a held leader Lease, a ready installer, the
/// binding back, a network stamping the agent's finalizer), a `status
/// --wait` started before passes.
#[test]
fn status_names_each_unhealthy_part_and_wait_returns_once_healthy() {
    let server = OwnServer::start();
    let kc = server.kubeconfig();
    let deploy = deploy_dir();
    kubectl_ok(&kc, &["apply", "-f", deploy.join("crd.yaml").to_str().unwrap()]);
    kubectl_ok(&kc, &["wait", "--for", "condition=established", "crd/networkendpoints.netendpoint.dev"]);
    kubectl_ok(&kc, &["apply", "-f", deploy.join("namespace.yaml").to_str().unwrap()]);
    kubectl_ok(&kc, &["apply", "-k", deploy.to_str().unwrap()]);
    let status = |args: &[&str]| {
        Command::new(built_bin("NETENDPOINT_KUBECTL_PLUGIN", "kubectl-netendpoint"))
            .arg("--kubeconfig")
            .arg(&kc)
            .arg("status")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };

    kubectl_ok(&kc, &["delete", "validatingadmissionpolicybinding", "netendpoint-plugin"]);
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "netendpoint-installer-x", "namespace": "netendpoint-system",
                     "labels": {"app.kubernetes.io/name": "netendpoint-installer"}},
        "spec": {"nodeName": "node-b", "serviceAccountName": "netendpoint-installer",
                 "automountServiceAccountToken": false,
                 "containers": [{"name": "install", "image": "netendpoint"}]}
    });
    let file = server.dir.join("objects.json");
    std::fs::write(&file, pod.to_string()).unwrap();
    kubectl_ok(&kc, &["create", "-f", file.to_str().unwrap()]);
    let unhealthy = serde_json::json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "netendpoint-installer-x.1", "namespace": "netendpoint-system"},
        "involvedObject": {"kind": "Pod", "name": "netendpoint-installer-x", "namespace": "netendpoint-system"},
        "reason": "Unhealthy", "type": "Warning", "lastTimestamp": "2026-12-08T00:00:00Z",
        "message": "Readiness probe failed: the network config source holds bridge-portmap.conflist but no key 10-netendpoint.conflist"
    });
    std::fs::write(&file, unhealthy.to_string()).unwrap();
    kubectl_ok(&kc, &["create", "-f", file.to_str().unwrap()]);

    let out = status(&["-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let j: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(j["healthy"], false);
    let problems = j["problems"].to_string();
    for expected in [
        "no controller leads",
        "no node runs the installer",
        "installer netendpoint-installer-x on node node-b is not ready: Readiness probe failed",
        "no key 10-netendpoint.conflist",
        "admission policy binding netendpoint-plugin is missing",
        "watcher.netendpoint.dev/rules is registered but no network stamps it",
    ] {
        assert!(problems.contains(expected), "{expected:?} not in {problems}");
    }
    assert_eq!(j["policies"]["missingPolicies"], serde_json::json!([]), "{j}");
    assert_eq!(j["agentsRegistered"], 1, "{j}");

    // Healthy, while a `status --wait` started before it waits.
    let waiting = {
        let kc = kc.clone();
        std::thread::spawn(move || {
            Command::new(built_bin("NETENDPOINT_KUBECTL_PLUGIN", "kubectl-netendpoint"))
                .arg("--kubeconfig")
                .arg(&kc)
                .args(["status", "--wait=90s"])
                .stdin(Stdio::null())
                .output()
                .unwrap()
        })
    };
    std::thread::sleep(Duration::from_secs(3));
    kubectl_ok(
        &kc,
        &["delete", "pod", "netendpoint-installer-x", "-n", "netendpoint-system", "--grace-period=0", "--force"],
    );
    kubectl_ok(&kc, &["apply", "-f", deploy.join("admission-policies.yaml").to_str().unwrap()]);
    let now = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    let lease = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "netendpoint-controller", "namespace": "netendpoint-system"},
        "spec": {"holderIdentity": "netendpoint-controller-0", "leaseDurationSeconds": 600, "renewTime": now}
    });
    std::fs::write(&file, lease.to_string()).unwrap();
    kubectl_ok(&kc, &["create", "-f", file.to_str().unwrap()]);
    let ready =
        r#"{"status":{"desiredNumberScheduled":1,"numberReady":1,"currentNumberScheduled":1,"numberMisscheduled":0}}"#;
    kubectl_ok(
        &kc,
        &[
            "patch",
            "daemonset",
            "netendpoint-installer",
            "-n",
            "netendpoint-system",
            "--subresource=status",
            "--type=merge",
            "-p",
            ready,
        ],
    );
    let conf = net_conf(
        "pods",
        serde_json::json!([[{"subnet": "10.244.0.0/24"}]]),
        serde_json::json!({"finalizers": ["watcher.netendpoint.dev/rules"]}),
    );
    let conf_file = server.dir.join("10-netendpoint.conflist");
    std::fs::write(&conf_file, conf.to_string()).unwrap();
    kubectl_ok(
        &kc,
        &[
            "-n",
            "netendpoint-system",
            "create",
            "configmap",
            "netendpoint-net-conf",
            &format!("--from-file={}", conf_file.display()),
        ],
    );
    let out = waiting.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("waiting:"), "it waited: {}", stderr(&out));
    let table = stdout(&out);
    assert!(table.contains("healthy\n") && table.contains("leader netendpoint-controller-0"), "{table}");
    assert!(
        table.contains("1/1 ready") && table.contains("every policy, binding and parameter ConfigMap present"),
        "{table}"
    );
}
