//! The Linux dataplane of the reference agent: real /32 host routes in a real
//! network namespace, installed when endpoints appear and removed on release,
//! persisting across an agent restart, with stale kernel routes pruned.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use netendpoint_tests::{self as h, AgentOpts, AgentProc, Netns};

/// The destinations of the agent's routes (`proto 252` via `nep0`) in `ns`.
fn routes(ns: &Netns) -> BTreeSet<String> {
    let out = ns.exec(&["ip", "-j", "route", "show", "dev", "nep0", "proto", "252"]);
    let v: Vec<serde_json::Value> = serde_json::from_str(out.trim()).unwrap_or_default();
    v.iter().map(|r| r["dst"].as_str().unwrap().to_string()).collect()
}

async fn wait_routes(ns: &Netns, want: &BTreeSet<String>, what: &str) {
    for _ in 0..150 {
        if routes(ns) == *want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: routes in {} are {:?}, want {want:?}", ns.name, routes(ns));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_linux_dataplane_installs_and_removes_host_routes_in_a_netns() {
    let ns = Netns::new("wlinux");
    let node = h::unique("linux-node");
    let pool = h::unique("wlinux");
    let fin = format!("agent.example.com/{node}");
    let opts =
        AgentOpts { dataplane: "linux".into(), netns: Some(ns.name.clone()), ..AgentOpts::new(&node, Some(&fin)) };
    let agent = AgentProc::start(opts);
    assert!(ns.exec(&["ip", "link", "show", "nep0"]).contains("nep0"), "dummy device created in the netns");

    let conf = h::agent_net_conf(&pool, serde_json::json!({"subnet": "10.64.0.0/29"}), &node, &[&fin], "5s");
    let a = h::cni_add_retrying(&conf, &format!("{pool}-a"), "web-a", 1).ip;
    let b = h::cni_add_retrying(&conf, &format!("{pool}-b"), "web-b", 1).ip;
    wait_routes(&ns, &[a.clone(), b.clone()].into(), "after two ADDs").await;
    h::wait_converged(&agent, &[&pool], "after two ADDs").await;

    h::cni_del(&conf, &format!("{pool}-a"));
    wait_routes(&ns, &[b.clone()].into(), "after DEL of a").await;
    h::wait_converged(&agent, &[&pool], "after DEL of a").await;

    // A restart keeps the kernel routes, and prunes a route nobody owns.
    let mut agent = agent;
    agent.kill();
    let out = std::process::Command::new("ip")
        .args(["-n", &ns.name, "route", "add", "10.64.0.6/32", "dev", "nep0", "proto", "252"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let agent = agent.restart();
    wait_routes(&ns, &[b.clone()].into(), "after restart").await;
    h::wait_converged(&agent, &[&pool], "after restart").await;

    h::cni_del(&conf, &format!("{pool}-b"));
    wait_routes(&ns, &BTreeSet::new(), "after DEL of b").await;
    h::wait_converged(&agent, &[&pool], "after DEL of b").await;
    assert!(h::pool_endpoints(&pool).await.is_empty(), "both leases released after the routes were removed");
    println!("linux: routes for {a} and {b} installed and removed in netns {}", ns.name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_teardown_keeps_the_ip_and_is_reported_as_an_event() {
    let ns = Netns::new("wfail");
    let node = h::unique("fail-node");
    let pool = h::unique("wfail");
    let fin = format!("agent.example.com/{node}");
    let agent = AgentProc::start(AgentOpts {
        dataplane: "linux".into(),
        netns: Some(ns.name.clone()),
        ..AgentOpts::new(&node, Some(&fin))
    });
    let conf = h::agent_net_conf(&pool, serde_json::json!({"subnet": "10.65.0.0/29"}), &node, &[&fin], "1s");
    let ip = h::cni_add_retrying(&conf, &format!("{pool}-a"), "web-a", 1).ip;
    wait_routes(&ns, &[ip.clone()].into(), "after ADD").await;
    let name = netendpoint_crd::endpoint_name(&pool, ip.parse().unwrap());

    // The dataplane breaks under the agent: its namespace disappears.
    let out = std::process::Command::new("ip").args(["netns", "del", &ns.name]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    h::cni_del(&conf, &format!("{pool}-a"));

    let mut found = None;
    for _ in 0..150 {
        found = h::events_about(&name, watcher_example::controller::REASON_TEARDOWN_FAILED).await.into_iter().next();
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let event = found.unwrap_or_else(|| panic!("no TeardownFailed event for {name}; log:\n{}", agent.log()));
    assert_eq!(event.type_, "Warning");
    assert!(event.note.contains("ip -n"), "{event:?}");

    let ep = h::endpoints().await.get(&name).await.unwrap();
    assert!(ep.is_releasing(), "DEL requested the release");
    assert_eq!(ep.metadata.finalizers.as_deref(), Some(&[fin.clone()][..]), "the IP stays held while teardown fails");
    assert!(agent.metric("netendpoint_agent_teardown_failures_total") >= 1.0);
    drop(agent);
    h::cleanup_pool(&pool).await;
}
