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

use crate::pools::PoolStats;

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
}

fn date_time(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "string", "format": "date-time" })
}

impl NetworkEndpointPoolStatus {
    /// The status of `stats` (without `updated_at`, which the writer stamps).
    pub fn of(stats: &PoolStats) -> Self {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let by: BTreeMap<String, i64> = stats.releasing_by_finalizer.iter().map(|(f, c)| (f.clone(), n(*c))).collect();
        NetworkEndpointPoolStatus {
            capacity: stats.capacity.map(|c| c.to_string()),
            used: n(stats.in_use),
            releasing: n(stats.releasing),
            free: stats.free().map(|f| f.to_string()),
            oldest_release_since: stats.oldest_release_since.map(Time),
            waiting_on: (!by.is_empty())
                .then(|| by.iter().map(|(f, c)| format!("{f}={c}")).collect::<Vec<_>>().join(",")),
            releasing_by_finalizer: by,
            updated_at: None,
        }
    }
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

    #[test]
    fn status_carries_the_stats_and_unknown_capacity_stays_absent() {
        let stats = PoolStats {
            pool: "p".into(),
            capacity: Some(u128::from(u64::MAX) + 1),
            in_use: 3,
            releasing: 2,
            releasing_by_finalizer: [("a/x".to_string(), 2), ("b/y".to_string(), 1)].into(),
            oldest_release: None,
            oldest_release_since: Some("2026-01-01T00:00:00Z".parse().unwrap()),
        };
        let s = NetworkEndpointPoolStatus::of(&stats);
        assert_eq!(s.capacity.as_deref(), Some("18446744073709551616"));
        assert_eq!(s.free.as_deref(), Some("18446744073709551611"));
        assert_eq!((s.used, s.releasing, s.waiting_on.as_deref()), (3, 2, Some("a/x=2,b/y=1")));
        let unknown = NetworkEndpointPoolStatus::of(&PoolStats { in_use: 1, ..PoolStats::default() });
        let json = serde_json::to_value(&unknown).unwrap();
        assert_eq!(json, serde_json::json!({"used": 1, "releasing": 0}));
    }
}
