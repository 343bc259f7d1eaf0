//! The client side of an instance: it calls every server and says hello, and its threads queue
//! the messages its sender allows, write them vectored (header and the one payload, many a
//! call) and read the servers' acknowledgements; raw, they write payload bytes only.

use super::sockets::socket_for;
use super::worker::{Numbered, Worker};
use super::{Assignment, EngineError, Mode, io_err};
use crate::core::{AckReader, message_checksum};
use crate::wire::{HEADER_BYTES, Header};
use mio::net::TcpStream;
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Most slices one vectored write takes.
const MAX_SLICES: usize = 512;

/// Calls every server (`servers[j]`, in order) as client `client` of `a`, by `deadline`, and
/// says hello on each; the connections, by server.
pub(super) fn call_servers(
    a: &Assignment,
    client: u32,
    servers: &[SocketAddr],
    deadline: Instant,
) -> Result<Vec<Numbered>, EngineError> {
    let mut conns = Vec::new();
    for (j, &addr) in servers.iter().enumerate() {
        let socket = socket_for(addr, a.buffer_bytes)?;
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        socket.connect_timeout(&addr.into(), left).map_err(io_err(format!("connecting to server {j} at {addr}")))?;
        socket.set_tcp_nodelay(true).map_err(io_err("setting TCP_NODELAY"))?;
        let mut stream: std::net::TcpStream = socket.into();
        stream
            .write_all(&Header::hello(client, a.session).encode())
            .map_err(io_err(format!("saying hello to server {j} at {addr}")))?;
        stream.set_nonblocking(true).map_err(io_err("setting a connection non-blocking"))?;
        conns.push((j, stream));
    }
    Ok(conns)
}

/// A client's connection to one server.
pub(super) struct ClientConn {
    stream: TcpStream,
    server: usize,
    /// Headers of the messages queued and not yet written whole (pipestream).
    pub(super) queue: VecDeque<[u8; HEADER_BYTES]>,
    /// Bytes of the front message (header and payload) written so far; raw: of the current
    /// chunk.
    pub(super) offset: usize,
    pub(super) blocked: bool,
    acks: AckReader,
}

impl ClientConn {
    /// The connection `stream` to server `server`, nothing queued.
    pub(super) fn new(stream: TcpStream, server: usize) -> ClientConn {
        ClientConn { stream, server, queue: VecDeque::new(), offset: 0, blocked: false, acks: AckReader::default() }
    }
}

impl Worker {
    /// Queues what the sender allows and writes every connection's queue.
    pub(super) fn send_messages(&mut self, may_start: bool) -> Result<(), EngineError> {
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
    pub(super) fn send_raw(&mut self, may_start: bool) -> Result<(), EngineError> {
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
    pub(super) fn read_clients(&mut self) -> Result<(), EngineError> {
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
}
