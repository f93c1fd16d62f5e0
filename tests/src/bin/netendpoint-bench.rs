//! Benchmark harness: prints figures, asserts nothing about timings.
//!
//! Runs against the real API server started by `scripts/bench.sh`, with every
//! ADD a separate process as a runtime makes it. Measures, in one run:
//! ADD latency and throughput at several concurrencies beside the API-write
//! floor, host-local and (when built) whereabouts; API requests per ADD and
//! DEL counted at the server; ADD latency by pool size; release-to-reuse
//! latency with watcher-example acknowledging; replacement ADDs that come
//! before the old pod's DEL; ADD in a /64 with a large exclusion; what STATUS
//! costs the API server; many nodes ADDing into one empty pool; footprints;
//! and, last and only without `--quick`, ADD in a /15 filled to 50 % and 90 %.
//! Writes `BENCHMARKS.md` and an SVG plot.
//!
//! Usage: `netendpoint-bench --kubeconfig K --bin-dir target/release --cni-dir tests/bin/cni
//! [--whereabouts PATH] [--out BENCHMARKS.md] [--plot docs/bench.svg] [--quick] [--large-prefix 15]`
//!
//! `BENCH_ONLY=case,case` runs only those cases (latency, requests, scale,
//! reuse, replace, exclude, status, nodes, footprint, large), prints the
//! report and writes no file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use netendpoint_crd::{LABEL_BLOCK, LABEL_NODE, LABEL_POOL, NetworkEndpoint, block_label_value, label_value};
use serde_json::{Value, json};

struct Ctx {
    kubeconfig: PathBuf,
    bin: PathBuf,
    cni: PathBuf,
    work: PathBuf,
    quick: bool,
    large_prefix: u8,
    whereabouts: Option<PathBuf>,
    rt: tokio::runtime::Runtime,
    client: kube::Client,
}

#[derive(Default, Clone)]
struct Stats {
    n: usize,
    failed: usize,
    p50_ms: f64,
    p99_ms: f64,
    per_sec: f64,
}

impl Stats {
    fn of(mut lat: Vec<Duration>, failed: usize, wall: Duration) -> Self {
        Self {
            n: lat.len() + failed,
            failed,
            p50_ms: pct_ms(&mut lat, 0.50),
            p99_ms: pct_ms(&mut lat, 0.99),
            per_sec: lat.len() as f64 / wall.as_secs_f64(),
        }
    }
}

/// One process invocation: program, args, env, stdin.
struct Invocation {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    stdin: Vec<u8>,
}

fn run_one(inv: &Invocation) -> (bool, Duration, String) {
    let start = Instant::now();
    let mut cmd = Command::new(&inv.program);
    cmd.args(&inv.args).env_clear().envs(inv.env.iter().cloned());
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return (false, start.elapsed(), e.to_string()),
    };
    if let Some(mut s) = child.stdin.take() {
        let _ = s.write_all(&inv.stdin);
    }
    let out = child.wait_with_output();
    let took = start.elapsed();
    match out {
        Ok(o) => (o.status.success(), took, String::from_utf8_lossy(&o.stdout).into_owned()),
        Err(e) => (false, took, e.to_string()),
    }
}

/// Runs `n` invocations made by `make`, `concurrency` at a time.
fn run_many(n: usize, concurrency: usize, make: &(dyn Fn(usize) -> Invocation + Sync)) -> (Stats, Vec<String>) {
    let next = AtomicUsize::new(0);
    let lat = Mutex::new(Vec::with_capacity(n));
    let failures = Mutex::new(Vec::new());
    let wall = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..concurrency {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= n {
                        break;
                    }
                    let (ok, took, out) = run_one(&make(i));
                    if ok {
                        lat.lock().unwrap().push(took);
                    } else {
                        failures.lock().unwrap().push(out);
                    }
                }
            });
        }
    });
    let wall = wall.elapsed();
    let failures = failures.into_inner().unwrap();
    (Stats::of(lat.into_inner().unwrap(), failures.len(), wall), failures)
}

impl Ctx {
    fn plugin(&self) -> PathBuf {
        self.bin.join("netendpoint")
    }

    fn netconf(&self, pool: &str, subnet: &str, extra: Value) -> Vec<u8> {
        let mut ipam = json!({
            "type": "netendpoint",
            "pool": pool,
            "ranges": [[{"subnet": subnet}]],
            "kubeconfig": self.kubeconfig,
            "nodeName": "bench-node",
            "dataDir": self.work.join("data").join(pool),
            "waitForRelease": "30s",
        });
        for (k, v) in extra.as_object().unwrap() {
            ipam[k] = v.clone();
        }
        serde_json::to_vec(&json!({"cniVersion": "1.0.0", "name": pool, "ipam": ipam})).unwrap()
    }

    fn cni_env(&self, command: &str, cid: &str) -> Vec<(String, String)> {
        vec![
            ("CNI_COMMAND".into(), command.into()),
            ("CNI_CONTAINERID".into(), cid.into()),
            ("CNI_IFNAME".into(), "eth0".into()),
            ("CNI_NETNS".into(), "/run/netns/bench".into()),
            ("CNI_PATH".into(), self.cni.display().to_string()),
            ("CNI_ARGS".into(), format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={cid}")),
        ]
    }

    fn add(&self, conf: &[u8], cid: &str) -> Invocation {
        Invocation { program: self.plugin(), args: vec![], env: self.cni_env("ADD", cid), stdin: conf.to_vec() }
    }

    fn del(&self, conf: &[u8], cid: &str) -> Invocation {
        Invocation { program: self.plugin(), args: vec![], env: self.cni_env("DEL", cid), stdin: conf.to_vec() }
    }

    /// Deletes every lease of `pool`, one page of at most 5,000 per
    /// deletecollection, so that no response holds a whole large pool.
    fn delete_pool(&self, pool: &str) {
        const PAGE: u32 = 5_000;
        let api: Api<NetworkEndpoint> = Api::all(self.client.clone());
        let lp = ListParams::default().labels(&format!("{LABEL_POOL}={}", label_value(pool))).limit(PAGE);
        self.rt.block_on(async {
            // A short page is the last one; the bound stops a loop on objects that cannot go.
            for _ in 0..200 {
                let deleted = match api.delete_collection(&DeleteParams::default(), &lp).await {
                    Ok(r) => r.left().map_or(0, |l| l.items.len()),
                    Err(e) => {
                        eprintln!("delete pool {pool}: {e}");
                        return;
                    }
                };
                if deleted < PAGE as usize {
                    return;
                }
            }
        });
    }

    /// Registers Node objects (metadata only) under `names`; existing ones are kept.
    /// ADD refuses to lease under a node name that is not registered.
    fn ensure_nodes(&self, names: &[String]) {
        let api: Api<Node> = Api::all(self.client.clone());
        self.rt.block_on(async {
            for name in names {
                let node = Node {
                    metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() },
                    ..Node::default()
                };
                match api.create(&PostParams::default(), &node).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => panic!("register node {name}: {e}"),
                }
            }
        });
    }

    /// Creates leases of `pool` at `ips` directly (not through the plugin),
    /// `in_flight` at a time, labelled as the plugin labels its own (node and
    /// block), so that block lists find them. Returns how many were created.
    fn fill(&self, pool: &str, ips: &[String], node: &str, in_flight: usize) -> usize {
        self.rt.block_on(async {
            use futures::StreamExt;
            let api: Api<NetworkEndpoint> = Api::all(self.client.clone());
            futures::stream::iter(ips.iter().map(|ip| {
                let api = api.clone();
                let mut ep = netendpoint_tests::lease(pool, ip, "filler", node, &[]);
                let labels = ep.metadata.labels.get_or_insert_with(Default::default);
                labels.insert(LABEL_NODE.to_string(), label_value(node));
                labels.insert(LABEL_BLOCK.to_string(), block_label_value(ip.parse().unwrap()));
                async move { api.create(&PostParams::default(), &ep).await.is_ok() }
            }))
            .buffer_unordered(in_flight)
            .fold(0, |n, ok| async move { n + usize::from(ok) })
            .await
        })
    }

    /// One scrape of the API server's `/metrics`.
    fn metrics(&self) -> Metrics {
        let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = self.rt.block_on(self.client.request_text(req)).unwrap_or_default();
        Metrics(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let (series, value) = l.rsplit_once(' ')?;
                    Some((series.to_string(), value.parse().ok()?))
                })
                .collect(),
        )
    }

    /// Sum of `apiserver_request_total` for NetworkEndpoints.
    fn requests(&self) -> f64 {
        self.metrics().sum(REQUESTS, |l| l.networkendpoints())
    }

    /// PID of the kube-testenv process (API server and etcd in one), from the
    /// state directory that holds the kubeconfig.
    fn apiserver_pid(&self) -> Option<u32> {
        let dir = self.kubeconfig.parent()?;
        std::fs::read_to_string(dir.join("pid")).ok()?.trim().parse().ok()
    }
}

const REQUESTS: &str = "apiserver_request_total";
const RESPONSE_BYTES: &str = "apiserver_response_sizes_sum";

/// The API server's metrics at one moment: series (name and labels) to value.
struct Metrics(HashMap<String, f64>);

impl Metrics {
    /// Sum of the series of metric `name` whose labels `keep` accepts.
    fn sum(&self, name: &str, keep: impl Fn(&Labels) -> bool) -> f64 {
        self.0
            .iter()
            .filter_map(|(k, v)| {
                let labels = k.strip_prefix(name)?.strip_prefix('{')?.strip_suffix('}')?;
                keep(&Labels(labels)).then_some(v)
            })
            .sum()
    }

    /// Increase of [`Metrics::sum`] since `before`.
    fn since(&self, before: &Metrics, name: &str, keep: impl Fn(&Labels) -> bool) -> f64 {
        self.sum(name, &keep) - before.sum(name, &keep)
    }
}

/// The labels of one series, as the exposition format writes them (`a="x",b="y"`).
struct Labels<'a>(&'a str);

impl Labels<'_> {
    /// The value of label `name` ("" when absent). Label values here hold no commas.
    fn get(&self, name: &str) -> &str {
        self.0.split(',').find_map(|kv| kv.strip_prefix(name)?.strip_prefix("=\"")?.strip_suffix('"')).unwrap_or("")
    }

    fn networkendpoints(&self) -> bool {
        self.get("resource") == "networkendpoints"
    }

    /// A request to a resource, other than the API server's own heartbeat
    /// (coordination.k8s.io Leases), which ticks whatever clients do.
    fn client_resource(&self) -> bool {
        !matches!(self.get("resource"), "" | "leases")
    }
}

/// Percentile `p` (0..1) of `v` in milliseconds, nearest rank.
fn pct_ms(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i].as_secs_f64() * 1000.0
}

/// `conf` with `edit` applied to its JSON.
fn edit_conf(conf: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(conf).unwrap();
    edit(&mut v);
    serde_json::to_vec(&v).unwrap()
}

fn host(v: u32) -> String {
    Ipv4Addr::from(v).to_string()
}

fn main() {
    let mut args: HashMap<String, String> = HashMap::new();
    let mut it = std::env::args().skip(1);
    let mut quick = false;
    while let Some(a) = it.next() {
        if a == "--quick" {
            quick = true;
        } else if let Some(k) = a.strip_prefix("--") {
            args.insert(k.to_string(), it.next().expect("flag value"));
        }
    }
    let get = |k: &str| PathBuf::from(args.get(k).unwrap_or_else(|| panic!("--{k} is required")));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let kubeconfig = get("kubeconfig");
    let client = rt.block_on(async {
        let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
        kube::Client::try_from(cfg).unwrap()
    });
    let work = std::env::temp_dir().join(format!("netendpoint-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let whereabouts = args.get("whereabouts").map(PathBuf::from);
    let large_prefix = args.get("large-prefix").map_or(15, |p| p.parse().expect("--large-prefix: a prefix length"));
    let ctx = Ctx {
        kubeconfig,
        bin: get("bin-dir"),
        cni: get("cni-dir"),
        work,
        quick,
        large_prefix,
        whereabouts,
        rt,
        client,
    };
    ctx.ensure_nodes(&["bench-node".to_string()]);
    let mut report = String::new();
    let started = Instant::now();

    let _ = writeln!(report, "# Benchmarks\n");
    let _ = writeln!(
        report,
        "Generated by `make bench` in one run on one machine ({} cores), against the real kube-apiserver \
         v1.36 + etcd of the test environment on loopback. Every ADD is a separate process, as a runtime makes it. \
         Figures, not assertions; they vary from run to run.\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    if let Ok(only) = std::env::var("BENCH_ONLY") {
        for case in only.split(',') {
            match case.trim() {
                "latency" => drop(bench_latency(&ctx, &mut report)),
                "requests" => bench_requests(&ctx, &mut report),
                "scale" => bench_pool_scale(&ctx, &mut report),
                "reuse" => bench_release_to_reuse(&ctx, &mut report),
                "replace" => bench_replacement_before_del(&ctx, &mut report),
                "exclude" => bench_exclusion(&ctx, &mut report),
                "status" => bench_status(&ctx, &mut report),
                "nodes" => bench_many_nodes(&ctx, &mut report),
                "footprint" => bench_footprint(&ctx, &mut report),
                "large" => bench_large_pool(&ctx, &mut report),
                other => panic!("BENCH_ONLY: unknown case {other:?}"),
            }
        }
        print!("{report}");
        let _ = std::fs::remove_dir_all(&ctx.work);
        return;
    }
    let latency = bench_latency(&ctx, &mut report);
    bench_requests(&ctx, &mut report);
    bench_exclusion(&ctx, &mut report);
    bench_pool_scale(&ctx, &mut report);
    bench_release_to_reuse(&ctx, &mut report);
    bench_replacement_before_del(&ctx, &mut report);
    bench_status(&ctx, &mut report);
    bench_many_nodes(&ctx, &mut report);
    bench_footprint(&ctx, &mut report);
    // Last: it leaves the API server with the most to digest.
    if !ctx.quick {
        bench_large_pool(&ctx, &mut report);
    }
    let _ = writeln!(report, "\nTotal harness time: {:.0} s.", started.elapsed().as_secs_f64());

    print!("{report}");
    if let Some(out) = args.get("out") {
        std::fs::write(out, &report).unwrap();
    }
    if let Some(plot) = args.get("plot") {
        std::fs::write(plot, svg(&latency)).unwrap();
    }
    let _ = std::fs::remove_dir_all(&ctx.work);
}

type Series = Vec<(String, Vec<(usize, Stats)>)>;

fn bench_latency(ctx: &Ctx, report: &mut String) -> Series {
    let levels: &[usize] = if ctx.quick { &[1, 8] } else { &[1, 8, 32, 64] };
    let per_level = |c: usize| if ctx.quick { 16 } else { (c * 10).clamp(60, 320) };
    let mut series: Series = Vec::new();

    // netendpoint
    let mut ours = Vec::new();
    for &c in levels {
        let pool = format!("bench-add-c{c}");
        let conf = ctx.netconf(&pool, "10.90.0.0/20", json!({}));
        let _ = run_one(&ctx.add(&conf, &format!("warm-c{c}")));
        let (s, fails) = run_many(per_level(c), c, &|i| ctx.add(&conf, &format!("add-c{c}-{i}")));
        report_failures("netendpoint", c, &fails);
        ours.push((c, s));
        ctx.delete_pool(&pool);
    }
    series.push(("netendpoint".into(), ours));

    // floor: one kube-rs create from a fresh process
    let mut floor = Vec::new();
    for &c in levels {
        let pool = format!("bench-floor-c{c}");
        let (s, fails) = run_many(per_level(c), c, &|i| Invocation {
            program: ctx.bin.join("bench-floor"),
            args: vec![ctx.kubeconfig.display().to_string(), pool.clone(), host(0x0a5a_0000 + 1 + i as u32)],
            env: vec![],
            stdin: vec![],
        });
        report_failures("floor", c, &fails);
        floor.push((c, s));
        ctx.delete_pool(&pool);
    }
    series.push(("floor (1 API write)".into(), floor));

    // host-local: no API at all
    let mut hl = Vec::new();
    for &c in levels {
        let data = ctx.work.join(format!("host-local-c{c}"));
        let conf = serde_json::to_vec(&json!({
            "cniVersion": "1.0.0", "name": format!("hl-c{c}"),
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.91.0.0/20"}]], "dataDir": data}
        }))
        .unwrap();
        let (s, fails) = run_many(per_level(c), c, &|i| Invocation {
            program: ctx.cni.join("host-local"),
            args: vec![],
            env: ctx.cni_env("ADD", &format!("hl-c{c}-{i}")),
            stdin: conf.clone(),
        });
        report_failures("host-local", c, &fails);
        hl.push((c, s));
    }
    series.push(("host-local (no API)".into(), hl));

    // whereabouts, when scripts/bench-peers.sh could build it
    let wa_bin = ctx.whereabouts.clone();
    let mut wa = Vec::new();
    if let Some(wa_bin) = &wa_bin {
        // whereabouts refuses to run without its "flat file"; an empty one is enough.
        let flat = ctx.work.join("whereabouts.conf");
        std::fs::write(&flat, "{}").unwrap();
        for (n, &c) in levels.iter().enumerate() {
            let conf = serde_json::to_vec(&json!({
                "cniVersion": "1.0.0", "name": format!("wa-c{c}"), "type": "whereabouts",
                "ipam": {"type": "whereabouts", "range": format!("10.{}.0.0/20", 92 + n),
                         "configuration_path": flat, "log_level": "error",
                         "kubernetes": {"kubeconfig": ctx.kubeconfig}}
            }))
            .unwrap();
            let _ = run_one(&Invocation {
                program: wa_bin.clone(),
                args: vec![],
                env: ctx.cni_env("ADD", &format!("wa-warm-{c}")),
                stdin: conf.clone(),
            });
            let (s, fails) = run_many(per_level(c), c, &|i| Invocation {
                program: wa_bin.clone(),
                args: vec![],
                env: ctx.cni_env("ADD", &format!("wa-c{c}-{i}")),
                stdin: conf.clone(),
            });
            report_failures("whereabouts", c, &fails);
            wa.push((c, s));
        }
        series.push(("whereabouts".into(), wa.clone()));
    }

    let _ = writeln!(report, "## ADD latency and throughput (/20 pool)\n");
    let _ = writeln!(report, "![ADDs per second by concurrency](docs/bench.svg)\n");
    let _ = writeln!(report, "| IPAM | concurrency | ADDs | failed | p50 ms | p99 ms | ADDs/s |");
    let _ = writeln!(report, "|---|---:|---:|---:|---:|---:|---:|");
    for (name, rows) in &series {
        for (c, s) in rows {
            let _ = writeln!(
                report,
                "| {name} | {c} | {} | {} | {:.1} | {:.1} | {:.1} |",
                s.n, s.failed, s.p50_ms, s.p99_ms, s.per_sec
            );
        }
    }
    let _ = writeln!(report, "\nRatios (netendpoint ÷ other):\n");
    let _ = writeln!(report, "| concurrency | p50 vs floor | ADDs/s vs floor | ADDs/s vs whereabouts |");
    let _ = writeln!(report, "|---:|---:|---:|---:|");
    for (i, (c, s)) in series[0].1.iter().enumerate() {
        let f = &series[1].1[i].1;
        let w = wa.get(i).map_or("n/a".to_string(), |(_, w)| format!("{:.1}×", s.per_sec / w.per_sec));
        let _ = writeln!(report, "| {c} | {:.2}× | {:.2}× | {w} |", s.p50_ms / f.p50_ms, s.per_sec / f.per_sec);
    }
    if wa_bin.is_none() {
        let _ = writeln!(report, "\nwhereabouts was not available in this run (see docs/bench-peers.md).");
    } else {
        let _ = writeln!(
            report,
            "\nwhereabouts v0.9.2 serialises every ADD and DEL in the cluster through one leader-election Lease (see docs/bench-peers.md)."
        );
    }
    let _ = writeln!(report);
    series
}

fn report_failures(what: &str, c: usize, fails: &[String]) {
    if let Some(first) = fails.first() {
        eprintln!("{what} c={c}: {} failed, first: {}", fails.len(), first.trim());
    }
}

fn bench_requests(ctx: &Ctx, report: &mut String) {
    let pool = "bench-requests";
    let conf = ctx.netconf(pool, "10.95.0.0/24", json!({}));
    let n = 50;
    let before = ctx.requests();
    let (add, _) = run_many(n, 1, &|i| ctx.add(&conf, &format!("req-{i}")));
    let mid = ctx.requests();
    let (del, _) = run_many(n, 1, &|i| Invocation {
        program: ctx.plugin(),
        args: vec![],
        env: ctx.cni_env("DEL", &format!("req-{i}")),
        stdin: conf.clone(),
    });
    let after = ctx.requests();
    let _ = writeln!(report, "## API requests per operation (counted at the server)\n");
    let _ = writeln!(
        report,
        "From `apiserver_request_total{{resource=\"networkendpoints\"}}` before and after {n} ADDs and {n} DELs at concurrency 1 (failed: {} ADD, {} DEL).\n",
        add.failed, del.failed
    );
    let _ = writeln!(report, "| operation | requests per op |");
    let _ = writeln!(report, "|---|---:|");
    let _ = writeln!(report, "| ADD | {:.2} |", (mid - before) / n as f64);
    let _ = writeln!(report, "| DEL | {:.2} |\n", (after - mid) / n as f64);
    ctx.delete_pool(pool);
}

fn bench_pool_scale(ctx: &Ctx, report: &mut String) {
    let sizes: &[(u8, u32)] = if ctx.quick {
        &[(24, 0x0a60_0000), (20, 0x0a61_0000)]
    } else {
        &[(24, 0x0a60_0000), (20, 0x0a61_0000), (16, 0x0a62_0000)]
    };
    let _ = writeln!(report, "## ADD latency by pool size (pool 50% full, concurrency 1)\n");
    let _ = writeln!(
        report,
        "Half of the usable addresses, chosen at random, are leased first by direct creates; then 40 ADDs run one at a time.\n"
    );
    let _ = writeln!(
        report,
        "| pool | leases | fill time s | ADDs | p50 ms | p99 ms | API requests per ADD | containerID list ms | pool metadata list ms |"
    );
    let _ = writeln!(report, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
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
        let conf = ctx.netconf(&pool, &format!("{}/{prefix}", host(net)), json!({}));
        let before = ctx.requests();
        let (s, fails) = run_many(40, 1, &|i| ctx.add(&conf, &format!("scale-{prefix}-{i}")));
        let per_add = (ctx.requests() - before) / 40.0;
        // The two lists an ADD may make, timed alone.
        let api: Api<NetworkEndpoint> = Api::all(ctx.client.clone());
        let t = Instant::now();
        let _ = ctx.rt.block_on(api.list(&ListParams::default().fields("spec.containerID=scale-probe")));
        let sel_ms = t.elapsed().as_secs_f64() * 1000.0;
        let t = Instant::now();
        let _ = ctx.rt.block_on(
            api.list_metadata(&ListParams::default().labels(&format!("{LABEL_POOL}={}", label_value(&pool)))),
        );
        let meta_ms = t.elapsed().as_secs_f64() * 1000.0;
        report_failures("scale", prefix as usize, &fails);
        let ratio = base.map_or(String::new(), |b: f64| format!(" ({:.2}× the /24)", s.p50_ms / b));
        base.get_or_insert(s.p50_ms);
        let _ = writeln!(
            report,
            "| /{prefix} | {} | {fill_s:.0} | {} | {:.1}{ratio} | {:.1} | {per_add:.2} | {sel_ms:.1} | {meta_ms:.1} |",
            hosts.len(),
            s.n,
            s.p50_ms,
            s.p99_ms
        );
        ctx.delete_pool(&pool);
    }
    let _ = writeln!(report);
}

fn http_get(port: u16, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))?.rsplit(' ').next()?.parse().ok()
}

fn start_agent(ctx: &Ctx, node: &str, finalizer: Option<&str>, port: u16) -> std::process::Child {
    let mut cmd = Command::new(ctx.bin.join("watcher-example"));
    cmd.args(["--node", node, "--dataplane", "memory", "--metrics-addr", &format!("127.0.0.1:{port}")])
        .arg("--kubeconfig")
        .arg(&ctx.kubeconfig)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    match finalizer {
        Some(f) => cmd.args(["--finalizer", f]),
        None => cmd.arg("--no-finalizer"),
    };
    let child = cmd.spawn().expect("start watcher-example");
    for _ in 0..200 {
        if http_get(port, "/healthz").contains("ok") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn bench_release_to_reuse(ctx: &Ctx, report: &mut String) {
    let pool = "bench-reuse";
    let finalizer = "bench.netendpoint.dev/agent";
    let node = "bench-node";
    let mut agent = start_agent(ctx, node, Some(finalizer), 19464);
    // A full pool of 4 IPs: every replacement must wait for the release.
    let conf = ctx.netconf(pool, "10.96.0.0/29", json!({"finalizers": [finalizer]}));
    let conf = {
        let mut v: Value = serde_json::from_slice(&conf).unwrap();
        v["ipam"]["ranges"] = json!([[{"subnet": "10.96.0.0/29", "rangeStart": "10.96.0.2", "rangeEnd": "10.96.0.5"}]]);
        serde_json::to_vec(&v).unwrap()
    };
    for i in 0..4 {
        let _ = run_one(&ctx.add(&conf, &format!("reuse-{i}")));
    }
    let rounds = if ctx.quick { 8 } else { 40 };
    let mut lat = Vec::new();
    let mut failed = 0;
    let wall = Instant::now();
    for r in 0..rounds {
        let old = format!("reuse-{}", r % 4 + 4 * (r / 4));
        let new = format!("reuse-{}", r % 4 + 4 * (r / 4 + 1));
        let t0 = Instant::now();
        let del =
            Invocation { program: ctx.plugin(), args: vec![], env: ctx.cni_env("DEL", &old), stdin: conf.clone() };
        let (ok_del, _, _) = run_one(&del);
        let (ok_add, _, _) = run_one(&ctx.add(&conf, &new));
        if ok_del && ok_add {
            lat.push(t0.elapsed());
        } else {
            failed += 1;
        }
    }
    let s = Stats::of(lat, failed, wall.elapsed());
    let _ = agent.kill();
    let _ = agent.wait();
    let _ = writeln!(report, "## Release-to-reuse latency (full pool, watcher-example acknowledging)\n");
    let _ = writeln!(
        report,
        "A pool of 4 IPs, all leased with the agent's finalizer declared. Each round: DEL one pod, then ADD its replacement, which must wait until watcher-example removed its rule and its finalizer. Measured from the start of DEL to the end of the replacement's ADD.\n"
    );
    let _ = writeln!(report, "| rounds | failed | p50 ms | p99 ms |");
    let _ = writeln!(report, "|---:|---:|---:|---:|");
    let _ = writeln!(report, "| {} | {} | {:.1} | {:.1} |\n", s.n, s.failed, s.p50_ms, s.p99_ms);
    ctx.delete_pool(pool);
}

fn bench_exclusion(ctx: &Ctx, report: &mut String) {
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

fn bench_replacement_before_del(ctx: &Ctx, report: &mut String) {
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
        let (add, del_started) = std::thread::scope(|s| {
            let t0 = Instant::now();
            let add = s.spawn(|| run_one(&ctx.add(&conf, &new)));
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
         no finalizers (so the DEL frees the address at once), `waitForRelease: 10s`. Each round starts the replacement's ADD, \
         then after a random 0–2 s delay runs the old pod's DEL; the ADD must wait for that release to begin and finish. \
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

fn bench_status(ctx: &Ctx, report: &mut String) {
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
         STATUS never lists the pool: its NetworkEndpoint LISTs are the `limit=1` metadata probe only, one per uncached call \
         (one metadata list of this pool would be {pool_list_bytes:.0} bytes).\n"
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

fn bench_many_nodes(ctx: &Ctx, report: &mut String) {
    let total = if ctx.quick { 200 } else { 2000 };
    let concurrency = 16;
    let _ = writeln!(report, "## Many nodes ADDing into one empty pool\n");
    let _ = writeln!(
        report,
        "{total} ADDs at concurrency {concurrency} into an empty /16, spread round-robin over registered node names, each node with its \
         own `dataDir` (so its own round-robin cursor), as real nodes have. From `apiserver_request_total{{resource=\"networkendpoints\"}}`: \
         creates answered 409 (the address was taken by another node first) and NetworkEndpoint LISTs per ADD (an ADD whose probes miss lists one block, and the whole pool only after several full blocks).\n"
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

fn bench_large_pool(ctx: &Ctx, report: &mut String) {
    let prefix = ctx.large_prefix;
    let net: u32 = 0x0a66_0000; // 10.102.0.0, aligned for any prefix down to /15
    let pool = format!("bench-large-{prefix}");
    let usable = (1u32 << (32 - prefix)) - 3; // minus network, gateway, broadcast
    let mut rng = fastrand::Rng::with_seed(u64::from(prefix) + 100);
    let mut hosts: Vec<u32> = (2..usable + 2).collect();
    rng.shuffle(&mut hosts);
    let conf = ctx.netconf(&pool, &format!("{}/{prefix}", host(net)), json!({}));
    let pid = ctx.apiserver_pid();
    let rss_mb = || {
        pid.and_then(|p| proc_status(p, "VmRSS:")).map_or("n/a".to_string(), |k| format!("{:.0}", k as f64 / 1024.0))
    };
    let in_flight = 32;
    let adds = 40;
    let _ = writeln!(report, "## A large pool: /{prefix} filled to 50 % and 90 %\n");
    let _ = writeln!(
        report,
        "{usable} usable addresses. Leases at random addresses are created directly, {in_flight} in flight, first to 50 % then to 90 %; \
         after each fill {adds} ADDs run one at a time. API requests and LISTs (of a block, or of the pool) per ADD count NetworkEndpoint requests at the server; \
         RSS is that of the test environment's one process, which holds both kube-apiserver and etcd \
         (before the fill: {} MB).\n",
        rss_mb()
    );
    let _ = writeln!(
        report,
        "| fill | leases | fill time s | creates/s | ADDs | failed | p50 ms | p99 ms | API requests per ADD | LISTs per ADD | API server RSS MB |"
    );
    let _ = writeln!(report, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut filled = 0;
    let mut leased = 0;
    for percent in [50u32, 90] {
        let target = (u64::from(usable) * u64::from(percent) / 100) as usize;
        let ips: Vec<String> = hosts[filled..target].iter().map(|h| host(net + h)).collect();
        let t = Instant::now();
        let created = ctx.fill(&pool, &ips, "other-node", in_flight);
        let fill_s = t.elapsed().as_secs_f64();
        if created < ips.len() {
            eprintln!("large pool: {} of {} creates failed", ips.len() - created, ips.len());
        }
        filled = target;
        leased += created;
        let before = ctx.metrics();
        let (s, fails) = run_many(adds, 1, &|i| ctx.add(&conf, &format!("large-{percent}-{i}")));
        let after = ctx.metrics();
        report_failures("large pool", percent as usize, &fails);
        leased += s.n - s.failed;
        let per_add = |v: f64| v / adds as f64;
        let _ = writeln!(
            report,
            "| {percent} % | {leased} | {fill_s:.0} | {:.0} | {} | {} | {:.1} | {:.1} | {:.2} | {:.2} | {} |",
            created as f64 / fill_s,
            s.n,
            s.failed,
            s.p50_ms,
            s.p99_ms,
            per_add(after.since(&before, REQUESTS, |l| l.networkendpoints())),
            per_add(after.since(&before, REQUESTS, |l| l.networkendpoints() && l.get("verb") == "LIST")),
            rss_mb()
        );
    }
    let t = Instant::now();
    ctx.delete_pool(&pool);
    let _ = writeln!(
        report,
        "\nDeleting the {leased} leases (deletecollection, pages of 5,000) took {:.0} s.\n",
        t.elapsed().as_secs_f64()
    );
}

fn max_rss_kb(inv: &Invocation) -> Option<u64> {
    let mut cmd = Command::new("/usr/bin/time");
    cmd.arg("-f").arg("%M").arg(&inv.program).args(&inv.args).env_clear().envs(inv.env.iter().cloned());
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().ok()?;
    child.stdin.take()?.write_all(&inv.stdin).ok()?;
    let out = child.wait_with_output().ok()?;
    String::from_utf8_lossy(&out.stderr).lines().last()?.trim().parse().ok()
}

fn proc_status(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find(|l| l.starts_with(key))?.split_whitespace().nth(1)?.parse().ok()
}

fn proc_cpu_s(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn bench_footprint(ctx: &Ctx, report: &mut String) {
    let _ = writeln!(report, "## Footprint\n");
    // VERSION start-up, against /bin/true as the process-spawn floor of this machine.
    let version = Invocation {
        program: ctx.plugin(),
        args: vec![],
        env: vec![("CNI_COMMAND".into(), "VERSION".into())],
        stdin: b"{\"cniVersion\":\"1.1.0\"}".to_vec(),
    };
    let truth = Invocation { program: "/bin/true".into(), args: vec![], env: vec![], stdin: vec![] };
    let (v, _) = run_many(300, 1, &|_| Invocation {
        program: version.program.clone(),
        args: vec![],
        env: version.env.clone(),
        stdin: version.stdin.clone(),
    });
    let (t, _) =
        run_many(300, 1, &|_| Invocation { program: truth.program.clone(), args: vec![], env: vec![], stdin: vec![] });
    let pool = "bench-rss";
    let conf = ctx.netconf(pool, "10.97.0.0/24", json!({}));
    let rss: Vec<u64> = (0..10).filter_map(|i| max_rss_kb(&ctx.add(&conf, &format!("rss-{i}")))).collect();
    ctx.delete_pool(pool);

    let _ = writeln!(report, "| measure | value |");
    let _ = writeln!(report, "|---|---:|");
    let _ = writeln!(report, "| plugin `VERSION`, p50 wall time (300 runs) | {:.2} ms |", v.p50_ms);
    let _ =
        writeln!(report, "| `/bin/true`, p50 wall time (process-spawn floor of this machine) | {:.2} ms |", t.p50_ms);
    let _ = writeln!(
        report,
        "| plugin max RSS during ADD (max of {}) | {:.1} MB |",
        rss.len(),
        rss.iter().max().copied().unwrap_or(0) as f64 / 1024.0
    );

    // watcher-example at 10,000 endpoints.
    let n: u32 = if ctx.quick { 1_000 } else { 10_000 };
    let node = "bench-watch-node";
    let wpool = "bench-watch";
    let ips: Vec<String> = (0..n).map(|i| host(0x0a80_0000 + i + 2)).collect();
    ctx.fill(wpool, &ips, node, 48);
    let start = Instant::now();
    let mut agent = start_agent(ctx, node, None, 19465);
    let pid = agent.id();
    let mut synced = None;
    while start.elapsed() < Duration::from_secs(180) {
        let m = http_get(19465, "/metrics");
        if metric(&m, "netendpoint_agent_rules").is_some_and(|r| r as u32 >= n) {
            synced = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let cpu_sync = proc_cpu_s(pid);
    std::thread::sleep(Duration::from_secs(10));
    let cpu_idle = proc_cpu_s(pid).zip(cpu_sync).map(|(a, b)| (a - b) / 10.0 * 100.0);
    let rss = proc_status(pid, "VmRSS:");
    let hwm = proc_status(pid, "VmHWM:");
    let _ = agent.kill();
    let _ = agent.wait();
    let _ = writeln!(
        report,
        "| watcher-example (in-memory table, no state file): time to list and install {n} rules | {} |",
        synced.map_or("not reached".into(), |d| format!("{:.2} s", d.as_secs_f64()))
    );
    let _ = writeln!(
        report,
        "| watcher-example: CPU time for that initial sync | {} |",
        cpu_sync.map_or("n/a".into(), |c| format!("{c:.2} s"))
    );
    let _ = writeln!(
        report,
        "| watcher-example: RSS at {n} endpoints (peak) | {} ({}) |",
        rss.map_or("n/a".into(), |k| format!("{:.1} MB", k as f64 / 1024.0)),
        hwm.map_or("n/a".into(), |k| format!("{:.1} MB", k as f64 / 1024.0))
    );
    let _ = writeln!(
        report,
        "| watcher-example: CPU while idle at {n} endpoints | {} |",
        cpu_idle.map_or("n/a".into(), |c| format!("{c:.1} % of a core"))
    );
    ctx.delete_pool(wpool);
}

/// A small SVG line chart: throughput by concurrency for each IPAM.
fn svg(series: &Series) -> String {
    let (w, h, left, bottom) = (640.0, 360.0, 60.0, 40.0);
    let max =
        series.iter().flat_map(|(_, r)| r.iter().map(|(_, s)| s.per_sec)).filter(|v| v.is_finite()).fold(1.0, f64::max);
    let levels: Vec<usize> = series.first().map(|(_, r)| r.iter().map(|(c, _)| *c).collect()).unwrap_or_default();
    let x = |i: usize| left + (w - left - 160.0) * i as f64 / (levels.len().max(2) - 1) as f64;
    let y = |v: f64| (h - bottom) - (h - bottom - 20.0) * v / max;
    let colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let _ = writeln!(s, "<text x=\"{}\" y=\"14\">ADDs per second by concurrency (one process per ADD)</text>", left);
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>",
        h - bottom,
        w - 150.0,
        h - bottom
    );
    let _ = writeln!(s, "<line x1=\"{left}\" y1=\"20\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>", h - bottom);
    for k in 0..=4 {
        let v = max * f64::from(k) / 4.0;
        let _ = writeln!(s, "<text x=\"4\" y=\"{:.0}\">{v:.0}</text>", y(v) + 4.0);
    }
    for (i, c) in levels.iter().enumerate() {
        let _ = writeln!(s, "<text x=\"{:.0}\" y=\"{}\">{c}</text>", x(i) - 6.0, h - bottom + 16.0);
    }
    for (n, (name, rows)) in series.iter().enumerate() {
        let color = colors[n % colors.len()];
        let pts: Vec<String> =
            rows.iter().enumerate().map(|(i, (_, st))| format!("{:.1},{:.1}", x(i), y(st.per_sec))).collect();
        let _ =
            writeln!(s, "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>", pts.join(" "));
        let _ =
            writeln!(s, "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{name}</text>", w - 145.0, 40.0 + 18.0 * n as f64);
    }
    s.push_str("</svg>\n");
    s
}
