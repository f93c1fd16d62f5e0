//! netendpoint-controller syncing 10,000 leases: time, CPU and memory.

use crate::prelude::*;

/// netendpoint-controller (release build) started against 10,000 leases of
/// one pool (1 % of them releasing, held by a finalizer), its ranges in a
/// ConfigMap: time to sync (lists done, the pool figures right on
/// /metrics), RSS after the sync and after a minute idle, and CPU for the
/// sync and per idle minute.
pub(crate) fn bench_controller(ctx: &Ctx, report: &mut String) {
    let n: u32 = if ctx.quick { 1_000 } else { 10_000 };
    let releasing = n / 100;
    let pool = "bench-ctl";
    let node = "bench-ctl-node";
    let fin = "bench.example/agent";
    ctx.ensure_nodes(&[node.to_string()]);
    let ips: Vec<String> = (0..n).map(|i| host(0x0a70_0000 + i + 2)).collect();
    let fill_start = Instant::now();
    let created = ctx.fill(pool, &ips, node, 48);
    let fill_s = fill_start.elapsed().as_secs_f64();
    ctx.rt.block_on(async {
        use kube::api::{Patch, PatchParams};
        let api: Api<NetworkEndpoint> = Api::all(ctx.client.clone());
        for ip in &ips[..releasing as usize] {
            let name = endpoint_name(pool, ip.parse().unwrap());
            let hold = json!({"metadata": {"finalizers": [fin]}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&hold)).await.unwrap();
            api.delete(&name, &DeleteParams::default()).await.unwrap();
        }
    });
    // The pool's ranges, where the controller reads them: a ConfigMap of network configs.
    let cm_name = "bench-ctl-net-conf";
    let conf = String::from_utf8(ctx.netconf(pool, "10.112.0.0/16", json!({}))).unwrap();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(ctx.client.clone(), "default");
    let cm = k8s_openapi::api::core::v1::ConfigMap {
        metadata: ObjectMeta { name: Some(cm_name.into()), ..Default::default() },
        data: Some([("10-bench.conf".to_string(), conf)].into()),
        ..Default::default()
    };
    ctx.rt.block_on(cms.create(&PostParams::default(), &cm)).unwrap();

    let port = 19466;
    let start = Instant::now();
    let mut ctl = Command::new(ctx.bin.join("netendpoint-controller"))
        .arg("--kubeconfig")
        .arg(&ctx.kubeconfig)
        .args(["--identity", "bench-ctl", "--lease-name", "bench-ctl", "--lease-namespace", "default"])
        .args(["--net-conf", &format!("default/{cm_name}"), "--pod-gone-grace", "off"])
        .args(["--selector", &format!("{LABEL_POOL}={pool}"), "--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = ctl.id();
    let live = created as u32 - releasing;
    let series = |name: &str| format!("netendpoint_{name}{{pool=\"{pool}\"}}");
    let mut synced = None;
    while start.elapsed() < Duration::from_secs(180) {
        let m = http_get(port, "/metrics");
        let value = |name: &str| {
            m.lines().find_map(|l| l.strip_prefix(&series(name))).and_then(|v| v.trim().parse::<f64>().ok())
        };
        if value("pool_in_use") == Some(f64::from(live))
            && value("pool_releasing") == Some(f64::from(releasing))
            && value("pool_capacity").is_some()
        {
            synced = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let cpu_sync = proc_cpu_s(pid);
    let rss_sync = proc_status(pid, "VmRSS:");
    std::thread::sleep(Duration::from_secs(60));
    let cpu_idle = proc_cpu_s(pid).zip(cpu_sync).map(|(a, b)| a - b);
    let rss_idle = proc_status(pid, "VmRSS:");
    let hwm = proc_status(pid, "VmHWM:");
    let _ = ctl.kill();
    let _ = ctl.wait();
    let mb = |k: Option<u64>| k.map_or("n/a".into(), |k| format!("{:.1} MB", k as f64 / 1024.0));
    let _ = writeln!(report, "## netendpoint-controller at {n} leases\n");
    let _ = writeln!(
        report,
        "{created} leases of one pool (a /16, its ranges in a ConfigMap the controller watches) created directly, 48 in flight, in \
         {fill_s:.0} s, {releasing} of them then releasing (held by a finalizer). The release build of the controller then starts \
         (metadata-only watches of the leases, the Nodes and the `IPNeeded` Events, the ConfigMap; `--pod-gone-grace off`, so no Pod \
         watch) and is timed until its `/metrics` shows the pool's figures; it also leads (leader Lease) and writes the pool's \
         `NetworkEndpointPool` status. CPU is user + system time from `/proc/PID/stat`, RSS from `/proc/PID/status`.\n"
    );
    let _ = writeln!(report, "| measure | value |");
    let _ = writeln!(report, "|---|---:|");
    let _ = writeln!(
        report,
        "| start to pool figures right on /metrics (sync) | {} |",
        synced.map_or("not reached".into(), |d| format!("{:.2} s", d.as_secs_f64()))
    );
    let _ = writeln!(report, "| CPU for the sync | {} |", cpu_sync.map_or("n/a".into(), |c| format!("{c:.2} s")));
    let _ = writeln!(report, "| RSS after the sync | {} |", mb(rss_sync));
    let _ = writeln!(report, "| RSS after 60 s idle (peak so far) | {} ({}) |", mb(rss_idle), mb(hwm));
    let _ = writeln!(report, "| CPU per idle minute | {} |", cpu_idle.map_or("n/a".into(), |c| format!("{c:.2} s")));
    let _ = writeln!(report);
    ctx.rt.block_on(async {
        let api: Api<NetworkEndpoint> = Api::all(ctx.client.clone());
        for ip in &ips[..releasing as usize] {
            let name = endpoint_name(pool, ip.parse().unwrap());
            let drop = json!({"metadata": {"finalizers": null}});
            let _ = api.patch(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&drop)).await;
        }
        let _ = cms.delete(cm_name, &DeleteParams::default()).await;
    });
    ctx.delete_pool(pool);
}
