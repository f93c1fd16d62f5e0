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
    /// An admission policy refused a write because it found no parameters:
    /// the message names the ConfigMap that is missing (or not read) and the cure.
    #[error("{what}: {missing}")]
    ParamsMissing {
        /// What was asked.
        what: String,
        /// The policy, the ConfigMap and the cure.
        missing: netendpoint_crd::admission::MissingParams,
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
    /// A check found the cluster's configuration inconsistent (the report says where).
    #[error("{0}")]
    Inconsistent(String),
    /// The output could not be written.
    #[error("cannot write the output: {0}")]
    Output(String),
}

impl Error {
    /// An API error while doing `what`; a refusal for want of an admission
    /// policy's parameters names the missing ConfigMap instead of quoting the server.
    pub fn api(what: impl Into<String>, source: kube::Error) -> Self {
        match netendpoint_crd::admission::MissingParams::of_error(&source) {
            Some(missing) => Error::ParamsMissing { what: what.into(), missing },
            None => Error::Api { what: what.into(), source },
        }
    }
}

/// Result of the plugin's operations.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_without_its_parameters_names_the_configmap() {
        let status = kube::core::Status::failure(
            "ValidatingAdmissionPolicy 'netendpoint-agent' with binding 'netendpoint-agent' denied request: \
             failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction",
            "Invalid",
        )
        .with_code(422);
        let e = Error::api("remove the finalizers of p.10.0.0.1", kube::Error::Api(Box::new(status)));
        let text = e.to_string();
        assert!(matches!(e, Error::ParamsMissing { .. }), "{e:?}");
        assert!(text.contains("p.10.0.0.1") && text.contains("ConfigMap netendpoint-agents"), "{text}");
    }
}
