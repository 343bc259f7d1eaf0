//! The blocking HTTP client of Tessera's own control plane (the controller talking to agents,
//! an agent talking to its units), on `ureq`: every request bounded as a whole by a time-out, so
//! that a host behind a cut link is an error within that time, never a hang.

use std::net::SocketAddr;
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
#[non_exhaustive]
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

/// One request: `method path` to `addr` with `token` as a bearer token and `body` as JSON, all
/// of it (connecting, sending, reading the answer) bounded by `timeout`.
pub fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
    timeout: Duration,
) -> Result<Answer, ClientError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let malformed = |what: String| ClientError::Malformed { addr, what };
    let mut request = ureq::http::Request::builder().method(method).uri(format!("http://{addr}{path}"));
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let sent = match body {
        Some(body) => agent.run(
            request
                .header("Content-Type", "application/json")
                .body(body)
                .map_err(|e| malformed(format!("bad request: {e}")))?,
        ),
        None => agent.run(request.body(ureq::SendBody::none()).map_err(|e| malformed(format!("bad request: {e}")))?),
    };
    let failed = |error: ureq::Error| match error {
        ureq::Error::Timeout(ureq::Timeout::Connect) => ClientError::Connect {
            addr,
            error: std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within {:.1} s", timeout.as_secs_f64()),
            ),
        },
        ureq::Error::Timeout(_) => ClientError::Io {
            addr,
            error: std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {:.1} s", timeout.as_secs_f64()),
            ),
        },
        ureq::Error::Io(error) if refused_connection(&error) => ClientError::Connect { addr, error },
        ureq::Error::Io(error) => ClientError::Io { addr, error },
        ureq::Error::ConnectionFailed => {
            ClientError::Connect { addr, error: std::io::Error::from(std::io::ErrorKind::ConnectionRefused) }
        }
        ureq::Error::BodyExceedsLimit(_) => malformed(format!("body larger than {} MiB", MAX_BODY_BYTES >> 20)),
        other => malformed(other.to_string()),
    };
    let mut answer = sent.map_err(failed)?;
    let status = answer.status().as_u16();
    let body = answer.body_mut().with_config().limit(MAX_BODY_BYTES).read_to_vec().map_err(failed)?;
    Ok(Answer { status, body: String::from_utf8_lossy(&body).into_owned() })
}

/// Whether `error` is one of connecting: nobody listens, or the address cannot be reached.
fn refused_connection(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::{AddrNotAvailable, ConnectionRefused, HostUnreachable, NetworkUnreachable};
    matches!(error.kind(), ConnectionRefused | HostUnreachable | NetworkUnreachable | AddrNotAvailable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Answers one connection with `answer` after reading its request head.
    fn answering(answer: &'static [u8]) -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let _ = stream.write_all(answer);
        });
        addr
    }

    #[test]
    fn plain_and_chunked_answers_are_read() {
        let to = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
        let a = call(to, "GET", "/", None, None, Duration::from_secs(5)).unwrap();
        assert_eq!(a, Answer { status: 200, body: "ok".into() });
        let to =
            answering(b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
        let a = call(to, "POST", "/x", Some("t"), Some("{}"), Duration::from_secs(5)).unwrap();
        assert_eq!(a, Answer { status: 409, body: "abcde".into() });
        assert!(!a.ok());
    }

    #[test]
    fn garbage_is_an_error_that_names_the_peer() {
        let to = answering(b"SSH-2.0-OpenSSH\r\n\r\n");
        let e = call(to, "GET", "/", None, None, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(e, ClientError::Malformed { .. }), "{e}");
        assert!(e.to_string().starts_with(&format!("{to}: unreadable answer: ")), "{e}");
        let to = answering(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\nab");
        assert!(call(to, "GET", "/", None, None, Duration::from_secs(5)).is_err());
    }

    #[test]
    fn a_silent_peer_is_an_error_within_the_time_out() {
        // Accepted by the kernel's backlog, never answered: the request times out.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = listener.local_addr().unwrap();
        let started = std::time::Instant::now();
        let e = call(to, "GET", "/", None, None, Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.to_string(), format!("{to}: no answer within 0.2 s"));
        assert!(started.elapsed() < Duration::from_secs(5), "bounded by the time-out");
    }

    #[test]
    fn nobody_listening_is_a_connect_error() {
        let to: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let e = call(to, "GET", "/", None, None, Duration::from_secs(2)).unwrap_err();
        assert!(matches!(e, ClientError::Connect { .. }), "{e}");
        assert!(e.to_string().starts_with("127.0.0.1:1: cannot connect: "), "{e}");
    }
}
