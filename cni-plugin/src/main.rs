//! The `netendpoint` CNI IPAM plugin binary. See the library for the layers.

use std::io::{Read, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let env: std::collections::HashMap<String, String> =
        std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect();
    let mut stdin = Vec::new();
    // VERSION may come with an empty or closed stdin; a read error leaves it empty.
    let _ = std::io::stdin().read_to_end(&mut stdin);
    let out = netendpoint_cni::run(&env, &stdin);
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.stdout.as_bytes());
    let _ = stdout.flush();
    if out.code == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
