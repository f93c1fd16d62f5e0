//! Errors of `kubectl netendpoint`; every one ends the command with exit code 1.

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig could not be read or has no usable context.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// A request to the API server failed.
    #[error("{what}: {source}")]
    Api {
        /// What was asked.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A network config file given with `--config` could not be read.
    #[error("cannot read {path}: {source}")]
    ConfigFile {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The argument is neither an IP address nor `namespace/pod`.
    #[error("{0:?} is neither an IP address nor namespace/pod")]
    BadTarget(String),
    /// Nobody holds the IP or the Pod holds no lease.
    #[error("{0}")]
    NotFound(String),
    /// The request was refused (a live lease, no terminal, no confirmation, ...).
    #[error("{0}")]
    Refused(String),
    /// The output could not be written.
    #[error("cannot write the output: {0}")]
    Output(String),
}

impl Error {
    /// An API error while doing `what`.
    pub fn api(what: impl Into<String>, source: kube::Error) -> Self {
        Error::Api { what: what.into(), source }
    }
}

/// Result of the plugin's operations.
pub type Result<T> = std::result::Result<T, Error>;
