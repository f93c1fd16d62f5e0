//! The `watcher-example` binary: see `--help` and README.md.

use std::process::ExitCode;
use std::sync::Arc;

use tracing::{error, info};
use tracing_subscriber::EnvFilter;
use watcher_example::agent::Agent;
use watcher_example::config::{Config, DataplaneKind};
use watcher_example::dataplane::{Dataplane, LinuxRoutes, MemoryTable};
use watcher_example::eventlog::EventLog;
use watcher_example::{Error, Result, controller, http};

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cfg = match Config::parse(std::env::args_os()) {
        Ok(cfg) => cfg,
        // --help and --version print to stdout and exit 0; a bad flag prints the usage to stderr, exit 2.
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match run(cfg).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            error!(error = %msg, "watcher-example failed");
            ExitCode::FAILURE
        }
    }
}

async fn run(cfg: Config) -> Result<()> {
    let table: Box<dyn Dataplane> = match cfg.dataplane {
        DataplaneKind::Memory => Box::new(match &cfg.state_file {
            Some(path) => MemoryTable::open(path)?,
            None => MemoryTable::new(),
        }),
        DataplaneKind::Linux => Box::new(LinuxRoutes::open(&cfg.netns, &cfg.device, cfg.state_file.as_deref())?),
    };
    info!(dataplane = table.kind(), rules = table.rules().len(), "dataplane opened");
    let log = match &cfg.event_log {
        Some(path) => EventLog::open(path)?,
        None => EventLog::disabled(),
    };
    let agent = Arc::new(Agent::new(table, log, cfg.naive_ip_keyed));
    let client = controller::client(cfg.kubeconfig.as_deref()).await?;
    let endpoints = if cfg.serve_rules { http::Endpoints::WithRules } else { http::Endpoints::Metrics };
    let (_, serve) = http::bind(cfg.metrics_addr, agent.clone(), endpoints).await?;
    tokio::spawn(serve);
    if let Some(addr) = cfg.probe_addr {
        let (_, serve) = http::bind(addr, agent.clone(), http::Endpoints::ProbesOnly).await?;
        tokio::spawn(serve);
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|source| Error::Io { path: "SIGTERM".into(), source })?;
    tokio::select! {
        res = controller::run(client, agent, cfg) => res,
        _ = tokio::signal::ctrl_c() => { info!("interrupted"); Ok(()) }
        _ = term.recv() => { info!("terminated"); Ok(()) }
    }
}
