//! What the schemas of the CRDs share: the patterns of names, UIDs,
//! durations and finalizers, and the schema of a count; and the same
//! checks of DNS-1123 names in code, for names built before a create.

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

/// True if `s` is a valid DNS-1123 subdomain (RFC 1123, as Kubernetes checks object names).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// True if `s` is a valid DNS-1123 label: 1 to 63 of `[a-z0-9-]`, starting and ending alphanumeric.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// The schema of a count (an integer from 0).
pub(crate) fn count_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "integer", "minimum": 0, "maximum": 2_000_000_000 })
}
