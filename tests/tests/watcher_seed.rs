//! The seed scenario of the downstream-agent protocol, end to end: the real
//! plugin binary (separate processes), the real API server, and the
//! `watcher-example` agent as a separate, deliberately slow process.
//!
//! A pool has exactly as many usable IPs as pods, so every replacement must
//! reuse a freed IP. Each round deletes every pod and adds its replacement at
//! the same moment. The agent runs in naive IP-keyed mode (a teardown removes
//! whatever rule holds the IP), the mode in which any misordering would lose a
//! rule — so the proof does not lean on the agent's own UID check.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Instant;

use netendpoint_tests::{self as h, AgentOpts, AgentProc};
use watcher_example::eventlog::{Kind, analyze};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reused_ip_changes_hands_only_after_the_slow_agent_tore_down_the_old_rule() {
    let started = Instant::now();
    let node = h::unique("seed-node");
    let pool = h::unique("wseed");
    let fin = format!("agent.example.com/{node}");
    let agent =
        AgentProc::start(AgentOpts { naive: true, delay: "100ms..300ms".into(), ..AgentOpts::new(&node, Some(&fin)) });
    // /29: .1 is the gateway, .7 broadcast: .2-.6 are the 5 usable IPs.
    let pods = 5;
    let rounds = 3;
    let conf = h::agent_net_conf(&pool, serde_json::json!({"subnet": "10.60.0.0/29"}), &node, &[&fin], "20s");
    let container = |slot: usize, round: usize| format!("{pool}-s{slot}-g{round}");

    let mut all_ips = BTreeSet::new();
    for slot in 0..pods {
        all_ips.insert(h::cni_add_retrying(&conf, &container(slot, 0), &format!("web-{slot}"), 1).ip);
    }
    assert_eq!(all_ips.len(), pods);
    h::wait_converged(&agent, &[&pool], "initial pods").await;
    for ep in h::pool_endpoints(&pool).await {
        assert_eq!(ep.metadata.finalizers.as_deref(), Some(&[fin.clone()][..]), "finalizer declared at creation");
    }

    let mut add_retries = 0;
    for round in 1..=rounds {
        // Every pod is deleted and replaced at the same moment.
        let mut dels = Vec::new();
        let mut adds = Vec::new();
        for slot in 0..pods {
            let (c1, c2) = (conf.clone(), conf.clone());
            let (old, new) = (container(slot, round - 1), container(slot, round));
            dels.push(tokio::task::spawn_blocking(move || h::cni_del(&c1, &old)));
            adds.push(tokio::task::spawn_blocking(move || h::cni_add_retrying(&c2, &new, &format!("web-{slot}"), 50)));
        }
        for d in dels {
            d.await.unwrap();
        }
        let mut new_ips = BTreeSet::new();
        for a in adds {
            let added = a.await.unwrap();
            add_retries += added.retries;
            new_ips.insert(added.ip);
        }
        assert_eq!(new_ips, all_ips, "round {round}: the replacements must reuse exactly the freed IPs");
        h::wait_converged(&agent, &[&pool], &format!("round {round}")).await;
    }

    let events = agent.events();
    let a = analyze(&events);
    assert!(a.lost_rules.is_empty(), "a late teardown removed a newer holder's rule: {:?}", a.lost_rules);
    let bad: Vec<_> = a.out_of_order().collect();
    assert!(bad.is_empty(), "the new holder's add was processed before the old holder's remove: {bad:?}");
    assert_eq!(a.handovers.len(), pods * rounds, "every IP changes hands once per round: {:?}", a.handovers);
    assert_eq!(a.reused_ips.len(), pods);
    // Spelled out for the reader: per reused IP, remove(old) strictly precedes add(new).
    for hnd in &a.handovers {
        let remove_old = events.iter().position(|r| r.kind == Kind::Remove && r.ip == hnd.ip && r.uid == hnd.old_uid);
        let add_new = events.iter().position(|r| r.kind == Kind::Add && r.ip == hnd.ip && r.uid == hnd.new_uid);
        assert!(remove_old.unwrap() < add_new.unwrap(), "{hnd:?}");
    }
    // The table the log leads to is the table the agent holds, and it is exactly the live endpoints.
    let rules = agent.rules();
    let logged: std::collections::BTreeMap<String, String> =
        a.final_table.iter().map(|(ip, uid)| (ip.to_string(), uid.clone())).collect();
    assert_eq!(rules, logged);
    if h::testing_reference_agent() {
        // Beyond the conformance contract: the reference agent's own metrics.
        assert_eq!(agent.metric("netendpoint_agent_finalizers_removed_total") as usize, pods * rounds);
        assert!(agent.metrics().contains("netendpoint_agent_release_seconds_count"));
    }

    println!(
        "seed: {pods} pods in a pool of {pods} IPs, {rounds} rounds, {} handovers all in order, 0 lost rules, \
         {add_retries} ADD retries, {:.1}s",
        a.handovers.len(),
        started.elapsed().as_secs_f64()
    );
    for slot in 0..pods {
        h::cni_del(&conf, &container(slot, rounds));
    }
    h::wait_converged(&agent, &[&pool], "teardown of the last pods").await;
    assert!(agent.rules().is_empty(), "no rule outlives its endpoint");
    h::cleanup_pool(&pool).await;
}

/// The lazy way: no finalizer in the IPAM config; the agent adds its own with a
/// test-and-add patch, installs the rule only once the finalizer is on, and
/// then gates the release exactly like a declared one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazily_added_finalizer_gates_the_release_too() {
    if !h::testing_reference_agent() {
        println!("lazy finalizer: a flag of the reference agent, not part of the conformance contract; skipped");
        return;
    }
    let node = h::unique("lazy-node");
    let pool = h::unique("wlazy");
    let fin = format!("agent.example.com/{node}");
    let agent = AgentProc::start(AgentOpts {
        delay: "200ms".into(),
        extra: vec!["--lazy-finalizer".into()],
        ..AgentOpts::new(&node, Some(&fin))
    });
    let conf = h::agent_net_conf(&pool, serde_json::json!({"subnet": "10.66.0.0/29"}), &node, &[], "5s");
    let ip = h::cni_add_retrying(&conf, &format!("{pool}-a"), "web-a", 1).ip;
    let name = netendpoint_crd::endpoint_name(&pool, ip.parse().unwrap());
    let api = h::endpoints().await;
    let mut added = false;
    for _ in 0..100 {
        let ep = api.get(&name).await.unwrap();
        if ep.metadata.finalizers.as_deref() == Some(&[fin.clone()][..]) {
            added = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(added, "the agent did not add its finalizer; log:\n{}", agent.log());
    h::wait_converged(&agent, &[&pool], "after lazy add").await;

    h::cni_del(&conf, &format!("{pool}-a"));
    let held = api.get(&name).await.unwrap();
    assert!(held.is_releasing(), "the lazily added finalizer holds the IP during the teardown");
    h::wait_converged(&agent, &[&pool], "after DEL").await;
    assert!(h::pool_endpoints(&pool).await.is_empty());
    assert_eq!(agent.metric("netendpoint_agent_finalizers_added_total") as u32, 1);
}
