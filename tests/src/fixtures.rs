//! Objects the tests write directly, as builders: leases and holds as the
//! plugin writes them, Pods that no kubelet runs, a waiting ADD's need, an
//! incarnation request, and the Nodes every one of them names.

use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use netendpoint_crd::{
    ClaimRef, IncarnationRequest, NetworkEndpoint, NetworkEndpointNeed, NetworkEndpointNeedSpec, NetworkEndpointSpec,
    PodRef, Role,
};

use crate::env::client;
use crate::kubectl::kubectl_input;
use crate::leases::endpoints;
use crate::scratch::unique;

/// A lease (NetworkEndpoint) for a test to write. Whatever the builder
/// changes, the object it builds is named `<pool>.<ip>` and carries the
/// labels and annotation that mirror its spec (`netendpoint_lease::labels`),
/// exactly as the plugin writes them, so admission takes its shape for the
/// plugin's own.
#[derive(Clone, Debug)]
#[must_use]
pub struct LeaseFixture {
    spec: NetworkEndpointSpec,
    finalizers: Option<Vec<String>>,
}

impl LeaseFixture {
    /// A live lease of `ip` (a /24) in `pool`, network `pool`, on interface
    /// eth0 of container `c` on node `node-a`, for Pod `default/web-0` (UID
    /// `u1`), with no finalizer and no forced-release bound.
    pub fn new(pool: &str, ip: &str) -> Self {
        let spec = NetworkEndpointSpec {
            pool: pool.into(),
            ip: ip.into(),
            prefix_length: 24,
            gateway: None,
            if_name: "eth0".into(),
            container_id: "c".into(),
            node: "node-a".into(),
            pod: Some(PodRef { namespace: "default".into(), name: "web-0".into(), uid: "u1".into() }),
            network: Some(pool.into()),
            force_release_after: None,
            static_ip: None,
            ..Default::default()
        };
        Self { spec, finalizers: Some(Vec::new()) }
    }

    /// Of sandbox `id`.
    pub fn container(mut self, id: &str) -> Self {
        self.spec.container_id = id.into();
        self
    }

    /// On `node` (the builder does not register it; see [`ensure_node`]).
    pub fn node(mut self, node: &str) -> Self {
        self.spec.node = node.into();
        self
    }

    /// Created with `finalizers`, in this order.
    pub fn finalizers(mut self, finalizers: &[&str]) -> Self {
        self.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
        self
    }

    /// For Pod `namespace/name` with `uid`.
    pub fn pod(mut self, namespace: &str, name: &str, uid: &str) -> Self {
        self.spec.pod = Some(PodRef { namespace: namespace.into(), name: name.into(), uid: uid.into() });
        self
    }

    /// For a Pod of the same name whose UID is `uid`.
    pub fn pod_uid(mut self, uid: &str) -> Self {
        if let Some(p) = self.spec.pod.as_mut() {
            p.uid = uid.into();
        }
        self
    }

    /// Stamped with the forced-release bound `bound` (e.g. `600s`), as the
    /// plugin stamps every lease it creates.
    pub fn force_release_after(mut self, bound: &str) -> Self {
        self.spec.force_release_after = Some(bound.into());
        self
    }

    /// The sticky hold of `claim` rather than an endpoint: it carries no
    /// finalizer of its own.
    pub fn hold(mut self, claim: ClaimRef) -> Self {
        self.spec.role = Some(Role::Hold);
        self.spec.claim = Some(claim);
        self.finalizers = None;
        self
    }

    /// A hold that asks each of its incarnations to carry `finalizers`.
    pub fn endpoint_finalizers(mut self, finalizers: &[&str]) -> Self {
        self.spec.endpoint_finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
        self
    }

    /// The object, labelled and annotated from its spec.
    pub fn build(self) -> NetworkEndpoint {
        let ip = self.spec.ip.parse().unwrap();
        NetworkEndpoint {
            metadata: kube::api::ObjectMeta {
                name: Some(netendpoint_crd::endpoint_name(&self.spec.pool, ip)),
                labels: Some(netendpoint_lease::labels::of(&self.spec)),
                annotations: netendpoint_lease::labels::annotations_of(&self.spec),
                finalizers: self.finalizers,
                ..Default::default()
            },
            spec: self.spec,
            status: None,
        }
    }

    /// Creates it as the administrator; returns the object as stored.
    pub async fn create(self) -> NetworkEndpoint {
        endpoints().await.create(&PostParams::default(), &self.build()).await.unwrap()
    }
}

/// A lease object for `ip` in `pool`, named and labelled as the plugin
/// names and labels it (every mirrored label, `netendpoint_lease::labels`),
/// for tests that write leases directly: [`LeaseFixture`] of `container`
/// on `node` holding `finalizers`.
pub fn lease(pool: &str, ip: &str, container: &str, node: &str, finalizers: &[&str]) -> NetworkEndpoint {
    LeaseFixture::new(pool, ip).container(container).node(node).finalizers(finalizers).build()
}

/// Incarnation `k` of `hold` for a sandbox on `node`, as the controller
/// creates it (`netendpoint_lease::hold::incarnation_object`).
pub fn incarnation(hold: &NetworkEndpoint, k: u32, node: &str) -> NetworkEndpoint {
    netendpoint_lease::hold::incarnation_object(hold, &incarnation_request(k, node)).unwrap()
}

/// A request for incarnation `k` by a new sandbox (a unique container ID)
/// on `node`, for a new Pod `default/web-0` (a unique UID).
pub fn incarnation_request(k: u32, node: &str) -> IncarnationRequest {
    IncarnationRequest {
        incarnation: k,
        node: node.into(),
        container_id: unique("ctr"),
        if_name: "eth0".into(),
        pod: PodRef { namespace: "default".into(), name: "web-0".into(), uid: unique("pod-uid") },
        accepted: false,
        deadline: None,
    }
}

/// The NetworkEndpointNeed a waiting ADD raises, for a test to write.
#[derive(Clone, Debug)]
#[must_use]
pub struct NeedFixture {
    spec: NetworkEndpointNeedSpec,
}

impl NeedFixture {
    /// The need of `node` in `pool`, for Pod `default/web-0` (UID `u1`),
    /// waiting 10 s, as plugins older than the queue write it, named
    /// `<pool>.<node>`; [`NeedFixture::entry`] makes it a queue entry.
    pub fn new(pool: &str, node: &str) -> Self {
        let pod = PodRef { namespace: "default".into(), name: "web-0".into(), uid: "u1".into() };
        let spec = NetworkEndpointNeedSpec {
            pool: pool.into(),
            node: node.into(),
            pod,
            wait_seconds: 10,
            slot: None,
            ip_family: None,
            container_id: None,
            if_name: None,
            deadline: None,
            spans: None,
        };
        Self { spec }
    }

    /// A queue entry in `slot` (named `<pool>.<node>.<slot>`), of a sandbox
    /// waiting for an IPv4 address until its wait (from now) ends.
    pub fn entry(mut self, slot: u8) -> Self {
        let wait = k8s_openapi::jiff::SignedDuration::from_secs(i64::from(self.spec.wait_seconds));
        let deadline = k8s_openapi::jiff::Timestamp::now().checked_add(wait).unwrap_or_default();
        self.spec.slot = Some(slot);
        self.spec.ip_family = Some(netendpoint_crd::IpFamily::IPv4);
        self.spec.container_id = Some(unique("ctr"));
        self.spec.if_name = Some("eth0".into());
        self.spec.deadline = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(deadline));
        self
    }

    /// For Pod `namespace/name` with `uid` (empty: unknown).
    pub fn pod(mut self, namespace: &str, name: &str, uid: &str) -> Self {
        self.spec.pod = PodRef { namespace: namespace.into(), name: name.into(), uid: uid.into() };
        self
    }

    /// Waiting `seconds` from its last write.
    pub fn wait_seconds(mut self, seconds: u32) -> Self {
        self.spec.wait_seconds = seconds;
        self
    }

    /// The object, named as the CRD's rule requires.
    pub fn build(self) -> NetworkEndpointNeed {
        NetworkEndpointNeed::new(
            &netendpoint_crd::need_name(&self.spec.pool, &self.spec.node, self.spec.slot),
            self.spec,
        )
    }
}

/// A Pod for a test to write: one container that never runs (no kubelet
/// runs it: it stays `Pending`, as a Pod waiting for its sandbox looks),
/// and no ServiceAccount token mounted.
#[derive(Clone, Debug)]
#[must_use]
pub struct PodFixture {
    pod: serde_json::Value,
}

impl PodFixture {
    /// Pod `default/<name>`, bound to no node.
    pub fn new(name: &str) -> Self {
        Self {
            pod: serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"automountServiceAccountToken": false,
                         "containers": [{"name": "c", "image": "example.invalid/none"}]}
            }),
        }
    }

    /// Bound to `node` (`spec.nodeName`, as the scheduler binds it).
    pub fn node(mut self, node: &str) -> Self {
        self.pod["spec"]["nodeName"] = node.into();
        self
    }

    /// With the keys of `meta` (labels, annotations, ownerReferences, ...)
    /// set over its metadata.
    pub fn meta(mut self, meta: serde_json::Value) -> Self {
        for (k, v) in meta.as_object().into_iter().flatten() {
            self.pod["metadata"][k] = v.clone();
        }
        self
    }

    /// Its container with the environment variable `name=value`.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        let container = &mut self.pod["spec"]["containers"][0];
        let mut env = container["env"].as_array().cloned().unwrap_or_default();
        env.push(serde_json::json!({"name": name, "value": value}));
        container["env"] = env.into();
        self
    }

    /// The object.
    pub fn build(self) -> Pod {
        serde_json::from_value(self.pod).unwrap()
    }

    /// Creates it as the administrator (with the `default` ServiceAccount
    /// the admission needs); returns the object as stored.
    pub async fn create(self) -> Pod {
        ensure_default_service_account().await;
        let pods: Api<Pod> = Api::namespaced(client().await, "default");
        pods.create(&PostParams::default(), &self.build()).await.unwrap()
    }
}

/// Creates ServiceAccount `default/default` if it is missing: the test
/// server runs no controller-manager, and the ServiceAccount admission
/// refuses Pods without it.
pub async fn ensure_default_service_account() {
    let sas: Api<ServiceAccount> = Api::namespaced(client().await, "default");
    let sa = serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}})).unwrap();
    let _ = sas.create(&PostParams::default(), &sa).await;
}

/// Creates a Pod in `default` bound to `node` that never starts (no kubelet
/// runs it: it stays `Pending`), as a Pod waiting for its sandbox looks;
/// returns its name and UID. The controller believes a need only for such a Pod.
pub async fn waiting_pod(prefix: &str, node: &str) -> (String, String) {
    ensure_node(node);
    let name = unique(prefix);
    let uid = PodFixture::new(&name).node(node).create().await.metadata.uid.unwrap();
    (name, uid)
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
    let out = kubectl_input(&["apply", "-f", "-"], &manifest);
    assert!(out.status.success(), "register node {name}: {}", String::from_utf8_lossy(&out.stderr));
    done.push(name.to_string());
}
