//! The dataplane: a table with exactly one rule per IP.
//!
//! Like a route table, a VPP nat44 static mapping table or an OVS flow table, a
//! [`Dataplane`] holds at most one rule per key (the IP): installing a rule for
//! an IP that already has one *replaces* it, it never appends a second one. That
//! is what makes a late delete dangerous: removing "the rule for 10.0.0.5"
//! removes whatever rule holds that IP now, possibly a newer pod's. Each rule
//! therefore records the UID of the endpoint it was installed for.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use tracing::{debug, info};

use crate::error::{Error, Result};

/// One installed rule: traffic for `ip` goes to the endpoint with `uid`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// The key of the table.
    pub ip: IpAddr,
    /// UID of the `NetworkEndpoint` the rule was installed for; empty when
    /// unknown (a kernel route found without matching state).
    pub uid: String,
    /// Name of that endpoint, for logs.
    pub name: String,
}

/// A table with one rule per IP.
///
/// Implementations guarantee that after `install(r)` the table holds exactly
/// `r` for `r.ip` (the previous rule, if any, is returned), and that `remove`
/// is idempotent (removing a missing rule is `Ok(None)`).
pub trait Dataplane: Send {
    /// Installs `rule`, replacing any rule for the same IP, and returns the replaced rule.
    fn install(&mut self, rule: Rule) -> Result<Option<Rule>>;
    /// Removes the rule for `ip`, whoever it belongs to, and returns it.
    fn remove(&mut self, ip: IpAddr) -> Result<Option<Rule>>;
    /// The rule for `ip`, if any.
    fn get(&self, ip: IpAddr) -> Option<Rule>;
    /// Every rule, ordered by IP.
    fn rules(&self) -> Vec<Rule>;
    /// A short name for logs and metrics: `memory` or `linux`.
    fn kind(&self) -> &'static str;
}

/// The in-memory table, optionally persisted to a JSON file after every change
/// so that a restarted process sees what it had installed (a real dataplane
/// outlives the agent; this models that).
#[derive(Debug, Default)]
pub struct MemoryTable {
    rules: BTreeMap<IpAddr, Rule>,
    state_file: Option<PathBuf>,
}

impl MemoryTable {
    /// An empty, unpersisted table.
    pub fn new() -> Self {
        Self::default()
    }

    /// A table persisted in `path`, loaded from it when it exists.
    pub fn open(path: &Path) -> Result<Self> {
        let rules = match std::fs::read(path) {
            Ok(bytes) if bytes.is_empty() => BTreeMap::new(),
            Ok(bytes) => {
                let list: Vec<Rule> = serde_json::from_slice(&bytes)
                    .map_err(|source| Error::StateFile { path: path.to_path_buf(), source })?;
                list.into_iter().map(|r| (r.ip, r)).collect()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => return Err(Error::Io { path: path.to_path_buf(), source }),
        };
        Ok(Self { rules, state_file: Some(path.to_path_buf()) })
    }

    fn persist(&self) -> Result<()> {
        let Some(path) = &self.state_file else { return Ok(()) };
        let list: Vec<&Rule> = self.rules.values().collect();
        let bytes =
            serde_json::to_vec_pretty(&list).map_err(|source| Error::StateFile { path: path.clone(), source })?;
        // Atomic, not fsync'd: it only has to survive the agent's restarts, not the machine's.
        atomic_file::write_bytes(path, atomic_file::Options::HINT, &bytes)
            .map_err(|source| Error::Io { path: path.clone(), source })
    }
}

impl Dataplane for MemoryTable {
    fn install(&mut self, rule: Rule) -> Result<Option<Rule>> {
        let old = self.rules.insert(rule.ip, rule);
        self.persist()?;
        Ok(old)
    }

    fn remove(&mut self, ip: IpAddr) -> Result<Option<Rule>> {
        let old = self.rules.remove(&ip);
        if old.is_some() {
            self.persist()?;
        }
        Ok(old)
    }

    fn get(&self, ip: IpAddr) -> Option<Rule> {
        self.rules.get(&ip).cloned()
    }

    fn rules(&self) -> Vec<Rule> {
        self.rules.values().cloned().collect()
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}

/// Route protocol number marking the routes this agent owns (`proto 252`).
pub const ROUTE_PROTO: &str = "252";

/// Host routes (`/32`, `/128`) via a dummy device (a port-less bridge where the
/// kernel has no dummy driver) inside a network namespace, programmed with the
/// `ip` command.
///
/// The kernel table is the truth for *which* IPs have a route; a small JSON
/// state file beside it remembers the endpoint UID of each route, because a
/// route has nowhere to carry it. Routes found in the kernel without state get
/// an empty UID, so the agent's resync treats them as stale or replaces them.
#[derive(Debug)]
pub struct LinuxRoutes {
    netns: String,
    device: String,
    meta: MemoryTable,
}

impl LinuxRoutes {
    /// Opens the table in namespace `netns` (created if absent), with a dummy
    /// device `device` (created and set up if absent) to route via, and UID
    /// state in `state_file`.
    pub fn open(netns: &str, device: &str, state_file: Option<&Path>) -> Result<Self> {
        if !Path::new("/run/netns").join(netns).exists() {
            ip(&["netns", "add", netns])?;
        }
        let exists = Command::new("ip")
            .args(["-n", netns, "link", "show", "dev", device])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !exists {
            match ip(&["-n", netns, "link", "add", device, "type", "dummy"]) {
                Ok(_) => {}
                // Kernels built without the dummy driver: a port-less bridge routes the same way.
                Err(Error::IpCommand { stderr, .. }) if stderr.contains("Unknown device type") => {
                    ip(&["-n", netns, "link", "add", device, "type", "bridge"])?;
                }
                Err(e) => return Err(e),
            }
        }
        ip(&["-n", netns, "link", "set", device, "up"])?;
        let meta = match state_file {
            Some(p) => MemoryTable::open(p)?,
            None => MemoryTable::new(),
        };
        let mut table = Self { netns: netns.to_string(), device: device.to_string(), meta };
        table.sync_from_kernel()?;
        info!(netns, device, routes = table.meta.rules.len(), "linux dataplane ready");
        Ok(table)
    }

    /// Makes the UID state match the routes actually present in the kernel.
    fn sync_from_kernel(&mut self) -> Result<()> {
        let kernel = self.kernel_routes()?;
        let known: Vec<IpAddr> = self.meta.rules.keys().copied().collect();
        for ip in known {
            if !kernel.contains(&ip) {
                self.meta.rules.remove(&ip);
            }
        }
        for ip in kernel {
            self.meta.rules.entry(ip).or_insert_with(|| Rule { ip, uid: String::new(), name: String::new() });
        }
        self.meta.persist()
    }

    /// The destinations of our routes in the namespace, as the kernel reports them.
    pub fn kernel_routes(&self) -> Result<Vec<IpAddr>> {
        let mut out = Vec::new();
        for family in ["-4", "-6"] {
            let json =
                ip(&["-n", &self.netns, "-j", family, "route", "show", "dev", &self.device, "proto", ROUTE_PROTO])?;
            let routes: Vec<serde_json::Value> = serde_json::from_str(json.trim()).unwrap_or_default();
            for r in routes {
                let dst = r.get("dst").and_then(|d| d.as_str()).unwrap_or_default();
                if let Ok(ip) = dst.split('/').next().unwrap_or_default().parse() {
                    out.push(ip);
                }
            }
        }
        Ok(out)
    }

    fn host_route(ip: IpAddr) -> String {
        match ip {
            IpAddr::V4(_) => format!("{ip}/32"),
            IpAddr::V6(_) => format!("{ip}/128"),
        }
    }
}

impl Dataplane for LinuxRoutes {
    fn install(&mut self, rule: Rule) -> Result<Option<Rule>> {
        let dst = Self::host_route(rule.ip);
        ip(&["-n", &self.netns, "route", "replace", &dst, "dev", &self.device, "proto", ROUTE_PROTO])?;
        self.meta.install(rule)
    }

    fn remove(&mut self, addr: IpAddr) -> Result<Option<Rule>> {
        let dst = Self::host_route(addr);
        match ip(&["-n", &self.netns, "route", "del", &dst, "dev", &self.device, "proto", ROUTE_PROTO]) {
            Ok(_) => {}
            // Already gone: removal is idempotent.
            Err(Error::IpCommand { stderr, .. }) if stderr.contains("No such process") => {
                debug!(ip = %addr, "route already absent");
            }
            Err(e) => return Err(e),
        }
        self.meta.remove(addr)
    }

    fn get(&self, ip: IpAddr) -> Option<Rule> {
        self.meta.get(ip)
    }

    fn rules(&self) -> Vec<Rule> {
        self.meta.rules()
    }

    fn kind(&self) -> &'static str {
        "linux"
    }
}

/// Runs `ip args…` and returns its stdout, or [`Error::IpCommand`].
fn ip(args: &[&str]) -> Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| Error::IpCommand { args: args.join(" "), stderr: e.to_string() })?;
    if !out.status.success() {
        return Err(Error::IpCommand {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(ip: &str, uid: &str) -> Rule {
        Rule { ip: ip.parse().unwrap(), uid: uid.into(), name: format!("p.{ip}") }
    }

    #[test]
    fn a_duplicate_key_overwrites_and_never_appends() {
        let mut t = MemoryTable::new();
        assert_eq!(t.install(rule("10.0.0.5", "u1")).unwrap(), None);
        assert_eq!(t.install(rule("10.0.0.5", "u2")).unwrap(), Some(rule("10.0.0.5", "u1")));
        assert_eq!(t.rules(), vec![rule("10.0.0.5", "u2")]);
        assert_eq!(t.remove("10.0.0.5".parse().unwrap()).unwrap(), Some(rule("10.0.0.5", "u2")));
        assert_eq!(t.remove("10.0.0.5".parse().unwrap()).unwrap(), None);
    }

    #[test]
    fn the_state_file_survives_a_restart() {
        let path = std::env::temp_dir().join(format!("watcher-example-state-{}.json", std::process::id()));
        let _ = std::fs::remove_file(&path);
        {
            let mut t = MemoryTable::open(&path).unwrap();
            t.install(rule("10.0.0.5", "u1")).unwrap();
            t.install(rule("fd00::5", "u2")).unwrap();
            t.remove("10.0.0.5".parse().unwrap()).unwrap();
        }
        let t = MemoryTable::open(&path).unwrap();
        assert_eq!(t.rules(), vec![rule("fd00::5", "u2")]);
        std::fs::remove_file(&path).unwrap();
    }
}
