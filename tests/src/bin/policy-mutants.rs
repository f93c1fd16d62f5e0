//! Weakens each rule of deploy/admission-policies.yaml in turn and runs the
//! trust tests (`tests/trust_*.rs`, one file per identity) against it: a
//! rule whose weakening no test notices is a rule no test proves. Not part
//! of `make test` (it runs the suite once per rule).
//!
//! Usage, with a test API server running (`make testenv-start`):
//! `NETENDPOINT_KUBECONFIG=$PWD/.testenv/kubeconfig cargo run -p netendpoint-tests --bin policy-mutants
//! [-- --test trust_plugin[,trust_agent,deploy_manifests]] [--only SUBSTRING] [--list]`
//! (by default every trust test binary, `TRUST_TESTS`).
//!
//! Each mutant replaces one validation's expression with `true` (plus the
//! hand-written mutants of [`extra_mutants`]) in a copy of deploy/, which
//! the tests apply through `NETENDPOINT_DEPLOY_DIR`; the repository is never
//! written. The original policies are applied again at the end. Prints, per
//! mutant, the tests that failed, and `NOT CAUGHT` where none did.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The trust test binaries (`tests/trust_*.rs`), run against each mutant
/// unless `--test` names others.
const TRUST_TESTS: [&str; 6] =
    ["trust_lease", "trust_plugin", "trust_agent", "trust_controller", "trust_installer", "trust_queue"];

/// One weakened version of the policies file.
struct Mutant {
    /// `policy #n: message`, or the name of a hand-written mutant.
    name: String,
    /// The whole file, weakened.
    text: String,
}

/// Every validation of every policy, its expression replaced by `true`.
fn validation_mutants(text: &str) -> Vec<Mutant> {
    let lines: Vec<&str> = text.lines().collect();
    let mut mutants = Vec::new();
    let mut policy = String::new();
    let mut index = 0;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line == "kind: ValidatingAdmissionPolicy" {
            policy = lines[i + 1..].iter().find_map(|l| l.strip_prefix("  name: ")).unwrap_or_default().to_string();
            index = 0;
        }
        if line.starts_with("    - expression:") && in_validations(&lines, i) {
            // The expression runs on over more deeply indented lines.
            let mut end = i + 1;
            while end < lines.len() && lines[end].starts_with("        ") {
                end += 1;
            }
            let message = describe(&lines[end..]);
            let mut weakened: Vec<&str> = lines[..i].to_vec();
            weakened.push("    - expression: \"true\"");
            weakened.extend_from_slice(&lines[end..]);
            index += 1;
            mutants.push(Mutant {
                name: format!("{policy} #{index}: {}", message.chars().take(90).collect::<String>()),
                text: weakened.join("\n") + "\n",
            });
            i = end;
            continue;
        }
        i += 1;
    }
    mutants
}

/// The message of the validation whose `message:` or `messageExpression:`
/// begins `rest`: the message, or the string literals of the expression.
fn describe(rest: &[&str]) -> String {
    let own: Vec<&str> = rest.iter().copied().take_while(|l| l.starts_with("      ")).collect();
    if let Some(m) = own.iter().find_map(|l| l.trim().strip_prefix("message: ")) {
        return m.trim_matches('"').to_string();
    }
    let Some(at) = own.iter().position(|l| l.trim().starts_with("messageExpression:")) else { return String::new() };
    let expr: String = own[at..]
        .iter()
        .take_while(|l| !l.trim().starts_with("reason:"))
        .map(|l| l.trim().trim_start_matches("messageExpression:"))
        .collect::<Vec<_>>()
        .join(" ");
    // The literals of a CEL expression: every other piece between single quotes.
    let literals: Vec<&str> = expr.split('\'').skip(1).step_by(2).map(str::trim).filter(|l| l.len() > 2).collect();
    literals.join(" ... ")
}

/// True if line `at` is in a `validations:` list (not in `variables:` or `matchConditions:`).
fn in_validations(lines: &[&str], at: usize) -> bool {
    lines[..at]
        .iter()
        .rev()
        .find(|l| l.starts_with("  ") && !l.starts_with("   "))
        .is_some_and(|l| l.trim() == "validations:")
}

/// Weakenings that are no validation: exemptions by namespace, and the
/// parameters a policy must not do without.
fn extra_mutants(text: &str) -> Vec<Mutant> {
    let mut out = Vec::new();
    let mut replace = |name: &str, from: &str, to: &str| {
        assert!(text.contains(from), "mutant {name}: {from:?} is not in the policies");
        out.push(Mutant { name: name.into(), text: text.replacen(from, to, 1) });
    };
    replace(
        "netendpoint-agent: kube-system exempt again",
        "request.userInfo.username.startsWith('system:serviceaccount:')\n",
        "request.userInfo.username.startsWith('system:serviceaccount:')\n          && !request.userInfo.username.startsWith('system:serviceaccount:kube-system:')\n",
    );
    replace(
        "netendpoint-installer-token: any audience",
        "expression: \"['https://kubernetes.default.svc.cluster.local', 'https://kubernetes.default.svc']\"",
        "expression: \"['https://kubernetes.default.svc.cluster.local', 'https://kubernetes.default.svc', 'vault']\"",
    );
    out
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bin/kubectl");
    Command::new(bin).arg("--kubeconfig").arg(kubeconfig).args(args).output().expect("kubectl")
}

/// Copies the top-level files of `from` (the kustomization and what it lists) to `to`.
fn copy_deploy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// Runs the test binaries `tests` with the manifests of `deploy`; returns the failed tests' names.
fn failed_tests(tests: &[String], deploy: &Path) -> Vec<String> {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(["test", "-p", "netendpoint-tests"]);
    for t in tests {
        cmd.args(["--test", t]);
    }
    cmd.args(["--", "--test-threads=2"]).env("NETENDPOINT_DEPLOY_DIR", deploy).env("NETENDPOINT_POLICY_PROBE", "warn");
    let out = cmd.output().expect("cargo test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut failed: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test ").and_then(|l| l.strip_suffix(" ... FAILED")))
        .map(str::to_string)
        .collect();
    if failed.is_empty() && !out.status.success() {
        failed.push(format!(
            "(cargo test failed: {})",
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
        ));
    }
    failed
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut tests: Vec<String> = TRUST_TESTS.iter().map(|t| t.to_string()).collect();
    let mut only: Option<String> = None;
    let mut list = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--test" => tests = args.next().expect("--test NAME[,NAME]").split(',').map(str::to_string).collect(),
            "--only" => only = args.next(),
            "--list" => list = true,
            other => panic!("unknown argument {other:?}"),
        }
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let policies = std::fs::read_to_string(root.join("deploy/admission-policies.yaml")).unwrap();
    let mut mutants = validation_mutants(&policies);
    mutants.extend(extra_mutants(&policies));
    mutants.retain(|m| only.as_ref().is_none_or(|o| m.name.contains(o.as_str())));
    if list {
        for m in &mutants {
            println!("{}", m.name);
        }
        return;
    }
    let kubeconfig = PathBuf::from(std::env::var_os("NETENDPOINT_KUBECONFIG").expect("NETENDPOINT_KUBECONFIG"));
    let work = std::env::temp_dir().join(format!("policy-mutants-{}", std::process::id()));
    let deploy = work.join("deploy");
    copy_deploy(&root.join("deploy"), &deploy);
    let mut results = Vec::new();
    for (n, m) in mutants.iter().enumerate() {
        std::fs::write(deploy.join("admission-policies.yaml"), &m.text).unwrap();
        let out = kubectl(&kubeconfig, &["apply", "-f", deploy.join("admission-policies.yaml").to_str().unwrap()]);
        assert!(out.status.success(), "{}: {}", m.name, String::from_utf8_lossy(&out.stderr));
        // Let the API server's policy informers take the weakened version.
        std::thread::sleep(Duration::from_secs(5));
        let failed = failed_tests(&tests, &deploy);
        eprintln!(
            "[{}/{}] {} -> {}",
            n + 1,
            mutants.len(),
            m.name,
            if failed.is_empty() { "NOT CAUGHT".into() } else { failed.join(", ") }
        );
        results.push((m.name.clone(), failed));
    }
    let _ = kubectl(&kubeconfig, &["apply", "-f", root.join("deploy/admission-policies.yaml").to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&work);
    println!("| weakened rule | tests that failed |\n|---|---|");
    for (name, failed) in &results {
        println!(
            "| {} | {} |",
            name.replace('|', "\\|"),
            if failed.is_empty() { "**NOT CAUGHT**".into() } else { failed.join(", ") }
        );
    }
    if results.iter().any(|(_, f)| f.is_empty()) {
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One mutant per validation of the shipped policies, each differing
    /// from the file only where its expression was.
    #[test]
    fn every_validation_of_the_shipped_policies_is_weakened_once() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/admission-policies.yaml");
        let text = std::fs::read_to_string(path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let validations = (0..lines.len())
            .filter(|&i| lines[i].starts_with("    - expression:") && in_validations(&lines, i))
            .count();
        let mutants = validation_mutants(&text);
        assert_eq!(mutants.len(), validations);
        for m in &mutants {
            assert_eq!(m.text.matches("    - expression: \"true\"").count(), 1, "{}", m.name);
            assert!(m.text.len() < text.len(), "{}", m.name);
            assert!(!m.name.contains("+ variables"), "names are read as messages: {}", m.name);
        }
        assert!(mutants.iter().any(|m| m.name.starts_with("netendpoint-plugin #1:")));
        assert_eq!(extra_mutants(&text).len(), 2);
    }

    /// Every trust test binary is run by default, and only those.
    #[test]
    fn the_default_tests_are_the_trust_test_files() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.unwrap().file_name().into_string().ok())
            .filter_map(|f| f.strip_prefix("trust").and_then(|f| f.strip_suffix(".rs")).map(|f| format!("trust{f}")))
            .collect();
        files.sort();
        let mut default = TRUST_TESTS.to_vec();
        default.sort();
        assert_eq!(files, default);
    }
}
