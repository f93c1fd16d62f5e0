//! The API-write floor for the benchmark: a fresh process that creates one
//! small custom object (a NetworkEndpoint) through kube-rs and exits.
//!
//! Usage: `bench-floor KUBECONFIG POOL IP`. Exit status 0 on success.

use std::path::Path;

use kube::api::{Api, PostParams};
use netendpoint_crd::NetworkEndpoint;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, kubeconfig, pool, ip] = args.as_slice() else {
        eprintln!("usage: bench-floor KUBECONFIG POOL IP");
        return std::process::ExitCode::from(2);
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bench-floor: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result: Result<(), Box<dyn std::error::Error>> = rt.block_on(async {
        // The shared kubeconfig-to-client helper: read, configure, build; no request.
        let client = watcher_example::controller::client(Some(Path::new(kubeconfig))).await?;
        let api: Api<NetworkEndpoint> = Api::all(client);
        api.create(&PostParams::default(), &netendpoint_tests::lease(pool, ip, "floor", "bench-node", &[])).await?;
        Ok(())
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("bench-floor: {msg}");
            std::process::ExitCode::FAILURE
        }
    }
}
