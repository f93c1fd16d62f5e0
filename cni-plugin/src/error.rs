//! The plugin's one error type, and the CNI error code of each variant.
//!
//! Codes below 100 are the spec's own. Codes from 100 up are this plugin's,
//! documented in `docs/errors.md`.

use std::time::Duration;

/// The admission policy that holds a lease to its pool's ranges, and the
/// words of its refusal when the pool has none registered yet
/// (`deploy/admission-policies.yaml`).
pub const POLICY_LEASE_RANGE: &str = "netendpoint-lease-range";
/// See [`POLICY_LEASE_RANGE`].
pub const NO_RANGES: &str = "has no ranges";

/// Everything an invocation can fail with. The message of each variant names
/// the field, variable or object at fault; none of them carries stdin content
/// beyond the offending value itself.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `cniVersion` is not one this plugin speaks (code 1).
    #[error("incompatible CNI version {version:?}; supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0")]
    IncompatibleVersion {
        /// The version asked for.
        version: String,
    },
    /// The command does not exist in the requested spec version (code 1).
    #[error("{command} is not defined in CNI {version}")]
    CommandNotInVersion {
        /// The command.
        command: &'static str,
        /// The requested version.
        version: &'static str,
    },
    /// A CNI_* variable is missing or malformed (code 4).
    #[error("{var}: {reason}")]
    InvalidEnv {
        /// The variable at fault.
        var: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// stdin is not JSON, or a prevResult cannot be read (code 6).
    #[error("cannot decode {what}: {reason}")]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// The decoder's message (it quotes no more than the offending token).
        reason: String,
    },
    /// A field of the network configuration is invalid (code 7).
    #[error("invalid network config: {field} {reason}")]
    InvalidConfig {
        /// The field path, e.g. `ipam.ranges[0][0].subnet`.
        field: String,
        /// What is wrong, quoting the bad value.
        reason: String,
    },
    /// A local file could not be read or written (code 5).
    #[error("{what} {path}: {source}")]
    Io {
        /// What the file is for.
        what: &'static str,
        /// Its path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// No IP of the range set is free, and none was released within `waitForRelease` (code 100).
    #[error("{0}")]
    PoolExhausted(Box<Exhaustion>),
    /// The API server could not be reached (code 101). The runtime should retry.
    #[error("API server unreachable while trying to {op}: {source}")]
    ApiUnreachable {
        /// The operation that failed.
        op: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// The API server refused the plugin's credentials or permissions (code 102).
    #[error("API server refused to {op} (HTTP {status}): {message}")]
    ApiDenied {
        /// The operation that failed.
        op: String,
        /// 401 or 403.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The NetworkEndpoint CRD is not installed (code 103).
    #[error("the NetworkEndpoint CRD (networkendpoints.netendpoint.dev) is not installed; apply deploy/crd.yaml")]
    CrdMissing,
    /// The kubeconfig cannot be read or used (code 104).
    #[error("kubeconfig {path}: {reason}")]
    Kubeconfig {
        /// The path from `ipam.kubeconfig`.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The kubeconfig's credentials cannot be sent (code 104), e.g. a token
    /// that is no valid HTTP header value. No request reached the server, so
    /// this is not "unreachable": STATUS fails at once.
    #[error("the kubeconfig's credentials cannot be used to {op}: {source}")]
    Credentials {
        /// The operation that failed.
        op: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// An admission policy refused a write because it found no parameters
    /// (code 110): an install object it reads is missing, or the API server
    /// does not read it. Deletes are never refused so.
    #[error("API server refused to {op}: {missing}")]
    ParamsMissing {
        /// The operation that failed.
        op: String,
        /// The policy, the ConfigMap and the cure.
        missing: netendpoint_crd::admission::MissingParams,
    },
    /// Any other API error (code 105).
    #[error("API server error while trying to {op}: {source}")]
    Api {
        /// The operation that failed.
        op: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// CHECK found the lease missing or different from prevResult (code 106).
    #[error("CHECK failed: {0}")]
    CheckFailed(String),
    /// Several independent steps failed (DEL, GC, rollback); all are reported (code of the first).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Many(Vec<Error>),
    /// STATUS: the plugin cannot serve an ADD now (code 50).
    #[error("not ready: {0}")]
    NotReady(Box<Error>),
    /// The node name is not a registered Node object (code 107). Leases under
    /// such a name would look like leases of a vanished node to every other
    /// node, so none is created.
    #[error(
        "node {node:?} is not a registered Node: refusing to lease IPs under it (set ipam.nodeName, or check the node-name file the installer writes)"
    )]
    NodeNotRegistered {
        /// The node name the plugin resolved.
        node: String,
    },
    /// The API server contradicted itself (code 105).
    #[error("API server answers are inconsistent: {0}")]
    Inconsistent(String),
    /// A stored lease cannot be read back: its IP or prefix length does not
    /// make an address (code 105). The plugin never writes such a lease.
    #[error("lease {name:?} as stored is invalid: {reason}")]
    InvalidLease {
        /// The object name.
        name: String,
        /// What does not parse, quoting it.
        reason: String,
    },
    /// A requested static IP can never be given as asked: malformed, outside
    /// every range, excluded, a gateway, or a second address of one family
    /// (code 7).
    #[error("requested IP {ip} (from {from}) refused: {reason}")]
    StaticIpRefused {
        /// The address (or the entry that is not one), quoted as given.
        ip: String,
        /// Where the request came from, e.g. `runtimeConfig.ips`.
        from: &'static str,
        /// Why, naming the config field at stake.
        reason: String,
    },
    /// A requested static IP is held by a live lease of another attachment
    /// (code 108). A static request never takes a live lease's address.
    #[error("requested IP {ip} of pool {pool:?} is in use by {holder}; it is given only after that lease is released")]
    StaticIpTaken {
        /// The address.
        ip: std::net::IpAddr,
        /// The pool.
        pool: String,
        /// Who holds it: pod, node, container and interface of the lease.
        holder: String,
    },
    /// A requested static IP was still being released when `waitForRelease`
    /// ran out (code 109). A static request never forces a release.
    #[error(
        "requested IP {ip} of pool {pool:?} is still being released by {holder}, waiting on finalizers {finalizers:?}; waited {:.1}s (ipam.waitForRelease) and forced nothing", waited.as_secs_f64()
    )]
    StaticIpReleasing {
        /// The address.
        ip: std::net::IpAddr,
        /// The pool.
        pool: String,
        /// Who held it.
        holder: String,
        /// Finalizers still on the lease.
        finalizers: Vec<String>,
        /// How long the ADD waited.
        waited: Duration,
    },
    /// A sticky Pod's previous lease was not released and acknowledged within
    /// `ipam.sticky.waitForOld` (code 11, "try again later"). Its hold stays,
    /// so no other Pod takes the IP; the runtime retries the sandbox.
    #[error(
        "sticky IP {ip} of pool {pool} is still held by lease {lease}: waited {waited:.1?} (ipam.sticky.waitForOld) for {waiting_for}; try again later"
    )]
    StickyWait {
        /// The pool.
        pool: String,
        /// The address kept for the Pod.
        ip: std::net::IpAddr,
        /// The previous lease's name.
        lease: String,
        /// What it still waits for.
        waiting_for: String,
        /// How long this ADD waited.
        waited: Duration,
    },
    /// The invocation ran past `ipam.timeout` (code 11, "try again later").
    /// Whatever an ADD had claimed was released first.
    #[error("{command} did not finish within ipam.timeout ({after:.1?}); try again later")]
    DeadlineExceeded {
        /// The CNI command.
        command: &'static str,
        /// How long it ran.
        after: Duration,
    },
}

/// Why a range set has no IP to give, in figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhaustion {
    /// The pool.
    pub pool: String,
    /// Usable addresses in the range set.
    pub capacity: u128,
    /// Addresses held by endpoints (allocated or releasing).
    pub in_use: usize,
    /// Of those, endpoints waiting on finalizers.
    pub releasing: usize,
    /// Finalizers holding releasing endpoints, with how many each holds.
    pub waiting_on: Vec<(String, usize)>,
    /// How long the ADD waited for a release.
    pub waited: Duration,
    /// Without summaries of the pool (no controller summarises it): the
    /// creates that were refused. The figures above then count only what
    /// the ADD saw.
    pub blind_probes: Option<usize>,
    /// The ADD's entry in the pool's queue, if it had one (and why the
    /// controller did not serve it, if it said so).
    pub queued: Option<String>,
}

impl std::fmt::Display for Exhaustion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(n) = self.blind_probes {
            write!(
                f,
                "pool {:?}: no free IP found in {n} tries of {} addresses, and no summary of the pool to look \
                 further (is netendpoint-controller running and selecting this pool?)",
                self.pool, self.capacity
            )?;
            if self.waited > Duration::ZERO {
                write!(f, "; waited {:.1}s (ipam.waitForRelease)", self.waited.as_secs_f64())?;
            }
            return Ok(());
        }
        write!(
            f,
            "pool {:?} exhausted: {} of {} IPs in use, {} held by terminating endpoints",
            self.pool, self.in_use, self.capacity, self.releasing
        )?;
        if !self.waiting_on.is_empty() {
            let list: Vec<String> = self.waiting_on.iter().map(|(f, n)| format!("{f} ({n})")).collect();
            write!(f, " waiting on finalizers [{}]", list.join(", "))?;
        }
        if self.releasing > 0 || self.queued.is_some() {
            write!(f, "; waited {:.1}s for a release (ipam.waitForRelease)", self.waited.as_secs_f64())?;
        }
        if let Some(entry) = &self.queued {
            write!(f, " in the pool's queue as NetworkEndpointNeed {entry}")?;
        }
        Ok(())
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Bad network config is code 7 and names the field at fault (invariant
/// 10): a netendpoint-netconf error becomes [`Error::InvalidConfig`] with
/// the same field and reason, so its message is unchanged.
impl From<netendpoint_netconf::Error> for Error {
    fn from(e: netendpoint_netconf::Error) -> Self {
        use netendpoint_netconf::Error as Netconf;
        match e {
            Netconf::InvalidConfig { field, reason } => Self::InvalidConfig { field, reason },
            // Errors of reading config files, which the plugin never reads: code 7 too.
            Netconf::NotJson { file, source } => {
                Self::InvalidConfig { field: file, reason: format!("is not JSON ({source})") }
            }
            Netconf::InvalidSection { source, .. } => Self::from(*source),
        }
    }
}

impl Error {
    /// An invalid-config error naming `field`.
    pub fn config(field: &str, reason: &str) -> Self {
        Self::InvalidConfig { field: field.to_string(), reason: reason.to_string() }
    }

    /// The CNI error code.
    pub fn code(&self) -> u32 {
        match self {
            Self::IncompatibleVersion { .. } | Self::CommandNotInVersion { .. } => 1,
            Self::InvalidEnv { .. } => 4,
            Self::DeadlineExceeded { .. } | Self::StickyWait { .. } => 11,
            Self::NodeNotRegistered { .. } => 107,
            Self::Inconsistent(_) | Self::InvalidLease { .. } => 105,
            Self::Io { .. } => 5,
            Self::Decode { .. } => 6,
            Self::InvalidConfig { .. } | Self::StaticIpRefused { .. } => 7,
            Self::StaticIpTaken { .. } => 108,
            Self::StaticIpReleasing { .. } => 109,
            Self::NotReady(_) => 50,
            Self::PoolExhausted(_) => 100,
            Self::ApiUnreachable { .. } => 101,
            Self::ApiDenied { .. } => 102,
            Self::CrdMissing => 103,
            Self::Kubeconfig { .. } | Self::Credentials { .. } => 104,
            Self::Api { .. } => 105,
            Self::ParamsMissing { .. } => 110,
            Self::CheckFailed(_) => 106,
            Self::Many(errs) => errs.first().map_or(105, Error::code),
        }
    }

    /// Errors that a working node sees while the API server restarts or
    /// sheds load: no connection, no answer, 429 and 5xx. Worth retrying
    /// within the invocation's deadline.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::ApiUnreachable { .. } | Self::DeadlineExceeded { .. } => true,
            Self::Api { source: kube::Error::Api(s), .. } => s.code == 429 || s.code >= 500,
            Self::Many(errs) => errs.iter().all(Error::is_transient),
            _ => false,
        }
    }

    /// True when admission refused a lease because its pool's ranges are
    /// not registered yet: the policy `netendpoint-lease-range` reads them
    /// from the ConfigMap `netendpoint-pools`, which netendpoint-controller
    /// writes once it runs (after an install, or after an upgrade from a
    /// release without that policy, until the new controller leads). The
    /// refusal wrote nothing and ends by itself, so an ADD retries it.
    pub fn pool_not_registered(&self) -> bool {
        matches!(self, Self::ApiDenied { status: 403, message, .. }
            if message.contains(POLICY_LEASE_RANGE) && message.contains(NO_RANGES))
    }

    /// True when the request that failed was refused outright, so it wrote
    /// nothing (credentials, permissions, a missing CRD, admission).
    pub fn wrote_nothing(&self) -> bool {
        match self {
            Self::ApiDenied { .. }
            | Self::CrdMissing
            | Self::Credentials { .. }
            | Self::Kubeconfig { .. }
            | Self::ParamsMissing { .. } => true,
            Self::Api { source: kube::Error::Api(s), .. } => {
                (400..500).contains(&s.code) && s.code != 408 && s.code != 429
            }
            _ => false,
        }
    }

    /// `Ok` when `errors` is empty; otherwise every error, in order.
    pub fn collect(mut errors: Vec<Error>) -> Result<()> {
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(Self::Many(errors)),
        }
    }

    /// The one-line message for the error JSON's `msg`.
    pub fn short(&self) -> String {
        self.to_string()
    }

    /// What caused this error: one chain per failed step (several for
    /// [`Error::Many`]), each the messages of the
    /// [`source`](std::error::Error::source) chain, outermost first. Empty
    /// chains are kept, so the result lines up with the steps.
    pub fn cause_chains(&self) -> Vec<Vec<String>> {
        match self {
            Self::Many(errors) => errors.iter().flat_map(Error::cause_chains).collect(),
            Self::NotReady(inner) => inner.cause_chains(),
            _ => {
                let mut chain = Vec::new();
                let mut next = std::error::Error::source(self);
                while let Some(cause) = next {
                    chain.push(cause.to_string());
                    next = cause.source();
                }
                vec![chain]
            }
        }
    }

    /// Classifies a kube-rs error from operation `op` into the variant a user can act on.
    pub fn from_kube(op: impl Into<String>, source: kube::Error) -> Self {
        let op = op.into();
        if let Some(missing) = netendpoint_crd::admission::MissingParams::of_error(&source) {
            return Self::ParamsMissing { op, missing };
        }
        match &source {
            kube::Error::Api(status) if status.code == 401 || status.code == 403 => {
                Self::ApiDenied { op, status: status.code, message: status.message.clone() }
            }
            kube::Error::Api(status)
                if status.code == 404 && status.details.as_ref().is_none_or(|d| d.name.is_empty()) =>
            {
                // 404 on a collection (no object name) means the resource type itself is unknown.
                Self::CrdMissing
            }
            kube::Error::Auth(_) => Self::Credentials { op, source },
            kube::Error::Service(e) if e.is::<kube::client::AuthError>() => Self::Credentials { op, source },
            kube::Error::HyperError(_) | kube::Error::Service(_) => Self::ApiUnreachable { op, source },
            _ => Self::Api { op, source },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_that_cannot_be_sent_are_code_104_not_unreachable() {
        let bad_header = http::HeaderValue::from_str("Bearer a\nb").unwrap_err();
        let auth = kube::Error::Service(Box::new(kube::client::AuthError::InvalidBearerToken(bad_header)));
        let e = Error::from_kube("list leases", auth);
        assert!(matches!(e, Error::Credentials { .. }), "{e:?}");
        assert_eq!(e.code(), 104);
        assert!(e.to_string().contains("credentials cannot be used to list leases"), "{e}");

        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = Error::from_kube("list leases", kube::Error::Service(Box::new(refused)));
        assert!(matches!(e, Error::ApiUnreachable { .. }), "{e:?}");
        assert_eq!(e.code(), 101);
    }

    #[test]
    fn a_policy_without_its_parameters_is_code_110_naming_the_configmap() {
        let status = kube::core::Status::failure(
            "networkendpoints.netendpoint.dev \"p.10.0.0.6\" is forbidden: ValidatingAdmissionPolicy \
             'netendpoint-lease-create' with binding 'netendpoint-lease-create' denied request: failed to configure \
             binding: no params found for policy binding with `Deny` parameterNotFoundAction",
            "Invalid",
        )
        .with_code(422);
        let e = Error::from_kube("create lease p.10.0.0.6", kube::Error::Api(Box::new(status)));
        assert_eq!(e.code(), 110, "{e:?}");
        assert!(e.wrote_nothing());
        let msg = e.short();
        assert!(msg.contains("create lease p.10.0.0.6") && msg.contains("ConfigMap netendpoint-agents"), "{msg}");
    }

    #[test]
    fn bad_network_config_is_code_7_with_the_message_of_netconf() {
        let ipam = serde_json::json!({"ranges": [[{"subnet": "10.0.0.0/33"}]]});
        let netconf = netendpoint_netconf::IpamConfig::parse(&ipam, "net").unwrap_err();
        let text = netconf.to_string();
        let e = Error::from(netconf);
        assert_eq!(e.code(), 7);
        assert_eq!(e.to_string(), text);
        assert!(text.contains("ipam.ranges[0][0].subnet") && text.contains("10.0.0.0/33"), "{text}");
    }
}
