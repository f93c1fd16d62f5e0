//! What the controller's unit tests are built from: a [`Context`] whose
//! client talks to a scripted API server ([`ApiServer`]), and small
//! builders of the objects the requests carry and the answers return.
//!
//! The scripted server checks every request the code sends against the
//! next [`Exchange`] of its script, in order: the method, the path with
//! its query, the content type of a patch and the JSON body. It answers
//! with the exchange's canned response, so the code under test reads real
//! API answers (objects, `Status` failures) through a real `kube::Client`.
//! A request off the script fails the test at once, naming it; a script
//! not played to its end fails [`ApiServer::assert_done`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::client::Body;
use netendpoint_crd::ipamclaim::{IPAMClaim, IPAMClaimSpec, IPAMClaimStatus, LABEL_STATEFULSET, NETWORKS_ANNOTATION};
use netendpoint_crd::{
    ClaimRef, HoldPhase, IncarnationRequest, NetworkEndpoint, NetworkEndpointSpec, NetworkEndpointStatus, PodRef, Role,
};
use netendpoint_lease::ServerClock;
use serde_json::{Value, json};

use crate::context::Context;
use crate::decide::{Hold, Lease};

/// In an expected body: any value, as long as the field is there (an
/// Event's generated name and time).
pub const ANY: &str = "<any>";

/// The content type of a JSON patch.
const JSON_PATCH: &str = "application/json-patch+json";
/// The content type of a merge patch.
const MERGE_PATCH: &str = "application/merge-patch+json";

/// One request the code is expected to send, and the answer it gets.
#[derive(Debug, Clone)]
pub struct Exchange {
    method: Method,
    path: String,
    content_type: Option<&'static str>,
    body: Option<Value>,
    answer: Answer,
}

#[derive(Debug, Clone)]
enum Answer {
    /// This status and body.
    Json(StatusCode, Value),
    /// 201 with the request's own body: what a create returns.
    Created,
    /// Nothing scripted: the test is incomplete.
    Missing,
}

impl Exchange {
    fn new(method: Method, path: &str, content_type: Option<&'static str>, body: Option<Value>) -> Self {
        Self { method, path: path.to_string(), content_type, body, answer: Answer::Missing }
    }

    /// A GET of `path`, without a body; give its answer with [`Exchange::returns`] or [`Exchange::fails`].
    pub fn get(path: &str) -> Self {
        Self::new(Method::GET, path, None, None)
    }

    /// A create (POST) of `body` at `path`; answered 201 with that body.
    pub fn create(path: &str, body: Value) -> Self {
        Self { answer: Answer::Created, ..Self::new(Method::POST, path, None, Some(body)) }
    }

    /// A DELETE of `path` with `body` (the delete options); answered 200 with a success `Status`.
    pub fn delete(path: &str, body: Value) -> Self {
        let ok = json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success"});
        Self { answer: Answer::Json(StatusCode::OK, ok), ..Self::new(Method::DELETE, path, None, Some(body)) }
    }

    /// A JSON patch (`test`, `add`, `remove` operations) of `path`.
    pub fn json_patch(path: &str, ops: Value) -> Self {
        Self::new(Method::PATCH, path, Some(JSON_PATCH), Some(ops))
    }

    /// A merge patch of `path`.
    pub fn merge_patch(path: &str, body: Value) -> Self {
        Self::new(Method::PATCH, path, Some(MERGE_PATCH), Some(body))
    }

    /// Answers 200 with `object`.
    pub fn returns(mut self, object: &impl k8s_openapi::serde::Serialize) -> Self {
        let value = serde_json::to_value(object).expect("a fixture serializes");
        self.answer = Answer::Json(StatusCode::OK, value);
        self
    }

    /// Answers with the failure `Status` the API server gives for `code`
    /// (404 NotFound, 409 Conflict, 422 Invalid, 500 InternalError; a 409
    /// to a create is AlreadyExists).
    pub fn fails(mut self, code: u16) -> Self {
        let reason = match code {
            404 => "NotFound",
            409 if self.method == Method::POST => "AlreadyExists",
            409 => "Conflict",
            422 => "Invalid",
            _ => "InternalError",
        };
        let status = json!({
            "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "message": format!("scripted {code}"), "reason": reason, "code": code,
        });
        let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        self.answer = Answer::Json(code, status);
        self
    }

    /// Answers with the failure `Status` of `code` and `reason`, saying `message`.
    pub fn fails_saying(mut self, code: u16, reason: &str, message: &str) -> Self {
        let status = json!({
            "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code,
        });
        let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        self.answer = Answer::Json(code, status);
        self
    }

    fn check(&self, n: usize, got: &Sent) {
        let want = format!("{} {}", self.method, self.path);
        let seen = format!("{} {}", got.method, got.path);
        assert_eq!(seen, want, "request #{n}: method or path differs (body: {})", pretty(&got.body));
        if self.method == Method::PATCH {
            assert_eq!(got.content_type.as_deref(), self.content_type, "request #{n} ({want}): patch type");
        }
        let body = self.body.clone().unwrap_or(Value::Null);
        assert!(
            matches(&body, &got.body),
            "request #{n} ({want}): body differs\nexpected: {}\n     got: {}",
            pretty(&body),
            pretty(&got.body)
        );
    }

    fn respond(self, got: &Sent) -> Response<Body> {
        let (status, body) = match self.answer {
            Answer::Json(status, body) => (status, body),
            Answer::Created => (StatusCode::CREATED, got.body.clone()),
            Answer::Missing => panic!("{} {}: no answer scripted", self.method, self.path),
        };
        let mut response = Response::new(Body::from(serde_json::to_vec(&body).expect("an answer serializes")));
        *response.status_mut() = status;
        response
    }
}

/// A request as the code sent it.
struct Sent {
    method: Method,
    path: String,
    content_type: Option<String>,
    body: Value,
}

impl Sent {
    async fn of(req: Request<Body>) -> Self {
        let (parts, body) = req.into_parts();
        let bytes = body.collect_bytes().await.expect("a request body");
        let body =
            if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).expect("a JSON request body") };
        // An empty query (`name?`, as kube writes it without parameters) is no query.
        let path = parts.uri.path_and_query().map_or(parts.uri.path(), |p| p.as_str());
        Self {
            method: parts.method,
            path: path.strip_suffix('?').unwrap_or(path).to_string(),
            content_type: parts.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(Into::into),
            body,
        }
    }
}

/// True when `got` is `expected`, where the string [`ANY`] stands for any value.
fn matches(expected: &Value, got: &Value) -> bool {
    match (expected, got) {
        (Value::String(s), _) if s == ANY => true,
        (Value::Object(e), Value::Object(g)) => {
            e.len() == g.len() && e.iter().all(|(k, v)| g.get(k).is_some_and(|gv| matches(v, gv)))
        }
        (Value::Array(e), Value::Array(g)) => e.len() == g.len() && e.iter().zip(g).all(|(e, g)| matches(e, g)),
        _ => expected == got,
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

#[derive(Default)]
struct Script {
    exchanges: VecDeque<Exchange>,
    played: usize,
}

/// The scripted API server behind a test [`Context`].
#[derive(Clone)]
pub struct ApiServer(Arc<Mutex<Script>>);

impl ApiServer {
    /// Fails unless every exchange of the script was played.
    pub fn assert_done(&self) {
        let script = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let left: Vec<String> = script.exchanges.iter().map(|e| format!("{} {}", e.method, e.path)).collect();
        assert!(left.is_empty(), "{} requests made; still expected: {left:#?}", script.played);
    }

    async fn answer(&self, req: Request<Body>) -> Response<Body> {
        let sent = Sent::of(req).await;
        let (n, next) = {
            let mut script = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            script.played += 1;
            (script.played, script.exchanges.pop_front())
        };
        let Some(exchange) = next else {
            panic!("request #{n} not in the script: {} {}\n{}", sent.method, sent.path, pretty(&sent.body))
        };
        exchange.check(n, &sent);
        exchange.respond(&sent)
    }
}

impl Context {
    /// A context whose client sends every request to a server that plays
    /// `script`; Events are recorded as instance `test`.
    pub fn test(script: impl IntoIterator<Item = Exchange>) -> (Self, ApiServer) {
        let server = ApiServer(Arc::new(Mutex::new(Script { exchanges: script.into_iter().collect(), played: 0 })));
        let handler = server.clone();
        let service = tower::service_fn(move |req: Request<Body>| {
            let handler = handler.clone();
            async move { Ok::<_, std::convert::Infallible>(handler.answer(req).await) }
        });
        let client = kube::Client::new(service, "default");
        (Context::new(client, ServerClock::default(), "test"), server)
    }
}

/// The Event the controller records about NetworkEndpoint `name`/`uid`:
/// its POST, with a generated name and time.
pub fn event(name: &str, uid: &str, reason: &str, note: &str, warning: bool) -> Exchange {
    Exchange::create(
        "/apis/events.k8s.io/v1/namespaces/default/events",
        json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": ANY},
            "eventTime": ANY,
            "action": reason,
            "reason": reason,
            "note": note,
            "type": if warning { "Warning" } else { "Normal" },
            "regarding": {"apiVersion": "netendpoint.dev/v1alpha1", "kind": "NetworkEndpoint", "name": name, "uid": uid},
            "reportingController": "netendpoint-controller",
            "reportingInstance": "test",
        }),
    )
}

/// Builders of lease views: `Lease::test("10.0.0.1").releasing(&["a.example/x"])`.
pub trait TestLease {
    /// The live lease `p.<ip>` (UID `uid-<ip>`, resourceVersion 7) of Pod
    /// `ns/web-0` on node `n1`.
    fn test(ip: &str) -> Self;
    /// Being released since the epoch, waiting on `finalizers`.
    fn releasing(self, finalizers: &[&str]) -> Self;
}

impl TestLease for Lease {
    fn test(ip: &str) -> Self {
        Lease {
            name: format!("p.{ip}"),
            uid: format!("uid-{ip}"),
            resource_version: "7".into(),
            pool: "p".into(),
            ip: ip.parse().ok(),
            node: "n1".into(),
            pod: Some(PodRef { namespace: "ns".into(), name: "web-0".into(), uid: format!("pod-{ip}") }),
            releasing_since: None,
            finalizers: vec![],
            force_release_after: None,
            sticky: None,
            incarnation: None,
            static_ip: false,
        }
    }

    fn releasing(mut self, finalizers: &[&str]) -> Self {
        self.releasing_since = Some(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        self.finalizers = finalizers.iter().map(|f| f.to_string()).collect();
        self
    }
}

/// The object behind lease view `l`, as a write returns it.
pub fn lease_object(l: &Lease) -> NetworkEndpoint {
    let spec = NetworkEndpointSpec {
        pool: l.pool.clone(),
        ip: l.ip.map(|ip| ip.to_string()).unwrap_or_default(),
        prefix_length: 24,
        if_name: "eth0".into(),
        container_id: "c1".into(),
        node: l.node.clone(),
        pod: l.pod.clone(),
        ..NetworkEndpointSpec::default()
    };
    let mut ep = NetworkEndpoint::new(&l.name, spec);
    ep.metadata.uid = Some(l.uid.clone());
    ep.metadata.resource_version = Some(l.resource_version.clone());
    ep
}

/// Builders of hold views, each built from the hold object as read:
/// `Hold::test("10.0.0.5").at(1).asking(2, "n2")`.
pub trait TestHold {
    /// The hold `p.<ip>` (UID `hold-<ip>`, resourceVersion 5) of claim
    /// `ns/web-0.p` (UID `k1`), /24, first asked for by Pod `ns/web-0`
    /// (UID `u1`) on node `n1`; no incarnation yet.
    fn test(ip: &str) -> Self;
    /// Its incarnation `k` exists (`p.<ip>-<k>`).
    fn at(self, k: u32) -> Self;
    /// Asked for incarnation `k` by node `node`: Pod `ns/web-0` with UID
    /// `u<k>`, sandbox `c<k>`.
    fn asking(self, k: u32, node: &str) -> Self;
    /// Being released.
    fn releasing(self) -> Self;
    /// The claim it holds for is `name` (UID `k1`).
    fn for_claim(self, name: &str) -> Self;
}

fn hold_status(h: &mut Hold) -> &mut NetworkEndpointStatus {
    h.object.status.get_or_insert_with(NetworkEndpointStatus::default)
}

fn reread(h: Hold) -> Hold {
    Hold::of(&h.object).expect("still a hold")
}

impl TestHold for Hold {
    fn test(ip: &str) -> Self {
        let spec = NetworkEndpointSpec {
            pool: "p".into(),
            ip: ip.into(),
            prefix_length: 24,
            if_name: "eth0".into(),
            container_id: "c1".into(),
            node: "n1".into(),
            pod: Some(PodRef { namespace: "ns".into(), name: "web-0".into(), uid: "u1".into() }),
            role: Some(Role::Hold),
            claim: Some(ClaimRef { namespace: "ns".into(), name: "web-0.p".into(), uid: "k1".into() }),
            sticky_for: Some("3600s".into()),
            ..NetworkEndpointSpec::default()
        };
        let mut ep = NetworkEndpoint::new(&format!("p.{ip}"), spec);
        ep.metadata.uid = Some(format!("hold-{ip}"));
        ep.metadata.resource_version = Some("5".into());
        Hold::of(&ep).expect("a hold")
    }

    fn at(mut self, k: u32) -> Self {
        let endpoint = format!("{}-{k}", self.name);
        let status = hold_status(&mut self);
        status.incarnation = Some(k);
        status.endpoint = Some(endpoint);
        reread(self)
    }

    fn asking(mut self, k: u32, node: &str) -> Self {
        hold_status(&mut self).request = Some(IncarnationRequest {
            incarnation: k,
            node: node.into(),
            container_id: format!("c{k}"),
            if_name: "eth0".into(),
            pod: PodRef { namespace: "ns".into(), name: "web-0".into(), uid: format!("u{k}") },
            accepted: false,
            deadline: None,
        });
        reread(self)
    }

    fn releasing(mut self) -> Self {
        hold_status(&mut self).phase = Some(HoldPhase::Releasing);
        reread(self)
    }

    fn for_claim(mut self, name: &str) -> Self {
        if let Some(c) = self.object.spec.claim.as_mut() {
            c.name = name.into();
        }
        reread(self)
    }
}

/// Builders of Pods as a GET returns them: `Pod::test("web-0", "u2").on("n2")`.
pub trait TestPod {
    /// Pod `ns/<name>` with UID `uid`, controlled by StatefulSet `web`, not bound yet.
    fn test(name: &str, uid: &str) -> Self;
    /// Bound to `node`.
    fn on(self, node: &str) -> Self;
    /// Being deleted.
    fn deleting(self) -> Self;
    /// Controlled by no StatefulSet, its network selection naming `claim`.
    fn naming_claim(self, claim: &str) -> Self;
}

impl TestPod for Pod {
    fn test(name: &str, uid: &str) -> Self {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "StatefulSet".into(),
                    name: "web".into(),
                    uid: "sts-web".into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec::default()),
            status: None,
        }
    }

    fn on(mut self, node: &str) -> Self {
        self.spec.get_or_insert_with(PodSpec::default).node_name = Some(node.into());
        self
    }

    fn deleting(mut self) -> Self {
        self.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        self
    }

    fn naming_claim(mut self, claim: &str) -> Self {
        self.metadata.owner_references = None;
        let networks = json!([{"name": "net", "ipam-claim-reference": claim}]).to_string();
        self.metadata.annotations = Some([(NETWORKS_ANNOTATION.to_string(), networks)].into());
        self
    }
}

/// Builders of claims as a GET returns them: `IPAMClaim::test("web-0.p", "k1").showing(&["10.0.0.5/24"])`.
pub trait TestClaim {
    /// Claim `ns/<name>` with UID `uid` (resourceVersion 9) of network
    /// `net`, made for StatefulSet `web`, with no addresses.
    fn test(name: &str, uid: &str) -> Self;
    /// Its status shows `ips`, owned by Pod `web-0`.
    fn showing(self, ips: &[&str]) -> Self;
    /// Made by someone else than for a StatefulSet (a VM's claim).
    fn not_of_a_statefulset(self) -> Self;
}

impl TestClaim for IPAMClaim {
    fn test(name: &str, uid: &str) -> Self {
        let mut c = IPAMClaim::new(name, IPAMClaimSpec { network: "net".into(), interface: String::new() });
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some(uid.into());
        c.metadata.resource_version = Some("9".into());
        c.metadata.labels = Some([(LABEL_STATEFULSET.to_string(), "web".to_string())].into());
        c
    }

    fn showing(mut self, ips: &[&str]) -> Self {
        self.status = Some(IPAMClaimStatus {
            ips: ips.iter().map(|i| i.to_string()).collect(),
            owner_pod: Some(netendpoint_crd::ipamclaim::OwnerPod { name: "web-0".into() }),
        });
        self
    }

    fn not_of_a_statefulset(mut self) -> Self {
        self.metadata.labels = None;
        self
    }
}

/// StatefulSet `ns/<name>` with UID `uid`.
pub fn statefulset(name: &str, uid: &str) -> StatefulSet {
    StatefulSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            ..ObjectMeta::default()
        },
        ..StatefulSet::default()
    }
}
