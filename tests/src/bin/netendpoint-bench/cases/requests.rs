//! API requests per ADD and per DEL, counted at the server, in an empty
//! pool, below 50 % and at 90 %.

use crate::prelude::*;

/// One row: `n` ADDs and then their `n` DELs at concurrency 1 into `pool`
/// (a /24 at 10.95.`octet`.0), with `fill` of its addresses leased first.
fn measure(ctx: &Ctx, report: &mut String, octet: u32, fill: f64, n: usize) {
    let pool = format!("bench-requests-{octet}");
    let subnet = format!("10.95.{octet}.0/24");
    let usable = 253u32;
    let leased = if fill > 0.0 {
        let mut rng = fastrand::Rng::with_seed(u64::from(octet));
        let mut hosts: Vec<u32> = (2..usable + 2).collect();
        rng.shuffle(&mut hosts);
        hosts.truncate((f64::from(usable) * fill) as usize);
        let ips: Vec<String> = hosts.iter().map(|h| host(0x0a5f_0000 + (octet << 8) + h)).collect();
        let leased = ctx.fill(&pool, &ips, "other-node", 48);
        ctx.wait_summary(&pool, leased, Duration::from_secs(60));
        leased
    } else {
        0
    };
    let conf = ctx.netconf(&pool, &subnet, json!({}));
    // The node check (once per node) and the node's first look at the pool, outside the count.
    let _ = run_one(&ctx.add(&conf, &format!("req-{octet}-warm")));
    let before = ctx.metrics();
    let cpu0 = ctx.apiserver_cpu_s();
    let (add, _) = run_many(n, 1, &|i| ctx.add(&conf, &format!("req-{octet}-{i}")));
    let cpu1 = ctx.apiserver_cpu_s();
    let mid = ctx.metrics();
    if fill == 0.0
        && let (Some(a), Some(b)) = (cpu0, cpu1)
    {
        ctx.shared.lock().unwrap().load.push(Load {
            during: "/24, empty, concurrency 1 (the requests case above)".into(),
            ops: n,
            unit: "ADDs",
            cpu_s: b - a,
        });
    }
    let (del, _) = run_many(n, 1, &|i| ctx.del(&conf, &format!("req-{octet}-{i}")));
    let after = ctx.metrics();
    let adds = ServerCounts::between(&before, &mid);
    let per = |v: f64, ops: usize| v / ops.max(1) as f64;
    let dels = after.since(&mid, REQUESTS, |l| l.networkendpoints() || l.plugin_request());
    let _ = writeln!(
        report,
        "| {:.0} % ({leased} of {usable}) | {} | {:.2} | {:.2} | {:.2} | {:.1} | {} | {:.2} |",
        100.0 * leased as f64 / f64::from(usable),
        add.n - add.failed,
        per(adds.requests, n),
        per(adds.conflicts, n),
        per(adds.lists, n),
        per(adds.scanned, n),
        del.n - del.failed,
        per(dels, n),
    );
    ctx.delete_pool(&pool);
}

pub(crate) fn bench_requests(ctx: &Ctx, report: &mut String) {
    let _ = writeln!(report, "## API requests per operation (counted at the server)\n");
    let _ = writeln!(
        report,
        "ADDs and then their DELs at concurrency 1 into a /24, empty or filled first at random addresses (direct creates), \
         after one ADD of the same node outside the count (the node's one check of its Node, and its first look at the pool). \
         The controller summarises the pool. Counted from `apiserver_request_total`: the requests an ADD makes (NetworkEndpoint \
         requests, reads of the summaries, the need signals), creates answered 409, NetworkEndpoint LISTs and the objects the \
         watch cache scanned for lists; and every request of a DEL.\n"
    );
    let _ = writeln!(
        report,
        "| fill | ADDs | requests per ADD | 409s per ADD | LISTs per ADD | objects scanned per ADD | DELs | requests per DEL |"
    );
    let _ = writeln!(report, "|---|---:|---:|---:|---:|---:|---:|---:|");
    let n = if ctx.quick { 20 } else { 50 };
    measure(ctx, report, 0, 0.0, n);
    measure(ctx, report, 1, 0.45, n);
    measure(ctx, report, 2, 0.90, n.min(20));
    let _ = writeln!(report);
}
