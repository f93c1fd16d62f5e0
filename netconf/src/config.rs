//! The `ipam` section of a network configuration, validated.
//!
//! `ranges`, `routes` and `exclude` have host-local's shape, so a network can
//! switch by changing `type`. [`IpamConfig::parse`] accepts a section only
//! whole: every value is checked and every duration capped, and each error
//! is an [`Error::InvalidConfig`] that names the field path and quotes the
//! value at fault (the plugin answers it with CNI code 7).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;
use serde_json::Value;

use netendpoint_crd::duration;
use serde::Serialize;

use crate::allocator::{Range, RangeSet};
use crate::error::{Error, Result};

/// Default of `ipam.kubeconfig`: where the installer writes the plugin's kubeconfig.
pub const DEFAULT_KUBECONFIG: &str = "/etc/cni/net.d/netendpoint.d/kubeconfig";
/// Default of `ipam.dataDir`: where the per-node round-robin cursor is kept.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/netendpoint";
/// Default of `ipam.waitForRelease`.
pub const DEFAULT_WAIT_FOR_RELEASE: Duration = Duration::from_secs(10);
/// Default of `ipam.forceReleaseAfter`.
pub const DEFAULT_FORCE_RELEASE_AFTER: Duration = Duration::from_secs(600);
/// Default of `ipam.nodeNameFile`: where the installer writes the node name
/// it gets from the downward API.
pub const DEFAULT_NODE_NAME_FILE: &str = "/etc/cni/net.d/netendpoint.d/nodename";
/// Default of `ipam.timeout`, the deadline of one invocation. kubelet gives
/// the runtime 2 minutes per sandbox request (`--runtime-request-timeout`),
/// so the plugin answers, and cleans up, well before that.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest `ipam.timeout`: below kubelet's 2-minute request timeout.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(110);
/// Part of `ipam.timeout` kept back for cleanup after the deadline: an ADD
/// that runs out of time still removes what it claimed.
pub const CLEANUP_RESERVE: Duration = Duration::from_secs(5);
/// Default of `ipam.gcGrace`.
pub const DEFAULT_GC_GRACE: Duration = Duration::from_secs(120);
/// Largest `forceReleaseAfter` and `gcGrace` (and of the `vanishedNodeGrace`
/// that is still accepted): 30 days.
pub const MAX_BOUND: Duration = Duration::from_secs(30 * 24 * 3600);

/// One route of `ipam.routes`, returned as it is in the IPAM result.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Route {
    /// Destination.
    pub dst: IpNet,
    /// Next hop; the main plugin's default gateway when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
}

/// The validated IPAM configuration: every field in range, every duration
/// within its cap, the range sets of one family each and not overlapping.
#[derive(Debug, Clone)]
pub struct IpamConfig {
    /// Pool name; the network name unless `ipam.pool` is set. A DNS-1123 subdomain.
    pub pool: String,
    /// The CNI network name (the configuration's `name`), recorded in each lease.
    pub network: String,
    /// One entry per range set; ADD takes one address from each.
    pub range_sets: Vec<RangeSet>,
    /// Routes returned in the result.
    pub routes: Vec<Route>,
    /// Path of the kubeconfig the plugin authenticates with.
    pub kubeconfig: PathBuf,
    /// Node name from config; the node-name file, the environment and the
    /// hostname are consulted later.
    pub node_name: Option<String>,
    /// File holding the node name, written by the installer.
    pub node_name_file: PathBuf,
    /// Finalizers attached to every endpoint at creation.
    pub finalizers: Vec<String>,
    /// How long finalizers may hold a released IP before an ADD that needs it may remove them.
    pub force_release_after: Duration,
    /// How long an ADD in a full pool waits for a release to begin and finish.
    pub wait_for_release: Duration,
    /// Deadline of one invocation, cleanup included.
    pub timeout: Duration,
    /// How old a lease must be (by the API server's clock) before GC, having
    /// found it stale in an earlier GC too, releases it.
    pub gc_grace: Duration,
    /// Logging.
    pub log: LogConfig,
    /// Directory of the per-node round-robin cursor.
    pub data_dir: PathBuf,
    /// Who performs the actions that touch other nodes' leases (`ipam.crossNode`).
    pub cross_node: CrossNode,
    /// `ipam.staticIPs`: where an ADD may be asked for given addresses.
    pub static_ips: StaticIpsConfig,
    /// Sticky IPs for claims (`ipam.sticky`); `None` is off.
    pub sticky: Option<StickyConfig>,
    /// Keys that were accepted but have no effect, each a sentence naming
    /// the key. Parsing logs nothing: the caller logs these where its logging
    /// goes (the plugin, once it has set up `ipam.log`).
    pub warnings: Vec<String>,
}

/// `ipam.staticIPs`. Requests in `runtimeConfig.ips`, `args.cni.ips` and
/// CNI_ARGS `IP=` are always honoured (see `static_ip`); this enables the
/// sources that cost an API call.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StaticIpsConfig {
    /// Read the Pod's `netendpoint.dev/ips` annotation: one GET of the Pod,
    /// made only by an ADD that names its Pod and has no request from the
    /// runtime. Default `false`.
    #[serde(default)]
    pub pod_annotation: bool,
}

/// `ipam.crossNode`: which component releases leases the ADD's node does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CrossNode {
    /// `"plugin"`: an ADD in a full pool forces a release that outlived its
    /// bound itself, on any node. The admission policies of `deploy/` refuse
    /// this for other nodes' leases; for clusters without them.
    Plugin,
    /// `"controller"` (the default): the plugin never deletes or patches
    /// another node's lease and never forces a release. An ADD that waits
    /// in a full pool raises its node's `NetworkEndpointNeed`, and
    /// `netendpoint-controller` forces the oldest eligible release.
    #[default]
    Controller,
}

/// Default of `ipam.sticky.stickyFor`.
pub const DEFAULT_STICKY_FOR: Duration = Duration::from_secs(3600);
/// Largest `ipam.sticky.stickyFor`: 30 days, the one cap of `crd`
/// ([`netendpoint_crd::MAX_STICKY_FOR_SECS`]) that the API server also enforces.
pub const MAX_STICKY_FOR: Duration = Duration::from_secs(netendpoint_crd::MAX_STICKY_FOR_SECS);

/// `ipam.sticky`, validated: which Pods keep their address across
/// recreations (see `docs/sticky-ips.md`). Absent means off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickyConfig {
    /// StatefulSet Pods are sticky: their claim is `<pod>.<pool>`, which
    /// the controller creates (`kinds` lists `StatefulSet`, the default).
    pub stateful_sets: bool,
    /// Read the Pod's network-selection annotation for its claim
    /// (`claimsFromPods`, default false): one Pod GET per ADD that the
    /// runtime passed no claim reference for.
    pub claims_from_pods: bool,
    /// How long a hold lasts once no incarnation is left (`stickyFor`).
    pub sticky_for: Duration,
    /// How long an ADD waits for its incarnation (`waitForOld`, default `waitForRelease`).
    pub wait_for_old: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSticky {
    kinds: Option<Vec<String>>,
    claims_from_pods: Option<bool>,
    sticky_for: Option<String>,
    wait_for_old: Option<String>,
}

impl StickyConfig {
    /// Validates `ipam.sticky`. `wait_for_release` is the default of
    /// `waitForOld`; `max_wait` its largest value (what `ipam.timeout` leaves).
    /// Kinds that get no claim from netendpoint add a sentence to `warnings`.
    fn parse(v: &Value, wait_for_release: Duration, max_wait: Duration, warnings: &mut Vec<String>) -> Result<Self> {
        let raw: RawSticky =
            serde_json::from_value(v.clone()).map_err(|e| Error::config("ipam.sticky", &e.to_string()))?;
        let kinds = raw.kinds.unwrap_or_else(|| vec!["StatefulSet".to_string()]);
        for (i, k) in kinds.iter().enumerate() {
            if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Err(Error::config(&format!("ipam.sticky.kinds[{i}]"), &format!("{k:?} is not a kind name")));
            }
            if k != "StatefulSet" {
                warnings.push(format!(
                    "ipam.sticky.kinds[{i}] {k:?}: only StatefulSet Pods get a claim from netendpoint; other workloads (VMs) keep their address through their own IPAMClaim"
                ));
            }
        }
        let sticky_for =
            bounded("ipam.sticky.stickyFor", raw.sticky_for.as_deref(), DEFAULT_STICKY_FOR, MAX_STICKY_FOR)?;
        let wait_for_old =
            bounded("ipam.sticky.waitForOld", raw.wait_for_old.as_deref(), wait_for_release.min(max_wait), max_wait)
                .map_err(|e| match e {
                    Error::InvalidConfig { field, reason } => Error::InvalidConfig {
                        field,
                        reason: format!("{reason} (it must leave 10s of ipam.timeout for the rest of ADD)"),
                    },
                    other => other,
                })?;
        Ok(Self {
            stateful_sets: kinds.iter().any(|k| k == "StatefulSet"),
            claims_from_pods: raw.claims_from_pods.unwrap_or(false),
            sticky_for,
            wait_for_old,
        })
    }
}

/// `ipam.log`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `error`, `warn`, `info`, `debug` or `trace`; default `warn` on stderr, `info` to a file.
    #[serde(default)]
    pub level: Option<String>,
    /// Append logs to this file instead of stderr.
    #[serde(default)]
    pub file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawIpam {
    #[serde(rename = "type")]
    _type: Option<String>,
    #[serde(default)]
    ranges: Vec<Vec<RawRange>>,
    #[serde(default)]
    routes: Vec<Value>,
    #[serde(default)]
    exclude: Vec<String>,
    pool: Option<String>,
    kubeconfig: Option<PathBuf>,
    node_name: Option<String>,
    node_name_file: Option<PathBuf>,
    #[serde(default)]
    finalizers: Vec<String>,
    force_release_after: Option<String>,
    wait_for_release: Option<String>,
    timeout: Option<String>,
    vanished_node_grace: Option<String>,
    gc_grace: Option<String>,
    #[serde(default)]
    log: LogConfig,
    data_dir: Option<PathBuf>,
    cross_node: Option<String>,
    #[serde(default, rename = "staticIPs")]
    static_ips: StaticIpsConfig,
    sticky: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawRange {
    subnet: Option<String>,
    range_start: Option<String>,
    range_end: Option<String>,
    gateway: Option<String>,
}

impl IpamConfig {
    /// Validates the `ipam` object of network `network`: the whole section
    /// or an [`Error::InvalidConfig`] naming the first field at fault.
    pub fn parse(ipam: &Value, network: &str) -> Result<Self> {
        let raw: RawIpam = serde_json::from_value(ipam.clone()).map_err(|e| Error::config("ipam", &e.to_string()))?;
        let range_sets = parse_range_sets(&raw)?;
        let routes = raw
            .routes
            .iter()
            .enumerate()
            .map(|(i, v)| {
                serde_json::from_value::<Route>(v.clone())
                    .map_err(|e| Error::config(&format!("ipam.routes[{i}]"), &format!("{v}: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let pool = raw.pool.clone().unwrap_or_else(|| network.to_string());
        check_names(&raw, &pool)?;
        let (timeout, wait_for_release) = parse_waits(&raw)?;
        let max_wait = timeout.saturating_sub(CLEANUP_RESERVE * 2);
        let cross_node = match raw.cross_node.as_deref() {
            Some("plugin") => CrossNode::Plugin,
            None | Some("controller") => CrossNode::Controller,
            Some(other) => {
                return Err(Error::config("ipam.crossNode", &format!("{other:?} is not \"plugin\" or \"controller\"")));
            }
        };
        let mut warnings = Vec::new();
        let sticky = raw
            .sticky
            .as_ref()
            .map(|v| StickyConfig::parse(v, wait_for_release, max_wait, &mut warnings))
            .transpose()?;
        let force_release_after = bounded(
            "ipam.forceReleaseAfter",
            raw.force_release_after.as_deref(),
            DEFAULT_FORCE_RELEASE_AFTER,
            MAX_BOUND,
        )?;
        // Accepted, and validated as ever (a bad value is still bad config),
        // but nothing reads it: the controller's --vanished-node-grace acts.
        if let Some(v) = raw.vanished_node_grace.as_deref() {
            bounded("ipam.vanishedNodeGrace", Some(v), Duration::ZERO, MAX_BOUND)?;
            warnings.push(
                "ipam.vanishedNodeGrace has no effect in the plugin: netendpoint-controller reclaims the leases of vanished nodes (--vanished-node-grace)"
                    .to_string(),
            );
        }
        Ok(Self {
            warnings,
            sticky,
            pool,
            network: network.to_string(),
            range_sets,
            routes,
            force_release_after,
            wait_for_release,
            timeout,
            gc_grace: bounded("ipam.gcGrace", raw.gc_grace.as_deref(), DEFAULT_GC_GRACE, MAX_BOUND)?,
            kubeconfig: raw.kubeconfig.unwrap_or_else(|| DEFAULT_KUBECONFIG.into()),
            node_name: raw.node_name,
            node_name_file: raw.node_name_file.unwrap_or_else(|| DEFAULT_NODE_NAME_FILE.into()),
            finalizers: raw.finalizers,
            log: raw.log,
            data_dir: raw.data_dir.unwrap_or_else(|| DEFAULT_DATA_DIR.into()),
            cross_node,
            static_ips: raw.static_ips,
        })
    }
}

/// `ipam.ranges` and `ipam.exclude`: each range set of one family, with
/// usable addresses, and no two overlapping.
fn parse_range_sets(raw: &RawIpam) -> Result<Vec<RangeSet>> {
    let exclude = raw
        .exclude
        .iter()
        .enumerate()
        .map(|(i, s)| parse_cidr(&format!("ipam.exclude[{i}]"), s))
        .collect::<Result<Vec<_>>>()?;
    if raw.ranges.is_empty() {
        return Err(Error::config("ipam.ranges", "must list at least one range set"));
    }
    let mut range_sets = Vec::with_capacity(raw.ranges.len());
    for (i, set) in raw.ranges.iter().enumerate() {
        if set.is_empty() {
            return Err(Error::config(&format!("ipam.ranges[{i}]"), "is an empty range set"));
        }
        let mut ranges = Vec::with_capacity(set.len());
        for (j, r) in set.iter().enumerate() {
            ranges.push(parse_range(&format!("ipam.ranges[{i}][{j}]"), r)?);
        }
        let family = ranges[0].start.is_ipv4();
        if let Some(j) = ranges.iter().position(|r| r.start.is_ipv4() != family) {
            return Err(Error::config(
                &format!("ipam.ranges[{i}][{j}].subnet"),
                "mixes IP families within one range set (use one range set per family)",
            ));
        }
        range_sets.push(RangeSet { ranges, exclude: exclude.clone() });
    }
    check_overlaps(&range_sets)?;
    for (i, set) in range_sets.iter().enumerate() {
        if set.capacity() == 0 {
            return Err(Error::config(&format!("ipam.ranges[{i}]"), "has no usable address after exclusions"));
        }
    }
    Ok(range_sets)
}

/// The pool name, the finalizers, the log level and the node name.
fn check_names(raw: &RawIpam, pool: &str) -> Result<()> {
    if !netendpoint_crd::is_dns1123_subdomain(pool) || pool.len() > netendpoint_crd::MAX_POOL_NAME_LEN {
        return Err(Error::config(
            "ipam.pool",
            &format!(
                "{pool:?} must be a lowercase DNS-1123 subdomain of at most {} characters (it defaults to the network name)",
                netendpoint_crd::MAX_POOL_NAME_LEN
            ),
        ));
    }
    for (i, f) in raw.finalizers.iter().enumerate() {
        if !is_qualified_finalizer(f) {
            return Err(Error::config(
                &format!("ipam.finalizers[{i}]"),
                &format!("{f:?} must be a qualified name such as \"example.com/route-agent\""),
            ));
        }
    }
    if let Some(level) = &raw.log.level
        && !["error", "warn", "info", "debug", "trace"].contains(&level.as_str())
    {
        return Err(Error::config(
            "ipam.log.level",
            &format!("{level:?} is not one of error, warn, info, debug, trace"),
        ));
    }
    if let Some(n) = &raw.node_name
        && n.is_empty()
    {
        return Err(Error::config("ipam.nodeName", "must not be empty when set"));
    }
    Ok(())
}

/// `ipam.timeout`, and `ipam.waitForRelease`, which must leave 10 s of it.
fn parse_waits(raw: &RawIpam) -> Result<(Duration, Duration)> {
    let timeout = bounded("ipam.timeout", raw.timeout.as_deref(), DEFAULT_TIMEOUT, MAX_TIMEOUT)?;
    if timeout < CLEANUP_RESERVE * 2 {
        return Err(Error::config(
            "ipam.timeout",
            &format!(
                "{:?} is too short: at least {}",
                raw.timeout.clone().unwrap_or_default(),
                duration::format(CLEANUP_RESERVE * 2)
            ),
        ));
    }
    let max_wait = timeout.saturating_sub(CLEANUP_RESERVE * 2);
    let wait_for_release = bounded(
        "ipam.waitForRelease",
        raw.wait_for_release.as_deref(),
        DEFAULT_WAIT_FOR_RELEASE.min(max_wait),
        max_wait,
    )
    .map_err(|e| match e {
        Error::InvalidConfig { field, reason } => Error::InvalidConfig {
            field,
            reason: format!(
                "{reason} (it must leave 10s of ipam.timeout, {}, for the rest of ADD)",
                duration::format(timeout)
            ),
        },
        other => other,
    })?;
    Ok((timeout, wait_for_release))
}

fn parse_cidr(field: &str, s: &str) -> Result<IpNet> {
    if let Ok(n) = s.parse::<IpNet>() {
        return Ok(n);
    }
    // A bare address in `exclude` means that one address.
    s.parse::<IpAddr>()
        .map(IpNet::from)
        .map_err(|_| Error::config(field, &format!("{s:?} is not a CIDR (e.g. \"10.244.0.0/24\")")))
}

fn parse_ip(field: &str, s: &Option<String>) -> Result<Option<IpAddr>> {
    s.as_deref()
        .map(|v| v.parse::<IpAddr>().map_err(|_| Error::config(field, &format!("{v:?} is not an IP address"))))
        .transpose()
}

fn parse_range(at: &str, r: &RawRange) -> Result<Range> {
    let subnet_s = r.subnet.as_deref().ok_or_else(|| Error::config(&format!("{at}.subnet"), "is required"))?;
    let subnet = parse_cidr(&format!("{at}.subnet"), subnet_s)?.trunc();
    let start = parse_ip(&format!("{at}.rangeStart"), &r.range_start)?;
    let end = parse_ip(&format!("{at}.rangeEnd"), &r.range_end)?;
    let gateway = parse_ip(&format!("{at}.gateway"), &r.gateway)?;
    for (field, ip) in [("rangeStart", start), ("rangeEnd", end), ("gateway", gateway)] {
        if let Some(ip) = ip
            && !subnet.contains(&ip)
        {
            return Err(Error::config(&format!("{at}.{field}"), &format!("{ip} is outside subnet {subnet}")));
        }
    }
    let gw = gateway.map(Some);
    Range::with_defaults(subnet, start, end, gw).ok_or_else(|| {
        if start.is_some() || end.is_some() {
            Error::config(
                &format!("{at}.rangeStart"),
                &format!("{:?} is after rangeEnd {:?}", r.range_start, r.range_end),
            )
        } else {
            Error::config(&format!("{at}.subnet"), &format!("{subnet_s:?} has no usable address"))
        }
    })
}

fn check_overlaps(sets: &[RangeSet]) -> Result<()> {
    let all: Vec<(String, &Range)> = sets
        .iter()
        .enumerate()
        .flat_map(|(i, s)| s.ranges.iter().enumerate().map(move |(j, r)| (format!("ipam.ranges[{i}][{j}]"), r)))
        .collect();
    for (a, (name_a, ra)) in all.iter().enumerate() {
        for (name_b, rb) in &all[a + 1..] {
            if ra.contains(rb.start) || ra.contains(rb.end) || rb.contains(ra.start) {
                return Err(Error::config(
                    name_b,
                    &format!("overlaps {name_a} ({}-{} and {}-{})", ra.start, ra.end, rb.start, rb.end),
                ));
            }
        }
    }
    Ok(())
}

/// A finalizer must be a qualified name with a domain prefix (`example.com/agent`).
fn is_qualified_finalizer(f: &str) -> bool {
    match f.split_once('/') {
        Some((domain, name)) => {
            netendpoint_crd::is_dns1123_subdomain(domain)
                && !name.is_empty()
                && name.len() <= 63
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        None => false,
    }
}

/// Reads the duration field `field`: `default` when absent, a code 7 error
/// when it does not parse or exceeds `max`. Capping every duration here is
/// what keeps all later time arithmetic in range.
fn bounded(field: &str, s: Option<&str>, default: Duration, max: Duration) -> Result<Duration> {
    let Some(v) = s else { return Ok(default) };
    let d = duration::parse(v)
        .ok_or_else(|| Error::config(field, &format!("{v:?} is not a duration such as \"30s\", \"5m\" or \"1h\"")))?;
    if d > max {
        return Err(Error::config(field, &format!("{v:?} is longer than the maximum {}", duration::format(max))));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<IpamConfig> {
        IpamConfig::parse(&v, "mynet")
    }

    fn err_of(v: Value) -> String {
        let e = parse(v).unwrap_err();
        assert!(matches!(e, Error::InvalidConfig { .. }), "{e:?}");
        e.to_string()
    }

    #[test]
    fn host_local_shape_is_accepted() {
        let c = parse(json!({
            "type": "netendpoint",
            "ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.10", "rangeEnd": "10.0.0.20", "gateway": "10.0.0.1"}],
                       [{"subnet": "fd00::/120"}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00::1"}],
            "exclude": ["10.0.0.15/32", "10.0.0.16"],
            "finalizers": ["example.com/route-agent"],
            "waitForRelease": "2s",
            "forceReleaseAfter": "1h30m",
        }))
        .unwrap();
        assert_eq!(c.pool, "mynet");
        assert_eq!(c.range_sets.len(), 2);
        assert_eq!(c.range_sets[0].capacity(), 9);
        assert_eq!(c.wait_for_release, Duration::from_secs(2));
        assert_eq!(c.force_release_after, Duration::from_secs(5400));
        assert_eq!(c.routes.len(), 2);
        assert_eq!(c.cross_node, CrossNode::Controller, "the default: what the shipped policies allow");
        let c = parse(json!({"ranges": [[{"subnet": "10.0.0.0/24"}]], "crossNode": "plugin"})).unwrap();
        assert_eq!(c.cross_node, CrossNode::Plugin);
    }

    #[test]
    fn bad_values_name_the_field_and_value() {
        let cases = [
            (json!({"ranges": [[{"subnet": "10.0.0.0/33"}]]}), "ipam.ranges[0][0].subnet", "10.0.0.0/33"),
            (
                json!({"ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.1.5"}]]}),
                "ipam.ranges[0][0].rangeStart",
                "10.0.1.5",
            ),
            (
                json!({"ranges": [[{"subnet": "10.0.0.0/24", "rangeEnd": "nope"}]]}),
                "ipam.ranges[0][0].rangeEnd",
                "nope",
            ),
            (
                json!({"ranges": [[{"subnet": "10.0.0.0/24", "gateway": "10.9.0.1"}]]}),
                "ipam.ranges[0][0].gateway",
                "10.9.0.1",
            ),
            (
                json!({"ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.9", "rangeEnd": "10.0.0.3"}]]}),
                "ipam.ranges[0][0].rangeStart",
                "10.0.0.3",
            ),
            (json!({"ranges": [[{"rangeStart": "10.0.0.9"}]]}), "ipam.ranges[0][0].subnet", "required"),
            (json!({"ranges": []}), "ipam.ranges", "at least one"),
            (
                json!({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.0.0.128/25"}]]}),
                "ipam.ranges[1][0]",
                "overlaps",
            ),
            (
                json!({"ranges": [[{"subnet": "10.0.0.0/24"}, {"subnet": "fd00::/64"}]]}),
                "ipam.ranges[0][1].subnet",
                "families",
            ),
            (json!({"ranges": [[{"subnet": "10.0.0.0/24"}]], "pool": "Bad_Pool"}), "ipam.pool", "Bad_Pool"),
            (
                json!({"ranges": [[{"subnet": "10.0.0.0/24"}]], "finalizers": ["noslash"]}),
                "ipam.finalizers[0]",
                "noslash",
            ),
            (json!({"ranges": [[{"subnet": "10.0.0.0/24"}]], "waitForRelease": "soon"}), "ipam.waitForRelease", "soon"),
            (json!({"ranges": [[{"subnet": "10.0.0.0/24"}]], "exclude": ["x/y"]}), "ipam.exclude[0]", "x/y"),
            (
                json!({"ranges": [[{"subnet": "10.0.0.0/24"}]], "routes": [{"dst": "nowhere"}]}),
                "ipam.routes[0]",
                "nowhere",
            ),
            (json!({"ranges": [[{"subnet": "10.0.0.0/24"}]], "log": {"level": "loud"}}), "ipam.log.level", "loud"),
            (json!({"ranges": [[{"subnet": "10.0.0.0/24"}]], "crossNode": "nobody"}), "ipam.crossNode", "nobody"),
            (json!({"ranges": [[{"subnet": "10.0.0.0/24"}]], "frobnicate": 1}), "ipam", "frobnicate"),
            (json!({"ranges": [[{"subnet": "10.0.0.0/24", "gatway": "10.0.0.1"}]]}), "ipam", "gatway"),
            (json!({"ranges": [[{"subnet": "10.0.0.0/30"}]], "exclude": ["10.0.0.2"]}), "ipam.ranges[0]", "no usable"),
        ];
        for (conf, field, value) in cases {
            let msg = err_of(conf.clone());
            assert!(msg.contains(field), "{conf}: {msg} does not name {field}");
            assert!(msg.contains(value), "{conf}: {msg} does not quote {value}");
        }
    }

    #[test]
    fn durations_are_capped_so_no_time_arithmetic_can_overflow() {
        let base = || json!({"ranges": [[{"subnet": "10.0.0.0/24"}]]});
        let huge = "18446744073709551615";
        for field in ["waitForRelease", "forceReleaseAfter", "timeout", "vanishedNodeGrace", "gcGrace"] {
            let mut c = base();
            c[field] = json!(huge);
            let msg = err_of(c);
            assert!(msg.contains(&format!("ipam.{field}")) && msg.contains("maximum"), "{msg}");
        }
        let mut c = base();
        c["timeout"] = json!("20s");
        c["waitForRelease"] = json!("15s");
        let msg = err_of(c);
        assert!(msg.contains("ipam.waitForRelease") && msg.contains("ipam.timeout"), "{msg}");
        let mut c = base();
        c["timeout"] = json!("1s");
        assert!(err_of(c).contains("too short"));
        let ok = parse(base()).unwrap();
        assert_eq!((ok.timeout, ok.wait_for_release), (DEFAULT_TIMEOUT, DEFAULT_WAIT_FOR_RELEASE));
        assert_eq!(ok.network, "mynet");
    }

    fn sticky(v: Value) -> Result<StickyConfig> {
        StickyConfig::parse(&v, Duration::from_secs(10), Duration::from_secs(50), &mut Vec::new())
    }

    #[test]
    fn sticky_defaults_and_errors_name_the_field() {
        let c = sticky(json!({})).unwrap();
        assert!(c.stateful_sets && !c.claims_from_pods);
        assert_eq!((c.sticky_for, c.wait_for_old), (Duration::from_secs(3600), Duration::from_secs(10)));
        let c =
            sticky(json!({"kinds": ["VirtualMachineInstance"], "claimsFromPods": true, "stickyFor": "5m"})).unwrap();
        assert!(!c.stateful_sets && c.claims_from_pods);
        for (bad, field) in [
            (json!({"kinds": ["apps/StatefulSet"]}), "ipam.sticky.kinds[0]"),
            (json!({"stickyFor": "forever"}), "ipam.sticky.stickyFor"),
            (json!({"stickyFor": "800h"}), "ipam.sticky.stickyFor"),
            (json!({"waitForOld": "55s"}), "ipam.sticky.waitForOld"),
            (json!({"waitFor": "5s"}), "ipam.sticky"),
            (json!("on"), "ipam.sticky"),
        ] {
            let e = sticky(bad.clone()).unwrap_err();
            assert!(matches!(e, Error::InvalidConfig { .. }), "{bad}: {e:?}");
            assert!(e.to_string().contains(field), "{bad}: {e}");
        }
    }

    #[test]
    fn keys_without_effect_are_accepted_with_a_warning_and_still_validated() {
        let base = json!({"ranges": [[{"subnet": "10.0.0.0/24"}]]});
        assert_eq!(parse(base.clone()).unwrap().warnings, Vec::<String>::new());
        let mut c = base.clone();
        c["vanishedNodeGrace"] = json!("10m");
        let warnings = parse(c).unwrap().warnings;
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("ipam.vanishedNodeGrace") && warnings[0].contains("--vanished-node-grace"));
        let mut c = base.clone();
        c["vanishedNodeGrace"] = json!("soon");
        assert!(err_of(c).contains("ipam.vanishedNodeGrace"), "a bad value is still bad config");
        let mut c = base;
        c["sticky"] = json!({"kinds": ["StatefulSet", "VirtualMachineInstance"]});
        let warnings = parse(c).unwrap().warnings;
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("ipam.sticky.kinds[1]"), "{warnings:?}");
    }
}
