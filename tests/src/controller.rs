//! `netendpoint-controller` run as a separate process, scoped to a test's
//! own pools and leader Lease.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::env::{built_bin, client, kubeconfig};
use crate::probes::http_get;
use crate::wait::wait_for;

/// One `netendpoint-controller` process, scoped to its own pools (`--selector`)
/// and leader Lease, so that tests run side by side. Killed on drop.
pub struct ControllerProc {
    child: std::process::Child,
    port: u16,
    log: PathBuf,
    /// Its identity in the leader Lease.
    pub identity: String,
}

impl ControllerProc {
    /// Starts a controller as admin, for `pools`, with `extra` flags.
    pub fn start(identity: &str, lease: &str, pools: &[&str], extra: &[&str]) -> Self {
        Self::start_as(&kubeconfig(), identity, lease, pools, extra)
    }

    /// Starts a controller with kubeconfig `kc`.
    pub fn start_as(kc: &std::path::Path, identity: &str, lease: &str, pools: &[&str], extra: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::env::temp_dir().join(format!("{identity}.log"));
        let selector = format!(
            "{} in ({})",
            netendpoint_crd::LABEL_POOL,
            pools.iter().map(|p| netendpoint_crd::label_value(p)).collect::<Vec<_>>().join(",")
        );
        let child = std::process::Command::new(built_bin("NETENDPOINT_CONTROLLER", "netendpoint-controller"))
            .arg("--kubeconfig")
            .arg(kc)
            .args(["--identity", identity, "--lease-name", lease])
            .args(if extra.contains(&"--lease-namespace") { &[][..] } else { &["--lease-namespace", "default"][..] })
            .args(if extra.contains(&"--lease-seconds") {
                &[][..]
            } else {
                &["--lease-seconds", "3", "--lease-grace-seconds", "1"][..]
            })
            .args(if extra.contains(&"--net-conf") { &[][..] } else { &["--net-conf", ""][..] })
            .args(if extra.contains(&"--pools-param") { &[][..] } else { &["--pools-param", ""][..] })
            .args(["--selector", &selector, "--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Self { child, port, log, identity: identity.to_string() }
    }

    /// `GET path` on its metrics server.
    pub fn get(&self, path: &str) -> Option<String> {
        http_get(&format!("127.0.0.1:{}", self.port), path).map(|(_, body)| body)
    }

    /// The value of the metric line starting with `series` (name and labels).
    pub fn metric(&self, series: &str) -> Option<f64> {
        let text = self.get("/metrics")?;
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
    }

    /// True while it leads.
    pub fn is_leader(&self) -> bool {
        self.metric("netendpoint_controller_leader") == Some(1.0)
    }

    /// Waits (up to 60 s) until this process leads and has done its initial lists.
    pub async fn wait_leader(&self) {
        wait_for(&format!("{} to lead", self.identity), Duration::from_secs(60), || async {
            self.get("/readyz").is_some_and(|b| b.starts_with("ready")) && self.is_leader()
        })
        .await;
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Asks it to stop (SIGTERM), as a rollout or a drain does, and waits
    /// (up to 10 s) for it to end.
    pub fn terminate(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        for _ in 0..100 {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops it (SIGSTOP) without ending it: a controller that falls behind.
    pub fn pause(&self) {
        let _ = Command::new("kill").args(["-STOP", &self.child.id().to_string()]).status();
    }

    /// Lets it go on after [`Self::pause`] (SIGCONT).
    pub fn resume(&self) {
        let _ = Command::new("kill").args(["-CONT", &self.child.id().to_string()]).status();
    }
}

impl Drop for ControllerProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits (up to 30 s) until a controller published the summary of `pool`
/// (a NetworkEndpointPool whose status has the summary ADDs read).
pub async fn wait_for_summary(pool: &str) {
    let pools: kube::Api<netendpoint_crd::NetworkEndpointPool> = kube::Api::all(client().await);
    wait_for("the pool summary", Duration::from_secs(30), || async {
        pools
            .get_opt(pool)
            .await
            .unwrap()
            .and_then(|p| p.status)
            .and_then(|s| s.summary)
            .is_some_and(|s| !s.runs.is_empty())
    })
    .await;
}
