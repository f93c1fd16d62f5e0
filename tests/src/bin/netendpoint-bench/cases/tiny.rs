//! A six-address pool, full, with churn, while the large pool's leases of
//! another pool fill the server: the cost of its ADDs must not depend on them.

use crate::prelude::*;

/// Three nodes keep the six addresses of a pool leased; each cycle starts a
/// replacement's ADD (of a real Pending Pod on its node, as kubelet's is, so
/// that its queue entry is believed), then DELs the old sandbox 0–100 ms
/// later, so every ADD finds the pool full and waits in the queue for the
/// release promised to it. `other_leases` is how many
/// leases of the large pool exist meanwhile.
pub(crate) fn bench_tiny_beside(ctx: &Ctx, report: &mut String, other_leases: usize) {
    let pool = "bench-tiny";
    let nodes = many_node_names(ctx, 3);
    let cycles = if ctx.quick { 30 } else { 150 };
    let confs: Vec<Vec<u8>> = nodes
        .iter()
        .enumerate()
        .map(|(k, node)| {
            edit_conf(&ctx.node_conf(pool, "10.120.0.0/24", node, "tiny-nodes"), |v| {
                v["ipam"]["ranges"] =
                    json!([[{"subnet": "10.120.0.0/24", "rangeStart": "10.120.0.10", "rangeEnd": "10.120.0.15"}]]);
                v["ipam"]["log"] = json!({"level": "info", "file": ctx.work.join(format!("tiny-{k}.log"))});
            })
        })
        .collect();
    // Two sandboxes per node fill the pool.
    let mut held: Vec<Vec<String>> = vec![Vec::new(); nodes.len()];
    for (k, conf) in confs.iter().enumerate() {
        for j in 0..2 {
            let cid = format!("tiny-{k}-fill-{j}");
            if run_one(&ctx.add(conf, &cid)).0 {
                held[k].push(cid);
            }
        }
    }
    for k in 0..nodes.len() {
        let _ = std::fs::remove_file(ctx.work.join(format!("tiny-{k}.log")));
    }
    let lat = Mutex::new(Vec::new());
    let fails = Mutex::new(Vec::new());
    let per_node = cycles / nodes.len();
    let before = ctx.metrics();
    let passes_before = [ctx.controller_passes(""), ctx.controller_passes("queue_")];
    let wall = Instant::now();
    std::thread::scope(|s| {
        for (((k, conf), node), mut mine) in confs.iter().enumerate().zip(&nodes).zip(held) {
            let (lat, fails) = (&lat, &fails);
            s.spawn(move || {
                let mut rng = fastrand::Rng::with_seed(k as u64);
                for j in 0..per_node {
                    let Some(old) = mine.first().cloned() else { break };
                    let new = format!("tiny-{k}-{j}");
                    let delay = Duration::from_millis(rng.u64(0..=100));
                    let invocation = ctx.pod_add_on(conf, &new, node);
                    let add = std::thread::scope(|s2| {
                        let add = s2.spawn(|| run_one(&invocation));
                        std::thread::sleep(delay);
                        let _ = run_one(&ctx.del(conf, &old));
                        add.join().unwrap()
                    });
                    mine.remove(0);
                    match add {
                        (true, took, _) => {
                            lat.lock().unwrap().push(took);
                            mine.push(new);
                        }
                        (false, _, out) => fails.lock().unwrap().push(out),
                    }
                }
            });
        }
    });
    let wall = wall.elapsed();
    let after = ctx.metrics();
    let passes_after = [ctx.controller_passes(""), ctx.controller_passes("queue_")];
    let fails = fails.into_inner().unwrap();
    report_failures("tiny", nodes.len(), &fails);
    let s = Stats::of(lat.into_inner().unwrap(), fails.len(), wall);
    let c = ServerCounts::between(&before, &after);
    let n = s.n.max(1) as f64;
    let per_add: Vec<(f64, usize)> =
        (0..nodes.len()).map(|k| logged_requests(&ctx.work.join(format!("tiny-{k}.log")), "ADD")).collect();
    let total: usize = per_add.iter().map(|(_, n)| n).sum();
    let mean = per_add.iter().map(|(m, k)| m * *k as f64).sum::<f64>() / total.max(1) as f64;
    let _ = writeln!(report, "## A full six-address pool with churn, beside {other_leases} leases of another pool\n");
    let _ = writeln!(
        report,
        "While the large pool holds {other_leases} leases, three nodes keep the six addresses of another pool leased. Each of \
         {} cycles starts a replacement's ADD (of a real Pending Pod bound to that node, as kubelet's is, so that its queue entry is \
         believed) and DELs an old sandbox of the same node 0–100 ms later, so every ADD finds the pool full and waits in the \
         pool's queue for the release promised to it, watching that release by name. Counted at \
         the server: NetworkEndpoint LISTs and the objects the watch cache scanned for them; the plugin's own tally of its requests \
         per ADD.\n",
        s.n
    );
    let _ = writeln!(
        report,
        "| ADDs | failed | p50 ms | p99 ms | requests per ADD | 409s per ADD | LISTs | objects scanned per ADD |"
    );
    let _ = writeln!(report, "|---:|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        report,
        "| {} | {} | {:.1} | {:.1} | {mean:.2} | {:.2} | {:.0} | {:.1} |\n",
        s.n,
        s.failed,
        s.p50_ms,
        s.p99_ms,
        c.conflicts / n,
        c.lists,
        c.scanned / n
    );
    let [(full, full_s), (queue, queue_s)] =
        [0, 1].map(|i| (passes_after[i].0 - passes_before[i].0, passes_after[i].1 - passes_before[i].1));
    let _ = writeln!(
        report,
        "Meanwhile the controller made {full:.0} full passes, {:.1} ms each on average \
         (`netendpoint_controller_pass_duration_seconds`), and {queue:.0} passes over the waiting ADDs' pool alone, {:.1} ms each \
         (`netendpoint_controller_queue_pass_duration_seconds`), which serve the queue between full passes.\n",
        full_s * 1000.0 / full.max(1.0),
        queue_s * 1000.0 / queue.max(1.0)
    );
    ctx.delete_pool(pool);
}
