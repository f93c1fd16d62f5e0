//! The event log: one JSON line per dataplane change, in the order the agent
//! made them, so that tests (and humans) can check ordering after the fact.
//!
//! A line is `{"seq","kind":"add"|"remove","ip","uid","name","ts"}` plus
//! `replaced_uid` (an add that overwrote another endpoint's rule) or
//! `removed_uid` (the UID of the rule a remove actually took out). A remove is
//! logged only when a rule was removed.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

#[cfg(any(test, feature = "test-support"))]
mod analysis;
#[cfg(any(test, feature = "test-support"))]
pub use analysis::{Analysis, Handover, LostRule, analyze};

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

/// The endpoint a record is about.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// Its address.
    pub ip: IpAddr,
    /// Its UID.
    pub uid: &'a str,
    /// Its name.
    pub name: &'a str,
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

    /// Appends a record about endpoint `ep`, filling in `seq` and `ts`.
    pub fn append(
        &mut self,
        kind: Kind,
        ep: Subject<'_>,
        replaced_uid: Option<String>,
        removed_uid: Option<String>,
    ) -> Result<()> {
        let Some((path, file)) = &mut self.file else { return Ok(()) };
        let rec = Record {
            seq: self.next_seq,
            kind,
            ip: ep.ip,
            uid: ep.uid.to_string(),
            name: ep.name.to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_appends_across_reopens() {
        let path = std::env::temp_dir().join(format!("watcher-example-log-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let ip: IpAddr = "10.0.0.2".parse().unwrap();
        EventLog::open(&path).unwrap().append(Kind::Add, Subject { ip, uid: "u1", name: "n" }, None, None).unwrap();
        EventLog::open(&path)
            .unwrap()
            .append(Kind::Remove, Subject { ip, uid: "u1", name: "n" }, None, Some("u1".into()))
            .unwrap();
        let recs = read(&path).unwrap();
        assert_eq!(recs.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![0, 1]);
        std::fs::remove_file(&path).unwrap();
    }
}
