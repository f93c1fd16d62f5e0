//! What the cluster side reads of network config files: the netendpoint
//! networks they define, each pool's capacity, and the ranges admission
//! checks leases against.
//!
//! The network config stays the one source of a pool's ranges (see
//! `docs/design.md`, "Where a pool's ranges come from"): the controller
//! reads it from the ConfigMap the installer renders the nodes' configs
//! from, `kubectl netendpoint` from there or from files, and both validate
//! each section exactly as the plugin does.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use ipnet::IpNet;
use netendpoint_lease::addr::to_u128;
use netendpoint_lease::pools::Capacity;
use serde_json::Value;

use crate::allocator::merge_spans;
use crate::config::IpamConfig;
use crate::error::{Error, Result};

/// Every netendpoint `ipam` section of a network config (a `.conf` or a
/// `.conflist`), validated as the plugin validates it. Sections of other
/// IPAM types are left out.
pub fn ipam_sections(conf: &Value) -> Vec<Result<IpamConfig>> {
    let network = conf.get("name").and_then(|n| n.as_str()).unwrap_or_default();
    let sections: Vec<&Value> = match conf.get("plugins").and_then(|p| p.as_array()) {
        Some(list) => list.iter().collect(),
        None => vec![conf],
    };
    sections
        .into_iter()
        .filter_map(|p| p.get("ipam"))
        .filter(|ipam| ipam.get("type").and_then(|t| t.as_str()) == Some("netendpoint"))
        .map(|ipam| IpamConfig::parse(ipam, network))
        .collect()
}

/// The netendpoint networks of a set of network config files (name, text),
/// and for each file or section that does not validate, why: an
/// [`Error::NotJson`] or an [`Error::InvalidSection`]. A bad file or section
/// never hides the others.
pub fn networks_in_files<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> (Vec<IpamConfig>, Vec<Error>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (name, text) in files {
        let conf = match serde_json::from_str::<Value>(text) {
            Ok(c) => c,
            Err(source) => {
                problems.push(Error::NotJson { file: name.to_string(), source });
                continue;
            }
        };
        for section in ipam_sections(&conf) {
            match section {
                Ok(c) => out.push(c),
                Err(e) => problems.push(Error::InvalidSection { file: name.to_string(), source: Box::new(e) }),
            }
        }
    }
    (out, problems)
}

/// Capacities by pool of `networks`. A pool configured by several networks
/// takes the capacity of the last one (they normally describe the same ranges).
pub fn capacities(networks: &[IpamConfig]) -> HashMap<String, Capacity> {
    networks.iter().map(|c| (c.pool.clone(), c.capacity())).collect()
}

/// Capacities by pool of a set of network config files, and why each file
/// or section that does not validate gives none (see [`networks_in_files`]).
pub fn capacities_in_files<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> (HashMap<String, Capacity>, Vec<Error>) {
    let (networks, problems) = networks_in_files(files);
    (capacities(&networks), problems)
}

/// What the admission policy reads of each pool (the data of the ConfigMap
/// `netendpoint-pools`): per pool, its [`IpamConfig::admission_cidrs`] joined
/// by `,`. Two networks of one pool add their entries together, each once.
pub fn admission_ranges(networks: &[IpamConfig]) -> BTreeMap<String, String> {
    let mut by_pool: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in networks {
        let entries = by_pool.entry(n.pool.clone()).or_default();
        for c in n.admission_cidrs() {
            if !entries.contains(&c) {
                entries.push(c);
            }
        }
    }
    by_pool.into_iter().map(|(pool, cidrs)| (pool, cidrs.join(","))).collect()
}

/// The addresses an entry of `netendpoint-pools` (as [`admission_ranges`]
/// writes it, or as an administrator adds one) lets its pool lease, per
/// family: those in one of its CIDRs and in no `!` entry. `None` when an
/// entry is not a CIDR, as the policy would read none of it.
pub fn admission_capacity(entry: &str) -> Option<Capacity> {
    let mut allow: Vec<(bool, u128, u128)> = Vec::new();
    let mut deny: Vec<(bool, u128, u128)> = Vec::new();
    for part in entry.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (list, cidr) = match part.strip_prefix('!') {
            Some(rest) => (&mut deny, rest),
            None => (&mut allow, part),
        };
        let net: IpNet = cidr.parse().ok()?;
        list.push((net.addr().is_ipv4(), to_u128(net.network()), to_u128(net.broadcast())));
    }
    let mut cap = Capacity::default();
    for v4 in [true, false] {
        let spans =
            |l: &[(bool, u128, u128)]| merge_spans(l.iter().filter(|s| s.0 == v4).map(|s| (s.1, s.2)).collect());
        let denied = spans(&deny);
        let mut n: u128 = 0;
        for (lo, hi) in spans(&allow) {
            let size = (hi - lo).saturating_add(1);
            let cut = denied
                .iter()
                .map(|(a, b)| ((*a).max(lo), (*b).min(hi)))
                .filter(|(a, b)| a <= b)
                .map(|(a, b)| (b - a).saturating_add(1))
                .fold(0u128, u128::saturating_add);
            n = n.saturating_add(size.saturating_sub(cut));
        }
        if v4 { cap.v4 = n } else { cap.v6 = n }
    }
    Some(cap)
}

impl IpamConfig {
    /// The pool's usable addresses per IP family, as
    /// [`RangeSet::capacity`](crate::allocator::RangeSet::capacity) counts them.
    pub fn capacity(&self) -> Capacity {
        let mut cap = Capacity::default();
        for set in &self.range_sets {
            let n = set.capacity();
            match set.ranges.first().map(|r| r.start.is_ipv4()) {
                Some(true) => cap.v4 = cap.v4.saturating_add(n),
                Some(false) => cap.v6 = cap.v6.saturating_add(n),
                None => {}
            }
        }
        cap
    }

    /// The CIDRs that cover exactly this pool's ranges and, each prefixed
    /// `!`, the gateways and the exclusions inside them: an address is
    /// leasable exactly when it lies in a CIDR and in no `!` entry.
    pub fn admission_cidrs(&self) -> Vec<String> {
        let mut out = Vec::new();
        for set in &self.range_sets {
            for r in &set.ranges {
                out.extend(cover(r.start, r.end).into_iter().map(|n| n.to_string()));
                if let Some(g) = r.gateway.filter(|g| r.contains(*g)) {
                    out.push(format!("!{}", IpNet::from(g)));
                }
            }
            for x in &set.exclude {
                if set
                    .ranges
                    .iter()
                    .any(|r| x.contains(&r.start) || r.contains(x.network()) || r.contains(x.broadcast()))
                {
                    out.push(format!("!{x}"));
                }
            }
        }
        out.dedup();
        out
    }
}

/// The fewest CIDRs that cover exactly `start..=end`.
fn cover(start: IpAddr, end: IpAddr) -> Vec<IpNet> {
    match (start, end) {
        (IpAddr::V4(a), IpAddr::V4(b)) => ipnet::Ipv4Subnets::new(a, b, 0).map(IpNet::V4).collect(),
        (IpAddr::V6(a), IpAddr::V6(b)) => ipnet::Ipv6Subnets::new(a, b, 0).map(IpNet::V6).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_admission_capacity_is_what_the_pool_ranges_policy_lets_a_pool_lease() {
        // A network's own entry: the bound equals its capacity.
        let conf = IpamConfig::parse(
            &json!({"pool": "p", "ranges": [[{"subnet": "10.0.0.0/28", "rangeStart": "10.0.0.2", "rangeEnd": "10.0.0.12"}],
                [{"subnet": "fd00::/120"}]], "exclude": ["10.0.0.4/31"]}),
            "net",
        )
        .unwrap();
        let entry = &admission_ranges(std::slice::from_ref(&conf))["p"];
        assert_eq!(admission_capacity(entry), Some(conf.capacity()), "{entry}");
        // An entry by hand: overlaps count once, exclusions come off once.
        let cap = admission_capacity("10.1.0.0/30, 10.1.0.0/31,!10.1.0.1/32,!10.1.0.0/31").unwrap();
        assert_eq!((cap.v4, cap.v6), (2, 0));
        assert_eq!(admission_capacity(""), Some(Capacity::default()));
        assert_eq!(admission_capacity("10.1.0.0/30,nonsense"), None);
    }

    #[test]
    fn capacities_come_per_pool_from_conflists_and_confs_and_bad_files_are_named() {
        let conflist = json!({"cniVersion": "1.1.0", "name": "podnet", "plugins": [
            {"type": "bridge", "ipam": {"type": "netendpoint", "pool": "pods",
                "ranges": [[{"subnet": "10.0.0.0/29", "rangeStart": "10.0.0.2", "rangeEnd": "10.0.0.6"}]]}},
            {"type": "portmap"}]});
        let conf = json!({"cniVersion": "1.1.0", "name": "v6", "type": "macvlan",
            "ipam": {"type": "netendpoint", "ranges": [[{"subnet": "fd00::/120"}]]}});
        let other = json!({"name": "x", "type": "bridge", "ipam": {"type": "host-local"}});
        let invalid = json!({"name": "bad", "ipam": {"type": "netendpoint", "ranges": []}});
        let texts = [conflist.to_string(), conf.to_string(), other.to_string(), invalid.to_string(), "{".to_string()];
        let names = ["a.conflist", "b.conf", "c.conf", "d.conf", "e.conf"];
        let (caps, problems) = capacities_in_files(names.iter().copied().zip(texts.iter().map(String::as_str)));
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(caps.len(), 2, "{caps:?}");
        assert_eq!(caps["pods"], Capacity { v4: 5, v6: 0 });
        assert!(caps["v6"].v6 > 200 && caps["v6"].v4 == 0, "{caps:?}");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("d.conf: invalid ipam section"), "{problems:?}");
        assert!(problems[1].starts_with("e.conf: not JSON"), "{problems:?}");
    }

    #[test]
    fn each_pool_lists_its_ranges_and_what_they_must_not_lease() {
        // The gateway 10.0.0.1 is outside the range, 192.168.0.0/16 outside every range.
        let ipam = serde_json::json!({
            "pool": "pods",
            "ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.10", "rangeEnd": "10.0.0.20"}], [{"subnet": "fd00::/120"}]],
            "exclude": ["10.0.0.16/30", "192.168.0.0/16"],
        });
        let c = IpamConfig::parse(&ipam, "net").unwrap();
        let d = admission_ranges(&[c]);
        assert_eq!(
            d["pods"],
            "10.0.0.10/31,10.0.0.12/30,10.0.0.16/30,10.0.0.20/32,!10.0.0.16/30,fd00::1/128,fd00::2/127,fd00::4/126,fd00::8/125,fd00::10/124,fd00::20/123,fd00::40/122,fd00::80/121,!fd00::1/128"
        );
    }
}
