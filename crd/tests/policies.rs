//! `admission::POLICIES` names exactly the admission policies of deploy/,
//! and each has a binding of the same name (what `kubectl netendpoint
//! status` checks a cluster for).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

fn names_of(kind: &str) -> BTreeSet<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/admission-policies.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut names = BTreeSet::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim_end() == format!("kind: {kind}") {
            let name = lines.by_ref().find_map(|l| l.strip_prefix("  name: ")).unwrap();
            names.insert(name.trim().to_string());
        }
    }
    names
}

#[test]
fn the_policy_list_is_that_of_deploy_and_every_policy_is_bound() {
    let listed: BTreeSet<String> = netendpoint_crd::admission::POLICIES.iter().map(|p| p.to_string()).collect();
    assert_eq!(listed.len(), netendpoint_crd::admission::POLICIES.len(), "no name twice");
    assert_eq!(names_of("ValidatingAdmissionPolicy"), listed);
    assert_eq!(names_of("ValidatingAdmissionPolicyBinding"), listed);
}
