//! Static IPs: an ADD asked for given addresses gets exactly those, or a
//! clear error, and never at another holder's expense.
//!
//! A request comes from one source, the first of these that lists any
//! address: `runtimeConfig.ips` (the `ips` capability, which Multus fills
//! from a pod's network-selection annotation), `args.cni.ips`, CNI_ARGS
//! `IP=` (host-local's), and, when `ipam.staticIPs.podAnnotation` is on, the
//! Pod's [`ANNOTATION_IPS`] annotation. Lower sources are then ignored, so
//! the Pod is read only when the runtime asked for nothing.
//!
//! What a request means:
//! - at most one address per IP family; each goes to the range set of its
//!   family whose ranges hold it, and must be usable there (not excluded,
//!   not a gateway), else code 7 naming the address and the reason;
//! - a range set given no address is served by the allocator as usual;
//! - an address held by a live lease of another attachment is code 108,
//!   naming the holder; one being released is waited for within
//!   `waitForRelease` (code 109 when the wait runs out);
//! - a static request never forces a release and never records that an IP
//!   is needed, so the controller never forces one on its behalf either;
//! - the lease is marked `spec.static: true`.
//!
//! The parsing of the runtime's inputs is in [`crate::protocol`]; this module
//! decides what they mean, and claims.

use std::net::IpAddr;

use netendpoint_crd::NetworkEndpoint;
use netendpoint_netconf::{IpamConfig, RangeSet};
use tracing::{info, warn};

use crate::claim::{Attachment, Claiming, Deadline, lease_object};
use crate::error::{Error, Result};
use crate::protocol::{MAX_REQUESTED_IPS, parse_requested_ip};
use crate::store::{Leases, PodFacts};
use crate::wait::{LeasesOf, Waited, await_condition, gone_or_replaced};

/// The Pod annotation asking for static IPs on the default network: a JSON
/// list of addresses (`["10.1.2.3", "fd00::3"]`, as Calico's
/// `cni.projectcalico.org/ipAddrs`) or a comma-separated list
/// (`10.1.2.3,fd00::3`). Read only with `ipam.staticIPs.podAnnotation`.
pub const ANNOTATION_IPS: &str = "netendpoint.dev/ips";

/// Where a request for static IPs came from, highest precedence first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `runtimeConfig.ips`, the `ips` capability.
    RuntimeConfig,
    /// `args.cni.ips`, the conventions' argument.
    ArgsCni,
    /// `IP=` in CNI_ARGS.
    CniArgs,
    /// The Pod's [`ANNOTATION_IPS`] annotation.
    PodAnnotation,
}

impl Source {
    /// How errors and logs name the source.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RuntimeConfig => "runtimeConfig.ips",
            Self::ArgsCni => "args.cni.ips",
            Self::CniArgs => "CNI_ARGS IP",
            Self::PodAnnotation => "pod annotation netendpoint.dev/ips",
        }
    }
}

/// The addresses an ADD was asked for, and where the request came from.
/// Empty (`source: None`) when nobody asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// The source that listed the addresses.
    pub source: Option<Source>,
    /// The addresses, in the order given.
    pub ips: Vec<IpAddr>,
}

impl Request {
    /// The request of the runtime's own inputs: the first non-empty list of
    /// `runtimeConfig.ips`, `args.cni.ips` and CNI_ARGS `IP=`.
    pub fn from_runtime(runtime_config: Vec<IpAddr>, args_cni: Vec<IpAddr>, cni_args: Vec<IpAddr>) -> Self {
        let sources =
            [(Source::RuntimeConfig, runtime_config), (Source::ArgsCni, args_cni), (Source::CniArgs, cni_args)];
        let mut chosen = Self::default();
        for (source, ips) in sources {
            if ips.is_empty() {
                continue;
            }
            match chosen.source {
                None => chosen = Self { source: Some(source), ips },
                Some(first) => {
                    info!(
                        used = first.as_str(),
                        ignored = source.as_str(),
                        "static IPs requested twice: the first source wins"
                    );
                }
            }
        }
        chosen
    }

    /// True when no address was asked for.
    pub fn is_empty(&self) -> bool {
        self.ips.is_empty()
    }
}

/// Whether an ADD must read its Pod for static IPs: only with
/// `ipam.staticIPs.podAnnotation`, when the runtime named the Pod and asked
/// for nothing itself.
pub fn needs_pod(conf: &IpamConfig, runtime: &Request, who: &Attachment) -> bool {
    conf.static_ips.pod_annotation && runtime.is_empty() && who.pod.is_some()
}

/// The request of the Pod's annotation, if `facts` has one. A Pod whose UID
/// differs from the one the runtime gave is another Pod under the same name
/// (a recreation): its annotation is not this sandbox's, and is ignored.
pub fn from_pod(facts: Option<&PodFacts>, who: &Attachment) -> Result<Request> {
    let Some(facts) = facts else { return Ok(Request::default()) };
    let Some(value) = facts.annotations.get(ANNOTATION_IPS) else { return Ok(Request::default()) };
    if let Some(pod) = &who.pod
        && !pod.uid.is_empty()
        && !facts.uid.is_empty()
        && pod.uid != facts.uid
    {
        warn!(runtime_uid = %pod.uid, pod_uid = %facts.uid, "the Pod under this name is another one: its static IPs are ignored");
        return Ok(Request::default());
    }
    let ips = parse_annotation(value)?;
    Ok(Request { source: (!ips.is_empty()).then_some(Source::PodAnnotation), ips })
}

/// Parses the [`ANNOTATION_IPS`] value: a JSON list of strings, or a
/// comma-separated list; each entry an address or a CIDR (whose prefix
/// length is ignored). Code 7 naming the bad entry.
pub fn parse_annotation(value: &str) -> Result<Vec<IpAddr>> {
    let refuse = |ip: &str, reason: &str| Error::StaticIpRefused {
        ip: ip.chars().take(64).collect(),
        from: Source::PodAnnotation.as_str(),
        reason: reason.to_string(),
    };
    let trimmed = value.trim();
    let entries: Vec<String> = if trimmed.starts_with('[') {
        serde_json::from_str(trimmed).map_err(|_| {
            refuse(trimmed, "is not a JSON list of strings (e.g. [\"10.1.2.3\"]) nor a comma-separated list")
        })?
    } else {
        trimmed.split(',').filter(|s| !s.trim().is_empty()).map(str::to_string).collect()
    };
    if entries.len() > MAX_REQUESTED_IPS {
        return Err(refuse(trimmed, &format!("lists {} addresses; at most {MAX_REQUESTED_IPS}", entries.len())));
    }
    entries.iter().map(|e| parse_requested_ip(e).ok_or_else(|| refuse(e, "is not an IP address or CIDR"))).collect()
}

/// Which address each range set of `conf` must give: `plan[i]` for
/// `conf.range_sets[i]`, `None` where the allocator chooses. Refuses (code
/// 7) a second address of one family, and an address that no range set of
/// its family may hand out, saying why.
pub fn plan(conf: &IpamConfig, request: &Request) -> Result<Vec<Option<IpAddr>>> {
    let mut plan = vec![None; conf.range_sets.len()];
    let Some(source) = request.source else { return Ok(plan) };
    let from = source.as_str();
    let refuse = |ip: IpAddr, reason: String| Error::StaticIpRefused { ip: ip.to_string(), from, reason };
    for (n, &ip) in request.ips.iter().enumerate() {
        if let Some(&other) = request.ips[..n].iter().find(|o| o.is_ipv4() == ip.is_ipv4()) {
            let family = if ip.is_ipv4() { "IPv4" } else { "IPv6" };
            return Err(refuse(ip, format!("{other} is requested too; at most one {family} address per interface")));
        }
        let Some(i) = conf.range_sets.iter().position(|set| set.range_of(ip).is_some()) else {
            return Err(refuse(ip, format!("outside every range of ipam.ranges of pool {:?}", conf.pool)));
        };
        if let Some(why) = unusable(&conf.range_sets[i], ip) {
            return Err(refuse(ip, format!("{why} (ipam.ranges[{i}])")));
        }
        plan[i] = Some(ip);
    }
    Ok(plan)
}

/// Why `ip`, inside a range of `set`, may not be handed out; `None` if it may.
fn unusable(set: &RangeSet, ip: IpAddr) -> Option<String> {
    if let Some(net) = set.exclude.iter().find(|n| n.contains(&ip)) {
        return Some(format!("excluded by ipam.exclude {net}"));
    }
    if set.range_of(ip).and_then(|r| r.gateway) == Some(ip) {
        return Some("the gateway of its range".into());
    }
    (!set.is_usable(ip)).then(|| "not usable".into())
}

/// How errors name the holder of a lease (or of a sticky hold).
pub fn holder(ep: &NetworkEndpoint) -> String {
    if let (true, Some(claim)) = (ep.is_hold(), &ep.spec.claim) {
        return format!(
            "the sticky hold of claim {}/{} (lease {})",
            claim.namespace,
            claim.name,
            ep.metadata.name.as_deref().unwrap_or_default()
        );
    }
    let pod = ep.spec.pod.as_ref().map_or_else(|| "no pod".to_string(), |p| format!("pod {}/{}", p.namespace, p.name));
    format!(
        "{pod} on node {} (container {}, interface {}, lease {})",
        ep.spec.node,
        ep.spec.container_id,
        ep.spec.if_name,
        ep.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Rounds of create, read and wait before a static claim gives up, whatever the deadline says.
const MAX_ROUNDS: usize = 64;

/// Claims exactly `ip` of `set` for the ADD `c`. A lease of this
/// attachment is adopted; a live lease of anyone else (or a sticky hold) is
/// [`Error::StaticIpTaken`]; a release in progress is waited for, by a
/// watch of that one name, until `deadline` ([`Error::StaticIpReleasing`]
/// after it), and never forced.
pub async fn claim<S: Leases>(
    c: &mut Claiming<'_, S>,
    set: &RangeSet,
    ip: IpAddr,
    deadline: Deadline,
) -> Result<NetworkEndpoint> {
    let mut lease = lease_object(c.conf, c.who, set, ip);
    lease.spec.static_ip = Some(true);
    let name = lease.metadata.name.clone().unwrap_or_default();
    let mut logged_wait = false;
    let mut last: Option<NetworkEndpoint> = None;
    for _ in 0..MAX_ROUNDS {
        if let Some(ep) = c.create(&lease).await? {
            info!(%ip, waited_ms = deadline.waited().as_millis() as u64, "claimed the requested static IP");
            return Ok(ep);
        }
        // Taken: by whom? Gone since the create is worth another create.
        let Some(held) = c.retrying("read the holder", || c.store.get(&name)).await? else { continue };
        if held.is_hold() || !held.is_releasing() {
            if !held.is_hold() && c.who.owns(&held) && held.spec.pool == c.conf.pool {
                info!(%ip, "ADD repeated: the requested static IP is already this attachment's");
                c.adopted.push(held.clone());
                return Ok(held);
            }
            return Err(Error::StaticIpTaken { ip, pool: c.conf.pool.clone(), holder: holder(&held) });
        }
        if deadline.passed() {
            return Err(releasing(c.conf, ip, &held, deadline));
        }
        if !logged_wait {
            warn!(%ip, holder = %holder(&held), finalizers = ?held.metadata.finalizers.clone().unwrap_or_default(),
                wait_for_release_ms = c.conf.wait_for_release.as_millis() as u64,
                "requested static IP is being released: waiting for it, forcing nothing");
            logged_wait = true;
        }
        let done = gone_or_replaced(held.metadata.uid.clone());
        if let Waited::TimedOut(_) =
            await_condition(&LeasesOf(c.store), &name, Some(held.clone()), deadline, done).await?
        {
            return Err(releasing(c.conf, ip, &held, deadline));
        }
        last = Some(held);
    }
    match last {
        Some(held) => Err(releasing(c.conf, ip, &held, deadline)),
        None => Err(Error::Inconsistent(format!("lease {name} kept being refused and not found"))),
    }
}

fn releasing(conf: &IpamConfig, ip: IpAddr, held: &NetworkEndpoint, deadline: Deadline) -> Error {
    Error::StaticIpReleasing {
        ip,
        pool: conf.pool.clone(),
        holder: holder(held),
        finalizers: held.metadata.finalizers.clone().unwrap_or_default(),
        waited: deadline.waited(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn conf(ipam: serde_json::Value) -> IpamConfig {
        IpamConfig::parse(&ipam, "net").unwrap()
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn req(source: Source, list: &[&str]) -> Request {
        Request { source: Some(source), ips: ips(list) }
    }

    #[test]
    fn the_first_runtime_source_that_lists_addresses_wins() {
        let r = Request::from_runtime(ips(&["10.0.0.5"]), ips(&["10.0.0.6"]), ips(&["10.0.0.7"]));
        assert_eq!(r, req(Source::RuntimeConfig, &["10.0.0.5"]));
        let r = Request::from_runtime(vec![], ips(&["10.0.0.6"]), ips(&["10.0.0.7"]));
        assert_eq!(r, req(Source::ArgsCni, &["10.0.0.6"]));
        let r = Request::from_runtime(vec![], vec![], ips(&["10.0.0.7", "fd00::7"]));
        assert_eq!(r, req(Source::CniArgs, &["10.0.0.7", "fd00::7"]));
        assert!(Request::from_runtime(vec![], vec![], vec![]).is_empty());
    }

    #[test]
    fn the_annotation_is_a_json_list_or_a_comma_list() {
        assert_eq!(parse_annotation(r#"["10.1.2.3", "fd00::3/64"]"#).unwrap(), ips(&["10.1.2.3", "fd00::3"]));
        assert_eq!(parse_annotation(" 10.1.2.3 , fd00::3 ").unwrap(), ips(&["10.1.2.3", "fd00::3"]));
        assert!(parse_annotation("").unwrap().is_empty());
        for bad in ["[10.1.2.3]", "10.1.2.x", r#"["10.1.2.3", 7]"#] {
            let e = parse_annotation(bad).unwrap_err();
            assert_eq!(e.code(), 7, "{bad}: {e}");
            assert!(e.to_string().contains("netendpoint.dev/ips"), "{e}");
        }
        let many = vec!["10.0.0.1"; MAX_REQUESTED_IPS + 1].join(",");
        assert_eq!(parse_annotation(&many).unwrap_err().code(), 7);
    }

    #[test]
    fn each_address_goes_to_the_range_set_of_its_family() {
        let c = conf(json!({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "fd00::/120"}]]}));
        let p = plan(&c, &req(Source::CniArgs, &["fd00::9", "10.0.0.9"])).unwrap();
        assert_eq!(p, vec![Some("10.0.0.9".parse().unwrap()), Some("fd00::9".parse().unwrap())]);
        // One family only: the other range set is left to the allocator.
        let p = plan(&c, &req(Source::CniArgs, &["fd00::9"])).unwrap();
        assert_eq!(p, vec![None, Some("fd00::9".parse().unwrap())]);
        assert_eq!(plan(&c, &Request::default()).unwrap(), vec![None, None]);
    }

    #[test]
    fn refusals_are_code_7_and_name_the_ip_and_the_reason() {
        let c = conf(json!({
            "ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.10", "rangeEnd": "10.0.0.50"}], [{"subnet": "fd00::/120"}]],
            "exclude": ["10.0.0.20/30"],
            "pool": "p"
        }));
        let cases: &[(&[&str], &str, &str)] = &[
            (&["10.0.0.60"], "10.0.0.60", "outside every range"),
            (&["10.9.0.1"], "10.9.0.1", "outside every range"),
            (&["10.0.0.21"], "10.0.0.21", "excluded by ipam.exclude 10.0.0.20/30"),
            (&["fd00::1"], "fd00::1", "the gateway"),
            (&["10.0.0.11", "10.0.0.12"], "10.0.0.12", "at most one IPv4 address"),
            (&["fd00::5", "10.0.0.11", "fd00::6"], "fd00::6", "at most one IPv6 address"),
        ];
        for (asked, ip, why) in cases {
            let e = plan(&c, &req(Source::RuntimeConfig, asked)).unwrap_err();
            assert_eq!(e.code(), 7, "{asked:?}: {e}");
            let msg = e.to_string();
            assert!(msg.contains(&format!("requested IP {ip} ")), "{msg}");
            assert!(msg.contains(why) && msg.contains("runtimeConfig.ips"), "{msg}");
        }
    }

    fn who(uid: &str) -> Attachment {
        Attachment {
            key: crate::protocol::AttachmentKey { container_id: "c".into(), if_name: "eth0".into() },
            node: "n1".into(),
            pod: Some(crate::protocol::PodIdentity { namespace: "ns".into(), name: "web-0".into(), uid: uid.into() }),
        }
    }

    #[test]
    fn the_pod_is_read_only_when_enabled_named_and_nothing_else_asked() {
        let off = conf(json!({"ranges": [[{"subnet": "10.0.0.0/24"}]]}));
        let on = conf(json!({"ranges": [[{"subnet": "10.0.0.0/24"}]], "staticIPs": {"podAnnotation": true}}));
        let asked = req(Source::CniArgs, &["10.0.0.5"]);
        assert!(!needs_pod(&off, &Request::default(), &who("u")));
        assert!(needs_pod(&on, &Request::default(), &who("u")));
        assert!(!needs_pod(&on, &asked, &who("u")));
        let mut anonymous = who("u");
        anonymous.pod = None;
        assert!(!needs_pod(&on, &Request::default(), &anonymous));
        assert!(
            IpamConfig::parse(&json!({"ranges": [[{"subnet": "10.0.0.0/24"}]], "staticIPs": {"x": 1}}), "n").is_err()
        );
    }

    #[test]
    fn another_pod_under_the_same_name_does_not_give_its_annotation() {
        let facts =
            PodFacts { uid: "new".into(), annotations: [(ANNOTATION_IPS.to_string(), "10.0.0.5".to_string())].into() };
        assert_eq!(from_pod(Some(&facts), &who("new")).unwrap(), req(Source::PodAnnotation, &["10.0.0.5"]));
        assert_eq!(from_pod(Some(&facts), &who("")).unwrap(), req(Source::PodAnnotation, &["10.0.0.5"]));
        assert!(from_pod(Some(&facts), &who("old")).unwrap().is_empty());
        assert!(from_pod(None, &who("new")).unwrap().is_empty());
        assert!(from_pod(Some(&PodFacts::default()), &who("new")).unwrap().is_empty());
    }

    /// ADD decisions for static requests, over [`MemStore`] on tokio's paused clock.
    mod decisions {
        use std::sync::Arc;
        use std::time::Duration;

        use super::*;
        use crate::claim::Deadline;
        use crate::commands::{Asked, add, add_asked};
        use crate::local::LocalState;
        use crate::protocol::IpamResult;
        use crate::store::mem::MemStore;

        const T0: &str = "2026-01-01T00:00:00Z";
        const FIN: &str = "test.example/agent";

        fn dual(extra: serde_json::Value) -> IpamConfig {
            let mut ipam = json!({
                "ranges": [[{"subnet": "10.0.0.0/29"}], [{"subnet": "fd00::/125"}]],
                "exclude": ["10.0.0.6"],
                "pool": "p",
                "waitForRelease": "10s",
            });
            for (k, v) in extra.as_object().unwrap() {
                ipam[k] = v.clone();
            }
            conf(ipam)
        }

        fn single(extra: serde_json::Value) -> IpamConfig {
            let mut c = dual(extra);
            c.range_sets.truncate(1);
            c
        }

        fn attachment(cid: &str) -> Attachment {
            let mut w = who(&format!("uid-{cid}"));
            w.key.container_id = cid.into();
            w.pod.as_mut().unwrap().name = format!("pod-{cid}");
            w
        }

        fn asked(list: &[&str]) -> Request {
            req(Source::CniArgs, list)
        }

        async fn add_requesting(
            store: &MemStore,
            c: &IpamConfig,
            who: &Attachment,
            local: &LocalState,
            ips: &Request,
        ) -> crate::error::Result<IpamResult> {
            let asked = Asked { ips: ips.clone(), claim: None };
            add_asked(store, c, who, local, &asked, Deadline::after(c.timeout)).await
        }

        /// The lease of `ip` held by container `cid`, already in the store; its name.
        fn hold(store: &MemStore, c: &IpamConfig, cid: &str, ip: &str, finalizers: &[&str]) -> String {
            let ip: IpAddr = ip.parse().unwrap();
            let set = c.range_sets.iter().find(|s| s.range_of(ip).is_some()).unwrap();
            let mut w = attachment(cid);
            w.node = "n2".into();
            let mut ep = lease_object(c, &w, set, ip);
            ep.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
            let name = ep.metadata.name.clone().unwrap();
            store.insert(ep);
            name
        }

        fn addrs(r: &IpamResult) -> Vec<String> {
            r.ips.iter().map(|ip| ip.address.to_string()).collect()
        }

        fn no_force_and_no_need(store: &MemStore) {
            let ev = store.events();
            assert!(ev.iter().all(|(r, _)| !r.ends_with("ForcedRelease") && !r.ends_with("IPNeeded")), "{ev:?}");
            assert_eq!(store.calls("patch"), 0);
        }

        #[tokio::test(start_paused = true)]
        async fn a_static_ip_is_one_create_and_its_lease_is_marked() {
            let store = MemStore::new(T0, &["n1"]);
            let c = single(json!({}));
            let r = add_requesting(&store, &c, &attachment("c1"), &LocalState::none(), &asked(&["10.0.0.5"]))
                .await
                .unwrap();
            assert_eq!(addrs(&r), ["10.0.0.5/29"]);
            assert_eq!(store.object("p.10.0.0.5").unwrap().spec.static_ip, Some(true));
            assert_eq!((store.calls("create"), store.calls("get_node"), store.total_calls()), (1, 1, 2));
            // A dynamic ADD is not marked.
            let r = add(&store, &c, &attachment("c2"), &LocalState::none()).await.unwrap();
            assert_eq!(addrs(&r), ["10.0.0.2/29"]);
            assert_eq!(store.object("p.10.0.0.2").unwrap().spec.static_ip, None);
        }

        #[tokio::test(start_paused = true)]
        async fn a_live_holder_is_code_108_named_and_nothing_is_claimed() {
            let store = MemStore::new(T0, &["n1"]);
            let c = single(json!({"forceReleaseAfter": "1s"}));
            hold(&store, &c, "owner", "10.0.0.5", &[FIN]);
            let e = add_requesting(&store, &c, &attachment("c1"), &LocalState::none(), &asked(&["10.0.0.5"]))
                .await
                .unwrap_err();
            assert_eq!(e.code(), 108, "{e}");
            let msg = e.to_string();
            for part in ["10.0.0.5", "pod ns/pod-owner", "node n2", "container owner", "interface eth0", "p.10.0.0.5"] {
                assert!(msg.contains(part), "{part:?} missing from {msg}");
            }
            assert_eq!(store.objects().len(), 1);
            assert_eq!(store.object("p.10.0.0.5").unwrap().spec.container_id, "owner");
            assert!(store.object("p.10.0.0.5").unwrap().metadata.deletion_timestamp.is_none(), "never released");
            no_force_and_no_need(&store);
        }

        #[tokio::test(start_paused = true)]
        async fn a_release_in_progress_is_waited_for_and_then_the_ip_is_given() {
            let store = Arc::new(MemStore::new(T0, &["n1"]));
            let c = single(json!({"waitForRelease": "10s"}));
            let name = hold(&store, &c, "old", "10.0.0.5", &[FIN]);
            store.release(&name);
            let agent = store.clone();
            let acked = name.clone();
            let ack = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(3)).await;
                agent.ack(&acked, FIN);
            });
            let started = tokio::time::Instant::now();
            let r = add_requesting(&store, &c, &attachment("new"), &LocalState::none(), &asked(&["10.0.0.5"]))
                .await
                .unwrap();
            ack.await.unwrap();
            assert_eq!(addrs(&r), ["10.0.0.5/29"]);
            assert!(started.elapsed() >= Duration::from_secs(3), "given only after the agent's ack");
            let ep = store.object(&name).unwrap();
            assert_eq!((ep.spec.container_id.as_str(), ep.spec.static_ip), ("new", Some(true)));
            assert_eq!(store.calls("watch"), 1, "one watch of that one lease");
            no_force_and_no_need(&store);
        }

        #[tokio::test(start_paused = true)]
        async fn a_stuck_release_is_never_forced_by_a_static_request_in_either_cross_node_mode() {
            for mode in ["plugin", "controller"] {
                let store = MemStore::new(T0, &["n1"]);
                let c = single(json!({"waitForRelease": "4s", "forceReleaseAfter": "1s", "crossNode": mode}));
                let name = hold(&store, &c, "old", "10.0.0.5", &[FIN]);
                store.release(&name);
                tokio::time::advance(Duration::from_secs(600)).await;
                let started = tokio::time::Instant::now();
                let e = add_requesting(&store, &c, &attachment("new"), &LocalState::none(), &asked(&["10.0.0.5"]))
                    .await
                    .unwrap_err();
                assert_eq!(e.code(), 109, "{mode}: {e}");
                assert!(started.elapsed() >= Duration::from_secs(4), "{mode}: waited waitForRelease");
                let msg = e.to_string();
                assert!(msg.contains("pod ns/pod-old") && msg.contains(FIN) && msg.contains("forced nothing"), "{msg}");
                let ep = store.object(&name).unwrap();
                assert_eq!(ep.metadata.finalizers.unwrap(), [FIN], "{mode}: the finalizer is kept");
                assert_eq!(ep.spec.container_id, "old");
                no_force_and_no_need(&store);
            }
        }

        #[tokio::test(start_paused = true)]
        async fn out_of_range_excluded_gateway_and_two_of_a_family_are_code_7_before_any_call() {
            let store = MemStore::new(T0, &["n1"]);
            let c = dual(json!({}));
            for (list, why) in [
                (&["10.0.1.5"][..], "outside every range"),
                (&["10.0.0.6"][..], "excluded by ipam.exclude 10.0.0.6/32"),
                (&["10.0.0.1"][..], "the gateway"),
                (&["10.0.0.2", "10.0.0.3"][..], "at most one IPv4"),
                (&["fd00::2", "fd00::3"][..], "at most one IPv6"),
            ] {
                let e =
                    add_requesting(&store, &c, &attachment("c1"), &LocalState::none(), &asked(list)).await.unwrap_err();
                assert_eq!(e.code(), 7, "{list:?}: {e}");
                assert!(e.to_string().contains(why), "{e}");
            }
            assert_eq!(store.total_calls(), 0);
            assert!(store.objects().is_empty());
        }

        #[tokio::test(start_paused = true)]
        async fn dual_stack_takes_one_per_family_and_the_allocator_serves_the_other() {
            let store = MemStore::new(T0, &["n1"]);
            let c = dual(json!({}));
            let both = asked(&["fd00::5", "10.0.0.4"]);
            let r = add_requesting(&store, &c, &attachment("c1"), &LocalState::none(), &both).await.unwrap();
            assert_eq!(addrs(&r), ["10.0.0.4/29", "fd00::5/125"]);
            let v6_only = asked(&["fd00::6"]);
            let r = add_requesting(&store, &c, &attachment("c2"), &LocalState::none(), &v6_only).await.unwrap();
            assert_eq!(addrs(&r), ["10.0.0.2/29", "fd00::6/125"]);
            assert_eq!(store.object("p.10.0.0.2").unwrap().spec.static_ip, None);
            assert!(store.objects().iter().filter(|e| e.spec.static_ip == Some(true)).count() == 3);
        }

        #[tokio::test(start_paused = true)]
        async fn a_failure_after_claiming_one_family_releases_that_claim() {
            let store = MemStore::new(T0, &["n1"]);
            let c = dual(json!({}));
            hold(&store, &c, "owner", "fd00::5", &[]);
            let e =
                add_requesting(&store, &c, &attachment("c1"), &LocalState::none(), &asked(&["10.0.0.4", "fd00::5"]))
                    .await
                    .unwrap_err();
            assert_eq!(e.code(), 108, "{e}");
            assert!(store.object("p.10.0.0.4").is_none(), "the IPv4 claim was released");
            assert_eq!(store.objects().len(), 1);
        }

        #[tokio::test(start_paused = true)]
        async fn a_repeated_add_is_idempotent_with_or_without_the_node_record() {
            let store = MemStore::new(T0, &["n1"]);
            let c = single(json!({}));
            let dir = std::env::temp_dir().join(format!("netendpoint-static-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let local = LocalState::new(&dir, "p");
            let want = asked(&["10.0.0.5"]);
            let first = add_requesting(&store, &c, &attachment("c1"), &local, &want).await.unwrap();
            let again = add_requesting(&store, &c, &attachment("c1"), &local, &want).await.unwrap();
            assert_eq!(first, again);
            // The record lost (another data dir): the lease is recognised as this attachment's.
            let creates = store.calls("create");
            let lost = add_requesting(&store, &c, &attachment("c1"), &LocalState::none(), &want).await.unwrap();
            assert_eq!(first, lost);
            assert_eq!(store.calls("create"), creates + 1, "one refused create, then the lease is read");
            assert_eq!(store.objects().len(), 1);
            // Another interface of the same sandbox is someone else.
            let mut eth1 = attachment("c1");
            eth1.key.if_name = "eth1".into();
            let e = add_requesting(&store, &c, &eth1, &LocalState::none(), &want).await.unwrap_err();
            assert_eq!(e.code(), 108, "{e}");
            let _ = std::fs::remove_dir_all(dir);
        }

        #[tokio::test(start_paused = true)]
        async fn the_annotation_costs_one_pod_get_only_when_enabled_and_nothing_else_asked() {
            let pod = |ips: &str| PodFacts {
                uid: "uid-c1".into(),
                annotations: [(ANNOTATION_IPS.to_string(), ips.to_string())].into(),
            };
            // Off (the default): no Pod read; the allocator chooses.
            let store = MemStore::new(T0, &["n1"]);
            store.put_pod("ns", "pod-c1", pod(r#"["10.0.0.5"]"#), "n1");
            let r = add(&store, &single(json!({})), &attachment("c1"), &LocalState::none()).await.unwrap();
            assert_eq!((addrs(&r)[0].as_str(), store.calls("get_pod"), store.total_calls()), ("10.0.0.2/29", 0, 2));

            // On: one Pod read, and the annotated address.
            let on = single(json!({"staticIPs": {"podAnnotation": true}}));
            let store = MemStore::new(T0, &["n1"]);
            store.put_pod("ns", "pod-c1", pod(r#"["10.0.0.5"]"#), "n1");
            let r = add(&store, &on, &attachment("c1"), &LocalState::none()).await.unwrap();
            assert_eq!((addrs(&r)[0].as_str(), store.calls("get_pod")), ("10.0.0.5/29", 1));
            assert_eq!(store.object("p.10.0.0.5").unwrap().spec.static_ip, Some(true));

            // On, but the runtime asked: the runtime wins and the Pod is not read.
            let store = MemStore::new(T0, &["n1"]);
            store.put_pod("ns", "pod-c1", pod(r#"["10.0.0.5"]"#), "n1");
            let r = add_requesting(&store, &on, &attachment("c1"), &LocalState::none(), &asked(&["10.0.0.4"]))
                .await
                .unwrap();
            assert_eq!((addrs(&r)[0].as_str(), store.calls("get_pod")), ("10.0.0.4/29", 0));

            // On, no Pod object or no annotation: the allocator chooses.
            let store = MemStore::new(T0, &["n1"]);
            let r = add(&store, &on, &attachment("c1"), &LocalState::none()).await.unwrap();
            assert_eq!((addrs(&r)[0].as_str(), store.calls("get_pod")), ("10.0.0.2/29", 1));

            // A bad annotation is code 7 and claims nothing.
            let store = MemStore::new(T0, &["n1"]);
            store.put_pod("ns", "pod-c1", pod("10.0.0.6"), "n1");
            let e = add(&store, &on, &attachment("c1"), &LocalState::none()).await.unwrap_err();
            assert_eq!(e.code(), 7, "{e}");
            assert!(e.to_string().contains("pod annotation netendpoint.dev/ips"), "{e}");
            assert!(store.objects().is_empty());
        }
    }
}
