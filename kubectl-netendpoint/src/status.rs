//! The report of `status`, built from plain data (no API calls): whether an
//! install is healthy, part by part, and for each part that is not, why.
//!
//! Healthy means: a controller leads (its leader Lease is held and was
//! renewed within its duration), every scheduled installer is ready (its
//! readiness probe checks the plugin's credentials and the network config
//! source), every admission policy of deploy/ is there with its binding and
//! the ConfigMaps they read, and every agent's registration agrees with the
//! networks' stamps ([`crate::agents`]). The pools' figures and queues are
//! shown beside, for the operator, and judge nothing.

use std::time::Duration;

use serde::Serialize;

use crate::render::{age, table};
use crate::report::PoolRow;

/// The controller's leadership, from its leader Lease and its Deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerFacts {
    /// The Lease's holder, if the Lease exists and names one.
    pub leader: Option<String>,
    /// Time since the holder last renewed it.
    pub renewed_ago: Option<Duration>,
    /// The Lease's duration.
    pub lease_duration: Option<Duration>,
    /// The Deployment's replicas and ready replicas, if it exists.
    pub replicas: Option<(i32, i32)>,
}

/// One installer Pod that is not ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotReadyInstaller {
    /// The Pod.
    pub pod: String,
    /// Its node.
    pub node: String,
    /// The last message of its failed readiness probe, if one was recorded.
    pub message: Option<String>,
}

/// The installer DaemonSet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallerFacts {
    /// Whether the DaemonSet exists.
    pub present: bool,
    /// Nodes it should run on.
    pub desired: i32,
    /// Nodes where it is ready.
    pub ready: i32,
    /// The Pods that are not ready, and why.
    pub not_ready: Vec<NotReadyInstaller>,
}

/// What the cluster has of the admission policies and their parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyFacts {
    /// Policies of deploy/ that are missing.
    pub missing_policies: Vec<String>,
    /// Bindings of deploy/ that are missing.
    pub missing_bindings: Vec<String>,
    /// Parameter ConfigMaps that are missing.
    pub missing_params: Vec<String>,
}

/// Everything `status` reads, and its verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// True when no part has a problem.
    pub healthy: bool,
    /// Each problem, with what to look at.
    pub problems: Vec<String>,
    /// The controller.
    pub controller: ControllerFacts,
    /// The installers.
    pub installers: InstallerFacts,
    /// The admission policies.
    pub policies: PolicyFacts,
    /// Agents registered (the agents list).
    pub agents_registered: usize,
    /// The pools' figures and queues.
    pub pools: Vec<PoolRow>,
}

/// The verdict over the facts; `agent_problems` are [`crate::agents::AgentsReport::problems`].
pub fn assess(
    controller: ControllerFacts,
    installers: InstallerFacts,
    policies: PolicyFacts,
    agents_registered: usize,
    agent_problems: Vec<String>,
    pools: Vec<PoolRow>,
) -> StatusReport {
    let mut problems = Vec::new();
    match (&controller.leader, controller.renewed_ago, controller.lease_duration) {
        (None, ..) => problems.push(
            "no controller leads: its leader Lease names no holder (is the netendpoint-controller Deployment running?)"
                .to_string(),
        ),
        (Some(leader), Some(ago), Some(d)) if ago > d => problems.push(format!(
            "no controller leads: {leader} last renewed its leader Lease {} ago, beyond its {} duration",
            age(ago),
            age(d)
        )),
        _ => {}
    }
    if !installers.present {
        problems.push("the installer DaemonSet netendpoint-installer is missing: no node gets the plugin".into());
    } else if installers.desired == 0 {
        problems.push("no node runs the installer (the DaemonSet schedules no Pod)".into());
    } else if installers.ready < installers.desired {
        problems.push(format!(
            "{} of {} installers are not ready",
            installers.desired - installers.ready,
            installers.desired
        ));
    }
    for n in &installers.not_ready {
        problems.push(format!(
            "installer {} on node {} is not ready: {}",
            n.pod,
            n.node,
            n.message.as_deref().unwrap_or("no probe message recorded")
        ));
    }
    for p in &policies.missing_policies {
        problems.push(format!("admission policy {p} is missing: apply deploy/ (or the chart) again"));
    }
    for b in &policies.missing_bindings {
        problems.push(format!("admission policy binding {b} is missing: apply deploy/ (or the chart) again"));
    }
    for c in &policies.missing_params {
        problems.push(format!("ConfigMap {c} is missing: the policies that read it refuse every request they match"));
    }
    problems.extend(agent_problems);
    StatusReport { healthy: problems.is_empty(), problems, controller, installers, policies, agents_registered, pools }
}

impl StatusReport {
    /// Parts, one line each, then the problems and the pools.
    pub fn table(&self) -> String {
        let c = &self.controller;
        let leader = match (&c.leader, c.renewed_ago) {
            (Some(l), Some(ago)) => format!("{l} (renewed {} ago)", age(ago)),
            (Some(l), None) => l.clone(),
            (None, _) => "<none>".into(),
        };
        let replicas =
            c.replicas.map_or_else(|| "<no Deployment>".to_string(), |(want, ready)| format!("{ready}/{want} ready"));
        let i = &self.installers;
        let p = &self.policies;
        let missing = p.missing_policies.len() + p.missing_bindings.len() + p.missing_params.len();
        let rows = vec![
            vec!["controller".into(), format!("leader {leader}, {replicas}")],
            vec![
                "installers".into(),
                if i.present { format!("{}/{} ready", i.ready, i.desired) } else { "<no DaemonSet>".into() },
            ],
            vec![
                "admission".into(),
                if missing == 0 {
                    "every policy, binding and parameter ConfigMap present".into()
                } else {
                    format!("{missing} missing")
                },
            ],
            vec!["agents".into(), format!("{} registered", self.agents_registered)],
            vec!["pools".into(), format!("{}", self.pools.len())],
        ];
        let mut out = table(&["PART", "STATE"], &rows);
        out.push_str(if self.healthy { "healthy\n" } else { "NOT healthy:\n" });
        for problem in &self.problems {
            out.push_str(&format!("  - {problem}\n"));
        }
        if !self.pools.is_empty() {
            let rows: Vec<Vec<String>> = self
                .pools
                .iter()
                .map(|r| {
                    vec![
                        r.pool.clone(),
                        r.capacity.map_or_else(|| "-".into(), |c| c.to_string()),
                        r.used.to_string(),
                        r.releasing.to_string(),
                        r.free.map_or_else(|| "-".into(), |f| f.to_string()),
                        r.queued.to_string(),
                    ]
                })
                .collect();
            out.push('\n');
            out.push_str(&table(&["POOL", "CAPACITY", "USED", "RELEASING", "FREE", "QUEUED"], &rows));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy_facts() -> (ControllerFacts, InstallerFacts, PolicyFacts) {
        (
            ControllerFacts {
                leader: Some("netendpoint-controller-abc".into()),
                renewed_ago: Some(Duration::from_secs(3)),
                lease_duration: Some(Duration::from_secs(15)),
                replicas: Some((1, 1)),
            },
            InstallerFacts { present: true, desired: 2, ready: 2, not_ready: vec![] },
            PolicyFacts::default(),
        )
    }

    #[test]
    fn a_complete_install_is_healthy_and_each_missing_part_is_named() {
        let (c, i, p) = healthy_facts();
        let r = assess(c.clone(), i.clone(), p.clone(), 1, vec![], vec![]);
        assert!(r.healthy && r.problems.is_empty(), "{r:?}");
        assert!(r.table().contains("healthy\n") && r.table().contains("leader netendpoint-controller-abc"));

        let stale = ControllerFacts { renewed_ago: Some(Duration::from_secs(40)), ..c.clone() };
        let r = assess(stale, i.clone(), p.clone(), 1, vec![], vec![]);
        assert!(!r.healthy && r.problems[0].contains("last renewed its leader Lease 40s ago"), "{r:?}");
        let r = assess(ControllerFacts::default(), i.clone(), p.clone(), 1, vec![], vec![]);
        assert!(r.problems[0].contains("no controller leads"), "{r:?}");

        let sick = InstallerFacts {
            ready: 1,
            not_ready: vec![NotReadyInstaller {
                pod: "netendpoint-installer-x".into(),
                node: "b".into(),
                message: Some("no key 10-netendpoint.conflist".into()),
            }],
            ..i.clone()
        };
        let r = assess(c.clone(), sick, p.clone(), 1, vec![], vec![]);
        assert_eq!(r.problems.len(), 2, "{r:?}");
        assert!(r.problems[1].contains("on node b") && r.problems[1].contains("10-netendpoint.conflist"));
        let none = InstallerFacts { desired: 0, ready: 0, ..i.clone() };
        assert!(assess(c.clone(), none, p.clone(), 1, vec![], vec![]).problems[0].contains("no node runs"));
        let gone = InstallerFacts::default();
        assert!(assess(c.clone(), gone, p.clone(), 1, vec![], vec![]).problems[0].contains("DaemonSet"));

        let holes = PolicyFacts {
            missing_policies: vec!["netendpoint-agent".into()],
            missing_bindings: vec!["netendpoint-plugin".into()],
            missing_params: vec!["netendpoint-system/netendpoint-pools".into()],
        };
        let r = assess(c.clone(), i.clone(), holes, 1, vec!["agents disagree".into()], vec![]);
        assert_eq!(r.problems.len(), 4, "{r:?}");
        assert!(r.table().contains("NOT healthy") && r.table().contains("3 missing"), "{}", r.table());
    }
}
