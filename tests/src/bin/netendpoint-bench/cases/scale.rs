//! ADD latency by pool size, at 50 % fill.

use crate::prelude::*;

pub(crate) fn bench_pool_scale(ctx: &Ctx, report: &mut String) {
    let sizes: &[(u8, u32)] = if ctx.quick {
        &[(24, 0x0a60_0000), (20, 0x0a61_0000)]
    } else {
        &[(24, 0x0a60_0000), (20, 0x0a61_0000), (16, 0x0a62_0000)]
    };
    let _ = writeln!(report, "## ADD latency by pool size (pool 50% full, concurrency 1)\n");
    let _ = writeln!(
        report,
        "![ADD p99 by pool size and fill](docs/bench-scale.svg)\n\nThe plot shows the p99s of this table, of the large pool at 50 % and 90 % (one ADD at a time) and of 64 nodes ADDing at once into a /24 and the large pool at 90 % (sections below).\n"
    );
    let _ = writeln!(
        report,
        "Half of the usable addresses, chosen at random, are leased first by direct creates; once the controller's summary counts \
         them, 40 ADDs run one at a time. Counted at the server: the requests an ADD makes, 409s, and the objects the watch cache \
         scanned for lists, per ADD.\n"
    );
    let _ = writeln!(
        report,
        "| pool | leases | fill time s | summary caught up s | ADDs | p50 ms | p99 ms | API requests per ADD | 409s per ADD | objects scanned per ADD |"
    );
    let _ = writeln!(report, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut base = None;
    for &(prefix, net) in sizes {
        let pool = format!("bench-scale-{prefix}");
        let usable = (1u32 << (32 - prefix)) - 3; // minus network, gateway, broadcast
        let mut rng = fastrand::Rng::with_seed(u64::from(prefix));
        let mut hosts: Vec<u32> = (2..usable + 2).collect();
        rng.shuffle(&mut hosts);
        hosts.truncate(usable as usize / 2);
        let fill = Instant::now();
        let ips: Vec<String> = hosts.iter().map(|h| host(net + h)).collect();
        ctx.fill(&pool, &ips, "other-node", 48);
        let fill_s = fill.elapsed().as_secs_f64();
        let caught_up = ctx.wait_summary(&pool, hosts.len(), Duration::from_secs(120));
        let conf = ctx.netconf(&pool, &format!("{}/{prefix}", host(net)), json!({}));
        let before = ctx.metrics();
        let (s, fails) = run_many(40, 1, &|i| ctx.add(&conf, &format!("scale-{prefix}-{i}")));
        let c = ServerCounts::between(&before, &ctx.metrics());
        report_failures("scale", prefix as usize, &fails);
        ctx.shared.lock().unwrap().scale_points.push((SERIES_50, prefix, s.p99_ms));
        let ratio = base.map_or(String::new(), |b: f64| format!(" ({:.2}× the /24)", s.p50_ms / b));
        base.get_or_insert(s.p50_ms);
        let _ = writeln!(
            report,
            "| /{prefix} | {} | {fill_s:.0} | {} | {} | {:.1}{ratio} | {:.1} | {:.2} | {:.2} | {:.1} |",
            hosts.len(),
            caught_up.map_or("not within 120".into(), |d| format!("{:.1}", d.as_secs_f64())),
            s.n,
            s.p50_ms,
            s.p99_ms,
            c.requests / 40.0,
            c.conflicts / 40.0,
            c.scanned / 40.0,
        );
        ctx.delete_pool(&pool);
    }
    let _ = writeln!(report);
}
