//! The `netendpoint-controller` binary: flags, logging, then [`netendpoint_controller::run`].

use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_target(false)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    let opts = netendpoint_controller::Options::parse();
    match netendpoint_controller::run(opts).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "netendpoint-controller stopped");
            std::process::ExitCode::FAILURE
        }
    }
}
