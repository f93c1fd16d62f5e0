//! The `NetworkEndpointPool` custom resource: a status-only, per-pool view of
//! pool health for `kubectl get neppool`, written by the controller.
//!
//! It is not a source of truth: the leases are, and a pool's ranges come from
//! the network config. The controller writes the status of each pool it
//! counts (status subresource, server-side apply), at most once per few
//! seconds per pool, when the figures change.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Nothing to set: the resource only carries a status.
#[allow(clippy::duplicated_attributes)] // kube(...) repeats printcolumn by design
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[kube(
    group = "netendpoint.dev",
    version = "v1alpha1",
    kind = "NetworkEndpointPool",
    plural = "networkendpointpools",
    singular = "networkendpointpool",
    shortname = "neppool",
    category = "netendpoint",
    status = "NetworkEndpointPoolStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "NetworkEndpointPool shows the health of one pool (named by its pool label value): capacity, used, releasing and free addresses, and which finalizers the releases wait on. Written by netendpoint-controller; the NetworkEndpoints remain the source of truth.",
    printcolumn(
        name = "Capacity",
        type_ = "string",
        json_path = ".status.capacity",
        description = "Usable addresses, when the pool's ranges are known"
    ),
    printcolumn(name = "Used", type_ = "integer", json_path = ".status.used"),
    printcolumn(name = "Releasing", type_ = "integer", json_path = ".status.releasing"),
    printcolumn(name = "Free", type_ = "string", json_path = ".status.free"),
    printcolumn(
        name = "Oldest-Release",
        type_ = "date",
        json_path = ".status.oldestReleaseSince",
        description = "Age of the oldest release in progress"
    ),
    printcolumn(
        name = "Waiting-On",
        type_ = "string",
        json_path = ".status.waitingOn",
        description = "Finalizers releases wait on, with counts"
    ),
    printcolumn(name = "Updated", type_ = "date", json_path = ".status.updatedAt", priority = 1)
)]
pub struct NetworkEndpointPoolSpec {}

/// The figures of one pool.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkEndpointPoolStatus {
    /// Usable addresses (decimal: an IPv6 pool may exceed 64 bits); absent when the ranges are unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<String>,
    /// Leases not being released.
    pub used: i64,
    /// Leases being released, waiting on finalizers.
    pub releasing: i64,
    /// Addresses neither used nor releasing (decimal); absent when the capacity is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free: Option<String>,
    /// When the oldest release in progress was requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time")]
    pub oldest_release_since: Option<Time>,
    /// Releasing leases that still list each finalizer.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub releasing_by_finalizer: BTreeMap<String, i64>,
    /// The same as one column: `finalizer=count,...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_on: Option<String>,
    /// When the controller wrote these figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time")]
    pub updated_at: Option<Time>,
    /// Leases and releases per shard, for ADDs looking for a free address
    /// (a hint; see `NetworkEndpointShard`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<PoolSummary>,
}

/// The pool's shards with leases, as runs of consecutive shards.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolSummary {
    /// When the controller last confirmed the summary (at least every
    /// minute while it runs): an ADD that sees an older one treats the
    /// summary as stale and probes by create instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time")]
    pub confirmed_at: Option<Time>,
    /// Runs of consecutive shards that hold leases, in address order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4096))]
    pub runs: Vec<ShardRun>,
}

/// Consecutive shards, from the one starting at `first`: per shard, the
/// number of leased addresses and of releases, each a big-endian `u16`, base64.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardRun {
    /// The first address of the run's first shard.
    #[schemars(length(min = 2, max = 45))]
    pub first: String,
    /// Leased addresses per shard (live or releasing).
    #[schemars(length(max = 65536))]
    pub leased: String,
    /// Releases in progress per shard.
    #[schemars(length(max = 65536))]
    pub releasing: String,
}

pub(crate) fn date_time(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "string", "format": "date-time" })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn the_pool_resource_is_cluster_scoped_status_only_with_the_columns_people_read() {
        let crd = NetworkEndpointPool::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names.as_deref(), Some(&["neppool".to_string()][..]));
        let v = &crd.spec.versions[0];
        assert!(v.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(), "status subresource");
        let cols: Vec<_> = v.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
        assert_eq!(cols, ["Capacity", "Used", "Releasing", "Free", "Oldest-Release", "Waiting-On", "Updated"]);
    }
}
