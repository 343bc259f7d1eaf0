//! The I/O of one instance: its server's listener, its connections, and the threads that
//! service them, driving the cores of [`crate::core`].
//!
//! An instance is configured with its part of a scan point ([`Assignment`]), which binds its
//! server's listener ([`Engine::configure`]); then it connects ([`Engine::connect`]): its
//! client calls every server and says hello, its server accepts one connection from each client
//! and checks the hello (the session must be this point's, the address one of the clients'
//! hosts). The connections are then dealt to the instance's threads in turn, each thread a
//! `mio` loop over its share; [`Engine::start`] lets the clients send, [`Engine::stop`] stops
//! them and waits until every message sent has been acknowledged. Figures are kept in shared
//! counters ([`Counters`]) that run control reads at any time.
//!
//! Writes are vectored: a connection's queued messages go out as their headers and the one
//! payload buffer of the instance, many messages a call, so that a small message costs a
//! header's worth of copying. Every wait is bounded: connecting and draining by the time-out
//! the driver gives, a thread's poll by [`POLL_WAIT`].

use crate::config::{BUFFER_BYTES_RANGE, MAX_BURST, MAX_PEERS, MAX_THREADS, MESSAGE_BYTES_RANGE, Policy};
use crate::core::{AckReader, Errors, Receiver, Sender, message_checksum};
use crate::wire::{HEADER_BYTES, Header, Kind};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_formats::crc::crc32c;

/// Longest a thread's poll waits before it looks at its phase again.
pub const POLL_WAIT: Duration = Duration::from_millis(2);
/// Most slices one vectored write takes.
const MAX_SLICES: usize = 512;
/// Most bytes read from one connection before a thread turns to its others.
const READ_TURN_BYTES: usize = 4 << 20;
/// Largest read a thread makes: its one receive buffer.
const MAX_READ_BYTES: usize = 4 << 20;

#[cfg(feature = "ucx")]
mod ucx;

/// What a point's messages travel on (the raw-TCP baseline is always TCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// TCP sockets.
    #[default]
    Tcp,
    /// UCX active messages (a build with the feature `ucx`).
    Ucx,
}

/// What carries the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// pipestream's messages.
    Pipestream,
    /// The raw-TCP baseline: payload bytes only, no header, acknowledgement or check.
    RawTcp,
}

/// An instance's server, as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerPart {
    /// The server's index (j).
    pub index: u32,
    /// Where it listens, `host:port` (port 0: any free one).
    pub listen: String,
    /// The hosts of the clients, all of them: only their addresses may connect.
    pub client_hosts: Vec<String>,
}

/// An instance's part of one scan point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    /// The point: hellos of another session are refused.
    pub session: u64,
    /// What carries the bytes.
    pub mode: Mode,
    /// Clients of the point (N).
    pub clients: u32,
    /// Servers of the point (M).
    pub servers: u32,
    /// Payload bytes of a message.
    pub message_bytes: u32,
    /// Socket buffer bytes per connection, and the most a read takes.
    pub buffer_bytes: u32,
    /// Messages in flight per connection.
    pub burst: u32,
    /// Threads servicing the connections.
    pub threads: u32,
    /// Cores the threads are pinned to, in turn.
    pub affinity: Vec<usize>,
    /// How the client picks its next message.
    pub policy: Policy,
    /// The fair policy's window, in messages.
    pub fair_window: u32,
    /// Whether messages carry a checksum.
    pub checksum: bool,
    /// This instance's client index, if it has a client.
    pub client: Option<u32>,
    /// This instance's server, if it has one.
    pub server: Option<ServerPart>,
    /// What pipestream's messages travel on.
    #[serde(default)]
    pub transport: Transport,
    /// UCX's transports (as `UCX_TLS` lists them, e.g. `tcp` or `sm,self`); none: UCX's choice.
    #[serde(default)]
    pub ucx_transports: Option<String>,
}

/// Why an instance cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A socket call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: io::Error,
    },
    /// Something took longer than it may.
    #[error("{0}")]
    Timeout(String),
    /// The assignment cannot be carried out.
    #[error("{0}")]
    Assignment(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> EngineError {
    let what = what.into();
    move |source| EngineError::Io { what, source }
}

/// The figures of an instance, shared by its threads and read by run control.
#[derive(Debug, Default)]
pub struct Counters {
    /// Messages its client queued.
    pub messages_sent: AtomicU64,
    /// Messages its client had acknowledged (raw: written whole).
    pub messages_completed: AtomicU64,
    /// Messages its server received whole (raw: payload bytes over the message size).
    pub messages_received: AtomicU64,
    /// Payload bytes its server received.
    pub bytes_received: AtomicU64,
    /// Messages its server found missing.
    pub lost: AtomicU64,
    /// Messages its server found out of order.
    pub out_of_order: AtomicU64,
    /// Messages its server found corrupt.
    pub corrupt: AtomicU64,
    /// Connections a server refused (a wrong address, hello or session).
    pub refused: AtomicU64,
}

/// A copy of [`Counters`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Messages its client queued.
    pub messages_sent: u64,
    /// Messages its client had completed.
    pub messages_completed: u64,
    /// Messages its server received whole.
    pub messages_received: u64,
    /// Payload bytes its server received.
    pub bytes_received: u64,
    /// Messages its server found missing.
    pub lost: u64,
    /// Messages its server found out of order.
    pub out_of_order: u64,
    /// Messages its server found corrupt.
    pub corrupt: u64,
    /// Connections its server refused.
    pub refused: u64,
}

impl Figures {
    /// Every message its server found wrong.
    pub fn errors(&self) -> u64 {
        self.lost + self.out_of_order + self.corrupt
    }
}

impl Counters {
    /// The figures now.
    pub fn figures(&self) -> Figures {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Figures {
            messages_sent: l(&self.messages_sent),
            messages_completed: l(&self.messages_completed),
            messages_received: l(&self.messages_received),
            bytes_received: l(&self.bytes_received),
            lost: l(&self.lost),
            out_of_order: l(&self.out_of_order),
            corrupt: l(&self.corrupt),
            refused: l(&self.refused),
        }
    }

    fn add_errors(&self, e: &Errors) {
        self.lost.fetch_add(e.lost, Ordering::Relaxed);
        self.out_of_order.fetch_add(e.out_of_order, Ordering::Relaxed);
        self.corrupt.fetch_add(e.corrupt, Ordering::Relaxed);
    }
}

const PHASE_IDLE: u8 = 0;
const PHASE_RUNNING: u8 = 1;
const PHASE_STOPPING: u8 = 2;
const PHASE_EXIT: u8 = 3;

/// What the threads share.
struct Shared {
    phase: AtomicU8,
    counters: Arc<Counters>,
    /// Threads that have drained since the last stop.
    drained: AtomicU64,
    /// Messages this instance's server has received from each client, for the fair floor.
    from_client: Vec<AtomicU64>,
    /// The first error of any thread.
    error: Mutex<Option<String>>,
}

impl Shared {
    fn fail(&self, why: String) {
        let mut e = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if e.is_none() {
            *e = Some(why);
        }
    }

    /// The phase now; a stopping phase stops `sender`, which starts no message any more.
    fn phase_for(&self, sender: &mut Sender) -> u8 {
        let phase = self.phase.load(Ordering::SeqCst);
        if phase == PHASE_STOPPING {
            sender.stop();
        }
        phase
    }

    fn floor(&self) -> u64 {
        self.from_client.iter().map(|c| c.load(Ordering::Relaxed)).min().unwrap_or(0)
    }
}

/// One instance's engine.
pub struct Engine {
    assignment: Assignment,
    #[cfg(feature = "ucx")]
    ucx: Option<ucx::UcxThreads>,
    listener: Option<TcpListener>,
    data_address: Option<SocketAddr>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// Resolves `host:port` to its first address.
fn resolve(host_port: &str) -> Result<SocketAddr, EngineError> {
    host_port
        .to_socket_addrs()
        .map_err(io_err(format!("resolving {host_port}")))?
        .next()
        .ok_or_else(|| EngineError::Assignment(format!("{host_port} resolves to nothing")))
}

fn socket_for(addr: SocketAddr, buffer_bytes: u32) -> Result<socket2::Socket, EngineError> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)
        .map_err(io_err("creating a socket"))?;
    let bytes = buffer_bytes as usize;
    socket.set_send_buffer_size(bytes).map_err(io_err("setting SO_SNDBUF"))?;
    socket.set_recv_buffer_size(bytes).map_err(io_err("setting SO_RCVBUF"))?;
    Ok(socket)
}

impl Engine {
    /// Takes `assignment`: checks it and binds its server's listener.
    pub fn configure(assignment: Assignment) -> Result<Engine, EngineError> {
        let a = &assignment;
        // The same bounds as the file's: an assignment comes over REST from anyone on loopback.
        let within = |what: &str, v: u32, (lo, hi): (u32, u32)| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(EngineError::Assignment(format!("{what} {v}: must be {lo}..={hi}")))
            }
        };
        within("message_bytes", a.message_bytes, MESSAGE_BYTES_RANGE)?;
        within("buffer_bytes", a.buffer_bytes, BUFFER_BYTES_RANGE)?;
        within("burst", a.burst, (1, MAX_BURST))?;
        within("threads", a.threads, (1, MAX_THREADS))?;
        within("clients", a.clients, (1, MAX_PEERS))?;
        within("servers", a.servers, (1, MAX_PEERS))?;
        within("fair_window", a.fair_window, (1, u32::MAX))?;
        if a.client.is_some_and(|c| c >= a.clients) || a.server.as_ref().is_some_and(|s| s.index >= a.servers) {
            return Err(EngineError::Assignment("client or server index beyond the topology".into()));
        }
        let over_ucx = a.transport == Transport::Ucx && a.mode == Mode::Pipestream;
        if over_ucx && !tessera_ucx::ENABLED {
            return Err(EngineError::Assignment(
                "transport ucx: this tessera was built without UCX (build it with `--features ucx`)".into(),
            ));
        }
        let (listener, data_address) = match &a.server {
            _ if over_ucx => (None, None),
            None => (None, None),
            Some(s) => {
                let addr = resolve(&s.listen)?;
                let socket = socket_for(addr, a.buffer_bytes)?;
                socket.set_reuse_address(true).map_err(io_err("setting SO_REUSEADDR"))?;
                socket.bind(&addr.into()).map_err(io_err(format!("binding {addr}")))?;
                socket.listen(1024).map_err(io_err(format!("listening on {addr}")))?;
                let listener: TcpListener = socket.into();
                listener.set_nonblocking(true).map_err(io_err("setting the listener non-blocking"))?;
                let bound = listener.local_addr().map_err(io_err("reading the listener's address"))?;
                (Some(listener), Some(bound))
            }
        };
        let shared = Arc::new(Shared {
            phase: AtomicU8::new(PHASE_IDLE),
            counters: Arc::new(Counters::default()),
            drained: AtomicU64::new(0),
            from_client: (0..a.clients).map(|_| AtomicU64::new(0)).collect(),
            error: Mutex::new(None),
        });
        #[cfg(feature = "ucx")]
        let ucx = if over_ucx { Some(ucx::UcxThreads::start(&assignment, &shared)?) } else { None };
        Ok(Engine {
            assignment,
            #[cfg(feature = "ucx")]
            ucx,
            listener,
            data_address,
            shared,
            threads: Vec::new(),
        })
    }

    /// Its UCX worker addresses, one per thread, when its messages travel on UCX.
    pub fn ucx_addresses(&self) -> Vec<Vec<u8>> {
        #[cfg(feature = "ucx")]
        if let Some(u) = &self.ucx {
            return u.addresses.clone();
        }
        Vec::new()
    }

    /// The address the server listens on, if the instance has one.
    pub fn data_address(&self) -> Option<SocketAddr> {
        self.data_address
    }

    /// The assignment.
    pub fn assignment(&self) -> &Assignment {
        &self.assignment
    }

    /// The counters, which stay valid after the engine is gone.
    pub fn counters(&self) -> Arc<Counters> {
        self.shared.counters.clone()
    }

    /// The first error a thread met, if any.
    pub fn error(&self) -> Option<String> {
        self.shared.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Connects: the client to every server (`servers[j]`, in order), the server to one
    /// connection of each client; then starts the threads, idle until [`Engine::start`].
    pub fn connect(&mut self, servers: &[SocketAddr], timeout: Duration) -> Result<(), EngineError> {
        self.connect_over(servers, &[], timeout)
    }

    /// [`Engine::connect`], over UCX when the assignment says so: `ucx_servers[j]` are server
    /// j's worker addresses ([`Engine::ucx_addresses`]).
    pub fn connect_over(
        &mut self,
        servers: &[SocketAddr],
        ucx_servers: &[Vec<Vec<u8>>],
        timeout: Duration,
    ) -> Result<(), EngineError> {
        let a = self.assignment.clone();
        #[cfg(feature = "ucx")]
        if let Some(u) = &mut self.ucx {
            u.connect(&a, ucx_servers, timeout)?;
            self.threads.append(&mut u.threads);
            return Ok(());
        }
        let _ = ucx_servers;
        if a.client.is_some() && servers.len() != a.servers as usize {
            return Err(EngineError::Assignment(format!(
                "{} server addresses for {} servers",
                servers.len(),
                a.servers
            )));
        }
        let deadline = Instant::now() + timeout;
        let acceptor = match (self.listener.take(), &a.server) {
            (Some(listener), Some(part)) => {
                let allowed = allowed_ips(&part.client_hosts)?;
                let (a2, counters) = (a.clone(), self.shared.counters.clone());
                Some(
                    std::thread::Builder::new()
                        .name("pipestream-accept".into())
                        .spawn(move || accept_clients(&listener, &a2, &allowed, &counters, deadline))
                        .map_err(io_err("starting the acceptor"))?,
                )
            }
            _ => None,
        };
        let mut client_conns = Vec::new();
        if let Some(client) = a.client {
            for (j, &addr) in servers.iter().enumerate() {
                let socket = socket_for(addr, a.buffer_bytes)?;
                let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
                socket
                    .connect_timeout(&addr.into(), left)
                    .map_err(io_err(format!("connecting to server {j} at {addr}")))?;
                socket.set_tcp_nodelay(true).map_err(io_err("setting TCP_NODELAY"))?;
                let mut stream: std::net::TcpStream = socket.into();
                stream
                    .write_all(&crate::wire::Header::hello(client, a.session).encode())
                    .map_err(io_err(format!("saying hello to server {j} at {addr}")))?;
                stream.set_nonblocking(true).map_err(io_err("setting a connection non-blocking"))?;
                client_conns.push((j, stream));
            }
        }
        let server_conns = match acceptor {
            Some(t) => t.join().map_err(|_| EngineError::Assignment("the acceptor panicked".into()))??,
            None => Vec::new(),
        };
        self.start_threads(client_conns, server_conns)
    }

    fn start_threads(&mut self, client_conns: Vec<Numbered>, server_conns: Vec<Numbered>) -> Result<(), EngineError> {
        let a = &self.assignment;
        let threads = a.threads as usize;
        let payload = Arc::new(payload(a.message_bytes));
        let payload_crc = crc32c(&payload);
        let mut shares: Vec<(Vec<Numbered>, Vec<Numbered>)> = (0..threads).map(|_| (Vec::new(), Vec::new())).collect();
        for (k, c) in client_conns.into_iter().enumerate() {
            shares[k % threads].0.push(c);
        }
        for (k, c) in server_conns.into_iter().enumerate() {
            shares[k % threads].1.push(c);
        }
        for (t, (clients, servers)) in shares.into_iter().enumerate() {
            let core = (!a.affinity.is_empty()).then(|| a.affinity[t % a.affinity.len()]);
            let mut worker = Worker::new(a, clients, servers, payload.clone(), payload_crc, self.shared.clone())?;
            let thread = std::thread::Builder::new()
                .name(format!("pipestream-{t}"))
                .spawn(move || {
                    if let Some(id) = core
                        && !core_affinity::set_for_current(core_affinity::CoreId { id })
                    {
                        tracing::warn!("pipestream thread {t}: could not pin to core {id}; it runs unpinned");
                    }
                    if let Err(e) = worker.run() {
                        worker.shared.fail(format!("thread {t}: {e}"));
                    }
                })
                .map_err(io_err("starting a thread"))?;
            self.threads.push(thread);
        }
        Ok(())
    }

    /// Lets the clients send.
    pub fn start(&self) {
        self.shared.drained.store(0, Ordering::SeqCst);
        self.shared.phase.store(PHASE_RUNNING, Ordering::SeqCst);
    }

    /// Stops the clients and waits, at most `timeout`, until every message they sent has been
    /// acknowledged (raw: written whole).
    pub fn stop(&self, timeout: Duration) -> Result<(), EngineError> {
        self.shared.phase.store(PHASE_STOPPING, Ordering::SeqCst);
        let deadline = Instant::now() + timeout;
        while self.shared.drained.load(Ordering::SeqCst) < self.threads.len() as u64 {
            if let Some(e) = self.error() {
                return Err(EngineError::Assignment(e));
            }
            if Instant::now() >= deadline {
                return Err(EngineError::Timeout(format!(
                    "the clients did not drain within {:.1} s",
                    timeout.as_secs_f64()
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.phase.store(PHASE_EXIT, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The payload every message of a run carries: a pattern that no byte-shift leaves unchanged.
fn payload(bytes: u32) -> Vec<u8> {
    (0..bytes).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect()
}

/// The addresses of `hosts`.
fn allowed_ips(hosts: &[String]) -> Result<Vec<IpAddr>, EngineError> {
    let mut ips = Vec::new();
    for h in hosts {
        let addrs = (h.as_str(), 0).to_socket_addrs().map_err(io_err(format!("resolving client host {h}")))?;
        ips.extend(addrs.map(|a| a.ip()));
    }
    Ok(ips)
}

/// Accepts one connection from each client before `deadline`; a caller from elsewhere, or with
/// a wrong hello, is refused and counted, and the wait goes on.
fn accept_clients(
    listener: &TcpListener,
    a: &Assignment,
    allowed: &[IpAddr],
    counters: &Counters,
    deadline: Instant,
) -> Result<Vec<Numbered>, EngineError> {
    let mut conns: Vec<Option<std::net::TcpStream>> = (0..a.clients).map(|_| None).collect();
    while conns.iter().any(Option::is_none) {
        if Instant::now() >= deadline {
            let missing: Vec<usize> = (0..conns.len()).filter(|&i| conns[i].is_none()).collect();
            return Err(EngineError::Timeout(format!("clients {missing:?} did not connect in time")));
        }
        let (mut stream, from) = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(e) => return Err(io_err("accepting a client")(e)),
        };
        let refuse = |why: String| {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("pipestream server: refused {from}: {why}");
        };
        if !allowed.contains(&from.ip()) {
            refuse("not one of the clients' hosts".into());
            continue;
        }
        let mut hello = [0u8; HEADER_BYTES];
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let read = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_read_timeout(Some(left)))
            .and_then(|()| stream.read_exact(&mut hello));
        if let Err(e) = read {
            refuse(format!("no hello: {e}"));
            continue;
        }
        match Header::decode(&hello) {
            Ok(h) if h.kind == Kind::Hello && h.aux == a.session && h.number < u64::from(a.clients) => {
                let i = h.number as usize;
                if conns[i].is_some() {
                    refuse(format!("client {i} is connected already"));
                    continue;
                }
                let setup = stream
                    .set_read_timeout(None)
                    .and_then(|()| stream.set_nodelay(true))
                    .and_then(|()| stream.set_nonblocking(true));
                setup.map_err(io_err("setting up a client's connection"))?;
                conns[i] = Some(stream);
            }
            Ok(h) => refuse(format!("hello of client {} for session {}, not one of this point's", h.number, h.aux)),
            Err(e) => refuse(format!("a hello that is not one: {e}")),
        }
    }
    Ok(conns.into_iter().enumerate().map(|(i, c)| (i, c.expect("every client connected"))).collect())
}

/// A connection and the index of the peer at its other end.
type Numbered = (usize, std::net::TcpStream);

/// A client's connection to one server.
struct ClientConn {
    stream: TcpStream,
    server: usize,
    /// Headers of the messages queued and not yet written whole (pipestream).
    queue: VecDeque<[u8; HEADER_BYTES]>,
    /// Bytes of the front message (header and payload) written so far; raw: of the current
    /// chunk.
    offset: usize,
    blocked: bool,
    acks: AckReader,
}

/// A server's connection from one client.
struct ServerConn {
    stream: TcpStream,
    client: usize,
    receiver: Receiver,
    /// Raw: payload bytes received.
    raw_bytes: u64,
    /// Acknowledgement bytes not yet written (a partial frame first, then at most one whole).
    ack_out: Vec<u8>,
    open: bool,
}

/// One thread's share of the connections.
struct Worker {
    mode: Mode,
    message_bytes: usize,
    /// Messages in flight per connection; raw: messages per write.
    burst: usize,
    checksum: bool,
    payload: Arc<Vec<u8>>,
    payload_crc: u32,
    clients: Vec<ClientConn>,
    servers: Vec<ServerConn>,
    sender: Sender,
    read_buffer: Vec<u8>,
    poll: Poll,
    shared: Arc<Shared>,
    completed_said: u64,
    /// The client has messages under way: a server closing now is an error.
    sending: bool,
    /// This thread has said it drained.
    drained_said: bool,
}

const SERVER_TOKENS: usize = 1 << 20;

impl Worker {
    fn new(
        a: &Assignment,
        clients: Vec<Numbered>,
        servers: Vec<Numbered>,
        payload: Arc<Vec<u8>>,
        payload_crc: u32,
        shared: Arc<Shared>,
    ) -> Result<Worker, EngineError> {
        let poll = Poll::new().map_err(io_err("creating a poller"))?;
        let mut client_conns = Vec::new();
        for (k, (server, s)) in clients.into_iter().enumerate() {
            let mut stream = TcpStream::from_std(s);
            poll.registry()
                .register(&mut stream, Token(k), Interest::READABLE | Interest::WRITABLE)
                .map_err(io_err("registering a connection"))?;
            client_conns.push(ClientConn {
                stream,
                server,
                queue: VecDeque::new(),
                offset: 0,
                blocked: false,
                acks: AckReader::default(),
            });
        }
        let mut server_conns = Vec::new();
        for (k, (client, s)) in servers.into_iter().enumerate() {
            let mut stream = TcpStream::from_std(s);
            poll.registry()
                .register(&mut stream, Token(SERVER_TOKENS + k), Interest::READABLE | Interest::WRITABLE)
                .map_err(io_err("registering a connection"))?;
            server_conns.push(ServerConn {
                stream,
                client,
                receiver: Receiver::new(a.message_bytes),
                raw_bytes: 0,
                ack_out: Vec::new(),
                open: true,
            });
        }
        let mut sender = Sender::new(client_conns.len(), a.policy, a.burst, a.fair_window);
        // Clients start at different servers, as an event builder's readout units do.
        sender.start_at(a.client.unwrap_or(0) as usize);
        Ok(Worker {
            mode: a.mode,
            message_bytes: a.message_bytes as usize,
            burst: a.burst.max(1) as usize,
            checksum: a.checksum,
            payload,
            payload_crc,
            clients: client_conns,
            servers: server_conns,
            sender,
            read_buffer: vec![0; (a.buffer_bytes as usize).clamp(64 << 10, MAX_READ_BYTES)],
            poll,
            shared,
            completed_said: 0,
            sending: false,
            drained_said: false,
        })
    }

    fn run(&mut self) -> Result<(), EngineError> {
        let mut events = Events::with_capacity(1024);
        loop {
            let phase = self.shared.phase_for(&mut self.sender);
            if phase == PHASE_EXIT {
                return Ok(());
            }
            // Until drained, a stopping client finishes what it started.
            self.sending = phase == PHASE_RUNNING || (phase == PHASE_STOPPING && !self.drained_said);
            if self.sending {
                match self.mode {
                    Mode::Pipestream => self.send_messages(phase == PHASE_RUNNING)?,
                    Mode::RawTcp => self.send_raw(phase == PHASE_RUNNING)?,
                }
            }
            self.read_clients()?;
            self.read_servers()?;
            self.write_acks()?;
            if phase == PHASE_STOPPING && !self.drained_said && self.drained() {
                self.drained_said = true;
                self.shared.drained.fetch_add(1, Ordering::SeqCst);
            }
            // Poll without waiting only when a client has something it may write now: a fair
            // client waiting for its turn's server must sleep, not spin.
            let clients = &self.clients;
            let busy = phase == PHASE_RUNNING
                && match self.mode {
                    Mode::RawTcp => clients.iter().any(|c| !c.blocked),
                    Mode::Pipestream => {
                        clients.iter().any(|c| !c.blocked && !c.queue.is_empty())
                            || self.sender.ready(|i| !clients[i].blocked).is_some()
                    }
                };
            let wait = if busy { Duration::ZERO } else { POLL_WAIT };
            self.poll.poll(&mut events, Some(wait)).map_err(io_err("polling"))?;
            for e in events.iter() {
                let k = e.token().0;
                if k < SERVER_TOKENS && e.is_writable() {
                    self.clients[k].blocked = false;
                }
            }
        }
    }

    fn drained(&self) -> bool {
        match self.mode {
            Mode::Pipestream => self.sender.drained() && self.clients.iter().all(|c| c.queue.is_empty()),
            Mode::RawTcp => self.clients.iter().all(|c| c.offset == 0),
        }
    }

    /// Queues what the sender allows and writes every connection's queue.
    fn send_messages(&mut self, may_start: bool) -> Result<(), EngineError> {
        if may_start {
            let mut sent = 0;
            while let Some((i, seq)) = self.sender.next(|i| !self.clients[i].blocked) {
                let crc = self.checksum.then(|| message_checksum(seq, self.payload_crc, self.message_bytes as u32));
                self.clients[i].queue.push_back(Header::message(seq, self.message_bytes as u32, crc).encode());
                sent += 1;
            }
            self.shared.counters.messages_sent.fetch_add(sent, Ordering::Relaxed);
        }
        for k in 0..self.clients.len() {
            self.write_queue(k)?;
        }
        Ok(())
    }

    /// Writes connection `k`'s queued messages, many a call, until it would block.
    fn write_queue(&mut self, k: usize) -> Result<(), EngineError> {
        let message = HEADER_BYTES + self.message_bytes;
        let payload = self.payload.as_slice();
        let c = &mut self.clients[k];
        while !c.queue.is_empty() && !c.blocked {
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(MAX_SLICES);
            for (n, header) in c.queue.iter().enumerate() {
                if slices.len() + 2 > MAX_SLICES {
                    break;
                }
                let skip = if n == 0 { c.offset } else { 0 };
                if skip < HEADER_BYTES {
                    slices.push(IoSlice::new(&header[skip..]));
                    slices.push(IoSlice::new(payload));
                } else {
                    slices.push(IoSlice::new(&payload[skip - HEADER_BYTES..]));
                }
            }
            match c.stream.write_vectored(&slices) {
                Ok(0) => return Err(EngineError::Assignment(format!("server {} closed its connection", c.server))),
                Ok(mut n) => {
                    n += c.offset;
                    let whole = n / message;
                    c.queue.drain(..whole);
                    c.offset = n % message;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.blocked = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(format!("writing to server {}", c.server))(e)),
            }
        }
        Ok(())
    }

    /// Raw: to every connection in turn, one vectored write of up to `burst` messages of
    /// payload (what is left of the one under way first), as pipestream batches its messages
    /// but without their headers; once stopping, only finishes the message under way.
    fn send_raw(&mut self, may_start: bool) -> Result<(), EngineError> {
        let chunk = self.message_bytes;
        let payload = self.payload.as_slice();
        let per_call = if may_start { self.burst.min(MAX_SLICES) } else { 1 };
        let mut completed = 0;
        for c in &mut self.clients {
            if c.blocked || (!may_start && c.offset == 0) {
                continue;
            }
            let mut slices = vec![IoSlice::new(&payload[c.offset..])];
            slices.extend((1..per_call).map(|_| IoSlice::new(payload)));
            match c.stream.write_vectored(&slices) {
                Ok(0) => return Err(EngineError::Assignment(format!("server {} closed its connection", c.server))),
                Ok(n) => {
                    let n = n + c.offset;
                    completed += (n / chunk) as u64;
                    c.offset = n % chunk;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.blocked = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(format!("writing to server {}", c.server))(e)),
            }
        }
        self.shared.counters.messages_sent.fetch_add(completed, Ordering::Relaxed);
        self.shared.counters.messages_completed.fetch_add(completed, Ordering::Relaxed);
        Ok(())
    }

    /// Reads the acknowledgements of the client's connections.
    fn read_clients(&mut self) -> Result<(), EngineError> {
        if self.mode == Mode::RawTcp {
            return Ok(());
        }
        let mut buf = [0u8; 64 * HEADER_BYTES];
        for k in 0..self.clients.len() {
            loop {
                let c = &mut self.clients[k];
                match c.stream.read(&mut buf) {
                    Ok(0) if self.sending => {
                        return Err(EngineError::Assignment(format!("server {} closed its connection", c.server)));
                    }
                    // The point is over: servers may go first.
                    Ok(0) => break,
                    Ok(n) => {
                        let sender = &mut self.sender;
                        let mut bad = None;
                        c.acks
                            .feed(&buf[..n], |received, floor| {
                                if let Err(e) = sender.on_ack(k, received, floor) {
                                    bad.get_or_insert(e);
                                }
                            })
                            .map_err(|e| EngineError::Assignment(format!("server {}: {e}", c.server)))?;
                        if let Some(e) = bad {
                            return Err(EngineError::Assignment(format!("server {}: {e}", c.server)));
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(io_err(format!("reading from server {}", c.server))(e)),
                }
            }
        }
        let completed = self.sender.completed();
        self.shared.counters.messages_completed.fetch_add(completed - self.completed_said, Ordering::Relaxed);
        self.completed_said = completed;
        Ok(())
    }

    /// Reads every server connection, a bounded turn each.
    fn read_servers(&mut self) -> Result<(), EngineError> {
        let counters = self.shared.counters.clone();
        for k in 0..self.servers.len() {
            let s = &mut self.servers[k];
            if !s.open {
                continue;
            }
            let (before_msgs, before_bytes, before_errors) =
                (s.receiver.received(), s.receiver.bytes(), s.receiver.errors());
            let mut turn = 0;
            while turn < READ_TURN_BYTES {
                match s.stream.read(&mut self.read_buffer) {
                    // A client closes when its point is over; what it sent was read.
                    Ok(0) => {
                        s.open = false;
                        break;
                    }
                    Ok(n) => {
                        turn += n;
                        match self.mode {
                            Mode::Pipestream => s
                                .receiver
                                .feed(&self.read_buffer[..n])
                                .map_err(|e| EngineError::Assignment(format!("client {}: {e}", s.client)))?,
                            Mode::RawTcp => s.raw_bytes += n as u64,
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(io_err(format!("reading from client {}", s.client))(e)),
                }
            }
            match self.mode {
                Mode::Pipestream => {
                    let got = s.receiver.received() - before_msgs;
                    counters.messages_received.fetch_add(got, Ordering::Relaxed);
                    counters.bytes_received.fetch_add(s.receiver.bytes() - before_bytes, Ordering::Relaxed);
                    let now = s.receiver.errors();
                    counters.add_errors(&Errors {
                        lost: now.lost - before_errors.lost,
                        out_of_order: now.out_of_order - before_errors.out_of_order,
                        corrupt: now.corrupt - before_errors.corrupt,
                    });
                    self.shared.from_client[s.client].store(s.receiver.received(), Ordering::Relaxed);
                }
                Mode::RawTcp => {
                    let chunk = self.message_bytes as u64;
                    let before = s.raw_bytes - turn as u64;
                    counters.bytes_received.fetch_add(turn as u64, Ordering::Relaxed);
                    counters.messages_received.fetch_add(s.raw_bytes / chunk - before / chunk, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    /// Queues and writes the acknowledgements that say something new.
    fn write_acks(&mut self) -> Result<(), EngineError> {
        if self.mode == Mode::RawTcp {
            return Ok(());
        }
        let floor = self.shared.floor();
        for s in &mut self.servers {
            if !s.open {
                continue;
            }
            if let Some(ack) = s.receiver.ack(floor) {
                // A partly written frame is finished first; whole frames not yet written are
                // said again better by this one (acknowledgements are cumulative).
                let keep = s.ack_out.len() % HEADER_BYTES;
                s.ack_out.truncate(keep);
                s.ack_out.extend_from_slice(&ack.encode());
            }
            while !s.ack_out.is_empty() {
                match s.stream.write(&s.ack_out) {
                    Ok(n) => {
                        s.ack_out.drain(..n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if self.shared.phase.load(Ordering::SeqCst) == PHASE_EXIT => {
                        tracing::debug!("pipestream server: {e} at exit");
                        break;
                    }
                    Err(e) => return Err(io_err(format!("acknowledging client {}", s.client))(e)),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(mode: Mode, clients: u32, servers: u32) -> Assignment {
        Assignment {
            session: 7,
            mode,
            clients,
            servers,
            message_bytes: 3000,
            buffer_bytes: 256 << 10,
            burst: 4,
            threads: 2,
            affinity: Vec::new(),
            policy: Policy::BestEffort,
            fair_window: 2,
            checksum: true,
            client: None,
            server: None,
            transport: Transport::Tcp,
            ucx_transports: None,
        }
    }

    /// Runs a topology of `instances` for a moment, over TCP or UCX as they say; the figures of
    /// each.
    fn run(instances: Vec<Assignment>) -> Vec<Figures> {
        let mut engines: Vec<Engine> = instances.into_iter().map(|a| Engine::configure(a).unwrap()).collect();
        let servers: Vec<SocketAddr> = engines.iter().filter_map(Engine::data_address).collect();
        let ucx_servers: Vec<Vec<Vec<u8>>> = engines
            .iter()
            .filter(|e| e.assignment().server.is_some())
            .map(Engine::ucx_addresses)
            .filter(|a| !a.is_empty())
            .collect();
        std::thread::scope(|scope| {
            for e in &mut engines {
                let (servers, ucx_servers) = (servers.clone(), ucx_servers.clone());
                scope.spawn(move || e.connect_over(&servers, &ucx_servers, Duration::from_secs(10)).unwrap());
            }
        });
        engines.iter().for_each(Engine::start);
        std::thread::sleep(Duration::from_millis(300));
        for e in &engines {
            e.stop(Duration::from_secs(10)).unwrap();
        }
        for e in &engines {
            assert_eq!(e.error(), None);
        }
        engines.iter().map(|e| e.counters().figures()).collect()
    }

    fn server(index: u32) -> Option<ServerPart> {
        Some(ServerPart { index, listen: "127.0.0.1:0".into(), client_hosts: vec!["127.0.0.1".into()] })
    }

    #[test]
    fn a_2x2_moves_messages_and_every_one_sent_is_received_once_and_sound() {
        for (policy, mode) in [
            (Policy::BestEffort, Mode::Pipestream),
            (Policy::Fair, Mode::Pipestream),
            (Policy::BestEffort, Mode::RawTcp),
        ] {
            let mut instances = Vec::new();
            for i in 0..2 {
                instances.push(Assignment { client: Some(i), policy, ..assignment(mode, 2, 2) });
            }
            for j in 0..2 {
                instances.push(Assignment { server: server(j), policy, ..assignment(mode, 2, 2) });
            }
            let f = run(instances);
            let sent: u64 = f.iter().map(|f| f.messages_sent).sum();
            let completed: u64 = f.iter().map(|f| f.messages_completed).sum();
            let received: u64 = f.iter().map(|f| f.messages_received).sum();
            let bytes: u64 = f.iter().map(|f| f.bytes_received).sum();
            assert!(sent > 100, "{policy:?} {mode:?}: {f:?}");
            assert_eq!((sent, completed), (received, received), "{policy:?} {mode:?}: {f:?}");
            assert_eq!(bytes, received * 3000);
            assert_eq!(f.iter().map(Figures::errors).sum::<u64>(), 0);
        }
    }

    #[test]
    fn a_folded_2x2_runs_in_two_instances() {
        let instances = (0..2)
            .map(|i| Assignment { client: Some(i), server: server(i), ..assignment(Mode::Pipestream, 2, 2) })
            .collect();
        let f = run(instances);
        assert!(f.iter().all(|f| f.messages_received > 10 && f.messages_sent > 10), "{f:?}");
        assert_eq!(f.iter().map(|f| f.messages_sent).sum::<u64>(), f.iter().map(|f| f.messages_received).sum::<u64>());
    }

    #[cfg(feature = "ucx")]
    #[test]
    fn a_2x2_over_ucx_tcp_and_shared_memory_moves_every_message_once_and_sound() {
        for transports in ["tcp", "sm,self"] {
            for folded in [false, true] {
                let ucx = |a: Assignment| Assignment {
                    transport: Transport::Ucx,
                    ucx_transports: Some(transports.into()),
                    ..a
                };
                let instances: Vec<Assignment> = if folded {
                    (0..2)
                        .map(|i| {
                            ucx(Assignment { client: Some(i), server: server(i), ..assignment(Mode::Pipestream, 2, 2) })
                        })
                        .collect()
                } else {
                    (0..2)
                        .map(|i| ucx(Assignment { client: Some(i), ..assignment(Mode::Pipestream, 2, 2) }))
                        .chain(
                            (0..2).map(|j| ucx(Assignment { server: server(j), ..assignment(Mode::Pipestream, 2, 2) })),
                        )
                        .collect()
                };
                let f = run(instances);
                let sent: u64 = f.iter().map(|f| f.messages_sent).sum();
                let received: u64 = f.iter().map(|f| f.messages_received).sum();
                assert!(sent > 100, "{transports} folded {folded}: {f:?}");
                assert_eq!(sent, received, "{transports} folded {folded}: {f:?}");
                assert_eq!(f.iter().map(|f| f.messages_completed).sum::<u64>(), received);
                assert_eq!(f.iter().map(|f| f.bytes_received).sum::<u64>(), received * 3000);
                assert_eq!(f.iter().map(Figures::errors).sum::<u64>(), 0, "{transports}: {f:?}");
            }
        }
    }

    #[test]
    fn an_assignment_out_of_bounds_is_refused_naming_the_key() {
        for (a, key) in [
            (Assignment { threads: 0, ..assignment(Mode::Pipestream, 1, 1) }, "threads 0"),
            (Assignment { burst: 1 << 20, ..assignment(Mode::Pipestream, 1, 1) }, "burst 1048576"),
            (Assignment { client: Some(1), ..assignment(Mode::Pipestream, 1, 1) }, "beyond the topology"),
        ] {
            let e = Engine::configure(a).err().unwrap().to_string();
            assert!(e.contains(key), "{e}");
        }
    }

    #[test]
    fn a_caller_with_a_wrong_session_is_refused_and_counted_and_the_server_waits_on() {
        let mut server =
            Engine::configure(Assignment { server: server(0), ..assignment(Mode::Pipestream, 1, 1) }).unwrap();
        let addr = server.data_address().unwrap();
        let counters = server.counters();
        let waiting = std::thread::spawn(move || server.connect(&[], Duration::from_millis(800)).map(|()| server));
        let mut stranger = std::net::TcpStream::connect(addr).unwrap();
        stranger.write_all(&Header::hello(0, 8).encode()).unwrap();
        let mut garbage = std::net::TcpStream::connect(addr).unwrap();
        garbage.write_all(&[0x55; HEADER_BYTES]).unwrap();
        let e = waiting.join().unwrap().err().unwrap();
        assert!(e.to_string().contains("clients [0] did not connect in time"), "{e}");
        assert_eq!(counters.figures().refused, 2);
    }
}
