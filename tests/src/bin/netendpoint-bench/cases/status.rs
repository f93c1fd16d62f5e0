//! What STATUS costs the API server.

use crate::prelude::*;

pub(crate) fn bench_status(ctx: &Ctx, report: &mut String) {
    let pool = "bench-status";
    // A full /24: every usable address leased.
    let ips: Vec<String> = (2..255).map(|h| host(0x0a63_0000 + h)).collect();
    let leased = ctx.fill(pool, &ips, "bench-node", 48);
    let base = ctx.netconf(pool, "10.99.0.0/24", json!({}));
    let conf_in = |data: PathBuf| {
        edit_conf(&base, |v| {
            v["cniVersion"] = json!("1.1.0");
            v["ipam"]["dataDir"] = json!(data);
        })
    };
    let status = |conf: Vec<u8>| Invocation {
        program: ctx.plugin(),
        args: vec![],
        env: vec![("CNI_COMMAND".into(), "STATUS".into()), ("CNI_PATH".into(), ctx.cni.display().to_string())],
        stdin: conf,
    };
    let n = if ctx.quick { 30 } else { 100 };
    struct Row {
        stats: Stats,
        wall_s: f64,
        requests: f64,
        lists: f64,
        bytes: f64,
    }
    let measure = |make: &(dyn Fn(usize) -> Invocation + Sync)| {
        let before = ctx.metrics();
        let wall = Instant::now();
        let (stats, fails) = run_many(n, 1, make);
        let wall_s = wall.elapsed().as_secs_f64();
        let after = ctx.metrics();
        report_failures("status", 1, &fails);
        Row {
            stats,
            wall_s,
            requests: after.since(&before, REQUESTS, |l| l.client_resource()),
            lists: after.since(&before, REQUESTS, |l| l.networkendpoints() && l.get("verb") == "LIST"),
            bytes: after.since(&before, RESPONSE_BYTES, |l| l.client_resource()),
        }
    };
    let burst_conf = conf_in(ctx.work.join("status-burst"));
    let burst = measure(&|_| status(burst_conf.clone()));
    let uncached = measure(&|i| status(conf_in(ctx.work.join("status-uncached").join(i.to_string()))));
    // For scale: what one metadata list of this pool would cost.
    let before = ctx.metrics();
    let api: Api<NetworkEndpoint> = Api::all(ctx.client.clone());
    let _ = ctx
        .rt
        .block_on(api.list_metadata(&ListParams::default().labels(&format!("{LABEL_POOL}={}", label_value(pool)))));
    let pool_list_bytes = ctx.metrics().since(&before, RESPONSE_BYTES, |l| l.networkendpoints());

    let _ = writeln!(report, "## STATUS cost at the API server (full pool)\n");
    let _ = writeln!(
        report,
        "{n} STATUS invocations at concurrency 1, each a separate plugin process, while the pool is full ({leased} of 253 addresses leased). \
         Counted at the server from `apiserver_request_total` and `apiserver_response_sizes_sum` over all resources (the API server's own \
         Lease heartbeats left out). STATUS reuses a success for 10 s per node (under `dataDir`): the burst shares one `dataDir`, so it is \
         mostly cached; with a fresh `dataDir` per call every STATUS asks the server, which is the cost of one uncached STATUS. \
         STATUS lists nothing: it reads the pool's `NetworkEndpointPool` by name (a 404 that names the pool is as good: the \
         resource is served), so its NetworkEndpoint LISTs are 0 (one metadata list of this pool would be {pool_list_bytes:.0} \
         bytes).\n"
    );
    let _ = writeln!(
        report,
        "| STATUS calls | failed | wall s | p50 ms | API requests per STATUS | NetworkEndpoint LISTs per STATUS | response bytes per STATUS |"
    );
    let _ = writeln!(report, "|---|---:|---:|---:|---:|---:|---:|");
    for (name, r) in [("burst, one `dataDir` (cached)", &burst), ("fresh `dataDir` per call (uncached)", &uncached)] {
        let per = |v: f64| v / r.stats.n.max(1) as f64;
        let _ = writeln!(
            report,
            "| {name}: {} | {} | {:.1} | {:.1} | {:.2} | {:.2} | {:.0} |",
            r.stats.n,
            r.stats.failed,
            r.wall_s,
            r.stats.p50_ms,
            per(r.requests),
            per(r.lists),
            per(r.bytes)
        );
    }
    let _ = writeln!(report);
    ctx.delete_pool(pool);
}
