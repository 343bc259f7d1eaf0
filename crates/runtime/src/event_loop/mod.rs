//! The event loop every unit runs on: one thread, one poller, one fixed order of steps.
//!
//! An RU, the EVM's node and a BU each run their protocol core on one thread that moves bytes
//! between sockets and the core, and time from the clock to the core. The machinery of that
//! thread is the same for all of them, and is written once here so that it cannot drift between
//! nodes: [`EventLoop`] owns the poller and its events buffer, the unit's clock, its protocol
//! connections (each a [`Conn`], opened with the link of [`crate::link`]), the listeners that
//! take protocol connections, the run-control handle ([`Control`]) and the CPU sampler; [`run`]
//! takes a [`Unit`] through the loop's steps, in this order, on every pass:
//!
//! 1. run control's abort ends the unit, with what it still held ([`Unit::aborted`]);
//! 2. the unit's own work before the clock is read ([`Unit::prepare`]): run control's stop of
//!    the trigger at the EVM's node, the RAM disk's room and the throttle at a BU;
//! 3. the core's time-out, once due, ticks the core ([`Unit::tick`]);
//! 4. the unit's step ([`Unit::step`]): the core's outputs carried out, the results of the
//!    unit's own threads taken, the unit's own inputs read (an RU's FEROL streams);
//! 5. every readable protocol connection is read ([`Unit::read_conn`]) while the unit has room
//!    for what it brings ([`Unit::may_read`]);
//! 6. connections whose link opening is overdue are closed ([`Unit::close_conn`]);
//! 7. what the reads brought is carried out ([`Unit::settle`]);
//! 8. the connections are flushed, never blocking ([`Unit::flush_conns`]);
//! 9. the unit's live figures are published ([`Unit::publish_stats`]) and its CPU sampled;
//! 10. the unit says whether it has ended ([`Unit::done`]);
//! 11. the poller waits: not at all when an input has more to give, else until the core's next
//!     time-out, at most [`MAX_SLEEP`] (or less, [`Unit::max_wait`]);
//! 12. each event marks its connection readable, has a protocol listener accept its callers, or
//!     goes to the unit ([`Unit::on_event`]).
//!
//! The sans-IO split holds: every protocol decision is the core's (in `tessera-evb`), which the
//! unit drives; the loop only moves bytes and time. A new kind of node (an orbit builder, a node
//! of a push protocol) is one more [`Unit`].
//!
//! Links that travel on UCX ([`crate::transport`]) add one source, the UCX worker's event file
//! descriptor ([`FABRIC`]): each pass pumps the worker before the connections are read (frames
//! that came go to their connection's inbox, finished sends free their queued bytes, a failed
//! endpoint fails its connection), and the poller sleeps only once UCX says it has nothing left.
//!
//! Tokens: [`WAKER`] is the waker's; protocol listeners take tokens from 1, [`FABRIC`] is UCX's, a
//! unit's own sources (its listeners and streams) from [`UNIT_TOKENS`], protocol connections from
//! [`CONN_TOKENS`].

use crate::conn::{Conn, ConnError, LinkSide, PieceSource, ReadPass, ReceivedFrame};
use crate::error::NodeError;
use crate::state::Transition;
use crate::stats::{CpuSampler, UnitStats};
use crate::transport::{Arrival, CLOSE_TIMEOUT, Fabric};
use mio::event::Event;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Registry, Token};
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_evb::msg::FragmentRef;
use tessera_evb::spare::Spare;
use tessera_evb::types::{Nanos, Peer};
use tessera_evb::wire::Decoded;

mod control;
pub use control::Control;
pub(crate) use control::poller;

#[cfg(test)]
mod tests;

/// The poller's waker: run control and the unit's own threads wake the loop with it.
pub(crate) const WAKER: Token = Token(0);
/// The first token of a unit's own sources; protocol listeners and [`FABRIC`] are below it.
pub(crate) const UNIT_TOKENS: usize = 1 << 8;
/// The UCX worker's event file descriptor, when the unit's links travel on UCX.
pub(crate) const FABRIC: Token = Token(UNIT_TOKENS - 1);
/// The first token of the protocol connections; a unit's own sources are below it.
pub(crate) const CONN_TOKENS: usize = 1 << 20;
/// Longest the loop sleeps without looking at the clock.
pub(crate) const MAX_SLEEP: Duration = Duration::from_millis(10);

/// `what` failed: the error a node reports for a socket it could not set up.
pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> NodeError {
    let what = what.into();
    move |source| NodeError::Io { what, source }
}

/// Pins the calling thread (a unit's loop) to `core`, if asked; a core that cannot be had is
/// reported and the unit runs unpinned.
pub(crate) fn pin_to(core: Option<usize>, stats: &UnitStats, unit: &str) {
    // The kernel's CPU sets hold 1024 cores; the crate asserts on more rather than failing.
    if let Some(id) = core
        && (id >= 1024 || !core_affinity::set_for_current(core_affinity::CoreId { id }))
    {
        stats.problem(format!("{unit}: could not pin its loop to CPU core {id}; it runs unpinned"));
    }
}

/// Says how a unit's run ended where run control looks: cleanly, or failed (the error said
/// before the state says Failed). `failed_after_drain`: it ended, but the run failed (a broken
/// trigger stream).
pub(crate) fn say_end<R>(stats: &UnitStats, result: &Result<R, NodeError>, failed_after_drain: bool) {
    match result {
        Ok(_) if failed_after_drain => stats.end_failed_after_drain(),
        Ok(_) => stats.end_cleanly(),
        Err(e) => {
            stats.problem(e.to_string());
            stats.set_failed()
        }
    }
}

/// How a unit's protocol connections open and whom they admit.
#[derive(Debug)]
pub(crate) struct Links {
    /// Who the unit is, its run and the run's link key.
    pub side: LinkSide,
    /// Largest protocol frame accepted, in bytes.
    pub max_frame_bytes: u32,
    /// How long a peer may take to be reached at start-up, and a link to open.
    pub connect_timeout: Duration,
    /// The addresses protocol peers may call from; `None` admits any.
    pub allowed_peers: Option<Vec<IpAddr>>,
}

/// Most callers a unit holds on its protocol ports that have yet to open their link: many more
/// than the peers that open theirs at a run's start, few enough that callers who say nothing
/// cannot take the file descriptors the unit needs for its files and links.
pub const MAX_OPENINGS: usize = 512;

/// The most UCX messages for no connection of the unit (and UCX faults) said one by one; later
/// ones are counted.
const STRAYS_SAID: u64 = 3;

/// What the loop asks of the unit it runs: its core, its own inputs and outputs, and its end.
/// The loop calls these in the order the module docs give, once a pass.
pub(crate) trait Unit {
    /// What the unit hands back when it ends.
    type Report;
    /// The loop's shared half, which the unit holds.
    fn event_loop(&mut self) -> &mut EventLoop;
    /// The error that ends the unit when run control aborts it: what it still held.
    fn aborted(&self) -> NodeError;
    /// The unit's own work at the start of a pass, before the clock is read.
    fn prepare(&mut self) -> Result<(), NodeError> {
        Ok(())
    }
    /// When the core wants its next tick.
    fn next_timeout(&self) -> Option<Nanos>;
    /// Ticks the core at `now`.
    fn tick(&mut self, now: Nanos);
    /// Carries out the core's outputs, takes what the unit's own threads sent back and reads
    /// the unit's own inputs; true if an input has more to give now.
    fn step(&mut self, now: Nanos) -> Result<bool, NodeError>;
    /// Whether the unit has room for what another read of connection `token` may bring; while
    /// not, the loop leaves that connection unread (and the pass counts as having nothing more
    /// to read from it).
    fn may_read(&self, _token: Token) -> bool {
        true
    }
    /// Reads the readable connection `token` into the core ([`EventLoop::read`]); true if it
    /// has more to give now.
    fn read_conn(&mut self, token: Token, now: Nanos) -> Result<bool, NodeError>;
    /// The connection `token` has ended (`why`, when it was not a plain close): close it and
    /// judge what its loss means.
    fn close_conn(&mut self, token: Token, why: Option<String>) -> Result<(), NodeError>;
    /// Carries out what the reads brought, and the unit's own keeping after them.
    fn settle(&mut self) -> Result<(), NodeError>;
    /// Writes what is queued on the connections ([`EventLoop::flush`]), judging those that
    /// break.
    fn flush_conns(&mut self) -> Result<(), NodeError>;
    /// Publishes the unit's live figures.
    fn publish_stats(&mut self);
    /// Whether the unit has ended, and how: `Some` ends the loop with its report.
    fn done(&mut self) -> Result<Option<Self::Report>, NodeError>;
    /// The longest the poller may wait, when less than [`MAX_SLEEP`].
    fn max_wait(&self) -> Duration {
        MAX_SLEEP
    }
    /// An event on one of the unit's own sources (a token from [`UNIT_TOKENS`]).
    fn on_event(&mut self, _token: Token, _event: &Event) -> Result<(), NodeError> {
        Ok(())
    }
}

/// The half of the event loop every unit shares: poller, events, clock, protocol connections,
/// protocol listeners, run control and CPU sampling.
pub(crate) struct EventLoop {
    poll: Poll,
    /// Taken while the events of a poll are handed out.
    events: Option<Events>,
    start: Instant,
    /// Run control's handle on the unit.
    pub control: Control,
    /// The protocol connections, by token.
    pub conns: BTreeMap<Token, Conn>,
    next_conn: usize,
    listeners: Vec<TcpListener>,
    links: Links,
    /// When the unit was enabled: a link opening's time counts from then at the earliest.
    enabled_at: Instant,
    cpu: CpuSampler,
    stats: Arc<UnitStats>,
    /// UCX, when a class of the unit's links travels on it.
    fabric: Option<Fabric>,
    /// UCX messages that named no connection of the unit, and UCX faults.
    strays: u64,
    /// Whether a failed arm of the UCX worker was said.
    arm_failed_said: bool,
    /// The bound on link openings was reached and said, and not left since.
    openings_full_said: bool,
}

impl EventLoop {
    /// The loop of a unit with `poll` and its `control` (from [`poller`]), publishing to `stats`,
    /// taking up to `events` events a poll. Its clock starts now. Starts UCX when a class of its
    /// links travels on it: a build without UCX, or a UCX that does not start, is an error that
    /// says why.
    pub fn new(
        poll: Poll,
        control: Control,
        stats: Arc<UnitStats>,
        events: usize,
        links: Links,
    ) -> Result<Self, NodeError> {
        let transport = &links.side.transport;
        // A BU's links all lead to RUs (the EVM's node among them): only their class counts.
        let needs_ucx = match links.side.me {
            Peer::Bu(_) => transport.ru_bu == tessera_config::Transport::Ucx,
            _ => transport.uses_ucx(),
        };
        let fabric = match needs_ucx {
            true => Some(Fabric::new(transport.ucx_transports.as_deref())?),
            false => None,
        };
        if let Some(f) = &fabric {
            f.register(poll.registry(), FABRIC).map_err(io_err("watching the UCX worker"))?;
        }
        Ok(EventLoop {
            poll,
            events: Some(Events::with_capacity(events)),
            start: Instant::now(),
            control,
            conns: BTreeMap::new(),
            next_conn: CONN_TOKENS,
            listeners: Vec::new(),
            links,
            enabled_at: Instant::now(),
            cpu: CpuSampler::default(),
            stats,
            fabric,
            strays: 0,
            arm_failed_said: false,
            openings_full_said: false,
        })
    }

    /// The unit's clock: time since its loop was made.
    pub fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    /// The poller's registry, for the unit's own sources.
    pub fn registry(&self) -> &Registry {
        self.poll.registry()
    }

    /// Takes protocol connections on `listener` (`what`, for errors): each caller is challenged
    /// to prove that it is a unit of the run ([`Conn::accepted`]).
    pub fn listen(&mut self, listener: &std::net::TcpListener, what: &str) -> Result<(), NodeError> {
        let token = Token(1 + self.listeners.len());
        assert!(token.0 < FABRIC.0, "at most {} protocol listeners", FABRIC.0 - 1);
        let l = listener.try_clone().map_err(io_err(what))?;
        l.set_nonblocking(true).map_err(io_err(what))?;
        let mut l = TcpListener::from_std(l);
        self.poll.registry().register(&mut l, token, Interest::READABLE).map_err(io_err(what))?;
        self.listeners.push(l);
        Ok(())
    }

    /// Connects to `peer` at `address`, retrying until the connect time-out; gives up at once
    /// when run control aborts the unit (a unit that failed leaves its port closed: waiting for
    /// it would only delay the end of the run).
    pub fn connect(&self, address: SocketAddr, peer: Peer) -> Result<std::net::TcpStream, NodeError> {
        let timeout = self.links.connect_timeout;
        let deadline = Instant::now() + timeout;
        loop {
            if self.control.aborted() {
                return Err(NodeError::Aborted(format!("the connection to {peer} at {address}")));
            }
            match std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1)) {
                Ok(s) => {
                    s.set_nodelay(true).map_err(io_err(format!("setting TCP_NODELAY to {address}")))?;
                    s.set_nonblocking(true).map_err(io_err(format!("making {address} non-blocking")))?;
                    return Ok(s);
                }
                Err(source) if Instant::now() >= deadline => {
                    return Err(NodeError::Unreachable { peer, address, seconds: timeout.as_secs(), source });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Adds the connection this unit opened to `peer` ([`Conn::opened`]).
    pub fn open(&mut self, stream: TcpStream, peer: Peer) -> Result<Token, NodeError> {
        let token = self.next_token();
        let conn = Conn::opened(stream, token, peer, &self.links.side, self.links.max_frame_bytes);
        self.add(conn)
    }

    /// Adds a connection a caller opened to this unit ([`Conn::accepted`]).
    pub fn accept(&mut self, stream: TcpStream) -> Result<Token, NodeError> {
        let token = self.next_token();
        let conn = Conn::accepted(stream, token, &self.links.side, self.links.max_frame_bytes)
            .map_err(io_err("a challenge for a connection"))?;
        self.add(conn)
    }

    fn next_token(&mut self) -> Token {
        let token = Token(self.next_conn);
        self.next_conn += 1;
        token
    }

    fn add(&mut self, mut conn: Conn) -> Result<Token, NodeError> {
        let token = conn.token();
        conn.register(self.poll.registry()).map_err(io_err("registering a connection"))?;
        self.conns.insert(token, conn);
        Ok(token)
    }

    /// The connection to `peer`, if there is one.
    pub fn conn_to(&mut self, peer: Peer) -> Option<&mut Conn> {
        self.conns.values_mut().find(|c| c.peer == Some(peer))
    }

    /// Removes the connection `token` from the loop, and gives it back.
    pub fn close(&mut self, token: Token) -> Option<Conn> {
        let mut conn = self.conns.remove(&token)?;
        conn.deregister(self.poll.registry());
        if let Err(why) = conn.close_transport(self.fabric.as_mut(), CLOSE_TIMEOUT) {
            self.stats.problem(format!("closing the UCX link to {}: {why}", conn.address));
        }
        Some(conn)
    }

    /// Pumps UCX, if the unit's links travel on it: frames that came go to their connections,
    /// finished sends free their bytes, failures fail their connections.
    pub fn pump(&mut self) {
        let Some(fabric) = &mut self.fabric else { return };
        for arrival in fabric.pump() {
            let token = match &arrival {
                Arrival::Frame { token, .. } | Arrival::Sent { token, .. } | Arrival::Failed { token, .. } => {
                    Token(*token)
                }
                Arrival::Stray { .. } => Token(0),
            };
            let conn = self.conns.get_mut(&token);
            let mut what = "a message for a connection closed or unknown".to_owned();
            let taken = match (arrival, conn) {
                (Arrival::Frame { nonce, bytes, .. }, Some(c)) => c.arrived(nonce, bytes),
                (Arrival::Sent { result, .. }, Some(c)) => {
                    c.sent(result);
                    true
                }
                (Arrival::Failed { why, .. }, Some(c)) => {
                    c.transport_failed(why);
                    true
                }
                // Sends and failures of a connection closed already.
                (Arrival::Sent { .. } | Arrival::Failed { .. }, None) => true,
                (Arrival::Frame { .. }, _) => false,
                (Arrival::Stray { what: w }, _) => {
                    what = w;
                    false
                }
            };
            if !taken {
                self.strays += 1;
                if self.strays <= STRAYS_SAID {
                    self.stats.problem(format!("UCX: {what}, dropped ({} so far)", self.strays));
                }
            }
        }
    }

    /// Whether the poller may sleep as far as UCX goes: it has nothing left to progress. A
    /// worker that cannot be armed is said once; the loop then wakes every [`MAX_SLEEP`].
    fn transport_idle(&mut self) -> bool {
        let Some(fabric) = &self.fabric else { return true };
        match fabric.may_sleep() {
            Ok(idle) => idle,
            Err(why) => {
                if !self.arm_failed_said {
                    self.arm_failed_said = true;
                    self.stats.problem(format!("UCX: arming the worker failed ({why}); it is pumped every pass"));
                }
                true
            }
        }
    }

    /// Whether the connection `token` calls from an address protocol peers may call from.
    pub fn admits(&self, token: Token) -> bool {
        let ip = self.conns.get(&token).and_then(|c| c.ip);
        self.links.allowed_peers.as_ref().is_none_or(|ips| ip.is_some_and(|ip| ips.contains(&ip)))
    }

    /// Refuses `peer`, which called `unit` on the connection `token` and may not: counted, said
    /// and closed.
    pub fn refuse(&mut self, token: Token, unit: &str, peer: Peer) {
        let address = self.conns.get(&token).map(|c| c.address.clone()).unwrap_or_default();
        self.stats.links_refused.add(1);
        self.stats.problem(format!("{unit}: refused {peer} calling from {address}"));
        self.close(token);
    }

    /// Reads the connection `token`, handing each frame to `on_frame` as it comes; `None` if it
    /// is closed.
    pub fn read(&mut self, token: Token, on_frame: impl FnMut(Peer, Decoded, ReceivedFrame)) -> Option<ReadPass> {
        self.read_with(token, &mut Spare::default(), on_frame)
    }

    /// As [`EventLoop::read`], decoding the super-fragments of data frames into fragment lists
    /// taken from `lists` (a BU's, [`tessera_evb::Bu::fragment_lists`]).
    pub fn read_with(
        &mut self,
        token: Token,
        lists: &mut Spare<FragmentRef>,
        on_frame: impl FnMut(Peer, Decoded, ReceivedFrame),
    ) -> Option<ReadPass> {
        let fabric = self.fabric.as_mut();
        self.conns.get_mut(&token).map(|c| c.read(fabric, lists, on_frame))
    }

    /// Writes what is queued on every connection, data frames from `source`, until done or a
    /// socket would block; `flushed` hears of each connection the bytes its transport took since
    /// the last flush, and the bytes still queued. Gives the connections that broke, with what it
    /// says of each.
    pub fn flush(
        &mut self,
        source: &impl PieceSource,
        mut flushed: impl FnMut(Token, usize, usize),
    ) -> Vec<(Token, String)> {
        let registry = self.poll.registry();
        let mut broken = Vec::new();
        let mut fabric = self.fabric.as_mut();
        for (&token, conn) in self.conns.iter_mut() {
            if conn.queued_bytes() == 0 {
                flushed(token, conn.take_moved(), 0);
                continue;
            }
            if let Err(e) = conn.flush(source, registry, fabric.as_deref_mut()) {
                broken.push((token, format!("{}: {e}", conn.address)));
            }
            flushed(token, conn.take_moved(), conn.queued_bytes());
        }
        broken
    }

    /// Samples the loop's CPU time, at most once in a while unless `now`.
    pub fn sample_cpu(&mut self, now: bool) {
        self.cpu.sample(&self.stats, now);
    }

    /// Says the unit Configured and waits in Ready until run control enables it (see
    /// [`Control::hold_in_ready`]); then it is Enabled and link openings are timed from now.
    pub fn enable(&mut self, unit: &str) -> Result<(), NodeError> {
        self.stats.transition(Transition::Configured);
        self.control.wait_enabled(unit, &self.stats)?;
        self.stats.transition(Transition::Enable);
        self.enabled_at = Instant::now();
        Ok(())
    }

    /// The connections whose link opening is overdue, with why.
    fn overdue(&self) -> Vec<(Token, ConnError)> {
        crate::conn::overdue_links(&self.conns, self.links.connect_timeout, self.enabled_at)
    }

    /// Accepts every caller waiting on the protocol listener `index`, while fewer than
    /// [`MAX_OPENINGS`] callers have yet to open their link: one over the bound is closed as it
    /// comes, counted as refused, and the bound said.
    fn accept_all(&mut self, index: usize) -> Result<(), NodeError> {
        while let Ok((stream, address)) = self.listeners[index].accept() {
            if self.conns.values().filter(|c| c.in_opening()).count() >= MAX_OPENINGS {
                self.stats.links_refused.add(1);
                if !std::mem::replace(&mut self.openings_full_said, true) {
                    self.stats.problem(format!(
                        "{MAX_OPENINGS} callers have yet to open their link, the bound: {address} and later callers \
                         are closed as they come until some open theirs or are closed ({} s)",
                        self.links.connect_timeout.as_secs()
                    ));
                }
                continue;
            }
            self.openings_full_said = false;
            let _ = stream.set_nodelay(true);
            self.accept(stream)?;
        }
        Ok(())
    }

    /// Waits up to `wait` for events and hands them out: a connection's marks it readable, a
    /// protocol listener's accepts its callers, any other goes to `unit`. A wait a signal
    /// interrupts hands out nothing: the next pass comes at once.
    fn poll<U: Unit + ?Sized>(unit: &mut U, wait: Duration) -> Result<(), NodeError> {
        let lp = unit.event_loop();
        let mut events = lp.events.take().expect("the events are back after each poll");
        let polled = lp.poll.poll(&mut events, Some(wait));
        let handed = match polled {
            Ok(()) => Self::hand_out(unit, &events),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(NodeError::Io { what: "polling".into(), source: e }),
        };
        unit.event_loop().events = Some(events);
        handed
    }

    fn hand_out<U: Unit + ?Sized>(unit: &mut U, events: &Events) -> Result<(), NodeError> {
        for ev in events.iter() {
            let lp = unit.event_loop();
            match ev.token() {
                WAKER | FABRIC => {}
                Token(t) if t < UNIT_TOKENS => lp.accept_all(t - 1)?,
                token if token.0 >= CONN_TOKENS => {
                    if let Some(c) = lp.conns.get_mut(&token)
                        && (ev.is_readable() || ev.is_read_closed() || ev.is_error())
                    {
                        c.readable = true;
                    }
                }
                token => unit.on_event(token, ev)?,
            }
        }
        Ok(())
    }
}

/// Runs `unit` until it ends: the loop's steps, in the order the module docs give, pass after
/// pass.
pub(crate) fn run<U: Unit + ?Sized>(unit: &mut U) -> Result<U::Report, NodeError> {
    loop {
        if unit.event_loop().control.aborted() {
            return Err(unit.aborted());
        }
        unit.prepare()?;
        let now = unit.event_loop().now();
        if unit.next_timeout().is_some_and(|t| now >= t) {
            unit.tick(now);
        }
        let busy = unit.step(now)?;
        unit.event_loop().pump();
        let busy = read_conns(unit, now)? || busy;
        for (token, why) in unit.event_loop().overdue() {
            unit.close_conn(token, Some(why.to_string()))?;
        }
        unit.settle()?;
        unit.flush_conns()?;
        unit.publish_stats();
        unit.event_loop().sample_cpu(false);
        if let Some(report) = unit.done()? {
            return Ok(report);
        }
        let wait = if busy || !unit.event_loop().transport_idle() {
            Duration::ZERO
        } else {
            let now = unit.event_loop().now();
            let until = unit.next_timeout().map(|t| Duration::from_nanos(t.saturating_sub(now)));
            until.map_or(MAX_SLEEP, |u| u.min(MAX_SLEEP)).min(unit.max_wait())
        };
        EventLoop::poll(unit, wait)?;
    }
}

/// Reads the readable protocol connections while the unit has room; true if some have more to
/// give now.
fn read_conns<U: Unit + ?Sized>(unit: &mut U, now: Nanos) -> Result<bool, NodeError> {
    let lp = unit.event_loop();
    let tokens: Vec<Token> = lp.conns.iter().filter(|(_, c)| c.readable).map(|(t, _)| *t).collect();
    let mut more = false;
    for token in tokens {
        // Room comes back with the unit's own threads, which wake the loop.
        if !unit.may_read(token) {
            continue;
        }
        // A connection read before may have closed this one (a peer that called again).
        if unit.event_loop().conns.contains_key(&token) {
            more |= unit.read_conn(token, now)?;
        }
    }
    Ok(more)
}
