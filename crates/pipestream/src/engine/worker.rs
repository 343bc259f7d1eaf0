//! An instance's threads: its connections dealt to them in turn, each thread a `mio` loop over
//! its share that sends ([`super::client`]), reads and acknowledges ([`super::server`]) as its
//! phase allows, and says when it has drained.

use super::client::ClientConn;
use super::server::ServerConn;
use super::{
    Assignment, EngineError, Mode, PHASE_EXIT, PHASE_RUNNING, PHASE_STOPPING, POLL_WAIT, Shared, io_err, payload,
};
use crate::core::Sender;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;
use tessera_formats::crc::crc32c;

/// Largest read a thread makes: its one receive buffer.
const MAX_READ_BYTES: usize = 4 << 20;
/// The first poll token of a thread's server connections (its client connections' come first).
const SERVER_TOKENS: usize = 1 << 20;

/// A connection and the index of the peer at its other end.
pub(super) type Numbered = (usize, std::net::TcpStream);

/// Deals the connections to `a`'s threads in turn and starts them, idle until their phase says
/// run; each handle goes into `threads` as its thread starts, so that those started before an
/// error are joined with the engine.
pub(super) fn start_workers(
    a: &Assignment,
    shared: &Arc<Shared>,
    client_conns: Vec<Numbered>,
    server_conns: Vec<Numbered>,
    threads: &mut Vec<JoinHandle<()>>,
) -> Result<(), EngineError> {
    let count = a.threads as usize;
    let payload = Arc::new(payload(a.message_bytes));
    let payload_crc = crc32c(&payload);
    let mut shares: Vec<(Vec<Numbered>, Vec<Numbered>)> = (0..count).map(|_| (Vec::new(), Vec::new())).collect();
    for (k, c) in client_conns.into_iter().enumerate() {
        shares[k % count].0.push(c);
    }
    for (k, c) in server_conns.into_iter().enumerate() {
        shares[k % count].1.push(c);
    }
    for (t, (clients, servers)) in shares.into_iter().enumerate() {
        let core = (!a.affinity.is_empty()).then(|| a.affinity[t % a.affinity.len()]);
        let mut worker = Worker::new(a, clients, servers, payload.clone(), payload_crc, shared.clone())?;
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
        threads.push(thread);
    }
    Ok(())
}

/// One thread's share of the connections.
pub(super) struct Worker {
    pub(super) mode: Mode,
    pub(super) message_bytes: usize,
    /// Messages in flight per connection; raw: messages per write.
    pub(super) burst: usize,
    pub(super) checksum: bool,
    pub(super) payload: Arc<Vec<u8>>,
    pub(super) payload_crc: u32,
    pub(super) clients: Vec<ClientConn>,
    pub(super) servers: Vec<ServerConn>,
    pub(super) sender: Sender,
    pub(super) read_buffer: Vec<u8>,
    poll: Poll,
    pub(super) shared: Arc<Shared>,
    pub(super) completed_said: u64,
    /// The client has messages under way: a server closing now is an error.
    pub(super) sending: bool,
    /// This thread has said it drained.
    drained_said: bool,
}

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
            client_conns.push(ClientConn::new(stream, server));
        }
        let mut server_conns = Vec::new();
        for (k, (client, s)) in servers.into_iter().enumerate() {
            let mut stream = TcpStream::from_std(s);
            poll.registry()
                .register(&mut stream, Token(SERVER_TOKENS + k), Interest::READABLE | Interest::WRITABLE)
                .map_err(io_err("registering a connection"))?;
            server_conns.push(ServerConn::new(stream, client, a.message_bytes));
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
}
