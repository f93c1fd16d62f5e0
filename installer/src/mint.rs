//! The plugin's own credentials, minted with the TokenRequest API.
//!
//! A copy of the installer pod's projected token dies with that pod: the API
//! server rejects a Pod-bound token once the Pod object is deleted, so every
//! rollout of the installer DaemonSet (and its uninstall) would leave the
//! node's plugin with a dead token until the next pod's first sync. Instead,
//! the installer asks for a token of the plugin's ServiceAccount bound to
//! this node's Node object. It stays valid until its expiry or until the Node
//! object is deleted, whatever happens to the installer pod, and the API
//! server adds `authentication.kubernetes.io/node-name` to it, which the
//! admission policies in deploy/ read.
//!
//! The installer replaces the token once a jittered 40 to 50 % of its
//! lifetime has passed, so a token on disk always has at least half its
//! lifetime left while the installer runs, and at least that long once it
//! stops.

use std::path::Path;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use tracing::info;

use crate::error::{Error, Result};

/// The ServiceAccount a token is minted for, as `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl std::str::FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once('/') {
            Some((ns, name))
                if netendpoint_crd::is_dns1123_label(ns) && netendpoint_crd::is_dns1123_subdomain(name) =>
            {
                Ok(Self { namespace: ns.into(), name: name.into() })
            }
            _ => Err("expected NAMESPACE/SERVICEACCOUNT".into()),
        }
    }
}

/// A minted token and when to replace it.
struct Minted {
    token: Vec<u8>,
    refresh_at: SystemTime,
}

/// Mints and refreshes the plugin's node-bound token.
pub struct Minter {
    api: Api<ServiceAccount>,
    target: Target,
    node: String,
    ttl: Duration,
    current: Option<Minted>,
}

/// When to replace a token issued at `issued` that expires at `expires`:
/// after `0.4 + 0.1 * jitter` of its lifetime (`jitter` in `[0, 1)`), so
/// nodes minted together do not refresh together, and the token still has
/// at least half its lifetime left when it is replaced.
pub fn refresh_at(issued: SystemTime, expires: SystemTime, jitter: f64) -> SystemTime {
    let life = expires.duration_since(issued).unwrap_or_default();
    issued + life.mul_f64(0.4 + 0.1 * jitter.clamp(0.0, 1.0))
}

impl Minter {
    /// A minter that authenticates with the installer's own token file
    /// `token_file` (re-read as the kubelet rotates it) against `server`.
    pub async fn new(
        server: &str,
        ca_file: &Path,
        token_file: &Path,
        target: Target,
        node: String,
        ttl: Duration,
    ) -> Result<Self> {
        // JSON is YAML: serde_json quotes the paths and the URL.
        let text = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "installer", "cluster": {"server": server, "certificate-authority": ca_file}}],
            "users": [{"name": "installer", "user": {"tokenFile": token_file}}],
            "contexts": [{"name": "installer", "context": {"cluster": "installer", "user": "installer"}}],
            "current-context": "installer",
        })
        .to_string();
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&text)
            .map_err(|e| Error::Mint(format!("client configuration: {e}")))?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|e| Error::Mint(format!("client configuration: {e}")))?;
        let client = kube::Client::try_from(config).map_err(|e| Error::Mint(format!("client: {e}")))?;
        let api = Api::namespaced(client, &target.namespace);
        Ok(Self { api, target, node, ttl, current: None })
    }

    /// The token the plugin should use at `now`: the current one, or a fresh
    /// one when none was minted yet or the current one is due for refresh.
    pub async fn token(&mut self, now: SystemTime) -> Result<&[u8]> {
        let due = self.current.as_ref().is_none_or(|m| now >= m.refresh_at);
        if due {
            let minted = self.mint(now).await?;
            self.current = Some(minted);
        }
        Ok(self.current.as_ref().map(|m| m.token.as_slice()).unwrap_or_default())
    }

    async fn mint(&self, now: SystemTime) -> Result<Minted> {
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                // Empty: the API server's own audiences, as for the kubelet's tokens.
                audiences: Some(Vec::new()),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Node".into()),
                    name: Some(self.node.clone()),
                    uid: None,
                }),
                expiration_seconds: Some(i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX)),
            }),
            ..Default::default()
        };
        let answer =
            self.api.create_token_request(&self.target.name, &PostParams::default(), &request).await.map_err(|e| {
                Error::Mint(format!("TokenRequest for {}/{}: {e}", self.target.namespace, self.target.name))
            })?;
        let status = answer.status.ok_or_else(|| Error::Mint("TokenRequest answered without a status".into()))?;
        let (Some(token), Some(expires)) = (status.token, status.expiration_timestamp) else {
            return Err(Error::Mint("TokenRequest answered without a token or its expiry".into()));
        };
        let expires =
            SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(expires.0.as_second()).unwrap_or_default());
        let refresh = refresh_at(now, expires, fastrand::f64());
        info!(
            service_account = %format!("{}/{}", self.target.namespace, self.target.name),
            node = %self.node,
            expires_in_s = expires.duration_since(now).unwrap_or_default().as_secs(),
            refresh_in_s = refresh.duration_since(now).unwrap_or_default().as_secs(),
            "minted node-bound plugin token"
        );
        Ok(Minted { token: token.into_bytes(), refresh_at: refresh })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_happens_between_40_and_50_percent_of_the_lifetime() {
        let issued = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let expires = issued + Duration::from_secs(86_400);
        assert_eq!(refresh_at(issued, expires, 0.0), issued + Duration::from_secs(34_560));
        assert_eq!(refresh_at(issued, expires, 1.0), issued + Duration::from_secs(43_200));
        for j in [0.0, 0.3, 0.999, -5.0, 7.0] {
            let at = refresh_at(issued, expires, j);
            let left = expires.duration_since(at).unwrap();
            assert!(left >= Duration::from_secs(43_200), "at least half the lifetime is left at refresh ({j})");
        }
        // An expiry in the past refreshes at once.
        assert_eq!(refresh_at(issued, issued - Duration::from_secs(5), 0.5), issued);
    }

    #[test]
    fn targets_parse_as_namespace_and_name() {
        let t: Target = "netendpoint-system/netendpoint-cni".parse().unwrap();
        assert_eq!(t, Target { namespace: "netendpoint-system".into(), name: "netendpoint-cni".into() });
        for bad in ["netendpoint-cni", "/x", "ns/", "a/b/c", "NS/x"] {
            assert!(bad.parse::<Target>().is_err(), "{bad}");
        }
    }
}
