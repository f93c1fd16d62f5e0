//! The `NetworkEndpoint` custom resource: one object per allocated (pool, IP).
//!
//! The object *is* the IP lease. Its name is derived from (pool, IP) by
//! [`endpoint_name`], so the API server itself guarantees one holder per IP: a
//! second create of the same name fails with 409 AlreadyExists. The IP is free
//! again only once the object is gone, which is after every finalizer that
//! downstream agents hold on it has been removed.
//!
//! This crate has no opinion on how IPs are chosen; it only fixes the shape,
//! the names and the labels that the plugin and agents agree on.

use std::net::IpAddr;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod admission;
pub mod events;
pub mod ipamclaim;
pub mod need;
pub mod pool_resource;
pub mod refs;
pub mod schema;
pub mod shard;

pub use events::{
    REASON_ADMISSION_PARAMS_MISSING, REASON_FORCED_RELEASE, REASON_INCARNATION_ACCEPTED, REASON_INCARNATION_CREATED,
    REASON_INCARNATION_REFUSED, REASON_INCARNATION_WAITS, REASON_NODE_VANISHED, REASON_POD_GONE, REASON_POOL_EXHAUSTED,
    REASON_POOLS_PARAM_CHANGED, REASON_STICKY_HOLD_ENDED, REASON_WAITING_FOR_IP, REPORTER_CONTROLLER, REPORTER_KUBECTL,
    REPORTER_PLUGIN,
};
pub use need::{
    IpFamily, MAX_NEED_SLOTS, NetworkEndpointNeed, NetworkEndpointNeedSpec, NetworkEndpointNeedStatus, Promise,
    need_name,
};
pub use pool_resource::{
    NetworkEndpointPool, NetworkEndpointPoolSpec, NetworkEndpointPoolStatus, PoolSummary, ShardRun,
};
pub use refs::{ClaimRef, PodRef};
pub use schema::{
    PATTERN_CNI_NAME, PATTERN_DNS_LABEL, PATTERN_DNS_SUBDOMAIN, PATTERN_DURATION, PATTERN_FINALIZER, PATTERN_IF_NAME,
    PATTERN_UID, is_dns1123_label, is_dns1123_subdomain,
};
pub use shard::{NetworkEndpointShard, NetworkEndpointShardSpec, NetworkEndpointShardStatus, SHARD_BITS, SHARD_SIZE};

/// API group of every netendpoint resource.
pub const GROUP: &str = "netendpoint.dev";

/// Label carrying the pool name. Always a valid label value (see [`label_value`]).
pub const LABEL_POOL: &str = "netendpoint.dev/pool";
/// Label carrying the node name.
pub const LABEL_NODE: &str = "netendpoint.dev/node";
/// Label carrying the Pod's namespace.
pub const LABEL_POD_NAMESPACE: &str = "netendpoint.dev/pod-namespace";
/// Label carrying the Pod's name.
pub const LABEL_POD_NAME: &str = "netendpoint.dev/pod-name";
/// Label carrying the Pod's UID.
pub const LABEL_POD_UID: &str = "netendpoint.dev/pod-uid";
/// Label of a sticky hold: [`ROLE_HOLD`]. Agents watch endpoints only, with
/// the selector [`ENDPOINTS_ONLY`].
pub const LABEL_ROLE: &str = "netendpoint.dev/role";
/// The [`LABEL_ROLE`] value of a hold.
pub const ROLE_HOLD: &str = "hold";
/// The label selector of every NetworkEndpoint that is an endpoint (not a
/// hold): what an agent watches.
pub const ENDPOINTS_ONLY: &str = "netendpoint.dev/role!=hold";
/// Label carrying the namespace of a hold's or an incarnation's claim.
pub const LABEL_CLAIM_NAMESPACE: &str = "netendpoint.dev/claim-namespace";
/// Label carrying the name of a hold's or an incarnation's claim.
pub const LABEL_CLAIM_NAME: &str = "netendpoint.dev/claim-name";
/// Label carrying the IP family, `"4"` or `"6"`.
pub const LABEL_IP_FAMILY: &str = "netendpoint.dev/ip-family";
/// Label carrying the CNI network name (`spec.network`), so that GC of one
/// network never selects another network's leases in a shared pool.
pub const LABEL_NETWORK: &str = "netendpoint.dev/network";
/// Label carrying the address block of the lease (the aligned IPv4 /26 or
/// IPv6 /122 holding its IP, see [`block_label_value`]). An ADD whose first
/// probes miss lists one block by this label instead of the whole pool.
pub const LABEL_BLOCK: &str = "netendpoint.dev/block";
/// Annotation mirroring `spec.forceReleaseAfter`, so that a metadata-only
/// list of a pool sees each lease's own bound.
pub const ANNOTATION_FORCE_RELEASE_AFTER: &str = "netendpoint.dev/force-release-after";

/// Finalizer of a sticky lease (see `docs/sticky-ips.md`), attached at
/// creation: after DEL and every agent's acknowledgement it keeps the lease,
/// and so its IP, for the Pod's identity until the identity's next ADD takes
/// the IP back or the hold ends (StatefulSet deleted or scaled below the
/// ordinal, `stickyFor` passed, pool pressure). A forced release never
/// removes it.
pub const FINALIZER_STICKY_HOLD: &str = "netendpoint.dev/sticky-hold";
/// Label of a sticky lease: its Pod identity, `<namespace>.<name>` as a
/// label value ([`sticky_identity`]), so the identity's next ADD finds its
/// leases with one label-selected list.
pub const LABEL_STICKY_IDENTITY: &str = "netendpoint.dev/sticky-identity";
/// Annotation of a sticky lease: the controller owner it was sticky for,
/// `<kind>/<name>` (e.g. `StatefulSet/web`).
pub const ANNOTATION_STICKY_OWNER: &str = "netendpoint.dev/sticky-owner";
/// Annotation of a sticky lease: how long the hold lasts after the release
/// was requested (`ipam.sticky.stickyFor` at creation), on the API server's clock.
pub const ANNOTATION_STICKY_FOR: &str = "netendpoint.dev/sticky-for";

/// The [`LABEL_STICKY_IDENTITY`] value of Pod `namespace`/`name`.
/// Injective while it fits a label value (a namespace holds no `.`); longer
/// identities are hashed, and readers compare `spec.pod` as well.
pub fn sticky_identity(namespace: &str, name: &str) -> String {
    label_value(&format!("{namespace}.{name}"))
}

/// Field path, usable in field selectors, of the sandbox's container ID.
pub const FIELD_CONTAINER_ID: &str = "spec.containerID";
/// Field path, usable in field selectors, of the node name.
pub const FIELD_NODE: &str = "spec.node";

/// CEL rule of the CRD: `spec` never changes after creation, so no update
/// can move a live lease to another node, IP or sandbox.
pub const RULE_SPEC_IMMUTABLE: &str = "self.spec == oldSelf.spec";

/// CEL rule of the CRD: `spec.ip` parses as an IP address (the Kubernetes CEL
/// `isIP`, which accepts no leading zeros, zones or IPv4-mapped IPv6 forms).
pub const RULE_IP_IS_ADDRESS: &str = "isIP(self.spec.ip)";

/// CEL rule of the CRD: the name is [`endpoint_name`]`(spec.pool, spec.ip)`,
/// or, for the incarnation `k` of a sticky identity, [`incarnation_name`]
/// (`<pool>.<ip>-<k>`).
///
/// For IPv4 the check is exact string equality. For IPv6 the name must carry
/// eight four-digit lower-case hex groups joined by `-`, and those groups,
/// read as an address, must equal `spec.ip`; CEL has no function that prints
/// an expanded IPv6 address, so equality is checked on parsed addresses.
pub const RULE_NAME_IS_POOL_AND_IP: &str = "self.spec.ip.contains(':') || (\
self.metadata.name.startsWith(self.spec.pool + '.' + self.spec.ip) && (has(self.spec.incarnation) ? (\
self.metadata.name.substring(size(self.spec.pool) + size(self.spec.ip) + 1).matches('^-[1-9][0-9]{0,9}$') && \
int(self.metadata.name.substring(size(self.spec.pool) + size(self.spec.ip) + 2)) == self.spec.incarnation) : \
size(self.metadata.name) == size(self.spec.pool) + size(self.spec.ip) + 1))";

/// The IPv6 half of [`RULE_NAME_IS_POOL_AND_IP`].
pub const RULE_NAME_IS_POOL_AND_IPV6: &str = "!self.spec.ip.contains(':') || (\
self.metadata.name.startsWith(self.spec.pool + '.') && size(self.metadata.name) >= size(self.spec.pool) + 40 && \
self.metadata.name.substring(size(self.spec.pool) + 1, size(self.spec.pool) + 40).matches('^[0-9a-f]{4}(-[0-9a-f]{4}){7}$') && \
isIP(self.spec.ip) && \
ip(self.metadata.name.substring(size(self.spec.pool) + 1, size(self.spec.pool) + 40).replace('-', ':')) == ip(self.spec.ip) && \
(has(self.spec.incarnation) ? (\
self.metadata.name.substring(size(self.spec.pool) + 40).matches('^-[1-9][0-9]{0,9}$') && \
int(self.metadata.name.substring(size(self.spec.pool) + 41)) == self.spec.incarnation) : \
size(self.metadata.name) == size(self.spec.pool) + 40))";

/// CEL rule of the CRD: a hold names its claim and is no incarnation; an
/// incarnation names its claim.
pub const RULE_ROLE_IS_CONSISTENT: &str = "(!has(self.spec.role) || (self.spec.role == 'Hold' && has(self.spec.claim) \
&& !has(self.spec.incarnation))) && (!has(self.spec.incarnation) || has(self.spec.claim))";

/// Longest `stickyFor` of a hold, in seconds (30 days): the plugin's parser
/// refuses more, and the API server refuses a hold that says more
/// ([`RULE_STICKY_FOR_CAPPED`]), whoever writes it.
pub const MAX_STICKY_FOR_SECS: u64 = 30 * 24 * 3600;

/// CEL rule of the CRD: a hold's `spec.stickyFor` is at most
/// [`MAX_STICKY_FOR_SECS`]: a bare number is seconds, anything else must be
/// a duration CEL reads (`720h`, `1h30m`; a string it cannot read is refused).
pub const RULE_STICKY_FOR_CAPPED: &str = "!has(self.spec.stickyFor) || (self.spec.stickyFor.matches('^[0-9]+$') \
? int(self.spec.stickyFor) <= 2592000 : duration(self.spec.stickyFor) <= duration('720h'))";

/// The lease of one IP address to one interface of one sandbox.
///
/// The object carries no ownerReference to the Pod: its lifecycle follows the
/// sandbox (CNI ADD creates it, CNI DEL deletes it), not the Pod object.
#[allow(clippy::duplicated_attributes)] // kube(...) repeats printcolumn/selectable by design
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, KubeSchema)]
#[kube(
    group = "netendpoint.dev",
    version = "v1alpha1",
    kind = "NetworkEndpoint",
    plural = "networkendpoints",
    singular = "networkendpoint",
    shortname = "nep",
    category = "netendpoint",
    derive = "PartialEq",
    doc = "NetworkEndpoint is the lease of one IP address to one pod interface. The IP is free again only after the object is gone, that is after every agent removed its finalizer.",
    printcolumn(name = "IP", type_ = "string", json_path = ".spec.ip"),
    printcolumn(name = "Namespace", type_ = "string", json_path = ".spec.pod.namespace"),
    printcolumn(name = "Pod", type_ = "string", json_path = ".spec.pod.name"),
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.node"),
    printcolumn(name = "Interface", type_ = "string", json_path = ".spec.ifName"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "Releasing-Since",
        type_ = "date",
        json_path = ".metadata.deletionTimestamp",
        description = "When DEL requested the release; empty while the IP is allocated"
    ),
    printcolumn(
        name = "Finalizers",
        type_ = "string",
        json_path = ".metadata.finalizers",
        description = "Agents that still have to acknowledge the release"
    ),
    printcolumn(name = "Container", type_ = "string", json_path = ".spec.containerID", priority = 1),
    printcolumn(name = "Pool", type_ = "string", json_path = ".spec.pool", priority = 1),
    printcolumn(name = "Network", type_ = "string", json_path = ".spec.network", priority = 1),
    printcolumn(
        name = "Static",
        type_ = "boolean",
        json_path = ".spec.static",
        priority = 1,
        description = "True when the sandbox asked for this address (a static IP)"
    ),
    printcolumn(name = "Role", type_ = "string", json_path = ".spec.role", priority = 1, description = "Hold: the sticky address of a claim, kept between its incarnations"),
    printcolumn(name = "Claim", type_ = "string", json_path = ".spec.claim.name", priority = 1),
    status = "NetworkEndpointStatus",
    selectable = ".spec.containerID",
    selectable = ".spec.node",
    validation = Rule::new(RULE_SPEC_IMMUTABLE).message("spec is immutable: a lease never moves to another IP, node or sandbox"),
    validation = Rule::new(RULE_IP_IS_ADDRESS).message("spec.ip must be an IP address (IPv4-mapped IPv6 addresses are not leased)"),
    validation = Rule::new(RULE_NAME_IS_POOL_AND_IP).message("metadata.name must be spec.pool + '.' + spec.ip, and '-' + spec.incarnation for an incarnation (see endpoint_name)"),
    validation = Rule::new(RULE_NAME_IS_POOL_AND_IPV6).message("metadata.name must be spec.pool + '.' + the expanded spec.ip with '-' for ':', and '-' + spec.incarnation for an incarnation (see endpoint_name)"),
    validation = Rule::new(RULE_ROLE_IS_CONSISTENT).message("a hold (spec.role Hold) names its claim and has no incarnation; an incarnation names its claim"),
    validation = Rule::new(RULE_STICKY_FOR_CAPPED).message("spec.stickyFor is at most 720h (30 days)")
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkEndpointSpec {
    /// Pool the IP was allocated from (a DNS-1123 subdomain).
    #[schemars(length(min = 1, max = 202), pattern(PATTERN_DNS_SUBDOMAIN))]
    pub pool: String,
    /// The leased address, in canonical text form (`10.244.0.17`, `fd00::11`).
    #[schemars(length(min = 2, max = 45))]
    pub ip: String,
    /// Prefix length of the subnet the address belongs to.
    #[schemars(schema_with = "prefix_length_schema")]
    pub prefix_length: u8,
    /// Gateway of the range, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 45))]
    pub gateway: Option<String>,
    /// Interface name inside the sandbox (CNI_IFNAME).
    #[schemars(length(min = 1, max = 15), pattern(PATTERN_IF_NAME))]
    pub if_name: String,
    /// Sandbox (container) ID from CNI_CONTAINERID. DEL only deletes endpoints whose ID matches.
    #[serde(rename = "containerID")]
    #[schemars(length(min = 1, max = 256), pattern(PATTERN_CNI_NAME))]
    pub container_id: String,
    /// Node the sandbox runs on (for a hold: the node of its first incarnation).
    #[schemars(length(min = 1, max = 253), pattern(PATTERN_DNS_SUBDOMAIN))]
    pub node: String,
    /// The Pod the sandbox belongs to, when the runtime said so in CNI_ARGS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodRef>,
    /// The CNI network (the network configuration's `name`) that created the
    /// lease. GC for a network only ever touches its own leases, even when
    /// several networks share one pool. Absent on leases of older versions,
    /// which GC leaves alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(PATTERN_CNI_NAME))]
    pub network: Option<String>,
    /// How long this lease's finalizers may hold a release before an ADD that
    /// needs the IP may remove them (`ipam.forceReleaseAfter` when the lease
    /// was created, e.g. `600s`, `1500ms`). Stamped at creation, so that a
    /// network or a rollout with a smaller bound never forces it early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), pattern(PATTERN_DURATION))]
    pub force_release_after: Option<String>,
    /// `true` when the sandbox asked for this address (runtimeConfig.ips,
    /// CNI_ARGS `IP=`, or the Pod's `netendpoint.dev/ips` annotation) rather
    /// than taking the allocator's choice. Absent on other leases.
    #[serde(default, rename = "static", skip_serializing_if = "Option::is_none")]
    pub static_ip: Option<bool>,
    /// `Hold` for the sticky hold of a claim: the object that owns the name
    /// `<pool>.<ip>` for the claim's whole life (see `docs/sticky-ips.md`).
    /// Agents skip holds (label `netendpoint.dev/role=hold`). Absent on
    /// endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The sticky identity (an `IPAMClaim`) a hold or an incarnation belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimRef>,
    /// The incarnation of a sticky identity this endpoint is (its name ends
    /// in `-<incarnation>`). Absent on other endpoints and on holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "incarnation_schema")]
    pub incarnation: Option<u32>,
    /// Holds only: the finalizers each incarnation's endpoint is created with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), inner(length(max = 253), pattern(PATTERN_FINALIZER)))]
    pub endpoint_finalizers: Option<Vec<String>>,
    /// Holds only: how long the hold lasts once no incarnation is left
    /// (`ipam.sticky.stickyFor` at creation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), pattern(PATTERN_DURATION))]
    pub sticky_for: Option<String>,
}

/// The role of a NetworkEndpoint that is not an endpoint.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
pub enum Role {
    /// The sticky hold of a claim.
    Hold,
}

/// The state of a hold, written by the controller and, for
/// [`NetworkEndpointStatus::request`] only, by the plugin of the node that
/// asks for the next incarnation. Empty on endpoints.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct NetworkEndpointStatus {
    /// The latest incarnation the controller created (absent before the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "incarnation_schema")]
    pub incarnation: Option<u32>,
    /// The name of that incarnation's endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub endpoint: Option<String>,
    /// The next incarnation a node's plugin asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<IncarnationRequest>,
    /// `Releasing` once the controller decided to end the hold: no further
    /// incarnation is created, and the hold is deleted once the current
    /// incarnation is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<HoldPhase>,
    /// Why the hold is in its phase, or why the last request was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
}

/// A node's request for the next incarnation of a hold: the endpoint fields
/// that belong to the new sandbox.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct IncarnationRequest {
    /// The incarnation asked for: the hold's current one plus one.
    #[schemars(schema_with = "incarnation_schema")]
    pub incarnation: u32,
    /// The node whose plugin asks (the policy requires the caller's own node).
    #[schemars(length(min = 1, max = 253), pattern(PATTERN_DNS_SUBDOMAIN))]
    pub node: String,
    /// The new sandbox.
    #[serde(rename = "containerID")]
    #[schemars(length(min = 1, max = 256), pattern(PATTERN_CNI_NAME))]
    pub container_id: String,
    /// Its interface.
    #[schemars(length(min = 1, max = 15), pattern(PATTERN_IF_NAME))]
    pub if_name: String,
    /// The Pod (with its UID) the new sandbox belongs to.
    pub pod: PodRef,
    /// Set by the controller once it checked the request while the previous
    /// incarnation is still live, for a claim that is not a StatefulSet's
    /// (a VM's live migration): the asking ADD answers with the address at
    /// once; the incarnation's endpoint follows once the previous one is gone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accepted: bool,
    /// When the asking ADD stops waiting, on the API server's clock: the
    /// controller creates or accepts nothing for this request once too
    /// little of it is left, so no incarnation is ever made for a sandbox
    /// whose ADD gave up. Absent in requests of older plugins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::pool_resource::date_time")]
    pub deadline: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// The phase of a hold.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
pub enum HoldPhase {
    /// The hold ends once its current incarnation is gone.
    Releasing,
}

fn prefix_length_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "integer", "minimum": 0, "maximum": 128 })
}

/// Largest incarnation number (ten digits at most, as the name rule reads them).
pub const MAX_INCARNATION: u32 = 2_000_000_000;

fn incarnation_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "integer", "minimum": 1, "maximum": MAX_INCARNATION })
}

impl NetworkEndpoint {
    /// The leased address, or `None` when `spec.ip` does not parse (a hand-made object).
    pub fn ip(&self) -> Option<IpAddr> {
        self.spec.ip.parse().ok()
    }

    /// True once deletion was requested: the IP is being released, waiting on finalizers.
    pub fn is_releasing(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// True for a sticky hold ([`Role::Hold`]).
    pub fn is_hold(&self) -> bool {
        self.spec.role == Some(Role::Hold)
    }
}

/// The name of incarnation `k` of the sticky identity holding `ip` in `pool`: `<pool>.<ip>-<k>`.
pub fn incarnation_name(pool: &str, ip: IpAddr, k: u32) -> String {
    format!("{}-{k}", endpoint_name(pool, ip))
}

/// The object name of the lease of `ip` in `pool`: `<pool>.<ip>`.
///
/// IPv4 keeps its dotted form (`pods.10.244.0.17`). IPv6 is written fully
/// expanded with `-` between the eight groups (`pods.fd00-0000-…-0011`), so
/// that every address, `::` and IPv4-mapped forms included, yields one valid
/// DNS-1123 label. The mapping is injective for a given pool, and the pool is
/// always known to whoever parses a name back ([`parse_endpoint_name`]).
pub fn endpoint_name(pool: &str, ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => format!("{pool}.{v4}"),
        IpAddr::V6(v6) => {
            let groups: Vec<String> = v6.segments().iter().map(|s| format!("{s:04x}")).collect();
            format!("{pool}.{}", groups.join("-"))
        }
    }
}

/// The [`LABEL_BLOCK`] value of the block holding `ip`: its first address,
/// dotted for IPv4 (`10.244.3.0`), and expanded with `-` for IPv6 as in
/// [`endpoint_name`]. Always a valid label value.
pub fn block_label_value(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => std::net::Ipv4Addr::from(u32::from(v4) & !0x3f).to_string(),
        IpAddr::V6(v6) => {
            let base = std::net::Ipv6Addr::from(u128::from(v6) & !0x3f);
            let groups: Vec<String> = base.segments().iter().map(|s| format!("{s:04x}")).collect();
            groups.join("-")
        }
    }
}

/// Inverse of [`endpoint_name`]: the IP of `name` if it is a lease name in `pool`.
pub fn parse_endpoint_name(pool: &str, name: &str) -> Option<IpAddr> {
    let rest = name.strip_prefix(pool)?.strip_prefix('.')?;
    if let Ok(v4) = rest.parse::<std::net::Ipv4Addr>() {
        // Reject non-canonical spellings, so that parse(name(x)) is a bijection.
        return (v4.to_string() == rest).then_some(IpAddr::V4(v4));
    }
    let groups: Vec<&str> = rest.split('-').collect();
    if groups.len() != 8 {
        return None;
    }
    let mut segments = [0u16; 8];
    for (slot, g) in segments.iter_mut().zip(&groups) {
        if g.len() != 4 || !g.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return None;
        }
        *slot = u16::from_str_radix(g, 16).ok()?;
    }
    Some(IpAddr::V6(std::net::Ipv6Addr::from(segments)))
}

/// Longest pool name for which every lease name stays within 253 characters
/// (the longest address part is a 39-character expanded IPv6 address, and an
/// incarnation adds `-` and up to 10 digits).
pub const MAX_POOL_NAME_LEN: usize = 253 - 1 - 39 - 11;

/// The label value that mirrors spec value `s`: its first 63 characters,
/// less any trailing characters that may not end a label value. Admission
/// recomputes exactly this in CEL (`docs/design.md`, "Trust"), so every
/// mirrored label is checked whatever the length of its value:
/// `(size(s) <= 63 ? s : s.substring(0, 63)).find('^.*[A-Za-z0-9]')`.
///
/// A long value's label is a prefix, so two long values may share a label:
/// selectors by label may return more than asked, and readers compare the
/// spec. The spec fields mirrored in labels only hold label characters
/// (their schema patterns say so); for any other text, each character a
/// label may not hold becomes `_` first (no lease carries such a label).
pub fn label_value(s: &str) -> String {
    let cleaned: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect();
    let cut: String = cleaned.chars().take(63).collect();
    cut.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()).to_string()
}

/// The one duration grammar of netendpoint: the CNI config, the installer
/// and the agent all read durations with [`duration::parse`].
pub mod duration {
    use std::time::Duration;

    /// Parses a Go-style duration (`500ms`, `30s`, `5m`, `1h30m`, `1.5s`).
    /// A plain number is seconds. Units: `ms`, `s`, `m`, `h`. Returns `None`
    /// for anything else, including negative values and values that do not
    /// fit a [`Duration`].
    pub fn parse(s: &str) -> Option<Duration> {
        if let Ok(secs) = s.parse::<u64>() {
            return Some(Duration::from_secs(secs));
        }
        if s.is_empty() {
            return None;
        }
        let mut total = Duration::ZERO;
        let mut rest = s;
        while !rest.is_empty() {
            let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
            let (num, tail) = rest.split_at(digits);
            let value: f64 = num.parse().ok()?;
            let unit_len = tail.find(|c: char| c.is_ascii_digit()).unwrap_or(tail.len());
            let (unit, next) = tail.split_at(unit_len);
            let scale = match unit {
                "ms" => 0.001,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                _ => return None,
            };
            total = total.checked_add(Duration::try_from_secs_f64(value * scale).ok()?)?;
            rest = next;
        }
        Some(total)
    }

    /// Writes `d` so that [`parse`] reads it back exactly to the millisecond:
    /// `600s` for whole seconds, `1500ms` otherwise.
    pub fn format(d: Duration) -> String {
        if d.subsec_millis() == 0 { format!("{}s", d.as_secs()) } else { format!("{}ms", d.as_millis()) }
    }
}

/// The CRD manifest as YAML, exactly as `crdgen` writes it to `deploy/crd.yaml`.
///
/// Four documents: the `NetworkEndpoint` CRD (the leases and holds), the
/// `NetworkEndpointPool` CRD (the per-pool view and summary the controller
/// writes), the `NetworkEndpointShard` CRD (per-block bitmaps, a hint for
/// ADDs) and the `NetworkEndpointNeed` CRD (a waiting ADD's signal).
pub fn crd_yaml() -> Result<String, serde_saphyr::ser::Error> {
    use kube::CustomResourceExt;
    let docs = [
        serde_saphyr::to_string(&bounded_names(NetworkEndpoint::crd()))?,
        serde_saphyr::to_string(&bounded_names(NetworkEndpointPool::crd()))?,
        serde_saphyr::to_string(&bounded_names(NetworkEndpointShard::crd()))?,
        serde_saphyr::to_string(&bounded_names(NetworkEndpointNeed::crd()))?,
    ];
    Ok(docs.join("---\n"))
}

/// `crd` with `metadata.name` bounded to 253 characters in its schema, the
/// one metadata constraint a CRD may declare: CEL rules that read the name
/// are then costed for names of that length, not of any length.
pub fn bounded_names(
    mut crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
    for version in &mut crd.spec.versions {
        if let Some(schema) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) {
            let name =
                JSONSchemaProps { type_: Some("string".into()), max_length: Some(253), ..JSONSchemaProps::default() };
            let metadata = JSONSchemaProps {
                type_: Some("object".into()),
                properties: Some([("name".to_string(), name)].into()),
                ..JSONSchemaProps::default()
            };
            schema.properties.get_or_insert_default().insert("metadata".into(), metadata);
        }
    }
    crd
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// True if `s` is a valid Kubernetes label value (empty, or up to 63
    /// `[A-Za-z0-9_.-]` that start and end alphanumeric).
    fn is_label_value(s: &str) -> bool {
        let b = s.as_bytes();
        b.is_empty()
            || (b.len() <= 63
                && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric())
    }

    #[test]
    fn the_sticky_for_rule_says_the_cap() {
        assert_eq!(MAX_STICKY_FOR_SECS, 2_592_000);
        assert!(RULE_STICKY_FOR_CAPPED.contains(&format!("<= {MAX_STICKY_FOR_SECS} ")));
        assert!(RULE_STICKY_FOR_CAPPED.contains(&format!("duration('{}h')", MAX_STICKY_FOR_SECS / 3600)));
        assert_eq!(duration::parse("720h"), Some(std::time::Duration::from_secs(MAX_STICKY_FOR_SECS)));
    }

    #[test]
    fn ipv4_names_keep_the_dotted_form() {
        let ip: IpAddr = "10.244.0.17".parse().unwrap();
        assert_eq!(endpoint_name("pods", ip), "pods.10.244.0.17");
        assert_eq!(parse_endpoint_name("pods", "pods.10.244.0.17"), Some(ip));
    }

    #[test]
    fn every_name_is_a_dns_subdomain_and_round_trips() {
        let cases = [
            "0.0.0.0",
            "255.255.255.255",
            "10.0.0.1",
            "::",
            "::1",
            "1::",
            "fd00::11",
            "fe80::1:2:3",
            "2001:db8::ff00:42:8329",
            "::ffff:10.1.2.3",
            "::10.1.2.3",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "0:0:0:1::",
        ];
        let label = "p".repeat(63);
        let longest = format!("{label}.{label}.{label}.{}", "q".repeat(10));
        assert_eq!(longest.len(), MAX_POOL_NAME_LEN);
        for pool in ["pods", "a", "net-1.example", &longest] {
            for c in cases {
                let ip: IpAddr = c.parse().unwrap();
                let name = endpoint_name(pool, ip);
                assert!(is_dns1123_subdomain(&name), "{name} is not a DNS-1123 subdomain");
                assert_eq!(parse_endpoint_name(pool, &name), Some(ip), "{name}");
                let incarnation = incarnation_name(pool, ip, u32::MAX);
                assert!(is_dns1123_subdomain(&incarnation), "{incarnation} is not a DNS-1123 subdomain");
            }
        }
    }

    #[test]
    fn ipv6_names_are_fully_expanded() {
        let ip: IpAddr = "::1".parse().unwrap();
        assert_eq!(endpoint_name("p", ip), "p.0000-0000-0000-0000-0000-0000-0000-0001");
    }

    #[test]
    fn distinct_addresses_get_distinct_names() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..512u32 {
            let v4 = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
            let v6 = IpAddr::V6(Ipv6Addr::from(0xfd00_u128 << 112 | u128::from(i)));
            assert!(seen.insert(endpoint_name("pods", v4)));
            assert!(seen.insert(endpoint_name("pods", v6)));
        }
    }

    #[test]
    fn foreign_names_do_not_parse() {
        for name in [
            "pods.10.0.0.01",
            "pods.10.0.0",
            "other.10.0.0.1",
            "pods10.0.0.1",
            "pods.0000-0000",
            "pods.0000-0000-0000-0000-0000-0000-0000-000g",
            "pods.0000-0000-0000-0000-0000-0000-0000-1",
            "pods.0000-0000-0000-0000-0000-0000-0000-000A",
        ] {
            assert_eq!(parse_endpoint_name("pods", name), None, "{name}");
        }
    }

    #[test]
    fn block_labels_name_the_aligned_block() {
        let b = |s: &str| block_label_value(s.parse().unwrap());
        assert_eq!(b("10.244.3.77"), "10.244.3.64");
        assert_eq!(b("10.244.3.64"), b("10.244.3.127"));
        assert_ne!(b("10.244.3.127"), b("10.244.3.128"));
        assert_eq!(b("fd00::1:2ff"), "fd00-0000-0000-0000-0000-0000-0001-02c0");
        for ip in ["0.0.0.0", "255.255.255.255", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"] {
            assert!(is_label_value(&b(ip)), "{ip}");
        }
    }

    #[test]
    fn label_values_are_the_prefix_admission_recomputes() {
        assert_eq!(label_value("web-0"), "web-0");
        assert_eq!(label_value(""), "");
        assert_eq!(label_value("net_"), "net");
        assert_eq!(label_value(&"x".repeat(200)), "x".repeat(63));
        let node = format!("{}-{}", "a".repeat(62), "tail");
        assert_eq!(label_value(&node), "a".repeat(62), "a cut that ends in '-' loses it");
        for spec_value in
            ["pods", "node-a.example.com", "Net_1", "0f2e4c3a-1b2c-4d5e-8f90-123456789abc", &"n".repeat(253)]
        {
            assert!(is_label_value(&label_value(spec_value)), "{spec_value}");
        }
    }

    #[test]
    fn durations_parse_and_format_round_trip() {
        use std::time::Duration;
        let cases = [
            ("500ms", Some(500)),
            ("1h30m", Some(5_400_000)),
            ("1.5s", Some(1500)),
            ("45", Some(45_000)),
            ("", None),
            ("5 minutes", None),
            ("-1s", None),
            ("1d", None),
        ];
        for (text, ms) in cases {
            assert_eq!(duration::parse(text), ms.map(Duration::from_millis), "{text}");
        }
        for d in [Duration::from_secs(600), Duration::from_millis(1500), Duration::ZERO] {
            assert_eq!(duration::parse(&duration::format(d)), Some(d));
        }
        // Far too large values are refused, not wrapped or panicked on.
        assert_eq!(duration::parse("99999999999999999999h"), None);
    }

    #[test]
    fn crd_declares_what_the_design_needs() {
        use kube::CustomResourceExt;
        let crd = NetworkEndpoint::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names.as_deref(), Some(&["nep".to_string()][..]));
        let v = &crd.spec.versions[0];
        let fields: Vec<_> = v.selectable_fields.iter().flatten().map(|f| f.json_path.as_str()).collect();
        assert_eq!(fields, [".spec.containerID", ".spec.node"]);
        let cols: Vec<_> = v.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
        for want in ["IP", "Pod", "Node", "Interface", "Age", "Releasing-Since", "Finalizers"] {
            assert!(cols.contains(&want), "missing printer column {want}");
        }
    }
}

#[cfg(test)]
mod crd_file {
    /// `deploy/crd.yaml` must be what `crdgen` prints; regenerate with `make crd`.
    #[test]
    fn committed_crd_yaml_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/crd.yaml");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == super::crd_yaml().unwrap(),
            "deploy/crd.yaml is stale: run `make crd` and commit the result"
        );
    }
}
