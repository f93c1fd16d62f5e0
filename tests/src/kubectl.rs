//! `kubectl` as new as the test API server (built by scripts/tools.sh), and
//! reading its output: tables, and the server's address from the admin
//! kubeconfig.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::env::{kubeconfig, repo_root, testenv_dir};

/// A kubectl as new as the server (built by scripts/tools.sh), with the admin kubeconfig.
pub fn kubectl(args: &[&str]) -> Output {
    let bin = repo_root().join("tests/bin/kubectl");
    Command::new(bin).arg("--kubeconfig").arg(kubeconfig()).args(args).output().unwrap()
}

/// `kubectl` authenticating with `kubeconfig` instead of the admin one.
pub fn kubectl_with(kubeconfig: &Path, args: &[&str]) -> Output {
    let bin = repo_root().join("tests/bin/kubectl");
    Command::new(bin).arg("--kubeconfig").arg(kubeconfig).args(args).output().unwrap()
}

/// `kubectl` (admin) with `input` on stdin.
pub fn kubectl_input(args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(repo_root().join("tests/bin/kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// The standard output of a finished process, as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The standard error of a finished process, as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The cell of column `column` in row `row` (0 = the first row after the
/// header) of a `kubectl get` table: by the header's column offsets, since
/// empty cells make whitespace splitting shift.
pub fn table_cell(table: &str, row: usize, column: &str) -> Option<String> {
    let mut lines = table.lines();
    let header = lines.next()?;
    let start = header.split_whitespace().find(|c| *c == column).and_then(|_| {
        let mut at = 0;
        header.split_whitespace().find_map(|c| {
            let i = header[at..].find(c)? + at;
            at = i + c.len();
            (c == column).then_some(i)
        })
    })?;
    // The cell runs to the next column's start; the last one to the line's end.
    let end = header[start..].find(char::is_whitespace).map_or(usize::MAX, |e| {
        let after = start + e;
        header[after..].find(|ch: char| !ch.is_whitespace()).map_or(usize::MAX, |n| after + n)
    });
    let line = lines.nth(row)?;
    let end = end.min(line.len());
    Some(line.get(start.min(line.len())..end)?.trim().to_string())
}

/// The test API server's URL and CA bundle (PEM), read from the admin kubeconfig.
pub fn server_and_ca() -> (String, Vec<u8>) {
    let server = kubectl(&["config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.server}"]);
    let ca_path = testenv_dir().join("pki/ca.crt");
    (String::from_utf8(server.stdout).unwrap(), std::fs::read(&ca_path).unwrap())
}
