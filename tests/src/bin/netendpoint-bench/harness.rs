//! The harness: the context of a run, process invocations and their statistics, fills, agents, and /proc readings.

use crate::prelude::*;

pub(crate) struct Ctx {
    pub(crate) kubeconfig: PathBuf,
    pub(crate) bin: PathBuf,
    pub(crate) cni: PathBuf,
    pub(crate) work: PathBuf,
    pub(crate) quick: bool,
    pub(crate) large_prefix: u8,
    pub(crate) whereabouts: Option<PathBuf>,
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) client: kube::Client,
    /// Figures one case leaves for a later section (plots, lean leases, load).
    pub(crate) shared: Mutex<Shared>,
    /// The controller that runs through the whole benchmark, as deployed.
    pub(crate) controller: Mutex<Option<std::process::Child>>,
}

/// Figures gathered across cases for the sections and plots that combine them.
#[derive(Default)]
pub(crate) struct Shared {
    /// ADD p99 by pool: (series, prefix length, p99 ms), for `bench-scale.svg`.
    pub(crate) scale_points: Vec<(&'static str, u8, f64)>,
    /// The /24-at-90 % row of "64 nodes at once", to compare the /15 with.
    pub(crate) full24: Option<AtOnce>,
    /// API server CPU during measured runs.
    pub(crate) load: Vec<Load>,
    /// What a lease costs, measured beside the largest fill of the run.
    pub(crate) lean: Option<Lean>,
    /// Each case's elapsed wall time.
    pub(crate) elapsed: Vec<(String, f64)>,
}

/// The API server's CPU seconds over `ops` operations of one kind.
pub(crate) struct Load {
    pub(crate) during: String,
    pub(crate) ops: usize,
    pub(crate) unit: &'static str,
    pub(crate) cpu_s: f64,
}

#[derive(Default, Clone)]
pub(crate) struct Stats {
    pub(crate) n: usize,
    pub(crate) failed: usize,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) per_sec: f64,
}

impl Stats {
    pub(crate) fn of(mut lat: Vec<Duration>, failed: usize, wall: Duration) -> Self {
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
pub(crate) struct Invocation {
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) stdin: Vec<u8>,
}

pub(crate) fn run_one(inv: &Invocation) -> (bool, Duration, String) {
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
pub(crate) fn run_many(
    n: usize,
    concurrency: usize,
    make: &(dyn Fn(usize) -> Invocation + Sync),
) -> (Stats, Vec<String>) {
    run_many_then(n, concurrency, make, &|_, _| {})
}

/// [`run_many`], where each worker calls `then(i, stdout)` after invocation
/// `i` succeeded and before it starts its next one. `then` is not in the
/// latency, but it is in the wall time (ADDs/s).
pub(crate) fn run_many_then(
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
pub(crate) fn run_many_timed(
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
    pub(crate) fn plugin(&self) -> PathBuf {
        self.bin.join("netendpoint")
    }

    pub(crate) fn netconf(&self, pool: &str, subnet: &str, extra: Value) -> Vec<u8> {
        let mut ipam = json!({
            "type": "netendpoint",
            "pool": pool,
            "ranges": [[{"subnet": subnet}]],
            "kubeconfig": self.kubeconfig,
            "nodeName": "bench-node",
            "dataDir": self.work.join("data").join(pool),
            "waitForRelease": "30s",
        });
        if let Ok(file) = std::env::var("BENCH_PLUGIN_LOG") {
            ipam["log"] = json!({"file": file, "level": "debug"});
        }
        for (k, v) in extra.as_object().unwrap() {
            ipam[k] = v.clone();
        }
        serde_json::to_vec(&json!({"cniVersion": "1.0.0", "name": pool, "ipam": ipam})).unwrap()
    }

    pub(crate) fn cni_env(&self, command: &str, cid: &str) -> Vec<(String, String)> {
        vec![
            ("CNI_COMMAND".into(), command.into()),
            ("CNI_CONTAINERID".into(), cid.into()),
            ("CNI_IFNAME".into(), "eth0".into()),
            ("CNI_NETNS".into(), "/run/netns/bench".into()),
            ("CNI_PATH".into(), self.cni.display().to_string()),
            ("CNI_ARGS".into(), format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={cid}")),
        ]
    }

    pub(crate) fn add(&self, conf: &[u8], cid: &str) -> Invocation {
        Invocation { program: self.plugin(), args: vec![], env: self.cni_env("ADD", cid), stdin: conf.to_vec() }
    }

    /// The ADD of a sandbox of a real Pod: Pod `default/<cid>` is created
    /// first (bound to `bench-node`, never started: `Pending`, as a Pod
    /// waiting for its sandbox is), and the ADD names it with its UID, as
    /// kubelet does. A waiting ADD's queue entry is believed only for such
    /// a Pod; the cases that measure waiting use this, the others [`Ctx::add`].
    pub(crate) fn pod_add(&self, conf: &[u8], cid: &str) -> Invocation {
        self.pod_add_on(conf, cid, "bench-node")
    }

    /// [`Ctx::pod_add`] for a Pod bound to `node` (the node `conf` names).
    pub(crate) fn pod_add_on(&self, conf: &[u8], cid: &str, node: &str) -> Invocation {
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(self.client.clone(), "default");
        let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(self.client.clone(), "default");
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": cid, "namespace": "default"},
            "spec": {"nodeName": node, "automountServiceAccountToken": false,
                     "containers": [{"name": "c", "image": "example.invalid/none"}]}
        });
        let uid = self.rt.block_on(async {
            let sa = serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
            let _ = sas.create(&PostParams::default(), &sa).await;
            let pod = serde_json::from_value(pod).unwrap();
            pods.create(&PostParams::default(), &pod).await.ok().and_then(|p| p.metadata.uid)
        });
        let mut env = self.cni_env("ADD", cid);
        if let Some(uid) = uid {
            env.retain(|(k, _)| k != "CNI_ARGS");
            env.push((
                "CNI_ARGS".into(),
                format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={cid};K8S_POD_UID={uid}"),
            ));
        } else {
            eprintln!("bench: Pod default/{cid} could not be created; its ADD names a Pod that does not exist");
        }
        Invocation { program: self.plugin(), args: vec![], env, stdin: conf.to_vec() }
    }

    pub(crate) fn del(&self, conf: &[u8], cid: &str) -> Invocation {
        Invocation { program: self.plugin(), args: vec![], env: self.cni_env("DEL", cid), stdin: conf.to_vec() }
    }

    /// Deletes every lease of `pool`, one page of at most 5,000 per
    /// deletecollection, so that no response holds a whole large pool.
    pub(crate) fn delete_pool(&self, pool: &str) {
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
    pub(crate) fn ensure_nodes(&self, names: &[String]) {
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
    pub(crate) fn fill(&self, pool: &str, ips: &[String], node: &str, in_flight: usize) -> usize {
        self.fill_owned(pool, ips, &[node.to_string()], in_flight)
    }

    /// Creates leases of `pool` at `ips` directly (not through the plugin),
    /// `in_flight` at a time, shaped as the plugin shapes its own (see
    /// [`filler`]), so that block lists find them and their sizes are those
    /// of real leases. The lease at `ips[i]` is on node `owners[i % len]`,
    /// with container ID [`fill_container`], so that the plugin's DEL on
    /// that node releases it. Returns how many were created.
    pub(crate) fn fill_owned(&self, pool: &str, ips: &[String], owners: &[String], in_flight: usize) -> usize {
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
    pub(crate) fn metrics(&self) -> Metrics {
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

    /// PID of the kube-testenv process (API server and etcd in one), from the
    /// state directory that holds the kubeconfig.
    pub(crate) fn apiserver_pid(&self) -> Option<u32> {
        let dir = self.kubeconfig.parent()?;
        std::fs::read_to_string(dir.join("pid")).ok()?.trim().parse().ok()
    }

    /// CPU seconds (user + system) the kube-testenv process has used so far.
    pub(crate) fn apiserver_cpu_s(&self) -> Option<f64> {
        proc_cpu_s(self.apiserver_pid()?)
    }

    /// Size in bytes of etcd's data file in the test environment's state directory.
    pub(crate) fn etcd_db_bytes(&self) -> Option<u64> {
        let dir = self.kubeconfig.parent()?;
        Some(std::fs::metadata(dir.join("etcd/member/snap/db")).ok()?.len())
    }

    /// The plugin configuration of node `node` in `pool`, with the node's own
    /// `dataDir` under `dir`, as a real node has.
    pub(crate) fn node_conf(&self, pool: &str, subnet: &str, node: &str, dir: &str) -> Vec<u8> {
        self.netconf(pool, subnet, json!({"nodeName": node, "dataDir": self.work.join(dir).join(node)}))
    }

    /// Deletes the lease named `name` (one DELETE, no preconditions).
    pub(crate) fn delete_lease(&self, name: &str) {
        let api: Api<NetworkEndpoint> = Api::all(self.client.clone());
        if let Err(e) = self.rt.block_on(api.delete(name, &DeleteParams::default())) {
            eprintln!("delete {name}: {e}");
        }
    }

    /// The body of the answer to `req` ("" on an error, which is printed).
    pub(crate) fn text(&self, req: http::Request<Vec<u8>>) -> String {
        let uri = req.uri().clone();
        self.rt.block_on(self.client.request_text(req)).unwrap_or_else(|e| {
            eprintln!("GET {uri}: {e}");
            String::new()
        })
    }

    /// Runs `f` as the case `name`: records and prints its elapsed time.
    pub(crate) fn timed<T>(&self, name: &str, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        let s = t.elapsed().as_secs_f64();
        eprintln!("bench: {name} took {s:.0} s");
        self.shared.lock().unwrap().elapsed.push((name.to_string(), s));
        out
    }
}

/// The container ID of the lease [`Ctx::fill_owned`] creates at `ip` in `pool`.
pub(crate) fn fill_container(pool: &str, ip: &str) -> String {
    format!("fill.{pool}.{ip}")
}

/// A lease at `ip` on `node` as the plugin would create it for a pod:
/// the same labels (pool, node, block, IP family, network, pod namespace,
/// name and UID), the bound annotation and the same spec fields.
pub(crate) fn filler(pool: &str, ip: &str, node: &str) -> NetworkEndpoint {
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

pub(crate) fn ip_u128(ip: std::net::IpAddr) -> u128 {
    match ip {
        std::net::IpAddr::V4(v) => u128::from(u32::from(v)),
        std::net::IpAddr::V6(v) => u128::from(v),
    }
}

/// Percentile `p` (0..1) of `v` in milliseconds, nearest rank.
pub(crate) fn pct_ms(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i].as_secs_f64() * 1000.0
}

/// `conf` with `edit` applied to its JSON.
pub(crate) fn edit_conf(conf: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(conf).unwrap();
    edit(&mut v);
    serde_json::to_vec(&v).unwrap()
}

pub(crate) fn host(v: u32) -> String {
    Ipv4Addr::from(v).to_string()
}

pub(crate) fn report_failures(what: &str, c: usize, fails: &[String]) {
    if let Some(first) = fails.first() {
        eprintln!("{what} c={c}: {} failed, first: {}", fails.len(), first.trim());
    }
}

pub(crate) fn http_get(port: u16, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

pub(crate) fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))?.rsplit(' ').next()?.parse().ok()
}

pub(crate) fn start_agent(ctx: &Ctx, node: &str, finalizer: Option<&str>, port: u16) -> std::process::Child {
    let mut cmd = Command::new(ctx.bin.join("watcher-example"));
    cmd.args(["--node", node, "--dataplane", "memory", "--metrics-addr", &format!("127.0.0.1:{port}")])
        .arg("--kubeconfig")
        .arg(&ctx.kubeconfig)
        .env("RUST_LOG", std::env::var("BENCH_AGENT_LOG").unwrap_or_else(|_| "error".into()))
        .stdout(Stdio::null())
        .stderr(match std::env::var("BENCH_AGENT_LOG_FILE") {
            Ok(f) => std::fs::File::create(f).map(Stdio::from).unwrap_or_else(|_| Stdio::null()),
            Err(_) => Stdio::null(),
        });
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

pub(crate) const SERIES_50: &str = "50 % full, one ADD at a time";
pub(crate) const SERIES_90: &str = "90 % full, one ADD at a time";
pub(crate) const SERIES_AT_ONCE: &str = "90 % full, 64 nodes at once";

/// Node names that ADD at once, and whose leases the fills spread over.
pub(crate) const AT_ONCE_NODES: usize = 64;
/// Node names that churn: the first of [`AT_ONCE_NODES`].
pub(crate) const CHURN_NODES: usize = 16;
/// In the large pool, churn starts no cycle after this many seconds, to
/// bound the run: every LIST there looks at every lease on the server.
pub(crate) const CHURN_CAP_S: u64 = 420;

impl Ctx {
    /// A `--large-prefix` above 15: a trial of the large cases, with fewer ADDs and cycles.
    pub(crate) fn large_trial(&self) -> bool {
        self.large_prefix > 15
    }
}

/// `n` registered node names, `bench-big-0` onwards.
pub(crate) fn many_node_names(ctx: &Ctx, n: usize) -> Vec<String> {
    let names: Vec<String> = (0..n).map(|i| format!("bench-big-{i}")).collect();
    ctx.ensure_nodes(&names);
    names
}

/// The first IP of an ADD result on stdout.
pub(crate) fn added_ip(stdout: &str) -> Option<std::net::IpAddr> {
    let v: Value = serde_json::from_str(stdout).ok()?;
    v["ips"][0]["address"].as_str()?.split('/').next()?.parse().ok()
}

pub(crate) fn max_rss_kb(inv: &Invocation) -> Option<u64> {
    let mut cmd = Command::new("/usr/bin/time");
    cmd.arg("-f").arg("%M").arg(&inv.program).args(&inv.args).env_clear().envs(inv.env.iter().cloned());
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().ok()?;
    child.stdin.take()?.write_all(&inv.stdin).ok()?;
    let out = child.wait_with_output().ok()?;
    String::from_utf8_lossy(&out.stderr).lines().last()?.trim().parse().ok()
}

pub(crate) fn proc_status(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find(|l| l.starts_with(key))?.split_whitespace().nth(1)?.parse().ok()
}

pub(crate) fn proc_cpu_s(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// The metrics port of the controller that runs through the benchmark.
pub(crate) const CONTROLLER_PORT: u16 = 19470;

impl Ctx {
    /// Starts netendpoint-controller (the release build) for every pool, as
    /// a cluster runs it: it writes the shard and pool summaries ADDs read.
    /// Its vanished-node grace is a day, so that the fills' node names need
    /// no Node objects. Waits until it leads.
    pub(crate) fn start_controller(&self) {
        let log = std::fs::File::create(self.work.join("controller.log")).unwrap();
        let child = Command::new(self.bin.join("netendpoint-controller"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--identity", "bench", "--lease-name", "bench-controller", "--lease-namespace", "default"])
            .args(["--net-conf", "", "--pools-param", "", "--pod-gone-grace", "off", "--vanished-node-grace", "24h"])
            .args(["--listen", &format!("127.0.0.1:{CONTROLLER_PORT}")])
            .env("RUST_LOG", std::env::var("BENCH_CONTROLLER_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start netendpoint-controller");
        *self.controller.lock().unwrap() = Some(child);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(60) {
            if self.controller_metric("netendpoint_controller_leader") == Some(1.0) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("bench: the controller did not lead within 60 s");
    }

    /// Stops the benchmark's controller.
    pub(crate) fn stop_controller(&self) {
        if let Some(mut c) = self.controller.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The PID of the benchmark's controller.
    pub(crate) fn controller_pid(&self) -> Option<u32> {
        self.controller.lock().unwrap().as_ref().map(std::process::Child::id)
    }

    /// The value of the controller's metric `series` (name and labels).
    pub(crate) fn controller_metric(&self, series: &str) -> Option<f64> {
        let text = http_get(CONTROLLER_PORT, "/metrics");
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
    }

    /// The benchmark controller's passes so far, full (`kind` "") or over
    /// the queues alone (`kind` "queue_"): how many, and their total seconds.
    pub(crate) fn controller_passes(&self, kind: &str) -> (f64, f64) {
        let get = |s: &str| self.controller_metric(&format!("netendpoint_controller_{kind}{s}")).unwrap_or(0.0);
        (get("pass_duration_seconds_count"), get("pass_duration_seconds_sum"))
    }

    /// Summary writes of the benchmark's controller so far.
    pub(crate) fn summary_writes(&self) -> f64 {
        self.controller_metric("netendpoint_summary_writes_total").unwrap_or(0.0)
    }

    /// Waits (up to `limit`) until the controller's summary of `pool`
    /// counts at least `leases` leases; returns how long that took, or
    /// `None` (and says so) when it did not.
    pub(crate) fn wait_summary(&self, pool: &str, leases: usize, limit: Duration) -> Option<Duration> {
        let api: Api<netendpoint_crd::NetworkEndpointPool> = Api::all(self.client.clone());
        let t = Instant::now();
        let mut seen = 0;
        while t.elapsed() < limit {
            let summary = self.rt.block_on(api.get_opt(pool)).ok().flatten().and_then(|p| p.status?.summary);
            if let Some(s) = summary {
                seen = netendpoint_lease::summary::counts_of(&s).values().map(|(l, _)| usize::from(*l)).sum();
                if seen >= leases {
                    return Some(t.elapsed());
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!("bench: the summary of {pool} counts {seen} of {leases} leases after {limit:?}");
        None
    }
}

/// The mean of the plugin's own count of its API requests ("API requests
/// of this ADD" log lines) in the log file `log`, and how many ADDs logged.
pub(crate) fn logged_requests(log: &std::path::Path, command: &str) -> (f64, usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let marker = format!("API requests of this {command}");
    let per: Vec<u32> = text
        .lines()
        .filter(|l| l.contains(&marker))
        .filter_map(|l| l.split("requests=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect();
    (f64::from(per.iter().sum::<u32>()) / per.len().max(1) as f64, per.len())
}
