//! The `NetworkEndpointNeed` custom resource: the signal that an ADD on a
//! node waits in a full pool, which only that node's plugin can raise.
//!
//! One object per pool and node (`<pool>.<node>`), created or updated by the
//! waiting ADD and deleted when it ends; the controller acts on it only
//! after checking that the named Pod exists, is bound to that node and has
//! not started (see `docs/design.md`, "Trust").

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::refs::PodRef;
use crate::schema::PATTERN_DNS_SUBDOMAIN;

/// CEL rule of the CRD: the name is [`need_name`]`(spec.pool, spec.node)`,
/// so each node holds at most one need per pool.
pub const RULE_NEED_NAME: &str = "self.metadata.name == self.spec.pool + '.' + self.spec.node";

/// The name of the need of `pool` on `node`: `<pool>.<node>`, the one name
/// [`RULE_NEED_NAME`] admits for that pool and node.
pub fn need_name(pool: &str, node: &str) -> String {
    format!("{pool}.{node}")
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
    derive = "PartialEq",
    doc = "NetworkEndpointNeed says that an ADD on a node waits for an address of a full pool. Written by that node's plugin; netendpoint-controller may then force a release that outlived its bound, or end the oldest sticky hold.",
    printcolumn(name = "Pool", type_ = "string", json_path = ".spec.pool"),
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.node"),
    printcolumn(name = "Namespace", type_ = "string", json_path = ".spec.pod.namespace"),
    printcolumn(name = "Pod", type_ = "string", json_path = ".spec.pod.name"),
    printcolumn(name = "Wait", type_ = "integer", json_path = ".spec.waitSeconds"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new(RULE_NEED_NAME).message("metadata.name must be spec.pool + '.' + spec.node")
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
    /// How long the ADD waits from the last write of this object.
    #[schemars(schema_with = "wait_schema")]
    pub wait_seconds: u32,
}

fn wait_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "integer", "minimum": 0, "maximum": 110 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_need_is_named_as_its_rule_requires() {
        assert_eq!(need_name("pods", "node-a.example"), "pods.node-a.example");
        let rule = RULE_NEED_NAME.replace("self.spec.pool", "'pods'").replace("self.spec.node", "'node-a.example'");
        assert_eq!(rule, "self.metadata.name == 'pods' + '.' + 'node-a.example'", "the rule is pool, '.', node");
    }
}
