//! The crate's single error type.

use std::path::PathBuf;

/// Everything that can go wrong in the agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig given with `--kubeconfig` could not be loaded.
    #[error("cannot load kubeconfig")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    /// No kubeconfig was given and neither in-cluster config nor `KUBECONFIG` worked.
    #[error("cannot infer a Kubernetes client configuration")]
    InferConfig(#[source] kube::config::InferConfigError),
    /// A Kubernetes API call failed.
    #[error("kubernetes API call failed: {0}")]
    Kube(#[source] kube::Error),
    /// Patching our finalizer off (or lazily onto) an endpoint failed, other
    /// than because the endpoint is gone or was replaced.
    #[error("cannot patch our finalizer on endpoint {endpoint}: {source}")]
    Finalizer {
        /// The endpoint's name.
        endpoint: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// Reading or writing a local file (state file, event log).
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A state file exists but is not valid JSON of the expected shape.
    #[error("{}: corrupt state file", path.display())]
    StateFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// An `ip` command of the Linux dataplane failed.
    #[error("`ip {args}` failed: {stderr}")]
    IpCommand {
        /// The arguments given to `ip`.
        args: String,
        /// Its standard error.
        stderr: String,
    },
    /// An endpoint lacks what the agent needs (a parsable IP, a UID, a name).
    #[error("endpoint {name:?}: {reason}")]
    BadEndpoint {
        /// The object name, if any.
        name: String,
        /// What is missing.
        reason: String,
    },
    /// Several independent failures, e.g. from a resync that went on past errors.
    #[error("{} errors: {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Many(Vec<Error>),
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Turns a list of errors from an operation that continued past them into one result.
    pub fn collect(mut errors: Vec<Error>) -> Result<()> {
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(Error::Many(errors)),
        }
    }
}
