//! Many nodes ADDing into one empty pool.

use crate::prelude::*;

pub(crate) fn bench_many_nodes(ctx: &Ctx, report: &mut String) {
    let total = if ctx.quick { 200 } else { 2000 };
    let concurrency = 16;
    let _ = writeln!(report, "## Many nodes ADDing into one empty pool\n");
    let _ = writeln!(
        report,
        "{total} ADDs at concurrency {concurrency} into an empty /16, spread round-robin over registered node names, each node with its \
         own `dataDir` (so its own round-robin cursor, from a point spread over the set by a hash of its name), as real nodes have. \
         From `apiserver_request_total{{resource=\"networkendpoints\"}}`: creates, creates answered 409 (the address was taken \
         by another node first) and NetworkEndpoint LISTs per ADD (none: an ADD reads by name only).\n"
    );
    let _ = writeln!(
        report,
        "| nodes | ADDs | failed | p50 ms | p99 ms | ADDs/s | creates per ADD | creates answered 409 per ADD | LISTs per ADD |"
    );
    let _ = writeln!(report, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (k, nodes) in [8usize, 64].into_iter().enumerate() {
        let pool = format!("bench-nodes-{nodes}");
        let subnet = format!("10.{}.0.0/16", 100 + k);
        let names: Vec<String> = (0..nodes).map(|i| format!("bench-n{nodes}-{i}")).collect();
        ctx.ensure_nodes(&names);
        let confs: Vec<Vec<u8>> = names
            .iter()
            .map(|node| {
                let data = ctx.work.join(format!("nodes-{nodes}")).join(node);
                ctx.netconf(&pool, &subnet, json!({"nodeName": node, "dataDir": data}))
            })
            .collect();
        let before = ctx.metrics();
        let (s, fails) = run_many(total, concurrency, &|i| ctx.add(&confs[i % nodes], &format!("n{nodes}-{i}")));
        let after = ctx.metrics();
        report_failures("many nodes", nodes, &fails);
        let ne = |verb: &'static str, code: Option<&'static str>| {
            after.since(&before, REQUESTS, |l| {
                l.networkendpoints() && l.get("verb") == verb && code.is_none_or(|c| l.get("code") == c)
            }) / s.n.max(1) as f64
        };
        let _ = writeln!(
            report,
            "| {nodes} | {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} |",
            s.n,
            s.failed,
            s.p50_ms,
            s.p99_ms,
            s.per_sec,
            ne("POST", None),
            ne("POST", Some("409")),
            ne("LIST", None)
        );
        ctx.delete_pool(&pool);
    }
    let _ = writeln!(report);
}
