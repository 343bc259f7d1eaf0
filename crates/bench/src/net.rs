//! Raw network baselines, over loopback with real TCP: the denominators of the event-builder
//! benchmarks.
//!
//! The sender is always the one the event builder gets: the front-end emulator
//! ([`tessera_emu::sender::run`]) replaying a capture from memory ([`tessera_emu::replay`]),
//! one FEROL stream of fixed-size fragments per FED, each on its own TCP connection and thread,
//! free running. In orbit mode ([`StreamMode::Orbit`]) the streams are DTH orbit streams
//! instead, one per source, each orbit block a Poisson number of fixed-size fragments
//! ([`tessera_emu::orbit`]): a case's "fragment" is then an orbit block of one source. The capture ([`replay_capture`]) is generated before the case starts and holds
//! at most [`REPLAY_BYTES`], more than a last-level cache, so that the sender reads its bytes
//! from memory as a network card would; each pass only renumbers the events (a few stores per
//! fragment), so neither a baseline nor the builder is bound by generating events. What differs
//! is what it sends into:
//!
//! - **(a) raw ingest**, [`raw_ingest`]: a [`DiscardReceiver`], one thread that serves every
//!   connection through `mio` readiness polling and reads into one shared 256 KiB buffer, then
//!   forgets the bytes. The readout unit also serves all its streams from one thread, so this is
//!   what its ingest costs before it looks at a byte.
//! - **(a2) raw ingest into receive memory**, [`raw_ingest_into`] with a [`ReadInto`] as large
//!   as an RU's receive memory: the same receiver, but each read goes to the next place of that
//!   memory, pre-touched and reused in turn, at most the RU's read size
//!   ([`Framing::read_bytes`](tessera_runtime::ferol_input::Framing::read_bytes)) a call: the RU's I/O without the RU, where (a)
//!   reads more a call into one buffer that stays in the caches. A reference that tells the RU's
//!   own cost from its I/O's.
//! - **(e) raw relay**, [`raw_relay`]: a [`Relay`] thread reads every inbound connection and
//!   writes what it read to M outbound connections, one read chunk to each in turn (skipping an
//!   output whose buffer is full), without ever blocking: bytes a socket does not take wait in
//!   that output's bounded buffer until the socket is writable. A [`DiscardReceiver`] reads the
//!   M connections. This is the denominator of the full chain RU → BU.
//!
//! CPU time comes from `clock_gettime` with the thread's and the process's CPU clocks (crate
//! `cpu-time`), which the kernel keeps in nanoseconds, not in the 10 ms ticks of
//! `/proc/thread-self/stat`; the runs still last a second or more, so that the figures are not
//! dominated by connection set-up. A fragment on the wire is its bytes plus one 16-byte FEROL
//! block header per 4080 data bytes ([`wire_bytes_per_fragment`]).
//!
//! Every wait is bounded: connections are made within [`CONNECT_TIMEOUT`], a run errors out
//! [`SLACK`] past its time budget, and once the upstream side has ended (the emulator returned,
//! or the relay did) a thread waits at most [`GRACE`] for its connections to close.

use crate::BenchError;
use cpu_time::{ProcessTime, ThreadTime};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tessera_config::emulation::{ClockSpec, FedSpec, SizeModel};
use tessera_emu::generator::StreamConfig;
use tessera_emu::orbit::{LHC_ORBIT_HZ, OrbitStreamConfig};
use tessera_emu::replay::Capture;
use tessera_emu::sender::{self, Limits, SenderConfig, Sink};
use tessera_formats::ferol::{HEADER_BYTES, MAX_DATA_BYTES};
use tessera_formats::orbit::{DEFAULT_MAX_BLOCK_BYTES, ORBIT_HEADER_BYTES, dth_wire_len, orbit_fragment_len};
use tessera_formats::tcds::{ORBITS_PER_LUMI_SECTION, TCDS_FED_ID};

/// Bytes of each read (the receiver's one buffer; the relay's largest read).
pub const READ_BUFFER_BYTES: usize = 256 << 10;
/// Buffer per relay output: bytes read and not yet taken by the output's socket.
pub const RELAY_BUFFER_BYTES: usize = 1 << 20;
/// The relay reads into an output's buffer only when this much of it is free.
pub const RELAY_MIN_ROOM: usize = 64 << 10;
/// Most relay outputs.
pub const MAX_RELAY_OUTPUTS: usize = 64;
/// Most streams of one case: FED ids 0..N must stay below the trigger FED 1024, and the emulator
/// sends at most [`tessera_config::emulation::MAX_STREAMS`].
pub const MAX_STREAMS: usize = tessera_config::emulation::MAX_STREAMS;
/// How long the relay may take to connect to the receiver.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long past its time budget a run may go before it errors out.
pub const SLACK: Duration = Duration::from_secs(20);
/// How long a thread waits for its connections to close once its upstream has ended: long
/// enough for a thread of a loaded machine to be scheduled and drain what is left.
pub const GRACE: Duration = Duration::from_secs(10);
/// Longest sleep in `poll`, so that bounds are looked at even when nothing happens.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Reads from one connection before turning to the next.
pub(crate) const READS_PER_TURN: usize = 16;
/// Events one `poll` returns at most.
pub(crate) const EVENTS_CAPACITY: usize = 1024;
/// The listening socket's token; connection `i` has token `i + 1`.
pub(crate) const LISTENER: Token = Token(0);
/// Tokens of relay outputs start here.
const OUTPUT_BASE: usize = 1 << 20;

/// Most wire bytes of a replayed capture, all streams together.
pub const REPLAY_BYTES: usize = 64 << 20;

/// Events (or orbits) a replayed capture holds: as many as [`REPLAY_BYTES`] holds at
/// `wire_bytes_per_event` (all streams' wire bytes of one), at least one, no more than `needed`.
fn capture_length(wire_bytes_per_event: usize, needed: u64) -> u64 {
    ((REPLAY_BYTES / wire_bytes_per_event.max(1)).max(1) as u64).min(needed.max(1))
}

/// The capture the sender of a case replays: `streams` generated for as many events as
/// [`REPLAY_BYTES`] holds at `wire_bytes_per_event` (all streams' wire bytes of one event), and
/// no more than `events_needed`.
pub fn replay_capture(
    streams: &[StreamConfig],
    wire_bytes_per_event: usize,
    events_needed: u64,
) -> Result<Arc<Capture>, BenchError> {
    Ok(Arc::new(Capture::generate(streams, capture_length(wire_bytes_per_event, events_needed))?))
}

/// [`replay_capture`] of DTH orbit streams: `streams` generated for as many orbits as
/// [`REPLAY_BYTES`] holds at `wire_bytes_per_orbit` (all streams' wire bytes of one orbit, a
/// mean), and no more than `orbits_needed`.
pub fn replay_orbit_capture(
    streams: &[OrbitStreamConfig],
    wire_bytes_per_orbit: usize,
    orbits_needed: u64,
) -> Result<Arc<Capture>, BenchError> {
    Ok(Arc::new(Capture::generate_orbits(streams, capture_length(wire_bytes_per_orbit, orbits_needed))?))
}

/// Mean wire bytes of one stream's unit (fragment, or orbit block) in `capture`: all its bytes
/// over its units, so exact for whole passes of the replay.
pub fn capture_wire_bytes_per_unit(capture: &Capture) -> f64 {
    capture.bytes() as f64 / (capture.events() * capture.feds().len() as u64).max(1) as f64
}

/// What a case's streams carry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StreamMode {
    /// FEROL streams: a fragment of `fragment_bytes` per event and FED.
    Event,
    /// DTH streams (orbit mode): one orbit block per LHC orbit and source, holding a fragment of
    /// `fragment_bytes` bytes of payload for each of the orbit's events, a Poisson number of mean
    /// `l1_rate_hz` / [`LHC_ORBIT_HZ`], the same in every source.
    Orbit {
        /// The L1 trigger rate the events per orbit are drawn for.
        l1_rate_hz: f64,
    },
}

impl StreamMode {
    /// Checks an orbit mode's L1 rate: finite, positive, at most one event per BX.
    pub fn validate(&self) -> Result<(), BenchError> {
        if let StreamMode::Orbit { l1_rate_hz } = *self {
            orbit_stream(0, SizeModel::Fixed(16), l1_rate_hz)
                .validate()
                .map_err(|e| BenchError::BadCase(format!("orbit mode: {e}")))?;
        }
        Ok(())
    }

    /// Mean bytes of one stream's unit on the wire: a fragment of `fragment_bytes`
    /// ([`wire_bytes_per_fragment`]), or in orbit mode an orbit block of the mean number of
    /// events with its DTH stream block headers (the replayed capture's own mean is
    /// [`capture_wire_bytes_per_unit`]).
    pub fn wire_bytes_per_unit(&self, fragment_bytes: usize) -> f64 {
        match *self {
            StreamMode::Event => wire_bytes_per_fragment(fragment_bytes) as f64,
            StreamMode::Orbit { l1_rate_hz } => {
                let block =
                    ORBIT_HEADER_BYTES as f64 + l1_rate_hz / LHC_ORBIT_HZ * orbit_fragment_len(fragment_bytes) as f64;
                dth_wire_len(block.round() as usize, DEFAULT_MAX_BLOCK_BYTES) as f64
            }
        }
    }

    /// Whether the streams are orbit streams.
    pub fn is_orbit(&self) -> bool {
        matches!(self, StreamMode::Orbit { .. })
    }
}

/// The DTH stream of one source as the event builder's cases and the raw baselines generate it:
/// run 1 from orbit 1 in lumi sections of 2^18 orbits, the first event 1, seed 1, fragments of
/// `size`, events drawn for `l1_rate_hz`, the emulator's default stream blocks, no fault (what
/// `tessera_control::plan` plans for such a system file).
pub fn orbit_stream(source: u16, size: SizeModel, l1_rate_hz: f64) -> OrbitStreamConfig {
    OrbitStreamConfig {
        run: 1,
        source,
        size,
        first_orbit: 1,
        orbits_per_lumi_section: ORBITS_PER_LUMI_SECTION,
        first_event: 1,
        l1_rate_hz,
        seed: 1,
        faults: Vec::new(),
        max_block_bytes: DEFAULT_MAX_BLOCK_BYTES,
    }
}

/// Bytes a fragment of `fragment_bytes` takes on a FEROL stream: its size rounded up to whole
/// 8-byte words (as the emulator does), plus a 16-byte block header per block of at most 4080
/// data bytes.
pub fn wire_bytes_per_fragment(fragment_bytes: usize) -> usize {
    let bytes = fragment_bytes.div_ceil(8) * 8;
    bytes + bytes.div_ceil(MAX_DATA_BYTES) * HEADER_BYTES
}

/// How long a case runs: until the emulator has sent about `bytes` in all, or `seconds` have
/// passed, whichever comes first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetBudget {
    /// Wall-time limit of the sender, in seconds.
    pub seconds: f64,
    /// Bytes of all streams together.
    pub bytes: u64,
}

impl NetBudget {
    /// The main cases of `tessera bench net`: 3 s or 20 GB.
    pub const FULL: NetBudget = NetBudget { seconds: 3.0, bytes: 20_000_000_000 };
    /// One point of a scan: 1.2 s or 8 GB.
    pub const SCAN: NetBudget = NetBudget { seconds: 1.2, bytes: 8_000_000_000 };
    /// Smoke runs (`--quick`): 0.3 s or 1 GB.
    pub const QUICK: NetBudget = NetBudget { seconds: 0.3, bytes: 1_000_000_000 };
}

/// One network case.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetCase {
    /// FED streams, one TCP connection each, FED ids 0..N; in orbit mode source ids 1024, 0,
    /// 1, ... as the event builder's cases have them.
    pub streams: usize,
    /// Bytes per fragment, header and trailer included (16..=1048576); in orbit mode the bytes
    /// of each event's payload in an orbit block.
    pub fragment_bytes: usize,
    /// FEROL streams of events, or DTH streams of orbits.
    pub mode: StreamMode,
    /// Outbound connections of the relay ([`raw_relay`] only).
    pub relay_outputs: usize,
    /// How long to run.
    pub budget: NetBudget,
}

impl NetCase {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |why: String| Err(BenchError::BadCase(why));
        if !(1..=MAX_STREAMS).contains(&self.streams) {
            return bad(format!("{} streams; 1..={MAX_STREAMS}", self.streams));
        }
        if !(1..=MAX_RELAY_OUTPUTS).contains(&self.relay_outputs) {
            return bad(format!("{} relay outputs; 1..={MAX_RELAY_OUTPUTS}", self.relay_outputs));
        }
        let NetBudget { seconds, bytes } = self.budget;
        if !(seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0) || bytes == 0 {
            return bad(format!("budget of {seconds} s and {bytes} bytes; give 0 < seconds ≤ 3600 and bytes > 0"));
        }
        SizeModel::Fixed(self.fragment_bytes).validate().map_err(tessera_emu::EmuError::from)?;
        self.mode.validate()
    }

    /// Bytes of one fragment (in orbit mode, of one orbit block, a mean) on the wire.
    pub fn wire_bytes_per_fragment(&self) -> f64 {
        self.mode.wire_bytes_per_unit(self.fragment_bytes)
    }

    /// The emulator's configuration for this case, replaying a capture to `address`.
    pub fn sender_config(&self, address: SocketAddr) -> Result<SenderConfig, BenchError> {
        let size = SizeModel::Fixed(self.fragment_bytes);
        let clock = ClockSpec::default();
        let per_stream =
            (self.budget.bytes as f64 / self.streams as f64 / self.wire_bytes_per_fragment()).max(1.0) as u64;
        let all_streams = (self.streams as f64 * self.wire_bytes_per_fragment()).ceil() as usize;
        let replay = match self.mode {
            StreamMode::Event => {
                let streams: Vec<StreamConfig> = (0..self.streams)
                    .map(|fed| StreamConfig {
                        run: 1,
                        fed: FedSpec { fed: fed as u16, size },
                        first_event: 1,
                        clock,
                        faults: Vec::new(),
                        seed: 1,
                    })
                    .collect();
                replay_capture(&streams, all_streams, per_stream)?
            }
            StreamMode::Orbit { l1_rate_hz } => {
                let sources = std::iter::once(TCDS_FED_ID).chain(0..(self.streams - 1) as u16);
                let streams: Vec<_> = sources.map(|source| orbit_stream(source, size, l1_rate_hz)).collect();
                replay_orbit_capture(&streams, all_streams, per_stream)?
            }
        };
        Ok(SenderConfig {
            streams: Vec::new(),
            replay: Some(replay),
            sink: Sink::connect(address.to_string()),
            paced: false,
            pace_percent: 100,
            limits: Limits { events: Some(per_stream), seconds: Some(self.budget.seconds) },
            stop: None,
        })
    }
}

/// Mean wire bytes of one stream's unit in what `config` replays (see
/// [`capture_wire_bytes_per_unit`]), or `fallback`.
fn replayed_wire_bytes_per_unit(config: &SenderConfig, fallback: f64) -> f64 {
    config.replay.as_deref().map_or(fallback, capture_wire_bytes_per_unit)
}

/// What one case measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// FED streams.
    pub streams: usize,
    /// Bytes per fragment.
    pub fragment_bytes: usize,
    /// Bytes per fragment on the wire, FEROL block headers included (orbit mode: per orbit
    /// block with its DTH stream block headers, the mean of the replayed capture).
    pub wire_bytes_per_fragment: f64,
    /// FEROL streams of events, or DTH streams of orbits.
    pub mode: StreamMode,
    /// Bytes the final receiver read (equal to what the emulator sent; checked).
    pub bytes: u64,
    /// Whole fragments (orbit blocks) in those bytes (`bytes / wire_bytes_per_fragment`).
    pub fragments: u64,
    /// Wall time from the final receiver's first byte to its last connection's end.
    pub seconds: f64,
    /// CPU time of the thread measured: the receiver in (a), the relay in (e).
    pub worker_cpu_seconds: f64,
    /// CPU time of the final receiver's thread (the same as `worker_cpu_seconds` in (a)).
    pub receiver_cpu_seconds: f64,
    /// CPU time of the whole process during the case: emulator threads included.
    pub process_cpu_seconds: f64,
}

impl Measured {
    /// Bytes per second, in GB/s (10^9).
    pub fn gb_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-9) / 1e9
    }

    /// Fragments per second, all streams together.
    pub fn fragments_per_s(&self) -> f64 {
        self.fragments as f64 / self.seconds.max(1e-9)
    }

    /// Events per second: fragments per second per stream (every stream sends one fragment per
    /// event).
    pub fn events_per_s(&self) -> f64 {
        self.fragments_per_s() / self.streams.max(1) as f64
    }

    /// Nanoseconds of the measured thread's CPU per fragment.
    pub fn cpu_ns_per_fragment(&self) -> f64 {
        self.worker_cpu_seconds * 1e9 / self.fragments.max(1) as f64
    }

    /// Nanoseconds of the whole process's CPU per fragment (emulator included).
    pub fn process_cpu_ns_per_fragment(&self) -> f64 {
        self.process_cpu_seconds * 1e9 / self.fragments.max(1) as f64
    }

    /// Fraction of the wall time the measured thread was on a CPU (1.0: it was the bottleneck,
    /// or at least never idle).
    pub fn worker_busy(&self) -> f64 {
        self.worker_cpu_seconds / self.seconds.max(1e-9)
    }
}

/// The bounds of one thread's run.
#[derive(Debug, Clone, Copy)]
pub struct Bounds<'a> {
    /// Past this, the thread errors out.
    pub deadline: Instant,
    /// Set when whatever feeds this thread has ended: from then on the thread waits at most
    /// [`GRACE`] for its connections to close.
    pub upstream_done: &'a AtomicBool,
}

impl Bounds<'_> {
    /// Errors if a bound is passed; `ended` remembers when the upstream was first seen done;
    /// `state` describes what is still awaited.
    pub(crate) fn check(&self, ended: &mut Option<Instant>, state: impl FnOnce() -> String) -> Result<(), BenchError> {
        let now = Instant::now();
        if now >= self.deadline {
            return Err(BenchError::Timeout(format!("the run's deadline passed; {}", state())));
        }
        if self.upstream_done.load(Ordering::Acquire) {
            let since = *ended.get_or_insert(now);
            if now - since >= GRACE {
                return Err(BenchError::Timeout(format!("upstream ended {GRACE:?} ago; {}", state())));
            }
        }
        Ok(())
    }
}

pub(crate) fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}

/// A listening socket on 127.0.0.1 with an ephemeral port, non-blocking, for `mio`.
pub(crate) fn listen() -> Result<(std::net::TcpListener, SocketAddr), BenchError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(io_error("binding 127.0.0.1:0"))?;
    listener.set_nonblocking(true).map_err(io_error("making the listener non-blocking"))?;
    let addr = listener.local_addr().map_err(io_error("reading the listener's address"))?;
    Ok((listener, addr))
}

/// Waits for readiness events, at most `timeout`; an interrupted wait returns no events.
pub(crate) fn poll_events(poll: &mut Poll, events: &mut Events, timeout: Duration) -> Result<(), BenchError> {
    match poll.poll(events, Some(timeout)) {
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {
            events.clear();
            Ok(())
        }
        other => other.map_err(io_error("polling")),
    }
}

/// Accepts pending connections while fewer than `expected` were accepted, registers each for
/// reading with token `index + 1`, and returns them.
pub(crate) fn accept(
    poll: &Poll,
    listener: &TcpListener,
    accepted: usize,
    expected: usize,
) -> Result<Vec<TcpStream>, BenchError> {
    let mut new = Vec::new();
    while accepted + new.len() < expected {
        match listener.accept() {
            Ok((mut stream, _)) => {
                let token = Token(accepted + new.len() + 1);
                poll.registry().register(&mut stream, token, Interest::READABLE).map_err(io_error("registering"))?;
                new.push(stream);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error("accepting")(e)),
        }
    }
    Ok(new)
}

/// An inbound connection.
pub(crate) struct Inbound {
    pub(crate) stream: TcpStream,
    /// May have bytes (readiness reported, no `WouldBlock` since).
    pub(crate) ready: bool,
    pub(crate) open: bool,
}

impl Inbound {
    /// The peer has closed the connection: it is read no more, and `open` counts one fewer.
    pub(crate) fn close(&mut self, poll: &Poll, open: &mut usize) -> Result<(), BenchError> {
        poll.registry().deregister(&mut self.stream).map_err(io_error("deregistering"))?;
        (self.open, self.ready) = (false, false);
        *open -= 1;
        Ok(())
    }
}

/// Where a [`DiscardReceiver`] reads: `memory_bytes` used in turn, at most `read_bytes` a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadInto {
    /// Bytes of memory the reads go to, one after another, from the start again at its end.
    pub memory_bytes: usize,
    /// Most bytes of one read.
    pub read_bytes: usize,
}

impl ReadInto {
    /// One [`READ_BUFFER_BYTES`] buffer, each read at its start: baseline (a).
    pub const BUFFER: ReadInto = ReadInto { memory_bytes: READ_BUFFER_BYTES, read_bytes: READ_BUFFER_BYTES };

    /// Receive memory as an RU's: `memory_bytes` read `read_bytes` at a time, as the RU reads
    /// its streams ([`Framing::read_bytes`](tessera_runtime::ferol_input::Framing::read_bytes)).
    pub fn ru_memory(memory_bytes: usize, read_bytes: usize) -> ReadInto {
        ReadInto { memory_bytes: memory_bytes.max(read_bytes), read_bytes }
    }
}

/// What a [`DiscardReceiver`] saw.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiverReport {
    /// Connections served.
    pub connections: usize,
    /// Bytes read.
    pub bytes: u64,
    /// Wall time from the first byte to the last connection's end, in seconds.
    pub seconds: f64,
    /// CPU time of the receiving thread during its run, in seconds.
    pub cpu_seconds: f64,
}

/// A receiver that reads every byte of its connections and discards it: one thread, `mio`
/// readiness polling, non-blocking sockets, one shared [`READ_BUFFER_BYTES`] buffer. Bind it,
/// give its address to the sender, then [`DiscardReceiver::run`] it on the thread to measure.
pub struct DiscardReceiver {
    listener: std::net::TcpListener,
    addr: SocketAddr,
    into: ReadInto,
    /// Where the reads go: allocated and written before the run (as the RU's memory is), so
    /// that neither the receiver's CPU time nor its wall time counts it.
    buffer: Vec<u8>,
}

impl std::fmt::Debug for DiscardReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscardReceiver").field("addr", &self.addr).field("into", &self.into).finish_non_exhaustive()
    }
}

impl DiscardReceiver {
    /// Listens on 127.0.0.1, on a port the system chooses.
    pub fn bind() -> Result<DiscardReceiver, BenchError> {
        let (listener, addr) = listen()?;
        Ok(DiscardReceiver { listener, addr, into: ReadInto::BUFFER, buffer: vec![1u8; READ_BUFFER_BYTES] })
    }

    /// Reads where `into` says instead of into one buffer.
    pub fn reading_into(self, into: ReadInto) -> DiscardReceiver {
        // Written, so that every page is there before the first read.
        DiscardReceiver { into, buffer: vec![1u8; into.memory_bytes], ..self }
    }

    /// The address to connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Accepts `connections` connections and reads them until every one has ended; returns what
    /// it read and the CPU time of the calling thread. Connections beyond `connections` wait in
    /// the listener's backlog and are dropped with it.
    pub fn run(self, connections: usize, bounds: Bounds<'_>) -> Result<ReceiverReport, BenchError> {
        let cpu = ThreadTime::try_now().map_err(io_error("reading the thread's CPU clock"))?;
        let mut poll = Poll::new().map_err(io_error("creating a poll"))?;
        let mut listener = TcpListener::from_std(self.listener);
        poll.registry().register(&mut listener, LISTENER, Interest::READABLE).map_err(io_error("registering"))?;
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let mut buffer = self.buffer;
        let read_bytes = self.into.read_bytes.clamp(1, buffer.len());
        let mut at = 0;
        let mut conns: Vec<Inbound> = Vec::with_capacity(connections);
        let (mut open, mut bytes, mut first, mut ended) = (0usize, 0u64, None::<Instant>, None);
        while conns.len() < connections || open > 0 {
            bounds.check(&mut ended, || {
                format!("receiver: {} of {connections} connected, {open} still open, {bytes} bytes", conns.len())
            })?;
            let busy = conns.iter().any(|c| c.ready && c.open);
            poll_events(&mut poll, &mut events, if busy { Duration::ZERO } else { POLL_INTERVAL })?;
            for event in &events {
                if event.token() == LISTENER {
                    for stream in accept(&poll, &listener, conns.len(), connections)? {
                        conns.push(Inbound { stream, ready: true, open: true });
                        open += 1;
                    }
                } else if let Some(c) = conns.get_mut(event.token().0 - 1) {
                    c.ready = true;
                }
            }
            for c in conns.iter_mut().filter(|c| c.ready && c.open) {
                for _ in 0..READS_PER_TURN {
                    if buffer.len() - at < read_bytes {
                        at = 0;
                    }
                    match c.stream.read(&mut buffer[at..at + read_bytes]) {
                        Ok(0) => {
                            c.close(&poll, &mut open)?;
                            break;
                        }
                        Ok(n) => {
                            bytes += n as u64;
                            // One buffer: every read at its start. Memory: the next read after
                            // this one, on a cache line of its own.
                            if buffer.len() > read_bytes {
                                at += n.div_ceil(64) * 64;
                            }
                            first.get_or_insert_with(Instant::now);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            c.ready = false;
                            break;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(io_error("receiver: reading")(e)),
                    }
                }
            }
        }
        Ok(ReceiverReport {
            connections,
            bytes,
            seconds: first.map_or(0.0, |t| t.elapsed().as_secs_f64()),
            cpu_seconds: cpu.try_elapsed().map_err(io_error("reading the thread's CPU clock"))?.as_secs_f64(),
        })
    }
}

/// An outbound connection of the relay with its bounded buffer of bytes not yet written.
struct Outbound {
    stream: TcpStream,
    buffer: Vec<u8>,
    /// Pending bytes are `buffer[start..end]`.
    start: usize,
    end: usize,
    /// No `WouldBlock` since the last writable event.
    writable: bool,
}

impl Outbound {
    fn pending(&self) -> bool {
        self.start < self.end
    }

    /// Free bytes at the buffer's tail after moving pending bytes to its front when needed.
    fn room(&mut self) -> usize {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.buffer.len() - self.end < RELAY_MIN_ROOM && self.start > 0 {
            self.buffer.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        self.buffer.len() - self.end
    }

    /// Writes pending bytes until none are left or the socket would block; returns the bytes
    /// written.
    fn flush(&mut self) -> Result<u64, BenchError> {
        let mut written = 0;
        while self.writable && self.pending() {
            match self.stream.write(&self.buffer[self.start..self.end]) {
                Ok(0) => return Err(io_error("relay: writing")(io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    self.start += n;
                    written += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error("relay: writing")(e)),
            }
        }
        Ok(written)
    }
}

/// What a [`Relay`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayReport {
    /// Bytes read from the inbound connections.
    pub bytes_in: u64,
    /// Bytes written to the outbound connections (equal to `bytes_in` at the end).
    pub bytes_out: u64,
    /// Wall time of the run, from its start to the last byte written, in seconds.
    pub seconds: f64,
    /// CPU time of the relaying thread, in seconds.
    pub cpu_seconds: f64,
}

/// A relay: one thread reads all inbound connections and writes each read chunk to the next of
/// M outbound connections, never blocking; bytes a socket does not take wait in that output's
/// [`RELAY_BUFFER_BYTES`] buffer, and the relay reads nothing while no output has
/// [`RELAY_MIN_ROOM`] free, so back-pressure reaches the senders.
#[derive(Debug)]
pub struct Relay {
    listener: std::net::TcpListener,
    addr: SocketAddr,
}

impl Relay {
    /// Listens on 127.0.0.1, on a port the system chooses.
    pub fn bind() -> Result<Relay, BenchError> {
        let (listener, addr) = listen()?;
        Ok(Relay { listener, addr })
    }

    /// The address the senders connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connects `outputs` times to `to`, accepts `inputs` connections, relays until every input
    /// has ended and every byte is written, then closes the outputs.
    pub fn run(
        self,
        inputs: usize,
        to: SocketAddr,
        outputs: usize,
        bounds: Bounds<'_>,
    ) -> Result<RelayReport, BenchError> {
        let cpu = ThreadTime::try_now().map_err(io_error("reading the thread's CPU clock"))?;
        let start = Instant::now();
        let mut poll = Poll::new().map_err(io_error("creating a poll"))?;
        let mut outs = (0..outputs)
            .map(|j| {
                let stream = std::net::TcpStream::connect_timeout(&to, CONNECT_TIMEOUT)
                    .map_err(io_error(format!("relay: connecting output {j} to {to}")))?;
                stream.set_nodelay(true).map_err(io_error("relay: setting TCP_NODELAY"))?;
                stream.set_nonblocking(true).map_err(io_error("relay: making an output non-blocking"))?;
                let mut stream = TcpStream::from_std(stream);
                poll.registry()
                    .register(&mut stream, Token(OUTPUT_BASE + j), Interest::WRITABLE)
                    .map_err(io_error("registering"))?;
                Ok(Outbound { stream, buffer: vec![0u8; RELAY_BUFFER_BYTES], start: 0, end: 0, writable: true })
            })
            .collect::<Result<Vec<_>, BenchError>>()?;
        let mut listener = TcpListener::from_std(self.listener);
        poll.registry().register(&mut listener, LISTENER, Interest::READABLE).map_err(io_error("registering"))?;
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let mut ins: Vec<Inbound> = Vec::with_capacity(inputs);
        let (mut open, mut bytes_in, mut bytes_out, mut ended) = (0usize, 0u64, 0u64, None);
        let (mut next_in, mut next_out) = (0usize, 0usize);
        while ins.len() < inputs || open > 0 || outs.iter().any(Outbound::pending) {
            bounds.check(&mut ended, || {
                format!(
                    "relay: {} of {inputs} connected, {open} still open, {bytes_in} bytes in, {bytes_out} out",
                    ins.len()
                )
            })?;
            let can_read = ins.iter().any(|c| c.ready && c.open) && outs.iter().any(|o| o.writable || !o.pending());
            let can_write = outs.iter().any(|o| o.writable && o.pending());
            poll_events(&mut poll, &mut events, if can_read || can_write { Duration::ZERO } else { POLL_INTERVAL })?;
            for event in &events {
                let t = event.token().0;
                if event.token() == LISTENER {
                    for stream in accept(&poll, &listener, ins.len(), inputs)? {
                        ins.push(Inbound { stream, ready: true, open: true });
                        open += 1;
                    }
                } else if t >= OUTPUT_BASE {
                    if let Some(o) = outs.get_mut(t - OUTPUT_BASE) {
                        o.writable = true;
                    }
                } else if let Some(c) = ins.get_mut(t - 1) {
                    c.ready = true;
                }
            }
            for o in &mut outs {
                bytes_out += o.flush()?;
            }
            // Read chunks while an input has bytes and an output has room, inputs in turn.
            for _ in 0..READS_PER_TURN * ins.len().max(1) {
                let Some(i) = (0..ins.len()).map(|k| (next_in + k) % ins.len()).find(|&i| ins[i].ready && ins[i].open)
                else {
                    break;
                };
                let Some(j) =
                    (0..outputs).map(|k| (next_out + k) % outputs).find(|&j| outs[j].room() >= RELAY_MIN_ROOM)
                else {
                    break;
                };
                let (c, o) = (&mut ins[i], &mut outs[j]);
                let limit = (o.end + READ_BUFFER_BYTES).min(o.buffer.len());
                match c.stream.read(&mut o.buffer[o.end..limit]) {
                    Ok(0) => c.close(&poll, &mut open)?,
                    Ok(n) => {
                        o.end += n;
                        bytes_in += n as u64;
                        bytes_out += o.flush()?;
                        next_out = (j + 1) % outputs;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.ready = false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(io_error("relay: reading")(e)),
                }
                next_in = (i + 1) % ins.len();
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        drop(outs); // the receiver sees the end of every output
        Ok(RelayReport {
            bytes_in,
            bytes_out,
            seconds,
            cpu_seconds: cpu.try_elapsed().map_err(io_error("reading the thread's CPU clock"))?.as_secs_f64(),
        })
    }
}

/// Joins a scoped thread, passing a panic on.
fn join<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
    handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The error to report when several parts of a case failed: the first that is not a time-out
/// (time-outs usually follow from another part's failure), else the first.
fn first_cause(errors: Vec<BenchError>) -> Option<BenchError> {
    let cause = errors.iter().position(|e| !matches!(e, BenchError::Timeout(_))).unwrap_or(0);
    errors.into_iter().nth(cause)
}

/// Checks that every byte sent arrived.
fn check_bytes(sent: u64, received: u64) -> Result<(), BenchError> {
    if sent == received {
        Ok(())
    } else {
        Err(BenchError::BadCase(format!("the emulator sent {sent} bytes but {received} arrived")))
    }
}

fn process_cpu() -> Result<ProcessTime, BenchError> {
    ProcessTime::try_now().map_err(io_error("reading the process's CPU clock"))
}

fn process_cpu_since(start: ProcessTime) -> Result<f64, BenchError> {
    Ok(start.try_elapsed().map_err(io_error("reading the process's CPU clock"))?.as_secs_f64())
}

/// (a) Raw TCP ingest: the emulator's `streams` connections into one [`DiscardReceiver`]
/// thread. The measured thread is the receiver.
pub fn raw_ingest(case: &NetCase) -> Result<Measured, BenchError> {
    raw_ingest_into(case, ReadInto::BUFFER)
}

/// [`raw_ingest`] with the receiver reading where `into` says: (a2) with
/// [`ReadInto::ru_memory`].
pub fn raw_ingest_into(case: &NetCase, into: ReadInto) -> Result<Measured, BenchError> {
    ingest_through(case, DiscardReceiver::bind()?.reading_into(into))
}

/// The thread the emulator's connections go to in an ingest case: it reads them all, and is
/// the thread measured.
pub(crate) trait Ingest: Send {
    /// The address the emulator connects to.
    fn local_addr(&self) -> SocketAddr;
    /// Serves `connections` connections until each has ended.
    fn run(self, connections: usize, bounds: Bounds<'_>) -> Result<ReceiverReport, BenchError>;
}

impl Ingest for DiscardReceiver {
    fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    fn run(self, connections: usize, bounds: Bounds<'_>) -> Result<ReceiverReport, BenchError> {
        DiscardReceiver::run(self, connections, bounds)
    }
}

/// The thread between the emulator and a [`DiscardReceiver`] in a relay case, the one measured.
pub(crate) trait Hop: Send {
    /// The address the emulator connects to.
    fn local_addr(&self) -> SocketAddr;
    /// Serves `inputs` connections until each has ended, writing to `outputs` connections it
    /// makes to `to`, and closes those.
    fn run(self, inputs: usize, to: SocketAddr, outputs: usize, bounds: Bounds<'_>) -> Result<RelayReport, BenchError>;
}

impl Hop for Relay {
    fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    fn run(self, inputs: usize, to: SocketAddr, outputs: usize, bounds: Bounds<'_>) -> Result<RelayReport, BenchError> {
        Relay::run(self, inputs, to, outputs, bounds)
    }
}

/// An ingest case: the emulator's `case.streams` connections into `receiver`.
pub(crate) fn ingest_through(case: &NetCase, receiver: impl Ingest) -> Result<Measured, BenchError> {
    case.validate()?;
    let config = case.sender_config(Ingest::local_addr(&receiver))?;
    let wire = replayed_wire_bytes_per_unit(&config, case.wire_bytes_per_fragment());
    let sender_done = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs_f64(case.budget.seconds) + SLACK;
    let process = process_cpu()?;
    let (sent, received) = std::thread::scope(|s| {
        let bounds = Bounds { deadline, upstream_done: &sender_done };
        let rx = std::thread::Builder::new()
            .name("discard-receiver".into())
            .spawn_scoped(s, move || Ingest::run(receiver, case.streams, bounds))
            .map_err(io_error("starting the receiver thread"))?;
        let sent = sender::run(config);
        sender_done.store(true, Ordering::Release);
        Ok::<_, BenchError>((sent, join(rx)))
    })?;
    let process_cpu_seconds = process_cpu_since(process)?;
    let (sent, received) = match (sent, received) {
        (Ok(s), Ok(r)) => (s, r),
        (s, r) => {
            return Err(first_cause([r.err(), s.err().map(BenchError::from)].into_iter().flatten().collect())
                .expect("one failed"));
        }
    };
    check_bytes(sent.bytes(), received.bytes)?;
    Ok(Measured {
        streams: case.streams,
        fragment_bytes: case.fragment_bytes,
        wire_bytes_per_fragment: wire,
        mode: case.mode,
        bytes: received.bytes,
        fragments: (received.bytes as f64 / wire).round() as u64,
        seconds: received.seconds,
        worker_cpu_seconds: received.cpu_seconds,
        receiver_cpu_seconds: received.cpu_seconds,
        process_cpu_seconds,
    })
}

/// (e) Raw two-hop relay: the emulator's `streams` connections into one [`Relay`] thread, which
/// writes to `relay_outputs` connections read by one [`DiscardReceiver`] thread. The measured
/// thread is the relay; bytes and time are the final receiver's.
pub fn raw_relay(case: &NetCase) -> Result<Measured, BenchError> {
    relay_through(case, Relay::bind()?)
}

/// A relay case: the emulator's `case.streams` connections into `relay`, which writes to
/// `case.relay_outputs` connections read by one [`DiscardReceiver`].
pub(crate) fn relay_through(case: &NetCase, relay: impl Hop) -> Result<Measured, BenchError> {
    case.validate()?;
    let receiver = DiscardReceiver::bind()?;
    let to = receiver.local_addr();
    let config = case.sender_config(Hop::local_addr(&relay))?;
    let wire = replayed_wire_bytes_per_unit(&config, case.wire_bytes_per_fragment());
    let (sender_done, relay_done) = (AtomicBool::new(false), AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs_f64(case.budget.seconds) + SLACK;
    let process = process_cpu()?;
    let (sent, relayed, received) = std::thread::scope(|s| {
        let (outputs, streams) = (case.relay_outputs, case.streams);
        let rx_bounds = Bounds { deadline, upstream_done: &relay_done };
        let relay_bounds = Bounds { deadline, upstream_done: &sender_done };
        let rx = std::thread::Builder::new()
            .name("discard-receiver".into())
            .spawn_scoped(s, move || DiscardReceiver::run(receiver, outputs, rx_bounds))
            .map_err(io_error("starting the receiver thread"))?;
        let relay_done = &relay_done;
        let rl = std::thread::Builder::new()
            .name("relay".into())
            .spawn_scoped(s, move || {
                let report = Hop::run(relay, streams, to, outputs, relay_bounds);
                relay_done.store(true, Ordering::Release);
                report
            })
            .map_err(io_error("starting the relay thread"))?;
        let sent = sender::run(config);
        sender_done.store(true, Ordering::Release);
        Ok::<_, BenchError>((sent, join(rl), join(rx)))
    })?;
    let process_cpu_seconds = process_cpu_since(process)?;
    let (sent, relayed, received) = match (sent, relayed, received) {
        (Ok(s), Ok(l), Ok(r)) => (s, l, r),
        (s, l, r) => {
            let errors = [l.err(), r.err(), s.err().map(BenchError::from)].into_iter().flatten().collect();
            return Err(first_cause(errors).expect("one failed"));
        }
    };
    check_bytes(sent.bytes(), relayed.bytes_in)?;
    check_bytes(relayed.bytes_out, received.bytes)?;
    Ok(Measured {
        streams: case.streams,
        fragment_bytes: case.fragment_bytes,
        wire_bytes_per_fragment: wire,
        mode: case.mode,
        bytes: received.bytes,
        fragments: (received.bytes as f64 / wire).round() as u64,
        seconds: received.seconds,
        worker_cpu_seconds: relayed.cpu_seconds,
        receiver_cpu_seconds: received.cpu_seconds,
        process_cpu_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(streams: usize, fragment_bytes: usize, relay_outputs: usize) -> NetCase {
        NetCase {
            streams,
            fragment_bytes,
            mode: StreamMode::Event,
            relay_outputs,
            budget: NetBudget { seconds: 5.0, bytes: 4 << 20 },
        }
    }

    #[test]
    fn wire_bytes_count_one_block_header_per_4080_bytes() {
        assert_eq!(wire_bytes_per_fragment(2048), 2048 + 16);
        assert_eq!(wire_bytes_per_fragment(4080), 4080 + 16);
        assert_eq!(wire_bytes_per_fragment(4088), 4088 + 32);
        assert_eq!(wire_bytes_per_fragment(16384), 16384 + 5 * 16);
        assert_eq!(wire_bytes_per_fragment(250), 256 + 16, "rounded up to whole words");
    }

    #[test]
    fn ingest_receives_every_byte_the_emulator_sent() {
        let case = tiny(3, 2048, 1);
        let m = raw_ingest(&case).unwrap();
        // The byte budget ends the run: events per stream = 4 MiB / 3 / 2064.
        let per_stream = (4u64 << 20) / 3 / 2064;
        assert_eq!(m.bytes, 3 * per_stream * 2064);
        assert_eq!(m.fragments, 3 * per_stream);
        assert!(m.worker_cpu_seconds > 0.0 && m.process_cpu_seconds >= m.worker_cpu_seconds);
    }

    #[test]
    fn ingest_into_receive_memory_and_of_orbits_receives_every_byte() {
        let mode = StreamMode::Orbit { l1_rate_hz: 750_000.0 };
        let case = NetCase { mode, fragment_bytes: 1024, ..tiny(3, 0, 1) };
        let m = raw_ingest_into(&case, ReadInto { memory_bytes: 1 << 20, read_bytes: 50_000 }).unwrap();
        // One pass of a capture that the byte budget sized: whole orbit blocks.
        assert!((m.bytes as f64 - m.fragments as f64 * m.wire_bytes_per_fragment).abs() < 1.0, "{m:?}");
        assert!(m.bytes > (3 << 20) && m.bytes <= 4 << 20, "{m:?}");
        assert_eq!(m.mode, mode);
    }

    #[test]
    fn relay_passes_every_byte_through_to_the_receiver() {
        for outputs in [1, 3] {
            let case = tiny(4, 16384, outputs);
            let m = raw_relay(&case).unwrap();
            let per_stream = (4u64 << 20) / 4 / wire_bytes_per_fragment(16384) as u64;
            assert_eq!(m.fragments, 4 * per_stream, "{outputs} outputs");
            assert_eq!(m.bytes, m.fragments * wire_bytes_per_fragment(16384) as u64);
        }
    }

    #[test]
    fn bad_cases_are_refused_before_anything_runs() {
        assert!(matches!(raw_ingest(&tiny(0, 2048, 1)), Err(BenchError::BadCase(_))));
        assert!(matches!(raw_relay(&tiny(2, 2048, 0)), Err(BenchError::BadCase(_))));
        assert!(matches!(raw_ingest(&tiny(2, 8, 1)), Err(BenchError::Emulator(_))));
    }

    #[test]
    fn a_receiver_whose_sender_never_comes_times_out() {
        let receiver = DiscardReceiver::bind().unwrap();
        let done = AtomicBool::new(true);
        let bounds = Bounds { deadline: Instant::now() + Duration::from_secs(30), upstream_done: &done };
        let err = receiver.run(2, bounds).unwrap_err();
        assert!(err.to_string().contains("0 of 2 connected"), "{err}");
    }
}
