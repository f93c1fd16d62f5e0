//! The agent removes its finalizer only from the object it tore down.
//!
//! An endpoint's name is `<pool>.<ip>`, so the next holder of an IP gets the
//! name of the last one. The scenario: the agent is slow to tear down E1, E1 is
//! force-released meanwhile (all its finalizers removed, so it is gone), and E2
//! is created under the same name with the agent's finalizer. The agent's late
//! removal patch for E1 must not touch E2. A patch by name that tests only the
//! finalizer's index (as `kube::runtime::finalizer` does) would strip E2's
//! finalizer, and E2's release would no longer wait for the agent.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use netendpoint_tests::{self as h, AgentOpts, AgentProc};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_finalizer_removal_never_strips_the_successor_under_the_same_name() {
    let node = h::unique("uid-node");
    let pool = h::unique("wuid");
    let fin = format!("agent.example.com/{node}");
    let delay = Duration::from_secs(3);
    let agent = AgentProc::start(AgentOpts { delay: "3s".into(), ..AgentOpts::new(&node, Some(&fin)) });
    let api = h::endpoints().await;
    let ip = "10.67.0.5";
    let name = netendpoint_crd::endpoint_name(&pool, ip.parse().unwrap());

    // E1, held by the agent's finalizer, with its rule installed.
    let e1 = api.create(&PostParams::default(), &h::lease(&pool, ip, "c-old", &node, &[&fin])).await.unwrap();
    let uid1 = e1.metadata.uid.clone().unwrap();
    wait_for_rule(&agent, ip, &uid1).await;

    // Release E1; the agent's teardown now sleeps for `delay`. Give its watch
    // time to deliver the deletionTimestamp, so that the teardown holds E1's copy.
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    let released_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Meanwhile E1 is force-released: every finalizer removed, so it is gone.
    let clear = serde_json::json!({"metadata": {"finalizers": null}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&clear)).await.unwrap();
    h::wait_gone(&name, Duration::from_secs(1)).await;
    assert!(api.get_opt(&name).await.unwrap().is_none(), "E1 still exists after its finalizers were removed");

    // E2 takes the name, with the agent's finalizer, before the teardown wakes.
    let e2 = api.create(&PostParams::default(), &h::lease(&pool, ip, "c-new", &node, &[&fin])).await.unwrap();
    let uid2 = e2.metadata.uid.clone().unwrap();
    assert!(released_at.elapsed() < delay, "E2 came after the teardown woke: nothing left to prove (raise the delay)");

    // Wait until the teardown of E1 has run (its log names the successor), or past it.
    let successor_seen = format!("successor_uid={uid2}");
    let deadline = released_at + delay + Duration::from_secs(5);
    // An agent under conformance logs as it likes: wait out its teardown.
    let reference = h::testing_reference_agent();
    while Instant::now() < deadline && !(reference && agent.log().contains(&successor_seen)) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let now = api.get_opt(&name).await.unwrap().expect("E2 exists");
    assert_eq!(now.metadata.uid.as_deref(), Some(uid2.as_str()), "the name still belongs to E2");
    assert!(
        now.finalizers().contains(&fin),
        "the late removal meant for E1 stripped the agent's finalizer from its successor E2: finalizers {:?}\n\
         agent log:\n{}",
        now.finalizers(),
        agent.log()
    );
    assert!(!now.is_releasing(), "E2 is live");
    assert_eq!(agent.rules().get(ip), Some(&uid2), "the stale teardown of E1 left E2's rule alone");
    assert!(
        !reference || agent.log().contains(&successor_seen),
        "the agent's teardown of E1 never reached the removal (the scenario was not exercised); log:\n{}",
        agent.log()
    );
    h::cleanup_pool(&pool).await;
}

/// Waits (bounded) until `agent` holds the rule of `ip` for `uid`.
async fn wait_for_rule(agent: &AgentProc, ip: &str, uid: &str) {
    for _ in 0..100 {
        if agent.rules().get(ip).map(String::as_str) == Some(uid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the agent did not install the rule of {ip} ({uid}); log:\n{}", agent.log());
}
