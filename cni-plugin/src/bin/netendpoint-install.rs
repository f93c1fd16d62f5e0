//! `netendpoint-install`: installs the netendpoint CNI plugin on a node and
//! keeps its credentials fresh. It runs in the installer DaemonSet (see
//! `deploy/installer-daemonset.yaml`), with the host's CNI directories mounted.
//!
//! Each sync, in this order (so a runtime never sees a network config whose
//! plugin or credentials are missing):
//! 1. the plugin binary, into `--cni-bin-dir`;
//! 2. `ca.crt` and `token` (copies of the pod's projected ServiceAccount
//!    token and cluster CA), then a `kubeconfig` that references them by
//!    relative path (`tokenFile: token`), into `--kubeconfig-dir`;
//! 3. `nodename`, into `--kubeconfig-dir` too: this node's name, from
//!    `--node-name` or else `NODE_NAME` (the DaemonSet sets it from the
//!    downward API). The runtime passes plugins no node name, so the plugin
//!    reads it from this file. A sync fails if neither is set or the name is
//!    not a DNS-1123 subdomain;
//! 4. optionally, the network config `--net-conf`, into `--net-conf-dir`.
//!
//! Guarantees:
//! - Every file is written atomically: a temp file in the destination
//!   directory, fsync, chmod, rename, fsync of the directory. A plugin binary
//!   being executed keeps its old inode and is never corrupted, and readers
//!   see the old or the new content, never a mix.
//! - A file is rewritten only when its content changed; the token copy
//!   follows the kubelet's rotations within one `--interval`.
//! - The token is never logged; neither is the CA or the kubeconfig content.
//! - Nothing is deleted from the host, not even on exit: running pods still
//!   need the plugin (and its credentials) for DEL.
//!
//! `--once` installs and exits (non-zero on failure); otherwise it loops
//! until SIGTERM/SIGINT, logging and retrying failures each interval.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use tracing::{error, info, warn};

/// Where the pod's projected ServiceAccount token is mounted (see the DaemonSet).
const DEFAULT_TOKEN_SRC: &str = "/var/run/secrets/netendpoint/token";
/// Where the cluster CA is mounted next to it.
const DEFAULT_CA_SRC: &str = "/var/run/secrets/netendpoint/ca.crt";
/// The host's `/opt/cni/bin`, as mounted in the container.
const DEFAULT_CNI_BIN_DIR: &str = "/host/opt/cni/bin";
/// The host's `/etc/cni/net.d`, as mounted in the container.
const DEFAULT_NET_CONF_DIR: &str = "/host/etc/cni/net.d";
/// The host's `/etc/cni/net.d/netendpoint.d`: the plugin's default `ipam.kubeconfig` lives here.
const DEFAULT_KUBECONFIG_DIR: &str = "/host/etc/cni/net.d/netendpoint.d";
/// File names inside the kubeconfig directory.
const KUBECONFIG_FILE: &str = "kubeconfig";
const TOKEN_FILE: &str = "token";
const CA_FILE: &str = "ca.crt";
/// This node's name, for the plugin (which is given none by the runtime).
const NODE_NAME_FILE: &str = "nodename";

const USAGE: &str = "\
netendpoint-install: installs the netendpoint CNI plugin and keeps its kubeconfig token fresh.

Options (each also accepts --flag=value):
  --plugin-src PATH       plugin binary to install [default: `netendpoint` next to this binary]
  --plugin-name NAME      file name in the CNI bin dir [default: netendpoint]
  --cni-bin-dir DIR       host CNI bin dir [default: /host/opt/cni/bin]
  --kubeconfig-dir DIR    where kubeconfig, token, ca.crt and nodename go [default: /host/etc/cni/net.d/netendpoint.d]
  --node-name NAME        this node's name, written to <kubeconfig-dir>/nodename for the plugin
                          [default: $NODE_NAME; one of the two is required]
  --token-src PATH        projected ServiceAccount token [default: /var/run/secrets/netendpoint/token]
  --ca-src PATH           cluster CA bundle [default: /var/run/secrets/netendpoint/ca.crt]
  --server URL            API server URL [default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT]
  --net-conf PATH         also install this network config (.conf/.conflist/.json)
  --net-conf-dir DIR      where the network config goes [default: /host/etc/cni/net.d]
  --net-conf-name NAME    its file name there [default: the file name of --net-conf]
  --net-conf-optional     a missing --net-conf is skipped instead of being an error
  --interval DURATION     how often to check the token and files (e.g. 10s, 1m) [default: 10s]
  --once                  install once and exit
  -h, --help              this text
Logging: RUST_LOG (default info), to stderr. The token is never logged.";

/// Everything that can go wrong in the installer.
#[derive(Debug, thiserror::Error)]
enum Error {
    /// Bad command line.
    #[error("{0}\n\n{USAGE}")]
    Usage(String),
    /// A file operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
    /// The API server address is not known.
    #[error("no API server address: pass --server or set KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT")]
    NoServer,
    /// A source file has unusable content.
    #[error("{path}: {reason}")]
    BadContent { path: String, reason: String },
    /// Neither `--node-name` nor `NODE_NAME` is set.
    #[error("no node name: pass --node-name or set NODE_NAME (the DaemonSet sets it from spec.nodeName)")]
    NoNodeName,
    /// The node name is not a valid Node object name.
    #[error("node name {0:?} (from --node-name or NODE_NAME) is not a DNS-1123 subdomain")]
    BadNodeName(String),
}

type Result<T, E = Error> = std::result::Result<T, E>;

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> Error + 'a {
    move |source| Error::Io { what, path: path.display().to_string(), source }
}

/// The parsed command line.
#[derive(Debug, Clone)]
struct Options {
    plugin_src: PathBuf,
    plugin_name: String,
    cni_bin_dir: PathBuf,
    kubeconfig_dir: PathBuf,
    token_src: PathBuf,
    ca_src: PathBuf,
    server: String,
    /// `--node-name`, else a non-empty `NODE_NAME`; checked at each sync.
    node_name: Option<String>,
    net_conf: Option<PathBuf>,
    net_conf_dir: PathBuf,
    net_conf_name: Option<String>,
    net_conf_optional: bool,
    interval: Duration,
    once: bool,
}

impl Options {
    /// Parses `args` (without the program name); `env` supplies KUBERNETES_SERVICE_* and NODE_NAME.
    fn parse(args: &[String], env: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut plugin_src = None;
        let mut plugin_name = "netendpoint".to_string();
        let mut cni_bin_dir = PathBuf::from(DEFAULT_CNI_BIN_DIR);
        let mut kubeconfig_dir = PathBuf::from(DEFAULT_KUBECONFIG_DIR);
        let mut token_src = PathBuf::from(DEFAULT_TOKEN_SRC);
        let mut ca_src = PathBuf::from(DEFAULT_CA_SRC);
        let mut server = None;
        let mut node_name = None;
        let mut net_conf = None;
        let mut net_conf_dir = PathBuf::from(DEFAULT_NET_CONF_DIR);
        let mut net_conf_name = None;
        let mut net_conf_optional = false;
        let mut interval = Duration::from_secs(10);
        let mut once = false;

        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
                _ => (arg.as_str(), None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| it.next().cloned())
                    .ok_or_else(|| Error::Usage(format!("{flag} needs a value")))
            };
            match flag {
                "--plugin-src" => plugin_src = Some(PathBuf::from(value()?)),
                "--plugin-name" => plugin_name = value()?,
                "--cni-bin-dir" => cni_bin_dir = PathBuf::from(value()?),
                "--kubeconfig-dir" => kubeconfig_dir = PathBuf::from(value()?),
                "--token-src" => token_src = PathBuf::from(value()?),
                "--ca-src" => ca_src = PathBuf::from(value()?),
                "--server" => server = Some(value()?),
                "--node-name" => node_name = Some(value()?),
                "--net-conf" => net_conf = Some(PathBuf::from(value()?)),
                "--net-conf-dir" => net_conf_dir = PathBuf::from(value()?),
                "--net-conf-name" => net_conf_name = Some(value()?),
                "--interval" => interval = parse_duration(&value()?)?,
                "--net-conf-optional" | "--once" if inline.is_some() => {
                    return Err(Error::Usage(format!("{flag} takes no value")));
                }
                "--net-conf-optional" => net_conf_optional = true,
                "--once" => once = true,
                "-h" | "--help" => return Err(Error::Usage("help requested".into())),
                other => return Err(Error::Usage(format!("unknown argument {other:?}"))),
            }
        }
        for name in [Some(&plugin_name), net_conf_name.as_ref()].into_iter().flatten() {
            if name.is_empty() || name.contains('/') || name.starts_with('.') {
                return Err(Error::Usage(format!("{name:?} must be a plain file name")));
            }
        }
        let plugin_src = match plugin_src {
            Some(p) => p,
            None => std::env::current_exe()
                .map_err(io_err("locate", Path::new("current executable")))?
                .with_file_name("netendpoint"),
        };
        let server = match server {
            Some(s) => s,
            None => service_url(env("KUBERNETES_SERVICE_HOST"), env("KUBERNETES_SERVICE_PORT"))?,
        };
        let node_name = node_name.or_else(|| env("NODE_NAME").filter(|n| !n.is_empty()));
        Ok(Self {
            plugin_src,
            plugin_name,
            cni_bin_dir,
            kubeconfig_dir,
            token_src,
            ca_src,
            server,
            node_name,
            net_conf,
            net_conf_dir,
            net_conf_name,
            net_conf_optional,
            interval,
            once,
        })
    }
}

/// `https://HOST:PORT`, with an IPv6 host in brackets.
fn service_url(host: Option<String>, port: Option<String>) -> Result<String> {
    let host = host.filter(|h| !h.is_empty()).ok_or(Error::NoServer)?;
    let port = port.filter(|p| !p.is_empty()).ok_or(Error::NoServer)?;
    let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host };
    Ok(format!("https://{host}:{port}"))
}

/// `500ms`, `10s`, `2m`, `1h`, or a bare number of seconds.
fn parse_duration(s: &str) -> Result<Duration> {
    let bad = || Error::Usage(format!("--interval {s:?}: expected e.g. 500ms, 10s, 2m"));
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u64 = s[..split].parse().map_err(|_| bad())?;
    let d = match &s[split..] {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(bad()),
    };
    if d.is_zero() { Err(bad()) } else { Ok(d) }
}

/// Writes `data` to `dest` atomically with permissions `mode`: a temp file in
/// the same directory, fsync, chmod, rename over `dest`, fsync of the directory.
/// The temp name ends in `.tmp`, so neither a CNI runtime (which loads
/// `.conf`/`.conflist`/`.json`) nor a plugin lookup ever picks it up.
fn write_atomic(dest: &Path, mode: u32, fill: impl FnOnce(&mut File) -> io::Result<()>) -> Result<()> {
    let dir = dest.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp); // left over from a crash of a previous process with our pid
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        fill(&mut f)?;
        f.flush()?;
        // The umask may have masked `mode` at creation.
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, dest)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io_err("write", dest))
}

/// What a sync did to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Written,
    Unchanged,
}

/// Writes `data` to `dest` (atomically, `mode`) unless `dest` already holds exactly `data`
/// with that mode.
fn install_bytes(dest: &Path, data: &[u8], mode: u32) -> Result<Change> {
    let same = fs::read(dest).is_ok_and(|cur| cur == data)
        && fs::metadata(dest).is_ok_and(|m| m.permissions().mode() & 0o7777 == mode);
    if same {
        return Ok(Change::Unchanged);
    }
    write_atomic(dest, mode, |f| f.write_all(data))?;
    Ok(Change::Written)
}

/// Copies file `src` to `dest` (atomically, `mode`) unless `dest` already has the same
/// content and mode. Streams: a binary is never held in memory whole.
fn install_file(src: &Path, dest: &Path, mode: u32) -> Result<Change> {
    let same_mode = fs::metadata(dest).is_ok_and(|m| m.permissions().mode() & 0o7777 == mode);
    if same_mode && files_equal(src, dest).map_err(io_err("compare", dest))? {
        return Ok(Change::Unchanged);
    }
    let mut input = File::open(src).map_err(io_err("open", src))?;
    write_atomic(dest, mode, |f| io::copy(&mut input, f).map(drop))?;
    Ok(Change::Written)
}

/// Whether both files exist and have the same bytes.
fn files_equal(a: &Path, b: &Path) -> io::Result<bool> {
    use std::io::Read;
    let (Ok(fa), Ok(fb)) = (File::open(a), File::open(b)) else { return Ok(false) };
    if fa.metadata()?.len() != fb.metadata()?.len() {
        return Ok(false);
    }
    let (mut ra, mut rb) = (io::BufReader::new(fa), io::BufReader::new(fb));
    let (mut ba, mut bb) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = ra.read(&mut ba)?;
        if n == 0 {
            return Ok(true);
        }
        rb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>> {
    fs::read(path).map_err(io_err(what, path))
}

/// The kubeconfig the plugin reads. Paths are relative: kube-rs and client-go
/// resolve them against the kubeconfig's directory, so the file is valid both
/// at the host path and at the container's mount path. `tokenFile` (not an
/// inline token) makes each plugin run read the current token.
fn render_kubeconfig(server: &str) -> String {
    format!(
        "# Written by netendpoint-install; rewritten when it changes. Do not edit.\n\
         apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: netendpoint\n  \
           cluster:\n    \
             server: {server}\n    \
             certificate-authority: {CA_FILE}\n\
         users:\n\
         - name: netendpoint\n  \
           user:\n    \
             tokenFile: {TOKEN_FILE}\n\
         contexts:\n\
         - name: netendpoint\n  \
           context:\n    \
             cluster: netendpoint\n    \
             user: netendpoint\n\
         current-context: netendpoint\n",
        server = serde_json::Value::String(server.to_string()),
    )
}

/// The installer's state across syncs.
struct Installer {
    opts: Options,
    /// (length, mtime) of the plugin binary we installed last, to notice a replaced or removed one cheaply.
    plugin_installed: Option<(u64, std::time::SystemTime)>,
    /// Whether we already warned that the optional network config is absent.
    warned_no_net_conf: bool,
}

impl Installer {
    fn new(opts: Options) -> Self {
        Self { opts, plugin_installed: None, warned_no_net_conf: false }
    }

    /// One pass over everything; stops at the first failure so later steps
    /// (the network config) never get ahead of earlier ones (plugin,
    /// credentials, node name).
    fn sync(&mut self) -> Result<()> {
        self.sync_plugin()?;
        self.sync_credentials()?;
        self.sync_node_name()?;
        self.sync_net_conf()
    }

    fn sync_plugin(&mut self) -> Result<()> {
        let dest = self.opts.cni_bin_dir.join(&self.opts.plugin_name);
        let stamp = |p: &Path| fs::metadata(p).ok().and_then(|m| Some((m.len(), m.modified().ok()?)));
        if self.plugin_installed.is_some() && self.plugin_installed == stamp(&dest) {
            return Ok(());
        }
        let src = &self.opts.plugin_src;
        let src_len = fs::metadata(src).map_err(io_err("stat plugin binary", src))?.len();
        if src_len == 0 {
            return Err(Error::BadContent { path: src.display().to_string(), reason: "plugin binary is empty".into() });
        }
        fs::create_dir_all(&self.opts.cni_bin_dir).map_err(io_err("create", &self.opts.cni_bin_dir))?;
        match install_file(src, &dest, 0o755)? {
            Change::Written => {
                info!(src = %src.display(), dest = %dest.display(), bytes = src_len, "installed plugin binary")
            }
            Change::Unchanged => info!(dest = %dest.display(), "plugin binary already up to date"),
        }
        self.plugin_installed = stamp(&dest);
        Ok(())
    }

    fn sync_credentials(&mut self) -> Result<()> {
        let dir = &self.opts.kubeconfig_dir;
        fs::create_dir_all(dir).map_err(io_err("create", dir))?;
        // Only root (the plugin runs as root) may read the credentials.
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_err("chmod", dir))?;

        let ca = read(&self.opts.ca_src, "read CA")?;
        if !String::from_utf8_lossy(&ca).contains("-----BEGIN CERTIFICATE-----") {
            return Err(Error::BadContent {
                path: self.opts.ca_src.display().to_string(),
                reason: "is not a PEM certificate bundle".into(),
            });
        }
        if install_bytes(&dir.join(CA_FILE), &ca, 0o644)? == Change::Written {
            info!(dest = %dir.join(CA_FILE).display(), "installed cluster CA");
        }

        let token = read(&self.opts.token_src, "read token")?;
        let token = trim_ascii(&token);
        if token.is_empty() || token.iter().any(|b| b.is_ascii_whitespace() || !b.is_ascii_graphic()) {
            // Never echo the content: it may be a (damaged) token.
            return Err(Error::BadContent {
                path: self.opts.token_src.display().to_string(),
                reason: "is not a bearer token (empty or not a single printable word)".into(),
            });
        }
        if install_bytes(&dir.join(TOKEN_FILE), token, 0o600)? == Change::Written {
            info!(dest = %dir.join(TOKEN_FILE).display(), src = %self.opts.token_src.display(), "installed ServiceAccount token (rotated or first install)");
        }

        let kubeconfig = render_kubeconfig(&self.opts.server);
        if install_bytes(&dir.join(KUBECONFIG_FILE), kubeconfig.as_bytes(), 0o600)? == Change::Written {
            info!(dest = %dir.join(KUBECONFIG_FILE).display(), server = %self.opts.server, "wrote plugin kubeconfig");
        }
        Ok(())
    }

    /// Writes `<kubeconfig-dir>/nodename` (no trailing newline) when it changed.
    /// Runs after [`Self::sync_credentials`], which creates the directory.
    fn sync_node_name(&mut self) -> Result<()> {
        let name = self.opts.node_name.as_deref().ok_or(Error::NoNodeName)?;
        if !netendpoint_crd::is_dns1123_subdomain(name) {
            return Err(Error::BadNodeName(name.to_string()));
        }
        let dest = self.opts.kubeconfig_dir.join(NODE_NAME_FILE);
        if install_bytes(&dest, name.as_bytes(), 0o644)? == Change::Written {
            info!(dest = %dest.display(), node = %name, "wrote node name");
        }
        Ok(())
    }

    fn sync_net_conf(&mut self) -> Result<()> {
        let Some(src) = &self.opts.net_conf else { return Ok(()) };
        let data = match fs::read(src) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound && self.opts.net_conf_optional => {
                if !self.warned_no_net_conf {
                    info!(src = %src.display(), "no network config to install (optional source absent)");
                    self.warned_no_net_conf = true;
                }
                return Ok(());
            }
            Err(e) => return Err(io_err("read network config", src)(e)),
        };
        self.warned_no_net_conf = false;
        // A broken file in net.d can break every pod on the node: refuse it, keep the old one.
        let conf: serde_json::Value = serde_json::from_slice(&data).map_err(|e| Error::BadContent {
            path: src.display().to_string(),
            reason: format!("is not valid JSON ({e}); the installed network config is left as it was"),
        })?;
        if conf.get("name").and_then(|n| n.as_str()).is_none_or(str::is_empty) {
            return Err(Error::BadContent {
                path: src.display().to_string(),
                reason: "has no \"name\"; the installed network config is left as it was".into(),
            });
        }
        let name = match &self.opts.net_conf_name {
            Some(n) => n.clone(),
            None => src.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        };
        let dir = &self.opts.net_conf_dir;
        fs::create_dir_all(dir).map_err(io_err("create", dir))?;
        let dest = dir.join(name);
        if install_bytes(&dest, &data, 0o644)? == Change::Written {
            info!(src = %src.display(), dest = %dest.display(), network = %conf["name"].as_str().unwrap_or_default(), "installed network config");
        }
        Ok(())
    }
}

fn trim_ascii(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(start, |e| e + 1);
    &b[start..end]
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(io::stderr().is_terminal())
        .with_writer(io::stderr)
        .try_init();
}

/// Loops until SIGTERM or SIGINT.
async fn run_loop(mut installer: Installer) {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int) = match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(t), Ok(i)) => (t, i),
        (Err(e), _) | (_, Err(e)) => {
            warn!(error = %e, "cannot install signal handlers; relying on the default action");
            return run_loop_without_signals(installer).await;
        }
    };
    let interval = installer.opts.interval;
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            () = tokio::time::sleep(interval) => {
                if let Err(e) = installer.sync() {
                    error!(error = %e, "sync failed; retrying");
                }
            }
        }
    }
    info!("stopping; installed files are left in place");
}

async fn run_loop_without_signals(mut installer: Installer) {
    loop {
        tokio::time::sleep(installer.opts.interval).await;
        if let Err(e) = installer.sync() {
            error!(error = %e, "sync failed; retrying");
        }
    }
}

fn main() -> ExitCode {
    init_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match Options::parse(&args, |k| std::env::var(k).ok()) {
        Ok(o) => o,
        Err(Error::Usage(m)) if m == "help requested" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("netendpoint-install: {e}");
            return ExitCode::from(2);
        }
    };
    info!(
        node = %opts.node_name.as_deref().unwrap_or_default(),
        cni_bin_dir = %opts.cni_bin_dir.display(),
        kubeconfig_dir = %opts.kubeconfig_dir.display(),
        server = %opts.server,
        interval = ?opts.interval,
        once = opts.once,
        "starting"
    );
    let mut installer = Installer::new(opts);
    let first = installer.sync();
    if installer.opts.once {
        return match first {
            Ok(()) => {
                info!("installed; exiting (--once)");
                ExitCode::SUCCESS
            }
            Err(e) => {
                error!(error = %e, "install failed");
                ExitCode::FAILURE
            }
        };
    }
    if let Err(e) = first {
        error!(error = %e, "install failed; retrying");
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            error!(error = %e, "cannot start the runtime");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(run_loop(installer));
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options> {
        parse_with_node_env(args, None)
    }

    /// Like [`parse`], with `NODE_NAME` set to `node_env`.
    fn parse_with_node_env(args: &[&str], node_env: Option<&str>) -> Result<Options> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        Options::parse(&args, |k| match k {
            "KUBERNETES_SERVICE_HOST" => Some("fd00::1".into()),
            "KUBERNETES_SERVICE_PORT" => Some("443".into()),
            "NODE_NAME" => node_env.map(str::to_string),
            _ => None,
        })
    }

    #[test]
    fn node_name_flag_wins_over_the_env() {
        let name = |args: &[&str], env| parse_with_node_env(args, env).unwrap().node_name;
        assert_eq!(name(&["--plugin-src=/x"], Some("node-env")).as_deref(), Some("node-env"));
        assert_eq!(name(&["--node-name", "node-flag"], Some("node-env")).as_deref(), Some("node-flag"));
        assert_eq!(name(&["--node-name=node-flag"], None).as_deref(), Some("node-flag"));
        assert_eq!(name(&["--plugin-src=/x"], Some("")), None);
        assert_eq!(name(&["--plugin-src=/x"], None), None);
    }

    #[test]
    fn node_name_file_is_written_when_changed_and_checked() {
        let dir = std::env::temp_dir().join(format!("ne-install-node-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let dir_flag = format!("--kubeconfig-dir={}", dir.display());
        let installer = |node: Option<&str>| Installer::new(parse_with_node_env(&[&dir_flag], node).unwrap());
        let file = dir.join(NODE_NAME_FILE);

        installer(Some("node-a.example")).sync_node_name().unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), "node-a.example");
        let mtime = fs::metadata(&file).unwrap().modified().unwrap();
        installer(Some("node-a.example")).sync_node_name().unwrap();
        assert_eq!(fs::metadata(&file).unwrap().modified().unwrap(), mtime, "unchanged name is not rewritten");
        installer(Some("node-b")).sync_node_name().unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), "node-b");

        let missing = installer(None).sync_node_name().unwrap_err();
        assert!(matches!(missing, Error::NoNodeName));
        assert!(missing.to_string().contains("--node-name") && missing.to_string().contains("NODE_NAME"));
        for bad in ["Node-A", "node_a", "-node", "node/a", &"a".repeat(254)] {
            let err = installer(Some(bad)).sync_node_name().unwrap_err();
            assert!(matches!(err, Error::BadNodeName(_)), "{bad}: {err}");
        }
        assert_eq!(fs::read_to_string(&file).unwrap(), "node-b", "a bad name leaves the file as it was");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn server_defaults_to_the_service_env_with_ipv6_brackets() {
        let o = parse(&["--plugin-src", "/x"]).unwrap();
        assert_eq!(o.server, "https://[fd00::1]:443");
        assert_eq!(service_url(Some("10.96.0.1".into()), Some("443".into())).unwrap(), "https://10.96.0.1:443");
        assert!(matches!(service_url(None, Some("443".into())), Err(Error::NoServer)));
    }

    #[test]
    fn flags_take_values_inline_or_separately() {
        let o =
            parse(&["--plugin-src=/a", "--cni-bin-dir", "/b", "--interval=500ms", "--once", "--server=https://s:1"])
                .unwrap();
        assert_eq!(o.plugin_src, PathBuf::from("/a"));
        assert_eq!(o.cni_bin_dir, PathBuf::from("/b"));
        assert_eq!(o.interval, Duration::from_millis(500));
        assert!(o.once);
        assert_eq!(o.server, "https://s:1");
        assert!(matches!(parse(&["--bogus"]), Err(Error::Usage(_))));
        assert!(matches!(parse(&["--once=yes"]), Err(Error::Usage(_))));
        assert!(matches!(parse(&["--plugin-name", "../evil"]), Err(Error::Usage(_))));
        assert!(matches!(parse(&["--interval", "0s"]), Err(Error::Usage(_))));
        assert!(matches!(parse(&["--token-src"]), Err(Error::Usage(_))));
    }

    #[test]
    fn kubeconfig_references_the_token_file_and_parses() {
        let text = render_kubeconfig("https://[fd00::1]:443");
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://[fd00::1]:443"));
        assert_eq!(cluster.certificate_authority.as_deref(), Some(CA_FILE));
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.token_file.as_deref(), Some(TOKEN_FILE));
        assert!(user.token.is_none());
        assert_eq!(kc.current_context.as_deref(), Some("netendpoint"));
    }

    #[test]
    fn write_atomic_replaces_content_and_sets_mode() {
        let dir = std::env::temp_dir().join(format!("ne-install-unit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let dest = dir.join("f");
        assert_eq!(install_bytes(&dest, b"one", 0o600).unwrap(), Change::Written);
        assert_eq!(install_bytes(&dest, b"one", 0o600).unwrap(), Change::Unchanged);
        assert_eq!(install_bytes(&dest, b"one", 0o644).unwrap(), Change::Written);
        assert_eq!(install_bytes(&dest, b"two", 0o644).unwrap(), Change::Written);
        assert_eq!(fs::read(&dest).unwrap(), b"two");
        assert_eq!(fs::metadata(&dest).unwrap().permissions().mode() & 0o777, 0o644);
        let leftovers: Vec<_> = fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
        assert_eq!(leftovers.len(), 1, "temp files left: {leftovers:?}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn durations_and_token_trimming() {
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("ten").is_err());
        assert_eq!(trim_ascii(b"  abc\n"), b"abc");
        assert_eq!(trim_ascii(b" \n"), b"");
    }
}
