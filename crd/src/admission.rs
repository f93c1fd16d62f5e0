//! The install objects the admission policies of deploy/ read, and what the
//! API server answers when one of them cannot be read.
//!
//! Three policies take a ConfigMap as parameters (see
//! deploy/admission-policies.yaml). When a binding finds no parameters
//! (the ConfigMap is missing, or the API server stopped reading ConfigMaps
//! for policies: kubernetes/kubernetes#133827), the API server refuses
//! with its own words, "failed to configure binding: no params found for
//! policy binding with `Deny` parameterNotFoundAction", which name neither
//! the ConfigMap nor the cure. [`MissingParams::of_message`] reads that
//! answer, and its `Display` says which object is missing and what brings
//! it back: the plugin, the controller and `kubectl netendpoint` show that
//! instead.

/// The ConfigMap of the agents and their finalizers (deploy/agents.yaml),
/// read by the policies `netendpoint-agent` and `netendpoint-lease-create`.
pub const AGENTS_CONFIGMAP: &str = "netendpoint-agents";
/// The ConfigMap of the pools' ranges, written by netendpoint-controller and
/// read by the policy `netendpoint-lease-range`.
pub const POOLS_CONFIGMAP: &str = "netendpoint-pools";

/// Each policy of deploy/ that takes parameters, and the ConfigMap its binding names.
pub const PARAM_POLICIES: [(&str, &str); 3] = [
    ("netendpoint-agent", AGENTS_CONFIGMAP),
    ("netendpoint-lease-create", AGENTS_CONFIGMAP),
    ("netendpoint-lease-range", POOLS_CONFIGMAP),
];

/// Every admission policy of deploy/ (deploy/admission-policies.yaml), each
/// bound by a ValidatingAdmissionPolicyBinding of the same name. Without any
/// of them a boundary of the threat model is open, or, for those that take
/// parameters, every request they match is refused.
pub const POLICIES: [&str; 9] = [
    "netendpoint-lease-integrity",
    "netendpoint-lease-create",
    "netendpoint-lease-range",
    "netendpoint-plugin",
    "netendpoint-controller",
    "netendpoint-need",
    "netendpoint-agent",
    "netendpoint-agent-scope",
    "netendpoint-installer-token",
];

/// What the API server says when a binding finds no parameters.
const NO_PARAMS: &str = "no params found for policy binding";

/// A refusal because an admission policy found no parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingParams {
    /// The policy that refused, as the API server named it.
    pub policy: String,
    /// The ConfigMap its binding reads, for a policy of deploy/.
    pub configmap: Option<&'static str>,
}

impl MissingParams {
    /// The refusal in the API server's `message`, if it is one for want of parameters.
    pub fn of_message(message: &str) -> Option<Self> {
        if !message.contains(NO_PARAMS) {
            return None;
        }
        let policy = message
            .split_once("ValidatingAdmissionPolicy '")
            .and_then(|(_, rest)| rest.split_once('\''))
            .map_or_else(String::new, |(name, _)| name.to_string());
        let configmap = PARAM_POLICIES.iter().find(|(p, _)| *p == policy).map(|(_, c)| *c);
        Some(Self { policy, configmap })
    }

    /// The refusal in a kube-rs error, if it is one for want of parameters.
    pub fn of_error(error: &kube::Error) -> Option<Self> {
        match error {
            kube::Error::Api(status) => Self::of_message(&status.message),
            _ => None,
        }
    }

    /// What brings the ConfigMap back.
    pub fn cure(&self) -> &'static str {
        match self.configmap {
            Some(AGENTS_CONFIGMAP) => {
                "apply it again with your agents' lines (`kubectl apply -k deploy/` makes it with the reference agent's)"
            }
            Some(POOLS_CONFIGMAP) => {
                "netendpoint-controller writes it again from the network config within a pass; `kubectl apply -k deploy/` makes it empty"
            }
            _ => "apply deploy/ again",
        }
    }
}

impl std::fmt::Display for MissingParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let policy = if self.policy.is_empty() { "an admission policy" } else { self.policy.as_str() };
        let object = self.configmap.map_or_else(
            || "parameters (the ConfigMap its binding names)".to_string(),
            |c| format!("ConfigMap {c} (namespace netendpoint-system unless installed elsewhere)"),
        );
        write!(
            f,
            "the API server's admission policy {policy} found no {object} and refused: the ConfigMap is missing \
             ({}), or it exists and the API servers stopped reading it after the policies were deleted and applied \
             again (kubernetes/kubernetes#133827: restart the API servers)",
            self.cure()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANSWER: &str = "networkendpoints.netendpoint.dev \"p.10.0.0.6\" is forbidden: ValidatingAdmissionPolicy \
        'netendpoint-lease-range' with binding 'netendpoint-lease-range' denied request: failed to configure \
        binding: no params found for policy binding with `Deny` parameterNotFoundAction";

    #[test]
    fn the_servers_answer_names_the_configmap_and_the_cure() {
        let m = MissingParams::of_message(ANSWER).unwrap();
        assert_eq!(m.policy, "netendpoint-lease-range");
        assert_eq!(m.configmap, Some(POOLS_CONFIGMAP));
        let text = m.to_string();
        assert!(
            text.contains("ConfigMap netendpoint-pools") && text.contains("netendpoint-controller writes it"),
            "{text}"
        );
        assert!(text.contains("restart the API servers"), "{text}");

        let agents =
            MissingParams::of_message(&ANSWER.replace("netendpoint-lease-range", "netendpoint-agent")).unwrap();
        assert_eq!(agents.configmap, Some(AGENTS_CONFIGMAP));
        assert!(agents.to_string().contains("ConfigMap netendpoint-agents"));
        let renamed = MissingParams::of_message(&ANSWER.replace("netendpoint-lease-range", "mine")).unwrap();
        assert_eq!(renamed.configmap, None);
        assert!(renamed.to_string().contains("policy mine found no parameters"));
    }

    #[test]
    fn other_refusals_are_none() {
        assert_eq!(MissingParams::of_message("ValidatingAdmissionPolicy 'netendpoint-agent' denied request"), None);
        assert_eq!(MissingParams::of_message(""), None);
    }
}
