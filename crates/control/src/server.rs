//! The control server: bound, guarded by its token (any address but loopback needs one) and run on
//! a thread of its own; the agent's server binds and guards the same way. Before any token is
//! seen a caller can hold a connection, so what it can hold is bounded: at most
//! [`MAX_CONNECTIONS`] at once (more are closed as they come, and that is said), a request head
//! within [`REQUEST_HEAD_TIMEOUT`], a stalled read or write within [`STALL_TIMEOUT`].

use crate::api::{self, Served, Shared};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio_io_timeout::TimeoutStream;
use tower::ServiceExt;

/// Most connections a control or agent server holds at once: many more than the operators,
/// dashboards, scrapers and controller that talk to it, far fewer than the file descriptors its
/// units need for their files and links. A connection over the bound is closed as it comes.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a caller has to send a request head, the first and each after it: a half-sent
/// request, or a connection left idle, is closed after it.
pub const REQUEST_HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long reading a request's body or writing an answer may stall.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the server waits after a failed accept (the process out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Where and how the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlConfig {
    /// Address to bind; port 0 takes any free port.
    pub listen: SocketAddr,
    /// The token every request must bring; required unless `listen` is a loopback address.
    pub token: Option<String>,
}

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// A non-loopback address without a token.
    #[error("{0}: a control address other than loopback needs a token")]
    TokenRequired(SocketAddr),
    /// An agent without a token, on any address.
    #[error("{0}: an agent needs a token on every address, loopback included (it starts processes as its user)")]
    AgentToken(SocketAddr),
    /// The OpenAPI document could not be written as JSON.
    #[error("cannot write the OpenAPI document: {0}")]
    OpenApi(String),
    /// Binding failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The HTTP server of a process's units; it stops when dropped.
#[derive(Debug)]
pub struct ControlServer {
    serving: Serving,
}

impl ControlServer {
    /// Binds `config.listen` and serves what `served` says on a thread of its own.
    pub fn start(config: &ControlConfig, served: Served) -> Result<ControlServer, ControlError> {
        token_required(config.listen, config.token.as_deref())?;
        let shared = Shared {
            units: served.units,
            token: config.token.as_deref().map(Arc::from),
            stop: served.stop,
            enable: served.enable,
            mask: served.mask,
            system: served.system.map(Arc::from),
            run: served.run,
            openapi: Arc::from(""),
        };
        let (router, api) = api::api_router().split_for_parts();
        let openapi = api.to_pretty_json().map_err(|e| ControlError::OpenApi(e.to_string()))?;
        let shared = Shared { openapi: Arc::from(openapi), ..shared };
        let app = router.layer(middleware::from_fn_with_state(shared.clone(), require_token)).with_state(shared);
        Ok(ControlServer { serving: serve(config.listen, app)? })
    }

    /// Writes the address the server listens on into `path` (written whole, then renamed), for
    /// a supervisor that started this process with port 0.
    pub fn write_address(&self, path: &std::path::Path) -> std::io::Result<()> {
        let partial = path.with_extension("partial");
        std::fs::write(&partial, format!("{}\n", self.local_addr()))?;
        std::fs::rename(partial, path)
    }

    /// The address it serves on.
    pub fn local_addr(&self) -> SocketAddr {
        self.serving.local_addr()
    }
}

/// An HTTP server on a thread of its own ([`serve`]); it stops, and its thread is joined, when
/// dropped.
#[derive(Debug)]
pub struct Serving {
    addr: SocketAddr,
    stop: Option<watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
}

impl Serving {
    /// The address it serves on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A non-loopback address needs a token (guarantee 5 of the design).
pub(crate) fn token_required(listen: SocketAddr, token: Option<&str>) -> Result<(), ControlError> {
    if !listen.ip().is_loopback() && token.is_none_or(str::is_empty) {
        return Err(ControlError::TokenRequired(listen));
    }
    Ok(())
}

/// Binds `listen` and serves `app` on a thread of its own, until the handle is dropped.
pub fn serve(listen: SocketAddr, app: Router) -> Result<Serving, ControlError> {
    let listener = std::net::TcpListener::bind(listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|source| ControlError::Bind { addr: listen, source })?;
    let addr = listener.local_addr().map_err(|source| ControlError::Bind { addr: listen, source })?;
    let (stop, stopped) = watch::channel(false);
    let thread = std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            // Blocking calls (an agent asking its units) get threads of their own.
            let runtime =
                match tokio::runtime::Builder::new_current_thread().enable_all().max_blocking_threads(16).build() {
                    Ok(rt) => rt,
                    Err(e) => return eprintln!("control server: cannot start its runtime: {e}"),
                };
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
                accept_loop(listener, app, stopped).await;
            });
        })
        .map_err(|source| ControlError::Bind { addr, source })?;
    Ok(Serving { addr, stop: Some(stop), thread: Some(thread) })
}

/// Accepts connections, at most [`MAX_CONNECTIONS`] at once, until `stop`; then lets each
/// finish the answer it is writing.
async fn accept_loop(listener: tokio::net::TcpListener, app: Router, stop: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    let mut stopping = stop.clone();
    let mut full_said = false;
    loop {
        tokio::select! {
            _ = stopping.wait_for(|stop| *stop) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                };
                match Arc::clone(&slots).try_acquire_owned() {
                    Ok(slot) => {
                        full_said = false;
                        let app = app.clone();
                        let stop = stop.clone();
                        connections.spawn(async move {
                            serve_connection(stream, app, stop).await;
                            drop(slot);
                        });
                    }
                    // Closed at once: it holds nothing.
                    Err(_) => {
                        if !std::mem::replace(&mut full_said, true) {
                            tracing::warn!(
                                "control server: {MAX_CONNECTIONS} connections open, its bound; newer ones are \
                                 closed until some end (a connection that sends no request head within {} s is \
                                 closed)",
                                REQUEST_HEAD_TIMEOUT.as_secs()
                            );
                        }
                    }
                }
            }
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Serves one connection's requests until the caller closes, a bound runs out, or the server
/// stops (then after the answer being written).
async fn serve_connection(stream: tokio::net::TcpStream, app: Router, mut stop: watch::Receiver<bool>) {
    let mut stream = TimeoutStream::new(stream);
    stream.set_read_timeout(Some(STALL_TIMEOUT));
    stream.set_write_timeout(Some(STALL_TIMEOUT));
    let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
        app.clone().oneshot(request.map(axum::body::Body::new))
    });
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(REQUEST_HEAD_TIMEOUT);
    let connection = builder.serve_connection(TokioIo::new(Box::pin(stream)), service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = stop.wait_for(|stop| *stop) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

/// The refusal of a request that does not bring `token`, or `None` if it may go on.
pub(crate) fn check_token(token: Option<&str>, request: &Request) -> Option<Response> {
    if let Some(token) = token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        // A browser opening the dashboard cannot send a header: the page takes `?token=`.
        let in_query = request.uri().path() == "/"
            && request.uri().query().is_some_and(|q| q.split('&').any(|kv| kv.strip_prefix("token=") == Some(token)));
        if given != Some(token) && !in_query {
            return Some(
                (StatusCode::UNAUTHORIZED, "a token is required: Authorization: Bearer <token>\n").into_response(),
            );
        }
    }
    None
}

async fn require_token(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    // Health says "ok" and nothing else: a supervisor's probe (Kubernetes', a load balancer's)
    // may ask it without the token.
    if request.uri().path() == "/api/v1/health" {
        return next.run(request).await;
    }
    match check_token(shared.token.as_deref(), &request) {
        Some(refusal) => refusal,
        None => next.run(request).await,
    }
}
