//! The DTH emulator's I/O: one thread per source, each writing its [`OrbitGenerator`]'s orbits
//! to a TCP connection of its own or to a capture file `dth<SOURCE>.dth`, at the LHC orbit rate
//! (orbit *i* of the run at *i* × 88.924 µs) or free running. It shares the FEROL sender's
//! connections, buffers and write loop ([`crate::sender`]), and its stop line: run control
//! stops every source after the same orbit. Paced, an orbit sent after its time holds the LHC's
//! orbits back: that delay is counted as dead time, as the FEROL sender counts a late trigger.

use crate::error::{EmuError, StreamName};
use crate::orbit::{LHC_ORBIT_HZ, OrbitGenerator, OrbitStreamConfig};
pub use crate::stream::dth_capture_path;
use crate::stream::{
    self, End, Meter, STREAM_BUFFER_BYTES, Sink, StopLine, StreamGauge, StreamOut, check_stream_count, open_named,
    write_all,
};
use std::fmt;
use std::io::{BufWriter, IoSlice};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A whole DTH emulator run.
#[derive(Debug, Clone)]
pub struct DthSenderConfig {
    /// One generator configuration per source.
    pub streams: Vec<OrbitStreamConfig>,
    /// Where to send; a directory gets one capture file per source, [`dth_capture_path`].
    pub sink: Sink,
    /// Send orbit *i* at *i* orbit periods after the start; free running otherwise.
    pub paced: bool,
    /// Orbits per source.
    pub orbits: Option<u64>,
    /// Seconds of wall time.
    pub seconds: Option<f64>,
    /// Run control's stop, in orbits, shared by every source of the run (see [`StopLine`]).
    pub stop: Option<Arc<StopLine>>,
}

/// What one source's stream did.
#[derive(Debug, Clone, PartialEq)]
pub struct DthStreamSummary {
    /// Source id.
    pub source: u16,
    /// Orbits taken (skipped ones included; not the one a disconnect came before).
    pub orbits: u64,
    /// Events of those orbits, as every source draws them.
    pub events: u64,
    /// Orbits that got a fault, a disconnect included.
    pub faults: u64,
    /// Bytes written to the stream.
    pub bytes: u64,
    /// Wall time from the common start to the stream's end, in seconds.
    pub seconds: f64,
    /// Paced: how long its orbits were sent after their time, in seconds.
    pub dead_seconds: f64,
    /// Why it ended.
    pub end: End,
}

/// What a DTH emulator run did.
#[derive(Debug, Clone, PartialEq)]
pub struct DthRunSummary {
    /// Per source, in the order of the configuration.
    pub streams: Vec<DthStreamSummary>,
    /// Wall time of the whole run, in seconds.
    pub seconds: f64,
    /// Whether the orbits were paced at the LHC orbit rate.
    pub paced: bool,
}

impl fmt::Display for DthRunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gb = |bytes: u64, seconds: f64| bytes as f64 / seconds.max(1e-9) / 1e9;
        writeln!(
            f,
            "{:>6} {:>9} {:>10} {:>7} {:>14} {:>8}  end",
            "source", "orbits", "events", "faults", "bytes", "GB/s"
        )?;
        for s in &self.streams {
            writeln!(
                f,
                "{:>6} {:>9} {:>10} {:>7} {:>14} {:>8.3}  {:?}",
                s.source,
                s.orbits,
                s.events,
                s.faults,
                s.bytes,
                gb(s.bytes, s.seconds),
                s.end
            )?;
        }
        let bytes = self.streams.iter().map(|s| s.bytes).sum();
        writeln!(
            f,
            "{:>6} {:>9} {:>10} {:>7} {:>14} {:>8.3}  {:.3} s, {}",
            "total",
            self.streams.iter().map(|s| s.orbits).max().unwrap_or(0),
            self.streams.iter().map(|s| s.events).max().unwrap_or(0),
            self.streams.iter().map(|s| s.faults).sum::<u64>(),
            bytes,
            gb(bytes, self.seconds),
            self.seconds,
            if self.paced { "paced at the LHC orbit rate" } else { "free running" }
        )
    }
}

/// Runs the DTH emulator: opens every stream (a bad address or directory fails before anything
/// is sent), then sends each on its own thread until the limits; returns when all streams have
/// ended. The first stream error is returned.
pub fn run(config: DthSenderConfig) -> Result<DthRunSummary, EmuError> {
    let DthSenderConfig { streams, sink, paced, orbits, seconds, stop } = config;
    if orbits.is_none() && seconds.is_none() && stop.is_none() {
        return Err(EmuError::BadSender("no limit: give a number of orbits or seconds".into()));
    }
    if let Some(s) = seconds
        && !(s.is_finite() && s >= 0.0)
    {
        return Err(EmuError::BadSender(format!("{s} seconds is not a finite number ≥ 0")));
    }
    check_stream_count(streams.len())?;
    let generators = streams.into_iter().map(OrbitGenerator::new).collect::<Result<Vec<_>, _>>()?;
    let polled = seconds.is_some();
    let writers = generators
        .iter()
        .map(|g| open_named(&sink, StreamName::Source(g.source()), dth_capture_path, polled))
        .collect::<Result<Vec<_>, _>>()?;
    let start = Instant::now();
    let limits = stream::Limits { events: orbits, seconds };
    let results: Vec<Result<DthStreamSummary, EmuError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = generators
            .into_iter()
            .zip(writers)
            .map(|(generator, writer)| {
                let stop = stop.as_ref().map(|line| (line.clone(), line.register()));
                scope.spawn(move || send_stream(generator, writer, start, paced, limits, stop))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("stream thread panicked")).collect()
    });
    let streams = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(DthRunSummary { streams, seconds: start.elapsed().as_secs_f64(), paced })
}

fn send_stream(
    mut generator: OrbitGenerator,
    writer: Box<dyn StreamOut>,
    start: Instant,
    paced: bool,
    limits: stream::Limits,
    stop: Option<(Arc<StopLine>, Arc<StreamGauge>)>,
) -> Result<DthStreamSummary, EmuError> {
    let source = generator.source();
    let mut out = BufWriter::with_capacity(STREAM_BUFFER_BYTES, writer);
    let mut m = Meter::new(start, limits);
    let (mut orbits, mut events, mut faults, mut end) = (0u64, 0u64, 0u64, End::Events);
    // Only run control or its receiver ends it ([`stream::write_outcome`]).
    let open_ended = limits.events.is_none() && limits.seconds.is_none();
    for _ in 0..limits.events.unwrap_or(u64::MAX) {
        if m.past_deadline() {
            end = End::Deadline;
            break;
        }
        if let Some((line, gauge)) = &stop {
            if orbits >= line.limit() {
                end = End::Stopped;
                break;
            }
            gauge.publish(orbits, &m);
        }
        if paced {
            let due = start + Duration::from_secs_f64(orbits as f64 / LHC_ORBIT_HZ);
            let now = Instant::now();
            if now < due {
                // A deadline before the orbit's time ends the stream now.
                let flushed = stream::flush(&mut out, &mut m).map(|ok| ok && m.deadline.is_none_or(|d| d >= due));
                if let Some(ended) = stream::write_outcome(flushed, open_ended, StreamName::Source(source), m.bytes)? {
                    end = ended;
                    break;
                }
                std::thread::sleep(due - now);
            }
            m.late(due, Instant::now());
        }
        let orbit = generator.next_orbit()?;
        faults += u64::from(orbit.fault.is_some());
        if orbit.bytes.is_empty() && orbit.ends_stream {
            end = End::Disconnect;
            break;
        }
        orbits += 1;
        events += u64::from(orbit.events.count());
        // A skipped orbit sends nothing (and an empty write would count as a failed one).
        let watched = stop.as_ref().map(|(_, gauge)| gauge).filter(|_| paced);
        if let Some(gauge) = watched {
            gauge.writing(true);
        }
        let complete = if orbit.bytes.is_empty() {
            Ok(true)
        } else {
            write_all(&mut out, &mut [IoSlice::new(orbit.bytes)], &mut m)
        };
        if let Some(gauge) = watched {
            gauge.writing(false);
        }
        if let Some(ended) = stream::write_outcome(complete, open_ended, StreamName::Source(source), m.bytes)? {
            end = ended;
            break;
        }
        if orbit.ends_stream {
            end = End::Disconnect;
            break;
        }
    }
    if end != End::ReceiverClosed
        && let Some(ended) =
            stream::write_outcome(stream::flush(&mut out, &mut m), open_ended, StreamName::Source(source), m.bytes)?
    {
        end = ended;
    }
    Ok(DthStreamSummary {
        source,
        orbits,
        events,
        faults,
        bytes: m.bytes,
        seconds: m.start.elapsed().as_secs_f64(),
        dead_seconds: m.dead.as_secs_f64(),
        end,
    })
}
