//! The watch events a release sends to agents: 64 node agents, each
//! watching its own node's leases, as the watcher-example README asks.

use crate::prelude::*;

const AGENTS: usize = 64;
const FIRST_PORT: u16 = 19500;

/// NetworkEndpoint watch events the API server has sent so far, to every watcher.
fn events_sent(ctx: &Ctx) -> f64 {
    ctx.metrics().sum("apiserver_watch_events_total", |l| l.networkendpoints())
}

pub(crate) fn bench_fanout(ctx: &Ctx, report: &mut String) {
    let pool = "bench-fanout";
    let fin = "bench.netendpoint.dev/fanout-agent";
    let nodes: Vec<String> = (0..AGENTS).map(|i| format!("bench-fan-{i}")).collect();
    ctx.ensure_nodes(&nodes);
    let mut agents: Vec<std::process::Child> =
        nodes.iter().enumerate().map(|(i, node)| start_agent(ctx, node, Some(fin), FIRST_PORT + i as u16)).collect();
    let cycles = if ctx.quick { 32 } else { 128 };
    let confs: Vec<Vec<u8>> = nodes
        .iter()
        .map(|node| {
            edit_conf(&ctx.node_conf(pool, "10.123.0.0/24", node, "fanout"), |v| v["ipam"]["finalizers"] = json!([fin]))
        })
        .collect();
    // Let every agent finish its initial list and settle.
    std::thread::sleep(Duration::from_secs(2));
    let before = events_sent(ctx);
    let t = Instant::now();
    let mut failed = 0;
    for i in 0..cycles {
        let conf = &confs[i % AGENTS];
        let cid = format!("fan-{i}");
        let ok = run_one(&ctx.add(conf, &cid)).0 && run_one(&ctx.del(conf, &cid)).0;
        failed += usize::from(!ok);
    }
    // Every release ends once its node's agent removed its finalizer.
    let api: Api<NetworkEndpoint> = Api::all(ctx.client.clone());
    let lp = ListParams::default().labels(&format!("{LABEL_POOL}={}", label_value(pool)));
    while t.elapsed() < Duration::from_secs(120) {
        if ctx.rt.block_on(api.list_metadata(&lp)).is_ok_and(|l| l.items.is_empty()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let released = t.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    let sent = events_sent(ctx) - before;
    for a in &mut agents {
        let _ = a.kill();
        let _ = a.wait();
    }
    let per = sent / cycles.max(1) as f64;
    let _ = writeln!(report, "## Watch events per release with {AGENTS} node agents\n");
    let _ = writeln!(
        report,
        "{AGENTS} watcher-example agents run, one per registered node name, each watching only its own node's leases (field \
         selector `spec.node`, label selector `netendpoint.dev/role!=hold`: watcher-example/README.md) and holding its finalizer. \
         {cycles} cycles, round-robin over the nodes, each an ADD and the DEL of the same sandbox; every release ends when that \
         node's agent has removed its rule and its finalizer ({:.1} s for all, {failed} cycles failed). From \
         `apiserver_watch_events_total{{resource=\"networkendpoints\"}}`, the events the API server sent to every NetworkEndpoint \
         watcher: the one agent of the lease's node, and the cluster-wide watches of the controller that runs beside the \
         benchmark. The other {} agents receive none: the fan-out of a release is O(1) in the number of nodes.\n",
        released.as_secs_f64(),
        AGENTS - 1
    );
    let _ = writeln!(report, "| agents | cycles (ADD, DEL, release) | watch events sent | per cycle |");
    let _ = writeln!(report, "|---:|---:|---:|---:|");
    let _ = writeln!(report, "| {AGENTS} | {cycles} | {sent:.0} | {per:.1} |\n");
    ctx.delete_pool(pool);
}
