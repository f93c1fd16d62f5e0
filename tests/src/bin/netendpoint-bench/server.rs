//! The API server's counters: one scrape of `/metrics`, and NetworkEndpoint traffic between two scrapes.

use crate::prelude::*;

pub(crate) const REQUESTS: &str = "apiserver_request_total";
/// The server records response sizes for reads only (GET and LIST), not for writes.
pub(crate) const RESPONSE_BYTES: &str = "apiserver_response_sizes_sum";
/// Objects a LIST served from the watch cache looked at (the whole resource, when no index serves the selector).
pub(crate) const LIST_SCANNED: &str = "apiserver_cache_list_fetched_objects_total";

/// NetworkEndpoint traffic at the server between two scrapes.
#[derive(Clone, Copy, Default)]
pub(crate) struct ServerCounts {
    /// Requests an ADD makes (see [`Labels::plugin_request`]).
    pub(crate) requests: f64,
    /// Creates answered 409 (the address was taken).
    pub(crate) conflicts: f64,
    pub(crate) lists: f64,
    /// Objects LISTs looked at in the watch cache.
    pub(crate) scanned: f64,
    /// Response bytes (GET and LIST; see [`RESPONSE_BYTES`]).
    pub(crate) bytes: f64,
}

impl ServerCounts {
    pub(crate) fn between(before: &Metrics, after: &Metrics) -> Self {
        Self {
            requests: after.since(before, REQUESTS, |l| l.plugin_request()),
            conflicts: after
                .since(before, REQUESTS, |l| l.networkendpoints() && l.get("verb") == "POST" && l.get("code") == "409"),
            lists: after.since(before, REQUESTS, |l| l.networkendpoints() && l.get("verb") == "LIST"),
            scanned: after.since(before, LIST_SCANNED, |l| l.networkendpoints()),
            bytes: after.since(before, RESPONSE_BYTES, |l| l.plugin_request()),
        }
    }
}

/// The API server's metrics at one moment: series (name and labels) to value.
pub(crate) struct Metrics(pub(crate) HashMap<String, f64>);

impl Metrics {
    /// Sum of the series of metric `name` whose labels `keep` accepts.
    pub(crate) fn sum(&self, name: &str, keep: impl Fn(&Labels) -> bool) -> f64 {
        self.0
            .iter()
            .filter_map(|(k, v)| {
                let labels = k.strip_prefix(name)?.strip_prefix('{')?.strip_suffix('}')?;
                keep(&Labels(labels)).then_some(v)
            })
            .sum()
    }

    /// Increase of [`Metrics::sum`] since `before`.
    pub(crate) fn since(&self, before: &Metrics, name: &str, keep: impl Fn(&Labels) -> bool) -> f64 {
        self.sum(name, &keep) - before.sum(name, &keep)
    }
}

/// The labels of one series, as the exposition format writes them (`a="x",b="y"`).
pub(crate) struct Labels<'a>(pub(crate) &'a str);

impl Labels<'_> {
    /// The value of label `name` ("" when absent). Label values here hold no commas.
    pub(crate) fn get(&self, name: &str) -> &str {
        self.0.split(',').find_map(|kv| kv.strip_prefix(name)?.strip_prefix("=\"")?.strip_suffix('"')).unwrap_or("")
    }

    pub(crate) fn networkendpoints(&self) -> bool {
        self.get("resource") == "networkendpoints"
    }

    /// A request of the kinds an ADD makes, and the controller that runs
    /// beside the benchmark does not: NetworkEndpoint requests except
    /// DELETE (the harness's own; the ADDs measured never delete); reads
    /// (GET, WATCH) of the shard and pool summaries, whose writes are the
    /// controller's; and writes of the need signals, whose reads are the
    /// controller's.
    pub(crate) fn plugin_request(&self) -> bool {
        let verb = self.get("verb");
        match self.get("resource") {
            "networkendpoints" => verb != "DELETE",
            "networkendpointshards" | "networkendpointpools" => {
                matches!(verb, "GET" | "WATCH") && self.get("subresource").is_empty()
            }
            "networkendpointneeds" => matches!(verb, "POST" | "PATCH" | "DELETE" | "GET"),
            _ => false,
        }
    }

    /// A request to a resource, other than the API server's own heartbeat
    /// (coordination.k8s.io Leases), which ticks whatever clients do.
    pub(crate) fn client_resource(&self) -> bool {
        !matches!(self.get("resource"), "" | "leases")
    }
}

/// Prints the plugin's requests between `before` and `after` by resource,
/// verb and code, per ADD (`BENCH_BREAKDOWN`, to see where an ADD's
/// requests go).
pub(crate) fn print_breakdown(tag: &str, before: &Metrics, after: &Metrics, adds: usize) {
    let mut keys: Vec<(String, String, String)> = Vec::new();
    for k in after.0.keys() {
        let Some(labels) = k.strip_prefix(REQUESTS).and_then(|r| r.strip_prefix('{')).and_then(|r| r.strip_suffix('}'))
        else {
            continue;
        };
        let l = Labels(labels);
        if !l.plugin_request() {
            continue;
        }
        let key = (l.get("resource").to_owned(), l.get("verb").to_owned(), l.get("code").to_owned());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.sort();
    for (resource, verb, code) in keys {
        let d = after.since(before, REQUESTS, |l| {
            l.plugin_request() && l.get("resource") == resource && l.get("verb") == verb && l.get("code") == code
        });
        if d > 0.0 {
            eprintln!("{tag}: {resource} {verb} {code}: {:.3} per ADD", d / adds.max(1) as f64);
        }
    }
}
