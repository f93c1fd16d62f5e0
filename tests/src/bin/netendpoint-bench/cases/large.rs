//! A large pool filled to 50 % and 90 %, and the cases run in it: 64 nodes
//! at once, a six-address pool full and churning beside it, churn, and
//! what a lease costs.

use crate::prelude::*;

pub(crate) fn bench_large_pool(ctx: &Ctx, report: &mut String) {
    let prefix = ctx.large_prefix;
    let net: u32 = 0x0a66_0000; // 10.102.0.0, aligned for any prefix down to /15
    let pool = format!("bench-large-{prefix}");
    let subnet = format!("{}/{prefix}", host(net));
    let usable = (1u32 << (32 - prefix)) - 3; // minus network, gateway, broadcast
    let mut rng = fastrand::Rng::with_seed(u64::from(prefix) + 100);
    let mut hosts: Vec<u32> = (2..usable + 2).collect();
    rng.shuffle(&mut hosts);
    let conf = ctx.netconf(&pool, &subnet, json!({}));
    let nodes = many_node_names(ctx, AT_ONCE_NODES);
    let pid = ctx.apiserver_pid();
    let rss_mb = |pid: Option<u32>| {
        pid.and_then(|p| proc_status(p, "VmRSS:")).map_or("n/a".to_string(), |k| format!("{:.0}", k as f64 / 1024.0))
    };
    let in_flight = 32;
    let adds = 40;
    let _ = writeln!(report, "## A large pool: /{prefix} filled to 50 % and 90 %\n");
    let _ = writeln!(
        report,
        "{usable} usable addresses. Leases at random addresses are created directly, {in_flight} in flight, first to 50 % then to 90 %, \
         shaped as the plugin's and spread over {AT_ONCE_NODES} registered node names. After each fill the harness waits until the \
         controller's pool summary counts the fill (the time is in the table), then {adds} ADDs run one at a time. Counted at the \
         server: the requests an ADD makes, 409s, NetworkEndpoint LISTs and the objects the watch cache scanned for lists, per \
         ADD. RSS is that of the test environment's one process, which holds both kube-apiserver and etcd (before the fill: {} MB); \
         the controller's CPU and RSS are its own process's.\n",
        rss_mb(pid)
    );
    let _ = writeln!(
        report,
        "| fill | leases | fill time s | creates/s | summary caught up s | ADDs | failed | p50 ms | p99 ms | API requests per ADD | 409s per ADD | LISTs per ADD | objects scanned per ADD | API server RSS MB | controller RSS MB | controller CPU s during fill and summary |"
    );
    let _ = writeln!(report, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut filled = 0;
    let mut leased = 0;
    let mut storage = Storage::before(ctx);
    for percent in [50u32, 90] {
        let target = (u64::from(usable) * u64::from(percent) / 100) as usize;
        let ips: Vec<String> = hosts[filled..target].iter().map(|h| host(net + h)).collect();
        let ctl_cpu0 = ctx.controller_pid().and_then(proc_cpu_s);
        let t = Instant::now();
        let created = ctx.fill_owned(&pool, &ips, &nodes, in_flight);
        let fill_s = t.elapsed().as_secs_f64();
        filled = target;
        leased += created;
        let caught_up = ctx.wait_summary(&pool, leased, Duration::from_secs(300));
        let ctl_cpu = ctx.controller_pid().and_then(proc_cpu_s).zip(ctl_cpu0).map(|(b, a)| b - a);
        if percent == 90 {
            storage.after(ctx, leased);
        }
        let before = ctx.metrics();
        let (s, fails) = run_many(adds, 1, &|i| ctx.add(&conf, &format!("large-{percent}-{i}")));
        let after = ctx.metrics();
        report_failures("large pool", percent as usize, &fails);
        leased += s.n - s.failed;
        ctx.shared.lock().unwrap().scale_points.push((
            if percent == 50 { SERIES_50 } else { SERIES_90 },
            prefix,
            s.p99_ms,
        ));
        let c = ServerCounts::between(&before, &after);
        let per_add = |v: f64| v / adds as f64;
        let _ = writeln!(
            report,
            "| {percent} % | {leased} | {fill_s:.0} | {:.0} | {} | {} | {} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {:.1} | {} | {} | {} |",
            created as f64 / fill_s,
            caught_up.map_or("not within 300".into(), |d| format!("{:.1}", d.as_secs_f64())),
            s.n,
            s.failed,
            s.p50_ms,
            s.p99_ms,
            per_add(c.requests),
            per_add(c.conflicts),
            per_add(c.lists),
            per_add(c.scanned),
            rss_mb(pid),
            rss_mb(ctx.controller_pid()),
            ctl_cpu.map_or("n/a".into(), |c| format!("{c:.1}")),
        );
    }
    let _ = writeln!(report);

    let at_once = ctx.timed("large, of which 64 nodes at once", || {
        bench_at_once_large(ctx, report, &LargePool { pool: &pool, subnet: &subnet, usable, leased }, &nodes)
    });
    leased += at_once;
    ctx.timed("large, of which a full six-address pool beside it", || {
        crate::cases::tiny::bench_tiny_beside(ctx, report, leased);
    });
    let fill = format!("{:.1} %", 100.0 * leased as f64 / f64::from(usable));
    ctx.timed("large, of which churn", || {
        let cycles = if ctx.large_trial() { 500 } else { 2000 };
        let cap = Duration::from_secs(CHURN_CAP_S);
        let churners = &nodes[..CHURN_NODES];
        let confs: Vec<Vec<u8>> = churners.iter().map(|n| ctx.node_conf(&pool, &subnet, n, "large-nodes")).collect();
        let r = churn(ctx, churners, &confs, cycles, Some(cap));
        report_churn(ctx, report, &format!("/{prefix}"), &fill, &r);
    });
    ctx.timed("large, of which the controller at this size", || {
        let pid = ctx.controller_pid();
        let cpu0 = pid.and_then(proc_cpu_s);
        std::thread::sleep(Duration::from_secs(60));
        let idle = pid.and_then(proc_cpu_s).zip(cpu0).map(|(b, a)| b - a);
        let _ = writeln!(
            report,
            "The controller at {leased} leases of this pool (and the others of the run): RSS {} MB (peak {} MB), CPU {} s in an \
             idle minute.\n",
            rss_mb(pid),
            pid.and_then(|p| proc_status(p, "VmHWM:")).map_or("n/a".into(), |k| format!("{:.0}", k as f64 / 1024.0)),
            idle.map_or("n/a".into(), |c| format!("{c:.2}"))
        );
    });
    ctx.timed("large, of which lease sizes", || {
        let conf = ctx.node_conf(&pool, &subnet, &nodes[0], "large-nodes");
        let lean = measure_lean(ctx, &format!("/{prefix} at {fill}"), &pool, &conf, storage);
        ctx.shared.lock().unwrap().lean = Some(lean);
    });

    let t = Instant::now();
    ctx.delete_pool(&pool);
    let _ = writeln!(
        report,
        "Deleting the /{prefix}'s {leased} leases (deletecollection, pages of 5,000) took {:.0} s.\n",
        t.elapsed().as_secs_f64()
    );
}
