//! The controller's routes: /metrics, /healthz and /readyz, served by
//! `netendpoint-ops-http` (timeouts, accept backoff).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use netendpoint_ops_http::Reply;

use crate::context::Context;
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
    ctl: Arc<Context>,
    routes: Routes,
) -> Result<(SocketAddr, impl Future<Output = ()>)> {
    netendpoint_ops_http::bind(addr, move |path| route(&ctl, routes, path))
        .await
        .map_err(|source| Error::Listen { addr, source })
}

fn route(ctl: &Context, routes: Routes, path: &str) -> Reply {
    match path {
        "/metrics" if routes == Routes::All => Reply::ok(crate::metrics::CONTENT_TYPE, ctl.metrics.render()),
        "/healthz" => Reply::text(200, "ok\n"),
        "/readyz" if ctl.ready.load(Ordering::Relaxed) => Reply::text(200, "ready\n"),
        "/readyz" => Reply::text(503, "initial lists not done\n"),
        _ => Reply::not_found(),
    }
}
