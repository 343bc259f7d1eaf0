//! pipestream's messages over UCX active messages (the feature `ucx`): the same cores, the same
//! frames, the same phases and counters as over TCP; only the bytes move otherwise.
//!
//! Each thread of an instance owns a UCX context and worker (UCX runs one thread per worker),
//! made when the instance is configured, so that a server's worker addresses (one per thread)
//! can be handed to the clients through the driver before anything connects. A connection is a
//! pair of endpoints: the client's to the server thread that serves it (client i goes to thread
//! i mod threads), and the server's back to the client thread, made from the address the
//! client's hello carries, for the acknowledgements. Every message is one active message: an
//! AM header naming the client (or, for an acknowledgement, the server), and as data the frame
//! of [`crate::wire`], header and payload, the payload sent from memory mapped for UCX.

use super::{Assignment, EngineError, PHASE_EXIT, PHASE_RUNNING, PHASE_STOPPING, POLL_WAIT, Shared, payload};
use crate::core::{AckReader, Receiver, Sender, message_checksum};
use crate::wire::{HEADER_BYTES, Header};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_formats::crc::crc32c;
use tessera_ucx::{Context, ErrorHandling, Event, MappedSlice, MemRegion, Worker, WorkerAddress};

/// Active-message ids.
const AM_HELLO: u16 = 1;
const AM_MESSAGE: u16 = 2;
const AM_ACK: u16 = 3;

/// What a thread is told to connect: its client's connections (server index, address of the
/// server thread that serves this client), and the clients its server part serves.
struct ConnectOrder {
    client_conns: Vec<(usize, Vec<u8>)>,
    server_clients: Vec<usize>,
    deadline: Instant,
}

/// The UCX threads of an instance, made at configure.
pub(super) struct UcxThreads {
    /// Each thread's worker address.
    pub addresses: Vec<Vec<u8>>,
    orders: Vec<mpsc::Sender<ConnectOrder>>,
    connected: mpsc::Receiver<Result<(), EngineError>>,
    pub threads: Vec<JoinHandle<()>>,
}

/// A piece of a message: the frame's header, or the payload from mapped memory.
enum Piece {
    Header([u8; HEADER_BYTES]),
    Payload(MappedSlice),
}

impl AsRef<[u8]> for Piece {
    fn as_ref(&self) -> &[u8] {
        match self {
            Piece::Header(h) => h,
            Piece::Payload(p) => p.as_ref(),
        }
    }
}

fn failed(e: impl std::fmt::Display) -> EngineError {
    EngineError::Assignment(format!("UCX: {e}"))
}

impl UcxThreads {
    /// Starts the threads of `a`, each making its context and worker; waits (bounded) for
    /// their addresses.
    pub fn start(a: &Assignment, shared: &Arc<Shared>) -> Result<UcxThreads, EngineError> {
        let (address_tx, address_rx) = mpsc::channel();
        let (connected_tx, connected) = mpsc::channel();
        let mut orders = Vec::new();
        let mut threads = Vec::new();
        for t in 0..a.threads as usize {
            let (order_tx, order_rx) = mpsc::channel();
            orders.push(order_tx);
            let (a, shared) = (a.clone(), shared.clone());
            let (address_tx, connected_tx) = (address_tx.clone(), connected_tx.clone());
            let core = (!a.affinity.is_empty()).then(|| a.affinity[t % a.affinity.len()]);
            let thread = std::thread::Builder::new()
                .name(format!("pipestream-ucx-{t}"))
                .spawn(move || {
                    if let Some(id) = core {
                        let _ = core_affinity::set_for_current(core_affinity::CoreId { id });
                    }
                    let worker = match UcxWorker::new(&a, t, shared.clone()) {
                        Ok(w) => w,
                        Err(e) => {
                            let _ = address_tx.send((t, Err(e)));
                            return;
                        }
                    };
                    let _ = address_tx.send((t, Ok(worker.worker.address().as_bytes().to_vec())));
                    drop(address_tx);
                    let Ok(order) = order_rx.recv() else { return };
                    let mut worker = worker;
                    let result = worker.connect(order);
                    let ok = result.is_ok();
                    let _ = connected_tx.send(result);
                    if ok && let Err(e) = worker.run() {
                        worker.shared.fail(format!("UCX thread {t}: {e}"));
                    }
                })
                .map_err(|e| failed(format!("starting a thread: {e}")))?;
            threads.push(thread);
        }
        drop(address_tx);
        let mut addresses = vec![Vec::new(); a.threads as usize];
        for _ in 0..a.threads {
            match address_rx.recv_timeout(Duration::from_secs(10)) {
                Ok((t, Ok(address))) => addresses[t] = address,
                Ok((_, Err(e))) => return Err(failed(e)),
                Err(_) => return Err(failed("a thread made no worker within 10 s")),
            }
        }
        Ok(UcxThreads { addresses, orders, connected, threads })
    }

    /// Connects: this instance's client to every server (`servers[j]`: server j's thread
    /// addresses), its server to its clients; waits until every thread says it is connected.
    pub fn connect(&self, a: &Assignment, servers: &[Vec<Vec<u8>>], timeout: Duration) -> Result<(), EngineError> {
        let deadline = Instant::now() + timeout;
        let threads = self.orders.len();
        let mut per_thread: Vec<ConnectOrder> = (0..threads)
            .map(|_| ConnectOrder { client_conns: Vec::new(), server_clients: Vec::new(), deadline })
            .collect();
        if let Some(client) = a.client {
            if servers.len() != a.servers as usize {
                return Err(failed(format!("{} servers' addresses for {} servers", servers.len(), a.servers)));
            }
            for (j, addresses) in servers.iter().enumerate() {
                if addresses.is_empty() {
                    return Err(failed(format!("server {j} gave no worker address")));
                }
                let address = addresses[client as usize % addresses.len()].clone();
                per_thread[j % threads].client_conns.push((j, address));
            }
        }
        if a.server.is_some() {
            for i in 0..a.clients as usize {
                per_thread[i % threads].server_clients.push(i);
            }
        }
        for (order, tx) in per_thread.into_iter().zip(&self.orders) {
            tx.send(order).map_err(|_| failed("a thread has ended"))?;
        }
        for _ in 0..threads {
            let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1);
            match self.connected.recv_timeout(left) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(failed(e)),
                Err(_) => return Err(EngineError::Timeout("UCX: the connections were not made in time".into())),
            }
        }
        Ok(())
    }
}

/// A client's connection to one server over UCX.
struct ClientConn {
    server: usize,
    endpoint: tessera_ucx::Endpoint,
    acks: AckReader,
}

/// A server's connection from one client over UCX.
struct ServerConn {
    endpoint: tessera_ucx::Endpoint,
    receiver: Receiver,
}

/// One thread: its worker and its share of the connections.
struct UcxWorker {
    worker: Worker,
    error_handling: ErrorHandling,
    thread: usize,
    session: u64,
    client: Option<u32>,
    server: Option<u32>,
    message_bytes: u32,
    checksum: bool,
    payload: Rc<MemRegion>,
    payload_crc: u32,
    clients: Vec<ClientConn>,
    /// By client index.
    servers: BTreeMap<usize, ServerConn>,
    sender: Sender,
    policy: (crate::config::Policy, u32, u32),
    shared: Arc<Shared>,
    completed_said: u64,
    drained_said: bool,
}

impl UcxWorker {
    fn new(a: &Assignment, thread: usize, shared: Arc<Shared>) -> Result<UcxWorker, EngineError> {
        let context = Context::new(a.ucx_transports.as_deref()).map_err(failed)?;
        let worker = Worker::new(&context).map_err(failed)?;
        let body = payload(a.message_bytes);
        let payload_crc = crc32c(&body);
        let payload = Rc::new(MemRegion::new(&context, body).map_err(failed)?);
        // Shared memory alone cannot tell when a peer goes (UCX 1.13): no error handling then.
        let error_handling = match a.ucx_transports.as_deref() {
            Some(t) if !t.split(',').any(|t| t.trim() == "tcp" || t.trim() == "all") => ErrorHandling::None,
            _ => ErrorHandling::Peer,
        };
        for am in [AM_HELLO, AM_MESSAGE, AM_ACK] {
            worker.set_am_handler(am, |_, length| Vec::with_capacity(length)).map_err(failed)?;
        }
        Ok(UcxWorker {
            worker,
            error_handling,
            thread,
            session: a.session,
            client: a.client,
            server: a.server.as_ref().map(|s| s.index),
            message_bytes: a.message_bytes,
            checksum: a.checksum,
            payload,
            payload_crc,
            clients: Vec::new(),
            servers: BTreeMap::new(),
            sender: Sender::new(0, a.policy, a.burst, a.fair_window),
            policy: (a.policy, a.burst, a.fair_window),
            shared,
            completed_said: 0,
            drained_said: false,
        })
    }

    /// Says hello to this thread's servers, and waits for the hellos of its clients.
    fn connect(&mut self, order: ConnectOrder) -> Result<(), EngineError> {
        let client = self.client.unwrap_or(0);
        for (server, address) in order.client_conns {
            // SAFETY: the address is what a server instance of this scan point gave as its
            // worker's (`ucp_worker_get_address`), passed on unchanged by the driver, which
            // reached the instance over loopback or through an agent under its token.
            #[allow(unsafe_code)]
            let address = unsafe { WorkerAddress::from_bytes_unchecked(address) };
            let endpoint = self.worker.connect(&address, self.error_handling).map_err(failed)?;
            let mut hello = client.to_le_bytes().to_vec();
            hello.extend_from_slice(&self.session.to_le_bytes());
            drop(endpoint.send(AM_HELLO, &hello, vec![self.worker.address().as_bytes().to_vec()]));
            self.clients.push(ClientConn { server, endpoint, acks: AckReader::default() });
        }
        let (policy, burst, window) = self.policy;
        self.sender = Sender::new(self.clients.len(), policy, burst, window);
        self.sender.start_at(client as usize);
        let expected = order.server_clients;
        while self.servers.len() < expected.len() {
            if Instant::now() >= order.deadline {
                let missing: Vec<&usize> = expected.iter().filter(|i| !self.servers.contains_key(i)).collect();
                return Err(EngineError::Timeout(format!(
                    "UCX: clients {missing:?} said no hello to thread {} in time",
                    self.thread
                )));
            }
            self.worker.wait(POLL_WAIT).map_err(failed)?;
            while let Some(event) = self.worker.next_event() {
                self.on_event(event)?;
            }
        }
        Ok(())
    }

    fn on_event(&mut self, event: Event) -> Result<(), EngineError> {
        match event {
            Event::Received(m) if m.am_id == AM_HELLO => {
                let (Some(i), Some(session)) = (le_u32(&m.header, 0), le_u64(&m.header, 4)) else {
                    self.shared.counters.refused.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                };
                if session != self.session || self.server.is_none() || self.servers.contains_key(&(i as usize)) {
                    self.shared.counters.refused.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                // SAFETY: the bytes are the client worker's address as it sent them in a hello
                // of this session, over a UCX connection a client of the point made.
                #[allow(unsafe_code)]
                let address = unsafe { WorkerAddress::from_bytes_unchecked(m.data) };
                let endpoint = self.worker.connect(&address, self.error_handling).map_err(failed)?;
                self.servers.insert(i as usize, ServerConn { endpoint, receiver: Receiver::new(self.message_bytes) });
            }
            Event::Received(m) if m.am_id == AM_MESSAGE => {
                let i = le_u32(&m.header, 0).unwrap_or(u32::MAX) as usize;
                let Some(s) = self.servers.get_mut(&i) else {
                    return Err(failed(format!("a message from client {i}, which said no hello")));
                };
                let (before, bytes, errors) = (s.receiver.received(), s.receiver.bytes(), s.receiver.errors());
                s.receiver.feed(&m.data).map_err(|e| failed(format!("client {i}: {e}")))?;
                let c = &self.shared.counters;
                c.messages_received.fetch_add(s.receiver.received() - before, Ordering::Relaxed);
                c.bytes_received.fetch_add(s.receiver.bytes() - bytes, Ordering::Relaxed);
                let now = s.receiver.errors();
                c.lost.fetch_add(now.lost - errors.lost, Ordering::Relaxed);
                c.out_of_order.fetch_add(now.out_of_order - errors.out_of_order, Ordering::Relaxed);
                c.corrupt.fetch_add(now.corrupt - errors.corrupt, Ordering::Relaxed);
                self.shared.from_client[i].store(s.receiver.received(), Ordering::Relaxed);
            }
            Event::Received(m) if m.am_id == AM_ACK => {
                let j = le_u32(&m.header, 0).unwrap_or(u32::MAX) as usize;
                let Some(k) = self.clients.iter().position(|c| c.server == j) else {
                    return Err(failed(format!("an acknowledgement from server {j}, not one of this thread's")));
                };
                let sender = &mut self.sender;
                let mut bad = None;
                self.clients[k]
                    .acks
                    .feed(&m.data, |received, floor| {
                        if let Err(e) = sender.on_ack(k, received, floor) {
                            bad.get_or_insert(e);
                        }
                    })
                    .map_err(|e| failed(format!("server {j}: {e}")))?;
                if let Some(e) = bad {
                    return Err(failed(format!("server {j}: {e}")));
                }
            }
            Event::Received(m) => return Err(failed(format!("an active message of unknown id {}", m.am_id))),
            Event::Sent { result: Err(status), .. } => return Err(failed(format!("a send failed: {}", status.text()))),
            Event::Sent { .. } => {}
            Event::ReceiveFailed { status, .. } => {
                return Err(failed(format!("receiving a message failed: {}", status.text())));
            }
            Event::EndpointFailed { status, .. } => {
                // A peer leaving once its point is over is not an error.
                if self.shared.phase.load(Ordering::SeqCst) == PHASE_RUNNING {
                    return Err(failed(format!("a peer's endpoint failed: {}", status.text())));
                }
            }
            Event::Fault(e) => return Err(failed(e)),
        }
        Ok(())
    }

    fn run(&mut self) -> Result<(), EngineError> {
        loop {
            let phase = self.shared.phase_for(&mut self.sender);
            if phase == PHASE_EXIT {
                return Ok(());
            }
            let mut busy = false;
            if phase == PHASE_RUNNING {
                while let Some((k, seq)) = self.sender.next(|_| true) {
                    let crc = self.checksum.then(|| message_checksum(seq, self.payload_crc, self.message_bytes));
                    let header = Header::message(seq, self.message_bytes, crc).encode();
                    let body = Piece::Payload(self.payload.slice(0..self.message_bytes as usize));
                    let client = self.client.unwrap_or(0).to_le_bytes();
                    // The token is dropped: the worker keeps the pieces until the send is done,
                    // and its Sent event says how it ended.
                    drop(self.clients[k].endpoint.send(AM_MESSAGE, &client, vec![Piece::Header(header), body]));
                    self.shared.counters.messages_sent.fetch_add(1, Ordering::Relaxed);
                    busy = true;
                }
            }
            while self.worker.progress() > 0 {
                busy = true;
            }
            while let Some(event) = self.worker.next_event() {
                busy = true;
                self.on_event(event)?;
            }
            let completed = self.sender.completed();
            self.shared.counters.messages_completed.fetch_add(completed - self.completed_said, Ordering::Relaxed);
            self.completed_said = completed;
            self.acknowledge();
            if phase == PHASE_STOPPING && !self.drained_said && self.sender.drained() {
                self.drained_said = true;
                self.shared.drained.fetch_add(1, Ordering::SeqCst);
            }
            if !busy {
                self.worker.wait(POLL_WAIT).map_err(failed)?;
            }
        }
    }

    /// Sends the acknowledgements that say something new.
    fn acknowledge(&mut self) {
        let floor = self.shared.floor();
        let server = self.server.unwrap_or(0).to_le_bytes();
        for s in self.servers.values_mut() {
            if let Some(ack) = s.receiver.ack(floor) {
                drop(s.endpoint.send(AM_ACK, &server, vec![ack.encode()]));
            }
        }
    }
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}
