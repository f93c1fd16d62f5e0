//! Smoke tests of the foundation against the real API server: the CRD serves,
//! field and label selectors work, and the mechanism the whole design rests on
//! holds (a finalizer keeps the name taken; DELETED precedes the next ADDED).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use netendpoint_crd::{NetworkEndpoint, endpoint_name, label_value};
use netendpoint_tests as h;

fn endpoint(pool: &str, ip: &str, container: &str, finalizers: &[&str]) -> NetworkEndpoint {
    h::lease(pool, ip, container, "node-a", finalizers)
}

#[test]
fn kubectl_reports_a_real_server_version() {
    let out = h::kubectl(&["version", "-o", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["serverVersion"]["major"], "1");
    assert!(v["serverVersion"]["gitVersion"].as_str().unwrap().starts_with("v1.36."), "{v}");
}

#[tokio::test]
async fn crud_with_label_and_field_selectors() {
    let pool = h::unique("smoke");
    let api = h::endpoints().await;
    let ep = endpoint(&pool, "10.9.0.5", "ctr-smoke-1", &[]);
    let created = api.create(&PostParams::default(), &ep).await.unwrap();
    assert!(created.metadata.uid.is_some());
    let got = api.get(&endpoint_name(&pool, "10.9.0.5".parse().unwrap())).await.unwrap();
    assert_eq!(got.spec, ep.spec);

    let by_label = h::pool_endpoints(&pool).await;
    assert_eq!(by_label.len(), 1);
    let by_field = api.list(&ListParams::default().fields("spec.containerID=ctr-smoke-1")).await.unwrap();
    assert!(by_field.items.iter().all(|e| e.spec.container_id == "ctr-smoke-1"));
    assert!(by_field.items.iter().any(|e| e.spec.pool == pool));
    let none = api.list(&ListParams::default().fields("spec.containerID=no-such-container")).await.unwrap();
    assert!(none.items.is_empty());
    let by_node = api.list(&ListParams::default().fields("spec.node=node-a")).await.unwrap();
    assert!(by_node.items.iter().any(|e| e.spec.pool == pool));

    api.delete(got.metadata.name.as_deref().unwrap(), &DeleteParams::default()).await.unwrap();
    assert!(h::pool_endpoints(&pool).await.is_empty());
}

#[tokio::test]
async fn a_finalizer_holds_the_name_until_removed() {
    let pool = h::unique("smoke");
    let api = h::endpoints().await;
    let ep = endpoint(&pool, "10.9.0.6", "ctr-old", &["example.com/agent"]);
    let name = ep.metadata.name.clone().unwrap();
    api.create(&PostParams::default(), &ep).await.unwrap();
    api.delete(&name, &DeleteParams::default()).await.unwrap();

    let held = api.get(&name).await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some(), "deletion must be pending");
    let again = api.create(&PostParams::default(), &endpoint(&pool, "10.9.0.6", "ctr-new", &[])).await;
    match again {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409, "{s:?}"),
        other => panic!("second claim must fail with 409 while the finalizer holds: {other:?}"),
    }

    h::remove_finalizer(&name, "example.com/agent").await;
    h::wait_gone(&name, Duration::from_secs(1)).await;
    assert!(api.get_opt(&name).await.unwrap().is_none(), "object must go once the finalizer is removed");
    api.create(&PostParams::default(), &endpoint(&pool, "10.9.0.6", "ctr-new", &[])).await.unwrap();
    h::cleanup_pool(&pool).await;
}

#[tokio::test]
async fn watch_sees_deleted_before_the_next_added() {
    let pool = h::unique("smoke");
    let api: Api<NetworkEndpoint> = h::endpoints().await;
    let ep = endpoint(&pool, "10.9.0.7", "ctr-old", &["example.com/agent"]);
    let name = ep.metadata.name.clone().unwrap();
    let first = api.create(&PostParams::default(), &ep).await.unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();

    let wp =
        WatchParams::default().labels(&format!("{}={}", netendpoint_crd::LABEL_POOL, label_value(&pool))).timeout(20);
    let mut stream = api.watch(&wp, &rv).await.unwrap().boxed();

    api.delete(&name, &DeleteParams::default()).await.unwrap();
    // The successor tries to claim while the finalizer holds: it must fail.
    assert!(api.create(&PostParams::default(), &endpoint(&pool, "10.9.0.7", "ctr-new", &[])).await.is_err());
    h::remove_finalizer(&name, "example.com/agent").await;
    let mut second = None;
    for _ in 0..100 {
        if let Ok(c) = api.create(&PostParams::default(), &endpoint(&pool, "10.9.0.7", "ctr-new", &[])).await {
            second = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = second.expect("successor claim after release");

    let mut seen = Vec::new();
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
        match ev.unwrap() {
            WatchEvent::Added(o) => seen.push(("ADDED", o.metadata.uid.unwrap())),
            WatchEvent::Modified(o) => seen.push(("MODIFIED", o.metadata.uid.unwrap())),
            WatchEvent::Deleted(o) => seen.push(("DELETED", o.metadata.uid.unwrap())),
            _ => {}
        }
        if seen.iter().any(|(t, u)| *t == "ADDED" && Some(u) == second.metadata.uid.as_ref()) {
            break;
        }
    }
    let old_uid = first.metadata.uid.unwrap();
    let new_uid = second.metadata.uid.unwrap();
    let deleted = seen.iter().position(|(t, u)| *t == "DELETED" && *u == old_uid).expect("DELETED of old holder");
    let added = seen.iter().position(|(t, u)| *t == "ADDED" && *u == new_uid).expect("ADDED of new holder");
    assert!(deleted < added, "order seen: {seen:?}");
    h::cleanup_pool(&pool).await;
}
