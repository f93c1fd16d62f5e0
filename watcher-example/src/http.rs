//! The operability endpoints: `/metrics`, `/healthz`, `/readyz` and `/rules`.

use std::net::SocketAddr;
use std::sync::Arc;

use netendpoint_ops_http::Reply;
use tracing::info;

use crate::agent::Agent;
use crate::error::{Error, Result};

pub use netendpoint_ops_http::{CONNECTION_TIMEOUT, HEADER_READ_TIMEOUT};

/// Binds `addr` and returns the bound address and the serving future
/// (`netendpoint-ops-http`: one request per connection, header and
/// connection timeouts, an accept backoff).
///
/// - `/metrics`: the Prometheus metrics, in OpenMetrics text ([`crate::metrics::CONTENT_TYPE`]).
/// - `/healthz`: 200 while the process runs.
/// - `/readyz`: 200 once the first list of endpoints was reconciled, 503 before.
/// - `/rules`: the dataplane table as JSON (a debugging aid; tests read
///   it), only when `endpoints` is [`Endpoints::WithRules`].
///
/// With [`Endpoints::ProbesOnly`], only `/healthz` and `/readyz` answer.
pub async fn bind(
    addr: SocketAddr,
    agent: Arc<Agent>,
    endpoints: Endpoints,
) -> Result<(SocketAddr, impl Future<Output = ()>)> {
    let (local, serve) = netendpoint_ops_http::bind(addr, move |path| route(&agent, endpoints, path))
        .await
        .map_err(|source| Error::Io { path: format!("tcp://{addr}").into(), source })?;
    info!(addr = %local, paths = endpoints.paths(), "serving");
    Ok((local, serve))
}

/// Which paths a listener answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoints {
    /// `/metrics`, `/healthz`, `/readyz`.
    Metrics,
    /// `/metrics`, `/healthz`, `/readyz` and `/rules`.
    WithRules,
    /// `/healthz` and `/readyz` only.
    ProbesOnly,
}

impl Endpoints {
    fn paths(self) -> &'static str {
        match self {
            Self::Metrics => "/metrics /healthz /readyz",
            Self::WithRules => "/metrics /healthz /readyz /rules",
            Self::ProbesOnly => "/healthz /readyz",
        }
    }
}

fn route(agent: &Agent, endpoints: Endpoints, path: &str) -> Reply {
    match path {
        "/metrics" if endpoints != Endpoints::ProbesOnly => {
            Reply::ok(crate::metrics::CONTENT_TYPE, agent.render_metrics())
        }
        "/healthz" => Reply::text(200, "ok\n"),
        "/readyz" if agent.is_ready() => Reply::text(200, "ready\n"),
        "/readyz" => Reply::text(503, "initial sync not done\n"),
        "/rules" if endpoints == Endpoints::WithRules => {
            Reply::ok("application/json", serde_json::to_string(&agent.rules()).unwrap_or_else(|_| "[]".into()))
        }
        _ => Reply::not_found(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent() -> Agent {
        Agent::new(Box::new(crate::dataplane::MemoryTable::new()), crate::eventlog::EventLog::disabled(), false)
    }

    #[test]
    fn rules_are_served_only_when_asked_and_probe_listeners_serve_only_probes() {
        let agent = agent();
        let status = |e: Endpoints, path: &str| route(&agent, e, path).status;
        assert_eq!(status(Endpoints::Metrics, "/rules"), 404);
        assert_eq!(status(Endpoints::WithRules, "/rules"), 200);
        assert_eq!(status(Endpoints::Metrics, "/metrics"), 200);
        assert_eq!(status(Endpoints::ProbesOnly, "/metrics"), 404);
        assert_eq!(status(Endpoints::ProbesOnly, "/rules"), 404);
        assert_eq!(status(Endpoints::ProbesOnly, "/healthz"), 200);
        assert_eq!(status(Endpoints::ProbesOnly, "/readyz"), 503);
    }
}
