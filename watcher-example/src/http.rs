//! The operability endpoints: `/metrics`, `/healthz`, `/readyz` and `/rules`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::{debug, info};

use crate::agent::Agent;
use crate::error::{Error, Result};

/// Binds `addr` and returns the bound address and the serving future.
///
/// - `/metrics`: the Prometheus metrics, in OpenMetrics text ([`crate::metrics::CONTENT_TYPE`]).
/// - `/healthz`: 200 while the process runs.
/// - `/readyz`: 200 once the first list of endpoints was reconciled, 503 before.
/// - `/rules`: the dataplane table as JSON (a debugging aid; tests read it).
pub async fn bind(addr: SocketAddr, agent: Arc<Agent>) -> Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener =
        TcpListener::bind(addr).await.map_err(|source| Error::Io { path: format!("tcp://{addr}").into(), source })?;
    let local = listener.local_addr().map_err(|source| Error::Io { path: format!("tcp://{addr}").into(), source })?;
    info!(addr = %local, "serving /metrics, /healthz, /readyz, /rules");
    let serve = async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let agent = agent.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let agent = agent.clone();
                    async move { Ok::<_, Infallible>(route(&agent, req.uri().path())) }
                });
                if let Err(e) = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await {
                    debug!(error = %e, "http connection ended");
                }
            });
        }
    };
    Ok((local, serve))
}

fn route(agent: &Agent, path: &str) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match path {
        "/metrics" => (StatusCode::OK, crate::metrics::CONTENT_TYPE, agent.render_metrics()),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        "/readyz" if agent.is_ready() => (StatusCode::OK, "text/plain", "ready\n".to_string()),
        "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, "text/plain", "initial sync not done\n".to_string()),
        "/rules" => {
            (StatusCode::OK, "application/json", serde_json::to_string(&agent.rules()).unwrap_or_else(|_| "[]".into()))
        }
        _ => (StatusCode::NOT_FOUND, "text/plain", "not found\n".to_string()),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = ctype.parse() {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}
