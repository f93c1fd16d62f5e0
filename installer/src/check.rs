//! The readiness probe (`--check`): do the credentials the plugin will use
//! work right now, for this node, and for long enough?
//!
//! It reads exactly what the plugin reads (`<kubeconfig-dir>/kubeconfig` and
//! the token file it names), asks the API server who that is with a
//! SelfSubjectReview, and passes only when the server answers with this
//! node's name in `authentication.kubernetes.io/node-name` and the token's
//! `exp` is at least `--check-min-validity` away. Until it passes, the
//! DaemonSet's `rollout status` does not succeed.

use std::path::Path;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, PostParams};

use crate::error::{Error, Result};

/// The user-info key in which the API server names a bound token's node.
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

/// Checks the installed credentials; `Ok` carries a one-line summary.
pub async fn check(kubeconfig_dir: &Path, node: &str, min_validity: Duration, now: SystemTime) -> Result<String> {
    let token_path = kubeconfig_dir.join("token");
    let token = std::fs::read(&token_path).map_err(crate::error::io_err("read token", &token_path))?;
    let exp =
        token_expiry(&token).ok_or_else(|| Error::NotReady("the token is not a JWT with an `exp` claim".into()))?;
    let left = exp.duration_since(now).unwrap_or_default();
    if left < min_validity {
        return Err(Error::NotReady(format!(
            "the token expires in {}s, less than --check-min-validity ({}s)",
            left.as_secs(),
            min_validity.as_secs()
        )));
    }
    let path = kubeconfig_dir.join("kubeconfig");
    let kubeconfig =
        kube::config::Kubeconfig::read_from(&path).map_err(|e| Error::NotReady(format!("{}: {e}", path.display())))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| Error::NotReady(format!("{}: {e}", path.display())))?;
    let client = kube::Client::try_from(config).map_err(|e| Error::NotReady(format!("client: {e}")))?;
    let review: SelfSubjectReview = serde_json::from_value(serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "SelfSubjectReview",
    }))
    .map_err(|e| Error::NotReady(format!("SelfSubjectReview: {e}")))?;
    let answer = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| Error::NotReady(format!("SelfSubjectReview with the plugin's credentials failed: {e}")))?;
    let user = answer.status.and_then(|s| s.user_info).unwrap_or_default();
    let bound_to = user.extra.as_ref().and_then(|e| e.get(NODE_NAME_EXTRA)).and_then(|v| v.first()).cloned();
    if bound_to.as_deref() != Some(node) {
        return Err(Error::NotReady(format!(
            "the API server says the token is bound to node {bound_to:?}, not to {node:?}"
        )));
    }
    Ok(format!(
        "credentials of {} work for node {node} and expire in {}s",
        user.username.unwrap_or_default(),
        left.as_secs()
    ))
}

/// The network config the installer is told to install (`--net-conf`), as
/// the readiness probe sees it: `Ok` when the file is there, or when its
/// directory (the mounted ConfigMap) holds nothing, as an optional source
/// that was not given. A directory that holds other keys but not this one
/// is an install that would silently install nothing (a ConfigMap created
/// from a file of another name): not ready, naming the keys it has and the
/// one it needs.
pub fn net_conf_present(net_conf: &Path) -> Result<()> {
    if net_conf.exists() {
        return Ok(());
    }
    let want = net_conf.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let Some(dir) = net_conf.parent() else { return Ok(()) };
    // A ConfigMap volume holds its keys and hidden `..data` links.
    let mut keys: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    keys.retain(|k| !k.starts_with('.'));
    if keys.is_empty() {
        return Ok(());
    }
    keys.sort();
    Err(Error::NotReady(format!(
        "the network config source {} holds {} but no key {want}: no network config is installed. Create the \
         ConfigMap with that key, e.g. kubectl create configmap netendpoint-net-conf --from-file={want}=<your file>",
        dir.display(),
        keys.join(", ")
    )))
}

/// The `exp` claim of a JWT, without checking its signature (the API server
/// does that); `None` when `token` is no JWT or has no numeric `exp`.
pub fn token_expiry(token: &[u8]) -> Option<SystemTime> {
    let text = std::str::from_utf8(token).ok()?.trim();
    let mut parts = text.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let claims: serde_json::Value = serde_json::from_slice(&base64url_decode(payload)?).ok()?;
    let exp = claims.get("exp")?.as_u64()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(exp))
}

/// Decodes unpadded base64url (RFC 4648 §5), as used in JWTs.
fn base64url_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_net_conf_source_with_other_keys_but_not_ours_is_not_ready() {
        let dir = std::env::temp_dir().join(format!("ne-check-net-conf-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let want = dir.join("10-netendpoint.conflist");
        assert!(net_conf_present(&want).is_ok(), "no ConfigMap mounted at all: optional, fine");
        std::fs::create_dir_all(dir.join("..2026_12_08")).unwrap();
        assert!(net_conf_present(&want).is_ok(), "an empty ConfigMap volume: nothing given, fine");
        std::fs::write(dir.join("bridge-portmap.conflist"), b"{}").unwrap();
        let e = net_conf_present(&want).unwrap_err().to_string();
        assert!(e.contains("bridge-portmap.conflist") && e.contains("no key 10-netendpoint.conflist"), "{e}");
        assert!(e.contains("--from-file=10-netendpoint.conflist="), "the cure: {e}");
        std::fs::write(&want, b"{}").unwrap();
        assert!(net_conf_present(&want).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn base64url_decodes_without_padding() {
        assert_eq!(base64url_decode("").unwrap(), b"");
        assert_eq!(base64url_decode("Zg").unwrap(), b"f");
        assert_eq!(base64url_decode("Zm8").unwrap(), b"fo");
        assert_eq!(base64url_decode("Zm9v").unwrap(), b"foo");
        assert_eq!(base64url_decode("-_8").unwrap(), [0xfb, 0xff]);
        assert!(base64url_decode("Zm9v=").is_none());
        assert!(base64url_decode("a+b").is_none());
    }

    #[test]
    fn expiry_is_read_from_the_payload() {
        // {"alg":"none"} . {"sub":"x","exp":1700000000} . sig
        let token = b"eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4IiwiZXhwIjoxNzAwMDAwMDAwfQ.c2ln\n";
        assert_eq!(token_expiry(token), Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)));
        for bad in
            [&b"not-a-jwt"[..], b"a.b", b"a.b.c.d", b"eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.c2ln", b"\xff.\xff.\xff"]
        {
            assert_eq!(token_expiry(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
