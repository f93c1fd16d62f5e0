//! The shared test vectors of `testdata/vectors.json`, asserted on the Rust
//! side. The Go agent kit (`agentkit/`) asserts the same file, so the names,
//! labels and field paths an agent relies on cannot drift between the two.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;

use kube::Resource;
use netendpoint_crd as crd;
use serde_json::Value;

fn vectors() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/vectors.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("{key} missing in {v}"))
}

#[test]
fn the_constants_are_those_of_the_crate() {
    let v = vectors();
    let c = &v["constants"];
    let expected = [
        ("group", crd::GROUP.to_string()),
        ("version", crd::NetworkEndpoint::version(&()).to_string()),
        ("kind", crd::NetworkEndpoint::kind(&()).to_string()),
        ("plural", crd::NetworkEndpoint::plural(&()).to_string()),
        ("labelPool", crd::LABEL_POOL.into()),
        ("labelNode", crd::LABEL_NODE.into()),
        ("labelPodNamespace", crd::LABEL_POD_NAMESPACE.into()),
        ("labelPodName", crd::LABEL_POD_NAME.into()),
        ("labelPodUID", crd::LABEL_POD_UID.into()),
        ("labelRole", crd::LABEL_ROLE.into()),
        ("roleHold", crd::ROLE_HOLD.into()),
        ("endpointsOnly", crd::ENDPOINTS_ONLY.into()),
        ("labelNetwork", crd::LABEL_NETWORK.into()),
        ("labelIPFamily", crd::LABEL_IP_FAMILY.into()),
        ("labelBlock", crd::LABEL_BLOCK.into()),
        ("fieldNode", crd::FIELD_NODE.into()),
        ("fieldContainerID", crd::FIELD_CONTAINER_ID.into()),
        ("finalizerStickyHold", crd::FINALIZER_STICKY_HOLD.into()),
    ];
    let listed = c.as_object().unwrap();
    assert_eq!(listed.len(), expected.len(), "every listed constant is checked here, and only those");
    for (key, want) in expected {
        assert_eq!(s(c, key), want, "constant {key}");
    }
}

#[test]
fn lease_names_and_blocks_match_the_vectors_both_ways() {
    let v = vectors();
    let cases = v["names"].as_array().unwrap();
    assert!(cases.len() >= 10);
    for case in cases {
        let (pool, name) = (s(case, "pool"), s(case, "name"));
        let ip: IpAddr = s(case, "ip").parse().unwrap();
        assert_eq!(crd::endpoint_name(pool, ip), name, "{case}");
        assert_eq!(crd::parse_endpoint_name(pool, name), Some(ip), "{case}");
        assert_eq!(crd::block_label_value(ip), s(case, "block"), "{case}");
        assert!(crd::is_dns1123_subdomain(name), "{name} is a valid object name");
    }
}

#[test]
fn incarnation_names_match_the_vectors() {
    let v = vectors();
    for case in v["incarnations"].as_array().unwrap() {
        let ip: IpAddr = s(case, "ip").parse().unwrap();
        let k = u32::try_from(case["incarnation"].as_u64().unwrap()).unwrap();
        assert_eq!(crd::incarnation_name(s(case, "pool"), ip, k), s(case, "name"), "{case}");
    }
}

#[test]
fn names_that_are_no_lease_of_the_pool_do_not_parse() {
    let v = vectors();
    for case in v["notLeaseNames"].as_array().unwrap() {
        assert_eq!(crd::parse_endpoint_name(s(case, "pool"), s(case, "name")), None, "{}", s(case, "why"));
    }
}
