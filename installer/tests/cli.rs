//! The command line of the real binary. Every case ends before anything is
//! installed.

use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_netendpoint-install"))
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .expect("run netendpoint-install");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn help_prints_the_usage_and_exits_zero() {
    let (code, stdout, stderr) = run(&["--help"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("Usage: netendpoint-install") && stdout.contains("--kubeconfig-dir"), "{stdout}");
}

#[test]
fn bad_flags_are_errors_naming_the_flag_and_write_nothing_to_stdout() {
    for (args, flag) in [
        (&["--once", "--cni-bin-dri=/x"][..], "--cni-bin-dri"),
        (&["--once", "--interval=0ms"], "--interval"),
        (&["--once=yes"], "--once"),
        (&["--once", "--plugin-name=../x"], "--plugin-name"),
    ] {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
}
