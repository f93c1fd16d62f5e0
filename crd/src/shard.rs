//! The `NetworkEndpointShard` custom resource: which addresses of one
//! aligned block of a pool are leased or being released, as a bitmap the
//! controller writes from its one watch of the leases.
//!
//! It is a hint, never the lock: an ADD reads it (a GET by name) to pick an
//! address that is probably free, and still claims by creating the lease.
//! A stale bit costs that ADD one refused create, never a second holder.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::schema::PATTERN_DNS_SUBDOMAIN;

/// log2 of the addresses in a shard: an aligned IPv4 /24 or IPv6 /120.
pub const SHARD_BITS: u32 = 8;
/// Addresses in a shard.
pub const SHARD_SIZE: u32 = 1 << SHARD_BITS;

#[allow(clippy::duplicated_attributes)] // kube(...) repeats printcolumn by design
/// What a shard covers. Written once by the controller when it creates the
/// object; the name is `endpoint_name(pool, first)`.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[kube(
    group = "netendpoint.dev",
    version = "v1alpha1",
    kind = "NetworkEndpointShard",
    plural = "networkendpointshards",
    singular = "networkendpointshard",
    shortname = "nepshard",
    category = "netendpoint",
    status = "NetworkEndpointShardStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "NetworkEndpointShard shows which addresses of one aligned /24 (IPv4) or /120 (IPv6) of a pool are leased or being released. Written by netendpoint-controller as a hint for ADDs; the NetworkEndpoints remain the source of truth.",
    printcolumn(name = "Pool", type_ = "string", json_path = ".spec.pool"),
    printcolumn(name = "First", type_ = "string", json_path = ".spec.first"),
    printcolumn(name = "Leased", type_ = "integer", json_path = ".status.leased"),
    printcolumn(name = "Releasing", type_ = "integer", json_path = ".status.releasing"),
    printcolumn(name = "Updated", type_ = "date", json_path = ".status.updatedAt")
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkEndpointShardSpec {
    /// The pool.
    #[schemars(length(min = 1, max = 202), pattern(PATTERN_DNS_SUBDOMAIN))]
    pub pool: String,
    /// The shard's first address (aligned to [`SHARD_SIZE`]).
    #[schemars(length(min = 2, max = 45))]
    pub first: String,
}

/// The shard's addresses, as bitmaps: bit `i` (byte `i / 8`, bit `i % 8`,
/// least significant first) is the address `first + i`; base64 (standard
/// alphabet, padded) of [`SHARD_SIZE`] / 8 bytes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkEndpointShardStatus {
    /// Addresses with a lease, live or being released.
    #[schemars(length(max = 64))]
    pub leased_bits: String,
    /// Addresses whose lease is being released (a subset of `leasedBits`).
    #[schemars(length(max = 64))]
    pub releasing_bits: String,
    /// How many addresses have a lease.
    #[schemars(schema_with = "crate::schema::count_schema")]
    pub leased: u32,
    /// How many of them are being released.
    #[schemars(schema_with = "crate::schema::count_schema")]
    pub releasing: u32,
    /// When the controller wrote this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::pool_resource::date_time")]
    pub updated_at: Option<Time>,
}
