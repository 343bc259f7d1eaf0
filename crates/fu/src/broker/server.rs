//! The broker's HTTP/1.1 server on axum and hyper: its routes, the request bounds checked before
//! any endpoint runs, and the connections, bounded in number and in time.
//!
//! Connections are bounded by a semaphore taken on accept ([`BrokerConfig::max_connections`]
//! permits, one per open connection, given back when it closes); a connection over the bound is
//! answered 503 by at most [`BUSY_ANSWERS`] tasks at once, each for at most
//! [`BUSY_ANSWER_TIMEOUT`], and closed unanswered beyond them. Each connection has one request
//! in flight at a time, whose endpoint runs on tokio's blocking pool (it lists, renames and
//! opens files), so the blocking work queued is bounded by the connections too. A request's
//! head must arrive within [`BrokerConfig::idle_timeout`] of the previous answer (or of the
//! connection's opening), its body within [`BrokerConfig::read_timeout`], and a write may stall
//! for at most [`BrokerConfig::write_timeout`].
//!
//! [`BrokerConfig::max_connections`]: super::BrokerConfig::max_connections
//! [`BrokerConfig::idle_timeout`]: super::BrokerConfig::idle_timeout
//! [`BrokerConfig::read_timeout`]: super::BrokerConfig::read_timeout
//! [`BrokerConfig::write_timeout`]: super::BrokerConfig::write_timeout

use super::endpoints::{done, popfile, publish_summary, release, remove_summary, run_state, serve_claimed};
use super::http::Answer;
use super::{MAX_REQUEST_BODY_BYTES, MAX_REQUEST_HEAD_BYTES, MAX_REQUEST_HEADERS, Refusal, Shared, sweep};
use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Uri, Version, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, any};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio_io_timeout::TimeoutStream;
use tower::ServiceExt as _;

/// Connections over the bound answered 503 at once; more are closed without an answer.
pub(super) const BUSY_ANSWERS: usize = 64;
/// How long answering 503 to a connection over the bound may take.
pub(super) const BUSY_ANSWER_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the accepting task waits when accepting fails (out of descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);
/// How often the broker looks at its grants: files their readers deleted, leases run out.
pub(super) const SWEEP_INTERVAL: Duration = Duration::from_millis(250);

/// The broker's routes (module documentation of [`super`]); every other path is 404, every
/// other method 405 with `Allow`.
pub(super) fn router(shared: Arc<Shared>) -> Router {
    use MethodFilter as M;
    Router::new()
        .route("/popfile", takes("/popfile", "GET", &[(M::GET, |s, peer, query, _| popfile(&query, peer, s))]))
        .route("/state", takes("/state", "GET", &[(M::GET, |s, peer, query, _| run_state(&query, peer, s))]))
        .route("/file", takes("/file", "GET", &[(M::GET, |s, _, query, _| serve_claimed(&query, s, false))]))
        .route("/index", takes("/index", "GET", &[(M::GET, |s, _, query, _| serve_claimed(&query, s, true))]))
        .route("/done", takes("/done", "POST", &[(M::POST, |s, _, query, _| done(&query, s))]))
        .route("/release", takes("/release", "POST", &[(M::POST, |s, _, query, _| release(&query, s))]))
        .route(
            "/summary",
            takes(
                "/summary",
                "POST, DELETE",
                &[
                    (M::POST, |s, peer, query, body| publish_summary(&query, &body, peer, s)),
                    (M::DELETE, |s, peer, query, _| remove_summary(&query, peer, s)),
                ],
            ),
        )
        .fallback(any(|State(shared): State<Arc<Shared>>, uri: Uri| async move {
            Answer::error(404, shared.run.load(Ordering::Relaxed), &format!("no endpoint {:?}", uri.path()))
        }))
        .layer(middleware::from_fn_with_state(Arc::clone(&shared), bounds_and_connection))
        .with_state(shared)
}

/// An endpoint: given the shared state, the peer, the raw query and the body (at most
/// [`MAX_REQUEST_BODY_BYTES`]), the answer or a refusal.
type Endpoint = fn(&Shared, SocketAddr, String, Vec<u8>) -> Result<Answer, Refusal>;

/// A path served by `endpoints` for their methods, and by nothing else (`HEAD` included, which
/// axum would otherwise give to a `GET` route): other methods get 405 with `Allow: allow`.
fn takes(path: &'static str, allow: &'static str, endpoints: &[(MethodFilter, Endpoint)]) -> MethodRouter<Arc<Shared>> {
    let not_allowed = move |State(shared): State<Arc<Shared>>| async move {
        let message = format!("{path} takes {}", allow.replace(", ", " or "));
        let mut answer = Answer::error(405, shared.run.load(Ordering::Relaxed), &message);
        answer.allow = Some(allow);
        answer
    };
    let mut router = MethodRouter::new().on(MethodFilter::HEAD, not_allowed).fallback(not_allowed);
    for &(method, serve) in endpoints {
        router = router.on(
            method,
            move |State(shared): State<Arc<Shared>>, ConnectInfo(peer): ConnectInfo<SocketAddr>, request: Request| {
                run_endpoint(serve, shared, peer, request)
            },
        );
    }
    router
}

/// Reads the body of `request` (within [`super::BrokerConfig::read_timeout`]) and runs
/// `serve` on the blocking pool; a refusal becomes an error document.
async fn run_endpoint(serve: Endpoint, shared: Arc<Shared>, peer: SocketAddr, request: Request) -> Answer {
    let run = shared.run.load(Ordering::Relaxed);
    let query = request.uri().query().unwrap_or_default().to_owned();
    let read = axum::body::to_bytes(request.into_body(), MAX_REQUEST_BODY_BYTES as usize);
    let body = match tokio::time::timeout(shared.read_timeout, read).await {
        Ok(Ok(body)) => body.to_vec(),
        Ok(Err(e)) => return Answer::error(400, run, &format!("reading the request body: {e}")),
        Err(_) => {
            return Answer::error(408, run, &format!("the request body took more than {:?}", shared.read_timeout));
        }
    };
    match tokio::task::spawn_blocking(move || serve(&shared, peer, query, body)).await {
        Ok(answer) => answer.unwrap_or_else(|(status, message)| Answer::error(status, run, &message)),
        Err(e) => Answer::error(500, run, &format!("the endpoint failed: {e}")),
    }
}

/// Refuses what the broker does not read (a body over [`MAX_REQUEST_BODY_BYTES`]: 413; a
/// chunked one: 501) and closes after; otherwise serves the request and says in `Connection`
/// whether the connection stays open (not once the broker is stopping).
async fn bounds_and_connection(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let run = shared.run.load(Ordering::Relaxed);
    let headers = request.headers();
    let refusal = if headers.contains_key(header::TRANSFER_ENCODING) {
        Some((501, "Transfer-Encoding is not supported".to_owned()))
    } else {
        let length = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        length
            .filter(|&n| n > MAX_REQUEST_BODY_BYTES)
            .map(|_| (413, format!("request body over {MAX_REQUEST_BODY_BYTES} bytes")))
    };
    let keep_alive = refusal.is_none() && wants_keep_alive(request.version(), headers) && !shared.is_stopping();
    let mut response = match refusal {
        Some((status, message)) => Answer::error(status, run, &message).into_response(),
        None => next.run(request).await,
    };
    let connection = if keep_alive { "keep-alive" } else { "close" };
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static(connection));
    response
}

/// Whether the client asks to keep the connection open: HTTP/1.1 unless `Connection: close`,
/// HTTP/1.0 only with `Connection: keep-alive`.
fn wants_keep_alive(version: Version, headers: &HeaderMap) -> bool {
    let mut keep_alive = version == Version::HTTP_11;
    for value in headers.get_all(header::CONNECTION) {
        for token in value.to_str().unwrap_or_default().split(',').map(str::trim) {
            if token.eq_ignore_ascii_case("close") {
                return false;
            }
            keep_alive |= token.eq_ignore_ascii_case("keep-alive");
        }
    }
    keep_alive
}

/// HTTP/1.1 as the broker speaks it: headers spelt `Content-Length`, no `Date`, a request
/// head of at most [`MAX_REQUEST_HEAD_BYTES`] and [`MAX_REQUEST_HEADERS`] lines, arriving
/// within `idle_timeout`.
fn http1(idle_timeout: Duration) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(idle_timeout)
        .title_case_headers(true)
        .auto_date_header(false)
        .max_headers(MAX_REQUEST_HEADERS)
        .max_buf_size(MAX_REQUEST_HEAD_BYTES);
    builder
}

/// Accepts connections until `stop` says so, looking at the grants every
/// [`SWEEP_INTERVAL`]; then lets every connection finish the answer it is writing and waits for
/// them.
pub(super) async fn serve(listener: TcpListener, shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    let router = router(Arc::clone(&shared));
    let slots = Arc::new(Semaphore::new(shared.max_connections));
    let busy = Arc::new(Semaphore::new(BUSY_ANSWERS));
    let mut connections = JoinSet::new();
    let mut sweeps = tokio::time::interval(SWEEP_INTERVAL);
    sweeps.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stopping = stop.clone();
    loop {
        tokio::select! {
            _ = stopping.wait_for(|stop| *stop) => break,
            _ = sweeps.tick() => {
                let sweeping = Arc::clone(&shared);
                let _ = tokio::task::spawn_blocking(move || sweep(&sweeping)).await;
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else {
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                if let Ok(slot) = Arc::clone(&slots).try_acquire_owned() {
                    let connection = Connection { peer, router: router.clone(), shared: Arc::clone(&shared), _slot: slot };
                    connections.spawn(connection.serve(stream, stop.clone()));
                } else if let Ok(slot) = Arc::clone(&busy).try_acquire_owned() {
                    connections.spawn(refuse_busy(stream, Arc::clone(&shared), slot));
                }
            }
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// An accepted connection within the bound.
struct Connection {
    peer: SocketAddr,
    router: Router,
    shared: Arc<Shared>,
    /// Its place among [`super::BrokerConfig::max_connections`], given back when it closes.
    _slot: OwnedSemaphorePermit,
}

impl Connection {
    /// Serves requests until the client closes, a bound runs out, or the broker stops (then
    /// after the answer being written).
    async fn serve(self, stream: TcpStream, mut stop: watch::Receiver<bool>) {
        let mut stream = TimeoutStream::new(stream);
        stream.set_write_timeout(Some(self.shared.write_timeout));
        let (peer, router) = (self.peer, self.router);
        let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            router.clone().oneshot(request.map(axum::body::Body::new))
        });
        let connection = http1(self.shared.idle_timeout).serve_connection(TokioIo::new(Box::pin(stream)), service);
        let mut connection = std::pin::pin!(connection);
        tokio::select! {
            _ = connection.as_mut() => return,
            _ = stop.wait_for(|stop| *stop) => {}
        }
        connection.as_mut().graceful_shutdown();
        let _ = connection.await;
    }
}

/// Answers 503 to the request of a connection over the bound, then closes it.
async fn refuse_busy(stream: TcpStream, shared: Arc<Shared>, _slot: OwnedSemaphorePermit) {
    let run = shared.run.load(Ordering::Relaxed);
    let service = hyper::service::service_fn(move |_: hyper::Request<hyper::body::Incoming>| {
        let mut response = Answer::error(503, run, "too many connections; try again").into_response();
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        std::future::ready(Ok::<_, Infallible>(response))
    });
    let connection = http1(BUSY_ANSWER_TIMEOUT).serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(BUSY_ANSWER_TIMEOUT, connection).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_alive_follows_the_version_and_the_connection_header() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONNECTION, HeaderValue::from_str(value).unwrap());
            headers
        };
        assert!(wants_keep_alive(Version::HTTP_11, &HeaderMap::new()));
        assert!(!wants_keep_alive(Version::HTTP_11, &with("Close")));
        assert!(!wants_keep_alive(Version::HTTP_10, &HeaderMap::new()));
        assert!(wants_keep_alive(Version::HTTP_10, &with("keep-alive")));
        assert!(!wants_keep_alive(Version::HTTP_11, &with("keep-alive, close")));
    }
}
