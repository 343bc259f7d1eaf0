//! The driver of a scan (`tessera pipestream scan FILE`): it starts the instances of each
//! topology (processes of this host, or through `tessera agent` on others), walks them through
//! their states for every point (thread count × message size), measures pipestream and its
//! baselines in the same run, and leaves CSV, JSON, a table and plots in the output directory.

use crate::config::{BUFFER_BYTES_RANGE, PipestreamConfig, Topology, is_local};
use crate::engine::{Assignment, Figures, Mode, ServerPart, Transport};
use crate::fsm::State;
use crate::instance::{ConnectRequest, Status, StopRequest};
use crate::results::{PointResult, Sender};
use crate::{iperf3, report};
use std::collections::BTreeSet;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tessera_control::client;

/// The environment variable that holds the agents' token.
pub const AGENT_TOKEN_ENV: &str = "TESSERA_AGENT_TOKEN";
/// Longest one REST call to an instance may take (more than an agent waits for it).
const CALL_TIMEOUT: Duration = Duration::from_secs(6);
/// How often the driver looks at instances that are connecting or draining.
const POLL: Duration = Duration::from_millis(20);

/// Why a scan failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScanError {
    /// An instance could not be started.
    #[error("{instance}: cannot start it: {why}")]
    Start {
        /// The instance.
        instance: String,
        /// Why.
        why: String,
    },
    /// An instance refused a request, failed, or did not answer.
    #[error("{instance}: {why}")]
    Instance {
        /// The instance.
        instance: String,
        /// Why.
        why: String,
    },
    /// The results could not be written.
    #[error("{0}")]
    Output(String),
    /// The operator stopped the scan.
    #[error("stopped before the scan ended; the points measured so far are in the output directory")]
    Stopped,
}

/// How the driver reaches one instance.
enum Handle {
    /// A process of this host, serving on loopback.
    Local { name: String, child: Child, addr: SocketAddr },
    /// A process started by the agent of another host, reached through it.
    Agent { name: String, agent: SocketAddr, token: String },
}

impl Handle {
    fn name(&self) -> &str {
        match self {
            Handle::Local { name, .. } | Handle::Agent { name, .. } => name,
        }
    }

    fn error(&self, why: impl Into<String>) -> ScanError {
        ScanError::Instance { instance: self.name().to_string(), why: why.into() }
    }

    /// `GET` the status (no action) or `POST` an action with `body`.
    fn call(&self, action: Option<&str>, body: Option<String>) -> Result<Status, ScanError> {
        let method = if action.is_some() { "POST" } else { "GET" };
        let tail = action.map(|a| format!("/{a}")).unwrap_or_default();
        let answer = match self {
            Handle::Local { addr, .. } => {
                client::call(*addr, method, &format!("/api/v1/pipestream{tail}"), None, body.as_deref(), CALL_TIMEOUT)
            }
            Handle::Agent { name, agent, token } => client::call(
                *agent,
                method,
                &format!("/api/v1/processes/{name}/pipestream{tail}"),
                Some(token),
                body.as_deref(),
                CALL_TIMEOUT,
            ),
        }
        .map_err(|e| self.error(e.to_string()))?;
        let status: Status = serde_json::from_str(&answer.body)
            .map_err(|_| self.error(format!("answered {}: {}", answer.status, answer.body.trim())))?;
        match (answer.ok(), &status.error) {
            (true, _) => Ok(status),
            (false, Some(e)) => Err(self.error(format!("refused {}: {e}", action.unwrap_or("status")))),
            (false, None) => Err(self.error(format!("answered {}", answer.status))),
        }
    }

    fn post(&self, action: &str, body: impl serde::Serialize) -> Result<Status, ScanError> {
        let body = serde_json::to_string(&body).map_err(|e| self.error(e.to_string()))?;
        self.call(Some(action), Some(body))
    }

    /// Ends the process.
    fn end(mut self) {
        match &mut self {
            Handle::Local { child, .. } => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Handle::Agent { name, agent, token } => {
                let path = format!("/api/v1/processes/{name}/signal?signal=KILL");
                let _ = client::call(*agent, "POST", &path, Some(token), None, CALL_TIMEOUT);
            }
        }
    }
}

/// The address a server binds on `host`.
fn bind_host(host: &str) -> &str {
    if host == "localhost" { "127.0.0.1" } else { host }
}

/// A scan in progress.
pub struct Scan<'a> {
    cfg: &'a PipestreamConfig,
    stop: &'a AtomicBool,
    output: PathBuf,
    program: PathBuf,
    token: Option<String>,
    /// Distinguishes this scan's instance names and sessions from any other's.
    id: u64,
    points: u64,
    results: Vec<PointResult>,
    notes: Vec<String>,
}

impl<'a> Scan<'a> {
    /// A scan of `cfg`, writing into `output`, starting instances as `program` (this one);
    /// `stop` set ends it at the next step, its instances ended.
    pub fn new(cfg: &'a PipestreamConfig, output: &Path, program: &Path, stop: &'a AtomicBool) -> Scan<'a> {
        let id = u64::from(std::process::id()) << 20
            ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        Scan {
            cfg,
            stop,
            output: output.to_path_buf(),
            program: program.to_path_buf(),
            token: std::env::var(AGENT_TOKEN_ENV).ok().filter(|t| !t.is_empty()),
            id: id & 0xFFFF_FFFF,
            points: 0,
            results: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Runs every point; the results, also left in the output directory. A scan that fails or
    /// is stopped still leaves the points it measured.
    pub fn run(mut self, mut progress: impl FnMut(&str)) -> Result<ScanOutcome, ScanError> {
        std::fs::create_dir_all(&self.output)
            .map_err(|e| ScanError::Output(format!("cannot create {}: {e}", self.output.display())))?;
        match self.measure(&mut progress) {
            Ok(()) => self.write(),
            Err(e) => {
                if !self.results.is_empty() {
                    self.notes.push(format!("the scan ended early: {e}"));
                    let _ = self.write();
                }
                Err(e)
            }
        }
    }

    fn measure(&mut self, progress: &mut impl FnMut(&str)) -> Result<(), ScanError> {
        if self.cfg.transport == Transport::Ucx {
            self.notes.push(format!(
                "pipestream's messages travel on UCX active messages (transports {}); the raw-TCP baseline on TCP",
                self.cfg.ucx_transports.as_deref().unwrap_or("of UCX's choice")
            ));
        }
        let iperf = if !self.cfg.baselines.iperf3 {
            None
        } else if !self.cfg.all_local() {
            self.notes
                .push("iperf3 baseline: not run, it runs on loopback only and the hosts are not all this one".into());
            None
        } else {
            let found = iperf3::find();
            if found.is_none() {
                self.notes
                    .push("iperf3 baseline: not run, iperf3 is not installed (Debian: apt-get install iperf3)".into());
            }
            found
        };
        let topologies = self.cfg.scan_topologies();
        let sizes = self.cfg.scan_message_bytes().len();
        let per_topology = self.cfg.scan_threads().len() * sizes * (1 + usize::from(self.cfg.baselines.raw_tcp))
            + if iperf.is_some() { sizes } else { 0 };
        let (mut done, total) = (0, topologies.len() * per_topology);
        for topology in topologies {
            let handles = self.launch(&topology)?;
            let measured = self.measure_topology(&topology, &handles, (&mut done, total), progress);
            for h in handles {
                h.end();
            }
            measured?;
            if let Some(program) = &iperf {
                for &size in &self.cfg.scan_message_bytes() {
                    pause(self.stop, Duration::ZERO)?;
                    let streams = topology.clients * topology.servers;
                    done += 1;
                    let at = format!(
                        "{done} of {total}: {}, iperf3, {} of {size} B writes",
                        topology.name(),
                        report::count(streams, "stream")
                    );
                    match iperf3::run(program, streams, size, self.cfg.duration_s, None) {
                        Ok(figure) => {
                            let point =
                                iperf3::point(figure, topology.clients, topology.servers, topology.folded, 1, size);
                            progress(&format!("{at}: {:.2} Gb/s in all", point.total_gbps()));
                            self.results.push(point);
                        }
                        Err(e) => {
                            progress(&format!("{at}: not measured: {e}"));
                            self.notes.push(format!("iperf3 at {size} B, {}: {e}", topology.name()));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn write(self) -> Result<ScanOutcome, ScanError> {
        let out = |e: String| ScanError::Output(e);
        let csv = self.output.join("results.csv");
        report::write_csv(&csv, &self.results).map_err(|e| out(e.to_string()))?;
        let json = serde_json::to_string_pretty(&self.results).map_err(|e| out(e.to_string()))?;
        std::fs::write(self.output.join("results.json"), json).map_err(|e| out(e.to_string()))?;
        let mut table = report::table(&self.results);
        for line in targets(&self.results) {
            table.push_str(&line);
            table.push('\n');
        }
        for note in &self.notes {
            table.push_str(&format!("note: {note}\n"));
        }
        std::fs::write(self.output.join("table.txt"), &table).map_err(|e| out(e.to_string()))?;
        let plots = report::plot(&self.output, &self.results, self.cfg.link_gbps).map_err(|e| out(e.to_string()))?;
        Ok(ScanOutcome { results: self.results, table, csv, plots })
    }

    /// Starts the instances of `topology`, instance i on `hosts[i % len]`.
    fn launch(&self, topology: &Topology) -> Result<Vec<Handle>, ScanError> {
        let mut handles = Vec::new();
        let deadline = Instant::now() + Duration::from_secs_f64(self.cfg.timeout_s);
        for i in 0..topology.instances() {
            let host = &self.cfg.hosts[i as usize % self.cfg.hosts.len()];
            let name = format!("ps{:08x}-{}x{}-{i}", self.id, topology.clients, topology.servers);
            let started = if is_local(host) {
                self.launch_local(&name, deadline)
            } else {
                self.launch_remote(&name, host, deadline)
            };
            match started {
                Ok(h) => handles.push(h),
                Err(e) => {
                    handles.into_iter().for_each(Handle::end);
                    return Err(e);
                }
            }
        }
        Ok(handles)
    }

    fn launch_local(&self, name: &str, deadline: Instant) -> Result<Handle, ScanError> {
        let failed = |why: String| ScanError::Start { instance: name.to_string(), why };
        let control_file = self.output.join(format!("{name}.address"));
        let log = std::fs::File::create(self.output.join(format!("{name}.log"))).map_err(|e| failed(e.to_string()))?;
        let _ = std::fs::remove_file(&control_file);
        let mut child = Command::new(&self.program)
            .args(["pipestream", "instance", "--name", name, "--control-file"])
            .arg(&control_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| failed(format!("{}: {e}", self.program.display())))?;
        loop {
            if let Some(addr) = std::fs::read_to_string(&control_file).ok().and_then(|t| t.trim().parse().ok()) {
                let _ = std::fs::remove_file(&control_file);
                return Ok(Handle::Local { name: name.to_string(), child, addr });
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(failed(format!("it ended ({status}) before serving; see {name}.log")));
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed("it did not serve in time".into()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn launch_remote(&self, name: &str, host: &str, deadline: Instant) -> Result<Handle, ScanError> {
        let failed = |why: String| ScanError::Start { instance: name.to_string(), why };
        let port = self.cfg.agent_port.ok_or_else(|| failed("no agent_port".into()))?;
        let token =
            self.token.clone().ok_or_else(|| failed(format!("{host}: set {AGENT_TOKEN_ENV} to its agent's token")))?;
        let agent = (host, port)
            .to_socket_addrs()
            .map_err(|e| failed(format!("{host}: {e}")))?
            .next()
            .ok_or_else(|| failed(format!("{host} resolves to nothing")))?;
        let request = serde_json::json!({
            "name": name,
            "args": ["pipestream", "instance", "--name", name, "--control-file", "{control_file}"],
        });
        let answer =
            client::call(agent, "POST", "/api/v1/processes", Some(&token), Some(&request.to_string()), CALL_TIMEOUT)
                .map_err(|e| failed(format!("agent {agent} of {host}: {e}")))?;
        if !answer.ok() {
            return Err(failed(format!("agent {agent} of {host} answered {}: {}", answer.status, answer.body.trim())));
        }
        let handle = Handle::Agent { name: name.to_string(), agent, token };
        loop {
            match handle.call(None, None) {
                Ok(_) => return Ok(handle),
                Err(e) if Instant::now() >= deadline => {
                    handle.end();
                    return Err(failed(format!("it did not serve in time: {e}")));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// Socket buffers of what pipestream keeps in flight per connection at `size`: `burst`
    /// messages, within the buffers' range.
    fn in_flight_buffer_bytes(&self, size: u32) -> u32 {
        let (lo, hi) = BUFFER_BYTES_RANGE;
        u32::try_from(u64::from(self.cfg.burst) * u64::from(size)).unwrap_or(hi).clamp(lo, hi)
    }

    /// Measures a point, and halts the instances whatever happened: the next starts from Halted.
    fn point(
        &mut self,
        topology: &Topology,
        handles: &[Handle],
        threads: u32,
        size: u32,
        mode: Mode,
        buffer_bytes: u32,
    ) -> Result<PointResult, ScanError> {
        let result = self.measure_point(topology, handles, threads, size, mode, buffer_bytes);
        for h in handles {
            let _ = h.call(Some("disconnect"), None);
        }
        result
    }

    /// Measures `topology`'s points, saying each with its figure as "`done` of `total`".
    fn measure_topology(
        &mut self,
        topology: &Topology,
        handles: &[Handle],
        (done, total): (&mut usize, usize),
        progress: &mut impl FnMut(&str),
    ) -> Result<(), ScanError> {
        for threads in self.cfg.scan_threads() {
            for size in self.cfg.scan_message_bytes() {
                let mut modes = vec![Mode::Pipestream];
                if self.cfg.baselines.raw_tcp {
                    modes.push(Mode::RawTcp);
                }
                for mode in modes {
                    let mut result = self.point(topology, handles, threads, size, mode, self.cfg.buffer_bytes);
                    // The raw stream's bound is the better of the file's socket buffers and of
                    // buffers of what pipestream keeps in flight (burst × message): with large
                    // buffers it moves more bytes than fit in cache, and a baseline below the
                    // thing it bounds says nothing of it.
                    let in_flight = self.in_flight_buffer_bytes(size);
                    if mode == Mode::RawTcp && in_flight != self.cfg.buffer_bytes {
                        let bounded = result.and_then(|r| {
                            let b = self.point(topology, handles, threads, size, mode, in_flight)?;
                            Ok(if b.bytes > r.bytes { b } else { r })
                        });
                        result = bounded;
                    }
                    let result = result?;
                    *done += 1;
                    progress(&format!(
                        "{done} of {total}: {}, {}, {} B, {}: {:.2} Gb/s per client{}",
                        topology.name(),
                        report::count(threads, "thread"),
                        size,
                        result.sender.name(),
                        result.client_gbps(),
                        match (mode, result.socket_buffer_bytes) {
                            (Mode::RawTcp, Some(b)) =>
                                format!(" (with {} socket buffers)", report::size_text(u64::from(b))),
                            _ => String::new(),
                        }
                    ));
                    self.results.push(result);
                }
            }
        }
        Ok(())
    }

    /// Instance `i`'s part of a point.
    fn assignment(&self, topology: &Topology, i: u32, session: u64, threads: u32, size: u32, mode: Mode) -> Assignment {
        let host_of = |instance: u32| bind_host(&self.cfg.hosts[instance as usize % self.cfg.hosts.len()]).to_string();
        let (client, server) = if topology.folded {
            ((i < topology.clients).then_some(i), (i < topology.servers).then_some(i))
        } else if i < topology.clients {
            (Some(i), None)
        } else {
            (None, Some(i - topology.clients))
        };
        let client_hosts: BTreeSet<String> =
            (0..topology.clients).map(|c| host_of(topology.client_instance(c))).collect();
        let server = server.map(|j| {
            // Servers sharing a host share no port.
            let before = (0..j).filter(|&k| host_of(topology.server_instance(k)) == host_of(i)).count() as u16;
            let port = if self.cfg.data_port == 0 { 0 } else { self.cfg.data_port + before };
            ServerPart {
                index: j,
                listen: format!("{}:{port}", host_of(i)),
                client_hosts: client_hosts.iter().cloned().collect(),
            }
        });
        Assignment {
            session,
            mode,
            clients: topology.clients,
            servers: topology.servers,
            message_bytes: size,
            buffer_bytes: self.cfg.buffer_bytes,
            burst: self.cfg.burst,
            threads,
            affinity: self.cfg.affinity.clone(),
            policy: self.cfg.policy,
            fair_window: self.cfg.fair_window,
            checksum: self.cfg.checksum,
            client,
            server,
            transport: self.cfg.transport,
            ucx_transports: self.cfg.ucx_transports.clone(),
        }
    }

    /// Waits until every instance is in `want`, at most the file's time-out.
    fn wait_for(&self, handles: &[Handle], want: State, what: &str) -> Result<Vec<Status>, ScanError> {
        let deadline = Instant::now() + Duration::from_secs_f64(self.cfg.timeout_s);
        loop {
            let statuses = handles.iter().map(|h| h.call(None, None)).collect::<Result<Vec<_>, _>>()?;
            if let Some((h, s)) = handles.iter().zip(&statuses).find(|(_, s)| s.state == State::Failed) {
                return Err(
                    h.error(format!("failed while {what}: {}", s.error.as_deref().unwrap_or("no reason given")))
                );
            }
            if statuses.iter().all(|s| s.state == want) {
                return Ok(statuses);
            }
            if Instant::now() >= deadline {
                let late: Vec<String> = handles
                    .iter()
                    .zip(&statuses)
                    .filter(|(_, s)| s.state != want)
                    .map(|(h, s)| format!("{} {:?}", h.name(), s.state))
                    .collect();
                return Err(ScanError::Instance {
                    instance: late.join(", "),
                    why: format!("not {want:?} within {:.0} s of {what}", self.cfg.timeout_s),
                });
            }
            pause(self.stop, POLL)?;
        }
    }

    fn measure_point(
        &mut self,
        topology: &Topology,
        handles: &[Handle],
        threads: u32,
        size: u32,
        mode: Mode,
        buffer_bytes: u32,
    ) -> Result<PointResult, ScanError> {
        self.points += 1;
        let session = (self.id << 24) | self.points;
        let mut servers = vec![None; topology.servers as usize];
        let mut ucx_servers = vec![Vec::new(); topology.servers as usize];
        let over_ucx = mode == Mode::Pipestream && self.cfg.transport == Transport::Ucx;
        for (i, h) in handles.iter().enumerate() {
            let a = Assignment { buffer_bytes, ..self.assignment(topology, i as u32, session, threads, size, mode) };
            let index = a.server.as_ref().map(|s| s.index as usize);
            let status = h.post("configure", &a)?;
            match index {
                Some(j) if over_ucx => {
                    ucx_servers[j] = status.ucx_addresses.clone();
                    if ucx_servers[j].is_empty() {
                        return Err(h.error("configured a UCX server but gave no worker address"));
                    }
                }
                Some(j) => {
                    servers[j] =
                        Some(status.data_address.ok_or_else(|| h.error("configured a server but gave no address"))?);
                }
                None => {}
            }
        }
        // Over UCX the servers have worker addresses, not data addresses.
        let servers: Vec<SocketAddr> = servers.into_iter().flatten().collect();
        let connect = ConnectRequest { servers, ucx_servers, timeout_s: self.cfg.timeout_s };
        for h in handles {
            h.post("connect", &connect)?;
        }
        self.wait_for(handles, State::Connected, "connecting")?;
        for h in handles {
            h.call(Some("start"), None)?;
        }
        pause(self.stop, Duration::from_secs_f64(self.cfg.warmup_s))?;
        let (t0, before) = sample(handles)?;
        pause(self.stop, Duration::from_secs_f64(self.cfg.duration_s))?;
        let (t1, after) = sample(handles)?;
        let stop = StopRequest { timeout_s: self.cfg.timeout_s };
        for h in handles {
            h.post("stop", &stop)?;
        }
        self.wait_for(handles, State::Stopped, "stopping")?;
        // Read again once all are stopped: an instance read stopped in the pass above may have
        // received, after it was read, the last messages of one that stopped later in the pass;
        // and a raw-TCP client has stopped once its bytes are written, not received, so its
        // servers may still be reading them: wait (bounded) until what was sent is in.
        let deadline = Instant::now() + Duration::from_secs_f64(self.cfg.timeout_s);
        let last = loop {
            let (_, last) = sample(handles)?;
            let sum = |f: fn(&Figures) -> u64| -> u64 { last.iter().map(|s| f(&s.figures)).sum() };
            if sum(|f| f.messages_received) >= sum(|f| f.messages_sent) || Instant::now() >= deadline {
                break last;
            }
            pause(self.stop, POLL)?;
        };
        let delta = |f: fn(&Figures) -> u64| -> u64 {
            after.iter().zip(&before).map(|(a, b)| f(&a.figures).saturating_sub(f(&b.figures))).sum()
        };
        let bytes = delta(|f| f.bytes_received);
        let messages = delta(|f| f.messages_received);
        let cpu: u64 = after.iter().zip(&before).map(|(a, b)| a.cpu_ns.saturating_sub(b.cpu_ns)).sum();
        let total = |f: fn(&Figures) -> u64| -> u64 { last.iter().map(|s| f(&s.figures)).sum() };
        let (sent, received) = (total(|f| f.messages_sent), total(|f| f.messages_received));
        let errors = total(Figures::errors) + sent.abs_diff(received);
        Ok(PointResult {
            clients: topology.clients,
            servers: topology.servers,
            folded: topology.folded,
            threads,
            message_bytes: size,
            sender: match mode {
                Mode::Pipestream => Sender::Pipestream,
                Mode::RawTcp => Sender::RawTcp,
            },
            seconds: (t1 - t0).as_secs_f64(),
            messages,
            bytes,
            cpu_ns_per_message: (messages > 0).then(|| cpu as f64 / messages as f64),
            errors,
            socket_buffer_bytes: Some(buffer_bytes),
        })
    }
}

/// Sleeps `d`, or less if `stop` is set meanwhile: then says so.
fn pause(stop: &AtomicBool, d: Duration) -> Result<(), ScanError> {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if stop.load(Ordering::SeqCst) {
            return Err(ScanError::Stopped);
        }
        std::thread::sleep((until - Instant::now()).min(POLL));
    }
    if stop.load(Ordering::SeqCst) { Err(ScanError::Stopped) } else { Ok(()) }
}

/// Every instance's status, and the moment in the middle of the reading.
fn sample(handles: &[Handle]) -> Result<(Instant, Vec<Status>), ScanError> {
    let start = Instant::now();
    let statuses = handles.iter().map(|h| h.call(None, None)).collect::<Result<Vec<_>, _>>()?;
    Ok((start + (Instant::now() - start) / 2, statuses))
}

/// What a scan leaves.
#[derive(Debug)]
pub struct ScanOutcome {
    /// Every point.
    pub results: Vec<PointResult>,
    /// The table, the targets and the notes, as printed.
    pub table: String,
    /// The CSV file.
    pub csv: PathBuf,
    /// The plots.
    pub plots: Vec<PathBuf>,
}

/// The targets of the issue that the results speak to, one line each: pipestream against raw TCP
/// at 64 KiB, against iperf3 at 4 KiB, and the message rate and CPU below 4 KiB.
pub fn targets(results: &[PointResult]) -> Vec<String> {
    let find = |r: &PointResult, sender: Sender| {
        results.iter().find(|o| {
            o.sender == sender
                && o.message_bytes == r.message_bytes
                && (o.clients, o.servers, o.folded) == (r.clients, r.servers, r.folded)
                && (sender == Sender::Iperf3 || o.threads == r.threads)
        })
    };
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    let mut lines = Vec::new();
    for r in results.iter().filter(|r| r.sender == Sender::Pipestream) {
        let at = format!("{}, {}", r.topology(), report::count(r.threads, "thread"));
        if r.message_bytes == 64 << 10
            && let Some(raw) = find(r, Sender::RawTcp)
            && raw.bytes > 0
        {
            let ratio = r.total_gbps() / raw.total_gbps();
            // A baseline below what it should bound is no bound: its "met" says nothing.
            let caveat =
                if ratio > 1.05 { " (raw TCP is below pipestream here: no bound, so this says little)" } else { "" };
            lines.push(format!(
                "target at 64 KiB >= 0.95 of raw TCP ({at}): {ratio:.2} {}{caveat}",
                verdict(ratio >= 0.95)
            ));
        }
        if r.message_bytes == 4 << 10
            && let Some(ip) = find(r, Sender::Iperf3)
            && ip.bytes > 0
        {
            let ratio = r.total_gbps() / ip.total_gbps();
            lines.push(format!("target at 4 KiB >= 0.9 of iperf3 ({at}): {ratio:.2} {}", verdict(ratio >= 0.9)));
        }
        if r.message_bytes < 4 << 10 {
            lines.push(format!(
                "below 4 KiB ({at}, {} B): {:.2} M messages/s, {} CPU ns per message, {:.2} Gb/s per client",
                r.message_bytes,
                r.messages_per_s() / 1e6,
                r.cpu_ns_per_message.map_or("-".into(), |c| format!("{c:.0}")),
                r.client_gbps()
            ));
        }
    }
    lines
}
