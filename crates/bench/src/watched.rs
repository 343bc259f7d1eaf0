//! A whole system whose BUs write files that a reader takes, as `tessera run` runs it: the
//! throughput and the latency from trigger to published file of `tessera bench protocols`.
//!
//! **The system** is an [`EvbCase`] (its RUs, BUs, streams, fragments, protocol, slow BU and
//! tuning) planned as [`crate::evb`] plans it, but with the front ends' generating emulators
//! (each fragment generated as it is sent, as `tessera run`'s) instead of a replay, free running
//! or paced by a Poisson trigger ([`WatchedCase::rate_hz`]), and BUs that write raw files of
//! [`WatchedCase::file_events`] events (`bu.max_events_per_file`, small so that a file's filling
//! does not dominate the latency) under a fresh directory of the RAM disk
//! ([`crate::evb::RAM_DISK`], removed after the case). A watcher thread ([`Watcher`]) takes every
//! published file as a reader would, and deletes it.
//!
//! **Throughput** is measured as [`crate::evb::run_case`] measures it: the units' live figures
//! over a window from [`WARM_UP`] after the start to the end of the case's seconds.
//!
//! **When an event was triggered**: the emulator's trigger times are deterministic, the clock
//! of the system file (`ClockSpec`: rate and seed) drawing the `k`-th trigger's time after the
//! clock's start, and a paced sender sends each event's fragments at that time after it
//! started. Each sender says when it started ([`RunningSystem::trigger_clock_starts`]); an
//! event is triggered at the latest start plus its clock time (its last fragment cannot leave
//! before). The spread of the starts is kept ([`WatchedMeasured::clock_start_spread_s`]).
//!
//! **When its file was published**: the watcher lists each BU's run directory every
//! [`POLL_INTERVAL`] and takes the time it first sees a raw file under its final name (the BU
//! publishes by renaming it there); it reads the file's events' headers (their numbers and
//! incomplete flags), then deletes it and its `.jsn`, as a filter unit would, so that the directory stays
//! short and the RAM disk empty. A file is seen at most a poll interval and a listing after its
//! rename: the latencies are high by up to that, about 1 ms, which is their resolution.
//!
//! **What counts**: every event published, but those triggered in the first [`WARM_UP`] of the
//! run (connections, memory touched for the first time). The figures are percentiles (nearest
//! rank) and the largest; they mean something only when the trigger is paced at a rate the
//! system sustains (free running, they are the length of the queues). Dead time is the
//! emulators' (`StopLine::held`: a paced stream more than 10 ms behind its trigger's schedule
//! holds it), through the control crate's trigger account, with the units' throttles as its
//! reasons; free running, it is not defined.

use crate::BenchError;
use crate::evb::{DRAIN_TIMEOUT, EvbCase, EvbMeasured, RAM_DISK, RUN, Snapshot, plan_system, snapshot, system};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_config::{SystemConfig, TriggerSection};
use tessera_control::system::RunningSystem;
use tessera_control::trigger::{TriggerAccount, TriggerSummary};
use tessera_emu::generator::TriggerClock;
use tessera_formats::frd::{FRD_HEADER_BYTES, FrdHeader, flags};
use tessera_formats::names::{BuFileName, run_dir_name};
use tessera_formats::raw::{RAW_V2_HEADER_BYTES, RawFileHeader};

/// How often the watcher lists the BUs' run directories: the latencies' resolution.
pub const POLL_INTERVAL: Duration = Duration::from_millis(1);
/// The window opens this long after the start (at most a fifth of the case's seconds), and
/// events triggered before it do not count in the latencies.
pub const WARM_UP: Duration = Duration::from_millis(200);
/// How often the trigger's account takes the system's figures.
const ACCOUNT_INTERVAL: Duration = Duration::from_millis(100);
/// Seed of the trigger's clock (its times and the payloads).
const SEED: u64 = 1;

/// A case: a system, its trigger, and the BUs' file size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WatchedCase {
    /// The system. Its output must be [`crate::evb::BuOutput::RamDisk`]; its budget's seconds
    /// are how long the trigger runs.
    pub system: EvbCase,
    /// The Poisson trigger's mean rate, in Hz; `None`: free running.
    pub rate_hz: Option<f64>,
    /// Events per raw file (`bu.max_events_per_file`).
    pub file_events: u32,
}

/// One event seen in a published file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenEvent {
    /// Its event number (the FRD header's, the low 32 bits of the run's; a case's runs are far
    /// shorter than 2^32 events).
    pub event: u64,
    /// Flagged incomplete.
    pub incomplete: bool,
    /// When the watcher first saw its file under its final name.
    pub seen: Instant,
}

/// What the watcher saw.
#[derive(Debug, Clone, Default)]
pub struct Watched {
    /// Every event of every file it saw, in the order seen.
    pub events: Vec<SeenEvent>,
    /// Raw files it saw.
    pub files: u64,
    /// Listings it made (of every directory).
    pub passes: u64,
}

/// A thread that watches BU run directories for published raw files (see the module docs).
pub struct Watcher {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Watched, BenchError>>,
}

impl Watcher {
    /// Starts watching `run_dirs` (a directory that does not exist yet is looked for again).
    pub fn start(run_dirs: Vec<PathBuf>) -> Result<Watcher, BenchError> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("bench-watcher".into())
            .spawn(move || {
                let mut watched = Watched::default();
                loop {
                    // Read before the pass: the pass after a stop is the last, and sees all.
                    let last = stopping.load(Ordering::Acquire);
                    for dir in &run_dirs {
                        take_published(dir, &mut watched)?;
                    }
                    watched.passes += 1;
                    if last {
                        return Ok(watched);
                    }
                    std::thread::sleep(POLL_INTERVAL);
                }
            })
            .map_err(|source| BenchError::Io { what: "starting the watcher thread".into(), source })?;
        Ok(Watcher { stop, thread })
    }

    /// Makes a last pass and returns what was seen.
    pub fn finish(self) -> Result<Watched, BenchError> {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap_or_else(|_| Err(BenchError::System("the watcher thread panicked".into())))
    }
}

/// One listing of `dir`: every raw file under its final name is read and deleted, its events
/// noted as seen now; every index `.jsn` is deleted.
fn take_published(dir: &std::path::Path, watched: &mut Watched) -> Result<(), BenchError> {
    let io = |what: String| move |source| BenchError::Io { what, source };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(format!("listing {}", dir.display()))(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io(format!("listing {}", dir.display())))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        match BuFileName::parse(name) {
            Ok(BuFileName::Raw { .. }) => {
                let seen = Instant::now();
                let path = entry.path();
                read_events(&path, seen, &mut watched.events)?;
                watched.files += 1;
                std::fs::remove_file(&path).map_err(io(format!("deleting {}", path.display())))?;
            }
            Ok(BuFileName::IndexJson { .. }) => {
                let path = entry.path();
                std::fs::remove_file(&path).map_err(io(format!("deleting {}", path.display())))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Notes the events of the raw file at `path` as seen at `seen`: its header and its events'
/// FRD headers only, each read where the one before says the next begins (a reader that only
/// needs their numbers need not copy the payloads, and the watcher shares the cores).
fn read_events(path: &std::path::Path, seen: Instant, out: &mut Vec<SeenEvent>) -> Result<(), BenchError> {
    use std::os::unix::fs::FileExt;
    let io = |source| BenchError::Io { what: format!("reading {}", path.display()), source };
    let bad = |e: tessera_formats::FormatError| BenchError::System(format!("published file {}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(io)?;
    let mut header = [0u8; RAW_V2_HEADER_BYTES];
    file.read_exact_at(&mut header, 0).map_err(io)?;
    let header = RawFileHeader::parse(&header).map_err(bad)?;
    let mut at = u64::from(header.header_bytes);
    for _ in 0..header.event_count {
        let mut frd = [0u8; FRD_HEADER_BYTES];
        file.read_exact_at(&mut frd, at).map_err(io)?;
        let frd = FrdHeader::parse(&frd).map_err(bad)?;
        out.push(SeenEvent { event: u64::from(frd.event), incomplete: frd.flags & flags::INCOMPLETE != 0, seen });
        at += frd.record_bytes() as u64;
    }
    if at != header.file_bytes {
        return Err(BenchError::System(format!(
            "published file {}: its {} events end at byte {at}, its header says {}",
            path.display(),
            header.event_count,
            header.file_bytes
        )));
    }
    Ok(())
}

/// What a case measured.
#[derive(Debug, Clone)]
pub struct WatchedMeasured {
    /// The case.
    pub case: WatchedCase,
    /// The throughput over the window and the whole run's counts, as [`crate::evb::run_case`]
    /// gives them (its case is [`WatchedCase::system`]).
    pub evb: EvbMeasured,
    /// The trigger's account: the rate got over the time it ran, and, paced, its dead time by
    /// reason.
    pub trigger: TriggerSummary,
    /// The latency of every event that counts, in seconds, sorted.
    pub latencies_s: Vec<f64>,
    /// The latest sender's clock start minus the earliest's, in seconds.
    pub clock_start_spread_s: f64,
    /// Events the watcher saw in published files (every published one, or the case fails).
    pub seen: u64,
    /// Raw files the watcher saw.
    pub files: u64,
    /// Events each BU published, in the BUs' order.
    pub per_bu: Vec<u64>,
}

impl WatchedMeasured {
    /// The `p`-th percentile of the latencies (nearest rank; `p` in 0..=100), in seconds; NaN
    /// with no event.
    pub fn percentile_s(&self, p: f64) -> f64 {
        percentile(&self.latencies_s, p)
    }

    /// The largest latency, in seconds; NaN with no event.
    pub fn max_s(&self) -> f64 {
        self.latencies_s.last().copied().unwrap_or(f64::NAN)
    }
}

/// The `p`-th percentile of `sorted` (nearest rank: the smallest value with at least `p` % of
/// the values at or below it); NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p.clamp(0.0, 100.0) / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The system file of a case: the [`EvbCase`]'s, its trigger paced at the case's rate or free
/// running, writing files of the case's size under `dir`.
fn watched_system(case: &WatchedCase, dir: &std::path::Path) -> Result<SystemConfig, BenchError> {
    let mut cfg = system(&case.system, dir)?;
    cfg.trigger = TriggerSection { rate_hz: case.rate_hz, free_running: case.rate_hz.is_none(), seed: SEED };
    cfg.bu.max_events_per_file = case.file_events;
    cfg.validate().map_err(|e| BenchError::BadCase(format!("{}: {e}", case.system.label())))?;
    Ok(cfg)
}

/// The latency of each event of `seen` triggered at least `from_s` after the clock's start,
/// sorted, in seconds: its sighting minus (`clock_start` plus its trigger's time on `cfg`'s
/// clock).
fn latencies(
    seen: &[SeenEvent],
    cfg: &SystemConfig,
    clock_start: Instant,
    from_s: f64,
) -> Result<Vec<f64>, BenchError> {
    let first = cfg.run.first_event;
    let last = seen.iter().map(|e| e.event).max().unwrap_or(first);
    let mut clock = TriggerClock::new(cfg.clock_spec())?;
    let times: Vec<f64> = (first..=last).map(|_| clock.next_trigger().time_seconds).collect();
    let mut out = Vec::with_capacity(seen.len());
    for e in seen {
        let Some(&t) = e.event.checked_sub(first).and_then(|k| times.get(k as usize)) else {
            return Err(BenchError::System(format!("event {} published, before the run's first {first}", e.event)));
        };
        if t < from_s {
            continue;
        }
        let due = clock_start + Duration::from_secs_f64(t);
        // A file seen before its event was due would say the clock's start is wrong: kept as
        // a negative latency, which the smallest percentiles show.
        out.push(match e.seen.checked_duration_since(due) {
            Some(d) => d.as_secs_f64(),
            None => -due.duration_since(e.seen).as_secs_f64(),
        });
    }
    out.sort_by(f64::total_cmp);
    Ok(out)
}

/// Runs a case: starts the system and the watcher, lets the trigger run for the case's seconds
/// (the window opening after [`WARM_UP`]), stops it, drains, and checks that every unit ended
/// cleanly, every triggered event was published and the watcher saw each.
pub fn run_watched(case: &WatchedCase) -> Result<WatchedMeasured, BenchError> {
    case.system.validate()?;
    let label = case.system.label();
    if !matches!(case.system.output, crate::evb::BuOutput::RamDisk { .. }) {
        return Err(BenchError::BadCase(format!("{label}: the BUs write files here; give BuOutput::RamDisk")));
    }
    if case.rate_hz.is_some_and(|r| !(r.is_finite() && r >= 1.0)) || case.file_events == 0 {
        return Err(BenchError::BadCase(format!(
            "{label}: {:?} Hz, files of {} events; at least 1 each",
            case.rate_hz, case.file_events
        )));
    }
    let ram_disk = tempfile::Builder::new()
        .prefix("tessera-bench-protocols-")
        .tempdir_in(RAM_DISK)
        .map_err(|source| BenchError::Io { what: format!("creating a directory in {RAM_DISK}"), source })?;
    let cfg = watched_system(case, ram_disk.path())?;
    let mut plan = plan_system(&case.system, &cfg, ram_disk.path())?;
    for e in &mut plan.emulators {
        // `RunningSystem` leaves the run's time limit to `tessera run`: here the front ends
        // keep it, to bound a run that hangs.
        e.limits.seconds = cfg.run.seconds;
    }
    let run_dirs: Vec<PathBuf> = plan.bus.iter().map(|b| b.directory.join(run_dir_name(RUN))).collect();
    let system = RunningSystem::start(plan).map_err(|e| BenchError::System(format!("{label}: {e}")))?;
    let (rus, bus) = (system.ru_stats.clone(), system.bu_stats.clone());
    let watcher = Watcher::start(run_dirs)?;
    let mut account = TriggerAccount::new(case.rate_hz);
    let started = Instant::now();
    let run_for = Duration::from_secs_f64(case.system.budget.seconds);
    let warm_up = WARM_UP.min(run_for / 5);
    let failed = || rus.iter().chain(&bus).any(|s| s.failed());
    let mut begin: Option<Snapshot> = None;
    while started.elapsed() < run_for && !failed() && !system.finished() {
        let next = if begin.is_none() { warm_up } else { run_for };
        std::thread::sleep(ACCOUNT_INTERVAL.min(next.saturating_sub(started.elapsed())));
        account.interval(&system.progress());
        if begin.is_none() && started.elapsed() >= warm_up {
            begin = Some(snapshot(&rus, &bus)?);
        }
    }
    let end = snapshot(&rus, &bus)?;
    account.stop();
    let starts = system.trigger_clock_starts();
    system.stop();
    let outcome = system.wait(DRAIN_TIMEOUT);
    let watched = watcher.finish();
    drop(ram_disk);
    if !outcome.clean() {
        return Err(BenchError::System(format!("{label}: {}", crate::evb::outcome_errors(&outcome))));
    }
    let watched = watched?;
    let Some(b) = begin else {
        return Err(BenchError::Timeout(format!("{label}: no measurement window within the case's seconds")));
    };
    let c = outcome.conservation();
    if !c.holds || c.built != c.triggered {
        return Err(BenchError::System(format!(
            "{label}: {} events triggered, {} built, lost {:?}",
            c.triggered, c.built, c.lost
        )));
    }
    if watched.events.len() as u64 != c.built {
        return Err(BenchError::System(format!(
            "{label}: the watcher saw {} events in published files, the BUs published {}",
            watched.events.len(),
            c.built
        )));
    }
    let (Some(&first), Some(&last)) = (starts.iter().min(), starts.iter().max()) else {
        return Err(BenchError::System(format!("{label}: no front end started its trigger clock")));
    };
    let per_fragment = case.system.wire_bytes_per_event() as f64 / case.system.streams as f64;
    let evb = EvbMeasured::between(&case.system, &b, &end, &outcome, per_fragment);
    Ok(WatchedMeasured {
        case: *case,
        evb,
        trigger: account.summary(),
        latencies_s: latencies(&watched.events, &cfg, last, WARM_UP.as_secs_f64())?,
        clock_start_spread_s: last.duration_since(first).as_secs_f64(),
        seen: watched.events.len() as u64,
        files: watched.files,
        per_bu: c.per_bu.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_ranks() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!((percentile(&v, 50.0), percentile(&v, 99.0), percentile(&v, 100.0)), (50.0, 99.0, 100.0));
        assert_eq!((percentile(&v, 0.0), percentile(&v, 99.5)), (1.0, 100.0));
        assert_eq!(percentile(&[7.0], 50.0), 7.0);
        assert!(percentile(&[], 50.0).is_nan());
    }
}
