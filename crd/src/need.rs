//! The `NetworkEndpointNeed` custom resource: one ADD that waits in a full
//! pool, which only that ADD's node's plugin can raise.
//!
//! Each waiting ADD has its own entry, `<pool>.<node>.<slot>` ([`need_name`]),
//! with `slot` below [`MAX_NEED_SLOTS`], so one node holds at most that many
//! entries per pool. The entry's spec never changes; the ADD deletes it when
//! it is served or gives up. Its status is written by netendpoint-controller
//! only: where the ADD stands in its pool's queue (its arrival, the
//! resourceVersion of its creation, which orders the queue) and the address
//! promised to it. The controller believes an entry only after checking the
//! Pod it names (see `docs/design.md`, "The full-pool queue").
//!
//! Entries of older plugins have no `slot` and are named `<pool>.<node>`:
//! one per node and pool, rewritten by each waiting ADD of that node. The
//! controller still reads them (forced release, sticky pressure) but never
//! promises them an address.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::refs::PodRef;
use crate::schema::{PATTERN_CNI_NAME, PATTERN_DNS_SUBDOMAIN, PATTERN_IF_NAME};

/// Entries one node may hold per pool: the slot of an entry's name is below
/// this (the schema bounds it, since admission cannot count objects).
pub const MAX_NEED_SLOTS: u8 = 32;

/// Longest wait an entry may announce, in seconds: the plugin's longest
/// invocation (`ipam.timeout` is at most 110 s).
pub const MAX_NEED_WAIT_SECONDS: u32 = 110;

/// CEL rule of the CRD: the name is [`need_name`] of the spec, so a node's
/// entries of one pool are bounded by the slots.
pub const RULE_NEED_NAME: &str = "has(self.spec.slot) \
? (self.metadata.name.startsWith(self.spec.pool + '.' + self.spec.node + '.') \
&& self.metadata.name.substring(size(self.spec.pool) + size(self.spec.node) + 2).matches('^(0|[1-9][0-9]?)$') \
&& int(self.metadata.name.substring(size(self.spec.pool) + size(self.spec.node) + 2)) == self.spec.slot) \
: self.metadata.name == self.spec.pool + '.' + self.spec.node";

/// CEL rule of the CRD: a queue entry (with a slot) says which family,
/// sandbox and deadline it waits for; an entry of an older plugin says none.
pub const RULE_NEED_COMPLETE: &str = "has(self.spec.slot) == has(self.spec.ipFamily) \
&& has(self.spec.slot) == has(self.spec.containerID) && has(self.spec.slot) == has(self.spec.ifName) \
&& has(self.spec.slot) == has(self.spec.deadline)";

/// CEL rule of the CRD: a queue entry's spec never changes (its arrival is
/// the resourceVersion of its creation); an older plugin's entry may be
/// rewritten by the next ADD of its node.
pub const RULE_NEED_IMMUTABLE: &str = "!has(oldSelf.spec.slot) || self.spec == oldSelf.spec";

/// Most spans an entry lists (see [`NetworkEndpointNeedSpec::spans`]).
pub const MAX_NEED_SPANS: usize = 32;

/// One span of [`NetworkEndpointNeedSpec::spans`]: `first-last`, inclusive.
pub fn format_span(first: std::net::IpAddr, last: std::net::IpAddr) -> String {
    format!("{first}-{last}")
}

/// The inverse of [`format_span`]: `None` unless both ends are addresses of
/// one family in order.
pub fn parse_span(span: &str) -> Option<(std::net::IpAddr, std::net::IpAddr)> {
    let (a, b) = span.split_once('-')?;
    let (first, last): (std::net::IpAddr, std::net::IpAddr) = (a.parse().ok()?, b.parse().ok()?);
    let ordered = match (first, last) {
        (std::net::IpAddr::V4(x), std::net::IpAddr::V4(y)) => x <= y,
        (std::net::IpAddr::V6(x), std::net::IpAddr::V6(y)) => x <= y,
        _ => false,
    };
    ordered.then_some((first, last))
}

/// The name of entry `slot` of `node` in `pool`: `<pool>.<node>.<slot>`;
/// without a slot, the one entry an older plugin writes: `<pool>.<node>`.
pub fn need_name(pool: &str, node: &str, slot: Option<u8>) -> String {
    match slot {
        Some(s) => format!("{pool}.{node}.{s}"),
        None => format!("{pool}.{node}"),
    }
}

/// The address family an entry waits for.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
pub enum IpFamily {
    /// An IPv4 address.
    IPv4,
    /// An IPv6 address.
    IPv6,
}

impl IpFamily {
    /// The family of `ip`.
    pub fn of(ip: std::net::IpAddr) -> Self {
        if ip.is_ipv4() { Self::IPv4 } else { Self::IPv6 }
    }
}

#[allow(clippy::duplicated_attributes)] // kube(...) repeats printcolumn by design
/// An ADD that waits for an address of `pool` on `node`.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, KubeSchema)]
#[kube(
    group = "netendpoint.dev",
    version = "v1alpha1",
    kind = "NetworkEndpointNeed",
    plural = "networkendpointneeds",
    singular = "networkendpointneed",
    shortname = "nepneed",
    category = "netendpoint",
    status = "NetworkEndpointNeedStatus",
    derive = "PartialEq",
    doc = "NetworkEndpointNeed is one ADD waiting for an address of a full pool, in the pool's queue. Written by that ADD's node's plugin and deleted when the ADD is served or gives up; netendpoint-controller orders the queue, promises each release to the entry that waited longest, and may force a release that outlived its bound.",
    printcolumn(name = "Pool", type_ = "string", json_path = ".spec.pool"),
    printcolumn(name = "Family", type_ = "string", json_path = ".spec.ipFamily"),
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.node"),
    printcolumn(name = "Namespace", type_ = "string", json_path = ".spec.pod.namespace"),
    printcolumn(name = "Pod", type_ = "string", json_path = ".spec.pod.name"),
    printcolumn(name = "Promised", type_ = "string", json_path = ".status.promise.ip", description = "The address promised to this ADD"),
    printcolumn(name = "Deadline", type_ = "date", json_path = ".spec.deadline", description = "When the ADD stops waiting"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Arrival", type_ = "string", json_path = ".status.arrival", priority = 1, description = "The queue order: the resourceVersion of the entry's creation"),
    printcolumn(name = "Container", type_ = "string", json_path = ".spec.containerID", priority = 1),
    validation = Rule::new(RULE_NEED_NAME).message("metadata.name must be spec.pool + '.' + spec.node + '.' + spec.slot (or spec.pool + '.' + spec.node without a slot)"),
    validation = Rule::new(RULE_NEED_COMPLETE).message("an entry with spec.slot names spec.ipFamily, spec.containerID, spec.ifName and spec.deadline; one without names none"),
    validation = Rule::new(RULE_NEED_IMMUTABLE).message("the spec of an entry with a slot is immutable: its arrival is its creation")
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkEndpointNeedSpec {
    /// The pool that is full.
    #[schemars(length(min = 1, max = 202), pattern(PATTERN_DNS_SUBDOMAIN))]
    pub pool: String,
    /// The node whose ADD waits (the policy requires the caller's own node).
    #[schemars(length(min = 1, max = 253), pattern(PATTERN_DNS_SUBDOMAIN))]
    pub node: String,
    /// The Pod whose sandbox waits; the controller checks it before it acts.
    pub pod: PodRef,
    /// How long the ADD waits from the creation of this object (from its
    /// last write, for an entry without a slot).
    #[schemars(schema_with = "wait_schema")]
    pub wait_seconds: u32,
    /// The entry's slot among its node's entries of the pool (see [`need_name`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "slot_schema")]
    pub slot: Option<u8>,
    /// The family of the address the ADD waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_family: Option<IpFamily>,
    /// The waiting sandbox (CNI_CONTAINERID).
    #[serde(default, rename = "containerID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256), pattern(PATTERN_CNI_NAME))]
    pub container_id: Option<String>,
    /// Its interface (CNI_IFNAME).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 15), pattern(PATTERN_IF_NAME))]
    pub if_name: Option<String>,
    /// When the ADD stops waiting, on the API server's clock. The controller
    /// promises nothing after it, and deletes the entry once it has passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::pool_resource::date_time")]
    pub deadline: Option<Time>,
    /// The addresses this ADD can take, as inclusive spans `first-last`
    /// (its network's usable addresses of the family: ranges without
    /// gateways and exclusions). The controller promises it only an address
    /// in them, and finds free ones there when it has no config of the
    /// pool's network. Absent when the network has more than
    /// [`MAX_NEED_SPANS`] spans, and in entries of older plugins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "spans_schema")]
    pub spans: Option<Vec<String>>,
}

/// Where an entry stands, written by netendpoint-controller only.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkEndpointNeedStatus {
    /// The entry's place in the queue: the resourceVersion of its creation
    /// (Kubernetes resource versions of one resource compare as numbers,
    /// KEP-5504), kept here because the status writes change the object's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), pattern(r"^[1-9][0-9]*$"))]
    pub arrival: Option<String>,
    /// The address promised to this ADD: a release in progress it may take
    /// once it is gone, or a free address it may take now. Every honest path
    /// that finds an address treats a promised one as taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promise: Option<Promise>,
    /// Why the controller does not serve the entry, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
}

/// An address promised to one waiting ADD.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Promise {
    /// The address.
    #[schemars(length(min = 2, max = 45))]
    pub ip: String,
    /// The name of its lease: the release in progress the ADD waits for, or
    /// the free name it creates.
    #[schemars(length(min = 1, max = 253))]
    pub lease: String,
    /// True while that lease is being released (the ADD watches it by name
    /// until it is gone); false when the address is free now.
    #[serde(default)]
    pub releasing: bool,
}

fn wait_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "integer", "minimum": 0, "maximum": MAX_NEED_WAIT_SECONDS })
}

fn spans_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": MAX_NEED_SPANS,
        "items": { "type": "string", "minLength": 5, "maxLength": 79, "pattern": r"^[0-9A-Fa-f.:]+-[0-9A-Fa-f.:]+$" }
    })
}

fn slot_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "integer", "minimum": 0, "maximum": MAX_NEED_SLOTS - 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_slot_and_older_entries_have_none() {
        assert_eq!(need_name("pods", "node-a", Some(7)), "pods.node-a.7");
        assert_eq!(need_name("pods", "node-a", None), "pods.node-a");
        assert!(crate::is_dns1123_subdomain(&need_name("pods", "node-a", Some(MAX_NEED_SLOTS - 1))));
        // The rule reads the same parts: pool, '.', node, and '.', slot with one.
        for part in [
            "self.spec.pool + '.' + self.spec.node + '.'",
            ": self.metadata.name == self.spec.pool + '.' + self.spec.node",
        ] {
            assert!(RULE_NEED_NAME.contains(part), "{part}");
        }
    }

    #[test]
    fn spans_read_back_and_malformed_ones_are_refused() {
        let (a, b) = ("10.0.0.2".parse().unwrap(), "10.0.0.9".parse().unwrap());
        assert_eq!(parse_span(&format_span(a, b)), Some((a, b)));
        let v6 = format_span("fd00::1".parse().unwrap(), "fd00::ffff".parse().unwrap());
        assert!(v6.len() <= 79 && parse_span(&v6).is_some());
        for bad in ["10.0.0.9-10.0.0.2", "10.0.0.1-fd00::1", "10.0.0.1", "x-y", "10.0.0.1-"] {
            assert_eq!(parse_span(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_family_of_an_address() {
        assert_eq!(IpFamily::of("10.0.0.1".parse().unwrap()), IpFamily::IPv4);
        assert_eq!(IpFamily::of("fd00::1".parse().unwrap()), IpFamily::IPv6);
    }
}
