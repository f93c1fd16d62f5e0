//! Delete-and-recreate churn across nodes in a pool at 90 %.

use crate::prelude::*;

/// The outcome of [`churn`].
pub(crate) struct Churn {
    /// Cycles asked for, and the time cap that may have cut them short.
    pub(crate) planned: usize,
    pub(crate) cap: Option<Duration>,
    pub(crate) cycles: usize,
    pub(crate) nodes: usize,
    pub(crate) add: Stats,
    /// The first DEL of each sandbox.
    pub(crate) del: Stats,
    /// The runtime's repeated DELs of a sandbox already deleted.
    pub(crate) del_again: Stats,
    pub(crate) server: ServerCounts,
    pub(crate) cpu_s: Option<f64>,
    pub(crate) wall_s: f64,
    /// Summary writes of the controller during the churn.
    pub(crate) summary_writes: f64,
    /// The plugin's own mean count of its requests per ADD and per DEL
    /// (every DEL, repeated ones included).
    pub(crate) logged: (f64, f64),
}

/// DELs per sandbox, as containerd makes them: at StopPodSandbox, at
/// RemovePodSandbox, and once more when kubelet retries the removal.
const DELS_PER_SANDBOX: usize = 3;

/// `cycles` delete-and-recreate cycles spread over `nodes` (node `k` with
/// plugin configuration `confs[k]`), one worker per node, all at once. A
/// node's first cycle ADDs one pod; every later cycle DELs through the
/// plugin the pod its previous cycle ADDed (which the node recorded),
/// [`DELS_PER_SANDBOX`] times as the runtime does, and ADDs a new one, so the pool's fill stays where it is, one pod per node
/// above the fill. With `cap`, no cycle starts after that long.
pub(crate) fn churn(ctx: &Ctx, nodes: &[String], confs: &[Vec<u8>], cycles: usize, cap: Option<Duration>) -> Churn {
    let add_lat = Mutex::new(Vec::new());
    let del_lat = Mutex::new(Vec::new());
    let again_lat = Mutex::new(Vec::new());
    let add_fails = Mutex::new(Vec::new());
    let del_fails = Mutex::new(Vec::new());
    let logs: Vec<Vec<u8>> = confs
        .iter()
        .enumerate()
        .map(|(k, c)| {
            edit_conf(c, |v| {
                v["ipam"]["log"] = json!({"level": "info", "file": ctx.work.join(format!("churn-{k}.log"))})
            })
        })
        .collect();
    let before = ctx.metrics();
    let writes0 = ctx.summary_writes();
    let cpu0 = ctx.apiserver_cpu_s();
    let wall = Instant::now();
    let started = &wall;
    std::thread::scope(|s| {
        for (k, conf) in logs.iter().enumerate() {
            let mine_cycles = cycles / nodes.len() + usize::from(k < cycles % nodes.len());
            let (add_lat, del_lat, again_lat) = (&add_lat, &del_lat, &again_lat);
            let (add_fails, del_fails) = (&add_fails, &del_fails);
            s.spawn(move || {
                let mut last_added: Option<String> = None;
                for j in 0..mine_cycles {
                    if cap.is_some_and(|c| started.elapsed() > c) {
                        break;
                    }
                    if let Some(old) = last_added.take() {
                        for n in 0..DELS_PER_SANDBOX {
                            let lat = if n == 0 { del_lat } else { again_lat };
                            match run_one(&ctx.del(conf, &old)) {
                                (true, took, _) => lat.lock().unwrap().push(took),
                                (false, _, out) => del_fails.lock().unwrap().push(out),
                            }
                        }
                    }
                    let container = format!("churn-{k}-{j}");
                    match run_one(&ctx.add(conf, &container)) {
                        (true, took, _) => {
                            add_lat.lock().unwrap().push(took);
                            last_added = Some(container);
                        }
                        (false, _, out) => add_fails.lock().unwrap().push(out),
                    }
                }
            });
        }
    });
    let wall = wall.elapsed();
    let cpu1 = ctx.apiserver_cpu_s();
    let writes1 = ctx.summary_writes();
    let after = ctx.metrics();
    let (add_fails, del_fails) = (add_fails.into_inner().unwrap(), del_fails.into_inner().unwrap());
    report_failures("churn ADD", nodes.len(), &add_fails);
    report_failures("churn DEL", nodes.len(), &del_fails);
    let add = Stats::of(add_lat.into_inner().unwrap(), add_fails.len(), wall);
    let del = Stats::of(del_lat.into_inner().unwrap(), del_fails.len(), wall);
    let del_again = Stats::of(again_lat.into_inner().unwrap(), 0, wall);
    let mean = |cmd: &str| {
        let per: Vec<(f64, usize)> =
            (0..nodes.len()).map(|k| logged_requests(&ctx.work.join(format!("churn-{k}.log")), cmd)).collect();
        let n: usize = per.iter().map(|(_, n)| n).sum();
        per.iter().map(|(m, n)| m * *n as f64).sum::<f64>() / n.max(1) as f64
    };
    Churn {
        planned: cycles,
        cap,
        cycles: add.n,
        nodes: nodes.len(),
        add,
        del,
        del_again,
        server: ServerCounts::between(&before, &after),
        cpu_s: cpu0.zip(cpu1).map(|(a, b)| b - a),
        wall_s: wall.as_secs_f64(),
        summary_writes: writes1 - writes0,
        logged: (mean("ADD"), mean("DEL")),
    }
}

pub(crate) fn report_churn(ctx: &Ctx, report: &mut String, pool: &str, fill: &str, r: &Churn) {
    let c = &r.server;
    let adds = r.add.n.max(1) as f64;
    let _ = writeln!(report, "## Churn: delete and recreate in the {pool} at 90 %\n");
    let _ = writeln!(
        report,
        "{} cycles{} in the {pool} at {fill}, spread over {} of the node names, one worker per node, all at once ({:.0} s). A node's \
         first cycle ADDs one pod; each later cycle DELs through the plugin the pod its previous cycle ADDed (by the node's record \
         of it, by name), {DELS_PER_SANDBOX} times as containerd does (StopPodSandbox, RemovePodSandbox, a retried removal: \
         the later DELs find the node's tombstone of the sandbox), and then ADDs a new one on the same node, so the fill stays \
         where it is. The controller summarises the \
         pool meanwhile. Counted at the server: NetworkEndpoint LISTs and the objects the watch cache scanned for lists; 409s per \
         ADD; LISTs per pod deletion (its {DELS_PER_SANDBOX} DELs; the target is 0); response bytes and API server CPU per cycle (one \
         pod's DELs and one ADD); and the controller's summary writes per second \
         (`netendpoint_summary_writes_total`: at most one per shard or pool per 250 ms). The plugin's own tally of its requests \
         (logged per invocation) gives the requests per ADD and per DEL.\n",
        r.cycles,
        match r.cap {
            Some(c) if r.cycles < r.planned => {
                format!(" (of {} planned: no cycle starts after {} s, to bound the run)", r.planned, c.as_secs())
            }
            Some(c) => format!(" (all planned; no cycle would have started after {} s)", c.as_secs()),
            None => String::new(),
        },
        r.nodes,
        r.wall_s,
    );
    let _ = writeln!(
        report,
        "| pool | nodes | cycles | failed DEL | failed ADD | DEL p50 ms | repeated DEL p50 ms | ADD p50 ms | ADD p99 ms | requests per ADD | requests per DEL | LISTs | LISTs per pod deletion | objects scanned per cycle | 409s per ADD | summary writes per s | response bytes per cycle | API server CPU s per 1,000 cycles |"
    );
    let _ =
        writeln!(report, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        report,
        "| {pool} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.0} | {:.2} | {:.1} | {:.2} | {:.1} | {:.0} | {} |",
        r.nodes,
        r.cycles,
        r.del.failed,
        r.add.failed,
        r.del.p50_ms,
        r.del_again.p50_ms,
        r.add.p50_ms,
        r.add.p99_ms,
        r.logged.0,
        r.logged.1,
        c.lists,
        c.lists / r.del.n.max(1) as f64,
        c.scanned / adds,
        c.conflicts / adds,
        r.summary_writes / r.wall_s.max(0.001),
        c.bytes / adds,
        r.cpu_s.map_or("n/a".into(), |s| format!("{:.1}", s * 1000.0 / adds)),
    );
    let _ = writeln!(report);
    if let Some(cpu_s) = r.cpu_s {
        ctx.shared.lock().unwrap().load.push(Load {
            during: format!("churn in the {pool} at 90 %, {} nodes at once", r.nodes),
            ops: r.add.n,
            unit: "cycles (DEL + ADD)",
            cpu_s,
        });
    }
}

/// Churn on its own in a /20 at 90 % (with `--quick`, instead of in the /15).
pub(crate) fn bench_churn_small(ctx: &Ctx, report: &mut String) {
    let pool = "bench-churn";
    let net: u32 = 0x0a58_0000; // 10.88.0.0/20
    let subnet = "10.88.0.0/20";
    let usable: u32 = (1 << 12) - 3;
    let nodes = many_node_names(ctx, CHURN_NODES);
    let target = ((usable * 90 + 50) / 100) as usize;
    let mut rng = fastrand::Rng::with_seed(20);
    let mut hosts: Vec<u32> = (2..usable + 2).collect();
    rng.shuffle(&mut hosts);
    let ips: Vec<String> = hosts[..target].iter().map(|h| host(net + h)).collect();
    let mut storage = Storage::before(ctx);
    let leased = ctx.fill_owned(pool, &ips, &nodes, 48);
    storage.after(ctx, leased);
    ctx.wait_summary(pool, leased, Duration::from_secs(120));
    let fill = format!("{:.1} %", 100.0 * leased as f64 / f64::from(usable));
    let cycles = if ctx.quick { 100 } else { 2000 };
    let confs: Vec<Vec<u8>> = nodes.iter().map(|n| ctx.node_conf(pool, subnet, n, "churn-nodes")).collect();
    let r = churn(ctx, &nodes, &confs, cycles, None);
    report_churn(ctx, report, "/20", &fill, &r);
    let conf = ctx.node_conf(pool, subnet, &nodes[0], "churn-nodes");
    let lean = measure_lean(ctx, &format!("/20 at {fill}"), pool, &conf, storage);
    ctx.shared.lock().unwrap().lean = Some(lean);
    ctx.delete_pool(pool);
}
