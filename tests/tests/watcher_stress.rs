//! Stress of the downstream-agent protocol, and the control run without it.
//!
//! Model: two simulated nodes, `node-a` and `node-b`, each with its own agent
//! process (its own finalizer, watching `spec.node=<itself>`) and its own pool
//! of exactly as many IPs as it has pods, like per-node IP blocks. Each node
//! runs several delete-and-recreate cycles concurrently; in a cycle the old
//! sandbox's CNI DEL and the replacement's CNI ADD are separate plugin
//! processes started at the same moment. Agents tear down after a random
//! 0–30 ms delay and run in naive IP-keyed mode (a teardown removes whatever
//! rule holds the IP), as typical agents do.
//!
//! The same workload runs twice: with netendpoint (finalizers declared in the
//! IPAM config, the agents hold them) and with immediate reuse (no finalizers,
//! agents hold nothing, as with other IPAMs). A lost rule is a teardown that
//! removed a newer holder's rule, found by replaying each agent's event log;
//! the final tables are checked against the live endpoints as well.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use netendpoint_tests::{self as h, AgentOpts, AgentProc};
use watcher_example::eventlog::analyze;

const CYCLES: usize = 300;
const PODS_PER_NODE: usize = 3;
const NODES: [&str; 2] = ["node-a", "node-b"];

#[derive(Debug, Default)]
struct Figures {
    cycles: usize,
    handovers: usize,
    reused_ips: usize,
    out_of_order: usize,
    lost_rules: usize,
    final_missing: usize,
    final_leaked: usize,
    add_retries: u32,
    seconds: f64,
}

/// Waits until the agent's event log stops growing (every delayed teardown ran).
async fn quiesce(agent: &AgentProc) {
    let mut last = usize::MAX;
    for _ in 0..100 {
        let n = agent.events().len();
        if n == last {
            return;
        }
        last = n;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!("agent {} event log still growing after 30 s", agent.opts.node);
}

async fn run(with_netendpoint: bool) -> Figures {
    let started = Instant::now();
    let label = if with_netendpoint { "net" } else { "ctl" };
    let mut agents = Vec::new();
    let mut confs = Vec::new();
    let mut pools = Vec::new();
    for (i, base) in NODES.iter().enumerate() {
        let node = h::unique(&format!("{label}-{base}"));
        let pool = h::unique(&format!("wstress-{label}-{i}"));
        let fin = format!("agent.example.com/{base}");
        let finalizers: Vec<&str> = if with_netendpoint { vec![&fin] } else { vec![] };
        // Exactly PODS_PER_NODE usable IPs.
        let range = serde_json::json!({
            "subnet": format!("10.{}.0.0/24", 70 + i),
            "rangeStart": format!("10.{}.0.10", 70 + i),
            "rangeEnd": format!("10.{}.0.{}", 70 + i, 9 + PODS_PER_NODE),
        });
        confs.push(h::agent_net_conf(&pool, range, &node, &finalizers, "20s"));
        agents.push(AgentProc::start(AgentOpts {
            naive: true,
            delay: "0ms..30ms".into(),
            ..AgentOpts::new(&node, with_netendpoint.then_some(fin.as_str()))
        }));
        pools.push(pool);
    }

    let retries = Arc::new(AtomicU32::new(0));
    let per_slot = CYCLES / (NODES.len() * PODS_PER_NODE);
    let mut workers = Vec::new();
    for (n, conf) in confs.iter().enumerate() {
        for slot in 0..PODS_PER_NODE {
            let (conf, pool, retries) = (conf.clone(), pools[n].clone(), retries.clone());
            workers.push(std::thread::spawn(move || {
                let container = |g: usize| format!("{pool}-s{slot}-g{g}");
                let pod = format!("web-{slot}");
                h::cni_add_retrying(&conf, &container(0), &pod, 50);
                for g in 1..=per_slot {
                    let (c, old) = (conf.clone(), container(g - 1));
                    let del = std::thread::spawn(move || h::cni_del(&c, &old));
                    let added = h::cni_add_retrying(&conf, &container(g), &pod, 100);
                    retries.fetch_add(added.retries, Ordering::Relaxed);
                    del.join().unwrap();
                }
            }));
        }
    }
    for w in workers {
        w.join().unwrap();
    }

    let mut f = Figures { cycles: per_slot * NODES.len() * PODS_PER_NODE, ..Figures::default() };
    for (agent, pool) in agents.iter().zip(&pools) {
        if with_netendpoint {
            // With the protocol the table must converge to exactly the live endpoints.
            h::wait_converged(agent, &[pool], "stress with netendpoint").await;
        } else {
            quiesce(agent).await;
        }
        let live: BTreeMap<String, String> = h::pool_state(pool)
            .await
            .into_iter()
            .filter(|(_, (_, rel))| !rel)
            .map(|(ip, (uid, _))| (ip, uid))
            .collect();
        let rules = agent.rules();
        f.final_missing += live.iter().filter(|(ip, uid)| rules.get(*ip) != Some(*uid)).count();
        f.final_leaked += rules.keys().filter(|ip| !live.contains_key(*ip)).count();
        let a = analyze(&agent.events());
        f.handovers += a.handovers.len();
        f.reused_ips += a.reused_ips.len();
        f.out_of_order += a.out_of_order().count();
        f.lost_rules += a.lost_rules.len();
    }
    f.add_retries = retries.load(Ordering::Relaxed);
    f.seconds = started.elapsed().as_secs_f64();
    println!(
        "{}: cycles={} handovers={} reused_ips={} out_of_order={} lost_rules={} final_missing={} final_leaked={} \
         add_retries={} time={:.1}s",
        if with_netendpoint { "with netendpoint" } else { "with immediate reuse" },
        f.cycles,
        f.handovers,
        f.reused_ips,
        f.out_of_order,
        f.lost_rules,
        f.final_missing,
        f.final_leaked,
        f.add_retries,
        f.seconds
    );
    for pool in &pools {
        h::cleanup_pool(pool).await;
    }
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_rule_is_lost_in_hundreds_of_delete_and_recreate_cycles_and_the_control_loses_some() {
    let net = run(true).await;
    if !h::testing_reference_agent() {
        // An agent under conformance is judged on the protocol alone; the
        // control run (no finalizers, naive agents) is the reference's figure.
        println!("agent under conformance: {} lost rules in {} cycles", net.lost_rules, net.cycles);
        assert_net(&net);
        return;
    }
    let ctl = run(false).await;
    println!(
        "HEADLINE with netendpoint: {} lost rules in {} cycles; with immediate reuse: {} lost rules in {} cycles",
        net.lost_rules, net.cycles, ctl.lost_rules, ctl.cycles
    );
    assert_net(&net);
}

fn assert_net(net: &Figures) {
    assert!(net.cycles >= 300, "{net:?}");
    assert!(net.reused_ips > 0 && net.handovers >= net.cycles / 2, "the workload must reuse IPs: {net:?}");
    assert_eq!(net.lost_rules, 0, "{net:?}");
    assert_eq!(net.out_of_order, 0, "a new holder's add came before the old holder's remove: {net:?}");
    assert_eq!((net.final_missing, net.final_leaked), (0, 0), "{net:?}");
}
