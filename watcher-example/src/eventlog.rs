//! The event log: one JSON line per dataplane change, in the order the agent
//! made them, so that tests (and humans) can check ordering after the fact.
//!
//! A line is `{"seq","kind":"add"|"remove","ip","uid","name","ts"}` plus
//! `replaced_uid` (an add that overwrote another endpoint's rule) or
//! `removed_uid` (the UID of the rule a remove actually took out). A remove is
//! logged only when a rule was removed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What happened to the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A rule was installed (possibly replacing another).
    Add,
    /// A rule was removed.
    Remove,
}

/// One processed event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Position in the log, increasing across restarts of the agent.
    pub seq: u64,
    /// Add or remove.
    pub kind: Kind,
    /// The table key.
    pub ip: IpAddr,
    /// UID of the endpoint being installed or torn down.
    pub uid: String,
    /// Name of that endpoint.
    pub name: String,
    /// When the change was made (RFC 3339).
    pub ts: String,
    /// For an add: UID of the rule it overwrote, if that belonged to another endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_uid: Option<String>,
    /// For a remove: UID of the rule actually removed. It differs from `uid`
    /// only when a stale teardown removed a newer holder's rule (a lost rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_uid: Option<String>,
}

/// An append-only JSON-lines writer. Every record is written with one `write`
/// call, so a killed agent leaves whole lines behind.
#[derive(Debug, Default)]
pub struct EventLog {
    file: Option<(PathBuf, File)>,
    next_seq: u64,
}

impl EventLog {
    /// A log that records nothing.
    pub fn disabled() -> Self {
        Self::default()
    }

    /// Appends to `path`, continuing the sequence numbers already in it.
    pub fn open(path: &Path) -> Result<Self> {
        let next_seq = match read(path) {
            Ok(records) => records.last().map_or(0, |r| r.seq + 1),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
        Ok(Self { file: Some((path.to_path_buf(), file)), next_seq })
    }

    /// Appends a record, filling in `seq` and `ts`.
    pub fn append(
        &mut self,
        kind: Kind,
        ip: IpAddr,
        uid: &str,
        name: &str,
        replaced_uid: Option<String>,
        removed_uid: Option<String>,
    ) -> Result<()> {
        let Some((path, file)) = &mut self.file else { return Ok(()) };
        let rec = Record {
            seq: self.next_seq,
            kind,
            ip,
            uid: uid.to_string(),
            name: name.to_string(),
            ts: k8s_openapi::jiff::Timestamp::now().to_string(),
            replaced_uid,
            removed_uid,
        };
        self.next_seq += 1;
        let mut line = serde_json::to_vec(&rec).map_err(|source| Error::StateFile { path: path.clone(), source })?;
        line.push(b'\n');
        file.write_all(&line).map_err(|source| Error::Io { path: path.clone(), source })
    }
}

/// Reads a log. A torn last line (the agent was killed mid-write) is ignored.
pub fn read(path: &Path) -> Result<Vec<Record>> {
    let file = File::open(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    let mut out = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line.map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
        if let Ok(rec) = serde_json::from_str::<Record>(&line) {
            out.push(rec);
        }
    }
    Ok(out)
}

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

    #[test]
    fn the_log_appends_across_reopens() {
        let path = std::env::temp_dir().join(format!("watcher-example-log-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let ip: IpAddr = "10.0.0.2".parse().unwrap();
        EventLog::open(&path).unwrap().append(Kind::Add, ip, "u1", "n", None, None).unwrap();
        EventLog::open(&path).unwrap().append(Kind::Remove, ip, "u1", "n", None, Some("u1".into())).unwrap();
        let recs = read(&path).unwrap();
        assert_eq!(recs.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![0, 1]);
        std::fs::remove_file(&path).unwrap();
    }
}
