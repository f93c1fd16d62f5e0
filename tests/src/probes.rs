//! Plain HTTP GETs of the servers the test processes run (metrics,
//! probes, an agent's rules).

use std::io::{Read, Write};
use std::time::Duration;

/// `GET path` from `addr` (`host:port`): the status and the body, or
/// `None` if nothing answers there within 5 s.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes()).ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((code, body))
}
