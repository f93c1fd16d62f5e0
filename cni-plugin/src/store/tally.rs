//! A tally of the API requests one invocation makes, by verb and resource
//! (`POST networkendpoints`, `LIST networkendpoints`, `WATCH
//! networkendpointpools`), logged when the invocation ends. It is how an
//! operator counts API calls per ADD, and how the tests see that no ADD
//! lists leases (invariant 11) against the real API server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Requests by `"<VERB> <resource>[/<subresource>]"`.
#[derive(Clone, Default)]
pub struct Tally(Arc<Mutex<BTreeMap<String, u32>>>);

impl Tally {
    /// Counts one request to `path` (with its query) by `method`.
    pub fn record(&self, method: &http::Method, path: &str, query: Option<&str>) {
        let key = classify(method, path, query);
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *map.entry(key).or_default() += 1;
    }

    /// All requests counted.
    pub fn total(&self) -> u32 {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).values().sum()
    }

    /// `"POST networkendpoints=1, GET nodes=1"`, in a stable order.
    pub fn summary(&self) -> String {
        let map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.iter().map(|(k, n)| format!("{k}={n}")).collect::<Vec<_>>().join(", ")
    }

    /// A tower layer for kube's `ClientBuilder` that counts every request.
    pub fn layer(
        &self,
    ) -> tower::util::MapRequestLayer<
        impl Fn(http::Request<kube::client::Body>) -> http::Request<kube::client::Body> + Clone + use<>,
    > {
        let tally = self.clone();
        tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
            tally.record(req.method(), req.uri().path(), req.uri().query());
            req
        })
    }
}

/// The verb and resource of a request to the API server. A GET without an
/// object name is a LIST, or a WATCH with `watch=true`; a GET or WATCH
/// narrowed to one object by `fieldSelector=metadata.name=` stays by name
/// (`WATCH` either way, `GET` for the list of at most one).
fn classify(method: &http::Method, path: &str, query: Option<&str>) -> String {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest: &[&str] = match segs.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => &[],
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named) = match rest {
        [] => ("discovery".to_string(), true),
        [r] => ((*r).to_string(), false),
        [r, _] => ((*r).to_string(), true),
        [r, _, sub, ..] => (format!("{r}/{sub}"), true),
    };
    let params: Vec<&str> = query.unwrap_or_default().split('&').collect();
    let watch = params.contains(&"watch=true") || params.contains(&"watch=1");
    let by_name = params.iter().any(|p| p.starts_with("fieldSelector=metadata.name%3D"));
    let verb = match *method {
        http::Method::GET if watch => "WATCH",
        http::Method::GET if named || by_name => "GET",
        http::Method::GET => "LIST",
        ref m => m.as_str(),
    };
    format!("{verb} {resource}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_named_by_verb_and_resource() {
        let t = Tally::default();
        let g = http::Method::GET;
        t.record(&http::Method::POST, "/apis/netendpoint.dev/v1alpha1/networkendpoints", None);
        t.record(&g, "/apis/netendpoint.dev/v1alpha1/networkendpoints/p.10.0.0.1", None);
        t.record(&g, "/apis/netendpoint.dev/v1alpha1/networkendpoints", Some("labelSelector=x"));
        t.record(
            &g,
            "/apis/netendpoint.dev/v1alpha1/networkendpointpools",
            Some("fieldSelector=metadata.name%3Dp&watch=true&resourceVersion=1"),
        );
        t.record(&g, "/apis/netendpoint.dev/v1alpha1/networkendpoints", Some("fieldSelector=metadata.name%3Dp.1"));
        t.record(&http::Method::PATCH, "/apis/netendpoint.dev/v1alpha1/networkendpoints/h/status", None);
        t.record(&g, "/api/v1/namespaces/ns/pods/web-0", None);
        t.record(&g, "/api/v1/nodes/n1", None);
        t.record(&g, "/apis/netendpoint.dev/v1alpha1", None);
        assert_eq!(
            t.summary(),
            "GET discovery=1, GET networkendpoints=2, GET nodes=1, GET pods=1, LIST networkendpoints=1, \
             PATCH networkendpoints/status=1, POST networkendpoints=1, WATCH networkendpointpools=1"
        );
        assert_eq!(t.total(), 9);
    }
}
