//! 64 nodes ADDing at once: into a /24 kept 90 % full, and into the large pool at 90 %.

use crate::prelude::*;

/// One run of many nodes ADDing at once into a pool at 90 %, with its figures counted at the server.
#[derive(Clone)]
pub(crate) struct AtOnce {
    pub(crate) pool: String,
    pub(crate) fill: String,
    pub(crate) nodes: usize,
    pub(crate) concurrency: usize,
    pub(crate) stats: Stats,
    pub(crate) server: ServerCounts,
    pub(crate) cpu_s: Option<f64>,
}

impl AtOnce {
    pub(crate) fn header(report: &mut String) {
        let _ = writeln!(
            report,
            "| pool | fill at ADD start | nodes | concurrency | ADDs | failed | p50 ms | p99 ms | ADDs/s | API requests per ADD | 409s per ADD | LISTs per ADD | objects scanned per ADD | response bytes per ADD | API server CPU s per 1,000 ADDs |"
        );
        let _ = writeln!(report, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    }

    pub(crate) fn row(&self, report: &mut String) {
        let n = self.stats.n.max(1) as f64;
        let c = &self.server;
        let _ = writeln!(
            report,
            "| {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {:.1} | {:.0} | {} |",
            self.pool,
            self.fill,
            self.nodes,
            self.concurrency,
            self.stats.n,
            self.stats.failed,
            self.stats.p50_ms,
            self.stats.p99_ms,
            self.stats.per_sec,
            c.requests / n,
            c.conflicts / n,
            c.lists / n,
            c.scanned / n,
            c.bytes / n,
            self.cpu_s.map_or("n/a".into(), |s| format!("{:.1}", s * 1000.0 / n)),
        );
    }
}

/// What [`adds_at_once`] runs: `n` ADDs, `concurrency` at a time, their
/// containers named `<tag>-<i>`, their leases deleted at once with `recycle`.
#[derive(Clone, Copy)]
pub(crate) struct Burst<'a> {
    pub(crate) n: usize,
    pub(crate) concurrency: usize,
    pub(crate) tag: &'a str,
    pub(crate) recycle: bool,
}

/// `n` ADDs spread round-robin over `confs` (one per node), `concurrency`
/// at a time, counted at the server. With `recycle`, the harness deletes
/// each ADD's lease (one DELETE by name, which [`ServerCounts`] leaves out)
/// as soon as the ADD returns. Returns the figures and the mean number of
/// such leases not yet deleted when an ADD started.
pub(crate) fn adds_at_once(
    ctx: &Ctx,
    pool: &str,
    confs: &[Vec<u8>],
    burst: Burst<'_>,
) -> (Stats, ServerCounts, Option<f64>, f64) {
    let Burst { n, concurrency, tag, recycle } = burst;
    let held = AtomicUsize::new(0);
    let held_sum = AtomicUsize::new(0);
    let make = |i: usize| {
        held_sum.fetch_add(held.load(Ordering::SeqCst), Ordering::SeqCst);
        ctx.add(&confs[i % confs.len()], &format!("{tag}-{i}"))
    };
    let then = |_: usize, out: &str| {
        if !recycle {
            return;
        }
        held.fetch_add(1, Ordering::SeqCst);
        match added_ip(out) {
            Some(ip) => ctx.delete_lease(&endpoint_name(pool, ip)),
            None => eprintln!("{tag}: no IP in the ADD result {out:?}"),
        }
        held.fetch_sub(1, Ordering::SeqCst);
    };
    let before = ctx.metrics();
    let cpu0 = ctx.apiserver_cpu_s();
    let (s, fails) = run_many_then(n, concurrency, &make, &then);
    let cpu1 = ctx.apiserver_cpu_s();
    let after = ctx.metrics();
    if std::env::var_os("BENCH_BREAKDOWN").is_some() {
        crate::server::print_breakdown(tag, &before, &after, n);
    }
    report_failures(tag, concurrency, &fails);
    let cpu = cpu0.zip(cpu1).map(|(a, b)| b - a);
    (s, ServerCounts::between(&before, &after), cpu, held_sum.load(Ordering::SeqCst) as f64 / n.max(1) as f64)
}

/// The fill the /24 case keeps, in percent: 90, or `BENCH_FULL24_FILL`
/// (50 to 95), to tell the ADDs in flight from the free addresses as the
/// cause of its refusals. Any other value stops the run rather than measure
/// a fill nobody asked for.
fn full24_fill() -> u32 {
    let Ok(v) = std::env::var("BENCH_FULL24_FILL") else { return 90 };
    v.parse()
        .ok()
        .filter(|f| (50..=95).contains(f))
        .unwrap_or_else(|| panic!("BENCH_FULL24_FILL={v:?}: a percent from 50 to 95"))
}

/// The concurrencies of the /24 case: 64 nodes' ADDs, this many in flight
/// at a time, the last (one per node) being the reference row.
const FULL24_CONCURRENCY: [usize; 4] = [8, 16, 32, AT_ONCE_NODES];

pub(crate) fn bench_full_24(ctx: &Ctx, report: &mut String) {
    let pool = "bench-full24";
    let net: u32 = 0x0a59_0000; // 10.89.0.0/24
    let subnet = "10.89.0.0/24";
    let usable: u32 = 253;
    let n = if ctx.quick { 128 } else { 640 };
    let nodes = many_node_names(ctx, AT_ONCE_NODES);
    let fill = full24_fill();
    let target = ((usable * fill + 50) / 100) as usize;
    let mut rng = fastrand::Rng::with_seed(24);
    let mut hosts: Vec<u32> = (2..usable + 2).collect();
    rng.shuffle(&mut hosts);
    let ips: Vec<String> = hosts[..target].iter().map(|h| host(net + h)).collect();
    let leased = ctx.fill_owned(pool, &ips, &nodes, 48);
    let summary = ctx.wait_summary(pool, leased, Duration::from_secs(60));
    let confs: Vec<Vec<u8>> = nodes.iter().map(|node| ctx.node_conf(pool, subnet, node, "full24")).collect();
    let rows: Vec<AtOnce> = FULL24_CONCURRENCY
        .iter()
        .map(|&concurrency| {
            // Every run deletes what it leased: each starts from the same fill.
            let tag = format!("full24-c{concurrency}");
            let (stats, server, cpu_s, held) =
                adds_at_once(ctx, pool, &confs, Burst { n, concurrency, tag: &tag, recycle: true });
            AtOnce {
                pool: "/24".into(),
                fill: format!("{:.1} % (mean)", 100.0 * (leased as f64 + held) / f64::from(usable)),
                nodes: nodes.len(),
                concurrency,
                stats,
                server,
                cpu_s,
            }
        })
        .collect();
    let _ = writeln!(report, "## 64 nodes ADDing at once into a /24 kept {fill} % full\n");
    let _ = writeln!(
        report,
        "The reference for the large-pool case near the end (not run with `--quick`): {} registered node names, each with its own `dataDir`, run {n} ADDs \
         round-robin over the nodes, one process per ADD, at each concurrency below in turn, the last (one ADD in flight per node) being the reference; 64 \
         processes at once do run on 2 cores, slowly, as in the latency case. \
         A /24 at {fill} % has only {} free addresses, so the fill is kept there: {leased} of {usable} addresses are leased first \
         (direct creates shaped as the plugin's, spread over the same nodes), and the harness deletes each ADD's lease (one DELETE \
         by name, left out of the request counts) as soon as the ADD returns, so each run starts from the same fill. The fill column is the mean, over the ADDs, of the \
         leases present when the ADD started, over {usable}; leases of ADDs still running are not in it, so some ADDs find the \
         pool fuller and wait for one of those deletes. The controller runs and summarises the pool (its summary counted the fill \
         {summary}). An ADD creates at its node's next candidate; refused, it reads that address's shard summary by name and \
         creates at what it shows free; a full shard sends it to the pool summary, also by name. No ADD lists. Counted at the \
         server: the requests an ADD makes (NetworkEndpoint requests other than the harness's DELETEs, and reads of the \
         summaries), creates answered 409, NetworkEndpoint LISTs and the objects the watch cache scanned for lists \
         (`apiserver_cache_list_fetched_objects_total`) per ADD, and response bytes (`apiserver_response_sizes_sum`, which the \
         server records for GET and LIST only). API server CPU is the kube-testenv process (kube-apiserver and etcd in one), \
         from /proc, here including the harness's DELETEs and the controller's summary writes.\n",
        nodes.len(),
        usable as usize - leased,
        summary = summary.map_or("not within 60 s".into(), |d| format!("in {:.1} s", d.as_secs_f64()))
    );
    AtOnce::header(report);
    for row in &rows {
        row.row(report);
    }
    let _ = writeln!(
        report,
        "\nRequests and 409s per ADD grow with the ADDs in flight on the 2 cores, which lengthen every ADD and so the window \
         between reading a summary and creating: see docs/design.md, \"Near full, many nodes at once\".\n"
    );
    let Some(row) = rows.into_iter().last() else { return };
    let concurrency = row.concurrency;
    let mut shared = ctx.shared.lock().unwrap();
    shared.scale_points.push((SERIES_AT_ONCE, 24, row.stats.p99_ms));
    if let Some(cpu_s) = row.cpu_s {
        shared.load.push(Load {
            during: format!(
                "/24 kept {fill} % full, {} nodes at once, concurrency {concurrency} (and the harness's DELETEs)",
                nodes.len()
            ),
            ops: row.stats.n,
            unit: "ADDs",
            cpu_s,
        });
    }
    shared.full24 = Some(row);
    drop(shared);
    ctx.delete_pool(pool);
}

/// The large pool as filled: its name, its subnet, how many addresses it
/// has and how many are leased.
#[derive(Clone, Copy)]
pub(crate) struct LargePool<'a> {
    pub(crate) pool: &'a str,
    pub(crate) subnet: &'a str,
    pub(crate) usable: u32,
    pub(crate) leased: usize,
}

/// 64 nodes ADD at once into the large pool at 90 %. Returns the ADDs that succeeded.
pub(crate) fn bench_at_once_large(ctx: &Ctx, report: &mut String, large: &LargePool<'_>, nodes: &[String]) -> usize {
    let LargePool { pool, subnet, usable, leased } = *large;
    let prefix = ctx.large_prefix;
    let concurrency = AT_ONCE_NODES;
    let n = if ctx.large_trial() { 256 } else { 640 };
    let confs: Vec<Vec<u8>> = nodes.iter().map(|node| ctx.node_conf(pool, subnet, node, "large-nodes")).collect();
    let (stats, server, cpu_s, _) =
        adds_at_once(ctx, pool, &confs, Burst { n, concurrency, tag: "at-once", recycle: false });
    let pct = |l: usize| 100.0 * l as f64 / f64::from(usable);
    let row = AtOnce {
        pool: format!("/{prefix}"),
        fill: format!("{:.1} % to {:.1} %", pct(leased), pct(leased + stats.n - stats.failed)),
        nodes: nodes.len(),
        concurrency,
        stats,
        server,
        cpu_s,
    };
    let _ = writeln!(report, "## 64 nodes ADDing at once into the /{prefix} at 90 %\n");
    let _ = writeln!(
        report,
        "After the fill to 90 % above, the same {} node names as in the /24 case (each with its own `dataDir`, so each starts at its own \
         hashed point) run {n} ADDs at concurrency {concurrency}, round-robin over the nodes, one process per ADD; nothing is deleted, so the fill rises a little. \
         Counted as for the /24, whose row is repeated here. The ADDs read the summaries by name, as in the /24: the cost of an ADD \
         does not depend on how many leases the pool or the cluster holds.\n",
        nodes.len(),
    );
    AtOnce::header(report);
    let shared = ctx.shared.lock().unwrap();
    let base = shared.full24.clone();
    drop(shared);
    if let Some(b) = &base {
        b.row(report);
    }
    row.row(report);
    if let Some(b) = &base {
        let _ = writeln!(
            report,
            "\np99 in the /{prefix} ÷ p99 in the /24, same concurrency: {:.2}×. p50: {:.2}×.",
            row.stats.p99_ms / b.stats.p99_ms,
            row.stats.p50_ms / b.stats.p50_ms
        );
    }
    let _ = writeln!(report);
    let mut shared = ctx.shared.lock().unwrap();
    shared.scale_points.push((SERIES_AT_ONCE, prefix, row.stats.p99_ms));
    if let Some(cpu_s) = row.cpu_s {
        shared.load.push(Load {
            during: format!("/{prefix} at 90 %, {} nodes at once, concurrency {concurrency}", nodes.len()),
            ops: row.stats.n,
            unit: "ADDs",
            cpu_s,
        });
    }
    row.stats.n - row.stats.failed
}
