//! The event builder on real sockets, measured: a whole system of `tessera-runtime` (front-end
//! emulators, RU nodes, the EVM on RU 0, BU nodes) started in this process over loopback, run
//! free for a time or byte budget, then stopped and drained.
//!
//! The cases of `tessera bench evb` that use it (the raw baselines (a) and (e) are
//! [`crate::net`]'s):
//!
//! - **(b) RU ingest**: one RU in ingest-only mode
//!   ([`RuNodeConfig::ingest_only`](tessera_runtime::ru_node::RuNodeConfig::ingest_only)) reads every
//!   FEROL stream into its receive memory, checks each fragment (markers, length, CRC-16, FED
//!   id, event number), and its core builds super-fragments of every event all streams have
//!   delivered; each is released as soon as it is built, and nothing is sent. This is the RU's
//!   whole receive path, against (a), which receives the same streams and discards the bytes.
//!   (An RU with the EVM into one discarding BU, [`BuOutput::Discard`] with one BU, measures the
//!   same plus the protocol and a send of every byte.)
//! - **(c) full chain without disk**: the same with several discarding BUs.
//! - **(d) full chain with RAM-disk writes**: the BUs write raw files under a fresh directory in
//!   [`RAM_DISK`] with their writer threads; the directory is removed after the case.
//!
//! The system of a case is a system file ([`SystemConfig`]) planned by [`tessera_control::plan`]
//! as `tessera run` plans one, with the few adjustments a benchmark needs after planning (a
//! replayed capture, ingest only; see `plan`).
//!
//! Every case has `streams` FED streams in all, split over the RUs; the first stream of RU 0 is
//! the trigger FED 1024, whose fragment is always the [`TCDS_FRAGMENT_BYTES`]-byte TCDS record,
//! the others carry fixed-size fragments. The front ends replay a capture from memory, as the
//! raw baselines' do ([`crate::net::replay_capture`]): the builder and its baselines are fed the
//! same way, by a sender that generates nothing while the case runs. Figures come from the units' live figures
//! ([`UnitStats`]), sampled every [`SAMPLE_INTERVAL`] over a window that opens [`WARM_UP`] after
//! the BUs built their first event and closes when the budget is spent: fragments the RUs parsed,
//! events the BUs built, and each loop thread's CPU clock (`clock_gettime`, the same clock as
//! [`crate::net`], read by the loop itself about every millisecond). Wire bytes are fragments
//! times the mean wire size of a fragment of the case, FEROL block headers included.
//!
//! After the window the trigger is stopped (every stream ends after the same event), the system
//! drains, and the case fails unless every unit ended cleanly and every triggered event was built.
//!
//! Memory is bounded by configuration: [`CHUNKS_PER_FED`] × [`CHUNK_BYTES`] of receive memory
//! per FED in the RU, [`FRAME_STORE_BYTES`] of received data per BU.

use crate::BenchError;
use crate::net::{NetBudget, SLACK, replay_capture, wire_bytes_per_fragment};
use cpu_time::ProcessTime;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_config::emulation::SizeModel;
use tessera_config::{
    BuParams, BuSection, CorruptStreamPolicy, FragmentSize, RuParams, RuSection, RunSection, SystemConfig,
    TriggerSection,
};
use tessera_control::plan::{Listeners, PlanError};
use tessera_control::system::{RunningSystem, SystemPlan};
use tessera_formats::tcds::{ORBITS_PER_LUMI_SECTION, TCDS_FED_ID, TCDS_FRAGMENT_BYTES};
use tessera_runtime::stats::UnitStats;

/// Where case (d) writes: a fresh directory here, removed after the case.
pub const RAM_DISK: &str = "/dev/shm";
/// Receive memory of an RU per FED stream: chunk size.
pub const CHUNK_BYTES: usize = 1 << 20;
/// Receive memory of an RU per FED stream: chunks.
pub const CHUNKS_PER_FED: usize = 8;
/// Bound on received data a BU holds until it is written (or discarded).
pub const FRAME_STORE_BYTES: usize = 256 << 20;
/// Super-fragments per data message of an RU (`ru.max_parts_per_message`).
pub const MAX_PARTS_PER_MESSAGE: u32 = 256;
/// Largest protocol frame a case may need: the planned units take at least this
/// ([`tessera_control::plan::max_frame_bytes`]). An RU's data message carries up to
/// [`MAX_PARTS_PER_MESSAGE`] super-fragments: 256 × 12 × 16 kB is about 50 MB, which this must
/// hold ([`EvbCase::validate`] checks).
pub const MAX_FRAME_BYTES: u32 = 64 << 20;
/// Largest fragment on the wire.
pub const MAX_WIRE_BYTES: usize = 64 << 10;
/// Most RUs or BUs of one case.
pub const MAX_UNITS: usize = 8;
/// Most writer threads per BU.
pub const MAX_WRITER_THREADS: usize = 16;
/// Most bytes one case writes to the RAM disk (nothing reads the files while the case runs).
pub const RAM_DISK_MAX_BYTES: u64 = 4_000_000_000;
/// How often the live figures are sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(5);
/// Time from the first event built to the window's start (at most a fifth of the budget).
pub const WARM_UP: Duration = Duration::from_millis(200);
/// How long the system may take to drain once the trigger is stopped.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// The run number of every case.
pub const RUN: u32 = 1;

/// What the BUs do with built events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuOutput {
    /// No BU and no EVM: one RU in ingest-only mode, case (b).
    IngestOnly,
    /// Discard mode: build, commit, write nothing.
    Discard,
    /// Write raw files on the RAM disk with this many writer threads per BU.
    RamDisk {
        /// Writer threads per BU.
        writer_threads: usize,
    },
}

/// One event-builder case.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvbCase {
    /// RU nodes; the first carries the EVM.
    pub rus: usize,
    /// BU nodes.
    pub bus: usize,
    /// FED streams in all, the trigger's included, split over the RUs.
    pub streams: usize,
    /// Bytes per data fragment, header and trailer included.
    pub fragment_bytes: usize,
    /// What the BUs do with events.
    pub output: BuOutput,
    /// How long to measure (wire bytes of all streams, or seconds).
    pub budget: NetBudget,
}

impl EvbCase {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |why: String| Err(BenchError::BadCase(why));
        if self.output == BuOutput::IngestOnly {
            if (self.rus, self.bus) != (1, 0) {
                return bad(format!("{} RUs and {} BUs ingest only; 1 RU and no BU do", self.rus, self.bus));
            }
        } else if !(1..=MAX_UNITS).contains(&self.rus) || !(1..=MAX_UNITS).contains(&self.bus) {
            return bad(format!("{} RUs and {} BUs; 1..={MAX_UNITS} each", self.rus, self.bus));
        }
        if !(2.max(self.rus)..=crate::net::MAX_STREAMS).contains(&self.streams) {
            return bad(format!(
                "{} streams for {} RUs; at least 2 and one per RU, at most {}",
                self.streams,
                self.rus,
                crate::net::MAX_STREAMS
            ));
        }
        if let BuOutput::RamDisk { writer_threads } = self.output
            && !(1..=MAX_WRITER_THREADS).contains(&writer_threads)
        {
            return bad(format!("{writer_threads} writer threads; 1..={MAX_WRITER_THREADS}"));
        }
        let NetBudget { seconds, bytes } = self.budget;
        if !(seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0) || bytes == 0 {
            return bad(format!("budget of {seconds} s and {bytes} bytes; give 0 < seconds ≤ 3600 and bytes > 0"));
        }
        if wire_bytes_per_fragment(self.fragment_bytes) > MAX_WIRE_BYTES {
            return bad(format!("{}-byte fragments; at most {MAX_WIRE_BYTES} on the wire", self.fragment_bytes));
        }
        SizeModel::Fixed(self.fragment_bytes).validate().map_err(tessera_emu::EmuError::from)?;
        let parts = MAX_PARTS_PER_MESSAGE as usize;
        let message = parts * self.streams.div_ceil(self.rus) * self.fragment_bytes.max(TCDS_FRAGMENT_BYTES);
        if message + (1 << 20) > MAX_FRAME_BYTES as usize {
            return bad(format!("data messages of up to {message} bytes; frames hold {MAX_FRAME_BYTES}"));
        }
        Ok(())
    }

    /// The FEDs of each RU: the trigger FED 1024 first on RU 0, then data FEDs 0, 1, ... in
    /// contiguous runs, the first RUs one more when the streams do not divide evenly.
    pub fn feds(&self) -> Vec<Vec<u16>> {
        let all: Vec<u16> = std::iter::once(TCDS_FED_ID).chain(0..(self.streams - 1) as u16).collect();
        let (base, extra) = (self.streams / self.rus, self.streams % self.rus);
        let mut rest = &all[..];
        (0..self.rus)
            .map(|r| {
                let (mine, after) = rest.split_at(base + usize::from(r < extra));
                rest = after;
                mine.to_vec()
            })
            .collect()
    }

    /// Wire bytes of one event over all streams: the trigger's record and the data fragments,
    /// FEROL block headers included.
    pub fn wire_bytes_per_event(&self) -> usize {
        wire_bytes_per_fragment(TCDS_FRAGMENT_BYTES) + (self.streams - 1) * wire_bytes_per_fragment(self.fragment_bytes)
    }

    /// The configured bound of one RU's receive memory: chunks × chunk size × its FEDs (the
    /// largest over the RUs).
    pub fn ru_memory_bytes(&self) -> usize {
        self.streams.div_ceil(self.rus) * CHUNKS_PER_FED * CHUNK_BYTES
    }

    /// A short label: `1x2 discard`, `1x1 ramdisk/2w`.
    pub fn label(&self) -> String {
        match self.output {
            BuOutput::IngestOnly => "1x0 ingest".to_string(),
            BuOutput::Discard => format!("{}x{} discard", self.rus, self.bus),
            BuOutput::RamDisk { writer_threads } => format!("{}x{} ramdisk/{writer_threads}w", self.rus, self.bus),
        }
    }
}

/// What one case measured, over its window.
#[derive(Debug, Clone, PartialEq)]
pub struct EvbMeasured {
    /// The case.
    pub case: EvbCase,
    /// Fragments the RUs parsed and checked in the window.
    pub fragments: u64,
    /// Their wire bytes (fragments × the case's mean wire bytes per fragment).
    pub wire_bytes: u64,
    /// Events the BUs built (assembled and checked) in the window.
    pub events_built: u64,
    /// The window's wall time.
    pub seconds: f64,
    /// CPU time of each RU's loop thread in the window, RU 0 (with the EVM) first.
    pub ru_cpu_seconds: Vec<f64>,
    /// CPU time of all BU loop threads in the window (not their writer threads).
    pub bu_cpu_seconds: f64,
    /// CPU time of the whole process in the window: emulators, writers and everything.
    pub process_cpu_seconds: f64,
    /// Events triggered in the whole run, including the drain.
    pub triggered: u64,
    /// Events built in the whole run.
    pub built: u64,
    /// Problems the units reported.
    pub problems: u64,
}

impl EvbMeasured {
    /// Wire bytes per second, in GB/s (10^9).
    pub fn gb_per_s(&self) -> f64 {
        self.wire_bytes as f64 / self.seconds.max(1e-9) / 1e9
    }

    /// Events built per second, all BUs together (ingest only: super-fragments built, that is
    /// fragments per second per stream).
    pub fn events_per_s(&self) -> f64 {
        if self.case.output == BuOutput::IngestOnly {
            return self.fragments_per_s() / self.case.streams as f64;
        }
        self.events_built as f64 / self.seconds.max(1e-9)
    }

    /// Fragments per second, all RUs together.
    pub fn fragments_per_s(&self) -> f64 {
        self.fragments as f64 / self.seconds.max(1e-9)
    }

    /// Nanoseconds of RU loop-thread CPU per fragment (all RUs' CPU over all their fragments).
    pub fn ru_cpu_ns_per_fragment(&self) -> f64 {
        self.ru_cpu_seconds.iter().sum::<f64>() * 1e9 / self.fragments.max(1) as f64
    }

    /// The busiest RU thread's CPU time over the wall time.
    pub fn ru_busy(&self) -> f64 {
        self.ru_cpu_seconds.iter().copied().fold(0.0, f64::max) / self.seconds.max(1e-9)
    }

    /// Nanoseconds of the whole process's CPU per fragment.
    pub fn process_cpu_ns_per_fragment(&self) -> f64 {
        self.process_cpu_seconds * 1e9 / self.fragments.max(1) as f64
    }
}

fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}

/// The system file of a case: its RUs and BUs on free loopback ports, a free-running trigger
/// stamping on the level-1 clock, no filter farm; BUs that write do so under `dir`. The tuning
/// is the event builder's own defaults, which the figures in BENCHMARKS.md were measured with.
fn system(case: &EvbCase, dir: &Path) -> Result<SystemConfig, BenchError> {
    let (discard_events, writer_threads) = match case.output {
        BuOutput::Discard | BuOutput::IngestOnly => (true, 1),
        BuOutput::RamDisk { writer_threads } => (false, writer_threads as u32),
    };
    let rus = case
        .feds()
        .into_iter()
        .enumerate()
        .map(|(r, feds)| RuSection {
            fragment_size: FragmentSize::Fixed { bytes: case.fragment_bytes },
            ..RuSection::new(&format!("ru{r}"), feds)
        })
        .collect();
    // A system has a BU: ingest only plans one, which `plan` then takes away.
    let bus = (0..case.bus.max(1)).map(|b| BuSection::new(&format!("bu{b}"))).collect();
    let mut cfg = SystemConfig {
        run: RunSection {
            number: RUN,
            // The bench stops the trigger; the time limit only bounds a run that hangs.
            events: None,
            seconds: Some(case.budget.seconds + SLACK.as_secs_f64() + DRAIN_TIMEOUT.as_secs_f64()),
            orbits_per_lumi_section: ORBITS_PER_LUMI_SECTION,
            output: Some(dir.to_owned()),
            ..RunSection::default()
        },
        trigger: TriggerSection { rate_hz: None, ..TriggerSection::default() },
        rus,
        bus,
        ru: RuParams {
            max_events_buffered: 4096,
            fragment_timeout_ms: 1000,
            max_parts_per_message: MAX_PARTS_PER_MESSAGE,
            chunk_bytes: CHUNK_BYTES,
            chunks_per_fed: CHUNKS_PER_FED as u32,
            on_corrupt_stream: CorruptStreamPolicy::Fail,
            ..RuParams::default()
        },
        bu: BuParams {
            max_events_in_flight: 1024,
            request_batch_events: 128,
            max_events_per_file: 64,
            file_timeout_ms: 1000,
            writer_threads,
            frame_store_bytes: FRAME_STORE_BYTES as u64,
            ramdisk_high_water_percent: 95,
            ramdisk_low_water_percent: 90,
            discard_events,
        },
        ..SystemConfig::default()
    };
    cfg.evm.assign_batch_events = 128;
    cfg.evm.assign_delay_us = 1000;
    cfg.fu.enabled = false;
    cfg.validate().map_err(|e| BenchError::BadCase(format!("{}: {e}", case.label())))?;
    Ok(cfg)
}

/// The system of a case, planned as `tessera run` plans its system file; BUs that write do so
/// under `dir`.
fn plan(case: &EvbCase, dir: &Path) -> Result<SystemPlan, BenchError> {
    let cfg = system(case, dir)?;
    let planning = |e: PlanError| BenchError::System(format!("{}: {e}", case.label()));
    let link_key = tessera_runtime::link::LinkKey::generate()
        .map_err(|e| BenchError::Io { what: "the run's link key".into(), source: std::io::Error::other(e) })?;
    let listeners = Listeners::bind_all(&cfg).map_err(planning)?;
    let mut plan = tessera_control::plan::plan(&cfg, listeners, dir, &link_key).map_err(planning)?;
    // Every RU's capture holds the same events, about REPLAY_BYTES in all.
    let events_needed = case.budget.bytes / case.wire_bytes_per_event() as u64 + 1;
    for e in &mut plan.emulators {
        // The front ends replay a capture of the planned streams from memory.
        let streams = std::mem::take(&mut e.streams);
        e.replay = Some(replay_capture(&streams, case.wire_bytes_per_event(), events_needed)?);
        // `RunningSystem` leaves the run's time limit to `tessera run`: here the front ends
        // keep it.
        e.limits.seconds = cfg.run.seconds;
    }
    // Not a key of the file: a unit that cannot reach its peer fails well within the drain.
    for ru in &mut plan.rus {
        ru.connect_timeout = Duration::from_secs(10);
    }
    for bu in &mut plan.bus {
        bu.connect_timeout = Duration::from_secs(10);
    }
    if case.output == BuOutput::IngestOnly {
        // Case (b) measures the RU's receive path alone, which no system file describes: its
        // RU keeps no EVM and sends nothing, and the BU the file needed goes.
        plan.bus.clear();
        plan.rus[0].evm = None;
        plan.rus[0].ingest_only = true;
    }
    Ok(plan)
}

/// The live figures at one moment.
struct Snapshot {
    at: Instant,
    fragments: u64,
    built: u64,
    ru_cpu_ns: Vec<u64>,
    bu_cpu_ns: u64,
    process: ProcessTime,
}

fn snapshot(rus: &[Arc<UnitStats>], bus: &[Arc<UnitStats>]) -> Result<Snapshot, BenchError> {
    Ok(Snapshot {
        at: Instant::now(),
        fragments: rus.iter().map(|s| s.fragments.get()).sum(),
        built: bus.iter().map(|s| s.events_built.get()).sum(),
        ru_cpu_ns: rus.iter().map(|s| s.loop_cpu_ns.get()).collect(),
        bu_cpu_ns: bus.iter().map(|s| s.loop_cpu_ns.get()).sum(),
        process: ProcessTime::try_now().map_err(io_error("reading the process's CPU clock"))?,
    })
}

/// Runs one case: starts the system, measures a window, stops the trigger, drains, checks that
/// every unit ended cleanly and every event was built.
pub fn run_case(case: &EvbCase) -> Result<EvbMeasured, BenchError> {
    case.validate()?;
    let mut budget = case.budget;
    let ram_disk = match case.output {
        BuOutput::Discard | BuOutput::IngestOnly => None,
        BuOutput::RamDisk { .. } => {
            budget.bytes = budget.bytes.min(RAM_DISK_MAX_BYTES);
            Some(
                tempfile::Builder::new()
                    .prefix("tessera-bench-evb-")
                    .tempdir_in(RAM_DISK)
                    .map_err(io_error(format!("creating a directory in {RAM_DISK}")))?,
            )
        }
    };
    // Discarding BUs never touch their directory; give them one that does not exist.
    let dir = ram_disk.as_ref().map_or_else(|| Path::new("/nonexistent-tessera-bench").to_owned(), |d| d.path().into());
    let system = RunningSystem::start(plan(case, &dir)?).map_err(|e| BenchError::System(e.to_string()))?;
    let (rus, bus) = (system.ru_stats.clone(), system.bu_stats.clone());
    let deadline = Instant::now() + Duration::from_secs_f64(budget.seconds) + SLACK;
    let warm_up = WARM_UP.min(Duration::from_secs_f64(budget.seconds / 5.0));
    let per_event = case.wire_bytes_per_event() as f64;
    let streams = case.streams as f64;
    let (mut first, mut begin, mut end) = (None::<Instant>, None::<Snapshot>, None::<Snapshot>);
    while Instant::now() < deadline && !system.finished() {
        std::thread::sleep(SAMPLE_INTERVAL);
        if rus.iter().chain(&bus).any(|s| s.failed()) {
            break;
        }
        let s = snapshot(&rus, &bus)?;
        let Some(b) = &begin else {
            // Set-up ends when the first events are built: until then the RUs only fill their
            // buffers (and in a debug build, that takes a while).
            let started = if case.output == BuOutput::IngestOnly { s.fragments > 0 } else { s.built > 0 };
            if started && s.at - *first.get_or_insert(s.at) >= warm_up {
                begin = Some(s);
            }
            continue;
        };
        let bytes = (s.fragments - b.fragments) as f64 * per_event / streams;
        if (s.at - b.at).as_secs_f64() >= budget.seconds || bytes >= budget.bytes as f64 {
            end = Some(s);
            break;
        }
    }
    system.stop();
    let outcome = system.wait(DRAIN_TIMEOUT);
    drop(ram_disk);
    if !outcome.clean() {
        let errors: Vec<String> = outcome
            .rus
            .iter()
            .filter_map(|r| r.as_ref().err().map(ToString::to_string))
            .chain(outcome.bus.iter().filter_map(|b| b.as_ref().err().map(ToString::to_string)))
            .chain(outcome.emulators.iter().filter_map(|e| e.as_ref().err().map(ToString::to_string)))
            .chain(outcome.problems.iter().take(3).cloned())
            .collect();
        return Err(BenchError::System(format!("{}: {}", case.label(), errors.join("; "))));
    }
    let (Some(b), Some(e)) = (begin, end) else {
        return Err(BenchError::Timeout(format!("{}: no measurement window within the budget", case.label())));
    };
    let c = outcome.conservation();
    if case.output != BuOutput::IngestOnly && (!c.holds || c.built != c.triggered) {
        return Err(BenchError::System(format!(
            "{}: {} events triggered, {} built, lost {:?}",
            case.label(),
            c.triggered,
            c.built,
            c.lost
        )));
    }
    let fragments = e.fragments - b.fragments;
    Ok(EvbMeasured {
        case: *case,
        fragments,
        wire_bytes: (fragments as f64 * per_event / streams) as u64,
        events_built: e.built - b.built,
        seconds: (e.at - b.at).as_secs_f64(),
        ru_cpu_seconds: e.ru_cpu_ns.iter().zip(&b.ru_cpu_ns).map(|(e, b)| e.saturating_sub(*b) as f64 / 1e9).collect(),
        bu_cpu_seconds: e.bu_cpu_ns.saturating_sub(b.bu_cpu_ns) as f64 / 1e9,
        process_cpu_seconds: e.process.duration_since(b.process).as_secs_f64(),
        triggered: c.triggered,
        built: c.built,
        problems: outcome.problem_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(rus: usize, bus: usize, streams: usize, output: BuOutput) -> EvbCase {
        EvbCase { rus, bus, streams, fragment_bytes: 2048, output, budget: NetBudget { seconds: 0.3, bytes: 64 << 20 } }
    }

    #[test]
    fn feds_are_split_over_the_rus_with_the_trigger_on_ru_0() {
        let case = tiny(3, 1, 8, BuOutput::Discard);
        assert_eq!(case.feds(), vec![vec![1024, 0, 1], vec![2, 3, 4], vec![5, 6]]);
        assert_eq!(tiny(1, 1, 3, BuOutput::Discard).feds(), vec![vec![1024, 0, 1]]);
        assert_eq!(case.wire_bytes_per_event(), 968 + 7 * 2064);
        assert_eq!(case.ru_memory_bytes(), (3 * 8) << 20);
    }

    #[test]
    fn bad_cases_are_refused_before_anything_runs() {
        assert!(matches!(run_case(&tiny(0, 1, 4, BuOutput::Discard)), Err(BenchError::BadCase(_))));
        assert!(matches!(run_case(&tiny(3, 1, 2, BuOutput::Discard)), Err(BenchError::BadCase(_))));
        let w = BuOutput::RamDisk { writer_threads: 0 };
        assert!(matches!(run_case(&tiny(1, 1, 4, w)), Err(BenchError::BadCase(_))));
    }

    #[test]
    fn a_discarding_chain_builds_every_event_it_triggers() {
        let m = run_case(&tiny(2, 2, 5, BuOutput::Discard)).unwrap();
        assert!(m.fragments > 0 && m.events_built > 0 && m.seconds > 0.0, "{m:?}");
        assert_eq!(m.triggered, m.built);
        assert_eq!(m.ru_cpu_seconds.len(), 2);
        assert!(m.ru_cpu_seconds.iter().all(|&s| s > 0.0), "{m:?}");
    }

    #[test]
    fn a_writing_chain_leaves_nothing_on_the_ram_disk() {
        let before = std::fs::read_dir(RAM_DISK).unwrap().count();
        let m = run_case(&tiny(1, 1, 3, BuOutput::RamDisk { writer_threads: 2 })).unwrap();
        // A debug build writes slowly (CRC-32C unoptimised): the window may see nothing built.
        assert!(m.built > 0 && m.triggered == m.built, "{m:?}");
        let left: Vec<_> = std::fs::read_dir(RAM_DISK)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("tessera-bench-evb-"))
            .collect();
        assert!(left.is_empty(), "{left:?} (there were {before} entries before)");
    }
}
