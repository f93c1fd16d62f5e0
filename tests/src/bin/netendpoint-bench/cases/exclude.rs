//! ADD in a /64 with a large exclusion.

use crate::prelude::*;

pub(crate) fn bench_exclusion(ctx: &Ctx, report: &mut String) {
    let pool = "bench-exclude";
    let (subnet, exclude) = ("fd00:64::/64", "fd00:64::/100");
    let conf = ctx.netconf(pool, subnet, json!({"exclude": [exclude]}));
    let n = if ctx.quick { 10 } else { 40 };
    let mut lat = Vec::new();
    let mut fails = Vec::new();
    for i in 0..n {
        let (ok, took, out) = run_one(&ctx.add(&conf, &format!("excl-{i}")));
        if ok {
            lat.push(took);
        } else {
            fails.push(out);
        }
    }
    report_failures("exclusion", 1, &fails);
    let first_ms = lat.first().map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0);
    let s = Stats::of(lat, fails.len(), Duration::from_secs(1));
    let _ = writeln!(report, "## ADD in a /64 with a /100 exclusion\n");
    let _ = writeln!(
        report,
        "Subnet `{subnet}` with `exclude: [\"{exclude}\"]`, so the first 2^28 addresses are excluded and the first candidate lies beyond them. \
         {n} ADDs at concurrency 1 into the empty pool; the first has no cursor yet (and checks the node once).\n"
    );
    let _ = writeln!(report, "| ADDs | failed | first ADD ms | p50 ms | p99 ms |");
    let _ = writeln!(report, "|---:|---:|---:|---:|---:|");
    let _ = writeln!(report, "| {} | {} | {first_ms:.1} | {:.1} | {:.1} |\n", s.n, s.failed, s.p50_ms, s.p99_ms);
    ctx.delete_pool(pool);
}
