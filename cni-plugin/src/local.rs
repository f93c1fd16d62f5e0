//! Node-local state under `dataDir`, like host-local's `backend/disk`.
//!
//! Nothing here is authoritative: the leases in the API server are. These
//! files only save API calls and carry evidence from one invocation to the
//! next:
//! - `<pool>/last_reserved_ip.<set>`: the round-robin cursor, the last
//!   address this node allocated in each range set. Advanced under an
//!   exclusive lock on a separate file (`.lock`), so concurrent ADDs on this
//!   node start at different addresses. Losing it only changes where the
//!   next search starts.
//! - `<pool>/attachments/<containerID>_<ifname>`: the leases (name, UID) of
//!   an attachment, so that ADD learns whether it is a repeat without a
//!   cluster-wide query, and cleanup after a failure never removes them.
//! - `<pool>/deleted/<containerID>_<ifname>`: a tombstone of an attachment
//!   whose DEL completed, so that the runtime's repeated DELs (containerd
//!   sends two or three per sandbox) make no API call. Bounded: dropped by
//!   GC once the runtime no longer lists the container, after
//!   [`TOMBSTONE_TTL`], and beyond the newest [`MAX_TOMBSTONES`].
//! - `<pool>/queue/<containerID>_<ifname>`: the queue entries a waiting ADD
//!   created, so that a DEL after an ADD that was killed deletes them.
//! - `nodes/<node>`: the node name was seen registered as a Node object.
//! - `<pool>/shard_hint.<set>.json`: the last shard summary this node read
//!   in each range set, so that the next ADD picks an address that is
//!   probably free without reading it again;
//! - `<pool>/sightings.<kind>.json`: evidence seen by an earlier invocation
//!   (stale leases for GC, vanished nodes for reclaim), with the server time
//!   it was first seen, so that no lease is released on one sighting.
//! - `status.<hash of the kubeconfig path>.json`: when STATUS last reached the API server, so that one
//!   blip does not mark the node NotReady.
//!
//! Every write goes through [`atomic_file::write`] with
//! [`atomic_file::Options::HINT`]: a temporary file in the same directory,
//! then a rename over the old one, so readers see the old or the new
//! content, never a mix. There is no fsync: every file here is a hint
//! whose loss in a crash costs at most a second lease until GC or DEL, or a
//! grace period that starts again, and an fsync'd pair of writes measured
//! 7 ms on the benchmark machine, more than half of a whole ADD. Write
//! failures are logged at warn and otherwise ignored; reads of missing, empty
//! or corrupt files yield "nothing known".

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use netendpoint_crd::NetworkEndpoint;
use netendpoint_netconf::RangeSet;
use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

/// A file-name-safe form of `s` (container IDs and ifnames are validated,
/// but node names from config are not file names).
fn clean(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '.') { c } else { '_' }).collect()
}

/// Removes `path`; a failure other than "not there" is logged.
fn remove(path: &Path, what: &str) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        warn!(path = %path.display(), error = %e, "cannot remove {what}");
    }
}

/// What STATUS remembers between calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusState {
    /// Unix seconds (node clock) of the last STATUS that reached the API server.
    pub last_ok: Option<i64>,
    /// Unix seconds (node clock) of the first failure since then.
    pub failing_since: Option<i64>,
}

/// What a node's record says about an attachment's leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// No record, a pending one (an ADD may have created leases it did not
    /// record) or one that cannot be read: only a list can tell.
    Unknown,
    /// The (name, UID) of every lease the attachment holds in this pool.
    Complete(Vec<(String, String)>),
    /// A DEL of the attachment completed on this node: nothing is left to release.
    Deleted,
}

/// How long a tombstone is kept: far longer than a runtime takes between
/// the DELs of one sandbox.
pub const TOMBSTONE_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// Most tombstones kept per pool (the newest).
pub const MAX_TOMBSTONES: usize = 1024;

/// A tombstone as stored: the attachment and when its DEL completed
/// (seconds on the node's clock: only this node reads it).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Tombstone {
    container_id: String,
    if_name: String,
    at: i64,
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// An attachment's record as stored: its sandbox and interface (the file
/// name is a cleaned form of them) and its leases.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredRecord {
    container_id: String,
    if_name: String,
    leases: Vec<(String, String)>,
}

/// A complete record of one attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachmentRecord {
    /// CNI_CONTAINERID.
    pub container_id: String,
    /// CNI_IFNAME.
    pub if_name: String,
    /// Its leases: (name, UID).
    pub leases: Vec<(String, String)>,
}

/// What this node last read of one shard: its first address and the
/// addresses leased then (base64 bitmap), plus those it allocated since.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ShardHint {
    /// The shard's first address.
    pub first: IpAddr,
    /// Leased addresses (a `netendpoint_lease::summary::Bitmap`, base64).
    pub leased: String,
    /// The pool had summaries then (a controller summarised it), so the
    /// next ADD reads its shard before the pool summary. Absent in hints
    /// written before this field: false.
    #[serde(default)]
    pub summarised: bool,
}

/// Node-local state of one pool. See the module docs for the files.
#[derive(Debug, Clone)]
pub struct LocalState {
    root: Option<PathBuf>,
    pool: String,
}

impl LocalState {
    /// State kept under `data_dir` for `pool`.
    /// A `data_dir` whose last component is a symbolic link is not used:
    /// the plugin then keeps no hints (see the module docs), and says so.
    pub fn new(data_dir: &Path, pool: &str) -> Self {
        if crate::nofollow::is_symlink(data_dir) {
            warn!(path = %data_dir.display(), "ipam.dataDir is a symbolic link: not following it; keeping no node-local state");
            return Self { root: None, pool: pool.to_string() };
        }
        Self { root: Some(data_dir.to_path_buf()), pool: pool.to_string() }
    }

    /// State that remembers nothing (unit tests only).
    #[cfg(test)]
    pub fn none() -> Self {
        Self { root: None, pool: String::new() }
    }

    fn dir(&self) -> Option<PathBuf> {
        self.root.as_ref().map(|r| r.join(&self.pool))
    }

    fn cursor_path(&self, set: usize) -> Option<PathBuf> {
        self.dir().map(|d| d.join(format!("last_reserved_ip.{set}")))
    }

    fn record_path(&self, container_id: &str, if_name: &str) -> Option<PathBuf> {
        self.dir().map(|d| d.join("attachments").join(format!("{}_{}", clean(container_id), clean(if_name))))
    }

    /// Replaces `path` (creating its directory), atomically but not durably:
    /// see the module docs. A failure is logged and otherwise ignored.
    fn write(&self, path: &Path, data: &[u8], what: &str) {
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        let written = std::fs::create_dir_all(dir)
            .and_then(|()| atomic_file::write_bytes(path, atomic_file::Options::HINT, data));
        if let Err(e) = written {
            warn!(path = %path.display(), error = %e, "cannot write {what}");
        }
    }

    /// The (name, UID) of the leases recorded for an attachment by an earlier
    /// ADD on this node; empty when there is no complete record.
    pub fn recorded(&self, container_id: &str, if_name: &str) -> Vec<(String, String)> {
        match self.record_of(container_id, if_name) {
            Record::Complete(leases) => leases,
            Record::Unknown | Record::Deleted => Vec::new(),
        }
    }

    /// What this node knows of an attachment's leases. An ADD marks its
    /// record pending before its first create and completes it after its
    /// last, so a complete record names every lease the attachment holds in
    /// this pool, unless two writes in a row failed (each is logged at warn).
    pub fn record_of(&self, container_id: &str, if_name: &str) -> Record {
        if self.tombstone(container_id, if_name).is_some() {
            return Record::Deleted;
        }
        self.record_path(container_id, if_name)
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice::<StoredRecord>(&b).ok())
            .filter(|r| r.container_id == container_id && r.if_name == if_name)
            .map_or(Record::Unknown, |r| Record::Complete(r.leases))
    }

    /// True when this node has any record of the attachment, pending or
    /// complete; also when it keeps no records (no data directory).
    pub fn seen(&self, container_id: &str, if_name: &str) -> bool {
        self.record_path(container_id, if_name).is_none_or(|p| p.exists())
    }

    /// Marks an attachment's record pending (an ADD is about to create
    /// leases for it): until [`LocalState::record`] completes it, DEL finds
    /// the attachment's leases by listing, not from the record.
    pub fn mark_pending(&self, container_id: &str, if_name: &str) {
        let Some(path) = self.record_path(container_id, if_name) else { return };
        // An ADD after a DEL of the same attachment (the runtime may retry
        // a sandbox under its old ID) starts a new life: no tombstone.
        if let Some(t) = self.tombstone_path(container_id, if_name) {
            remove(&t, "the attachment's tombstone");
        }
        self.write(&path, b"\"pending\"", "the attachment's pending record");
    }

    fn tombstone_path(&self, container_id: &str, if_name: &str) -> Option<PathBuf> {
        self.dir().map(|d| d.join("deleted").join(format!("{}_{}", clean(container_id), clean(if_name))))
    }

    fn tombstone(&self, container_id: &str, if_name: &str) -> Option<Tombstone> {
        let bytes = std::fs::read(self.tombstone_path(container_id, if_name)?).ok()?;
        serde_json::from_slice::<Tombstone>(&bytes)
            .ok()
            .filter(|t| t.container_id == container_id && t.if_name == if_name)
            .filter(|t| unix_now().saturating_sub(t.at) < TOMBSTONE_TTL.as_secs() as i64)
    }

    /// True when a DEL of this attachment completed on this node (its
    /// sandbox is gone).
    pub fn deleted(&self, container_id: &str, if_name: &str) -> bool {
        self.tombstone(container_id, if_name).is_some()
    }

    /// Replaces an attachment's record by a tombstone (its DEL completed),
    /// and keeps at most [`MAX_TOMBSTONES`] of them, the newest.
    pub fn bury(&self, container_id: &str, if_name: &str) {
        self.forget(container_id, if_name);
        let Some(path) = self.tombstone_path(container_id, if_name) else { return };
        let t = Tombstone { container_id: container_id.to_string(), if_name: if_name.to_string(), at: unix_now() };
        if let Ok(data) = serde_json::to_vec(&t) {
            self.write(&path, &data, "the attachment's tombstone");
        }
        self.prune_tombstones(|_| true);
    }

    /// Drops the tombstones older than [`TOMBSTONE_TTL`], those `keep`
    /// refuses (GC: containers the runtime no longer lists), and all but
    /// the newest [`MAX_TOMBSTONES`].
    pub fn prune_tombstones(&self, keep: impl Fn(&str) -> bool) {
        let Some(dir) = self.dir().map(|d| d.join("deleted")) else { return };
        let Ok(entries) = std::fs::read_dir(&dir) else { return };
        let now = unix_now();
        let mut kept: Vec<(i64, PathBuf)> = Vec::new();
        for e in entries.flatten() {
            let path = e.path();
            let t = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<Tombstone>(&b).ok());
            match t {
                Some(t) if now.saturating_sub(t.at) < TOMBSTONE_TTL.as_secs() as i64 && keep(&t.container_id) => {
                    kept.push((t.at, path));
                }
                _ => remove(&path, "a tombstone"),
            }
        }
        if kept.len() > MAX_TOMBSTONES {
            kept.sort();
            for (_, path) in kept.iter().take(kept.len() - MAX_TOMBSTONES) {
                remove(path, "a tombstone");
            }
        }
    }

    fn queue_path(&self, container_id: &str, if_name: &str) -> Option<PathBuf> {
        self.dir().map(|d| d.join("queue").join(format!("{}_{}", clean(container_id), clean(if_name))))
    }

    /// Remembers the queue entries (name, UID) a waiting ADD of the
    /// attachment holds (none: forgets them).
    pub fn note_entries(&self, container_id: &str, if_name: &str, entries: &[(String, String)]) {
        let Some(path) = self.queue_path(container_id, if_name) else { return };
        if entries.is_empty() {
            remove(&path, "the attachment's queue entries");
            return;
        }
        if let Ok(data) = serde_json::to_vec(entries) {
            self.write(&path, &data, "the attachment's queue entries");
        }
    }

    /// The queue entries a waiting ADD of the attachment noted and did not delete.
    pub fn noted_entries(&self, container_id: &str, if_name: &str) -> Vec<(String, String)> {
        self.queue_path(container_id, if_name)
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Records the leases of an attachment. Without a record a repeated ADD
    /// is not recognised as one, so a failure is logged at warn.
    pub fn record(&self, container_id: &str, if_name: &str, leases: &[NetworkEndpoint]) {
        let Some(path) = self.record_path(container_id, if_name) else { return };
        let rec = StoredRecord {
            container_id: container_id.to_string(),
            if_name: if_name.to_string(),
            leases: leases
                .iter()
                .map(|ep| (ep.metadata.name.clone().unwrap_or_default(), ep.metadata.uid.clone().unwrap_or_default()))
                .collect(),
        };
        match serde_json::to_vec(&rec) {
            Ok(data) => self.write(&path, &data, "the attachment's lease record"),
            Err(e) => warn!(error = %e, "cannot encode the attachment's lease record"),
        }
    }

    /// Forgets an attachment's record (its leases are gone).
    pub fn forget(&self, container_id: &str, if_name: &str) {
        if let Some(p) = self.record_path(container_id, if_name) {
            remove(&p, "the attachment's lease record");
        }
    }

    /// The last address allocated in range set `set`, if known.
    pub fn load(&self, set: usize) -> Option<IpAddr> {
        std::fs::read_to_string(self.cursor_path(set)?).ok()?.trim().parse().ok()
    }

    /// Holds the cursor lock of range set `set` until the returned file is dropped.
    fn lock(&self, set: usize) -> Option<File> {
        let path = self.cursor_path(set)?.with_extension(format!("{set}.lock"));
        let locked = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path))
            .and_then(|f| f.lock().map(|()| f));
        match locked {
            Ok(f) => Some(f),
            Err(e) => {
                warn!(path = %path.display(), error = %e, "cannot lock the round-robin cursor");
                None
            }
        }
    }

    /// Returns the cursor of range set `i` and, under the cursor lock,
    /// advances it past the first candidate, so that concurrent ADDs on this
    /// node start at different addresses instead of racing for the same one.
    /// A node with no cursor yet starts after `fresh_start`.
    pub fn reserve(&self, i: usize, set: &RangeSet, fresh_start: Option<IpAddr>) -> Option<IpAddr> {
        let _lock = self.lock(i);
        let last = self.load(i).or(fresh_start);
        if let (Some(next), Some(path)) = (set.candidates(last).next(), self.cursor_path(i)) {
            self.write(&path, next.to_string().as_bytes(), "the round-robin cursor");
        }
        last
    }

    /// Records `ip` as the last allocation in `set`, under the cursor lock.
    pub fn store(&self, set: usize, ip: IpAddr) {
        let Some(path) = self.cursor_path(set) else { return };
        let _lock = self.lock(set);
        self.write(&path, ip.to_string().as_bytes(), "the round-robin cursor");
    }

    fn hint_path(&self, set: usize) -> Option<PathBuf> {
        self.dir().map(|d| d.join(format!("shard_hint.{set}.json")))
    }

    /// The last shard summary this node read in range set `set`, with the
    /// addresses it allocated since: where the next ADD looks first.
    pub fn shard_hint(&self, set: usize) -> Option<ShardHint> {
        let bytes = std::fs::read(self.hint_path(set)?).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Replaces the shard hint of range set `set`.
    pub fn save_shard_hint(&self, set: usize, hint: &ShardHint) {
        let Some(path) = self.hint_path(set) else { return };
        match serde_json::to_vec(hint) {
            Ok(data) => self.write(&path, &data, "the shard hint"),
            Err(e) => warn!(error = %e, "cannot encode the shard hint"),
        }
    }

    /// Every complete attachment record of this pool.
    pub fn records(&self) -> Vec<AttachmentRecord> {
        let Some(dir) = self.dir().map(|d| d.join("attachments")) else { return Vec::new() };
        let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let Ok(bytes) = std::fs::read(entry.path()) else { continue };
            let Ok(rec) = serde_json::from_slice::<StoredRecord>(&bytes) else { continue };
            out.push(AttachmentRecord { container_id: rec.container_id, if_name: rec.if_name, leases: rec.leases });
        }
        out
    }

    fn node_path(&self, node: &str) -> Option<PathBuf> {
        self.root.as_ref().map(|r| r.join("nodes").join(clean(node)))
    }

    /// True if an earlier ADD on this node saw `node` registered.
    pub fn node_verified(&self, node: &str) -> bool {
        self.node_path(node).is_some_and(|p| std::fs::read_to_string(p).is_ok_and(|n| n == node))
    }

    /// Remembers that `node` is a registered Node.
    pub fn mark_node_verified(&self, node: &str) {
        if let Some(p) = self.node_path(node) {
            self.write(&p, node.as_bytes(), "the node registration record");
        }
    }

    fn sightings_path(&self, kind: &str) -> Option<PathBuf> {
        self.dir().map(|d| d.join(format!("sightings.{kind}.json")))
    }

    /// Evidence of `kind` seen by earlier invocations: key → server time
    /// (Unix seconds) of the first sighting.
    pub fn sightings(&self, kind: &str) -> BTreeMap<String, i64> {
        self.sightings_path(kind)
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Replaces the evidence of `kind`.
    pub fn save_sightings(&self, kind: &str, seen: &BTreeMap<String, i64>) {
        let Some(path) = self.sightings_path(kind) else { return };
        match serde_json::to_vec(seen) {
            Ok(data) => self.write(&path, &data, "sightings"),
            Err(e) => warn!(error = %e, "cannot encode sightings"),
        }
    }

    /// The STATUS record of the API server reached through `kubeconfig`.
    fn status_path(&self, kubeconfig: &Path) -> Option<PathBuf> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        kubeconfig.hash(&mut h);
        self.root.as_ref().map(|r| r.join(format!("status.{:016x}.json", h.finish())))
    }

    /// What STATUS remembered last time about the API server of `kubeconfig`.
    pub fn status_state(&self, kubeconfig: &Path) -> StatusState {
        let Some(path) = self.status_path(kubeconfig) else { return StatusState::default() };
        let mut text = String::new();
        match File::open(&path).and_then(|mut f| f.read_to_string(&mut text)) {
            Ok(_) => serde_json::from_str(&text).unwrap_or_default(),
            Err(e) => {
                debug!(path = %path.display(), error = %e, "no STATUS record");
                StatusState::default()
            }
        }
    }

    /// Saves what STATUS learnt about the API server of `kubeconfig`.
    pub fn save_status_state(&self, kubeconfig: &Path, state: StatusState) {
        let Some(path) = self.status_path(kubeconfig) else { return };
        match serde_json::to_vec(&state) {
            Ok(data) => self.write(&path, &data, "the STATUS record"),
            Err(e) => warn!(error = %e, "cannot encode the STATUS record"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use netendpoint_netconf::Range;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("netendpoint-local-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn set() -> RangeSet {
        RangeSet {
            ranges: vec![Range::with_defaults("10.0.0.0/24".parse().unwrap(), None, None, None).unwrap()],
            exclude: vec![],
        }
    }

    #[test]
    fn concurrent_reservations_never_start_at_the_same_address() {
        let dir = tmp("cursor");
        let state = LocalState::new(&dir, "p");
        let s = set();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (state, s) = (state.clone(), s.clone());
                std::thread::spawn(move || (0..25).map(|_| state.reserve(0, &s, None)).collect::<Vec<_>>())
            })
            .collect();
        let all: Vec<Option<IpAddr>> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len(), "two reservations started at the same address");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_store_waits_for_the_cursor_lock() {
        // Before, the lock was taken on the cursor file itself, and store()
        // renamed a new inode over it: the next ADD locked a different inode
        // and ran alongside the holder.
        let dir = tmp("lock");
        let state = LocalState::new(&dir, "p");
        state.store(0, "10.0.0.7".parse().unwrap());
        let held = state.lock(0).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let other = state.clone();
        let t = std::thread::spawn(move || {
            other.store(0, "10.0.0.9".parse().unwrap());
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(std::time::Duration::from_millis(300)).is_err(), "store ran while the lock was held");
        drop(held);
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        t.join().unwrap();
        assert_eq!(state.load(0), Some("10.0.0.9".parse().unwrap()));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn records_sightings_and_status_round_trip() {
        let dir = tmp("records");
        let state = LocalState::new(&dir, "p");
        assert!(state.recorded("c1", "eth0").is_empty());
        assert!(!state.node_verified("n1"));
        state.mark_node_verified("n1");
        assert!(state.node_verified("n1"));
        assert!(!state.node_verified("n2"));
        let seen = BTreeMap::from([("uid-1".to_string(), 17)]);
        state.save_sightings("gc", &seen);
        assert_eq!(state.sightings("gc"), seen);
        assert!(state.sightings("vanished-node").is_empty());
        let st = StatusState { last_ok: Some(5), failing_since: None };
        state.save_status_state(Path::new("/k1"), st);
        assert_eq!(state.status_state(Path::new("/k1")), st);
        assert_eq!(state.status_state(Path::new("/k2")), StatusState::default(), "kept per API server");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn nothing_is_written_without_a_directory() {
        let state = LocalState::none();
        state.mark_node_verified("n1");
        assert!(!state.node_verified("n1"));
        assert_eq!(state.reserve(0, &set(), None), None);
    }
}
