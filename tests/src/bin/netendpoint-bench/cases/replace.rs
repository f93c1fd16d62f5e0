//! Replacement ADDs that come before the old pod's DEL, in a full pool.

use crate::prelude::*;

pub(crate) fn bench_replacement_before_del(ctx: &Ctx, report: &mut String) {
    let pool = "bench-replace";
    let conf = edit_conf(&ctx.netconf(pool, "10.98.0.0/29", json!({"waitForRelease": "10s"})), |v| {
        v["ipam"]["ranges"] = json!([[{"subnet": "10.98.0.0/29", "rangeStart": "10.98.0.2", "rangeEnd": "10.98.0.5"}]]);
    });
    for i in 0..4 {
        let _ = run_one(&ctx.add(&conf, &format!("repl-{i}")));
    }
    let rounds = if ctx.quick { 10 } else { 30 };
    let mut rng = fastrand::Rng::with_seed(2);
    let (mut lat, mut after_del) = (Vec::new(), Vec::new());
    let mut fails = Vec::new();
    for r in 0..rounds {
        let (old, new) = (format!("repl-{r}"), format!("repl-{}", r + 4));
        let delay = Duration::from_millis(rng.u64(0..=2000));
        let replacement = ctx.pod_add(&conf, &new);
        let (add, del_started) = std::thread::scope(|s| {
            let t0 = Instant::now();
            let add = s.spawn(|| run_one(&replacement));
            std::thread::sleep(delay);
            let del_started = t0.elapsed();
            let _ = run_one(&ctx.del(&conf, &old));
            (add.join().unwrap(), del_started)
        });
        match add {
            (true, took, _) => {
                lat.push(took);
                after_del.push(took.saturating_sub(del_started));
            }
            (false, _, out) => {
                fails.push(out);
                // Keep the pool full for the next round: the freed address is taken now.
                let _ = run_one(&ctx.add(&conf, &new));
            }
        }
    }
    report_failures("replacement", 1, &fails);
    let p50_after_del = pct_ms(&mut after_del, 0.50);
    let s = Stats::of(lat, fails.len(), Duration::from_secs(1));
    let _ = writeln!(report, "## Replacement ADD before the old pod's DEL (full pool)\n");
    let _ = writeln!(
        report,
        "As under kubelet, where a replacement pod's ADD often comes before the old pod's DEL. A pool of 4 IPs, all leased, \
         no finalizers (so the DEL frees the address at once), `waitForRelease: 10s`. Each round starts the replacement's ADD (of a real \
         Pending Pod, so that its queue entry is believed), then after a random 0–2 s delay runs the old pod's DEL; the ADD must wait for that release to begin and finish. \
         Latency is measured from the start of the replacement's ADD.\n"
    );
    let _ = writeln!(report, "| rounds | succeeded | success % | p50 ms | p99 ms | p50 ms after the DEL started |");
    let _ = writeln!(report, "|---:|---:|---:|---:|---:|---:|");
    let ok = s.n - s.failed;
    let _ = writeln!(
        report,
        "| {} | {ok} | {:.0} | {:.1} | {:.1} | {p50_after_del:.1} |\n",
        s.n,
        100.0 * ok as f64 / s.n.max(1) as f64,
        s.p50_ms,
        s.p99_ms
    );
    ctx.delete_pool(pool);
}
