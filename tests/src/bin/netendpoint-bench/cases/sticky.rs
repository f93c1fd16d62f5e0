//! Recreations of one StatefulSet Pod that keeps its address: each ADD asks
//! the claim's hold for the next incarnation, and the controller creates it.

use crate::prelude::*;
use k8s_openapi::api::core::v1::Pod;

/// Creates a Pod `name` bound to `node`, controlled by StatefulSet `sts` (UID `sts_uid`); returns its UID.
fn pod(ctx: &Ctx, name: &str, node: &str, sts: &str, sts_uid: &str) -> String {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts, "uid": sts_uid, "controller": true
        }]},
        "spec": {"nodeName": node, "automountServiceAccountToken": false,
                 "containers": [{"name": "c", "image": "example.invalid/c"}]}
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    ctx.rt.block_on(pods.create(&PostParams::default(), &pod)).unwrap().metadata.uid.unwrap()
}

fn delete_pod(ctx: &Ctx, name: &str) {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let dp = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
    let _ = ctx.rt.block_on(pods.delete(name, &dp));
    for _ in 0..200 {
        if ctx.rt.block_on(pods.get_opt(name)).ok().flatten().is_none() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub(crate) fn bench_sticky(ctx: &Ctx, report: &mut String) {
    let pool = "bench-sticky";
    let node = "bench-node";
    let sts = "bench-web";
    let n = if ctx.quick { 100 } else { 1000 };
    // The objects a cluster would have: a StatefulSet, and the claim of its Pod 0 (the controller
    // creates it from the network config; here the harness does, labelled as the controller labels it).
    let sts_uid = ctx.rt.block_on(async {
        let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(ctx.client.clone(), "default");
        let _ = sas.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap()).await;
        let api: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(ctx.client.clone(), "default");
        let obj = serde_json::from_value(json!({
            "metadata": {"name": sts},
            "spec": {"replicas": 1, "serviceName": sts, "selector": {"matchLabels": {"app": sts}},
                     "template": {"metadata": {"labels": {"app": sts}}, "spec": {"containers": [{"name": "c", "image": "example.invalid/c"}]}}}
        }))
        .unwrap();
        let created = api.create(&PostParams::default(), &obj).await.unwrap();
        let claims: Api<netendpoint_crd::ipamclaim::IPAMClaim> = Api::namespaced(ctx.client.clone(), "default");
        let mut claim = netendpoint_crd::ipamclaim::IPAMClaim::new(
            &format!("{sts}-0.{pool}"),
            netendpoint_crd::ipamclaim::IPAMClaimSpec { network: pool.into(), interface: "eth0".into() },
        );
        claim.metadata.labels = Some([(netendpoint_crd::ipamclaim::LABEL_STATEFULSET.to_string(), sts.to_string())].into());
        claims.create(&PostParams::default(), &claim).await.unwrap();
        created.metadata.uid.unwrap()
    });
    let log = ctx.work.join("sticky.log");
    let conf = edit_conf(&ctx.netconf(pool, "10.122.0.0/24", json!({"sticky": {"waitForOld": "30s"}})), |v| {
        v["ipam"]["log"] = json!({"level": "info", "file": log});
    });
    let name = format!("{sts}-0");
    let add = |cid: &str, uid: &str| {
        let mut inv = ctx.add(&conf, cid);
        for (k, v) in &mut inv.env {
            if k == "CNI_ARGS" {
                *v = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name};K8S_POD_UID={uid}");
            }
        }
        inv
    };
    let uid = pod(ctx, &name, node, sts, &sts_uid);
    let (ok, _, out) = run_one(&add("sticky-0", &uid));
    let first = if ok { added_ip(&out) } else { None };
    let _ = std::fs::remove_file(&log);
    let mut lat = Vec::new();
    let mut fails = Vec::new();
    let mut moved = 0;
    let cpu0 = ctx.apiserver_cpu_s();
    let wall = Instant::now();
    for i in 1..=n {
        delete_pod(ctx, &name);
        let _ = run_one(&ctx.del(&conf, &format!("sticky-{}", i - 1)));
        let uid = pod(ctx, &name, node, sts, &sts_uid);
        let (ok, took, out) = run_one(&add(&format!("sticky-{i}"), &uid));
        if ok {
            lat.push(took);
            moved += usize::from(added_ip(&out) != first);
        } else {
            fails.push(out);
        }
    }
    let wall = wall.elapsed();
    let cpu = ctx.apiserver_cpu_s().zip(cpu0).map(|(b, a)| b - a);
    report_failures("sticky", 1, &fails);
    let s = Stats::of(lat, fails.len(), wall);
    let (requests, _) = logged_requests(&log, "ADD");
    let _ = writeln!(report, "## {n} recreations of a StatefulSet Pod with a sticky address\n");
    let _ = writeln!(
        report,
        "One StatefulSet Pod, bound to a node, recreated {n} times: the harness deletes the Pod, DELs its sandbox (no agent \
         finalizer, so its incarnation goes at once), creates the Pod again and ADDs its new sandbox, which asks the claim's hold \
         for the next incarnation and waits for the controller to check the Pod and create it. Latency is the recreation's ADD; \
         requests per recreation are the plugin's own tally for that ADD; API server CPU covers the whole cycle (Pod delete and \
         create included).\n"
    );
    let _ = writeln!(
        report,
        "| recreations | failed | address changed | p50 ms | p99 ms | requests per recreation ADD | API server CPU s per 1,000 recreations |"
    );
    let _ = writeln!(report, "|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        report,
        "| {} | {} | {moved} | {:.1} | {:.1} | {requests:.2} | {} |\n",
        s.n,
        s.failed,
        s.p50_ms,
        s.p99_ms,
        cpu.map_or("n/a".into(), |c| format!("{:.1}", c * 1000.0 / n as f64))
    );
    delete_pod(ctx, &name);
    let _ = run_one(&ctx.del(&conf, &format!("sticky-{n}")));
    ctx.rt.block_on(async {
        let api: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(ctx.client.clone(), "default");
        let _ = api.delete(sts, &DeleteParams::default()).await;
        let claims: Api<netendpoint_crd::ipamclaim::IPAMClaim> = Api::namespaced(ctx.client.clone(), "default");
        let _ = claims.delete(&format!("{sts}-0.{pool}"), &DeleteParams::default()).await;
    });
    ctx.delete_pool(pool);
}
