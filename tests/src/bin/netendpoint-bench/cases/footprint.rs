//! The plugin's start-up and memory, and watcher-example at 10,000 endpoints.

use crate::prelude::*;

pub(crate) fn bench_footprint(ctx: &Ctx, report: &mut String) {
    let _ = writeln!(report, "## Footprint\n");
    // VERSION start-up, against /bin/true as the process-spawn floor of this machine.
    let version = Invocation {
        program: ctx.plugin(),
        args: vec![],
        env: vec![("CNI_COMMAND".into(), "VERSION".into())],
        stdin: b"{\"cniVersion\":\"1.1.0\"}".to_vec(),
    };
    let truth = Invocation { program: "/bin/true".into(), args: vec![], env: vec![], stdin: vec![] };
    let (v, _) = run_many(300, 1, &|_| Invocation {
        program: version.program.clone(),
        args: vec![],
        env: version.env.clone(),
        stdin: version.stdin.clone(),
    });
    let (t, _) =
        run_many(300, 1, &|_| Invocation { program: truth.program.clone(), args: vec![], env: vec![], stdin: vec![] });
    let pool = "bench-rss";
    let conf = ctx.netconf(pool, "10.97.0.0/24", json!({}));
    let rss: Vec<u64> = (0..10).filter_map(|i| max_rss_kb(&ctx.add(&conf, &format!("rss-{i}")))).collect();
    ctx.delete_pool(pool);

    let _ = writeln!(report, "| measure | value |");
    let _ = writeln!(report, "|---|---:|");
    let _ = writeln!(report, "| plugin `VERSION`, p50 wall time (300 runs) | {:.2} ms |", v.p50_ms);
    let _ =
        writeln!(report, "| `/bin/true`, p50 wall time (process-spawn floor of this machine) | {:.2} ms |", t.p50_ms);
    let _ = writeln!(
        report,
        "| plugin max RSS during ADD (max of {}) | {:.1} MB |",
        rss.len(),
        rss.iter().max().copied().unwrap_or(0) as f64 / 1024.0
    );

    // watcher-example at 10,000 endpoints.
    let n: u32 = if ctx.quick { 1_000 } else { 10_000 };
    let node = "bench-watch-node";
    let wpool = "bench-watch";
    let ips: Vec<String> = (0..n).map(|i| host(0x0a80_0000 + i + 2)).collect();
    ctx.fill(wpool, &ips, node, 48);
    let start = Instant::now();
    let mut agent = start_agent(ctx, node, None, 19465);
    let pid = agent.id();
    let mut synced = None;
    while start.elapsed() < Duration::from_secs(180) {
        let m = http_get(19465, "/metrics");
        if metric(&m, "netendpoint_agent_rules").is_some_and(|r| r as u32 >= n) {
            synced = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let cpu_sync = proc_cpu_s(pid);
    std::thread::sleep(Duration::from_secs(10));
    let cpu_idle = proc_cpu_s(pid).zip(cpu_sync).map(|(a, b)| (a - b) / 10.0 * 100.0);
    let rss = proc_status(pid, "VmRSS:");
    let hwm = proc_status(pid, "VmHWM:");
    let _ = agent.kill();
    let _ = agent.wait();
    let _ = writeln!(
        report,
        "| watcher-example (in-memory table, no state file): time to list and install {n} rules | {} |",
        synced.map_or("not reached".into(), |d| format!("{:.2} s", d.as_secs_f64()))
    );
    let _ = writeln!(
        report,
        "| watcher-example: CPU time for that initial sync | {} |",
        cpu_sync.map_or("n/a".into(), |c| format!("{c:.2} s"))
    );
    let _ = writeln!(
        report,
        "| watcher-example: RSS at {n} endpoints (peak) | {} ({}) |",
        rss.map_or("n/a".into(), |k| format!("{:.1} MB", k as f64 / 1024.0)),
        hwm.map_or("n/a".into(), |k| format!("{:.1} MB", k as f64 / 1024.0))
    );
    let _ = writeln!(
        report,
        "| watcher-example: CPU while idle at {n} endpoints | {} |",
        cpu_idle.map_or("n/a".into(), |c| format!("{c:.1} % of a core"))
    );
    let _ = writeln!(report);
    ctx.delete_pool(wpool);
}
