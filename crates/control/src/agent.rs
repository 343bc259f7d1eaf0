//! The agent of a host (`tessera agent`): it starts the units that a controller places on its
//! host as processes of this same program, supervises them (exit status, signals, log), and
//! answers for them over HTTP, so that a controller needs one address per host and the units'
//! own control servers stay on loopback.
//!
//! | request | does |
//! |---|---|
//! | `GET /api/v1/health` | the agent's host name, version and process counts |
//! | `GET /api/v1/processes` | every process: pid, running or how it ended, the end of its log, its units' states and figures (asked of the unit's control server, with a time-out) |
//! | `POST /api/v1/processes` | starts a process: `{"name", "args", "system", "link_key"}` (`link_key`, the run's, in hex, for an event-builder unit only: the process gets it in `TESSERA_LINK_KEY`) |
//! | `POST /api/v1/processes/{name}/stop` | asks the process's control server to stop its run (the EVM's process drains it) |
//! | `POST /api/v1/processes/{name}/enable` | asks the process's control server to enable its units (held in Ready) |
//! | `POST /api/v1/processes/{name}/signal?signal=TERM` | sends `INT`, `TERM`, `KILL`, `STOP` or `CONT` |
//! | `GET /api/v1/processes/{name}/pipestream` | a pipestream instance's state and figures |
//! | `POST /api/v1/processes/{name}/pipestream/{action}` | passes `configure`, `connect`, `start`, `stop` or `disconnect` (with its JSON body) on to a pipestream instance |
//! | `DELETE /api/v1/processes` | kills every process still running and forgets every process |
//!
//! A started process's arguments may hold `{system}` (the file written from `system`),
//! `{control_file}` (where a unit writes its control server's address) and `{dir}` (the
//! process's own directory under the agent's work directory). The agent runs only its own
//! program; what that program is asked to do is the controller's to say. So every request
//! must bring the agent's token, on loopback too: a local user must not start processes as the
//! agent's user either.

use crate::client;
use crate::server::{ControlError, Serving, check_token, serve};
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tessera_runtime::link::{LINK_KEY_ENV, LinkKey};

/// Most processes an agent keeps (running or ended) at once.
pub const MAX_PROCESSES: usize = 256;
/// Most bytes of a process's standard output returned once it has ended.
pub const MAX_STDOUT_BYTES: u64 = 64 << 10;
/// Lines of a process's log returned with it.
pub const LOG_TAIL_LINES: usize = 12;
/// How long the agent waits for a unit's control server.
pub const UNIT_TIMEOUT: Duration = Duration::from_millis(800);
/// How long the agent waits for a pipestream instance: its driver allows it more, since a
/// `disconnect` joins the instance's threads on a loaded host.
pub const PIPESTREAM_TIMEOUT: Duration = Duration::from_secs(4);

/// How an agent is set up.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Address to serve on.
    pub listen: SocketAddr,
    /// The token every request must bring (not empty).
    pub token: String,
    /// Where the processes' directories (system file, logs, output) go.
    pub work_dir: PathBuf,
    /// The program the agent runs (this one).
    pub program: PathBuf,
}

/// What `POST /api/v1/processes` takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StartRequest {
    /// The process's name, unique on this agent: letters, digits, `_`, `-`.
    pub name: String,
    /// The program's arguments, with the placeholders of the module's documentation.
    pub args: Vec<String>,
    /// A system file's text, written to `{system}`.
    #[serde(default)]
    pub system: Option<String>,
    /// The run's link key, for an event-builder unit: handed to the process in
    /// [`LINK_KEY_ENV`], never on its command line (which `ps` shows). A process started
    /// without one does not inherit the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_key: Option<LinkKey>,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    /// Its exit code, if it exited.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
}

impl Exit {
    fn of(status: ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        Exit { code: status.code(), signal: status.signal() }
    }

    /// Whether it exited with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exit code {c}"),
            (None, Some(s)) => write!(f, "signal {s}"),
            (None, None) => f.write_str("an unknown end"),
        }
    }
}

/// One process as the agent shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcessView {
    /// Its name.
    pub name: String,
    /// Its process id.
    pub pid: u32,
    /// Its arguments, placeholders filled in.
    pub args: Vec<String>,
    /// Seconds since it started.
    pub seconds: f64,
    /// How it ended; none while it runs.
    pub exit: Option<Exit>,
    /// Its units as their control server shows them (`GET /api/v1/units`), while it runs and
    /// has one.
    pub units: Option<serde_json::Value>,
    /// Why its units could not be read, if it has a control server that did not answer.
    pub units_error: Option<String>,
    /// The last lines of its log (standard error).
    pub log_tail: Vec<String>,
    /// The end of its standard output, once it has ended.
    pub stdout: Option<String>,
    /// Its directory on the agent's host.
    pub dir: PathBuf,
}

/// What `GET /api/v1/health` answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Health {
    /// The agent's host name.
    pub host: String,
    /// The program's version.
    pub version: String,
    /// Processes known.
    pub processes: usize,
    /// Of those, running.
    pub running: usize,
}

struct Process {
    name: String,
    args: Vec<String>,
    child: Child,
    started: Instant,
    exit: Option<Exit>,
    dir: PathBuf,
}

impl Process {
    fn control_file(&self) -> PathBuf {
        self.dir.join("control")
    }
    fn log(&self) -> PathBuf {
        self.dir.join("log")
    }
    fn stdout(&self) -> PathBuf {
        self.dir.join("stdout")
    }
}

struct Shared {
    config: AgentConfig,
    processes: Mutex<BTreeMap<String, Process>>,
}

impl Shared {
    /// The processes, with every ended child reaped.
    fn processes(&self) -> MutexGuard<'_, BTreeMap<String, Process>> {
        let mut all = self.processes.lock().unwrap_or_else(|e| e.into_inner());
        for p in all.values_mut().filter(|p| p.exit.is_none()) {
            if let Ok(Some(status)) = p.child.try_wait() {
                p.exit = Some(Exit::of(status));
            }
        }
        all
    }

    fn kill_all(&self) {
        let mut all = self.processes();
        for p in all.values_mut().filter(|p| p.exit.is_none()) {
            let _ = p.child.kill();
            p.exit = p.child.wait().ok().map(Exit::of);
        }
    }
}

/// A running agent; it kills its processes and stops when dropped.
pub struct Agent {
    shared: Arc<Shared>,
    /// Dropped after the processes are killed (the fields' order).
    serving: Serving,
}

impl Agent {
    /// Binds `config.listen` and serves on a thread of its own.
    pub fn start(config: AgentConfig) -> Result<Agent, ControlError> {
        fs::create_dir_all(&config.work_dir).map_err(|source| ControlError::Bind { addr: config.listen, source })?;
        let listen = config.listen;
        if config.token.trim().is_empty() {
            return Err(ControlError::AgentToken(listen));
        }
        let token = Some(config.token.clone());
        let shared = Arc::new(Shared { config, processes: Mutex::new(BTreeMap::new()) });
        let app = Router::new()
            .route("/api/v1/health", get(health))
            .route("/api/v1/processes", get(list).post(start).delete(forget_all))
            .route("/api/v1/processes/{name}/stop", post(|s, n| forward(s, n, "stop")))
            .route("/api/v1/processes/{name}/enable", post(|s, n| forward(s, n, "enable")))
            .route("/api/v1/processes/{name}/feds/{fed}/mask", post(mask))
            .route("/api/v1/processes/{name}/signal", post(signal))
            .route("/api/v1/processes/{name}/pipestream", get(pipestream_status))
            .route("/api/v1/processes/{name}/pipestream/{action}", post(pipestream_action))
            .layer(middleware::from_fn_with_state(token.map(Arc::<str>::from), require_token))
            .with_state(shared.clone());
        Ok(Agent { shared, serving: serve(listen, app)? })
    }

    /// The address it serves on.
    pub fn local_addr(&self) -> SocketAddr {
        self.serving.local_addr()
    }

    /// How many of its processes still run.
    pub fn running(&self) -> usize {
        self.shared.processes().values().filter(|p| p.exit.is_none()).count()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // The server stops after this, when its field is dropped.
        self.shared.kill_all();
    }
}

async fn require_token(State(token): State<Option<Arc<str>>>, request: Request, next: Next) -> Response {
    match check_token(token.as_deref(), &request) {
        Some(refusal) => refusal,
        None => next.run(request).await,
    }
}

fn refuse(status: StatusCode, why: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({ "error": why.into() }))).into_response()
}

async fn health(State(shared): State<Arc<Shared>>) -> Json<Health> {
    let all = shared.processes();
    Json(Health {
        host: tessera_host_name(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        processes: all.len(),
        running: all.values().filter(|p| p.exit.is_none()).count(),
    })
}

/// This host's name, as the agent reports it.
fn tessera_host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()).unwrap_or_else(|_| "unknown".into())
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
}

async fn start(State(shared): State<Arc<Shared>>, Json(request): Json<StartRequest>) -> Response {
    if !valid_name(&request.name) {
        return refuse(
            StatusCode::BAD_REQUEST,
            format!("name {:?}: expected 1 to 64 letters, digits, `_` or `-`", request.name),
        );
    }
    let mut all = shared.processes();
    if all.get(&request.name).is_some_and(|p| p.exit.is_none()) {
        return refuse(StatusCode::CONFLICT, format!("{} is running already", request.name));
    }
    if all.len() >= MAX_PROCESSES && !all.contains_key(&request.name) {
        return refuse(StatusCode::TOO_MANY_REQUESTS, format!("this agent keeps at most {MAX_PROCESSES} processes"));
    }
    let dir = shared.config.work_dir.join(&request.name);
    match launch(&shared.config, &request, &dir) {
        Ok(process) => {
            let view = serde_json::json!({ "name": request.name, "pid": process.child.id(), "dir": dir });
            all.insert(request.name.clone(), process);
            (StatusCode::CREATED, Json(view)).into_response()
        }
        Err(why) => refuse(StatusCode::INTERNAL_SERVER_ERROR, format!("{}: {why}", request.name)),
    }
}

/// Why a process could not be started.
#[derive(Debug, thiserror::Error)]
enum LaunchError {
    /// Its directory, a file in it, or its system file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// What could not be written.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The program could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The agent's program.
        program: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn launch(config: &AgentConfig, request: &StartRequest, dir: &Path) -> Result<Process, LaunchError> {
    // A name used again (a restarted BU) starts afresh; the directory of the one before is kept
    // beside it, one generation, for its log.
    if dir.exists() {
        let previous = dir.with_file_name(format!("{}.previous", request.name));
        let _ = fs::remove_dir_all(&previous);
        let _ = fs::rename(dir, &previous);
    }
    fs::create_dir_all(dir).map_err(|source| LaunchError::Write { path: dir.to_owned(), source })?;
    let system = dir.join("system.yaml");
    if let Some(text) = &request.system {
        fs::write(&system, text).map_err(|source| LaunchError::Write { path: system.clone(), source })?;
    }
    let fill = |arg: &str| {
        arg.replace("{system}", &system.to_string_lossy())
            .replace("{control_file}", &dir.join("control").to_string_lossy())
            .replace("{dir}", &dir.to_string_lossy())
    };
    let args: Vec<String> = request.args.iter().map(|a| fill(a)).collect();
    let open = |name: &str| {
        let path = dir.join(name);
        fs::File::create(&path).map_err(|source| LaunchError::Write { path, source })
    };
    let mut command = Command::new(&config.program);
    match &request.link_key {
        Some(key) => command.env(LINK_KEY_ENV, key.to_hex()),
        None => command.env_remove(LINK_KEY_ENV),
    };
    let child = command
        .args(&args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(open("stdout")?)
        .stderr(open("log")?)
        .spawn()
        .map_err(|source| LaunchError::Spawn { program: config.program.clone(), source })?;
    tracing::info!(process = %request.name, pid = child.id(), "started {}: {}", request.name, args.join(" "));
    Ok(Process { name: request.name.clone(), args, child, started: Instant::now(), exit: None, dir: dir.to_owned() })
}

/// The last `lines` lines of a file, read from its end (a log may be long).
fn tail(path: &Path, lines: usize, max_bytes: u64) -> String {
    let Ok(mut file) = fs::File::open(path) else { return String::new() };
    let len = file.metadata().map_or(0, |m| m.len());
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(max_bytes)));
    let mut text = String::new();
    let _ = file.take(max_bytes).read_to_string(&mut text);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The address a unit's control server wrote into its control file.
fn unit_address(control_file: &Path) -> Option<SocketAddr> {
    fs::read_to_string(control_file).ok()?.trim().parse().ok()
}

async fn list(State(shared): State<Arc<Shared>>) -> Json<Vec<ProcessView>> {
    // Copy what is needed out of the lock; the units are asked without holding it.
    let snapshot: Vec<(ProcessView, Option<SocketAddr>)> = shared
        .processes()
        .values()
        .map(|p| {
            let running = p.exit.is_none();
            let view = ProcessView {
                name: p.name.clone(),
                pid: p.child.id(),
                args: p.args.clone(),
                seconds: p.started.elapsed().as_secs_f64(),
                exit: p.exit,
                units: None,
                units_error: None,
                log_tail: tail(&p.log(), LOG_TAIL_LINES, 16 << 10).lines().map(str::to_owned).collect(),
                stdout: (!running).then(|| tail(&p.stdout(), usize::MAX, MAX_STDOUT_BYTES)),
                dir: p.dir.clone(),
            };
            (view, running.then(|| unit_address(&p.control_file())).flatten())
        })
        .collect();
    // Every unit is asked at once: a stalled one costs the time-out once, not once per unit.
    let asks: Vec<_> = snapshot
        .into_iter()
        .map(|(view, addr)| {
            let ask = addr.map(|addr| {
                tokio::task::spawn_blocking(move || {
                    client::call(addr, "GET", "/api/v1/units", None, None, UNIT_TIMEOUT)
                })
            });
            (view, ask)
        })
        .collect();
    let mut views = Vec::new();
    for (mut view, ask) in asks {
        if let Some(ask) = ask {
            match ask.await {
                Ok(Ok(a)) if a.ok() => view.units = serde_json::from_str(&a.body).ok(),
                Ok(Ok(a)) => view.units_error = Some(format!("HTTP {}: {}", a.status, a.body.trim())),
                Ok(Err(e)) => view.units_error = Some(e.to_string()),
                Err(e) => view.units_error = Some(e.to_string()),
            }
        }
        views.push(view);
    }
    Json(views)
}

/// Passes `POST /api/v1/{action}` on to the process's control server.
async fn forward(State(shared): State<Arc<Shared>>, UrlPath(name): UrlPath<String>, action: &'static str) -> Response {
    forward_call(&shared, name, "POST", format!("/api/v1/{action}"), None, UNIT_TIMEOUT).await
}

/// Passes `POST /api/v1/feds/{fed}/mask` on to an RU's process.
async fn mask(State(shared): State<Arc<Shared>>, UrlPath((name, fed)): UrlPath<(String, u16)>) -> Response {
    forward_call(&shared, name, "POST", format!("/api/v1/feds/{fed}/mask"), None, UNIT_TIMEOUT).await
}

/// The run-control actions of a pipestream instance that the agent passes on.
const PIPESTREAM_ACTIONS: [&str; 5] = ["configure", "connect", "start", "stop", "disconnect"];

/// Passes `GET /api/v1/pipestream` on to a pipestream instance.
async fn pipestream_status(State(shared): State<Arc<Shared>>, UrlPath(name): UrlPath<String>) -> Response {
    forward_call(&shared, name, "GET", "/api/v1/pipestream".into(), None, PIPESTREAM_TIMEOUT).await
}

/// Passes `POST /api/v1/pipestream/{action}`, with its JSON body, on to a pipestream instance.
async fn pipestream_action(
    State(shared): State<Arc<Shared>>,
    UrlPath((name, action)): UrlPath<(String, String)>,
    body: String,
) -> Response {
    if !PIPESTREAM_ACTIONS.contains(&action.as_str()) {
        return refuse(
            StatusCode::NOT_FOUND,
            format!("no pipestream action {action}: {}", PIPESTREAM_ACTIONS.join(", ")),
        );
    }
    let body = (!body.is_empty()).then_some(body);
    forward_call(&shared, name, "POST", format!("/api/v1/pipestream/{action}"), body, PIPESTREAM_TIMEOUT).await
}

/// Passes `method path` (with `body`) on to the control server of process `name`, waiting at
/// most `timeout` for its answer.
async fn forward_call(
    shared: &Shared,
    name: String,
    method: &'static str,
    path: String,
    body: Option<String>,
    timeout: Duration,
) -> Response {
    let addr = match shared.processes().get(&name) {
        None => return refuse(StatusCode::NOT_FOUND, format!("no process {name}")),
        Some(p) if p.exit.is_some() => return refuse(StatusCode::CONFLICT, format!("{name} has ended")),
        Some(p) => unit_address(&p.control_file()),
    };
    let Some(addr) = addr else {
        return refuse(StatusCode::CONFLICT, format!("{name} has no control server (yet)"));
    };
    let answer =
        tokio::task::spawn_blocking(move || client::call(addr, method, &path, None, body.as_deref(), timeout)).await;
    match answer {
        Ok(Ok(a)) => (StatusCode::from_u16(a.status).unwrap_or(StatusCode::BAD_GATEWAY), a.body).into_response(),
        Ok(Err(e)) => refuse(StatusCode::BAD_GATEWAY, e.to_string()),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[derive(Deserialize)]
struct SignalQuery {
    signal: String,
}

async fn signal(
    State(shared): State<Arc<Shared>>,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<SignalQuery>,
) -> Response {
    use rustix::process::{Pid, Signal, kill_process};
    let signal = match q.signal.as_str() {
        "INT" => Signal::INT,
        "TERM" => Signal::TERM,
        "KILL" => Signal::KILL,
        "STOP" => Signal::STOP,
        "CONT" => Signal::CONT,
        other => {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("signal {other:?}: expected INT, TERM, KILL, STOP or CONT"),
            );
        }
    };
    let all = shared.processes();
    let Some(p) = all.get(&name) else { return refuse(StatusCode::NOT_FOUND, format!("no process {name}")) };
    if p.exit.is_some() {
        return refuse(StatusCode::CONFLICT, format!("{name} has ended"));
    }
    let Some(pid) = i32::try_from(p.child.id()).ok().and_then(Pid::from_raw) else {
        return refuse(StatusCode::INTERNAL_SERVER_ERROR, format!("{name}: no valid pid"));
    };
    match kill_process(pid, signal) {
        Ok(()) => (StatusCode::ACCEPTED, Json(serde_json::json!({ "result": format!("{} sent to {name}", q.signal) })))
            .into_response(),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, format!("{name}: {e}")),
    }
}

async fn forget_all(State(shared): State<Arc<Shared>>) -> Response {
    shared.kill_all();
    let forgotten = std::mem::take(&mut *shared.processes()).len();
    (StatusCode::OK, Json(serde_json::json!({ "result": format!("{forgotten} processes ended and forgotten") })))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_words() {
        assert!(valid_name("bu0-fu1"));
        assert!(valid_name("trigger-ru0"));
        assert!(!valid_name("bu0.previous"), "the name of a kept directory");
        assert!(!valid_name("../etc"));
        assert!(!valid_name(".hidden"));
        assert!(!valid_name("a b"));
        assert!(!valid_name(""));
        assert!(!valid_name(&"x".repeat(65)));
    }

    #[test]
    fn a_tail_is_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        fs::write(&path, (1..=100).map(|i| format!("line {i}\n")).collect::<String>()).unwrap();
        assert_eq!(tail(&path, 2, 1 << 10), "line 99\nline 100");
        assert_eq!(tail(&dir.path().join("none"), 2, 1 << 10), "");
    }
}
