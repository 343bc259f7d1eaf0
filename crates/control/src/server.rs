//! The control server: bound, guarded by its token (any address but loopback needs one) and run on
//! a thread of its own; the agent's server binds and guards the same way.

use crate::api::{self, Served, Shared};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use tokio::sync::oneshot;

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
    stop: Option<oneshot::Sender<()>>,
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
            let _ = stop.send(());
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
    let (stop, stopped) = oneshot::channel::<()>();
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
                let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                    let _ = stopped.await;
                });
                if let Err(e) = serve.await {
                    eprintln!("control server: {e}");
                }
            });
        })
        .map_err(|source| ControlError::Bind { addr, source })?;
    Ok(Serving { addr, stop: Some(stop), thread: Some(thread) })
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
