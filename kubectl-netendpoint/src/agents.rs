//! The report of `agents`, built from plain data (no API calls): each
//! finalizer an agent acknowledges, beside who registered it (the agents
//! list the admission policy reads), which networks stamp it on their leases
//! (the `finalizers` of their `ipam` sections), and how many leases carry
//! it; and where those disagree.
//!
//! Registration has two halves that nothing else checks against each other.
//! A finalizer that networks stamp but nobody registered can be removed by
//! no agent: every release it holds waits for `forceReleaseAfter`. A
//! finalizer registered but stamped by no network and carried by no lease
//! gates nothing: the agent's releases are not waited for.

use std::collections::{BTreeMap, BTreeSet};

use netendpoint_lease::view::Lease;
use serde::Serialize;

use crate::render::table;

/// Finalizers of this prefix belong to netendpoint itself (the sticky hold), not to an agent.
const OWN_PREFIX: &str = "netendpoint.dev/";

/// What is wrong with one finalizer's registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Problem {
    /// Stamped on leases, but no agent may remove it.
    NotRegistered,
    /// Registered, but nothing stamps it and no lease carries it.
    NotStamped,
}

impl Problem {
    /// What it costs and what to do.
    pub fn explain(self, finalizer: &str) -> String {
        match self {
            Problem::NotRegistered => format!(
                "{finalizer} is stamped on leases but no agent is registered for it: nobody may remove it, so each \
                 release it holds waits for forceReleaseAfter. Register the agent that owns it: add \
                 `<namespace>.<serviceaccount>: {finalizer}` to the agents list"
            ),
            Problem::NotStamped => format!(
                "{finalizer} is registered but no network stamps it and no lease carries it: no release waits for \
                 its agent. Add it to the `finalizers` of the networks the agent serves (or let the agent add it \
                 lazily, with the window that leaves)"
            ),
        }
    }
}

/// One finalizer as `agents` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRow {
    /// The finalizer.
    pub finalizer: String,
    /// The ServiceAccounts (`<namespace>.<name>`) registered for it.
    pub registered_by: Vec<String>,
    /// The networks that stamp it, as `<network> (pool <pool>)`.
    pub stamped_by: Vec<String>,
    /// Leases that carry it now.
    pub on_leases: u64,
    /// What is wrong, if anything.
    pub problem: Option<Problem>,
}

/// The whole `agents` report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentsReport {
    /// Where the registrations were read (`configmap/<namespace>/<name>`), if anywhere.
    pub registered_from: Option<String>,
    /// Where the networks were read.
    pub networks_from: Vec<String>,
    /// One row per finalizer, sorted.
    pub agents: Vec<AgentRow>,
}

/// A network's stamp: its name, its pool and the finalizers of its `ipam` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// The network's name.
    pub network: String,
    /// Its pool.
    pub pool: String,
    /// The finalizers it stamps on every lease.
    pub finalizers: Vec<String>,
}

/// The rows, from the agents list (`<namespace>.<serviceaccount>` →
/// finalizer), the networks' stamps and the leases.
pub fn rows(registered: &BTreeMap<String, String>, stamps: &[Stamp], leases: &[Lease]) -> Vec<AgentRow> {
    let mut by: BTreeMap<&str, AgentRow> = BTreeMap::new();
    for (account, finalizer) in registered {
        entry(&mut by, finalizer).registered_by.push(account.clone());
    }
    for s in stamps {
        for f in s.finalizers.iter().filter(|f| !f.starts_with(OWN_PREFIX)) {
            let stamped = format!("{} (pool {})", s.network, s.pool);
            let r = entry(&mut by, f);
            if !r.stamped_by.contains(&stamped) {
                r.stamped_by.push(stamped);
            }
        }
    }
    for l in leases {
        for f in l.finalizers.iter().filter(|f| !f.starts_with(OWN_PREFIX)) {
            entry(&mut by, f).on_leases += 1;
        }
    }
    by.into_values()
        .map(|mut r| {
            let stamped = !r.stamped_by.is_empty() || r.on_leases > 0;
            r.problem = match (r.registered_by.is_empty(), stamped) {
                (true, true) => Some(Problem::NotRegistered),
                (false, false) => Some(Problem::NotStamped),
                _ => None,
            };
            r.stamped_by.sort();
            r
        })
        .collect()
}

fn entry<'a, 'b>(by: &'a mut BTreeMap<&'b str, AgentRow>, finalizer: &'b str) -> &'a mut AgentRow {
    by.entry(finalizer).or_insert_with(|| AgentRow {
        finalizer: finalizer.to_string(),
        registered_by: Vec::new(),
        stamped_by: Vec::new(),
        on_leases: 0,
        problem: None,
    })
}

impl AgentsReport {
    /// The problems, one explanation each.
    pub fn problems(&self) -> Vec<String> {
        self.agents.iter().filter_map(|r| r.problem.map(|p| p.explain(&r.finalizer))).collect()
    }

    /// The table, then one line per problem.
    pub fn table(&self) -> String {
        let list = |v: &[String]| if v.is_empty() { "<none>".to_string() } else { v.join(",") };
        let rows: Vec<Vec<String>> = self
            .agents
            .iter()
            .map(|r| {
                vec![
                    r.finalizer.clone(),
                    list(&r.registered_by),
                    list(&r.stamped_by),
                    r.on_leases.to_string(),
                    r.problem.map_or_else(|| "<none>".to_string(), |p| format!("{p:?}")),
                ]
            })
            .collect();
        let mut out = table(&["FINALIZER", "REGISTERED-BY", "STAMPED-BY", "LEASES", "PROBLEM"], &rows);
        let sources: BTreeSet<&str> = self
            .registered_from
            .iter()
            .map(String::as_str)
            .chain(self.networks_from.iter().map(String::as_str))
            .collect();
        if sources.is_empty() {
            out.push_str("read from: <nothing>\n");
        } else {
            out.push_str(&format!("read from: {}\n", sources.into_iter().collect::<Vec<_>>().join(", ")));
        }
        for p in self.problems() {
            out.push_str(&format!("problem: {p}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(finalizers: &[&str]) -> Lease {
        Lease {
            name: "p.10.0.0.1".into(),
            uid: "u".into(),
            resource_version: "1".into(),
            pool: "p".into(),
            ip: Some("10.0.0.1".parse().unwrap()),
            node: "n".into(),
            pod: None,
            releasing_since: None,
            finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
            force_release_after: None,
            sticky: None,
            incarnation: None,
            static_ip: false,
        }
    }

    fn stamp(network: &str, pool: &str, finalizers: &[&str]) -> Stamp {
        Stamp {
            network: network.into(),
            pool: pool.into(),
            finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn each_half_of_a_registration_without_the_other_is_a_problem() {
        let registered = BTreeMap::from([
            ("ops.routes".to_string(), "routes.example.com/agent".to_string()),
            ("ops.nat".to_string(), "nat.example.com/agent".to_string()),
            ("ops.lazy".to_string(), "lazy.example.com/agent".to_string()),
        ]);
        let stamps = [
            stamp("pods", "pods", &["routes.example.com/agent", "policy.example.com/agent"]),
            stamp("storage", "san", &["routes.example.com/agent", "netendpoint.dev/sticky-hold"]),
        ];
        let leases =
            [lease(&["routes.example.com/agent", "lazy.example.com/agent"]), lease(&["netendpoint.dev/sticky-hold"])];
        let rows = rows(&registered, &stamps, &leases);
        let by: BTreeMap<&str, &AgentRow> = rows.iter().map(|r| (r.finalizer.as_str(), r)).collect();
        assert_eq!(by.len(), 4, "netendpoint's own finalizer is nobody's agent: {rows:?}");
        let routes = by["routes.example.com/agent"];
        assert_eq!(routes.problem, None);
        assert_eq!(routes.stamped_by, ["pods (pool pods)", "storage (pool san)"]);
        assert_eq!((routes.registered_by.as_slice(), routes.on_leases), (&["ops.routes".to_string()][..], 1));
        assert_eq!(by["policy.example.com/agent"].problem, Some(Problem::NotRegistered));
        assert_eq!(by["nat.example.com/agent"].problem, Some(Problem::NotStamped));
        assert_eq!(by["lazy.example.com/agent"].problem, None, "a lazily added finalizer is on leases");
        let report = AgentsReport { registered_from: None, networks_from: vec![], agents: rows };
        let problems = report.problems();
        assert_eq!(problems.len(), 2);
        assert!(problems[0].contains("nat.example.com/agent") && problems[0].contains("no release waits"));
        assert!(problems[1].contains("policy.example.com/agent") && problems[1].contains("forceReleaseAfter"));
        let text = report.table();
        assert!(text.contains("NotRegistered") && text.contains("read from: <nothing>"), "{text}");
    }
}
