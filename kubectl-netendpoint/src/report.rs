//! The reports the commands print, built from plain data (no API calls):
//! one row per pool for `pools`, one description per lease for `why`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use netendpoint_crd::{NetworkEndpoint, PodRef};
use netendpoint_lease::age_at_least;
use netendpoint_lease::pools::PoolStats;
use netendpoint_lease::queue::Depth;
use serde::Serialize;

use crate::render::{Format, age, or_dash, table};

/// One pool as `pools` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRow {
    /// Pool (label value).
    pub pool: String,
    /// Usable addresses; `null` when no network config gives the pool's ranges.
    pub capacity: Option<u128>,
    /// Live leases.
    pub used: u64,
    /// Leases being released (deletionTimestamp set), waiting on finalizers.
    pub releasing: u64,
    /// Addresses neither used nor releasing; `null` when the capacity is unknown.
    pub free: Option<u128>,
    /// Age in seconds of the oldest release in progress.
    pub oldest_release_seconds: Option<u64>,
    /// Finalizers that releases wait on, with the number of releases each holds.
    pub waiting_on: BTreeMap<String, u64>,
    /// ADDs waiting in the pool's queue for an address.
    pub queued: u64,
    /// Seconds the longest-waiting of them has waited.
    pub oldest_wait_seconds: Option<u64>,
}

/// Puts each pool's queue into its row; a pool with waiters and no row
/// (no lease, no known ranges) gets one.
pub fn add_queues(rows: &mut Vec<PoolRow>, depths: &BTreeMap<String, Depth>) {
    for (pool, d) in depths {
        let at = match rows.iter().position(|r| &r.pool == pool) {
            Some(i) => i,
            None => {
                rows.push(PoolRow {
                    pool: pool.clone(),
                    capacity: None,
                    used: 0,
                    releasing: 0,
                    free: None,
                    oldest_release_seconds: None,
                    waiting_on: BTreeMap::new(),
                    queued: 0,
                    oldest_wait_seconds: None,
                });
                rows.len() - 1
            }
        };
        rows[at].queued = d.waiting;
        rows[at].oldest_wait_seconds = Some(d.oldest.as_secs());
    }
    rows.sort_by(|a, b| a.pool.cmp(&b.pool));
}

impl From<&PoolStats> for PoolRow {
    fn from(s: &PoolStats) -> Self {
        PoolRow {
            pool: s.pool.clone(),
            capacity: s.capacity,
            used: s.in_use,
            releasing: s.releasing,
            free: s.free(),
            oldest_release_seconds: s.oldest_release.map(|d| d.as_secs()),
            waiting_on: s.releasing_by_finalizer.clone(),
            queued: 0,
            oldest_wait_seconds: None,
        }
    }
}

/// The `pools` report: the rows and where the ranges came from.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolsReport {
    /// Where the pools' ranges were read (`configmap/<ns>/<name>`, file paths), empty when nowhere.
    pub ranges_from: Vec<String>,
    /// One row per pool, by name.
    pub pools: Vec<PoolRow>,
}

impl PoolsReport {
    /// The table (`wide` adds the IPv4/IPv6 split is not known here, so it adds the ranges' source).
    pub fn table(&self, format: Format) -> String {
        let waiting = |w: &BTreeMap<String, u64>| {
            if w.is_empty() {
                "<none>".to_string()
            } else {
                w.iter().map(|(f, n)| format!("{f}={n}")).collect::<Vec<_>>().join(",")
            }
        };
        let mut header = vec![
            "POOL",
            "CAPACITY",
            "USED",
            "RELEASING",
            "FREE",
            "OLDEST-RELEASE",
            "WAITING-ON",
            "QUEUED",
            "OLDEST-WAIT",
        ];
        if format == Format::Wide {
            header.push("RANGES-FROM");
        }
        let source = if self.ranges_from.is_empty() { "<none>".to_string() } else { self.ranges_from.join(",") };
        let rows: Vec<Vec<String>> = self
            .pools
            .iter()
            .map(|p| {
                let mut row = vec![
                    p.pool.clone(),
                    or_dash(p.capacity),
                    p.used.to_string(),
                    p.releasing.to_string(),
                    or_dash(p.free),
                    or_dash(p.oldest_release_seconds.map(|s| age(Duration::from_secs(s)))),
                    waiting(&p.waiting_on),
                    p.queued.to_string(),
                    or_dash(p.oldest_wait_seconds.map(|s| age(Duration::from_secs(s)))),
                ];
                if format == Format::Wide {
                    row.push(if p.capacity.is_some() { source.clone() } else { "<none>".into() });
                }
                row
            })
            .collect();
        table(&header, &rows)
    }
}

/// One Event about a lease or its Pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRow {
    /// When it happened (RFC 3339), when known.
    pub time: Option<String>,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Reason, e.g. `ForcedRelease`, `IPNeeded`.
    pub reason: String,
    /// Who reported it (reporting controller or source component).
    pub from: String,
    /// What it is about: `NetworkEndpoint/<name>` or `Pod/<namespace>/<name>`.
    pub about: String,
    /// The message.
    pub message: String,
    #[serde(skip)]
    at: Option<Timestamp>,
}

impl EventRow {
    /// The row of a core/v1 Event (Events written through events.k8s.io/v1 read back the same).
    pub fn from_event(e: &Event) -> Self {
        let at = e
            .event_time
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.last_timestamp.as_ref().map(|t| t.0))
            .or_else(|| e.first_timestamp.as_ref().map(|t| t.0))
            .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0));
        let o = &e.involved_object;
        let about = match (o.kind.as_deref().unwrap_or_default(), &o.namespace) {
            ("Pod", Some(ns)) => format!("Pod/{ns}/{}", o.name.as_deref().unwrap_or_default()),
            (kind, _) => format!("{kind}/{}", o.name.as_deref().unwrap_or_default()),
        };
        EventRow {
            time: at.map(|t| t.to_string()),
            type_: e.type_.clone().unwrap_or_default(),
            reason: e.reason.clone().unwrap_or_default(),
            from: e
                .reporting_component
                .clone()
                .filter(|c| !c.is_empty())
                .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()))
                .unwrap_or_default(),
            about,
            message: e.message.clone().unwrap_or_default(),
            at,
        }
    }
}

/// A lease's sticky hold, as `why` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StickyHold {
    /// `namespace/name` of the Pod identity the IP is kept for.
    pub identity: String,
    /// `Kind/name` of its owner.
    pub owner: String,
    /// How long the hold lasts after the release was requested (seconds).
    pub sticky_for_seconds: u64,
    /// True while the hold finalizer is on the lease.
    pub held: bool,
}

/// What a sticky claim's hold or incarnation says (docs/sticky-ips.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimView {
    /// `hold` (the object that keeps the address for the claim) or `incarnation`.
    pub role: String,
    /// `namespace/name` of the IPAMClaim.
    pub claim: String,
    /// The claim's current incarnation (a hold), or this one's number.
    pub incarnation: Option<u32>,
    /// A hold's current endpoint.
    pub endpoint: Option<String>,
    /// A hold's pending request: `k on node N for Pod ns/name`.
    pub request: Option<String>,
    /// A hold's phase (`Releasing` while it ends).
    pub phase: Option<String>,
    /// A hold's message: why a request was refused, or why it ends.
    pub message: Option<String>,
}

impl ClaimView {
    fn of(ep: &NetworkEndpoint) -> Option<Self> {
        let claim = ep.spec.claim.as_ref()?;
        let status = ep.status.clone().unwrap_or_default();
        let hold = ep.is_hold();
        Some(Self {
            role: if hold { "hold" } else { "incarnation" }.into(),
            claim: format!("{}/{}", claim.namespace, claim.name),
            incarnation: if hold { status.incarnation } else { ep.spec.incarnation },
            endpoint: status.endpoint.filter(|_| hold),
            request: status.request.filter(|_| hold).map(|r| {
                format!(
                    "{} on node {} for Pod {}/{}{}",
                    r.incarnation,
                    r.node,
                    r.pod.namespace,
                    r.pod.name,
                    if r.accepted { " (accepted: answered before the previous one is gone)" } else { "" }
                )
            }),
            phase: status.phase.filter(|_| hold).map(|p| format!("{p:?}")),
            message: status.message.filter(|_| hold),
        })
    }
}

/// Everything `why` knows about one lease.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseReport {
    /// Object name (`<pool>.<ip>`).
    pub name: String,
    /// Object UID.
    pub uid: String,
    /// Pool.
    pub pool: String,
    /// The address.
    pub ip: String,
    /// The Pod, when the runtime named it.
    pub pod: Option<PodRef>,
    /// Node of the holder.
    pub node: String,
    /// Sandbox (container) ID.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// Interface in the sandbox.
    pub if_name: String,
    /// CNI network that made the lease.
    pub network: Option<String>,
    /// When the lease was made (RFC 3339).
    pub held_since: Option<String>,
    /// True once its release was requested.
    pub releasing: bool,
    /// When the release was requested (RFC 3339).
    pub releasing_since: Option<String>,
    /// Finalizers on the lease: what its release waits on (or, for a live lease, will wait on).
    pub finalizers: Vec<String>,
    /// The lease's own forced-release bound.
    pub force_release_after: Option<String>,
    /// The address was asked for by the runtime or the Pod (`spec.static`).
    #[serde(rename = "static")]
    pub static_ip: bool,
    /// The sticky hold, when the lease keeps its IP for its Pod's identity:
    /// whether the hold is still on, and for whom.
    pub sticky_hold: Option<StickyHold>,
    /// A sticky claim's hold or incarnation.
    pub claim: Option<ClaimView>,
    /// Events about the lease and its Pod, oldest first.
    pub events: Vec<EventRow>,
    #[serde(skip)]
    created: Option<Timestamp>,
    #[serde(skip)]
    deleted: Option<Timestamp>,
}

impl LeaseReport {
    /// The report of `ep` with `events` (any order; sorted here, oldest first).
    pub fn new(ep: &NetworkEndpoint, mut events: Vec<EventRow>) -> Self {
        events.sort_by(|a, b| a.at.cmp(&b.at).then_with(|| a.reason.cmp(&b.reason)));
        let created = ep.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let deleted = ep.metadata.deletion_timestamp.as_ref().map(|t| t.0);
        LeaseReport {
            name: ep.metadata.name.clone().unwrap_or_default(),
            uid: ep.metadata.uid.clone().unwrap_or_default(),
            pool: ep.spec.pool.clone(),
            ip: ep.spec.ip.clone(),
            pod: ep.spec.pod.clone(),
            node: ep.spec.node.clone(),
            container_id: ep.spec.container_id.clone(),
            if_name: ep.spec.if_name.clone(),
            network: ep.spec.network.clone(),
            held_since: created.map(|t| t.to_string()),
            releasing: deleted.is_some(),
            releasing_since: deleted.map(|t| t.to_string()),
            finalizers: ep.metadata.finalizers.clone().unwrap_or_default(),
            force_release_after: ep.spec.force_release_after.clone(),
            static_ip: ep.spec.static_ip.unwrap_or(false),
            sticky_hold: netendpoint_lease::view::Sticky::of(ep).map(|s| StickyHold {
                identity: format!("{}/{}", s.namespace, s.pod),
                owner: format!("{}/{}", s.owner_kind, s.owner),
                sticky_for_seconds: s.sticky_for.as_secs(),
                held: ep.metadata.finalizers.iter().flatten().any(|f| f == netendpoint_crd::FINALIZER_STICKY_HOLD),
            }),
            claim: ClaimView::of(ep),
            events,
            created,
            deleted,
        }
    }

    /// A kubectl-describe-like text at `now`.
    pub fn describe(&self, now: Timestamp, format: Format) -> String {
        let ago = |t: Option<Timestamp>| or_dash(t.map(|t| format!("{t} ({} ago)", age(age_at_least(now, t)))));
        let mut fields: Vec<(&str, String)> = vec![
            ("Lease", format!("{}   (pool {}, IP {})", self.name, self.pool, self.ip)),
            (
                "Held by",
                match &self.pod {
                    Some(p) if p.uid.is_empty() => format!("pod {}/{}", p.namespace, p.name),
                    Some(p) => format!("pod {}/{} (uid {})", p.namespace, p.name, p.uid),
                    None => "a sandbox whose Pod the runtime did not name".into(),
                },
            ),
            ("Node", self.node.clone()),
            ("Container", self.container_id.clone()),
            ("Interface", self.if_name.clone()),
        ];
        if let Some(n) = &self.network {
            fields.push(("Network", n.clone()));
        }
        fields.push(("Since", ago(self.created)));
        let state = match (self.releasing, self.finalizers.is_empty()) {
            (false, _) => "in use".into(),
            (true, true) => format!(
                "releasing since {}; no finalizer left, the IP is free once the object is gone",
                ago(self.deleted)
            ),
            (true, false) => {
                format!("releasing since {}, waiting on {} finalizer(s)", ago(self.deleted), self.finalizers.len())
            }
        };
        fields.push(("State", state));
        let fins = if self.finalizers.is_empty() { "<none>".into() } else { self.finalizers.join(", ") };
        fields.push((if self.releasing { "Waiting on" } else { "Finalizers" }, fins));
        if self.static_ip {
            fields.push(("Static", "yes: the address was asked for; a static request never forces a release".into()));
        }
        fields.extend(self.sticky_fields());
        if let Some(b) = &self.force_release_after {
            fields.push((
                "Force after",
                format!("{b} (may be forced after this long, only for an ADD that needs the IP)"),
            ));
        }
        if format == Format::Wide {
            fields.push(("UID", self.uid.clone()));
        }
        let mut out = String::new();
        for (k, v) in fields {
            let _ = writeln!(out, "{:<14}{v}", format!("{k}:"));
        }
        out.push_str(&self.events_section(now));
        out
    }

    /// The describe fields of a sticky hold and of a claim's hold or incarnation.
    fn sticky_fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = Vec::new();
        if let Some(h) = &self.sticky_hold {
            let state = if h.held { "held" } else { "ended" };
            fields.push((
                "Sticky hold",
                format!(
                    "{state}: the IP is kept for {} ({}) up to {} after its release; only that identity's next Pod takes it",
                    h.identity,
                    h.owner,
                    age(Duration::from_secs(h.sticky_for_seconds))
                ),
            ));
        }
        if let Some(c) = &self.claim {
            let what = match (c.role.as_str(), c.incarnation) {
                ("hold", Some(k)) => format!(
                    "hold of claim {}: keeps the address between its Pods; current incarnation {k} ({})",
                    c.claim,
                    c.endpoint.clone().unwrap_or_default()
                ),
                ("hold", None) => format!("hold of claim {}: keeps the address; no incarnation yet", c.claim),
                (_, k) => format!("incarnation {} of claim {}", k.unwrap_or_default(), c.claim),
            };
            fields.push(("Claim", what));
            for (k, v) in [("Asked for", &c.request), ("Phase", &c.phase), ("Message", &c.message)] {
                if let Some(v) = v {
                    fields.push((k, v.clone()));
                }
            }
        }
        fields
    }

    /// The Events of the lease as describe shows them, at `now`.
    fn events_section(&self, now: Timestamp) -> String {
        if self.events.is_empty() {
            return "Events:       <none>\n".into();
        }
        let mut out = String::from("Events:\n");
        let rows: Vec<Vec<String>> = self
            .events
            .iter()
            .map(|e| {
                vec![
                    or_dash(e.at.map(|t| age(age_at_least(now, t)))),
                    e.type_.clone(),
                    e.reason.clone(),
                    e.from.clone(),
                    e.about.clone(),
                    e.message.clone(),
                ]
            })
            .collect();
        for line in table(&["AGE", "TYPE", "REASON", "FROM", "ABOUT", "MESSAGE"], &rows).lines() {
            let _ = writeln!(out, "  {line}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn pool_rows_show_unknown_capacity_as_a_dash_and_list_who_holds_releases() {
        let known = PoolStats {
            pool: "a".into(),
            capacity: Some(10),
            in_use: 3,
            releasing: 2,
            releasing_by_finalizer: [("x.example/agent".to_string(), 2), ("y.example/b".to_string(), 1)].into(),
            oldest_release: Some(Duration::from_secs(130)),
            oldest_release_since: None,
        };
        let unknown = PoolStats { pool: "b".into(), in_use: 1, ..PoolStats::default() };
        let mut pools = vec![(&known).into(), (&unknown).into()];
        let queue = |waiting, secs| Depth { waiting, oldest: Duration::from_secs(secs) };
        // A waiter in a pool of a row, and in one with no row yet.
        add_queues(&mut pools, &[("a".to_string(), queue(3, 75)), ("0".to_string(), queue(1, 2))].into());
        let r = PoolsReport { ranges_from: vec!["f.conf".into()], pools };
        let text = r.table(Format::Table);
        let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(
            lines[0],
            ["POOL", "CAPACITY", "USED", "RELEASING", "FREE", "OLDEST-RELEASE", "WAITING-ON", "QUEUED", "OLDEST-WAIT"]
        );
        assert_eq!(lines[1], ["0", "-", "0", "0", "-", "-", "<none>", "1", "2s"]);
        assert_eq!(lines[2], ["a", "10", "3", "2", "5", "2m10s", "x.example/agent=2,y.example/b=1", "3", "75s"]);
        assert_eq!(lines[3], ["b", "-", "1", "0", "-", "-", "<none>", "0", "-"]);
        let wide = r.table(Format::Wide);
        assert!(wide.lines().nth(2).unwrap().ends_with("f.conf"), "{wide}");
        let json: serde_json::Value =
            serde_json::from_str(&crate::render::structured(&r, Format::Json).unwrap()).unwrap();
        assert_eq!(json["pools"][2]["capacity"], serde_json::Value::Null);
        assert_eq!(json["pools"][1]["waitingOn"]["x.example/agent"], 2);
        assert_eq!(json["pools"][1]["oldestReleaseSeconds"], 130);
        assert_eq!(json["pools"][1]["queued"], 3);
        assert_eq!(json["pools"][1]["oldestWaitSeconds"], 75);
    }

    #[test]
    fn a_release_is_described_with_its_finalizers_and_events_oldest_first() {
        let mut ep = NetworkEndpoint::new(
            "p.10.0.0.1",
            netendpoint_crd::NetworkEndpointSpec {
                pool: "p".into(),
                ip: "10.0.0.1".into(),
                prefix_length: 24,
                gateway: None,
                if_name: "eth0".into(),
                container_id: "c1".into(),
                node: "n1".into(),
                pod: Some(PodRef { namespace: "ns".into(), name: "web".into(), uid: "u".into() }),
                network: Some("net".into()),
                force_release_after: Some("600s".into()),
                static_ip: None,
                ..Default::default()
            },
        );
        ep.metadata.creation_timestamp = Some(Time(t("2026-01-01T00:00:00Z")));
        ep.metadata.deletion_timestamp = Some(Time(t("2026-01-01T00:10:00Z")));
        ep.metadata.finalizers = Some(vec!["x.example/agent".into()]);
        let ev = |reason: &str, at: &str, kind: &str| {
            EventRow::from_event(&Event {
                reason: Some(reason.into()),
                event_time: Some(MicroTime(t(at))),
                type_: Some("Warning".into()),
                reporting_component: Some("netendpoint-controller".into()),
                message: Some(format!("{reason} happened")),
                involved_object: ObjectReference {
                    kind: Some(kind.into()),
                    name: Some("web".into()),
                    namespace: Some("ns".into()),
                    ..ObjectReference::default()
                },
                ..Event::default()
            })
        };
        let r = LeaseReport::new(
            &ep,
            vec![
                ev("ForcedRelease", "2026-01-01T00:20:00Z", "NetworkEndpoint"),
                ev("IPNeeded", "2026-01-01T00:19:00Z", "Pod"),
            ],
        );
        let text = r.describe(t("2026-01-01T00:21:01Z"), Format::Table);
        assert!(text.contains("Held by:      pod ns/web (uid u)"), "{text}");
        assert!(
            text.contains("State:        releasing since 2026-01-01T00:10:00Z (11m ago), waiting on 1 finalizer(s)"),
            "{text}"
        );
        assert!(text.contains("Waiting on:   x.example/agent"), "{text}");
        let needed = text.find("IPNeeded").unwrap();
        let forced = text.find("ForcedRelease").unwrap();
        assert!(needed < forced, "oldest first:\n{text}");
        assert!(text.contains("Pod/ns/web"), "{text}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["releasing"], true);
        assert_eq!(json["finalizers"][0], "x.example/agent");
        assert_eq!(json["events"][0]["reason"], "IPNeeded");
        assert_eq!(json["containerID"], "c1");
    }

    #[test]
    fn a_claims_hold_and_incarnation_say_which_claim_and_which_incarnation() {
        use netendpoint_crd::{ClaimRef, IncarnationRequest, NetworkEndpointStatus, Role};
        let claim = ClaimRef { namespace: "ns".into(), name: "web-0.p".into(), uid: "k1".into() };
        let mut hold = NetworkEndpoint::new(
            "p.10.0.0.5",
            netendpoint_crd::NetworkEndpointSpec {
                pool: "p".into(),
                ip: "10.0.0.5".into(),
                role: Some(Role::Hold),
                claim: Some(claim.clone()),
                ..Default::default()
            },
        );
        hold.status = Some(NetworkEndpointStatus {
            incarnation: Some(3),
            endpoint: Some("p.10.0.0.5-3".into()),
            request: Some(IncarnationRequest {
                incarnation: 4,
                node: "n2".into(),
                pod: PodRef { namespace: "ns".into(), name: "web-0".into(), uid: "u4".into() },
                ..Default::default()
            }),
            ..Default::default()
        });
        let now = "2026-01-01T00:00:00Z".parse().unwrap();
        let text = LeaseReport::new(&hold, vec![]).describe(now, Format::Table);
        assert!(text.contains("Claim:        hold of claim ns/web-0.p: keeps the address between its Pods; current incarnation 3 (p.10.0.0.5-3)"), "{text}");
        assert!(text.contains("Asked for:    4 on node n2 for Pod ns/web-0"), "{text}");
        let mut inc = hold.clone();
        inc.metadata.name = Some("p.10.0.0.5-3".into());
        inc.spec.role = None;
        inc.spec.incarnation = Some(3);
        inc.status = None;
        let text = LeaseReport::new(&inc, vec![]).describe(now, Format::Table);
        assert!(text.contains("Claim:        incarnation 3 of claim ns/web-0.p"), "{text}");
    }

    #[test]
    fn a_sticky_hold_and_a_static_address_are_shown() {
        let mut ep = NetworkEndpoint::new(
            "p.10.0.0.1",
            netendpoint_crd::NetworkEndpointSpec {
                pool: "p".into(),
                ip: "10.0.0.1".into(),
                prefix_length: 24,
                gateway: None,
                if_name: "eth0".into(),
                container_id: "c1".into(),
                node: "n1".into(),
                pod: Some(PodRef { namespace: "ns".into(), name: "web-0".into(), uid: "u".into() }),
                network: None,
                force_release_after: None,
                static_ip: Some(true),
                ..Default::default()
            },
        );
        ep.metadata.deletion_timestamp = Some(Time(t("2026-01-01T00:10:00Z")));
        ep.metadata.finalizers = Some(vec![netendpoint_crd::FINALIZER_STICKY_HOLD.into()]);
        ep.metadata.labels = Some(
            [
                (netendpoint_crd::LABEL_STICKY_IDENTITY.to_string(), "id".to_string()),
                (netendpoint_crd::LABEL_POD_NAMESPACE.to_string(), "ns".to_string()),
                (netendpoint_crd::LABEL_POD_NAME.to_string(), "web-0".to_string()),
            ]
            .into(),
        );
        ep.metadata.annotations = Some(
            [
                (netendpoint_crd::ANNOTATION_STICKY_OWNER.to_string(), "StatefulSet/web".to_string()),
                (netendpoint_crd::ANNOTATION_STICKY_FOR.to_string(), "1h".to_string()),
            ]
            .into(),
        );
        let r = LeaseReport::new(&ep, vec![]);
        let text = r.describe(t("2026-01-01T00:11:00Z"), Format::Table);
        assert!(text.contains("Sticky hold:  held: the IP is kept for ns/web-0 (StatefulSet/web)"), "{text}");
        assert!(text.contains("Static:       yes"), "{text}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["stickyHold"]["held"], true);
        assert_eq!(json["stickyHold"]["stickyForSeconds"], 3600);
        assert_eq!(json["static"], true);

        ep.metadata.finalizers = None;
        ep.metadata.labels = None;
        ep.spec.static_ip = None;
        let plain = LeaseReport::new(&ep, vec![]).describe(t("2026-01-01T00:11:00Z"), Format::Table);
        assert!(!plain.contains("Sticky hold") && !plain.contains("Static:"), "{plain}");
    }
}
