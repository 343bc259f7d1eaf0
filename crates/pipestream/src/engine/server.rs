//! The server side of an instance: its listener, the acceptor that takes one connection from
//! each client and checks its hello (the session must be this point's, the address one of the
//! clients' hosts), and a thread's reading of its clients' messages and acknowledging them.

use super::sockets::{resolve, socket_for};
use super::worker::{Numbered, Worker};
use super::{Assignment, Counters, EngineError, Mode, PHASE_EXIT, ServerPart, io_err};
use crate::core::{Errors, Receiver};
use crate::wire::{HEADER_BYTES, Header, Kind};
use mio::net::TcpStream;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most bytes read from one connection before a thread turns to its others.
const READ_TURN_BYTES: usize = 4 << 20;

/// Binds `part`'s listener, non-blocking, with `buffer_bytes` socket buffers (which accepted
/// connections inherit); the listener and the address it is bound to.
pub(super) fn listen(part: &ServerPart, buffer_bytes: u32) -> Result<(TcpListener, SocketAddr), EngineError> {
    let addr = resolve(&part.listen)?;
    let socket = socket_for(addr, buffer_bytes)?;
    socket.set_reuse_address(true).map_err(io_err("setting SO_REUSEADDR"))?;
    socket.bind(&addr.into()).map_err(io_err(format!("binding {addr}")))?;
    socket.listen(1024).map_err(io_err(format!("listening on {addr}")))?;
    let listener: TcpListener = socket.into();
    listener.set_nonblocking(true).map_err(io_err("setting the listener non-blocking"))?;
    let bound = listener.local_addr().map_err(io_err("reading the listener's address"))?;
    Ok((listener, bound))
}

/// Starts accepting `a`'s clients on `listener` on a thread of its own, so that this instance's
/// client can call the servers meanwhile; the thread gives the connections, by client.
pub(super) fn start_acceptor(
    listener: TcpListener,
    a: &Assignment,
    part: &ServerPart,
    counters: Arc<Counters>,
    deadline: Instant,
) -> Result<JoinHandle<Result<Vec<Numbered>, EngineError>>, EngineError> {
    let allowed = allowed_ips(&part.client_hosts)?;
    let a = a.clone();
    std::thread::Builder::new()
        .name("pipestream-accept".into())
        .spawn(move || accept_clients(&listener, &a, &allowed, &counters, deadline))
        .map_err(io_err("starting the acceptor"))
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

/// A server's connection from one client.
pub(super) struct ServerConn {
    stream: TcpStream,
    client: usize,
    receiver: Receiver,
    /// Raw: payload bytes received.
    raw_bytes: u64,
    /// Acknowledgement bytes not yet written (a partial frame first, then at most one whole).
    ack_out: Vec<u8>,
    open: bool,
}

impl ServerConn {
    /// The connection `stream` from client `client`, whose messages carry `message_bytes`.
    pub(super) fn new(stream: TcpStream, client: usize, message_bytes: u32) -> ServerConn {
        ServerConn {
            stream,
            client,
            receiver: Receiver::new(message_bytes),
            raw_bytes: 0,
            ack_out: Vec::new(),
            open: true,
        }
    }
}

impl Worker {
    /// Reads every server connection, a bounded turn each.
    pub(super) fn read_servers(&mut self) -> Result<(), EngineError> {
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
    pub(super) fn write_acks(&mut self) -> Result<(), EngineError> {
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
