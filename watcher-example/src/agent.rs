//! The agent's core: watch events in, dataplane changes out. No Kubernetes
//! calls here, so it is tested by feeding it endpoints directly.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use netendpoint_crd::NetworkEndpoint;
use tracing::{debug, info, warn};

use crate::dataplane::{Dataplane, Rule};
use crate::error::{Error, Result};
use crate::eventlog::{EventLog, Kind, Subject};
use crate::metrics::Metrics;

/// What the agent needs of an endpoint: the table key and the identity of the holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointKey {
    /// The leased IP.
    pub ip: IpAddr,
    /// The object's UID: distinguishes successive holders of the same IP (and name).
    pub uid: String,
    /// The object name, `<pool>.<ip>`.
    pub name: String,
}

impl TryFrom<&NetworkEndpoint> for EndpointKey {
    type Error = Error;

    fn try_from(ep: &NetworkEndpoint) -> Result<Self> {
        let name = ep.metadata.name.clone().unwrap_or_default();
        let bad = |reason: &str| Error::BadEndpoint { name: name.clone(), reason: reason.to_string() };
        let ip = ep.ip().ok_or_else(|| bad("spec.ip does not parse"))?;
        let uid = ep.metadata.uid.clone().filter(|u| !u.is_empty()).ok_or_else(|| bad("no metadata.uid"))?;
        Ok(Self { ip, uid, name })
    }
}

/// The table and its log, behind one lock so the log order is the table's order.
struct Inner {
    table: Box<dyn Dataplane>,
    log: EventLog,
}

/// Turns endpoint observations into dataplane changes.
///
/// Guarantees:
/// - a live endpoint's rule is installed, replacing any rule for its IP held by
///   another UID (a changed UID is a replacement, never a no-op);
/// - a teardown removes the rule for the IP only while it still belongs to the
///   endpoint being torn down, unless the agent is in naive IP-keyed mode;
/// - every change is logged to the event log in the order it was made.
pub struct Agent {
    inner: Mutex<Inner>,
    naive_ip_keyed: bool,
    ready: AtomicBool,
    /// The agent's metrics.
    pub metrics: Metrics,
}

impl Agent {
    /// An agent over `table`, logging changes to `log`. `naive_ip_keyed` makes
    /// teardown remove the IP's rule without checking its UID, like a typical
    /// agent keyed by IP only (used as the control in tests).
    pub fn new(table: Box<dyn Dataplane>, log: EventLog, naive_ip_keyed: bool) -> Self {
        Self {
            inner: Mutex::new(Inner { table, log }),
            naive_ip_keyed,
            ready: AtomicBool::new(false),
            metrics: Metrics::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the table consistent (each
        // dataplane call is atomic), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Installs the rule of a live endpoint. Returns true if the table changed.
    pub fn install(&self, ep: &EndpointKey) -> Result<bool> {
        let mut inner = self.lock();
        if inner.table.get(ep.ip).is_some_and(|r| r.uid == ep.uid) {
            debug!(endpoint = %ep.name, ip = %ep.ip, uid = %ep.uid, "rule already installed");
            return Ok(false);
        }
        let replaced = inner.table.install(Rule { ip: ep.ip, uid: ep.uid.clone(), name: ep.name.clone() })?;
        let replaced_uid = replaced.map(|r| r.uid);
        match &replaced_uid {
            Some(old) => info!(endpoint = %ep.name, ip = %ep.ip, uid = %ep.uid, replaced_uid = %old, "rule replaced"),
            None => info!(endpoint = %ep.name, ip = %ep.ip, uid = %ep.uid, "rule installed"),
        }
        self.metrics.rule_installed();
        inner.log.append(Kind::Add, Subject { ip: ep.ip, uid: &ep.uid, name: &ep.name }, replaced_uid, None)?;
        Ok(true)
    }

    /// Removes the rule of an endpoint being released. Returns the removed rule.
    ///
    /// Unless in naive mode, a rule that belongs to another UID is left alone:
    /// a stale delete must never remove a newer holder's rule.
    pub fn teardown(&self, ep: &EndpointKey) -> Result<Option<Rule>> {
        let mut inner = self.lock();
        match inner.table.get(ep.ip) {
            None => {
                debug!(endpoint = %ep.name, ip = %ep.ip, uid = %ep.uid, "no rule to remove");
                return Ok(None);
            }
            Some(r) if r.uid != ep.uid && !self.naive_ip_keyed => {
                warn!(endpoint = %ep.name, ip = %ep.ip, uid = %ep.uid, holder_uid = %r.uid,
                    "stale teardown: the rule belongs to another endpoint, left alone");
                self.metrics.stale_remove_skipped();
                return Ok(None);
            }
            Some(_) => {}
        }
        let removed = inner.table.remove(ep.ip)?;
        if let Some(r) = &removed {
            info!(endpoint = %ep.name, ip = %ep.ip, uid = %ep.uid, removed_uid = %r.uid, "rule removed");
            self.metrics.rule_removed();
            inner.log.append(
                Kind::Remove,
                Subject { ip: ep.ip, uid: &ep.uid, name: &ep.name },
                None,
                Some(r.uid.clone()),
            )?;
        }
        Ok(removed)
    }

    /// After a (re)list: removes every rule whose (IP, UID) is not among
    /// `listed` (the endpoints that exist, live or releasing). Goes on past
    /// errors and returns them all.
    pub fn prune(&self, listed: &HashMap<IpAddr, String>) -> Result<()> {
        let mut inner = self.lock();
        let mut errors = Vec::new();
        for rule in inner.table.rules() {
            if listed.get(&rule.ip) == Some(&rule.uid) {
                continue;
            }
            match inner.table.remove(rule.ip) {
                Ok(_) => {
                    info!(endpoint = %rule.name, ip = %rule.ip, uid = %rule.uid,
                        "stale rule removed: its endpoint is gone");
                    self.metrics.rule_removed();
                    if let Err(e) = inner.log.append(
                        Kind::Remove,
                        Subject { ip: rule.ip, uid: &rule.uid, name: &rule.name },
                        None,
                        Some(rule.uid.clone()),
                    ) {
                        errors.push(e);
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        Error::collect(errors)
    }

    /// The current table.
    pub fn rules(&self) -> Vec<Rule> {
        self.lock().table.rules()
    }

    /// Marks the first sync as done (see `/readyz`).
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }

    /// True once the first list was reconciled.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// The metrics in Prometheus text format.
    pub fn render_metrics(&self) -> String {
        let rules = self.lock().table.rules().len();
        self.metrics.render(rules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::MemoryTable;

    fn key(ip: &str, uid: &str) -> EndpointKey {
        EndpointKey { ip: ip.parse().unwrap(), uid: uid.into(), name: format!("p.{ip}") }
    }

    fn agent(naive: bool) -> Agent {
        Agent::new(Box::new(MemoryTable::new()), EventLog::disabled(), naive)
    }

    #[test]
    fn a_stale_teardown_leaves_the_new_holders_rule() {
        let a = agent(false);
        assert!(a.install(&key("10.0.0.2", "old")).unwrap());
        assert!(a.install(&key("10.0.0.2", "new")).unwrap(), "a changed UID is a replacement");
        assert_eq!(a.teardown(&key("10.0.0.2", "old")).unwrap(), None);
        assert_eq!(a.rules().len(), 1);
        assert_eq!(a.rules()[0].uid, "new");
    }

    #[test]
    fn a_naive_agent_loses_the_new_rule() {
        let a = agent(true);
        a.install(&key("10.0.0.2", "old")).unwrap();
        a.install(&key("10.0.0.2", "new")).unwrap();
        assert_eq!(a.teardown(&key("10.0.0.2", "old")).unwrap().unwrap().uid, "new");
        assert!(a.rules().is_empty());
    }

    #[test]
    fn reinstalling_the_same_uid_is_a_no_op() {
        let a = agent(false);
        assert!(a.install(&key("10.0.0.2", "u")).unwrap());
        assert!(!a.install(&key("10.0.0.2", "u")).unwrap());
    }

    #[test]
    fn prune_removes_rules_of_vanished_or_replaced_endpoints() {
        let a = agent(false);
        a.install(&key("10.0.0.2", "gone")).unwrap();
        a.install(&key("10.0.0.3", "kept")).unwrap();
        a.install(&key("10.0.0.4", "old")).unwrap();
        let listed = HashMap::from([
            ("10.0.0.3".parse().unwrap(), "kept".to_string()),
            ("10.0.0.4".parse().unwrap(), "new".to_string()),
        ]);
        a.prune(&listed).unwrap();
        assert_eq!(a.rules().iter().map(|r| r.uid.as_str()).collect::<Vec<_>>(), vec!["kept"]);
    }
}
