//! Release-to-reuse latency in a full pool with watcher-example acknowledging.

use crate::prelude::*;

pub(crate) fn bench_release_to_reuse(ctx: &Ctx, report: &mut String) {
    let pool = "bench-reuse";
    let finalizer = "bench.netendpoint.dev/agent";
    let node = "bench-node";
    let mut agent = start_agent(ctx, node, Some(finalizer), 19464);
    // A full pool of 4 IPs: every replacement must wait for the release.
    let conf = ctx.netconf(pool, "10.96.0.0/29", json!({"finalizers": [finalizer]}));
    let conf = {
        let mut v: Value = serde_json::from_slice(&conf).unwrap();
        v["ipam"]["ranges"] = json!([[{"subnet": "10.96.0.0/29", "rangeStart": "10.96.0.2", "rangeEnd": "10.96.0.5"}]]);
        serde_json::to_vec(&v).unwrap()
    };
    for i in 0..4 {
        let _ = run_one(&ctx.add(&conf, &format!("reuse-{i}")));
    }
    // Measured as a pool the controller summarises and orders the queue of
    // (a pool without a summary is the `stopped` case's): right after the
    // API server started, its watches may take a second to settle.
    ctx.wait_summary(pool, 4, Duration::from_secs(10));
    let rounds = if ctx.quick { 8 } else { 40 };
    let mut lat = Vec::new();
    let mut failed = 0;
    let wall = Instant::now();
    for r in 0..rounds {
        let old = format!("reuse-{}", r % 4 + 4 * (r / 4));
        let new = format!("reuse-{}", r % 4 + 4 * (r / 4 + 1));
        let add = ctx.pod_add(&conf, &new);
        let t0 = Instant::now();
        let del =
            Invocation { program: ctx.plugin(), args: vec![], env: ctx.cni_env("DEL", &old), stdin: conf.clone() };
        let (ok_del, _, _) = run_one(&del);
        let (ok_add, _, _) = run_one(&add);
        if ok_del && ok_add {
            if std::env::var_os("BENCH_ROUNDS").is_some() {
                eprintln!("reuse round {r}: {new} {:?} ended {:?}", t0.elapsed(), std::time::SystemTime::now());
            }
            lat.push(t0.elapsed());
        } else {
            failed += 1;
        }
    }
    let s = Stats::of(lat, failed, wall.elapsed());
    let _ = agent.kill();
    let _ = agent.wait();
    let _ = writeln!(report, "## Release-to-reuse latency (full pool, watcher-example acknowledging)\n");
    let _ = writeln!(
        report,
        "A pool of 4 IPs, all leased with the agent's finalizer declared, and summarised by the controller before the first round. Each round: DEL one pod, then ADD its replacement (a real Pending Pod, so that its queue entry is believed), which must wait until watcher-example removed its rule and its finalizer. Measured from the start of DEL to the end of the replacement's ADD.\n"
    );
    let _ = writeln!(report, "| rounds | failed | p50 ms | p99 ms |");
    let _ = writeln!(report, "|---:|---:|---:|---:|");
    let _ = writeln!(report, "| {} | {} | {:.1} | {:.1} |\n", s.n, s.failed, s.p50_ms, s.p99_ms);
    ctx.delete_pool(pool);
}
