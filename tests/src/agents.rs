//! The agent under test run as a separate process, each with its own state
//! directory, and its view compared with the leases.
//!
//! By default that is the reference agent, `watcher-example`, started with
//! its own flags. With `NETENDPOINT_AGENT_CMD` set, it is any agent that
//! follows the conformance contract (watcher-example/README.md,
//! "Conformance"): the command is run by `sh -c` with the contract's
//! environment, and the suites read only what the contract promises
//! (`/readyz`, `/rules`, `events.jsonl`, the table kept across a restart).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::env::{built_bin, kubeconfig};
use crate::leases::pool_state;
use crate::probes::http_get;
use crate::scratch::unique;

/// The `watcher-example` agent binary (built by `cargo build --workspace --bins`).
pub fn agent_bin() -> PathBuf {
    built_bin("NETENDPOINT_AGENT", "watcher-example")
}

/// The command of the agent under conformance (`NETENDPOINT_AGENT_CMD`), or
/// `None` for the reference agent driven by its own flags.
pub fn conformance_cmd() -> Option<String> {
    std::env::var("NETENDPOINT_AGENT_CMD").ok().filter(|c| !c.trim().is_empty())
}

/// True when the agent under test is the reference agent, whose metrics,
/// log lines and extra flags some checks read beyond the contract.
pub fn testing_reference_agent() -> bool {
    conformance_cmd().is_none()
}

/// How to start an agent.
#[derive(Clone, Debug)]
pub struct AgentOpts {
    /// `--node`.
    pub node: String,
    /// `--finalizer`, or `None` for `--no-finalizer`.
    pub finalizer: Option<String>,
    /// `--naive-ip-keyed`.
    pub naive: bool,
    /// `--teardown-delay`, e.g. `0ms..30ms`.
    pub delay: String,
    /// `memory` (default) or `linux`.
    pub dataplane: String,
    /// `--netns` for the linux dataplane.
    pub netns: Option<String>,
    /// Extra flags.
    pub extra: Vec<String>,
}

impl AgentOpts {
    /// A memory-table agent for `node` holding `finalizer`, with no delay.
    pub fn new(node: &str, finalizer: Option<&str>) -> Self {
        Self {
            node: node.into(),
            finalizer: finalizer.map(String::from),
            naive: false,
            delay: "0ms".into(),
            dataplane: "memory".into(),
            netns: None,
            extra: Vec::new(),
        }
    }
}

/// A running agent process with its own state directory (state file, event
/// log, log). Killed on drop; the directory is kept for a restart.
pub struct AgentProc {
    /// The process.
    pub child: std::process::Child,
    /// Port of /metrics, /healthz, /readyz, /rules.
    pub port: u16,
    /// State file, event log (`events.jsonl`) and stderr log (`agent.log`).
    pub dir: PathBuf,
    /// How it was started.
    pub opts: AgentOpts,
}

impl AgentProc {
    /// Starts an agent in a fresh directory and waits until it is ready.
    pub fn start(opts: AgentOpts) -> Self {
        let dir = std::env::temp_dir().join(unique(&format!("agent-{}", opts.node)));
        std::fs::create_dir_all(&dir).unwrap();
        Self::start_in(opts, dir)
    }

    /// Starts an agent in `dir` (reusing its state and event log, as a restart does).
    pub fn start_in(opts: AgentOpts, dir: PathBuf) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("agent.log")).unwrap();
        let mut cmd = match conformance_cmd() {
            Some(command) => contract_command(&command, &opts, port, &dir),
            None => reference_command(&opts, port, &dir),
        };
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
        // Its own process group, so that a kill reaches whatever `sh -c` started.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().unwrap();
        let mut agent = Self { child, port, dir, opts };
        agent.wait_ready();
        agent
    }

    fn wait_ready(&mut self) {
        for _ in 0..300 {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("agent exited with {status} before it was ready; log:\n{}", self.log());
            }
            if self.get("/readyz").is_some_and(|(code, _)| code == 200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("agent not ready after 30 s; log:\n{}", self.log());
    }

    /// SIGKILLs the agent and its process group (no graceful shutdown),
    /// keeping its directory.
    pub fn kill(&mut self) {
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.child.id())]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills this agent and starts a new process on the same state.
    pub fn restart(mut self) -> Self {
        self.kill();
        let (opts, dir) = (self.opts.clone(), self.dir.clone());
        Self::start_in(opts, dir)
    }

    /// `GET path` → (status, body), or `None` if the agent does not answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(&format!("127.0.0.1:{}", self.port), path)
    }

    /// The agent's table, IP → UID (from `/rules`).
    pub fn rules(&self) -> BTreeMap<String, String> {
        let (code, body) = self.get("/rules").expect("agent answers /rules");
        assert_eq!(code, 200, "{body}");
        let rules: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
        rules.iter().map(|r| (r["ip"].as_str().unwrap().to_string(), r["uid"].as_str().unwrap().to_string())).collect()
    }

    /// `/metrics` text.
    pub fn metrics(&self) -> String {
        self.get("/metrics").expect("agent answers /metrics").1
    }

    /// The value of an unlabelled metric.
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.metrics();
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("metric {name} missing:\n{text}"))
            .trim()
            .parse()
            .unwrap()
    }

    /// The event log written so far.
    pub fn events(&self) -> Vec<watcher_example::eventlog::Record> {
        watcher_example::eventlog::read(&self.dir.join("events.jsonl")).unwrap_or_default()
    }

    /// The agent's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }
}

/// `watcher-example` with its own flags (every option of [`AgentOpts`]).
fn reference_command(opts: &AgentOpts, port: u16, dir: &std::path::Path) -> Command {
    let mut cmd = Command::new(agent_bin());
    cmd.arg("--node")
        .arg(&opts.node)
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--serve-rules")
        .arg("--dataplane")
        .arg(&opts.dataplane)
        .arg("--state-file")
        .arg(dir.join("state.json"))
        .arg("--event-log")
        .arg(dir.join("events.jsonl"))
        .arg("--teardown-delay")
        .arg(&opts.delay)
        .args(&opts.extra)
        .env("RUST_LOG", "info");
    match &opts.finalizer {
        Some(f) => cmd.arg("--finalizer").arg(f),
        None => cmd.arg("--no-finalizer"),
    };
    if opts.naive {
        cmd.arg("--naive-ip-keyed");
    }
    if let Some(ns) = &opts.netns {
        cmd.arg("--netns").arg(ns);
    }
    cmd
}

/// An agent of the conformance contract: `sh -c <command>` with the
/// contract's environment. What the agent is (naive or not, its dataplane)
/// is its own: only the node, the finalizer and the teardown delay are given.
fn contract_command(command: &str, opts: &AgentOpts, port: u16, dir: &std::path::Path) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .env("NETENDPOINT_NODE", &opts.node)
        .env("NETENDPOINT_FINALIZER", opts.finalizer.as_deref().unwrap_or(""))
        .env("KUBECONFIG", kubeconfig())
        .env("NETENDPOINT_AGENT_ADDR", format!("127.0.0.1:{port}"))
        .env("NETENDPOINT_AGENT_DIR", dir)
        .env("NETENDPOINT_AGENT_TEARDOWN_DELAY", &opts.delay);
    cmd
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits (bounded) until no endpoint of `pools` is releasing and `agent`'s
/// table holds exactly the live endpoints (IP → UID) of `pools`. Panics with
/// both views otherwise.
pub async fn wait_converged(agent: &AgentProc, pools: &[&str], what: &str) {
    let mut last = String::new();
    for _ in 0..300 {
        let mut live = BTreeMap::new();
        let mut releasing = 0;
        for pool in pools {
            for (ip, (uid, rel)) in pool_state(pool).await {
                if rel {
                    releasing += 1;
                } else {
                    live.insert(ip, uid);
                }
            }
        }
        let rules = agent.rules();
        if releasing == 0 && rules == live {
            return;
        }
        last = format!("releasing={releasing}\nendpoints={live:?}\nrules    ={rules:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: agent {} did not converge within 30 s:\n{last}\nlog tail:\n{}", agent.opts.node, {
        let log = agent.log();
        log.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    });
}

impl AgentProc {
    /// Number of rules in the agent's persisted state file (readable while it is down).
    pub fn rules_from_state_file(&self) -> usize {
        std::fs::read(self.dir.join("state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Vec<serde_json::Value>>(&b).ok())
            .map_or(0, |v| v.len())
    }
}
