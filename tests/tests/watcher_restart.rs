//! Agent restarts: the agent process is SIGKILLed while deletes are in
//! progress. While it is down, nothing is released (every endpoint it has not
//! acknowledged keeps its finalizer, so its IP stays taken). The restarted
//! process relists, reconciles its persisted table to the endpoints that exist
//! now (removing the rule of an endpoint that vanished while it was down),
//! finishes the teardowns, and ends with no leaked rule.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use netendpoint_tests::{self as h, AgentOpts, AgentProc};
use watcher_example::eventlog::analyze;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_agent_holds_its_ips_and_the_restarted_one_finishes_without_leaks() {
    let started = Instant::now();
    let node = h::unique("restart-node");
    let pool = h::unique("wrestart");
    let fin = format!("agent.example.com/{node}");
    // Slow teardowns, so that the kill lands in the middle of them.
    let agent = AgentProc::start(AgentOpts { delay: "300ms..900ms".into(), ..AgentOpts::new(&node, Some(&fin)) });
    let pods = 5;
    let conf = h::agent_net_conf(&pool, serde_json::json!({"subnet": "10.63.0.0/29"}), &node, &[&fin], "5s");
    let container = |slot: usize, g: usize| format!("{pool}-s{slot}-g{g}");
    for slot in 0..pods {
        h::cni_add_retrying(&conf, &container(slot, 0), &format!("web-{slot}"), 1);
    }
    h::wait_converged(&agent, &[&pool], "initial pods").await;
    let before: BTreeMap<String, String> = agent.rules();

    // Delete every pod, then kill the agent while its teardowns are pending.
    let dels: Vec<_> = (0..pods)
        .map(|slot| {
            let (c, id) = (conf.clone(), container(slot, 0));
            tokio::task::spawn_blocking(move || h::cni_del(&c, &id))
        })
        .collect();
    for d in dels {
        d.await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut agent = agent;
    agent.kill();

    // Agent down: whatever it has not acknowledged stays, finalizer and all.
    let held = h::pool_endpoints(&pool).await;
    assert!(!held.is_empty(), "the kill came after every teardown: nothing left to prove (raise the delay)");
    assert!(held.iter().all(|e| e.is_releasing()), "DEL requested the release of every pod");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let still: Vec<_> = h::pool_endpoints(&pool).await;
    let names = |v: &[netendpoint_crd::NetworkEndpoint]| {
        v.iter().map(|e| (e.metadata.name.clone().unwrap(), e.metadata.uid.clone().unwrap())).collect::<Vec<_>>()
    };
    assert_eq!(names(&still), names(&held), "an IP was released while the agent was down");
    for e in &still {
        assert!(e.finalizers().contains(&fin), "{:?} lost the agent's finalizer while it was down", e.metadata.name);
    }
    // While down, a new pod can only get an IP the agent already acknowledged.
    let held_ips: Vec<String> = held.iter().map(|e| e.spec.ip.clone()).collect();
    let free = pods - held.len();
    let mut late = Vec::new();
    for slot in 0..free {
        let added = h::cni_add_retrying(&conf, &container(slot, 1), &format!("late-{slot}"), 1);
        assert!(!held_ips.contains(&added.ip), "{} was handed out before the agent tore it down", added.ip);
        late.push(added.ip);
    }
    // And one endpoint vanishes while the agent is down (as a forced release
    // after forceReleaseAfter would do): its rule is now stale.
    let vanished = held[0].clone();
    h::remove_finalizer(vanished.metadata.name.as_deref().unwrap(), &fin).await;
    let rules_at_kill = agent.rules_from_state_file();

    // Restart on the same persisted table: it relists and finishes the job.
    let agent = agent.restart();
    h::wait_converged(&agent, &[&pool], "after restart").await;
    let live: BTreeMap<String, String> =
        h::pool_state(&pool).await.into_iter().map(|(ip, (uid, _))| (ip, uid)).collect();
    assert_eq!(agent.rules(), live, "the restarted agent holds exactly the live endpoints");
    for (ip, uid) in &before {
        assert_ne!(agent.rules().get(ip), Some(uid), "rule of deleted endpoint {ip} leaked across the restart");
    }
    assert_ne!(
        agent.rules().get(&vanished.spec.ip),
        vanished.metadata.uid.as_ref(),
        "the rule of an endpoint that vanished while the agent was down must be removed on restart"
    );
    let a = analyze(&agent.events());
    assert!(a.lost_rules.is_empty(), "{:?}", a.lost_rules);
    assert_eq!(a.out_of_order().count(), 0, "{:?}", a.handovers);
    println!(
        "restart: killed with {} of {pods} teardowns pending ({} rules persisted), {} new pods placed on acked IPs \
         while down, 1 endpoint vanished while down, restarted agent converged, 0 leaked rules, {:.1}s",
        held.len(),
        rules_at_kill,
        late.len(),
        started.elapsed().as_secs_f64()
    );
    h::cleanup_pool(&pool).await;
}
