//! The API server's own counters (`/metrics`): what it did, not what a
//! client says it asked.

use crate::env::client;

/// The sum of the API server's metric `name` over the series whose labels
/// contain every one of `labels` (`resource="networkendpoints"`, ...).
pub async fn apiserver_counter(name: &str, labels: &[&str]) -> f64 {
    let client = client().await;
    let text = client.request_text(http::Request::get("/metrics").body(Vec::new()).unwrap()).await.unwrap();
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{')))
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// What the API server did for NetworkEndpoints, from its own counters:
/// LISTs and WATCHes of the collection (not narrowed to one name), and the
/// objects its watch cache scanned for lists.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LeaseScans {
    /// LIST requests of the collection.
    pub lists: f64,
    /// WATCH requests of the collection (not of one name).
    pub collection_watches: f64,
    /// Objects the watch cache went through to answer lists.
    pub fetched: f64,
}

impl LeaseScans {
    /// The counters now.
    pub async fn now() -> Self {
        let r = r#"resource="networkendpoints""#;
        Self {
            lists: apiserver_counter("apiserver_request_total", &[r, r#"verb="LIST""#]).await,
            collection_watches: apiserver_counter(
                "apiserver_request_total",
                &[r, r#"verb="WATCH""#, r#"scope="cluster""#],
            )
            .await,
            fetched: apiserver_counter("apiserver_cache_list_fetched_objects_total", &[r]).await,
        }
    }

    /// What happened since `before`.
    pub async fn since(before: Self) -> Self {
        let now = Self::now().await;
        Self {
            lists: now.lists - before.lists,
            collection_watches: now.collection_watches - before.collection_watches,
            fetched: now.fetched - before.fetched,
        }
    }
}
