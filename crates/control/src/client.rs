//! A small blocking HTTP/1.1 client for Tessera's own control plane (the controller talking to
//! agents, an agent talking to its units): one request per connection, every step bounded by a
//! time-out, so that a host behind a cut link is an error within that time, never a hang.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Largest answer body taken, in bytes.
pub const MAX_BODY_BYTES: u64 = 16 << 20;

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body, as text.
    pub body: String,
}

impl Answer {
    /// Whether the status is 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection could not be made in time.
    #[error("{addr}: cannot connect: {error}")]
    Connect {
        /// The address called.
        addr: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
    /// Sending or reading failed or took too long.
    #[error("{addr}: {error}")]
    Io {
        /// The address called.
        addr: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
    /// The answer is not HTTP as this client reads it.
    #[error("{addr}: unreadable answer: {what}")]
    Malformed {
        /// The address called.
        addr: SocketAddr,
        /// What is wrong.
        what: String,
    },
}

/// One request: `method path` to `addr` with `token` as a bearer token and `body` as JSON,
/// each of connecting, sending and every read bounded by `timeout`.
pub fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
    timeout: Duration,
) -> Result<Answer, ClientError> {
    let io = |error: std::io::Error| {
        // A read or write time-out comes as "would block": say what it means.
        let error = match error.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {:.1} s", timeout.as_secs_f64()),
            ),
            _ => error,
        };
        ClientError::Io { addr, error }
    };
    let mut stream =
        TcpStream::connect_timeout(&addr, timeout).map_err(|error| ClientError::Connect { addr, error })?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() {
        request.push_str("Content-Type: application/json\r\n");
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut raw = Vec::new();
    stream.take(MAX_BODY_BYTES + 64 * 1024).read_to_end(&mut raw).map_err(io)?;
    parse(addr, &raw)
}

fn parse(addr: SocketAddr, raw: &[u8]) -> Result<Answer, ClientError> {
    let malformed = |what: &str| ClientError::Malformed { addr, what: what.to_owned() };
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| malformed("no end of headers"))?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|_| malformed("headers are not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.strip_prefix("HTTP/1.1 ").or_else(|| l.strip_prefix("HTTP/1.0 ")))
        .and_then(|l| l.get(..3))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| malformed("no HTTP status line"))?;
    let chunked = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding") && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let rest = &raw[split + 4..];
    let body = if chunked { unchunk(rest).ok_or_else(|| malformed("bad chunked body"))? } else { rest.to_vec() };
    if body.len() as u64 > MAX_BODY_BYTES {
        return Err(malformed("body larger than 16 MiB"));
    }
    Ok(Answer { status, body: String::from_utf8_lossy(&body).into_owned() })
}

/// The body of a chunked transfer, or `None` if it is cut short or malformed.
fn unchunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..eol]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }

    #[test]
    fn plain_and_chunked_answers_are_read() {
        let a = parse(addr(), b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").unwrap();
        assert_eq!(a, Answer { status: 200, body: "ok".into() });
        let a = parse(
            addr(),
            b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(a, Answer { status: 409, body: "abcde".into() });
        assert!(!a.ok());
    }

    #[test]
    fn garbage_is_an_error_that_names_the_peer() {
        let e = parse(addr(), b"SSH-2.0-OpenSSH\r\n\r\n").unwrap_err();
        assert_eq!(e.to_string(), "127.0.0.1:1: unreadable answer: no HTTP status line");
        assert!(parse(addr(), b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\nab").is_err());
    }

    #[test]
    fn a_silent_peer_is_an_error_within_the_time_out() {
        // Accepted by the kernel's backlog, never answered: the read times out.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = listener.local_addr().unwrap();
        let started = std::time::Instant::now();
        let e = call(to, "GET", "/", None, None, Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.to_string(), format!("{to}: no answer within 0.2 s"));
        assert!(started.elapsed() < Duration::from_secs(5), "bounded by the time-out");
    }
}
