//! Benchmark harness: prints figures, asserts nothing about timings.
//!
//! Runs against the real API server started by `scripts/bench.sh`, with every
//! ADD a separate process as a runtime makes it. Measures, in one run:
//! ADD latency and throughput at several concurrencies beside the API-write
//! floor, host-local and (when built) whereabouts; API requests per ADD and
//! DEL counted at the server; 64 nodes ADDing at once into a /24 kept 90 %
//! full; ADD latency by pool size; release-to-reuse latency with
//! watcher-example acknowledging; replacement ADDs that come before the old
//! pod's DEL; ADD in a /64 with a large exclusion; what STATUS costs the API
//! server; many nodes ADDing into one empty pool; footprints; and, last and
//! only without `--quick`, a /15 filled to 50 % and 90 % with 64 nodes ADDing
//! at once into it and delete-and-recreate churn across 16 nodes (with
//! `--quick` the churn runs in a /20 instead). Then what a lease costs in
//! etcd and in a list, and the API server's CPU per 1,000 ADDs; and what
//! the admission policies of deploy/ add to an ADD of the plugin's
//! node-bound identity. Prints each
//! case's elapsed time. Writes `BENCHMARKS.md` and two SVG plots.
//!
//! Usage: `netendpoint-bench --kubeconfig K --bin-dir target/release --cni-dir tests/bin/cni
//! [--whereabouts PATH] [--out BENCHMARKS.md] [--plot docs/bench.svg] [--scale-plot docs/bench-scale.svg]
//! [--quick] [--large-prefix 15]`
//!
//! `--scale-plot` defaults to `bench-scale.svg` beside `--plot`. A
//! `--large-prefix` above 15 is a trial: the large cases run with fewer ADDs
//! and cycles.
//!
//! `BENCH_ONLY=case,case` runs only those cases (latency, requests, full24,
//! scale, reuse, replace, exclude, status, nodes, footprint, controller, churn, large),
//! prints the report and writes no file.

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
use kube::api::{Api, DeleteParams, GetParams, ListParams, ObjectMeta, PostParams};
use netendpoint_crd::{
    ANNOTATION_FORCE_RELEASE_AFTER, LABEL_IP_FAMILY, LABEL_NETWORK, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID,
    LABEL_POOL, NetworkEndpoint, PodRef, block_label_value, endpoint_name, label_value,
};
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
    /// Figures one case leaves for a later section (plots, lean leases, load).
    shared: Mutex<Shared>,
}

/// Figures gathered across cases for the sections and plots that combine them.
#[derive(Default)]
struct Shared {
    /// ADD p99 by pool: (series, prefix length, p99 ms), for `bench-scale.svg`.
    scale_points: Vec<(&'static str, u8, f64)>,
    /// The /24-at-90 % row of "64 nodes at once", to compare the /15 with.
    full24: Option<AtOnce>,
    /// API server CPU during measured runs.
    load: Vec<Load>,
    /// What a lease costs, measured beside the largest fill of the run.
    lean: Option<Lean>,
    /// Each case's elapsed wall time.
    elapsed: Vec<(String, f64)>,
}

/// The API server's CPU seconds over `ops` operations of one kind.
struct Load {
    during: String,
    ops: usize,
    unit: &'static str,
    cpu_s: f64,
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
    run_many_then(n, concurrency, make, &|_, _| {})
}

/// [`run_many`], where each worker calls `then(i, stdout)` after invocation
/// `i` succeeded and before it starts its next one. `then` is not in the
/// latency, but it is in the wall time (ADDs/s).
fn run_many_then(
    n: usize,
    concurrency: usize,
    make: &(dyn Fn(usize) -> Invocation + Sync),
    then: &(dyn Fn(usize, &str) + Sync),
) -> (Stats, Vec<String>) {
    let (lat, failures, wall) = run_many_timed(n, concurrency, make, then);
    (Stats::of(lat, failures.len(), wall), failures)
}

/// Runs `n` invocations, `concurrency` at a time, calling `then` with the
/// stdout of each that succeeded; returns the latencies of those, the
/// outputs of those that failed, and the wall time.
fn run_many_timed(
    n: usize,
    concurrency: usize,
    make: &(dyn Fn(usize) -> Invocation + Sync),
    then: &(dyn Fn(usize, &str) + Sync),
) -> (Vec<Duration>, Vec<String>, Duration) {
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
                        then(i, &out);
                    } else {
                        failures.lock().unwrap().push(out);
                    }
                }
            });
        }
    });
    (lat.into_inner().unwrap(), failures.into_inner().unwrap(), wall.elapsed())
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
    /// `in_flight` at a time, all on `node`. See [`Ctx::fill_owned`].
    fn fill(&self, pool: &str, ips: &[String], node: &str, in_flight: usize) -> usize {
        self.fill_owned(pool, ips, &[node.to_string()], in_flight)
    }

    /// Creates leases of `pool` at `ips` directly (not through the plugin),
    /// `in_flight` at a time, shaped as the plugin shapes its own (see
    /// [`filler`]), so that block lists find them and their sizes are those
    /// of real leases. The lease at `ips[i]` is on node `owners[i % len]`,
    /// with container ID [`fill_container`], so that the plugin's DEL on
    /// that node releases it. Returns how many were created.
    fn fill_owned(&self, pool: &str, ips: &[String], owners: &[String], in_flight: usize) -> usize {
        let (created, first_err) = self.rt.block_on(async {
            use futures::StreamExt;
            let api: Api<NetworkEndpoint> = Api::all(self.client.clone());
            futures::stream::iter(ips.iter().enumerate().map(|(i, ip)| {
                let api = api.clone();
                let ep = filler(pool, ip, &owners[i % owners.len()]);
                async move { api.create(&PostParams::default(), &ep).await }
            }))
            .buffer_unordered(in_flight)
            .fold((0, None), |(n, first_err), r| async move {
                match r {
                    Ok(_) => (n + 1, first_err),
                    Err(e) => (n, first_err.or(Some(e.to_string()))),
                }
            })
            .await
        });
        if let Some(e) = first_err {
            eprintln!("fill {pool}: {} of {} creates failed, first: {e}", ips.len() - created, ips.len());
        }
        created
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

    /// CPU seconds (user + system) the kube-testenv process has used so far.
    fn apiserver_cpu_s(&self) -> Option<f64> {
        proc_cpu_s(self.apiserver_pid()?)
    }

    /// Size in bytes of etcd's data file in the test environment's state directory.
    fn etcd_db_bytes(&self) -> Option<u64> {
        let dir = self.kubeconfig.parent()?;
        Some(std::fs::metadata(dir.join("etcd/member/snap/db")).ok()?.len())
    }

    /// The plugin configuration of node `node` in `pool`, with the node's own
    /// `dataDir` under `dir`, as a real node has.
    fn node_conf(&self, pool: &str, subnet: &str, node: &str, dir: &str) -> Vec<u8> {
        self.netconf(pool, subnet, json!({"nodeName": node, "dataDir": self.work.join(dir).join(node)}))
    }

    /// Deletes the lease named `name` (one DELETE, no preconditions).
    fn delete_lease(&self, name: &str) {
        let api: Api<NetworkEndpoint> = Api::all(self.client.clone());
        if let Err(e) = self.rt.block_on(api.delete(name, &DeleteParams::default())) {
            eprintln!("delete {name}: {e}");
        }
    }

    /// The body of the answer to `req` ("" on an error, which is printed).
    fn text(&self, req: http::Request<Vec<u8>>) -> String {
        let uri = req.uri().clone();
        self.rt.block_on(self.client.request_text(req)).unwrap_or_else(|e| {
            eprintln!("GET {uri}: {e}");
            String::new()
        })
    }

    /// Runs `f` as the case `name`: records and prints its elapsed time.
    fn timed<T>(&self, name: &str, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        let s = t.elapsed().as_secs_f64();
        eprintln!("bench: {name} took {s:.0} s");
        self.shared.lock().unwrap().elapsed.push((name.to_string(), s));
        out
    }
}

/// The container ID of the lease [`Ctx::fill_owned`] creates at `ip` in `pool`.
fn fill_container(pool: &str, ip: &str) -> String {
    format!("fill.{pool}.{ip}")
}

/// A lease at `ip` on `node` as the plugin would create it for a pod:
/// the same labels (pool, node, block, IP family, network, pod namespace,
/// name and UID), the bound annotation and the same spec fields.
fn filler(pool: &str, ip: &str, node: &str) -> NetworkEndpoint {
    let container = fill_container(pool, ip);
    let addr: std::net::IpAddr = ip.parse().unwrap();
    let uid = format!("00000000-0000-4000-8000-{:012x}", ip_u128(addr) & 0xffff_ffff_ffff);
    let mut ep = netendpoint_tests::lease(pool, ip, &container, node, &[]);
    let labels = ep.metadata.labels.get_or_insert_with(Default::default);
    for (k, v) in [
        (LABEL_IP_FAMILY, if addr.is_ipv4() { "4".to_string() } else { "6".to_string() }),
        (LABEL_NETWORK, label_value(pool)),
        (LABEL_POD_NAMESPACE, "default".to_string()),
        (LABEL_POD_NAME, label_value(&container)),
        (LABEL_POD_UID, uid.clone()),
    ] {
        labels.insert(k.to_string(), v);
    }
    ep.metadata.annotations = Some([(ANNOTATION_FORCE_RELEASE_AFTER.to_string(), "600s".to_string())].into());
    ep.spec.force_release_after = Some("600s".into());
    ep.spec.pod = Some(PodRef { namespace: "default".into(), name: container, uid });
    ep
}

fn ip_u128(ip: std::net::IpAddr) -> u128 {
    match ip {
        std::net::IpAddr::V4(v) => u128::from(u32::from(v)),
        std::net::IpAddr::V6(v) => u128::from(v),
    }
}

const REQUESTS: &str = "apiserver_request_total";
/// The server records response sizes for reads only (GET and LIST), not for writes.
const RESPONSE_BYTES: &str = "apiserver_response_sizes_sum";
/// Objects a LIST served from the watch cache looked at (the whole resource, when no index serves the selector).
const LIST_SCANNED: &str = "apiserver_cache_list_fetched_objects_total";
/// Objects a LIST served from the watch cache returned.
const LIST_RETURNED: &str = "apiserver_cache_list_returned_objects_total";

/// NetworkEndpoint traffic at the server between two scrapes.
#[derive(Clone, Copy, Default)]
struct ServerCounts {
    /// Requests of every verb except DELETE (which the ADDs measured here never send).
    requests: f64,
    /// Creates answered 409 (the address was taken).
    conflicts: f64,
    lists: f64,
    /// Objects LISTs returned.
    returned: f64,
    /// Objects LISTs looked at in the watch cache.
    scanned: f64,
    /// Response bytes (GET and LIST; see [`RESPONSE_BYTES`]).
    bytes: f64,
}

impl ServerCounts {
    fn between(before: &Metrics, after: &Metrics) -> Self {
        Self {
            requests: after.since(before, REQUESTS, |l| l.networkendpoints() && l.get("verb") != "DELETE"),
            conflicts: after
                .since(before, REQUESTS, |l| l.networkendpoints() && l.get("verb") == "POST" && l.get("code") == "409"),
            lists: after.since(before, REQUESTS, |l| l.networkendpoints() && l.get("verb") == "LIST"),
            returned: after.since(before, LIST_RETURNED, |l| l.networkendpoints()),
            scanned: after.since(before, LIST_SCANNED, |l| l.networkendpoints()),
            bytes: after.since(before, RESPONSE_BYTES, |l| l.networkendpoints()),
        }
    }
}

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
        shared: Mutex::new(Shared::default()),
    };
    ctx.ensure_nodes(&["bench-node".to_string()]);
    let mut report = String::new();
    let started = Instant::now();

    let _ = writeln!(report, "# Benchmarks\n");
    let _ = writeln!(
        report,
        "Generated by `make bench` in one run on one machine ({} cores), against the real kube-apiserver \
         v1.36 + etcd of the test environment on loopback. Every ADD is a separate process, as a runtime makes it. \
         Figures, not assertions; they vary from run to run. Load average when the run began (1, 5, 15 min): {}; \
         anything else running on the machine slows every figure.\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(", "))
            .unwrap_or_else(|_| "unknown".into())
    );

    if let Ok(only) = std::env::var("BENCH_ONLY") {
        for case in only.split(',') {
            let case = case.trim();
            ctx.timed(case, || match case {
                "latency" => drop(bench_latency(&ctx, &mut report)),
                "requests" => bench_requests(&ctx, &mut report),
                "full24" => bench_full_24(&ctx, &mut report),
                "scale" => bench_pool_scale(&ctx, &mut report),
                "reuse" => bench_release_to_reuse(&ctx, &mut report),
                "replace" => bench_replacement_before_del(&ctx, &mut report),
                "exclude" => bench_exclusion(&ctx, &mut report),
                "status" => bench_status(&ctx, &mut report),
                "nodes" => bench_many_nodes(&ctx, &mut report),
                "footprint" => bench_footprint(&ctx, &mut report),
                "controller" => bench_controller(&ctx, &mut report),
                "admission" => bench_admission(&ctx, &mut report),
                "churn" => bench_churn_small(&ctx, &mut report),
                "large" => bench_large_pool(&ctx, &mut report),
                other => panic!("BENCH_ONLY: unknown case {other:?}"),
            });
        }
        report_lean(&ctx, &mut report);
        report_load(&ctx, &mut report);
        report_elapsed(&ctx, &mut report, started);
        print!("{report}");
        let _ = std::fs::remove_dir_all(&ctx.work);
        return;
    }
    let latency = ctx.timed("latency", || bench_latency(&ctx, &mut report));
    ctx.timed("requests", || bench_requests(&ctx, &mut report));
    ctx.timed("full24", || bench_full_24(&ctx, &mut report));
    ctx.timed("exclude", || bench_exclusion(&ctx, &mut report));
    ctx.timed("scale", || bench_pool_scale(&ctx, &mut report));
    ctx.timed("reuse", || bench_release_to_reuse(&ctx, &mut report));
    ctx.timed("replace", || bench_replacement_before_del(&ctx, &mut report));
    ctx.timed("status", || bench_status(&ctx, &mut report));
    ctx.timed("nodes", || bench_many_nodes(&ctx, &mut report));
    ctx.timed("footprint", || bench_footprint(&ctx, &mut report));
    ctx.timed("controller", || bench_controller(&ctx, &mut report));
    ctx.timed("admission", || bench_admission(&ctx, &mut report));
    if ctx.quick {
        ctx.timed("churn", || bench_churn_small(&ctx, &mut report));
    } else {
        // Last: it leaves the API server with the most to digest.
        ctx.timed("large", || bench_large_pool(&ctx, &mut report));
    }
    report_lean(&ctx, &mut report);
    report_load(&ctx, &mut report);
    report_elapsed(&ctx, &mut report, started);

    print!("{report}");
    if let Some(out) = args.get("out") {
        std::fs::write(out, &report).unwrap();
    }
    if let Some(plot) = args.get("plot") {
        std::fs::write(plot, svg(&latency)).unwrap();
    }
    let scale_plot = args
        .get("scale-plot")
        .map(PathBuf::from)
        .or_else(|| args.get("plot").map(|p| PathBuf::from(p).with_file_name("bench-scale.svg")));
    if let Some(path) = scale_plot {
        std::fs::write(path, svg_scale(&ctx.shared.lock().unwrap().scale_points)).unwrap();
    }
    let _ = std::fs::remove_dir_all(&ctx.work);
}

/// The per-case elapsed times and the total.
fn report_elapsed(ctx: &Ctx, report: &mut String, started: Instant) {
    let shared = ctx.shared.lock().unwrap();
    let _ = writeln!(
        report,
        "## Elapsed time per case
"
    );
    let _ = writeln!(report, "| case | elapsed s |");
    let _ = writeln!(report, "|---|---:|");
    for (name, s) in &shared.elapsed {
        let _ = writeln!(report, "| {name} | {s:.0} |");
    }
    let _ = writeln!(report, "\nTotal harness time: {:.0} s.", started.elapsed().as_secs_f64());
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
    let cpu0 = ctx.apiserver_cpu_s();
    let (add, _) = run_many(n, 1, &|i| ctx.add(&conf, &format!("req-{i}")));
    let cpu1 = ctx.apiserver_cpu_s();
    let mid = ctx.requests();
    if let (Some(a), Some(b)) = (cpu0, cpu1) {
        ctx.shared.lock().unwrap().load.push(Load {
            during: "/24, empty, concurrency 1 (the requests case above)".into(),
            ops: n,
            unit: "ADDs",
            cpu_s: b - a,
        });
    }
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
        "![ADD p99 by pool size and fill](docs/bench-scale.svg)\n\nThe plot shows the p99s of this table, of the large pool at 50 % and 90 % (one ADD at a time) and of 64 nodes ADDing at once into a /24 and the large pool at 90 % (sections below).\n"
    );
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
        ctx.shared.lock().unwrap().scale_points.push((SERIES_50, prefix, s.p99_ms));
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
    let subnet = format!("{}/{prefix}", host(net));
    let usable = (1u32 << (32 - prefix)) - 3; // minus network, gateway, broadcast
    let mut rng = fastrand::Rng::with_seed(u64::from(prefix) + 100);
    let mut hosts: Vec<u32> = (2..usable + 2).collect();
    rng.shuffle(&mut hosts);
    let conf = ctx.netconf(&pool, &subnet, json!({}));
    let nodes = many_node_names(ctx, AT_ONCE_NODES);
    let pid = ctx.apiserver_pid();
    let rss_mb = || {
        pid.and_then(|p| proc_status(p, "VmRSS:")).map_or("n/a".to_string(), |k| format!("{:.0}", k as f64 / 1024.0))
    };
    let in_flight = 32;
    let adds = 40;
    let _ = writeln!(report, "## A large pool: /{prefix} filled to 50 % and 90 %\n");
    let _ = writeln!(
        report,
        "{usable} usable addresses. Leases at random addresses are created directly, {in_flight} in flight, first to 50 % then to 90 %, \
         shaped as the plugin's and spread over {AT_ONCE_NODES} registered node names; \
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
    // The fill's leases of the churning nodes, for their DELs.
    let mut victims: Vec<Vec<String>> = vec![Vec::new(); CHURN_NODES];
    let mut storage = Storage::before(ctx);
    for percent in [50u32, 90] {
        let target = (u64::from(usable) * u64::from(percent) / 100) as usize;
        let ips: Vec<String> = hosts[filled..target].iter().map(|h| host(net + h)).collect();
        let t = Instant::now();
        let created = ctx.fill_owned(&pool, &ips, &nodes, in_flight);
        let fill_s = t.elapsed().as_secs_f64();
        for (i, ip) in ips.iter().enumerate() {
            if let Some(v) = victims.get_mut(i % nodes.len()) {
                v.push(fill_container(&pool, ip));
            }
        }
        filled = target;
        leased += created;
        if percent == 90 {
            storage.after(ctx, leased);
        }
        let before = ctx.metrics();
        let (s, fails) = run_many(adds, 1, &|i| ctx.add(&conf, &format!("large-{percent}-{i}")));
        let after = ctx.metrics();
        report_failures("large pool", percent as usize, &fails);
        leased += s.n - s.failed;
        ctx.shared.lock().unwrap().scale_points.push((
            if percent == 50 { SERIES_50 } else { SERIES_90 },
            prefix,
            s.p99_ms,
        ));
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
    let _ = writeln!(report);

    let at_once = ctx.timed("large, of which 64 nodes at once", || {
        bench_at_once_large(ctx, report, &pool, &subnet, usable, leased, &nodes)
    });
    leased += at_once;
    let fill = format!("{:.1} %", 100.0 * leased as f64 / f64::from(usable));
    ctx.timed("large, of which churn", || {
        let cycles = if ctx.large_trial() { 500 } else { 2000 };
        let cap = Duration::from_secs(CHURN_CAP_S);
        let churners = &nodes[..CHURN_NODES];
        let confs: Vec<Vec<u8>> = churners.iter().map(|n| ctx.node_conf(&pool, &subnet, n, "large-nodes")).collect();
        let r = churn(ctx, churners, &confs, victims, cycles, Some(cap));
        report_churn(ctx, report, &format!("/{prefix}"), &fill, &r);
    });
    ctx.timed("large, of which lease sizes", || {
        let conf = ctx.node_conf(&pool, &subnet, &nodes[0], "large-nodes");
        let lean = measure_lean(ctx, &format!("/{prefix} at {fill}"), &pool, &conf, storage);
        ctx.shared.lock().unwrap().lean = Some(lean);
    });

    let t = Instant::now();
    ctx.delete_pool(&pool);
    let _ = writeln!(
        report,
        "Deleting the /{prefix}'s {leased} leases (deletecollection, pages of 5,000) took {:.0} s.\n",
        t.elapsed().as_secs_f64()
    );
}

const SERIES_50: &str = "50 % full, one ADD at a time";
const SERIES_90: &str = "90 % full, one ADD at a time";
const SERIES_AT_ONCE: &str = "90 % full, 64 nodes at once";

/// Node names that ADD at once, and whose leases the fills spread over.
const AT_ONCE_NODES: usize = 64;
/// Node names that churn: the first of [`AT_ONCE_NODES`].
const CHURN_NODES: usize = 16;
/// In the large pool, churn starts no cycle after this many seconds, to
/// bound the run: every LIST there looks at every lease on the server.
const CHURN_CAP_S: u64 = 420;

impl Ctx {
    /// A `--large-prefix` above 15: a trial of the large cases, with fewer ADDs and cycles.
    fn large_trial(&self) -> bool {
        self.large_prefix > 15
    }
}

/// The size of the plugin's address blocks (label `netendpoint.dev/block`), read off the label function.
fn block_addresses() -> u32 {
    let last = Ipv4Addr::new(10, 0, 255, 255);
    let first: Ipv4Addr = block_label_value(last.into()).parse().unwrap();
    u32::from(last) - u32::from(first) + 1
}

/// `n` registered node names, `bench-big-0` onwards.
fn many_node_names(ctx: &Ctx, n: usize) -> Vec<String> {
    let names: Vec<String> = (0..n).map(|i| format!("bench-big-{i}")).collect();
    ctx.ensure_nodes(&names);
    names
}

/// The first IP of an ADD result on stdout.
fn added_ip(stdout: &str) -> Option<std::net::IpAddr> {
    let v: Value = serde_json::from_str(stdout).ok()?;
    v["ips"][0]["address"].as_str()?.split('/').next()?.parse().ok()
}

/// One run of many nodes ADDing at once into a pool at 90 %, with its figures counted at the server.
#[derive(Clone)]
struct AtOnce {
    pool: String,
    fill: String,
    nodes: usize,
    concurrency: usize,
    stats: Stats,
    server: ServerCounts,
    cpu_s: Option<f64>,
}

impl AtOnce {
    fn header(report: &mut String) {
        let _ = writeln!(
            report,
            "| pool | fill at ADD start | nodes | concurrency | ADDs | failed | p50 ms | p99 ms | ADDs/s | API requests per ADD | 409s per ADD | LISTs per ADD | objects returned per LIST | objects scanned per LIST | response bytes per ADD | API server CPU s per 1,000 ADDs |"
        );
        let _ = writeln!(report, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    }

    fn row(&self, report: &mut String) {
        let n = self.stats.n.max(1) as f64;
        let c = &self.server;
        let per_list = |v: f64| if c.lists > 0.0 { format!("{:.0}", v / c.lists) } else { "–".into() };
        let _ = writeln!(
            report,
            "| {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {} | {} | {:.0} | {} |",
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
            per_list(c.returned),
            per_list(c.scanned),
            c.bytes / n,
            self.cpu_s.map_or("n/a".into(), |s| format!("{:.1}", s * 1000.0 / n)),
        );
    }
}

/// `n` ADDs spread round-robin over `confs` (one per node), `concurrency`
/// at a time, counted at the server. With `recycle`, the harness deletes
/// each ADD's lease (one DELETE by name, which [`ServerCounts`] leaves out)
/// as soon as the ADD returns. Returns the figures and the mean number of
/// such leases not yet deleted when an ADD started.
fn adds_at_once(
    ctx: &Ctx,
    pool: &str,
    confs: &[Vec<u8>],
    n: usize,
    concurrency: usize,
    tag: &str,
    recycle: bool,
) -> (Stats, ServerCounts, Option<f64>, f64) {
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
    report_failures(tag, concurrency, &fails);
    let cpu = cpu0.zip(cpu1).map(|(a, b)| b - a);
    (s, ServerCounts::between(&before, &after), cpu, held_sum.load(Ordering::SeqCst) as f64 / n.max(1) as f64)
}

fn bench_full_24(ctx: &Ctx, report: &mut String) {
    let pool = "bench-full24";
    let net: u32 = 0x0a59_0000; // 10.89.0.0/24
    let subnet = "10.89.0.0/24";
    let usable: u32 = 253;
    let concurrency = AT_ONCE_NODES;
    let n = if ctx.quick { 128 } else { 640 };
    let nodes = many_node_names(ctx, AT_ONCE_NODES);
    let target = ((usable * 90 + 50) / 100) as usize;
    let mut rng = fastrand::Rng::with_seed(24);
    let mut hosts: Vec<u32> = (2..usable + 2).collect();
    rng.shuffle(&mut hosts);
    let ips: Vec<String> = hosts[..target].iter().map(|h| host(net + h)).collect();
    let leased = ctx.fill_owned(pool, &ips, &nodes, 48);
    let confs: Vec<Vec<u8>> = nodes.iter().map(|node| ctx.node_conf(pool, subnet, node, "full24")).collect();
    let (stats, server, cpu_s, held) = adds_at_once(ctx, pool, &confs, n, concurrency, "full24", true);
    let row = AtOnce {
        pool: "/24".into(),
        fill: format!("{:.1} % (mean)", 100.0 * (leased as f64 + held) / f64::from(usable)),
        nodes: nodes.len(),
        concurrency,
        stats,
        server,
        cpu_s,
    };
    let _ = writeln!(report, "## 64 nodes ADDing at once into a /24 kept 90 % full\n");
    let _ = writeln!(
        report,
        "The reference for the large-pool case near the end (not run with `--quick`): {} registered node names, each with its own `dataDir`, run {n} ADDs at concurrency \
         {concurrency}, round-robin over the nodes, one process per ADD (64 processes at once do run on 2 cores, slowly, as in the latency case). \
         A /24 at 90 % has only {} free addresses, so the fill is kept there: {leased} of {usable} addresses are leased first \
         (direct creates shaped as the plugin's, spread over the same nodes), and the harness deletes each ADD's lease (one DELETE \
         by name, left out of the request counts) as soon as the ADD returns. The fill column is the mean, over the ADDs, of the \
         leases present when the ADD started, over {usable}; leases of ADDs still running are not in it, so some ADDs find the \
         pool fuller and wait for one of those deletes. So many nodes share the /24's few free addresses (and, in a pool this \
         small, the same start point), which the 409s show. An ADD whose 6 probes miss lists one block of {block} addresses by its \
         label. Counted at the server, NetworkEndpoint requests only: API requests, creates answered 409, LISTs, \
         the objects those LISTs returned and the objects they looked at in the watch cache (`apiserver_cache_list_returned_objects_total`, \
         `apiserver_cache_list_fetched_objects_total`), and response bytes (`apiserver_response_sizes_sum`, all verbs, whose labels \
         are group, version, resource, subresource, scope, component and verb; the server records it for GET and LIST only, not \
         for the creates). API server CPU is the kube-testenv process (kube-apiserver and etcd in one), from /proc, \
         here including the harness's DELETEs.\n",
        nodes.len(),
        usable as usize - leased,
        block = block_addresses()
    );
    AtOnce::header(report);
    row.row(report);
    let _ = writeln!(report);
    let mut shared = ctx.shared.lock().unwrap();
    shared.scale_points.push((SERIES_AT_ONCE, 24, row.stats.p99_ms));
    if let Some(cpu_s) = row.cpu_s {
        shared.load.push(Load {
            during: format!(
                "/24 kept 90 % full, {} nodes at once, concurrency {concurrency} (and the harness's DELETEs)",
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

/// 64 nodes ADD at once into the large pool at 90 %. Returns the ADDs that succeeded.
fn bench_at_once_large(
    ctx: &Ctx,
    report: &mut String,
    pool: &str,
    subnet: &str,
    usable: u32,
    leased: usize,
    nodes: &[String],
) -> usize {
    let prefix = ctx.large_prefix;
    let concurrency = AT_ONCE_NODES;
    let n = if ctx.large_trial() { 256 } else { 640 };
    let confs: Vec<Vec<u8>> = nodes.iter().map(|node| ctx.node_conf(pool, subnet, node, "large-nodes")).collect();
    let (stats, server, cpu_s, _) = adds_at_once(ctx, pool, &confs, n, concurrency, "at-once", false);
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
         Counted as for the /24, whose row is repeated here. An ADD whose 16 probes miss (6 in the /24: more in a set above 4,096 addresses) lists one block ({} addresses) by its label; \
         the watch cache has no index for that selector, so each LIST looks at every NetworkEndpoint on the server.\n",
        nodes.len(),
        block_addresses()
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

/// The outcome of [`churn`].
struct Churn {
    /// Cycles asked for, and the time cap that may have cut them short.
    planned: usize,
    cap: Option<Duration>,
    cycles: usize,
    nodes: usize,
    add: Stats,
    del: Stats,
    /// DELs of the fill's leases, which the node has no record of: each makes one LIST, by container ID.
    listing_dels: usize,
    server: ServerCounts,
    cpu_s: Option<f64>,
    wall_s: f64,
}

/// `cycles` delete-and-recreate cycles spread over `nodes` (node `k` with
/// plugin configuration `confs[k]`), one worker per
/// node, all at once. Each cycle DELs through the plugin one lease of its
/// node (the last of `victims[k]`, by its container ID) and then ADDs a new
/// one on the same node, so the pool's fill stays where it is. With `cap`,
/// no cycle starts after that long.
fn churn(
    ctx: &Ctx,
    nodes: &[String],
    confs: &[Vec<u8>],
    victims: Vec<Vec<String>>,
    cycles: usize,
    cap: Option<Duration>,
) -> Churn {
    let add_lat = Mutex::new(Vec::new());
    let del_lat = Mutex::new(Vec::new());
    let add_fails = Mutex::new(Vec::new());
    let del_fails = Mutex::new(Vec::new());
    let listing_dels = AtomicUsize::new(0);
    let before = ctx.metrics();
    let cpu0 = ctx.apiserver_cpu_s();
    let wall = Instant::now();
    let started = &wall;
    std::thread::scope(|s| {
        for (((k, node), conf), mut mine) in nodes.iter().enumerate().zip(confs).zip(victims) {
            let mine_cycles = cycles / nodes.len() + usize::from(k < cycles % nodes.len());
            let (add_lat, del_lat, add_fails, del_fails, listing_dels) =
                (&add_lat, &del_lat, &add_fails, &del_fails, &listing_dels);
            s.spawn(move || {
                // The pod this node's previous cycle created, which the node's
                // plugin recorded; the first cycle deletes one of the fill's.
                let mut last_added: Option<String> = None;
                for j in 0..mine_cycles {
                    if cap.is_some_and(|c| started.elapsed() > c) {
                        break;
                    }
                    let old = match last_added.take() {
                        Some(own) => own,
                        None => {
                            let Some(fill) = mine.pop() else {
                                eprintln!("churn: node {node} has no lease left to delete after {j} cycles");
                                break;
                            };
                            listing_dels.fetch_add(1, Ordering::SeqCst);
                            fill
                        }
                    };
                    match run_one(&ctx.del(conf, &old)) {
                        (true, took, _) => del_lat.lock().unwrap().push(took),
                        (false, _, out) => del_fails.lock().unwrap().push(out),
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
    let after = ctx.metrics();
    let (add_fails, del_fails) = (add_fails.into_inner().unwrap(), del_fails.into_inner().unwrap());
    report_failures("churn ADD", nodes.len(), &add_fails);
    report_failures("churn DEL", nodes.len(), &del_fails);
    let add = Stats::of(add_lat.into_inner().unwrap(), add_fails.len(), wall);
    let del = Stats::of(del_lat.into_inner().unwrap(), del_fails.len(), wall);
    Churn {
        planned: cycles,
        cap,
        cycles: add.n,
        nodes: nodes.len(),
        add,
        del,
        listing_dels: listing_dels.load(Ordering::SeqCst),
        server: ServerCounts::between(&before, &after),
        cpu_s: cpu0.zip(cpu1).map(|(a, b)| b - a),
        wall_s: wall.as_secs_f64(),
    }
}

/// The plugin's probes before a list in a pool written `/N` (IPv4): 6, or 16
/// above 4,096 usable addresses (`netendpoint_cni::commands::probes_before_list`).
fn probes_before_list(pool: &str) -> usize {
    let prefix: u32 = pool.trim_start_matches('/').parse().unwrap_or(24);
    let usable = (1u128 << (32 - prefix.min(30))) - 3;
    if usable > 4096 { 16 } else { 6 }
}

fn report_churn(ctx: &Ctx, report: &mut String, pool: &str, fill: &str, r: &Churn) {
    let c = &r.server;
    let dels = r.listing_dels as f64;
    let add_lists = c.lists - dels;
    let adds = r.add.n.max(1) as f64;
    let _ = writeln!(report, "## Churn: delete and recreate in the {pool} at 90 %\n");
    let _ = writeln!(
        report,
        "{} cycles{} in the {pool} at {fill}, spread over {} of the node names, one worker per node, all at once ({:.0} s). Each cycle DELs \
         through the plugin the pod its node's previous cycle ADDed (the first cycle of each node: a lease of the fill, at a random \
         address) and then ADDs a new one on the same node, so the fill stays where it is. Counted at the server: an ADD lists (one \
         block, or the pool) only when its {} probes miss; a DEL deletes by name from its node's record of the attachment, and lists \
         (by container ID) only without one, which is the case for the fill's leases only ({} DELs), so the LISTs by ADDs are all \
         NetworkEndpoint LISTs less one per such DEL, and the objects they returned likewise. Objects scanned per LIST covers both \
         kinds: the watch cache has no index for either selector, so each LIST looks at every NetworkEndpoint on the server. \
         Response bytes and CPU are per cycle (one DEL and one ADD).\n",
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
        probes_before_list(pool),
        r.listing_dels
    );
    let _ = writeln!(
        report,
        "| pool | nodes | cycles | failed DEL | failed ADD | DEL p50 ms | ADD p50 ms | ADD p99 ms | LISTs by ADDs | ADD LISTs per ADD | objects returned per ADD LIST | objects scanned per LIST | 409s per ADD | response bytes per cycle | API server CPU s per 1,000 cycles |"
    );
    let _ = writeln!(report, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        report,
        "| {pool} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {:.2} | {} | {} | {:.2} | {:.0} | {} |",
        r.nodes,
        r.cycles,
        r.del.failed,
        r.add.failed,
        r.del.p50_ms,
        r.add.p50_ms,
        r.add.p99_ms,
        add_lists,
        add_lists / adds,
        if add_lists > 0.0 { format!("{:.0}", (c.returned - dels) / add_lists) } else { "–".into() },
        if c.lists > 0.0 { format!("{:.0}", c.scanned / c.lists) } else { "–".into() },
        c.conflicts / adds,
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
fn bench_churn_small(ctx: &Ctx, report: &mut String) {
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
    let mut victims: Vec<Vec<String>> = vec![Vec::new(); nodes.len()];
    for (i, ip) in ips.iter().enumerate() {
        victims[i % nodes.len()].push(fill_container(pool, ip));
    }
    let fill = format!("{:.1} %", 100.0 * leased as f64 / f64::from(usable));
    let cycles = if ctx.quick { 100 } else { 2000 };
    let confs: Vec<Vec<u8>> = nodes.iter().map(|n| ctx.node_conf(pool, subnet, n, "churn-nodes")).collect();
    let r = churn(ctx, &nodes, &confs, victims, cycles, None);
    report_churn(ctx, report, "/20", &fill, &r);
    let conf = ctx.node_conf(pool, subnet, &nodes[0], "churn-nodes");
    let lean = measure_lean(ctx, &format!("/20 at {fill}"), pool, &conf, storage);
    ctx.shared.lock().unwrap().lean = Some(lean);
    ctx.delete_pool(pool);
}

/// etcd's size before and after a fill.
struct Storage {
    db_before: Option<u64>,
    db_after: Option<u64>,
    leases: usize,
}

impl Storage {
    fn before(ctx: &Ctx) -> Self {
        Self { db_before: ctx.etcd_db_bytes(), db_after: None, leases: 0 }
    }

    /// Records the size now, with `leases` created since [`Storage::before`].
    fn after(&mut self, ctx: &Ctx, leases: usize) {
        self.db_after = ctx.etcd_db_bytes();
        self.leases = leases;
    }
}

/// What one lease costs, stored and listed.
struct Lean {
    pool: String,
    /// JSON bytes of the parts of one plugin-created lease, as GET returns it.
    parts: Vec<(&'static str, usize)>,
    total: usize,
    /// The object without its resourceVersion (which etcd does not store), and the etcd key.
    stored: usize,
    key: usize,
    /// One lease of the fill, for comparison.
    filler_total: usize,
    list_full: (usize, usize),
    list_meta: (usize, usize),
    storage: Storage,
    /// `apiserver_resource_size_estimate_bytes` and `apiserver_resource_objects` for NetworkEndpoints.
    estimate: (f64, f64),
}

fn measure_lean(ctx: &Ctx, pool_desc: &str, pool: &str, conf: &[u8], storage: Storage) -> Lean {
    let api: Api<NetworkEndpoint> = Api::all(ctx.client.clone());
    let url = api.resource_url().to_string();
    let mut add = ctx.add(conf, "lean-sample");
    for (k, v) in &mut add.env {
        if k == "CNI_ARGS" {
            v.push_str(";K8S_POD_UID=6f1d2c3b-4a59-4e68-9d7c-8b9a0f1e2d3c");
        }
    }
    let (ok, _, out) = run_one(&add);
    let sample: Value = match (ok, added_ip(&out)) {
        (true, Some(ip)) => {
            let req = kube::core::Request::new(&url).get(&endpoint_name(pool, ip), &GetParams::default()).unwrap();
            serde_json::from_str(&ctx.text(req)).unwrap_or_default()
        }
        _ => {
            eprintln!("lean: sample ADD failed: {}", out.trim());
            Value::Null
        }
    };
    let len = |v: &Value| if v.is_null() { 0 } else { serde_json::to_string(v).map_or(0, |s| s.len()) };
    let meta = &sample["metadata"];
    let parts = vec![
        ("metadata.managedFields", len(&meta["managedFields"])),
        ("metadata.labels", len(&meta["labels"])),
        ("metadata.annotations", len(&meta["annotations"])),
        ("spec", len(&sample["spec"])),
    ];
    let total = len(&sample);
    let name = meta["name"].as_str().unwrap_or_default().to_string();
    let mut unstored = sample.clone();
    if let Some(m) = unstored["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    let first_filler = {
        let lp = ListParams::default()
            .labels(&format!("{LABEL_POOL}={},netendpoint.dev/pod-namespace=default", label_value(pool)))
            .limit(50);
        let req = kube::core::Request::new(&url).list(&lp).unwrap();
        let v: Value = serde_json::from_str(&ctx.text(req)).unwrap_or_default();
        v["items"]
            .as_array()
            .and_then(|a| a.iter().find(|i| i["spec"]["containerID"].as_str().is_some_and(|c| c.starts_with("fill."))))
            .cloned()
            .unwrap_or_default()
    };
    let page = |meta_only: bool| {
        let lp = ListParams::default().labels(&format!("{LABEL_POOL}={}", label_value(pool))).limit(500);
        let r = kube::core::Request::new(&url);
        let req = if meta_only { r.list_metadata(&lp) } else { r.list(&lp) }.unwrap();
        let body = ctx.text(req);
        let items =
            serde_json::from_str::<Value>(&body).ok().and_then(|v| v["items"].as_array().map(Vec::len)).unwrap_or(0);
        (body.len(), items)
    };
    let m = ctx.metrics();
    Lean {
        pool: pool_desc.to_string(),
        parts,
        total,
        stored: len(&unstored),
        key: format!("/registry/netendpoint.dev/networkendpoints/{name}").len(),
        filler_total: len(&first_filler),
        list_full: page(false),
        list_meta: page(true),
        storage,
        estimate: (
            m.sum("apiserver_resource_size_estimate_bytes", |l| l.networkendpoints()),
            m.sum("apiserver_resource_objects", |l| l.networkendpoints()),
        ),
    }
}

fn report_lean(ctx: &Ctx, report: &mut String) {
    let shared = ctx.shared.lock().unwrap();
    let Some(l) = &shared.lean else { return };
    let _ = writeln!(report, "## Lease objects: bytes stored and listed\n");
    let _ = writeln!(
        report,
        "Measured in the {}. One lease created by the plugin's ADD (with a pod UID, as kubelet passes it), fetched with a GET \
         through kube-rs, as the server stores it; each part is the JSON of its value. The pool's other leases were created by \
         the fill in the plugin's shape (the same labels, annotation and spec fields; one of them is {} bytes, against {} for \
         the plugin's, which adds a gateway). etcd keeps each lease as that JSON, less the resourceVersion, under its key.\n",
        l.pool, l.filler_total, l.total
    );
    let _ = writeln!(report, "| part of one lease | bytes | share |");
    let _ = writeln!(report, "|---|---:|---:|");
    let share = |b: usize| 100.0 * b as f64 / l.total.max(1) as f64;
    for (name, b) in &l.parts {
        let _ = writeln!(report, "| {name} | {b} | {:.0} % |", share(*b));
    }
    let rest = l.total.saturating_sub(l.parts.iter().map(|(_, b)| b).sum::<usize>());
    let _ = writeln!(
        report,
        "| the rest (name, uid, resourceVersion, creationTimestamp, generation, apiVersion, kind, keys) | {rest} | {:.0} % |",
        share(rest)
    );
    let _ = writeln!(report, "| whole object | {} | 100 % |\n", l.total);

    let s = &l.storage;
    let db = match (s.db_before, s.db_after) {
        (Some(a), Some(b)) if s.leases > 0 => format!("{:.0}", (b as f64 - a as f64) / s.leases as f64),
        _ => "n/a".into(),
    };
    let estimate = if l.estimate.0 > 0.0 && l.estimate.1 > 0.0 {
        format!(
            "`apiserver_resource_size_estimate_bytes` ÷ `apiserver_resource_objects`: {:.0} bytes per lease",
            l.estimate.0 / l.estimate.1
        )
    } else {
        "`apiserver_resource_size_estimate_bytes` is exposed but reads 0".into()
    };
    let _ = writeln!(
        report,
        "Bytes per lease in etcd: this v1.36 server does not expose `apiserver_storage_size_bytes` ({estimate}), so the figure is the \
         growth of etcd's data file (`etcd/member/snap/db` in the state directory) across the fill of {} leases, divided by them. \
         It is rough: the file grows in steps and first reuses pages freed by earlier cases' deletions. In a list: one page of up \
         to 500 leases of the pool, the full JSON list and the metadata-only list (`PartialObjectMetadataList`, which the plugin's \
         block and pool lists ask for), each body's bytes divided by its items.\n",
        s.leases
    );
    let per = |(bytes, items): (usize, usize)| {
        if items > 0 { format!("{:.0} ({items} items)", bytes as f64 / items as f64) } else { "n/a".into() }
    };
    let _ = writeln!(report, "| measure | bytes per lease |");
    let _ = writeln!(report, "|---|---:|");
    let _ = writeln!(report, "| etcd data file growth over the fill | {db} |");
    let _ = writeln!(report, "| stored value (the object less its resourceVersion) + key | {} + {} |", l.stored, l.key);
    let _ = writeln!(report, "| full list (JSON) | {} |", per(l.list_full));
    let _ = writeln!(report, "| metadata-only list | {} |\n", per(l.list_meta));
}

fn report_load(ctx: &Ctx, report: &mut String) {
    let shared = ctx.shared.lock().unwrap();
    if shared.load.is_empty() {
        return;
    }
    let _ = writeln!(report, "## API server load\n");
    let _ = writeln!(
        report,
        "CPU seconds (user + system, from `/proc/<pid>/stat`) of the kube-testenv process, which runs kube-apiserver and its etcd \
         in one, during runs measured above (nothing else uses this server meanwhile; the harness's two `/metrics` scrapes around \
         each run are outside the window).\n"
    );
    let _ = writeln!(report, "| measured during | operations | CPU s | CPU s per 1,000 operations |");
    let _ = writeln!(report, "|---|---:|---:|---:|");
    for l in &shared.load {
        let _ = writeln!(
            report,
            "| {} | {} {} | {:.2} | {:.1} |",
            l.during,
            l.ops,
            l.unit,
            l.cpu_s,
            l.cpu_s * 1000.0 / l.ops.max(1) as f64
        );
    }
    let per_1000 = |l: &Load| l.cpu_s * 1000.0 / l.ops.max(1) as f64;
    let churn_rate = 50.0;
    let adds = shared.load.iter().rev().find(|l| l.unit == "ADDs" && l.during.contains("at once"));
    let cycles = shared.load.iter().rev().find(|l| l.unit.starts_with("cycles"));
    let mut projection = Vec::new();
    if let Some(a) = adds {
        projection.push(format!(
            "{:.1} CPU s per 1,000 ADDs ({}) × {churn_rate:.0} ADDs/s ÷ 1,000 = {:.2} cores for the ADDs",
            per_1000(a),
            a.during,
            per_1000(a) * churn_rate / 1000.0
        ));
    }
    if let Some(c) = cycles {
        projection.push(format!(
            "{:.1} CPU s per 1,000 cycles ({}) × {churn_rate:.0}/s ÷ 1,000 = {:.2} cores for the ADDs and the DELs of the pods they replace",
            per_1000(c),
            c.during,
            per_1000(c) * churn_rate / 1000.0
        ));
    }
    if !projection.is_empty() {
        let _ = writeln!(
            report,
            "\nProjection to 5,000 nodes, 150,000 pods and a churn of {churn_rate:.0} pods/s: {}. On this machine, one process for \
             kube-apiserver and etcd, and at the pool sizes measured here, not 150,000 leases.",
            projection.join("; ")
        );
    }
    let _ = writeln!(report);
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
    let _ = writeln!(report);
    ctx.delete_pool(wpool);
}

/// netendpoint-controller (release build) started against 10,000 leases of
/// one pool (1 % of them releasing, held by a finalizer), its ranges in a
/// ConfigMap: time to sync (lists done, the pool figures right on
/// /metrics), RSS after the sync and after a minute idle, and CPU for the
/// sync and per idle minute.
fn bench_controller(ctx: &Ctx, report: &mut String) {
    let n: u32 = if ctx.quick { 1_000 } else { 10_000 };
    let releasing = n / 100;
    let pool = "bench-ctl";
    let node = "bench-ctl-node";
    let fin = "bench.example/agent";
    ctx.ensure_nodes(&[node.to_string()]);
    let ips: Vec<String> = (0..n).map(|i| host(0x0a70_0000 + i + 2)).collect();
    let fill_start = Instant::now();
    let created = ctx.fill(pool, &ips, node, 48);
    let fill_s = fill_start.elapsed().as_secs_f64();
    ctx.rt.block_on(async {
        use kube::api::{Patch, PatchParams};
        let api: Api<NetworkEndpoint> = Api::all(ctx.client.clone());
        for ip in &ips[..releasing as usize] {
            let name = endpoint_name(pool, ip.parse().unwrap());
            let hold = json!({"metadata": {"finalizers": [fin]}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&hold)).await.unwrap();
            api.delete(&name, &DeleteParams::default()).await.unwrap();
        }
    });
    // The pool's ranges, where the controller reads them: a ConfigMap of network configs.
    let cm_name = "bench-ctl-net-conf";
    let conf = String::from_utf8(ctx.netconf(pool, "10.112.0.0/16", json!({}))).unwrap();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(ctx.client.clone(), "default");
    let cm = k8s_openapi::api::core::v1::ConfigMap {
        metadata: ObjectMeta { name: Some(cm_name.into()), ..Default::default() },
        data: Some([("10-bench.conf".to_string(), conf)].into()),
        ..Default::default()
    };
    ctx.rt.block_on(cms.create(&PostParams::default(), &cm)).unwrap();

    let port = 19466;
    let start = Instant::now();
    let mut ctl = Command::new(ctx.bin.join("netendpoint-controller"))
        .arg("--kubeconfig")
        .arg(&ctx.kubeconfig)
        .args(["--identity", "bench-ctl", "--lease-name", "bench-ctl", "--lease-namespace", "default"])
        .args(["--net-conf", &format!("default/{cm_name}"), "--pod-gone-grace", "off"])
        .args(["--selector", &format!("{LABEL_POOL}={pool}"), "--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = ctl.id();
    let live = created as u32 - releasing;
    let series = |name: &str| format!("netendpoint_{name}{{pool=\"{pool}\"}}");
    let mut synced = None;
    while start.elapsed() < Duration::from_secs(180) {
        let m = http_get(port, "/metrics");
        let value = |name: &str| {
            m.lines().find_map(|l| l.strip_prefix(&series(name))).and_then(|v| v.trim().parse::<f64>().ok())
        };
        if value("pool_in_use") == Some(f64::from(live))
            && value("pool_releasing") == Some(f64::from(releasing))
            && value("pool_capacity").is_some()
        {
            synced = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let cpu_sync = proc_cpu_s(pid);
    let rss_sync = proc_status(pid, "VmRSS:");
    std::thread::sleep(Duration::from_secs(60));
    let cpu_idle = proc_cpu_s(pid).zip(cpu_sync).map(|(a, b)| a - b);
    let rss_idle = proc_status(pid, "VmRSS:");
    let hwm = proc_status(pid, "VmHWM:");
    let _ = ctl.kill();
    let _ = ctl.wait();
    let mb = |k: Option<u64>| k.map_or("n/a".into(), |k| format!("{:.1} MB", k as f64 / 1024.0));
    let _ = writeln!(report, "## netendpoint-controller at {n} leases\n");
    let _ = writeln!(
        report,
        "{created} leases of one pool (a /16, its ranges in a ConfigMap the controller watches) created directly, 48 in flight, in \
         {fill_s:.0} s, {releasing} of them then releasing (held by a finalizer). The release build of the controller then starts \
         (metadata-only watches of the leases, the Nodes and the `IPNeeded` Events, the ConfigMap; `--pod-gone-grace off`, so no Pod \
         watch) and is timed until its `/metrics` shows the pool's figures; it also leads (leader Lease) and writes the pool's \
         `NetworkEndpointPool` status. CPU is user + system time from `/proc/PID/stat`, RSS from `/proc/PID/status`.\n"
    );
    let _ = writeln!(report, "| measure | value |");
    let _ = writeln!(report, "|---|---:|");
    let _ = writeln!(
        report,
        "| start to pool figures right on /metrics (sync) | {} |",
        synced.map_or("not reached".into(), |d| format!("{:.2} s", d.as_secs_f64()))
    );
    let _ = writeln!(report, "| CPU for the sync | {} |", cpu_sync.map_or("n/a".into(), |c| format!("{c:.2} s")));
    let _ = writeln!(report, "| RSS after the sync | {} |", mb(rss_sync));
    let _ = writeln!(report, "| RSS after 60 s idle (peak so far) | {} ({}) |", mb(rss_idle), mb(hwm));
    let _ = writeln!(report, "| CPU per idle minute | {} |", cpu_idle.map_or("n/a".into(), |c| format!("{c:.2} s")));
    let _ = writeln!(report);
    ctx.rt.block_on(async {
        let api: Api<NetworkEndpoint> = Api::all(ctx.client.clone());
        for ip in &ips[..releasing as usize] {
            let name = endpoint_name(pool, ip.parse().unwrap());
            let drop = json!({"metadata": {"finalizers": null}});
            let _ = api.patch(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&drop)).await;
        }
        let _ = cms.delete(cm_name, &DeleteParams::default()).await;
    });
    ctx.delete_pool(pool);
}

/// `kubectl` (tests/bin, beside the CNI tools) with the bench's kubeconfig.
fn kubectl(ctx: &Ctx, args: &[&str]) -> std::process::Output {
    let bin = ctx.cni.parent().map_or_else(|| PathBuf::from("kubectl"), |d| d.join("kubectl"));
    Command::new(bin).arg("--kubeconfig").arg(&ctx.kubeconfig).args(args).output().expect("kubectl")
}

/// A kubeconfig for the plugin's ServiceAccount with a token bound to the
/// Node `node`, as the installer writes it.
fn plugin_kubeconfig(ctx: &Ctx, node: &str) -> PathBuf {
    let out = kubectl(
        ctx,
        &[
            "create",
            "token",
            "netendpoint-cni",
            "-n",
            "netendpoint-system",
            "--bound-object-kind",
            "Node",
            "--bound-object-name",
            node,
            "--duration",
            "2h",
        ],
    );
    assert!(out.status.success(), "mint the plugin's token: {}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let server = kubectl(ctx, &["config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.server}"]);
    let server = String::from_utf8(server.stdout).unwrap();
    let ca = ctx.kubeconfig.parent().unwrap().join("pki/ca.crt");
    let path = ctx.work.join("plugin.kubeconfig");
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
        ca.display()
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

/// True once the API server refuses, as the plugin, a lease at an address
/// outside every range and a lease of another node (so the range and plugin
/// policies are in force), or, with `enforced` false, once it accepts both
/// (a server-side dry run; nothing is stored).
fn admission_is(ctx: &Ctx, plugin: &kube::Client, enforced: bool) -> bool {
    let api: Api<NetworkEndpoint> = Api::all(plugin.clone());
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    let outside = filler("bench-admission-probe", "192.0.2.1", "bench-node");
    let other_node = filler("bench-admission-probe", "192.0.2.2", "bench-other-node");
    ctx.rt.block_on(async {
        let a = api.create(&dry, &outside).await;
        let b = api.create(&dry, &other_node).await;
        let refused = |r: &kube::Result<NetworkEndpoint>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);
        if enforced { refused(&a) && refused(&b) } else { a.is_ok() && b.is_ok() }
    })
}

/// What admission costs an ADD: the plugin, authenticating as its
/// node-bound ServiceAccount (deploy/rbac-cni.yaml) as on a node, ADDs into
/// a fresh /20 with and without the admission policies of deploy/ in
/// force, in alternating rounds so that drift of the machine hits both.
fn bench_admission(ctx: &Ctx, report: &mut String) {
    let deploy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let policies = deploy.join("admission-policies.yaml");
    for f in ["namespace.yaml", "rbac-cni.yaml"] {
        let out = kubectl(ctx, &["apply", "-f", deploy.join(f).to_str().unwrap()]);
        assert!(out.status.success(), "apply {f}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let kc = plugin_kubeconfig(ctx, "bench-node");
    let plugin = ctx.rt.block_on(async {
        let cfg = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kc).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
        kube::Client::try_from(cfg).unwrap()
    });
    ctx.ensure_nodes(&["bench-other-node".to_string()]);
    // Some API servers (kubernetes/kubernetes#133827, 1.36 among them) stop
    // reading the parameters of a kind for good once no binding uses that
    // kind for a moment, and then refuse every lease ("no params found"). A
    // binding of ConfigMaps that matches nothing keeps the kind in use while
    // the rounds delete and apply the policies.
    let keepalive = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": "bench-param-keepalive"},
         "spec": {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                  "matchConstraints": {"resourceRules": [{"apiGroups": ["bench.invalid"], "apiVersions": ["*"],
                                                          "resources": ["nothing"], "operations": ["CREATE"]}]},
                  "validations": [{"expression": "true"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": "bench-param-keepalive"},
         "spec": {"policyName": "bench-param-keepalive", "validationActions": ["Deny"],
                  "paramRef": {"name": "bench-param-keepalive", "namespace": "netendpoint-system",
                               "parameterNotFoundAction": "Allow"}}}]});
    let keepalive_file = ctx.work.join("keepalive.json");
    std::fs::write(&keepalive_file, keepalive.to_string()).unwrap();
    let out = kubectl(ctx, &["apply", "-f", keepalive_file.to_str().unwrap()]);
    assert!(out.status.success(), "keep ConfigMap parameters read: {}", String::from_utf8_lossy(&out.stderr));
    let (rounds, n, levels): (usize, usize, &[usize]) = if ctx.quick { (1, 40, &[1]) } else { (3, 150, &[1, 8]) };
    // (with policies, concurrency) -> latencies of every round
    let mut lat: HashMap<(bool, usize), Vec<Duration>> = HashMap::new();
    let mut failed: HashMap<(bool, usize), usize> = HashMap::new();
    // (with policies, concurrency) -> (API server CPU seconds, ADDs)
    let mut cpu: HashMap<(bool, usize), (f64, usize)> = HashMap::new();
    let mut subnet = 0u32;
    for round in 0..rounds {
        for with in [false, true] {
            if with {
                let out = kubectl(ctx, &["apply", "-f", policies.to_str().unwrap()]);
                assert!(out.status.success(), "apply the policies: {}", String::from_utf8_lossy(&out.stderr));
            } else {
                let _ = kubectl(ctx, &["delete", "--ignore-not-found", "-f", policies.to_str().unwrap()]);
            }
            let mut settled = false;
            for _ in 0..300 {
                if admission_is(ctx, &plugin, with) {
                    settled = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            assert!(settled, "the policies did not {} within 30 s", if with { "take effect" } else { "go away" });
            for &c in levels {
                let pool = format!("bench-adm-{}-r{round}-c{c}", if with { "on" } else { "off" });
                let cidr = format!("10.{}.{}.0/20", 100 + subnet / 16, (subnet % 16) * 16);
                subnet += 1;
                if with {
                    let patch = json!({"data": {pool.clone(): cidr.clone()}}).to_string();
                    let out = kubectl(
                        ctx,
                        &[
                            "patch",
                            "configmap",
                            "netendpoint-pools",
                            "-n",
                            "netendpoint-system",
                            "--type",
                            "merge",
                            "-p",
                            &patch,
                        ],
                    );
                    assert!(out.status.success(), "register {pool}: {}", String::from_utf8_lossy(&out.stderr));
                }
                let conf = ctx.netconf(&pool, &cidr, json!({"kubeconfig": kc, "crossNode": "controller"}));
                let (ok, _, err) = run_one(&ctx.add(&conf, &format!("adm-warm-{pool}")));
                assert!(ok, "warm-up ADD as the plugin's identity: {err}");
                let cpu_before = ctx.apiserver_cpu_s();
                let (took, fails, _) =
                    run_many_timed(n, c, &|i| ctx.add(&conf, &format!("adm-{pool}-{i}")), &|_, _| {});
                if let (Some(a), Some(b)) = (cpu_before, ctx.apiserver_cpu_s()) {
                    let e = cpu.entry((with, c)).or_insert((0.0, 0));
                    e.0 += b - a;
                    e.1 += n;
                }
                report_failures(if with { "with policies" } else { "without policies" }, c, &fails);
                *failed.entry((with, c)).or_default() += fails.len();
                lat.entry((with, c)).or_default().extend(took);
                ctx.delete_pool(&pool);
            }
        }
    }
    let _ = kubectl(ctx, &["delete", "--ignore-not-found", "-f", policies.to_str().unwrap()]);
    let _ = kubectl(ctx, &["delete", "--ignore-not-found", "-f", keepalive_file.to_str().unwrap()]);

    let _ = writeln!(
        report,
        "## What admission costs an ADD
"
    );
    let _ = writeln!(
        report,
        "The plugin as its node-bound ServiceAccount (`deploy/rbac-cni.yaml`, a TokenRequest token bound to the Node), \
         ADDing into a fresh /20, with the admission policies of `deploy/admission-policies.yaml` in force and without, \
         {rounds} alternating rounds of {n} ADDs per concurrency.\n"
    );
    let _ =
        writeln!(report, "| concurrency | policies | ADDs | failed | p50 ms | p99 ms | API server CPU ms per ADD |");
    let _ = writeln!(report, "|---:|---|---:|---:|---:|---:|---:|");
    let mut added = Vec::new();
    for &c in levels {
        let mut p50 = [0.0; 2];
        for (i, with) in [false, true].into_iter().enumerate() {
            let mut v = lat.remove(&(with, c)).unwrap_or_default();
            let f = failed.get(&(with, c)).copied().unwrap_or(0);
            let count = v.len() + f;
            p50[i] = pct_ms(&mut v, 0.50);
            let p99 = pct_ms(&mut v, 0.99);
            let cpu_ms =
                cpu.get(&(with, c)).map_or("n/a".to_string(), |(s, n)| format!("{:.2}", s * 1000.0 / *n as f64));
            let _ = writeln!(
                report,
                "| {c} | {} | {count} | {f} | {:.1} | {p99:.1} | {cpu_ms} |",
                if with { "in force" } else { "none" },
                p50[i]
            );
        }
        added.push((c, p50[1] - p50[0]));
    }
    let _ = writeln!(report);
    for (c, d) in added {
        let _ = writeln!(report, "Admission adds {d:+.1} ms to the p50 of an ADD at concurrency {c}.");
    }
    let _ = writeln!(report);
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

/// A small SVG chart: ADD p99 by pool size, both axes logarithmic (one x
/// tick per prefix length, y ticks at powers of ten), one line per series
/// of `points` (series, prefix, p99 ms).
fn svg_scale(points: &[(&'static str, u8, f64)]) -> String {
    let (w, h, left, bottom) = (640.0, 360.0, 60.0, 40.0);
    let plot_right = w - 220.0;
    let points: Vec<_> = points.iter().filter(|(_, _, p)| p.is_finite() && *p > 0.0).collect();
    let bits = |prefix: u8| f64::from(32 - prefix);
    let (lo, hi) = points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), (_, p, _)| (lo.min(bits(*p)), hi.max(bits(*p))));
    let (lo, hi) = if lo < hi { (lo, hi) } else { (lo - 1.0, lo + 1.0) };
    let decades = |f: fn(f64) -> f64, init: f64, pick: fn(f64, f64) -> f64| {
        f(points.iter().map(|(_, _, p)| p.log10()).fold(init, pick))
    };
    let (y_lo, y_hi) = (decades(f64::floor, 9.0, f64::min).min(1.0), decades(f64::ceil, 0.0, f64::max).max(2.0));
    let x = |prefix: u8| left + (plot_right - left) * (bits(prefix) - lo) / (hi - lo);
    let y = |v: f64| (h - bottom) - (h - bottom - 20.0) * (v.log10() - y_lo) / (y_hi - y_lo);
    let colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let _ = writeln!(s, "<text x=\"{left}\" y=\"14\">ADD p99 in ms by pool size and fill (log scales)</text>");
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{plot_right}\" y2=\"{}\" stroke=\"black\"/>",
        h - bottom,
        h - bottom
    );
    let _ = writeln!(s, "<line x1=\"{left}\" y1=\"20\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>", h - bottom);
    for e in y_lo as i32..=y_hi as i32 {
        let v = 10f64.powi(e);
        let _ = writeln!(s, "<text x=\"4\" y=\"{:.0}\">{v:.0}</text>", y(v) + 4.0);
    }
    let mut prefixes: Vec<u8> = points.iter().map(|(_, p, _)| *p).collect();
    prefixes.sort_unstable();
    prefixes.dedup();
    for p in prefixes {
        let _ = writeln!(s, "<text x=\"{:.0}\" y=\"{}\">/{p}</text>", x(p) - 10.0, h - bottom + 16.0);
    }
    let mut series: Vec<&str> = Vec::new();
    for (name, _, _) in &points {
        if !series.contains(name) {
            series.push(name);
        }
    }
    for (n, name) in series.iter().enumerate() {
        let color = colors[n % colors.len()];
        let mut pts: Vec<(u8, f64)> = points.iter().filter(|(s, _, _)| s == name).map(|(_, p, v)| (*p, *v)).collect();
        pts.sort_by_key(|p| std::cmp::Reverse(p.0));
        let line: Vec<String> = pts.iter().map(|(p, v)| format!("{:.1},{:.1}", x(*p), y(*v))).collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            line.join(" ")
        );
        for (p, v) in &pts {
            let _ = writeln!(s, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>", x(*p), y(*v));
        }
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{name}</text>",
            plot_right + 10.0,
            40.0 + 18.0 * n as f64
        );
    }
    s.push_str("</svg>\n");
    s
}
