//! `kubectl-netendpoint`: found on PATH by kubectl, run as `kubectl netendpoint …`.
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match kubectl_netendpoint::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0; usage errors exit 1 as kubectl's do.
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(1) } else { ExitCode::SUCCESS };
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(kubectl_netendpoint::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
