//! The operability server of netendpoint's long-running parts
//! (`netendpoint-controller`, `watcher-example`): `/metrics` and the
//! kubelet's probes. One request per connection, served by a route
//! function the caller gives; every connection is bounded in time, and a
//! failing accept backs off instead of spinning.

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
use tracing::{debug, warn};

/// How long a client may take to send its request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection (one request and its response) may last.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(15);

/// What a route answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl Reply {
    /// 200 with `body` of `content_type`.
    pub fn ok(content_type: &'static str, body: String) -> Self {
        Self { status: 200, content_type, body }
    }

    /// `status` with a plain-text `body`.
    pub fn text(status: u16, body: &str) -> Self {
        Self { status, content_type: "text/plain", body: body.to_string() }
    }

    /// 404.
    pub fn not_found() -> Self {
        Self::text(404, "not found\n")
    }

    fn into_response(self) -> Response<Full<Bytes>> {
        let mut resp = Response::new(Full::new(Bytes::from(self.body)));
        *resp.status_mut() = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if let Ok(v) = self.content_type.parse() {
            resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        resp
    }
}

/// Binds `addr` and returns the bound address and the serving future,
/// which answers each request's path with `route`.
///
/// The server never stops on its own. Every connection serves one request;
/// its headers must arrive within [`HEADER_READ_TIMEOUT`] and the whole
/// exchange must end within [`CONNECTION_TIMEOUT`], so a client that opens
/// connections and sends (or reads) nothing holds no task for longer. A
/// failed accept (EMFILE, for one) is logged and retried after 100 ms,
/// doubling to 1 s while the failures last ([`AcceptBackoff`]).
pub async fn bind<R>(addr: SocketAddr, route: R) -> std::io::Result<(SocketAddr, impl Future<Output = ()>)>
where
    R: Fn(&str) -> Reply + Send + Sync + 'static,
{
    let listener = Arc::new(TcpListener::bind(addr).await?);
    let local = listener.local_addr()?;
    let route = Arc::new(route);
    let serve = accept_loop(
        move || {
            let listener = listener.clone();
            async move { listener.accept().await.map(|(stream, _)| stream) }
        },
        move |stream| {
            let route = route.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let reply = route(req.uri().path());
                    async move { Ok::<_, Infallible>(reply.into_response()) }
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

/// The pause after a failed accept: 100 ms, doubling up to 1 s while the
/// failures go on, and back to 100 ms after an accept succeeds.
#[derive(Debug)]
pub struct AcceptBackoff {
    next: Duration,
}

impl Default for AcceptBackoff {
    fn default() -> Self {
        Self { next: Self::FIRST }
    }
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(1);

    /// The pause before the next accept, after a failure.
    pub fn failed(&mut self) -> Duration {
        let pause = self.next;
        self.next = (pause * 2).min(Self::MAX);
        pause
    }

    /// An accept succeeded.
    pub fn succeeded(&mut self) {
        self.next = Self::FIRST;
    }
}

/// Accepts forever, handing each connection to `handle`, and pausing after
/// every failed accept as [`AcceptBackoff`] says.
async fn accept_loop<S, F>(mut accept: impl FnMut() -> F, mut handle: impl FnMut(S))
where
    F: Future<Output = std::io::Result<S>>,
{
    let mut backoff = AcceptBackoff::default();
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A client that connects and sends nothing is disconnected by the
    /// server (after HEADER_READ_TIMEOUT, which paused time skips over).
    #[tokio::test(start_paused = true)]
    async fn a_silent_client_is_disconnected() {
        use tokio::io::AsyncReadExt;
        let (addr, serve) = bind("127.0.0.1:0".parse().unwrap(), |_| Reply::not_found()).await.unwrap();
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

    #[tokio::test]
    async fn a_request_gets_its_routes_reply() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let route = |path: &str| match path {
            "/healthz" => Reply::ok("text/plain", "ok\n".into()),
            _ => Reply::not_found(),
        };
        let (addr, serve) = bind("127.0.0.1:0".parse().unwrap(), route).await.unwrap();
        tokio::spawn(serve);
        for (path, want) in [("/healthz", "HTTP/1.1 200"), ("/nothing", "HTTP/1.1 404")] {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
            let mut buf = String::new();
            s.read_to_string(&mut buf).await.unwrap();
            assert!(buf.starts_with(want), "{path}: {buf}");
        }
    }

    #[test]
    fn the_pause_doubles_to_a_second_and_resets_after_a_success() {
        let mut b = AcceptBackoff::default();
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
