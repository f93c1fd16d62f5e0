//! Objects the tests write directly: leases, Nodes and Pods.

use std::process::{Command, Stdio};

use kube::api::Api;
use netendpoint_crd::NetworkEndpoint;

use crate::env::{client, kubeconfig, repo_root};
use crate::scratch::unique;

/// A lease object for `ip` in `pool`, named and labelled as the plugin
/// names and labels it (every mirrored label, `netendpoint_lease::labels`),
/// for tests that write leases directly.
pub fn lease(pool: &str, ip: &str, container: &str, node: &str, finalizers: &[&str]) -> NetworkEndpoint {
    use netendpoint_crd::{NetworkEndpointSpec, PodRef};
    let spec = NetworkEndpointSpec {
        pool: pool.into(),
        ip: ip.into(),
        prefix_length: 24,
        gateway: None,
        if_name: "eth0".into(),
        container_id: container.into(),
        node: node.into(),
        pod: Some(PodRef { namespace: "default".into(), name: "web-0".into(), uid: "u1".into() }),
        network: Some(pool.into()),
        force_release_after: None,
        static_ip: None,
        ..Default::default()
    };
    NetworkEndpoint {
        metadata: kube::api::ObjectMeta {
            name: Some(netendpoint_crd::endpoint_name(pool, ip.parse().unwrap())),
            labels: Some(netendpoint_lease::labels::of(&spec)),
            annotations: netendpoint_lease::labels::annotations_of(&spec),
            finalizers: Some(finalizers.iter().map(|f| f.to_string()).collect()),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

/// Registers a Node object named `name` (metadata only), once per test
/// process. The plugin refuses to create leases for a node that is not
/// registered, so every node name a test uses must exist.
pub fn ensure_node(name: &str) {
    static DONE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut done = DONE.lock().unwrap();
    if done.iter().any(|n| n == name) {
        return;
    }
    let manifest = format!("{{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{{\"name\":\"{name}\"}}}}");
    let mut child = Command::new(repo_root().join("tests/bin/kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(manifest.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "register node {name}: {}", String::from_utf8_lossy(&out.stderr));
    done.push(name.to_string());
}

/// Creates a Pod in `default` bound to `node` that never starts (no kubelet
/// runs it: it stays `Pending`), as a Pod waiting for its sandbox looks;
/// returns its name and UID. The controller believes a need only for such a Pod.
pub async fn waiting_pod(prefix: &str, node: &str) -> (String, String) {
    use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
    ensure_node(node);
    let sas: Api<ServiceAccount> = Api::namespaced(client().await, "default");
    let sa = serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}})).unwrap();
    let _ = sas.create(&kube::api::PostParams::default(), &sa).await;
    let name = unique(prefix);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": node, "automountServiceAccountToken": false,
                 "containers": [{"name": "c", "image": "example.invalid/none"}]}
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client().await, "default");
    let uid = pods.create(&kube::api::PostParams::default(), &pod).await.unwrap().metadata.uid.unwrap();
    (name, uid)
}
