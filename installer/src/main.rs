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
//! - Every file is written atomically and durably (`atomic_file` with
//!   `Durability::Fsync`): a temp file in the destination directory, chmod,
//!   fsync, rename, fsync of the directory. A plugin binary
//!   being executed keeps its old inode and is never corrupted, and readers
//!   see the old or the new content, never a mix.
//! - A file is rewritten only when its content changed; the token copy
//!   follows the kubelet's rotations within one `--interval`.
//! - The token is never logged; neither is the CA or the kubeconfig content.
//! - Nothing is deleted from the host, not even on exit: running pods still
//!   need the plugin (and its credentials) for DEL.
//!
//! `--once` installs and exits (non-zero on failure); otherwise it loops
//! until SIGTERM/SIGINT, logging and retrying failures each interval. Every
//! flag also reads an environment variable (`--help` lists them); an unknown
//! flag or a bad value is an error (exit 2) that names the flag.

mod check;
mod error;
mod files;
mod mint;
mod options;
mod sync;

use std::io;
use std::process::ExitCode;

use tracing::{error, info, warn};

use crate::error::Error;
use crate::options::Options;
use crate::sync::Installer;

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
                if let Err(e) = installer.sync().await {
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
        if let Err(e) = installer.sync().await {
            error!(error = %e, "sync failed; retrying");
        }
    }
}

fn main() -> ExitCode {
    init_logging();
    let opts = match Options::parse(std::env::args_os(), |k| std::env::var(k).ok()) {
        Ok(o) => o,
        // --help and --version print to stdout and exit 0; a bad flag prints the usage to stderr, exit 2.
        Err(Error::Cli(e)) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
        Err(e) => {
            eprintln!("netendpoint-install: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            error!(error = %e, "cannot start the runtime");
            return ExitCode::FAILURE;
        }
    };
    if opts.check {
        return rt.block_on(run_check(&opts));
    }
    info!(
        node = %opts.node_name.as_deref().unwrap_or_default(),
        cni_bin_dir = %opts.cni_bin_dir.display(),
        kubeconfig_dir = %opts.kubeconfig_dir.display(),
        server = %opts.server,
        interval = ?opts.interval,
        once = opts.once,
        mint_for = ?opts.mint_for.as_ref().map(|t| format!("{}/{}", t.namespace, t.name)),
        "starting"
    );
    let mut installer = Installer::new(opts);
    let first = rt.block_on(installer.sync());
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
    rt.block_on(run_loop(installer));
    ExitCode::SUCCESS
}

/// `--check`: exit 0 when the installed credentials work for this node, and
/// the network config source of `--net-conf`, if given, is not a ConfigMap
/// without its key.
async fn run_check(opts: &Options) -> ExitCode {
    let Some(node) = opts.node_name.as_deref() else {
        error!(error = %Error::NoNodeName, "check failed");
        return ExitCode::FAILURE;
    };
    if let Some(Err(e)) = opts.net_conf.as_deref().map(check::net_conf_present) {
        error!(error = %e, "check failed");
        return ExitCode::FAILURE;
    }
    match check::check(&opts.kubeconfig_dir, node, opts.check_min_validity, std::time::SystemTime::now()).await {
        Ok(summary) => {
            info!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            error!(error = %e, "check failed");
            ExitCode::FAILURE
        }
    }
}
