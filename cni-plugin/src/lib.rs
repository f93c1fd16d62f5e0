//! netendpoint: a CNI IPAM plugin whose IP lease is a `NetworkEndpoint` object.
//!
//! Layers, each in its own module; a module never imports the ones above it
//! in this list:
//! - [`protocol`]: the CNI spec (environment, stdin, results, errors);
//! - [`store`]: every Kubernetes call, behind narrow traits by role;
//! - [`local`]: node-local state (cursors, records, hints), never needed
//!   for correctness;
//! - [`claim`]: the claim primitives (create, retry, roll back);
//! - [`wait`]: the one watch-until primitive every wait uses;
//! - [`queue`]: a waiting ADD's entry in its full pool's queue;
//! - [`dynamic`], [`static_ip`], [`sticky`]: the three ways an address is
//!   chosen (by the allocator, by the runtime, by a claim);
//! - [`commands`]: ADD, DEL and CHECK, in order of their steps;
//! - [`lifecycle`]: STATUS and GC.
//!
//! The validated `ipam` section and the allocator (ranges and candidate
//! order, with no Kubernetes in it) are the `netendpoint-netconf` crate's,
//! which the controller and `kubectl netendpoint` read networks with too.
//!
//! [`run`] ties them together for one invocation. It takes the environment
//! and stdin as values and returns what to print and the exit code, so the
//! binary's `main` is the only place that touches process globals.

pub mod claim;
pub mod commands;
pub mod dynamic;
pub mod error;
pub mod lifecycle;
pub mod local;
pub mod nofollow;
pub mod protocol;
pub mod queue;
pub mod static_ip;
pub mod sticky;
pub mod store;
#[cfg(test)]
mod tests;
pub mod wait;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use netendpoint_netconf::config::CLEANUP_RESERVE;
use netendpoint_netconf::{IpamConfig, LogConfig};
use tracing::{Instrument, debug, error, info, info_span, warn};

use crate::claim::{Attachment, Deadline};
pub use crate::error::{Error, Result};
use crate::local::LocalState;
use crate::protocol::{AttachmentKey, CURRENT_VERSION, Command, Invocation, IpamResult, NetConf, SUPPORTED_VERSIONS};
use crate::store::kube::KubeStore;
use crate::store::tally::Tally;
use netendpoint_lease::ServerClock;

/// What the binary prints on stdout, and its exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The CNI result or error JSON (empty for a successful DEL, CHECK or GC).
    pub stdout: String,
    /// 0 on success, 1 on error.
    pub code: i32,
}

/// Runs one CNI invocation described by `env` and `stdin`.
pub fn run(env: &HashMap<String, String>, stdin: &[u8]) -> Output {
    match dispatch(env, stdin) {
        Ok(Some(v)) => Output { stdout: v.to_string(), code: 0 },
        Ok(None) => Output { stdout: String::new(), code: 0 },
        Err(e) => {
            let version = NetConf::peek_version(stdin)
                .filter(|v| SUPPORTED_VERSIONS.contains(&v.as_str()))
                .unwrap_or_else(|| CURRENT_VERSION.to_string());
            error!(code = e.code(), error = %e, "failed");
            Output { stdout: protocol::encode_error(&version, &e).to_string(), code: 1 }
        }
    }
}

fn dispatch(env: &HashMap<String, String>, stdin: &[u8]) -> Result<Option<serde_json::Value>> {
    let inv = match Invocation::from_env(env) {
        Err(e) if env.get("CNI_COMMAND").is_some_and(|c| c == Command::Status.as_str()) => {
            return Err(Error::NotReady(Box::new(e)));
        }
        inv => inv?,
    };
    if inv.command == Command::Version {
        return Ok(Some(protocol::version_info()));
    }
    let res = dispatch_network(&inv, env, stdin);
    // STATUS answers only with the spec's STATUS codes: whatever stops this
    // plugin from serving ADDs (bad config or credentials included) is 50.
    match (inv.command, res) {
        (Command::Status, Err(e @ Error::NotReady(_))) => Err(e),
        (Command::Status, Err(e)) => Err(Error::NotReady(Box::new(e))),
        (_, res) => res,
    }
}

fn dispatch_network(
    inv: &Invocation,
    env: &HashMap<String, String>,
    stdin: &[u8],
) -> Result<Option<serde_json::Value>> {
    let net = NetConf::parse(stdin)?;
    if inv.command.since() > net.version {
        return Err(Error::CommandNotInVersion { command: inv.command.as_str(), version: net.version.as_str() });
    }
    let conf = IpamConfig::parse(&net.ipam, &net.name)?;
    init_logging(&conf.log);
    for w in &conf.warnings {
        warn!("{w}");
    }
    // What the runtime passed, without values: the CNI_ARGS keys and whether a
    // netns came (runtimes send DELs without one after the sandbox is gone).
    let mut arg_keys: Vec<&str> = inv.args.keys().map(String::as_str).collect();
    arg_keys.sort_unstable();
    debug!(
        command = inv.command.as_str(),
        cni_args = %arg_keys.join(","),
        netns = if inv.netns.is_empty() { "empty" } else { "set" },
        "invocation"
    );
    let node = node_name(&conf, env)?;
    let who = Attachment {
        key: AttachmentKey { container_id: inv.container_id.clone(), if_name: inv.if_name.clone() },
        node,
        pod: inv.pod(&net.args_cni),
    };
    let span = info_span!(
        "cni",
        command = ?inv.command,
        pool = %conf.pool,
        network = %conf.network,
        container_id = %who.key.container_id,
        if_name = %who.key.if_name,
        node = %who.node,
        pod = %who.pod.as_ref().map(|p| format!("{}/{}", p.namespace, p.name)).unwrap_or_default(),
    );
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|source| Error::Io {
        what: "tokio runtime",
        path: String::new(),
        source,
    })?;
    // Requested static IPs are read, and refused if malformed, before any API call.
    let asked = if inv.command == Command::Add {
        commands::Asked {
            ips: static_ip::Request::from_runtime(net.runtime_config_ips()?, net.args_cni_ips()?, inv.ip_arg()?),
            claim: net.claim_reference.clone(),
        }
    } else {
        commands::Asked::default()
    };
    let local = LocalState::new(&conf.data_dir, &conf.pool);
    let job = Job { command: inv.command, net: &net, conf: &conf, who: &who, asked: &asked, local: &local };
    rt.block_on(run_command(&job).instrument(span))
}

/// What one command works on, once its input is parsed: the command, the
/// network config and its `ipam` section, the attachment, the addresses
/// asked for (ADD), and the node's local state.
struct Job<'a> {
    command: Command,
    net: &'a NetConf,
    conf: &'a IpamConfig,
    who: &'a Attachment,
    asked: &'a commands::Asked,
    local: &'a LocalState,
}

/// The client's view of one invocation: the API server's clock as its
/// answers show it, and the tally of requests made.
#[derive(Default)]
struct Session {
    clock: ServerClock,
    tally: Tally,
}

/// Runs one command against the API server within `ipam.timeout`. When the
/// deadline passes, an ADD first releases whatever it may have claimed (in
/// the time kept back for cleanup), then the invocation fails with code 11.
async fn run_command(job: &Job<'_>) -> Result<Option<serde_json::Value>> {
    let session = Session::default();
    let res = bounded(job, &session).await;
    let tally = &session.tally;
    info!(requests = tally.total(), by = %tally.summary(), "API requests of this {}", job.command.as_str());
    res
}

/// [`run_command`]'s work in `session`.
async fn bounded(job: &Job<'_>, session: &Session) -> Result<Option<serde_json::Value>> {
    let Job { command, net, conf, who, asked, local } = *job;
    let (clock, tally) = (&session.clock, &session.tally);
    let work_time = conf.timeout.saturating_sub(CLEANUP_RESERVE);
    let work = async {
        let store = KubeStore::new(kube_client(conf, clock.clone(), tally).await?, clock.clone());
        match command {
            Command::Add => {
                let work = Deadline::after(work_time);
                let result: IpamResult = commands::add_asked(&store, conf, who, local, asked, work).await?;
                Ok(Some(result.encode(net.version)))
            }
            Command::Del => commands::del(&store, conf, who, local).await.map(|()| None),
            Command::Check => {
                let prev =
                    net.prev_result.as_ref().ok_or_else(|| Error::config("prevResult", "is required for CHECK"))?;
                let addrs = IpamResult::addresses_of(prev)?;
                commands::check(&store, conf, who, local, &addrs).await.map(|()| None)
            }
            Command::Status => {
                let now = k8s_openapi::jiff::Timestamp::now().as_second();
                lifecycle::status(&store, conf, local, now).await.map(|()| None)
            }
            Command::Gc => {
                lifecycle::gc(&store, conf, &who.node, net.valid_attachments.as_deref(), local).await.map(|()| None)
            }
            Command::Version => Ok(Some(protocol::version_info())),
        }
    };
    let Ok(res) = tokio::time::timeout(work_time, work).await else {
        let err = Error::DeadlineExceeded { command: command.as_str(), after: work_time };
        error!(timeout_ms = conf.timeout.as_millis() as u64, "{err}");
        if command != Command::Add {
            return Err(err);
        }
        // The work was cut off mid-ADD: whatever of this attachment it may
        // have created and not recorded is found as DEL finds it, and released.
        let cleanup = async {
            let store = KubeStore::new(kube_client(conf, clock.clone(), tally).await?, clock.clone());
            commands::del(&store, conf, who, local).await
        };
        return match tokio::time::timeout(CLEANUP_RESERVE, cleanup).await {
            Ok(Ok(())) => Err(err),
            Ok(Err(e)) => Err(Error::Many(vec![err, e])),
            Err(_) => {
                warn!("cleanup after the deadline did not finish; the runtime's DEL will release what is left");
                Err(err)
            }
        };
    };
    res
}

/// The node name: `ipam.nodeName`, then the node-name file the installer
/// writes from the downward API (`ipam.nodeNameFile`), then `NODE_NAME` /
/// `KUBERNETES_NODE_NAME`, then the hostname. ADD refuses any of them that
/// is not a registered Node (see `commands::add`).
fn node_name(conf: &IpamConfig, env: &HashMap<String, String>) -> Result<String> {
    if let Some(n) = &conf.node_name {
        return Ok(n.clone());
    }
    match std::fs::read_to_string(&conf.node_name_file) {
        Ok(text) => {
            let n = text.trim();
            if !netendpoint_crd::is_dns1123_subdomain(n) {
                return Err(Error::config(
                    "ipam.nodeNameFile",
                    &format!("{} holds {:?}, which is not a node name", conf.node_name_file.display(), truncate(n)),
                ));
            }
            return Ok(n.to_string());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(Error::Io { what: "node-name file", path: conf.node_name_file.display().to_string(), source });
        }
    }
    for var in ["NODE_NAME", "KUBERNETES_NODE_NAME"] {
        if let Some(n) = env.get(var).filter(|n| !n.is_empty()) {
            return Ok(n.clone());
        }
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_lowercase())
        .ok()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| Error::config("ipam.nodeName", "is not set and the hostname cannot be read"))
}

fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

/// A client for `ipam.kubeconfig` whose responses feed `clock`.
async fn kube_client(conf: &IpamConfig, clock: ServerClock, tally: &Tally) -> Result<kube::Client> {
    let path = conf.kubeconfig.display().to_string();
    let bad = |reason: String| Error::Kubeconfig { path: path.clone(), reason };
    // Read without following a link planted as the file itself.
    let text = nofollow::read_to_string(&conf.kubeconfig).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => bad("is a symbolic link; the plugin does not follow one here".into()),
        _ => bad(e.to_string()),
    })?;
    let mut kc = Kubeconfig::from_yaml(&text).map_err(|e| bad(e.to_string()))?;
    if let Some(dir) = conf.kubeconfig.parent() {
        resolve_relative_paths(&mut kc, dir);
    }
    read_token_files(&mut kc).map_err(bad)?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    cfg.connect_timeout = Some(Duration::from_secs(5));
    cfg.read_timeout = Some(conf.timeout);
    cfg.write_timeout = Some(Duration::from_secs(30));
    let layer = netendpoint_lease::clock::date_layer(clock);
    // kube's stack with TCP_NODELAY: the create of a promised address,
    // right after the watch event that promised it, is not held back by
    // Nagle's algorithm waiting for the server's delayed ACK.
    Ok(netendpoint_lease::connect::client_builder(&cfg)
        .map_err(|e| bad(e.to_string()))?
        .with_layer(&layer)
        .with_layer(&tally.layer())
        .build())
}

/// Makes the file paths a kubeconfig names relative to its own directory, as
/// kubectl and client-go read them (the installer writes `ca.crt` and
/// `token` beside the kubeconfig). Parsing from text, which the no-follow
/// read needs, does not do this by itself.
fn resolve_relative_paths(kc: &mut Kubeconfig, dir: &Path) {
    let resolve = |p: &mut Option<String>| {
        if let Some(path) = p.as_mut().filter(|s| !s.is_empty() && Path::new(s.as_str()).is_relative()) {
            *path = dir.join(path.as_str()).display().to_string();
        }
    };
    for cluster in kc.clusters.iter_mut().filter_map(|n| n.cluster.as_mut()) {
        resolve(&mut cluster.certificate_authority);
    }
    for auth in kc.auth_infos.iter_mut().filter_map(|n| n.auth_info.as_mut()) {
        resolve(&mut auth.client_certificate);
        resolve(&mut auth.client_key);
        resolve(&mut auth.token_file);
    }
}

/// Reads every `tokenFile` the kubeconfig names into `token`, trimmed of
/// surrounding whitespace as client-go does. kube-client sends the file's
/// bytes as they are, so a token written with a trailing newline (`echo`,
/// most editors) made every request fail as an invalid header, which was
/// then taken for an unreachable server. The plugin lives for one
/// invocation, so reading the file once loses no refresh.
fn read_token_files(kc: &mut Kubeconfig) -> std::result::Result<(), String> {
    for auth in kc.auth_infos.iter_mut().filter_map(|n| n.auth_info.as_mut()) {
        if auth.token.is_some() {
            continue;
        }
        if let Some(path) = auth.token_file.take() {
            let text = std::fs::read_to_string(&path).map_err(|e| format!("tokenFile {path}: {e}"))?;
            let token = text.trim();
            if token.is_empty() {
                return Err(format!("tokenFile {path} is empty"));
            }
            auth.token = Some(secrecy::SecretString::from(token.to_string()));
        }
    }
    Ok(())
}

/// Installs the global subscriber: to `log.file` if set (default level
/// `info`), else to stderr (default level `warn`). Never to stdout. The level
/// applies to the plugin's own crates; every other crate logs at `warn`.
fn init_logging(log: &LogConfig) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let file = log.file.as_ref().and_then(|p| {
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        nofollow::open_append(p).ok()
    });
    let default = if file.is_some() { LevelFilter::INFO } else { LevelFilter::WARN };
    // `IpamConfig::parse` admits only error, warn, info, debug and trace.
    let level = log.level.as_deref().and_then(|l| l.parse().ok()).unwrap_or(default);
    let filter = Targets::new()
        .with_target("netendpoint_cni", level)
        .with_target("netendpoint", level)
        .with_default(LevelFilter::WARN);
    let fmt = tracing_subscriber::fmt::layer().with_target(false).with_ansi(false);
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match file {
        Some(f) => registry.with(fmt.with_writer(std::sync::Mutex::new(f))).try_init(),
        None => registry.with(fmt.with_writer(std::io::stderr)).try_init(),
    };
}

#[cfg(test)]
mod kubeconfig_tests {
    use super::*;

    #[test]
    fn relative_credential_paths_resolve_beside_the_kubeconfig_and_absolute_ones_stay() {
        let mut kc = Kubeconfig::from_yaml(
            r#"
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: ca.crt}
- name: d
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: /etc/ca.pem}
users:
- name: u
  user: {tokenFile: token, client-certificate: sub/cert.pem}
"#,
        )
        .unwrap();
        resolve_relative_paths(&mut kc, Path::new("/etc/cni/net.d/netendpoint.d"));
        let ca: Vec<_> =
            kc.clusters.iter().map(|c| c.cluster.as_ref().unwrap().certificate_authority.clone()).collect();
        assert_eq!(ca, [Some("/etc/cni/net.d/netendpoint.d/ca.crt".into()), Some("/etc/ca.pem".into())]);
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.token_file.as_deref(), Some("/etc/cni/net.d/netendpoint.d/token"));
        assert_eq!(user.client_certificate.as_deref(), Some("/etc/cni/net.d/netendpoint.d/sub/cert.pem"));
        assert_eq!(user.client_key, None);
    }

    #[test]
    fn token_files_are_read_trimmed_and_an_empty_one_is_an_error() {
        use secrecy::ExposeSecret;
        let dir = std::env::temp_dir().join(format!("netendpoint-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "abc.def\n").unwrap();
        std::fs::write(dir.join("empty"), "\n").unwrap();
        let yaml = |file: &str| {
            format!(
                "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user: {{tokenFile: {}}}\n",
                dir.join(file).display()
            )
        };
        let mut kc = Kubeconfig::from_yaml(&yaml("token")).unwrap();
        read_token_files(&mut kc).unwrap();
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.token.as_ref().unwrap().expose_secret(), "abc.def");
        assert_eq!(user.token_file, None);

        let mut kc = Kubeconfig::from_yaml(&yaml("empty")).unwrap();
        assert!(read_token_files(&mut kc).unwrap_err().contains("is empty"));
        let mut kc = Kubeconfig::from_yaml(&yaml("missing")).unwrap();
        assert!(read_token_files(&mut kc).unwrap_err().contains("missing"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
