//! One pipestream instance (`tessera pipestream instance`): an [`Engine`] behind the state
//! machine of [`crate::fsm`], driven over REST and serving its figures as JSON and as
//! Prometheus metrics. It listens on loopback only: a driver on another host reaches it
//! through that host's `tessera agent`, which guards every request with its token.
//!
//! | request | does |
//! |---|---|
//! | `GET /api/v1/pipestream` | the [`Status`]: state, error, server address, figures, CPU time |
//! | `POST /api/v1/pipestream/configure` | takes an [`Assignment`] (JSON); binds the server's listener |
//! | `POST /api/v1/pipestream/connect` | takes a [`ConnectRequest`]; connects in the background (poll the status) |
//! | `POST /api/v1/pipestream/start` | the clients send |
//! | `POST /api/v1/pipestream/stop` | the clients stop and drain in the background |
//! | `POST /api/v1/pipestream/disconnect` | drops connections and threads: back to Halted |
//! | `GET /metrics` | the figures in Prometheus text |

use crate::engine::{Assignment, Counters, Engine, Figures};
use crate::fsm::{State, Transition};
use axum::extract::State as Shared;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// What `connect` takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectRequest {
    /// Every server's data address, server 0 first.
    pub servers: Vec<SocketAddr>,
    /// Longest the connections may take, in seconds.
    pub timeout_s: f64,
}

/// What `stop` takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StopRequest {
    /// Longest the clients may take to drain, in seconds.
    pub timeout_s: f64,
}

/// What an instance says of itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Its name.
    pub name: String,
    /// Its state.
    pub state: State,
    /// Why it failed, or why the last request was refused.
    pub error: Option<String>,
    /// Where its server listens, once configured.
    pub data_address: Option<SocketAddr>,
    /// Its figures for the current point.
    pub figures: Figures,
    /// CPU time of the process so far, in nanoseconds.
    pub cpu_ns: u64,
}

struct Inner {
    state: State,
    error: Option<String>,
    engine: Option<Engine>,
    counters: Arc<Counters>,
    data_address: Option<SocketAddr>,
}

/// An instance: its name and its state, shared with the threads that connect and stop it.
#[derive(Clone)]
pub struct Instance {
    name: Arc<str>,
    inner: Arc<Mutex<Inner>>,
}

impl Instance {
    /// A halted instance called `name`.
    pub fn new(name: &str) -> Instance {
        Instance {
            name: Arc::from(name),
            inner: Arc::new(Mutex::new(Inner {
                state: State::Halted,
                error: None,
                engine: None,
                counters: Arc::new(Counters::default()),
                data_address: None,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Its status now; an engine thread's error turns it Failed.
    pub fn status(&self) -> Status {
        let mut inner = self.lock();
        if let Some(e) = inner.engine.as_ref().and_then(Engine::error)
            && inner.state != State::Failed
        {
            inner.state = State::Failed;
            inner.error = Some(e);
        }
        Status {
            name: self.name.to_string(),
            state: inner.state,
            error: inner.error.clone(),
            data_address: inner.data_address,
            figures: inner.counters.figures(),
            cpu_ns: cpu_time::ProcessTime::try_now().map_or(0, |t| t.as_duration().as_nanos() as u64),
        }
    }

    /// Makes `transition`, or says why not.
    fn step(inner: &mut Inner, transition: Transition) -> Result<(), String> {
        inner.state = inner.state.apply(transition).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Takes its part of a point.
    pub fn configure(&self, assignment: Assignment) -> Result<(), String> {
        let mut inner = self.lock();
        inner.state.apply(Transition::Configure).map_err(|e| e.to_string())?;
        inner.engine = None;
        let engine = Engine::configure(assignment).map_err(|e| e.to_string())?;
        inner.data_address = engine.data_address();
        inner.counters = engine.counters();
        inner.engine = Some(engine);
        inner.error = None;
        Instance::step(&mut inner, Transition::Configure)
    }

    /// Connects in the background.
    pub fn connect(&self, request: ConnectRequest) -> Result<(), String> {
        let mut engine = {
            let mut inner = self.lock();
            Instance::step(&mut inner, Transition::Connect)?;
            inner.engine.take().ok_or("no engine")?
        };
        let me = self.clone();
        std::thread::spawn(move || {
            let result =
                engine.connect(&request.servers, Duration::from_secs_f64(request.timeout_s.clamp(0.1, 3600.0)));
            let mut inner = me.lock();
            inner.engine = Some(engine);
            match result {
                Ok(()) if inner.state == State::Connecting => inner.state = State::Connected,
                Ok(()) => {}
                Err(e) => {
                    inner.state = State::Failed;
                    inner.error = Some(e.to_string());
                }
            }
        });
        Ok(())
    }

    /// Lets the clients send.
    pub fn start(&self) -> Result<(), String> {
        let mut inner = self.lock();
        Instance::step(&mut inner, Transition::Start)?;
        inner.engine.as_ref().ok_or("no engine")?.start();
        Ok(())
    }

    /// Stops the clients; they drain in the background.
    pub fn stop(&self, request: StopRequest) -> Result<(), String> {
        let engine = {
            let mut inner = self.lock();
            Instance::step(&mut inner, Transition::Stop)?;
            inner.engine.take().ok_or("no engine")?
        };
        let me = self.clone();
        std::thread::spawn(move || {
            let result = engine.stop(Duration::from_secs_f64(request.timeout_s.clamp(0.1, 3600.0)));
            let mut inner = me.lock();
            inner.engine = Some(engine);
            match result {
                Ok(()) if inner.state == State::Stopping => inner.state = State::Stopped,
                Ok(()) => {}
                Err(e) => {
                    inner.state = State::Failed;
                    inner.error = Some(e.to_string());
                }
            }
        });
        Ok(())
    }

    /// Drops everything.
    pub fn disconnect(&self) {
        let engine = {
            let mut inner = self.lock();
            inner.state = State::Halted;
            inner.data_address = None;
            inner.engine.take()
        };
        // Joining the threads happens outside the lock: status requests go on meanwhile.
        drop(engine);
    }

    /// The figures in Prometheus text.
    pub fn metrics(&self) -> String {
        let s = self.status();
        let f = s.figures;
        let mut out = String::new();
        let name = &s.name;
        for (metric, help, value) in [
            ("messages_sent", "Messages the instance's client queued.", f.messages_sent),
            ("messages_completed", "Messages the instance's client had acknowledged.", f.messages_completed),
            ("messages_received", "Messages the instance's server received whole.", f.messages_received),
            ("bytes_received", "Payload bytes the instance's server received.", f.bytes_received),
            ("lost", "Messages the server found missing.", f.lost),
            ("out_of_order", "Messages the server found out of order.", f.out_of_order),
            ("corrupt", "Messages the server found corrupt.", f.corrupt),
            ("refused_connections", "Connections the server refused.", f.refused),
            ("cpu_ns", "CPU time of the instance's process, in ns.", s.cpu_ns),
        ] {
            let _ = writeln!(out, "# HELP tessera_pipestream_{metric}_total {help}");
            let _ = writeln!(out, "# TYPE tessera_pipestream_{metric}_total counter");
            let _ = writeln!(out, "tessera_pipestream_{metric}_total{{instance=\"{name}\"}} {value}");
        }
        let _ = writeln!(out, "# HELP tessera_pipestream_state The instance's state (1 for the one it is in).");
        let _ = writeln!(out, "# TYPE tessera_pipestream_state gauge");
        let _ = writeln!(out, "tessera_pipestream_state{{instance=\"{name}\",state=\"{:?}\"}} 1", s.state);
        out
    }

    /// The REST API of the instance.
    pub fn router(&self) -> Router {
        fn answer(instance: &Instance, result: Result<(), String>) -> Response {
            match result {
                Ok(()) => Json(instance.status()).into_response(),
                Err(e) => (StatusCode::CONFLICT, Json(Status { error: Some(e), ..instance.status() })).into_response(),
            }
        }
        Router::new()
            .route("/api/v1/pipestream", get(|Shared(i): Shared<Instance>| async move { Json(i.status()) }))
            .route(
                "/api/v1/pipestream/configure",
                post(|Shared(i): Shared<Instance>, Json(a): Json<Assignment>| async move {
                    let result = i.configure(a);
                    answer(&i, result)
                }),
            )
            .route(
                "/api/v1/pipestream/connect",
                post(|Shared(i): Shared<Instance>, Json(r): Json<ConnectRequest>| async move {
                    let result = i.connect(r);
                    answer(&i, result)
                }),
            )
            .route(
                "/api/v1/pipestream/start",
                post(|Shared(i): Shared<Instance>| async move {
                    let result = i.start();
                    answer(&i, result)
                }),
            )
            .route(
                "/api/v1/pipestream/stop",
                post(|Shared(i): Shared<Instance>, Json(r): Json<StopRequest>| async move {
                    let result = i.stop(r);
                    answer(&i, result)
                }),
            )
            .route(
                "/api/v1/pipestream/disconnect",
                post(|Shared(i): Shared<Instance>| async move {
                    let i2 = i.clone();
                    let _ = tokio::task::spawn_blocking(move || i2.disconnect()).await;
                    answer(&i, Ok(()))
                }),
            )
            .route("/metrics", get(|Shared(i): Shared<Instance>| async move { i.metrics() }))
            .with_state(self.clone())
    }

    /// Serves the API on `listen` (loopback only) until the returned handle is dropped.
    pub fn serve(&self, listen: SocketAddr) -> Result<Served, String> {
        if !listen.ip().is_loopback() {
            return Err(format!(
                "{listen}: an instance listens on loopback only; reach it from elsewhere through `tessera agent`"
            ));
        }
        let (addr, stop, thread) = tessera_control::serve(listen, self.router()).map_err(|e| e.to_string())?;
        Ok(Served { addr, stop: Some(stop), thread: Some(thread) })
    }
}

/// A served instance API; it stops when dropped.
pub struct Served {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Served {
    /// Where it serves.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
