//! What every stream of the emulators shares, whatever it sends (the FEROL sender's generated
//! events, a replayed capture, the DTH emulator's orbits): where it goes ([`Sink`]: a TCP
//! connection of its own or a capture file), its buffered vectored writes and how they end
//! ([`Meter`], [`write_outcome`]), the run's limits and stop line ([`StopLine`]), and what it
//! reports ([`StreamSummary`], [`RunSummary`]).

use crate::error::{EmuError, StreamName};
use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, IoSlice, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_config::emulation::MAX_STREAMS;

/// Buffer per stream that batches small fragments into large writes.
pub const STREAM_BUFFER_BYTES: usize = 256 << 10;
/// How long a connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a front end waits, by default, for its receiver to listen: as long as the units of
/// a system wait for each other.
pub const RECEIVER_WAIT: Duration = Duration::from_secs(30);
/// How often a refused connection is tried again.
pub const CONNECT_RETRY: Duration = Duration::from_millis(100);
/// When a run has a time limit, how often a blocked write wakes up to look at the clock.
const WRITE_POLL: Duration = Duration::from_millis(100);
/// How late a stream may turn to a trigger before the trigger counts as held (dead time): about
/// what a front end buffers before it asserts busy (a thousand events at 100 kHz), and well above
/// the few milliseconds a thread of a busy machine waits to be scheduled.
pub const HOLD_TOLERANCE: Duration = Duration::from_millis(10);

/// Where the streams go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sink {
    /// One TCP connection per FED to `address` (`HOST:PORT`); the FEROL stream itself is all
    /// that is sent (every block header carries the FED id). A refused connection, or one that
    /// times out, is tried again every [`CONNECT_RETRY`] for up to `wait`: the units of a system
    /// start in any order (the pods of a cluster do), so a front end may come up before its RU
    /// listens, or while it sets itself up.
    Connect {
        /// Where to connect.
        address: String,
        /// How long to wait for something to listen there.
        wait: Duration,
    },
    /// One capture file per FED, `DIR/fed<ID>.ferol`, created or truncated.
    Directory(PathBuf),
}

impl Sink {
    /// Connections to `address`, waiting up to [`RECEIVER_WAIT`] for it to listen.
    pub fn connect(address: impl Into<String>) -> Sink {
        Sink::Connect { address: address.into(), wait: RECEIVER_WAIT }
    }
}

impl std::fmt::Display for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sink::Connect { address, .. } => write!(f, "{address}"),
            Sink::Directory(dir) => write!(f, "capture files in {}", dir.display()),
        }
    }
}

/// When a run ends; at least one bound is required.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Limits {
    /// Events per stream.
    pub events: Option<u64>,
    /// Seconds of wall time.
    pub seconds: Option<f64>,
}

/// Why a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// It sent its number of events (of orbits, for a DTH stream).
    Events,
    /// The time limit passed.
    Deadline,
    /// A [`tessera_config::emulation::Fault::Disconnect`] closed it (for a DTH stream, an
    /// orbit's disconnect or truncation).
    Disconnect,
    /// Run control stopped every stream at the same event (see [`StopLine`]).
    Stopped,
    /// A [`tessera_config::emulation::Fault::Stall`] silenced it, and then its receiver closed
    /// the connection, run control drew its stop line, or its time limit passed.
    Stalled,
    /// A stream without an event or time limit (one that runs until it is stopped) found its
    /// receiver gone: the RU closed the connection at the end of its run.
    ReceiverClosed,
}

/// Where one stream's bytes go: a TCP connection to its receiver, or a capture file.
pub(crate) trait StreamOut: Write + Send {
    /// Whether a receiver reads the stream (a TCP connection), rather than a file taking it.
    fn has_receiver(&self) -> bool {
        false
    }
    /// Whether the receiver has closed the stream, waiting at most a moment (a capture file
    /// never is).
    fn receiver_closed(&mut self) -> bool {
        false
    }
}

impl StreamOut for File {}

/// A stream's TCP connection. The emulator only writes to it; a read that finds its end tells
/// that the receiver closed it.
struct Connection(TcpStream);

impl Write for Connection {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl StreamOut for Connection {
    fn has_receiver(&self) -> bool {
        true
    }
    fn receiver_closed(&mut self) -> bool {
        // A receiver sends nothing: a read finds either nothing in time (open) or the end.
        let _ = self.0.set_read_timeout(Some(STALL_POLL));
        matches!(self.0.peek(&mut [0u8]), Ok(0)) || matches!(self.0.take_error(), Ok(Some(_)))
    }
}

/// How often a stalled stream looks whether its run or its receiver has ended.
pub(crate) const STALL_POLL: Duration = Duration::from_millis(50);

/// Stops every stream of a run after the same event, so that no FED ends short of the others: a
/// stop at a moment's notice (a time limit, Ctrl-C) sets one event count for all streams, a
/// margin beyond the furthest, and the streams behind catch up to it before they close.
///
/// Each stream also publishes its figures here while it runs ([`StreamGauge`]), so that run
/// control sees the trigger's dead time live ([`StopLine::held`]), and each generating sender the
/// moment its trigger clock started ([`StopLine::clock_starts`]).
#[derive(Debug, Default)]
pub struct StopLine {
    limit: AtomicU64,
    progress: Mutex<Vec<Arc<StreamGauge>>>,
    clock_starts: Mutex<Vec<Instant>>,
}

/// One stream's figures while it runs, written by its thread after every event.
#[derive(Debug, Default)]
pub struct StreamGauge {
    /// Events sent.
    events: AtomicU64,
    /// Time it held the trigger, in ns (see the module's dead time).
    dead_ns: AtomicU64,
    /// Time spent in write calls, in ns: blocked by the receiver, mostly, when it is large.
    write_ns: AtomicU64,
    /// While a paced stream is in a write: when the write began, in ns after [`gauge_epoch`]
    /// (0: in none). A write the receiver holds for long holds the trigger all that while,
    /// before the stream can count it on its next event.
    writing_since_ns: AtomicU64,
}

/// The instant the gauges' times count from.
fn gauge_epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// What the streams of a run have held so far (see [`StopLine::held`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Held {
    /// The trigger's dead time: the largest of the streams', in seconds.
    pub dead_seconds: f64,
    /// Time in write calls of the stream with the most dead time, in seconds.
    pub write_seconds: f64,
}

impl StopLine {
    /// A line not yet drawn.
    pub fn new() -> Arc<Self> {
        Arc::new(StopLine {
            limit: AtomicU64::new(u64::MAX),
            progress: Mutex::new(Vec::new()),
            clock_starts: Mutex::new(Vec::new()),
        })
    }

    /// When each generating sender of the run ([`run`](crate::sender::run), not a replay) started its trigger
    /// clock, in the order they started: its trigger at `time_seconds` of the clock is due at
    /// that moment plus `time_seconds` (paced, it is sent then). A benchmark puts the trigger's
    /// times on the wall clock with it (`tessera bench protocols`' latency).
    pub fn clock_starts(&self) -> Vec<Instant> {
        self.clock_starts.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn clock_started(&self, at: Instant) {
        self.clock_starts.lock().unwrap_or_else(|e| e.into_inner()).push(at);
    }

    pub(crate) fn register(&self) -> Arc<StreamGauge> {
        let p = Arc::new(StreamGauge::default());
        self.progress.lock().unwrap_or_else(|e| e.into_inner()).push(p.clone());
        p
    }

    /// The trigger's dead time so far (the largest of every registered stream's, since the
    /// trigger waits for its slowest FED), and how much of it that stream spent writing.
    pub fn held(&self) -> Held {
        let streams = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        let now = gauge_epoch().elapsed().as_nanos() as u64;
        let worst = streams.iter().map(|g| (g.dead_ns_at(now), g)).max_by_key(|&(dead, _)| dead);
        worst.map_or(Held::default(), |(dead, g)| Held {
            dead_seconds: dead as f64 / 1e9,
            write_seconds: g.write_ns.load(Ordering::Relaxed) as f64 / 1e9,
        })
    }

    /// Draws the line `margin` events beyond the furthest stream and returns the number of events
    /// every stream will have sent. A stream more than `margin` events ahead of the furthest seen
    /// here would already be past it: keep the margin above what a stream sends in a
    /// microsecond.
    pub fn stop(&self, margin: u64) -> u64 {
        let furthest = self
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|p| p.events.load(Ordering::SeqCst))
            .max()
            .unwrap_or(0);
        let limit = furthest.saturating_add(margin);
        self.limit.fetch_min(limit, Ordering::SeqCst);
        self.limit.load(Ordering::SeqCst)
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }
}

/// What one stream did.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamSummary {
    /// FED id.
    pub fed: u16,
    /// Events taken (skipped ones included; not the one a disconnect came before).
    pub events: u64,
    /// Events that got a fault, a disconnect included.
    pub faults: u64,
    /// Bytes written to the stream.
    pub bytes: u64,
    /// Wall time from the common start to the stream's end, in seconds.
    pub seconds: f64,
    /// Time spent inside write and flush calls, in seconds.
    pub write_seconds: f64,
    /// Dead time (paced runs), in seconds; see the module documentation.
    pub dead_seconds: f64,
    /// Why it ended.
    pub end: End,
}

impl StreamSummary {
    /// Bytes per second over the stream's wall time, in GB/s (10^9 bytes).
    pub fn gb_per_second(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-9) / 1e9
    }

    /// Fraction of wall time spent in writes.
    pub fn busy_fraction(&self) -> f64 {
        self.write_seconds / self.seconds.max(1e-9)
    }

    /// Fraction of wall time the stream was dead.
    pub fn dead_fraction(&self) -> f64 {
        self.dead_seconds / self.seconds.max(1e-9)
    }
}

impl StreamGauge {
    /// Publishes a stream's figures so far.
    pub(crate) fn publish(&self, events: u64, m: &Meter) {
        self.events.store(events, Ordering::Relaxed);
        self.dead_ns.store(m.dead.as_nanos() as u64, Ordering::Relaxed);
        self.write_ns.store(m.write.as_nanos() as u64, Ordering::Relaxed);
    }

    /// A paced stream begins a write (`true`) or has ended it (`false`).
    pub(crate) fn writing(&self, yes: bool) {
        let since = if yes { (gauge_epoch().elapsed().as_nanos() as u64).max(1) } else { 0 };
        self.writing_since_ns.store(since, Ordering::Relaxed);
    }

    /// Its dead time at `now` (ns after [`gauge_epoch`]): what it counted, and a write held
    /// past [`HOLD_TOLERANCE`] that it has not counted yet.
    fn dead_ns_at(&self, now: u64) -> u64 {
        let since = self.writing_since_ns.load(Ordering::Relaxed);
        let held =
            if since == 0 { 0 } else { now.saturating_sub(since).saturating_sub(HOLD_TOLERANCE.as_nanos() as u64) };
        self.dead_ns.load(Ordering::Relaxed) + held
    }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// Per stream, in the order of the configuration.
    pub streams: Vec<StreamSummary>,
    /// Wall time of the whole run, in seconds.
    pub seconds: f64,
    /// Whether the run was paced (dead time defined).
    pub paced: bool,
}

impl RunSummary {
    /// Bytes of all streams.
    pub fn bytes(&self) -> u64 {
        self.streams.iter().map(|s| s.bytes).sum()
    }

    /// All streams' bytes over the run's wall time, in GB/s.
    pub fn gb_per_second(&self) -> f64 {
        self.bytes() as f64 / self.seconds.max(1e-9) / 1e9
    }

    /// The largest dead-time fraction of any stream: the trigger waits for the slowest FED.
    pub fn dead_fraction(&self) -> f64 {
        self.streams.iter().map(StreamSummary::dead_fraction).fold(0.0, f64::max)
    }
}

impl fmt::Display for RunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dead = |x: f64| if self.paced { format!("{:.3}", x) } else { "-".into() };
        writeln!(
            f,
            "{:>6} {:>10} {:>7} {:>14} {:>8} {:>6} {:>6}  end",
            "FED", "events", "faults", "bytes", "GB/s", "busy", "dead"
        )?;
        for s in &self.streams {
            writeln!(
                f,
                "{:>6} {:>10} {:>7} {:>14} {:>8.3} {:>6.3} {:>6}  {:?}",
                s.fed,
                s.events,
                s.faults,
                s.bytes,
                s.gb_per_second(),
                s.busy_fraction(),
                dead(s.dead_fraction()),
                s.end
            )?;
        }
        writeln!(
            f,
            "{:>6} {:>10} {:>7} {:>14} {:>8.3} {:>6} {:>6}  {:.3} s{}",
            "total",
            self.streams.iter().map(|s| s.events).sum::<u64>(),
            self.streams.iter().map(|s| s.faults).sum::<u64>(),
            self.bytes(),
            self.gb_per_second(),
            "",
            dead(self.dead_fraction()),
            self.seconds,
            if self.paced { "" } else { ", free running (dead time not defined)" }
        )
    }
}

/// Refuses a run of no streams or more than [`MAX_STREAMS`].
pub(crate) fn check_stream_count(streams: usize) -> Result<(), EmuError> {
    if streams == 0 {
        return Err(EmuError::BadSender("no FED streams".into()));
    }
    if streams > MAX_STREAMS {
        return Err(EmuError::BadSender(format!("{streams} streams; at most {MAX_STREAMS} per process")));
    }
    Ok(())
}

/// The capture file of `fed` in `dir`.
pub fn capture_path(dir: &Path, fed: u16) -> PathBuf {
    dir.join(format!("fed{fed}.ferol"))
}

/// The capture file of `source` in `dir`: `dth<SOURCE>.dth`, the stream exactly as sent on TCP
/// by the DTH emulator ([`crate::dth`]).
pub fn dth_capture_path(dir: &Path, source: u16) -> PathBuf {
    dir.join(format!("dth{source}.dth"))
}

/// [`open`] with the capture file of a source in a directory named by `capture`.
pub(crate) fn open_named(
    sink: &Sink,
    stream: StreamName,
    capture: fn(&Path, u16) -> PathBuf,
    polled: bool,
) -> Result<Box<dyn StreamOut>, EmuError> {
    match sink {
        Sink::Connect { address, wait } => {
            let failed = |source| EmuError::Connect { stream, address: address.clone(), source };
            let deadline = Instant::now() + *wait;
            loop {
                let mut last = io::Error::new(io::ErrorKind::NotFound, "the address resolves to nothing");
                // Addresses one name resolves to: a handful, each tried for at most CONNECT_TIMEOUT.
                for addr in address.to_socket_addrs().map_err(failed)? {
                    match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                        Ok(stream) => {
                            stream.set_nodelay(true).map_err(failed)?;
                            stream.set_write_timeout(polled.then_some(WRITE_POLL)).map_err(failed)?;
                            return Ok(Box::new(Connection(stream)));
                        }
                        Err(e) => last = e,
                    }
                }
                // Refused: nothing listens there yet; timed out: the receiver's queue of
                // connections is full while it sets itself up. Anything else will not mend by
                // waiting.
                if !matches!(last.kind(), io::ErrorKind::ConnectionRefused | io::ErrorKind::TimedOut) {
                    return Err(failed(last));
                }
                if Instant::now() >= deadline {
                    let waited = if wait.is_zero() { String::new() } else { format!("; tried for {wait:?}") };
                    return Err(failed(io::Error::new(last.kind(), format!("{last}{waited}"))));
                }
                std::thread::sleep(CONNECT_RETRY);
            }
        }
        Sink::Directory(dir) => {
            let (StreamName::Fed(id) | StreamName::Source(id)) = stream;
            let path = capture(dir, id);
            match File::create(&path) {
                Ok(file) => Ok(Box::new(file)),
                Err(source) => Err(EmuError::Create { stream, path, source }),
            }
        }
    }
}

/// Counters of one stream while it runs.
pub(crate) struct Meter {
    pub(crate) start: Instant,
    pub(crate) deadline: Option<Instant>,
    pub(crate) bytes: u64,
    pub(crate) write: Duration,
    pub(crate) dead: Duration,
    /// End of the last dead interval counted, so that overlapping intervals count once.
    dead_until: Instant,
}

impl Meter {
    /// A meter of a stream that starts at `start` and may run until `limits`' seconds.
    pub(crate) fn new(start: Instant, limits: Limits) -> Meter {
        let deadline = limits.seconds.map(|s| start + Duration::from_secs_f64(s));
        Meter { start, deadline, bytes: 0, write: Duration::ZERO, dead: Duration::ZERO, dead_until: start }
    }

    pub(crate) fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// The stream turns at `now` to a trigger that fired at `due`; it held the trigger from
    /// [`HOLD_TOLERANCE`] after `due`.
    pub(crate) fn late(&mut self, due: Instant, now: Instant) {
        let from = (due + HOLD_TOLERANCE).max(self.dead_until);
        if now > from {
            self.dead += now - from;
            self.dead_until = now;
        }
    }
}

/// How a write or flush of FED (or source) `fed`'s stream came out, after `bytes` sent: `None`
/// to go on; the stream's end when the deadline came first, or when the receiver closed a stream
/// that only run control or its receiver ends (`open_ended`); an error when it cut any other
/// stream short.
pub(crate) fn write_outcome(
    written: io::Result<bool>,
    open_ended: bool,
    stream: StreamName,
    bytes: u64,
) -> Result<Option<End>, EmuError> {
    match written {
        Ok(true) => Ok(None),
        Ok(false) => Ok(Some(End::Deadline)),
        Err(e) if open_ended && receiver_gone(&e) => Ok(Some(End::ReceiverClosed)),
        Err(source) => Err(EmuError::Write { stream, bytes, source }),
    }
}

/// Whether a failed write says that the receiver closed the connection.
fn receiver_gone(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted)
}

/// Whether a failed write may be tried again: a write time-out (set only when the run has a
/// deadline) or an interruption.
fn retryable(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted)
}

/// Writes every slice through `out`, counting bytes and write time. Returns false when the
/// run's deadline passed while the write was blocked (the stream then ends mid-fragment).
pub(crate) fn write_all(out: &mut impl Write, mut slices: &mut [IoSlice<'_>], m: &mut Meter) -> io::Result<bool> {
    let t = Instant::now();
    // Each pass writes at least one byte, or waits at most WRITE_POLL and gives up past the
    // deadline; without a deadline a blocked write blocks (back-pressure).
    let result = loop {
        if slices.is_empty() {
            break Ok(true);
        }
        match out.write_vectored(slices) {
            Ok(0) => break Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                m.bytes += n as u64;
                IoSlice::advance_slices(&mut slices, n);
            }
            Err(e) if retryable(&e) => {
                if m.past_deadline() {
                    break Ok(false);
                }
            }
            Err(e) => break Err(e),
        }
    };
    m.write += t.elapsed();
    result
}

/// Flushes the stream's buffer; as [`write_all`], false when the deadline passed first, and the
/// bytes left in the buffer are then not counted as sent.
pub(crate) fn flush(out: &mut BufWriter<Box<dyn StreamOut>>, m: &mut Meter) -> io::Result<bool> {
    let t = Instant::now();
    let result = loop {
        match out.flush() {
            Ok(()) => break Ok(true),
            Err(e) if retryable(&e) => {
                if m.past_deadline() {
                    m.bytes -= out.buffer().len() as u64;
                    break Ok(false);
                }
            }
            Err(e) => break Err(e),
        }
    };
    m.write += t.elapsed();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_held_by_the_receiver_is_dead_time_while_it_lasts() {
        let gauge = StreamGauge::default();
        gauge.dead_ns.store(5, Ordering::Relaxed);
        assert_eq!(gauge.dead_ns_at(1_000_000_000), 5, "in no write: what it counted");
        gauge.writing(true);
        let since = gauge.writing_since_ns.load(Ordering::Relaxed);
        let tolerance = HOLD_TOLERANCE.as_nanos() as u64;
        assert_eq!(gauge.dead_ns_at(since + tolerance), 5, "within the tolerance: not held");
        assert_eq!(gauge.dead_ns_at(since + tolerance + 60_000_000_000), 5 + 60_000_000_000, "held a minute");
        gauge.writing(false);
        assert_eq!(gauge.dead_ns_at(since + 120_000_000_000), 5, "the write ended: its next event counts it");
    }

    #[test]
    fn dead_time_counts_overlapping_late_triggers_once() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut m =
            Meter { start, deadline: None, bytes: 0, write: Duration::ZERO, dead: Duration::ZERO, dead_until: start };
        // Held from HOLD_TOLERANCE (10 ms) after each trigger's time.
        m.late(at(10), at(40)); // busy from trigger at 10 ms until 40 ms: 20..40, 20 ms
        m.late(at(20), at(50)); // fired at 20, but 30..40 is counted already: 10 ms more
        m.late(at(60), at(60)); // on time: nothing
        m.late(at(70), at(79)); // within the tolerance: nothing
        m.late(at(100), at(115)); // 5 ms
        assert_eq!(m.dead, Duration::from_millis(35));
    }
}
