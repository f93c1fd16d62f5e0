//! The command line of the real binary: no cluster is contacted, because
//! every case here ends before the agent starts.

use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_watcher-example"))
        .args(args)
        .env_remove("NODE_NAME")
        .env("RUST_LOG", "off")
        .output()
        .expect("run watcher-example");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn help_prints_the_usage_and_exits_zero() {
    let (code, stdout, stderr) = run(&["--help"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("Usage: watcher-example") && stdout.contains("--no-finalizer"), "{stdout}");
}

#[test]
fn a_misspelt_flag_is_an_error_naming_it() {
    let (code, stdout, stderr) = run(&["--node", "n", "--metrics-adr", "0.0.0.0:1"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("--metrics-adr"), "{stderr}");
}

#[test]
fn a_missing_node_is_an_error_naming_the_flag() {
    let (code, _, stderr) = run(&["--dataplane=memory"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--node"), "{stderr}");
}
