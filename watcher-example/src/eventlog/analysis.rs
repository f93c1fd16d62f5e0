//! What a log says about ordering, per IP: the proof the tests read. Built
//! with the `test-support` feature (the tests crate enables it) and in this
//! crate's own tests; the agent itself never analyses its log.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::{Kind, Record};

/// A handover of an IP from one endpoint to the next, as the agent saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handover {
    /// The reused IP.
    pub ip: IpAddr,
    /// The previous holder.
    pub old_uid: String,
    /// The new holder.
    pub new_uid: String,
    /// True when the old holder's remove was processed before the new holder's add.
    pub in_order: bool,
}

/// A stale teardown that removed another (newer) endpoint's rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostRule {
    /// The IP whose rule was lost.
    pub ip: IpAddr,
    /// The endpoint whose rule was removed.
    pub victim_uid: String,
    /// The endpoint whose teardown removed it.
    pub by_uid: String,
    /// The `seq` of the offending remove.
    pub seq: u64,
}

/// What a log says about ordering, per IP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Records read.
    pub records: usize,
    /// Every change of holder of an IP.
    pub handovers: Vec<Handover>,
    /// IPs installed for more than one endpoint.
    pub reused_ips: BTreeSet<IpAddr>,
    /// Rules removed by a teardown of another endpoint.
    pub lost_rules: Vec<LostRule>,
    /// The table the log leads to: IP → UID.
    pub final_table: BTreeMap<IpAddr, String>,
}

impl Analysis {
    /// Handovers where the new holder's add came before the old holder's remove.
    pub fn out_of_order(&self) -> impl Iterator<Item = &Handover> {
        self.handovers.iter().filter(|h| !h.in_order)
    }
}

/// Replays `records` in order.
///
/// A handover is *in order* when the previous holder's rule was removed before
/// the next holder's rule was added. A *lost rule* is a remove whose
/// `removed_uid` is not the UID being torn down: a late delete took out the
/// newer holder's rule.
pub fn analyze(records: &[Record]) -> Analysis {
    let mut a = Analysis { records: records.len(), ..Analysis::default() };
    let mut installed: BTreeMap<IpAddr, String> = BTreeMap::new();
    let mut last_holder: BTreeMap<IpAddr, String> = BTreeMap::new();
    for r in records {
        match r.kind {
            Kind::Add => {
                if let Some(prev) = last_holder.get(&r.ip).filter(|p| **p != r.uid) {
                    let still_installed = installed.get(&r.ip).is_some_and(|u| u == prev);
                    a.handovers.push(Handover {
                        ip: r.ip,
                        old_uid: prev.clone(),
                        new_uid: r.uid.clone(),
                        in_order: !still_installed,
                    });
                    a.reused_ips.insert(r.ip);
                }
                installed.insert(r.ip, r.uid.clone());
                last_holder.insert(r.ip, r.uid.clone());
            }
            Kind::Remove => {
                let removed = r.removed_uid.clone().unwrap_or_else(|| r.uid.clone());
                if removed != r.uid {
                    a.lost_rules.push(LostRule { ip: r.ip, victim_uid: removed, by_uid: r.uid.clone(), seq: r.seq });
                }
                installed.remove(&r.ip);
            }
        }
    }
    a.final_table = installed;
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, kind: Kind, ip: &str, uid: &str, removed: Option<&str>) -> Record {
        Record {
            seq,
            kind,
            ip: ip.parse().unwrap(),
            uid: uid.into(),
            name: "n".into(),
            ts: String::new(),
            replaced_uid: None,
            removed_uid: removed.map(String::from),
        }
    }

    #[test]
    fn an_ordered_handover_is_not_a_loss() {
        let a = analyze(&[
            rec(0, Kind::Add, "10.0.0.2", "u1", None),
            rec(1, Kind::Remove, "10.0.0.2", "u1", Some("u1")),
            rec(2, Kind::Add, "10.0.0.2", "u2", None),
        ]);
        assert_eq!(a.handovers.len(), 1);
        assert!(a.handovers[0].in_order);
        assert!(a.lost_rules.is_empty());
        assert_eq!(a.final_table.get(&"10.0.0.2".parse().unwrap()).map(String::as_str), Some("u2"));
    }

    #[test]
    fn a_late_naive_delete_is_a_lost_rule() {
        let a = analyze(&[
            rec(0, Kind::Add, "10.0.0.2", "u1", None),
            rec(1, Kind::Add, "10.0.0.2", "u2", None),
            rec(2, Kind::Remove, "10.0.0.2", "u1", Some("u2")),
        ]);
        assert_eq!(a.out_of_order().count(), 1);
        assert_eq!(a.lost_rules.len(), 1);
        assert_eq!(a.lost_rules[0].victim_uid, "u2");
        assert!(a.final_table.is_empty());
    }
}
