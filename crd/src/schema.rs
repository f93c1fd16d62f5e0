//! What the schemas of the CRDs share: the patterns of names, UIDs,
//! durations and finalizers, and the schema of a count.

/// A DNS-1123 subdomain (object names, node and pool names).
pub const PATTERN_DNS_SUBDOMAIN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A DNS-1123 label (namespaces).
pub const PATTERN_DNS_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// What the CNI specification allows in a network name and a container ID.
pub const PATTERN_CNI_NAME: &str = r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$";
/// An interface name: no `/`, `:` or whitespace (the CNI specification).
pub const PATTERN_IF_NAME: &str = r"^[^/:\s]+$";
/// A Kubernetes UID.
pub const PATTERN_UID: &str = r"^[a-zA-Z0-9][a-zA-Z0-9-]*$";
/// A duration as netendpoint writes it (`600s`, `1500ms`, `1h30m`).
pub const PATTERN_DURATION: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h)?)+$";
/// A finalizer: a qualified name `<domain>/<name>`.
pub const PATTERN_FINALIZER: &str = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$";

/// The schema of a count (an integer from 0).
pub(crate) fn count_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "integer", "minimum": 0, "maximum": 2_000_000_000 })
}
