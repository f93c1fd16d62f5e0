//! The installer's single error type.

use std::io;
use std::path::Path;

/// Everything that can go wrong in the installer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad command line (or environment variable of a flag); the clap error
    /// names the flag and carries the usage.
    #[error("invalid command line")]
    Cli(#[source] clap::Error),
    /// A file operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done, e.g. `write`.
        what: &'static str,
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The API server address is not known.
    #[error("no API server address: pass --server or set KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT")]
    NoServer,
    /// A source file has unusable content.
    #[error("{path}: {reason}")]
    BadContent {
        /// The source file.
        path: String,
        /// What is wrong with it (never its content: it may be a token).
        reason: String,
    },
    /// Neither `--node-name` nor `NODE_NAME` is set.
    #[error("no node name: pass --node-name or set NODE_NAME (the DaemonSet sets it from spec.nodeName)")]
    NoNodeName,
    /// The node name is not a valid Node object name.
    #[error("node name {0:?} (from --node-name or NODE_NAME) is not a DNS-1123 subdomain")]
    BadNodeName(String),
    /// Minting the plugin's token with the TokenRequest API failed.
    #[error("cannot mint the plugin's token: {0}")]
    Mint(String),
    /// The readiness check failed: the installed credentials do not work,
    /// belong to another node, or expire too soon.
    #[error("credentials not ready: {0}")]
    NotReady(String),
}

/// `Result` with the installer's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Maps an I/O error on `path` while doing `what` to [`Error::Io`].
pub fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> Error + 'a {
    move |source| Error::Io { what, path: path.display().to_string(), source }
}
