//! The operability endpoints: `/metrics`, `/healthz`, `/readyz` and `/rules`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use crate::agent::Agent;
use crate::error::{Error, Result};

/// Binds `addr` and returns the bound address and the serving future.
///
/// The server never stops on its own. A failed accept (for example EMFILE,
/// out of file descriptors) is logged and retried after a pause of 100 ms,
/// doubling to at most 1 s while the failures last, so a persistent error
/// costs one log line a second rather than a spinning core.
///
/// - `/metrics`: the Prometheus metrics, in OpenMetrics text ([`crate::metrics::CONTENT_TYPE`]).
/// - `/healthz`: 200 while the process runs.
/// - `/readyz`: 200 once the first list of endpoints was reconciled, 503 before.
/// - `/rules`: the dataplane table as JSON (a debugging aid; tests read
///   it), only when `endpoints` is [`Endpoints::WithRules`].
///
/// With [`Endpoints::ProbesOnly`], only `/healthz` and `/readyz` answer.
///
/// Every connection serves one request. Its headers must arrive within
/// [`HEADER_READ_TIMEOUT`], and the whole exchange ends within
/// [`CONNECTION_TIMEOUT`], so a client that opens connections and sends
/// nothing (or reads nothing) holds no task for longer.
pub async fn bind(
    addr: SocketAddr,
    agent: Arc<Agent>,
    endpoints: Endpoints,
) -> Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener =
        TcpListener::bind(addr).await.map_err(|source| Error::Io { path: format!("tcp://{addr}").into(), source })?;
    let local = listener.local_addr().map_err(|source| Error::Io { path: format!("tcp://{addr}").into(), source })?;
    info!(addr = %local, paths = endpoints.paths(), "serving");
    let listener = Arc::new(listener);
    let serve = accept_loop(
        move || {
            let listener = listener.clone();
            async move { listener.accept().await.map(|(stream, _)| stream) }
        },
        move |stream| {
            let agent = agent.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let agent = agent.clone();
                    async move { Ok::<_, Infallible>(route(&agent, endpoints, req.uri().path())) }
                });
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .keep_alive(false)
                    .serve_connection(TokioIo::new(stream), svc);
                match tokio::time::timeout(CONNECTION_TIMEOUT, conn).await {
                    Ok(Err(e)) => debug!(error = %e, "http connection ended"),
                    Err(_) => debug!("http connection timed out"),
                    Ok(Ok(())) => {}
                }
            });
        },
    );
    Ok((local, serve))
}

/// How long a client may take to send its request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection (one request and its response) may last.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(15);

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

/// The pause after a failed accept: 100 ms, doubling up to 1 s while the
/// failures go on, and back to 100 ms after an accept succeeds.
#[derive(Debug)]
struct AcceptBackoff {
    next: Duration,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(1);

    fn new() -> Self {
        Self { next: Self::FIRST }
    }

    /// The pause before the next accept, after a failure.
    fn failed(&mut self) -> Duration {
        let pause = self.next;
        self.next = (pause * 2).min(Self::MAX);
        pause
    }

    fn succeeded(&mut self) {
        self.next = Self::FIRST;
    }
}

/// Accepts forever, handing each connection to `handle`, and pausing after
/// every failed accept as [`AcceptBackoff`] says.
async fn accept_loop<S, F>(mut accept: impl FnMut() -> F, mut handle: impl FnMut(S))
where
    F: Future<Output = std::io::Result<S>>,
{
    let mut backoff = AcceptBackoff::new();
    loop {
        match accept().await {
            Ok(stream) => {
                backoff.succeeded();
                handle(stream);
            }
            Err(e) => {
                let pause = backoff.failed();
                warn!(error = %e, retry_in_ms = pause.as_millis() as u64, "cannot accept a connection");
                tokio::time::sleep(pause).await;
            }
        }
    }
}

fn route(agent: &Agent, endpoints: Endpoints, path: &str) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match path {
        "/metrics" if endpoints != Endpoints::ProbesOnly => {
            (StatusCode::OK, crate::metrics::CONTENT_TYPE, agent.render_metrics())
        }
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        "/readyz" if agent.is_ready() => (StatusCode::OK, "text/plain", "ready\n".to_string()),
        "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, "text/plain", "initial sync not done\n".to_string()),
        "/rules" if endpoints == Endpoints::WithRules => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn agent() -> Agent {
        Agent::new(Box::new(crate::dataplane::MemoryTable::new()), crate::eventlog::EventLog::disabled(), false)
    }

    #[test]
    fn rules_are_served_only_when_asked_and_probe_listeners_serve_only_probes() {
        let agent = agent();
        let status = |e: Endpoints, path: &str| route(&agent, e, path).status();
        assert_eq!(status(Endpoints::Metrics, "/rules"), StatusCode::NOT_FOUND);
        assert_eq!(status(Endpoints::WithRules, "/rules"), StatusCode::OK);
        assert_eq!(status(Endpoints::Metrics, "/metrics"), StatusCode::OK);
        assert_eq!(status(Endpoints::ProbesOnly, "/metrics"), StatusCode::NOT_FOUND);
        assert_eq!(status(Endpoints::ProbesOnly, "/rules"), StatusCode::NOT_FOUND);
        assert_eq!(status(Endpoints::ProbesOnly, "/healthz"), StatusCode::OK);
        assert_eq!(status(Endpoints::ProbesOnly, "/readyz"), StatusCode::SERVICE_UNAVAILABLE);
    }

    /// A client that connects and sends nothing is disconnected by the
    /// server (after HEADER_READ_TIMEOUT, which paused time skips over).
    #[tokio::test(start_paused = true)]
    async fn a_silent_client_is_disconnected() {
        use tokio::io::AsyncReadExt;
        let (addr, serve) = bind("127.0.0.1:0".parse().unwrap(), Arc::new(agent()), Endpoints::Metrics).await.unwrap();
        tokio::spawn(serve);
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut buf = Vec::new();
        // Ends (EOF or reset) only because the server closes the connection,
        // before the 15 s limit on the whole connection would.
        let closed = tokio::time::timeout(Duration::from_secs(10), silent.read_to_end(&mut buf)).await;
        assert!(closed.is_ok(), "the header read timeout closes a silent connection");
        let text = String::from_utf8_lossy(&buf);
        assert!(buf.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
    }

    #[test]
    fn the_pause_doubles_to_a_second_and_resets_after_a_success() {
        let mut b = AcceptBackoff::new();
        let ms: Vec<u128> = (0..6).map(|_| b.failed().as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1000, 1000]);
        b.succeeded();
        assert_eq!(b.failed(), Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn a_persistent_accept_error_does_not_spin() {
        let attempts = AtomicUsize::new(0);
        let accept = || {
            attempts.fetch_add(1, Ordering::Relaxed);
            async { Err::<(), _>(std::io::Error::from_raw_os_error(24)) } // EMFILE
        };
        let ten_seconds = tokio::time::timeout(Duration::from_secs(10), accept_loop(accept, |()| {})).await;
        assert!(ten_seconds.is_err(), "the loop never returns");
        // At 0, 0.1, 0.3, 0.7 s, then every second from 1.5 s to 9.5 s.
        assert_eq!(attempts.load(Ordering::Relaxed), 13);
    }
}
