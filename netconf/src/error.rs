//! The one error type of netendpoint-netconf.

/// What can be wrong with a network configuration. No variant carries more
/// of the input than the value at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A field of an `ipam` section is invalid. The plugin answers it with
    /// CNI code 7 (invalid network config), message unchanged.
    #[error("invalid network config: {field} {reason}")]
    InvalidConfig {
        /// The field path, e.g. `ipam.ranges[0][0].subnet`.
        field: String,
        /// What is wrong, quoting the bad value.
        reason: String,
    },
    /// A network config file is not JSON: none of its networks is read.
    #[error("{file}: not JSON ({source}); its networks are skipped")]
    NotJson {
        /// The file (or ConfigMap key).
        file: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A netendpoint `ipam` section of a network config file does not
    /// validate: that network is skipped, the file's others are read.
    #[error("{file}: invalid ipam section ({source}); that network is skipped")]
    InvalidSection {
        /// The file (or ConfigMap key).
        file: String,
        /// Why the section does not validate.
        #[source]
        source: Box<Error>,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An invalid-config error naming `field`.
    pub(crate) fn config(field: &str, reason: &str) -> Self {
        Self::InvalidConfig { field: field.to_string(), reason: reason.to_string() }
    }
}
