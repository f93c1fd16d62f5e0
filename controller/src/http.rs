//! /metrics, /healthz and /readyz.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::{debug, warn};

use crate::Controller;
use crate::error::{Error, Result};

/// Which paths a server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Routes {
    /// `/metrics`, `/healthz` and `/readyz`.
    All,
    /// `/healthz` and `/readyz` only (the kubelet's probes).
    Probes,
}

/// Binds `addr` and returns the bound address and the serving future.
pub(crate) async fn bind(
    addr: SocketAddr,
    ctl: Arc<Controller>,
    routes: Routes,
) -> Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await.map_err(|source| Error::Listen { addr, source })?;
    let local = listener.local_addr().map_err(|source| Error::Listen { addr, source })?;
    let serve = async move {
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    continue;
                }
            };
            let ctl = ctl.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let ctl = ctl.clone();
                    async move { Ok::<_, Infallible>(route(&ctl, routes, req.uri().path())) }
                });
                if let Err(e) = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await {
                    debug!(error = %e, "http connection ended");
                }
            });
        }
    };
    Ok((local, serve))
}

fn route(ctl: &Controller, routes: Routes, path: &str) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match path {
        "/metrics" if routes == Routes::All => (StatusCode::OK, crate::metrics::CONTENT_TYPE, ctl.metrics.render()),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        "/readyz" if ctl.ready.load(Ordering::Relaxed) => (StatusCode::OK, "text/plain", "ready\n".to_string()),
        "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, "text/plain", "initial lists not done\n".to_string()),
        _ => (StatusCode::NOT_FOUND, "text/plain", "not found\n".to_string()),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = ctype.parse() {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}
