//! Live figures of a running unit, shared with whoever shows progress: plain atomics that the
//! unit's loop stores and a monitor loads, so that neither waits for the other.

use crate::state::{Transition, UnitState};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tessera_fu::resources::keys;

/// How often a unit's loop reads its thread's CPU clock into [`UnitStats::loop_cpu_ns`].
pub const CPU_SAMPLE_INTERVAL: Duration = Duration::from_millis(1);

/// Most problem reports a unit keeps; later ones are only counted.
pub const MAX_PROBLEMS_KEPT: usize = 100;

/// Why a unit holds back, as a stable key for operators and monitoring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Throttle {
    /// Nothing holds the unit back.
    None = 0,
    /// BU: its RAM disk is above the high-water mark; it asks for no events until below the low
    /// mark.
    RamdiskHighWater = 1,
    /// RU: its receive buffers are full, waiting for events to be committed.
    BuffersFull = 2,
    /// BU: its store of received data is full, waiting for files to be written.
    StoreFull = 3,
    /// BU: fewer live FU processes than required; it asks for no events.
    NotEnoughFus = 4,
    /// BU: its farm lags too many lumi sections behind; it asks for no events.
    TooManyLsQueued = 5,
    /// BU: an FU's output disk is above its high-water mark; it asks for no events.
    FuOutputHigh = 6,
    /// BU: its FUs' resource summaries are all old; it asks for no events.
    ResourceSummaryStale = 7,
}

impl Throttle {
    /// Every reason a unit may hold back for (all but [`Throttle::None`]).
    pub const REASONS: [Throttle; 7] = [
        Throttle::RamdiskHighWater,
        Throttle::BuffersFull,
        Throttle::StoreFull,
        Throttle::NotEnoughFus,
        Throttle::TooManyLsQueued,
        Throttle::FuOutputHigh,
        Throttle::ResourceSummaryStale,
    ];

    /// The stable key.
    pub fn key(self) -> &'static str {
        match self {
            Throttle::None => "",
            Throttle::RamdiskHighWater => "RAMDISK_HIGH_WATER",
            Throttle::BuffersFull => "RU_BUFFERS_FULL",
            Throttle::StoreFull => "BU_STORE_FULL",
            Throttle::NotEnoughFus => keys::NOT_ENOUGH_FUS,
            Throttle::TooManyLsQueued => keys::TOO_MANY_LS_QUEUED,
            Throttle::FuOutputHigh => keys::FU_OUTPUT_HIGH,
            Throttle::ResourceSummaryStale => keys::RESOURCE_SUMMARY_STALE,
        }
    }

    /// The throttle of the filter farm's back-pressure.
    pub fn of_farm(pressure: &tessera_fu::resources::BackPressure) -> Self {
        use tessera_fu::resources::BackPressure as B;
        match pressure {
            B::NotEnoughFus { .. } => Throttle::NotEnoughFus,
            B::TooManyLsQueued { .. } => Throttle::TooManyLsQueued,
            B::FuOutputHigh { .. } => Throttle::FuOutputHigh,
            B::ResourceSummaryStale { .. } => Throttle::ResourceSummaryStale,
        }
    }

    fn from_code(code: u64) -> Self {
        Self::REASONS.into_iter().find(|t| *t as u64 == code).unwrap_or(Throttle::None)
    }
}

/// A counter or gauge.
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    /// Its value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    /// Sets it.
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed)
    }
    /// Adds to it.
    pub fn add(&self, v: u64) {
        self.0.fetch_add(v, Ordering::Relaxed);
    }
}

/// The figures of one unit. RUs fill the fragment figures, the EVM the event figures, BUs the
/// file figures.
#[derive(Debug, Default)]
pub struct UnitStats {
    /// FED fragments received.
    pub fragments: Gauge,
    /// Their bytes, FED header to trailer.
    pub fragment_bytes: Gauge,
    /// Fragments that failed a check (CRC-16, FED id) and were passed on flagged.
    pub corrupt_fragments: Gauge,
    /// FEROL streams that could not be read on (garbage, a fragment cut short).
    pub broken_streams: Gauge,
    /// Events whose fragments the RU holds.
    pub events_buffered: Gauge,
    /// Receive chunks holding fragments, and the pool's size.
    pub chunks_used: Gauge,
    /// The pool's size.
    pub chunks_total: Gauge,
    /// Events triggered (EVM).
    pub triggered: Gauge,
    /// Events committed (EVM).
    pub committed: Gauge,
    /// Events reassigned after a BU was lost (EVM).
    pub reassigned: Gauge,
    /// Events lost because they came after their lumi section was closed (EVM).
    pub lost_lumi_closed: Gauge,
    /// Events built (BU).
    pub events_built: Gauge,
    /// Events built with a part missing (BU).
    pub incomplete_events: Gauge,
    /// Events published in files (BU).
    pub events_published: Gauge,
    /// Files published (BU).
    pub files_published: Gauge,
    /// Bytes of published files (BU).
    pub bytes_published: Gauge,
    /// Bytes of received data held until written (BU).
    pub store_bytes: Gauge,
    /// Events the BU holds, from request to publication.
    pub events_in_flight: Gauge,
    /// How full the file system of the BU's run directory is, in percent (BU).
    pub ramdisk_used_percent: Gauge,
    /// FU processes whose resource summaries are live (BU, with a filter farm).
    pub fu_processes: Gauge,
    /// Their free processing slots (BU, with a filter farm).
    pub fu_free_slots: Gauge,
    /// Lumi sections the farm lags behind, at its most lagging FU (BU, with a filter farm).
    pub fu_queued_lumi_sections: Gauge,
    /// Bytes per second the farm writes into its outputs (BU, with a filter farm).
    pub fu_output_bytes_per_s: Gauge,
    /// Data messages sent or received.
    pub data_messages: Gauge,
    /// Control messages sent.
    pub control_messages: Gauge,
    /// CPU time of the unit's loop thread since that thread started, in ns (its thread CPU
    /// clock, `clock_gettime`), read about every [`CPU_SAMPLE_INTERVAL`]. Benchmarks take the
    /// difference over a window.
    pub loop_cpu_ns: Gauge,
    /// Beats of the unit's loop: it adds one at most every [`CPU_SAMPLE_INTERVAL`] while it
    /// turns, and it turns at least every few ms even when idle, so a count that stops moving
    /// means a stalled loop (a watchdog compares it over seconds).
    pub heartbeats: Gauge,
    throttle: Gauge,
    state: Gauge,
    failed: Gauge,
    problems: Mutex<(Vec<String>, u64)>,
}

impl UnitStats {
    /// Sets why the unit holds back.
    pub fn set_throttle(&self, t: Throttle) {
        self.throttle.set(t as u64)
    }

    /// Why the unit holds back now.
    pub fn throttle(&self) -> Throttle {
        Throttle::from_code(self.throttle.get())
    }

    /// Marks the unit as ended by an error.
    pub fn set_failed(&self) {
        self.failed.set(1);
        self.transition(Transition::Fail);
    }

    /// Where the unit is in its life.
    pub fn state(&self) -> UnitState {
        UnitState::from_code(self.state.get())
    }

    /// Moves the unit's state; a transition its state does not allow is reported as a problem
    /// (a bug in the unit's driver) and changes nothing.
    pub fn transition(&self, transition: Transition) {
        match self.state().apply(transition) {
            Ok(next) => self.state.set(next as u64),
            Err(e) => self.problem(format!("state machine: {e}")),
        }
    }

    /// Ends a unit that ran to its end: drained if it was not yet, then halted.
    pub fn end_cleanly(&self) {
        if self.state() == UnitState::Enabled {
            self.transition(Transition::Stop);
        }
        if self.state() == UnitState::Draining {
            self.transition(Transition::Drained);
        }
        self.transition(Transition::Halt);
    }

    /// Whether the unit ended with an error.
    pub fn failed(&self) -> bool {
        self.failed.get() != 0
    }

    /// Records a problem for the run's report (the first [`MAX_PROBLEMS_KEPT`] are kept).
    pub fn problem(&self, what: String) {
        let mut p = self.problems.lock().unwrap_or_else(|e| e.into_inner());
        p.1 += 1;
        if p.0.len() < MAX_PROBLEMS_KEPT {
            p.0.push(what);
        }
    }

    /// The problems kept, and how many there were in all.
    pub fn problems(&self) -> (Vec<String>, u64) {
        self.problems.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How many problems the unit has reported, without copying their texts.
    pub fn problem_count(&self) -> u64 {
        self.problems.lock().unwrap_or_else(|e| e.into_inner()).1
    }
}

/// Reads the calling thread's CPU clock into [`UnitStats::loop_cpu_ns`] and beats
/// [`UnitStats::heartbeats`], at most once per [`CPU_SAMPLE_INTERVAL`] (the clock is a system
/// call; the loop that calls this runs far more often).
#[derive(Debug, Default)]
pub(crate) struct CpuSampler {
    last: Option<Instant>,
}

impl CpuSampler {
    /// Samples the clock if the last sample is old enough (or `force`).
    pub(crate) fn sample(&mut self, stats: &UnitStats, force: bool) {
        if !force && self.last.is_some_and(|t| t.elapsed() < CPU_SAMPLE_INTERVAL) {
            return;
        }
        self.last = Some(Instant::now());
        stats.heartbeats.add(1);
        if let Ok(t) = cpu_time::ThreadTime::try_now() {
            stats.loop_cpu_ns.set(t.as_duration().as_nanos() as u64);
        }
    }
}
