//! The I/O layer: one thread per FED stream, each writing its generator's events with blocking
//! vectored writes to a TCP connection of its own or to a capture file `fed<ID>.ferol`.
//!
//! **One thread per stream**, not a few threads each owning several streams: a write that blocks
//! (the RU applies back-pressure on that connection) then stalls only its own FED, as a real
//! FEROL link would, and the code stays a plain blocking loop. The cost is a thread per FED, so a
//! process sends at most
//! [`MAX_STREAMS`](tessera_config::emulation::MAX_STREAMS) streams; a test stand with more FEDs runs several
//! emulator processes (as CMS runs one FEROL emulator per board).
//!
//! Small fragments are batched through a 256 KiB buffer per stream (TCP_NODELAY is set, so the
//! buffer decides what goes into a segment); a fragment larger than the buffer is sent straight
//! from the generator's buffer with its block headers in one vectored write. When paced by the
//! trigger clock, a stream flushes before it sleeps for the next trigger.
//!
//! **Dead time**, paced runs only: a stream holds the trigger while a trigger fired more than
//! [`HOLD_TOLERANCE`] ago and the stream is still busy with earlier events (a write blocked by the
//! RU's back-pressure, or the generator itself too slow). Per stream, the union of the intervals
//! from each such trigger's time plus the tolerance to the moment the stream turns to it, divided
//! by the stream's wall time; the trigger's dead time is the largest of its streams' (it waits for
//! the slowest FED). The tolerance stands for the few events a real front end buffers before it
//! asserts busy, and keeps the tens of microseconds a sleeping thread wakes up late from counting
//! as dead time. A free-running stream is never waiting for a trigger, so its dead time is not
//! defined; both modes report the fraction of wall time spent inside write calls ("busy").
//! Both figures are also published while the run goes on, through the run's [`StopLine`].

use crate::error::{EmuError, StreamName};
use crate::generator::{StreamConfig, StreamGenerator, Wire};
use crate::replay::Capture;
pub use crate::stream::{
    CONNECT_RETRY, CONNECT_TIMEOUT, End, HOLD_TOLERANCE, Held, Limits, RECEIVER_WAIT, RunSummary, STREAM_BUFFER_BYTES,
    Sink, StopLine, StreamGauge, StreamSummary, capture_path, dth_capture_path,
};
use crate::stream::{Meter, STALL_POLL, StreamOut, check_stream_count, flush, open_named, write_all, write_outcome};
use std::io::{BufWriter, IoSlice};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_config::emulation::MAX_FRAGMENT_BYTES;
use tessera_formats::ferol::{HEADER_BYTES, MAX_DATA_BYTES};

/// Most FEROL blocks of one fragment.
const MAX_BLOCKS: usize = MAX_FRAGMENT_BYTES.div_ceil(MAX_DATA_BYTES);

/// A whole emulator run.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// One generator configuration per FED stream; empty when `replay` is given.
    pub streams: Vec<StreamConfig>,
    /// Send these captured streams from memory instead of generating events
    /// ([`crate::replay`]): free running only, `streams` empty.
    pub replay: Option<Arc<Capture>>,
    /// Where to send.
    pub sink: Sink,
    /// Wait for each trigger's time on the clock (`--rate-hz`); free running otherwise.
    pub paced: bool,
    /// With `paced`, the streams' pace in percent of the trigger's (1 to 100): below 100 each
    /// event is sent at its trigger time × 100 / `pace_percent`, so the streams fall further and
    /// further behind the trigger, as slow front ends do.
    pub pace_percent: u32,
    /// When to stop.
    pub limits: Limits,
    /// Run control's stop, shared by every stream of the run (and of other senders' runs).
    pub stop: Option<Arc<StopLine>>,
}

/// A stalled stream (see [`Wire::Stall`]) waits, sending nothing, until its receiver closes the
/// connection, the run's stop line is drawn, or its deadline passes.
pub(crate) fn stall(out: &mut BufWriter<Box<dyn StreamOut>>, m: &Meter, stop: Option<&Arc<StopLine>>, sent: u64) {
    loop {
        // A file (no receiver to wait for) with neither a stop line nor a deadline ends now.
        let unbounded = m.deadline.is_none() && stop.is_none() && !out.get_ref().has_receiver();
        if unbounded || m.past_deadline() || stop.is_some_and(|line| sent >= line.limit()) {
            return;
        }
        if out.get_mut().receiver_closed() {
            return;
        }
        if !out.get_ref().has_receiver() {
            std::thread::sleep(STALL_POLL);
        }
    }
}

/// Runs the emulator: opens every stream (so that a bad address or directory fails before
/// anything is sent), then sends each on its own thread until the limits; returns when all
/// streams have ended. The first stream error is returned.
pub fn run(config: SenderConfig) -> Result<RunSummary, EmuError> {
    let SenderConfig { streams, replay, sink, paced, pace_percent, limits, stop } = config;
    if limits.events.is_none() && limits.seconds.is_none() && stop.is_none() {
        return Err(EmuError::BadSender("no limit: give a number of events or seconds".into()));
    }
    if let Some(s) = limits.seconds
        && !(s.is_finite() && s >= 0.0)
    {
        return Err(EmuError::BadSender(format!("{s} seconds is not a finite number ≥ 0")));
    }
    if let Some(capture) = replay {
        if !streams.is_empty() {
            return Err(EmuError::BadSender(
                "a replay sends its capture's streams: give no streams to generate".into(),
            ));
        }
        if paced {
            return Err(EmuError::BadSender("a replay is free running: it cannot be paced by a trigger rate".into()));
        }
        return crate::replay::run(Arc::unwrap_or_clone(capture), &sink, limits, stop);
    }
    check_stream_count(streams.len())?;
    let generators = streams.into_iter().map(StreamGenerator::new).collect::<Result<Vec<_>, _>>()?;
    let polled = limits.seconds.is_some();
    let writers =
        generators.iter().map(|g| open(&sink, g.fed(), polled)).collect::<Result<Vec<Box<dyn StreamOut>>, _>>()?;
    let start = Instant::now();
    if let Some(line) = &stop {
        line.clock_started(start);
    }
    let results: Vec<Result<StreamSummary, EmuError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = generators
            .into_iter()
            .zip(writers)
            .map(|(generator, writer)| {
                let stop = stop.as_ref().map(|line| (line.clone(), line.register()));
                let pace = paced.then_some(pace_percent);
                scope.spawn(move || send_stream(generator, writer, start, pace, limits, stop))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("stream thread panicked")).collect()
    });
    let streams = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(RunSummary { streams, seconds: start.elapsed().as_secs_f64(), paced })
}

/// Opens one FED's stream. With `polled`, a TCP write wakes up every [`WRITE_POLL`](crate::stream::WRITE_POLL) to look at
/// the run's deadline.
pub(crate) fn open(sink: &Sink, fed: u16, polled: bool) -> Result<Box<dyn StreamOut>, EmuError> {
    open_named(sink, StreamName::Fed(fed), capture_path, polled)
}

fn send_stream(
    mut generator: StreamGenerator,
    writer: Box<dyn StreamOut>,
    start: Instant,
    pace_percent: Option<u32>,
    limits: Limits,
    stop: Option<(Arc<StopLine>, Arc<StreamGauge>)>,
) -> Result<StreamSummary, EmuError> {
    let fed = generator.fed();
    let mut out = BufWriter::with_capacity(STREAM_BUFFER_BYTES, writer);
    let mut m = Meter::new(start, limits);
    let deadline = m.deadline;
    let (mut events, mut faults, mut end) = (0u64, 0u64, End::Events);
    let mut headers = [[0u8; HEADER_BYTES]; MAX_BLOCKS];
    // Only run control or its receiver ends it ([`write_outcome`]).
    let open_ended = limits.events.is_none() && limits.seconds.is_none();
    // Bounded by the event limit, or by the deadline checked on every pass.
    for _ in 0..limits.events.unwrap_or(u64::MAX) {
        if m.past_deadline() {
            end = End::Deadline;
            break;
        }
        if let Some((line, gauge)) = &stop {
            if events >= line.limit() {
                end = End::Stopped;
                break;
            }
            gauge.publish(events, &m);
        }
        let event = generator.next_event()?;
        if matches!(event.wire, Wire::Disconnect) {
            faults += 1;
            end = End::Disconnect;
            break;
        }
        if matches!(event.wire, Wire::Stall) {
            faults += 1;
            end = End::Stalled;
            match write_outcome(flush(&mut out, &mut m), open_ended, StreamName::Fed(fed), m.bytes)? {
                None => stall(&mut out, &m, stop.as_ref().map(|(line, _)| line), events),
                // Past the deadline the stall is over before it began: still a stall.
                Some(End::Deadline) => {}
                Some(ended) => end = ended,
            }
            break;
        }
        if let Some(percent) = pace_percent {
            // A stream slower than the trigger sends each event later than its trigger: the
            // trigger is held (dead time) for as long as the stream is late.
            let trigger = start + Duration::from_secs_f64(event.trigger.time_seconds);
            let due = start + Duration::from_secs_f64(event.trigger.time_seconds * 100.0 / f64::from(percent.max(1)));
            let now = Instant::now();
            if now < due {
                // A deadline before the event's time ends the stream now.
                let flushed = flush(&mut out, &mut m).map(|ok| ok && deadline.is_none_or(|d| d >= due));
                if let Some(ended) = write_outcome(flushed, open_ended, StreamName::Fed(fed), m.bytes)? {
                    end = ended;
                    break;
                }
                std::thread::sleep(due - now);
            }
            m.late(trigger, Instant::now().max(due));
        }
        events += 1;
        faults += u64::from(event.fault.is_some());
        let watched = stop.as_ref().map(|(_, gauge)| gauge).filter(|_| pace_percent.is_some());
        if let Some(gauge) = watched {
            gauge.writing(true);
        }
        let complete = match &event.wire {
            Wire::Nothing | Wire::Disconnect | Wire::Stall => Ok(true),
            Wire::Raw => write_all(&mut out, &mut [IoSlice::new(event.bytes)], &mut m),
            Wire::Blocks(blocks) => {
                let mut count = 0;
                for (header, block) in headers.iter_mut().zip(blocks.clone()) {
                    *header = block.header_bytes();
                    count += 1;
                }
                let mut slices = [IoSlice::new(&[]); 2 * MAX_BLOCKS];
                for ((pair, header), block) in slices.chunks_exact_mut(2).zip(&headers).zip(blocks.clone()) {
                    pair[0] = IoSlice::new(header);
                    pair[1] = IoSlice::new(&event.bytes[block.data]);
                }
                write_all(&mut out, &mut slices[..2 * count], &mut m)
            }
        };
        if let Some(gauge) = watched {
            gauge.writing(false);
        }
        if let Some(ended) = write_outcome(complete, open_ended, StreamName::Fed(fed), m.bytes)? {
            end = ended;
            break;
        }
    }
    if end != End::ReceiverClosed
        && let Some(ended) = write_outcome(flush(&mut out, &mut m), open_ended, StreamName::Fed(fed), m.bytes)?
    {
        end = ended;
    }
    Ok(StreamSummary {
        fed,
        events,
        faults,
        bytes: m.bytes,
        seconds: m.start.elapsed().as_secs_f64(),
        write_seconds: m.write.as_secs_f64(),
        dead_seconds: m.dead.as_secs_f64(),
        end,
    })
}
