//! One pipestream instance (`tessera pipestream instance`): an [`Engine`] behind the state
//! machine of [`crate::fsm`], driven over REST and serving its figures as JSON and as
//! Prometheus metrics. It listens on loopback only: a driver on another host reaches it
//! through that host's `tessera agent`, which guards every request with its token.
//!
//! | request | does |
//! |---|---|
//! | `GET /api/v1/pipestream` | the [`Status`]: state, error, server address, figures, rates, CPU time |
//! | `POST /api/v1/pipestream/configure` | takes an [`Assignment`] (JSON); binds the server's listener |
//! | `POST /api/v1/pipestream/connect` | takes a [`ConnectRequest`]; connects in the background (poll the status) |
//! | `POST /api/v1/pipestream/start` | the clients send |
//! | `POST /api/v1/pipestream/stop` | the clients stop and drain in the background |
//! | `POST /api/v1/pipestream/disconnect` | drops connections and threads: back to Halted |
//! | `GET /metrics` | the figures and rates in Prometheus text |

use crate::engine::{Assignment, Counters, Engine, EngineError, Figures};
use crate::fsm::{State, Transition, TransitionError};
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

/// Why an instance refuses a request (the text its status then carries), or cannot serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InstanceError {
    /// The request is not one its state takes.
    #[error(transparent)]
    State(#[from] TransitionError),
    /// Its engine refused the assignment, or could not bind its listener.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A connect request's UCX worker address is not hex.
    #[error("a UCX worker address that is not hex")]
    NotHex,
    /// The instance has no engine to act on.
    #[error("no engine")]
    NoEngine,
    /// It was asked to serve beyond loopback.
    #[error("{0}: an instance listens on loopback only; reach it from elsewhere through `tessera agent`")]
    NotLoopback(SocketAddr),
    /// Its API could not be served.
    #[error(transparent)]
    Serve(#[from] tessera_control::ControlError),
}

/// What `connect` takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectRequest {
    /// Every server's data address, server 0 first (over TCP).
    pub servers: Vec<SocketAddr>,
    /// Every server's UCX worker addresses in hex, one per thread, server 0 first (over UCX).
    #[serde(default)]
    pub ucx_servers: Vec<Vec<String>>,
    /// Longest the connections may take, in seconds.
    pub timeout_s: f64,
}

/// Bytes as lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex back to bytes, if it is hex.
fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
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
    /// Where its server listens, once configured (over TCP).
    pub data_address: Option<SocketAddr>,
    /// Its UCX worker addresses in hex, one per thread, once configured (over UCX).
    #[serde(default)]
    pub ucx_addresses: Vec<String>,
    /// Its figures for the current point.
    pub figures: Figures,
    /// CPU time of the process so far, in nanoseconds.
    pub cpu_ns: u64,
    /// Its rates over the last [`RATE_INTERVAL`].
    pub rates: Rates,
}

/// How often an instance's rates are computed, and over what.
pub const RATE_INTERVAL: Duration = Duration::from_millis(500);

/// An instance's rates over the last [`RATE_INTERVAL`] (zero while nothing moves).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    /// Messages its client completed per second.
    pub messages_completed_per_s: f64,
    /// Messages its server received per second.
    pub messages_received_per_s: f64,
    /// Payload bytes its server received per second.
    pub bytes_received_per_s: f64,
}

struct Inner {
    state: State,
    error: Option<String>,
    engine: Option<Engine>,
    counters: Arc<Counters>,
    data_address: Option<SocketAddr>,
    ucx_addresses: Vec<String>,
    rates: Rates,
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
                ucx_addresses: Vec::new(),
                rates: Rates::default(),
            })),
        }
    }

    /// Computes the rates every [`RATE_INTERVAL`] on a thread of its own, for as long as the
    /// instance exists.
    fn sample_rates(&self) {
        let inner = Arc::downgrade(&self.inner);
        std::thread::spawn(move || {
            let mut last: Option<(Arc<Counters>, Figures, std::time::Instant)> = None;
            loop {
                std::thread::sleep(RATE_INTERVAL);
                let Some(inner) = inner.upgrade() else { return };
                let mut inner = inner.lock().unwrap_or_else(|p| p.into_inner());
                let (counters, now) = (inner.counters.clone(), std::time::Instant::now());
                let figures = counters.figures();
                inner.rates = match &last {
                    // The same point: its counters only grow.
                    Some((c, before, at)) if Arc::ptr_eq(c, &counters) => {
                        let per_s = |a: u64, b: u64| a.saturating_sub(b) as f64 / (now - *at).as_secs_f64();
                        Rates {
                            messages_completed_per_s: per_s(figures.messages_completed, before.messages_completed),
                            messages_received_per_s: per_s(figures.messages_received, before.messages_received),
                            bytes_received_per_s: per_s(figures.bytes_received, before.bytes_received),
                        }
                    }
                    _ => Rates::default(),
                };
                last = Some((counters, figures, now));
            }
        });
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
            ucx_addresses: inner.ucx_addresses.clone(),
            figures: inner.counters.figures(),
            cpu_ns: cpu_time::ProcessTime::try_now().map_or(0, |t| t.as_duration().as_nanos() as u64),
            rates: inner.rates,
        }
    }

    /// Makes `transition`, or says why not.
    fn step(inner: &mut Inner, transition: Transition) -> Result<(), InstanceError> {
        inner.state = inner.state.apply(transition)?;
        Ok(())
    }

    /// Takes its part of a point.
    pub fn configure(&self, assignment: Assignment) -> Result<(), InstanceError> {
        let mut inner = self.lock();
        inner.state.apply(Transition::Configure)?;
        inner.engine = None;
        let engine = Engine::configure(assignment)?;
        inner.data_address = engine.data_address();
        inner.ucx_addresses = engine.ucx_addresses().iter().map(|a| hex(a)).collect();
        inner.counters = engine.counters();
        inner.engine = Some(engine);
        inner.error = None;
        Instance::step(&mut inner, Transition::Configure)
    }

    /// Connects in the background.
    pub fn connect(&self, request: ConnectRequest) -> Result<(), InstanceError> {
        let ucx_servers: Vec<Vec<Vec<u8>>> = request
            .ucx_servers
            .iter()
            .map(|s| s.iter().map(|a| unhex(a)).collect::<Option<_>>())
            .collect::<Option<_>>()
            .ok_or(InstanceError::NotHex)?;
        let mut engine = {
            let mut inner = self.lock();
            Instance::step(&mut inner, Transition::Connect)?;
            inner.engine.take().ok_or(InstanceError::NoEngine)?
        };
        let me = self.clone();
        std::thread::spawn(move || {
            let timeout = Duration::from_secs_f64(request.timeout_s.clamp(0.1, 3600.0));
            let result = engine.connect_over(&request.servers, &ucx_servers, timeout);
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
    pub fn start(&self) -> Result<(), InstanceError> {
        let mut inner = self.lock();
        Instance::step(&mut inner, Transition::Start)?;
        inner.engine.as_ref().ok_or(InstanceError::NoEngine)?.start();
        Ok(())
    }

    /// Stops the clients; they drain in the background.
    pub fn stop(&self, request: StopRequest) -> Result<(), InstanceError> {
        let engine = {
            let mut inner = self.lock();
            Instance::step(&mut inner, Transition::Stop)?;
            inner.engine.take().ok_or(InstanceError::NoEngine)?
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
        for (metric, help, value) in [
            (
                "messages_completed_per_second",
                "Messages the client completed per second.",
                s.rates.messages_completed_per_s,
            ),
            (
                "messages_received_per_second",
                "Messages the server received per second.",
                s.rates.messages_received_per_s,
            ),
            (
                "bytes_received_per_second",
                "Payload bytes the server received per second.",
                s.rates.bytes_received_per_s,
            ),
        ] {
            let _ = writeln!(out, "# HELP tessera_pipestream_{metric} {help}");
            let _ = writeln!(out, "# TYPE tessera_pipestream_{metric} gauge");
            let _ = writeln!(out, "tessera_pipestream_{metric}{{instance=\"{name}\"}} {value}");
        }
        let _ = writeln!(out, "# HELP tessera_pipestream_state The instance's state (1 for the one it is in).");
        let _ = writeln!(out, "# TYPE tessera_pipestream_state gauge");
        let _ = writeln!(out, "tessera_pipestream_state{{instance=\"{name}\",state=\"{:?}\"}} 1", s.state);
        out
    }

    /// The REST API of the instance.
    pub fn router(&self) -> Router {
        fn answer(instance: &Instance, result: Result<(), InstanceError>) -> Response {
            match result {
                Ok(()) => Json(instance.status()).into_response(),
                Err(e) => (StatusCode::CONFLICT, Json(Status { error: Some(e.to_string()), ..instance.status() }))
                    .into_response(),
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
    pub fn serve(&self, listen: SocketAddr) -> Result<tessera_control::Serving, InstanceError> {
        if !listen.ip().is_loopback() {
            return Err(InstanceError::NotLoopback(listen));
        }
        let serving = tessera_control::serve(listen, self.router())?;
        self.sample_rates();
        Ok(serving)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Policy;
    use crate::engine::{Mode, ServerPart};
    use tessera_control::client::call;

    fn post(addr: SocketAddr, action: &str, body: Option<String>) -> (u16, Status) {
        let a =
            call(addr, "POST", &format!("/api/v1/pipestream/{action}"), None, body.as_deref(), Duration::from_secs(5))
                .unwrap();
        (a.status, serde_json::from_str(&a.body).unwrap())
    }

    fn status(addr: SocketAddr) -> Status {
        let a = call(addr, "GET", "/api/v1/pipestream", None, None, Duration::from_secs(5)).unwrap();
        serde_json::from_str(&a.body).unwrap()
    }

    fn wait(addr: SocketAddr, want: State) -> Status {
        for _ in 0..500 {
            let s = status(addr);
            if s.state == want {
                return s;
            }
            assert_ne!(s.state, State::Failed, "{s:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("not {want:?}: {:?}", status(addr));
    }

    #[test]
    fn a_1x1_is_walked_through_its_states_over_rest_and_serves_its_rates() {
        let (client, server) = (Instance::new("c0"), Instance::new("s0"));
        let (c, s) = (
            client.serve("127.0.0.1:0".parse().unwrap()).unwrap(),
            server.serve("127.0.0.1:0".parse().unwrap()).unwrap(),
        );
        let (c, s) = (c.local_addr(), s.local_addr());
        let part = |client: Option<u32>, server: Option<ServerPart>| Assignment {
            session: 1,
            mode: Mode::Pipestream,
            clients: 1,
            servers: 1,
            message_bytes: 8192,
            buffer_bytes: 1 << 20,
            burst: 4,
            threads: 1,
            affinity: Vec::new(),
            policy: Policy::BestEffort,
            fair_window: 1,
            checksum: true,
            client,
            server,
            transport: crate::engine::Transport::Tcp,
            ucx_transports: None,
        };
        let listen = ServerPart { index: 0, listen: "127.0.0.1:0".into(), client_hosts: vec!["127.0.0.1".into()] };
        let (code, st) = post(s, "configure", Some(serde_json::to_string(&part(None, Some(listen))).unwrap()));
        assert_eq!((code, st.state), (200, State::Configured));
        let data = st.data_address.unwrap();
        post(c, "configure", Some(serde_json::to_string(&part(Some(0), None)).unwrap()));
        let (code, st) = post(c, "start", None);
        assert_eq!(code, 409);
        assert!(st.error.unwrap().contains("cannot Start from Configured"));
        let connect =
            serde_json::to_string(&ConnectRequest { servers: vec![data], ucx_servers: Vec::new(), timeout_s: 5.0 })
                .unwrap();
        post(s, "connect", Some(connect.clone()));
        post(c, "connect", Some(connect));
        wait(c, State::Connected);
        wait(s, State::Connected);
        post(s, "start", None);
        post(c, "start", None);
        std::thread::sleep(RATE_INTERVAL * 3);
        let running = status(s);
        assert!(running.rates.messages_received_per_s > 0.0 && running.rates.bytes_received_per_s > 0.0, "{running:?}");
        let metrics = call(s, "GET", "/metrics", None, None, Duration::from_secs(5)).unwrap().body;
        assert!(metrics.contains("tessera_pipestream_messages_received_per_second{instance=\"s0\"}"), "{metrics}");
        assert!(metrics.contains("tessera_pipestream_state{instance=\"s0\",state=\"Running\"} 1"), "{metrics}");
        let stop = serde_json::to_string(&StopRequest { timeout_s: 5.0 }).unwrap();
        post(c, "stop", Some(stop));
        let done = wait(c, State::Stopped);
        let received = status(s).figures;
        assert_eq!(done.figures.messages_sent, received.messages_received);
        assert_eq!(received.errors(), 0);
        for addr in [c, s] {
            assert_eq!(post(addr, "disconnect", None).1.state, State::Halted);
        }
    }
}
