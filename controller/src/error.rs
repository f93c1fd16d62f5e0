//! The controller's one error type.

/// What can stop the controller. Errors of single writes are logged and
/// retried on the next pass; these are the ones it cannot go on without.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable kubeconfig or in-cluster configuration.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[source] kube::config::InferConfigError),
    /// The kubeconfig given by flag could not be read or used.
    #[error("kubeconfig file: {0}")]
    KubeconfigFile(#[source] kube::config::KubeconfigError),
    /// The client could not be built from the configuration.
    #[error("kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// Leader election could not start.
    #[error("leader election: {0}")]
    Lease(#[source] kube_lease_manager::LeaseManagerError),
    /// The SIGTERM handler could not be installed.
    #[error("install the SIGTERM handler: {source}")]
    Signal {
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A listening socket could not be opened.
    #[error("listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A flag has a value the controller cannot use.
    #[error("--{flag}: {reason}")]
    Flag {
        /// The flag.
        flag: &'static str,
        /// Why.
        reason: String,
    },
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
