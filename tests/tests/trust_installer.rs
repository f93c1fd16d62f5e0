//! Trust boundaries of the installer's identity (`netendpoint-installer`,
//! with a real token bound to its Node), enforced by the real API server
//! with the manifests of deploy/ applied: the plugin tokens it may mint.
//! Each denial is the server's answer to a request the client did send;
//! each test names the finding of the trust issue it closes.

#![allow(clippy::unwrap_used)]

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use netendpoint_tests::trust::*;
use netendpoint_tests::{self as h, CNI_SERVICE_ACCOUNT, DEPLOY_NAMESPACE, INSTALLER_SERVICE_ACCOUNT};

/// Finding 7: the installer mints the plugin's token for its own node, for
/// at most 24 hours (what it asks for), for the API server's own audiences.
#[tokio::test]
async fn installer_tokens_are_bounded_to_what_the_installer_asks() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-installer");
    let node = h::unique("trust-in");
    let kc = dir.join("installer.kubeconfig");
    h::node_bound_kubeconfig(DEPLOY_NAMESPACE, INSTALLER_SERVICE_ACCOUNT, &node, &kc);
    let sas: Api<ServiceAccount> = Api::namespaced(h::client_for(&kc).await, DEPLOY_NAMESPACE);
    let ask = |seconds: i64, audiences: Vec<String>| TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(audiences),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.clone()),
                uid: None,
            }),
            expiration_seconds: Some(seconds),
        }),
        ..Default::default()
    };
    let pp = PostParams::default();
    let r = sas.create_token_request(CNI_SERVICE_ACCOUNT, &pp, &ask(7 * 86400, vec![])).await;
    assert_refused("a 7-day token", r, 403, "expire within 24 hours");
    let r = sas.create_token_request(CNI_SERVICE_ACCOUNT, &pp, &ask(86400, vec!["vault".into()])).await;
    assert_refused("a token for another audience", r, 403, "audiences of the API server only");
    let r = sas
        .create_token_request(
            CNI_SERVICE_ACCOUNT,
            &pp,
            &ask(86400, vec!["https://kubernetes.default.svc".into(), "vault".into()]),
        )
        .await;
    assert_refused("a token for the API server and another audience", r, 403, "not vault");
    let minted = sas.create_token_request(CNI_SERVICE_ACCOUNT, &pp, &ask(86400, vec![])).await.unwrap();
    assert!(minted.status.and_then(|s| s.token).is_some_and(|t| !t.is_empty()));
    // For another node, or with an installer token bound to no node: nothing.
    let other = h::unique("trust-in-other");
    h::ensure_node(&other);
    let mut for_other = ask(86400, vec![]);
    for_other.spec.as_mut().unwrap().bound_object_ref.as_mut().unwrap().name = Some(other);
    let r = sas.create_token_request(CNI_SERVICE_ACCOUNT, &pp, &for_other).await;
    assert_refused("a token for another node", r, 403, "only tokens bound to its own Node");
    let unbound_kc = dir.join("unbound-installer.kubeconfig");
    h::sa_kubeconfig(DEPLOY_NAMESPACE, INSTALLER_SERVICE_ACCOUNT, &unbound_kc, None);
    let unbound: Api<ServiceAccount> = Api::namespaced(h::client_for(&unbound_kc).await, DEPLOY_NAMESPACE);
    let r = unbound.create_token_request(CNI_SERVICE_ACCOUNT, &pp, &ask(86400, vec![])).await;
    assert_refused("an installer token bound to no node", r, 403, "bound to no node");
}
