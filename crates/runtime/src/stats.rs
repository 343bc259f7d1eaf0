//! Live figures of a running unit, shared with whoever shows progress: plain atomics that the
//! unit's loop stores and a monitor loads, so that neither waits for the other.

use crate::state::{Transition, UnitState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use tessera_evb::types::FedId;
use tessera_rundir::resources::keys;

/// How often a unit's loop reads its thread's CPU clock into [`UnitStats::loop_cpu_ns`].
pub const CPU_SAMPLE_INTERVAL: Duration = Duration::from_millis(1);

/// Most problem reports a unit keeps; later ones are only counted.
pub const MAX_PROBLEMS_KEPT: usize = 100;

/// How long a sub-state stays shown after the unit last saw its cause. Its causes are often
/// momentary (one event sent without a FED, one frame that could not be sent): shown only while
/// they last, an operator who looks once a second would never see them.
pub const SUB_STATE_HOLD: Duration = Duration::from_secs(5);

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
    /// BU: its store of received data is full, or full with what it has asked for: it asks for
    /// no more events until files are written.
    StoreFull = 3,
    /// BU: fewer live FU processes than required; it asks for no events.
    NotEnoughFus = 4,
    /// BU: its farm lags too many lumi sections behind; it asks for no events.
    TooManyLsQueued = 5,
    /// BU: an FU's output disk is above its high-water mark; it asks for no events.
    FuOutputHigh = 6,
    /// BU: its FUs' resource summaries are all old; it asks for no events.
    ResourceSummaryStale = 7,
    /// BU: its RAM disk has no room for more: what is on it and what the BU holds to write
    /// would pass the high-water mark (it asks for no events), or a file does not fit, or a
    /// write found the disk full (the file waits, whole, until there is room).
    RamdiskFull = 8,
    /// Push: the unit holds events past its high-water mark (a BU those it builds and writes,
    /// an RU those it has not yet sent): the trigger holds.
    PushHighWater = 9,
    /// Push: an RU's FED streams wait for the slowest RU to come within the window of event
    /// numbers the RUs keep (`push.window_events`): the trigger holds for it.
    PushWindow = 10,
}

impl Throttle {
    /// Every reason a unit may hold back for (all but [`Throttle::None`]).
    pub const REASONS: [Throttle; 10] = [
        Throttle::RamdiskHighWater,
        Throttle::RamdiskFull,
        Throttle::BuffersFull,
        Throttle::StoreFull,
        Throttle::NotEnoughFus,
        Throttle::TooManyLsQueued,
        Throttle::FuOutputHigh,
        Throttle::ResourceSummaryStale,
        Throttle::PushHighWater,
        Throttle::PushWindow,
    ];

    /// The stable key.
    pub fn key(self) -> &'static str {
        match self {
            Throttle::None => "",
            Throttle::RamdiskHighWater => "RAMDISK_HIGH_WATER",
            Throttle::RamdiskFull => "RAMDISK_FULL",
            Throttle::BuffersFull => "RU_BUFFERS_FULL",
            Throttle::StoreFull => "BU_STORE_FULL",
            Throttle::NotEnoughFus => keys::NOT_ENOUGH_FUS,
            Throttle::TooManyLsQueued => keys::TOO_MANY_LS_QUEUED,
            Throttle::FuOutputHigh => keys::FU_OUTPUT_HIGH,
            Throttle::ResourceSummaryStale => keys::RESOURCE_SUMMARY_STALE,
            Throttle::PushHighWater => "PUSH_HIGH_WATER",
            Throttle::PushWindow => "PUSH_WINDOW",
        }
    }

    /// The throttle of the filter farm's back-pressure.
    pub fn of_farm(pressure: &tessera_rundir::resources::FarmPressure) -> Self {
        use tessera_rundir::resources::FarmPressure as B;
        match pressure {
            B::NotEnoughFus { .. } => Throttle::NotEnoughFus,
            B::TooManyLsQueued { .. } => Throttle::TooManyLsQueued,
            B::FuOutputHigh { .. } => Throttle::FuOutputHigh,
            B::ResourceSummaryStale { .. } => Throttle::ResourceSummaryStale,
        }
    }

    /// What it means, in one sentence for an operator ("" for [`Throttle::None`]).
    pub fn sentence(self) -> &'static str {
        match self {
            Throttle::None => "",
            Throttle::RamdiskHighWater => "The BU's RAM disk is above its high-water mark: it asks for no events.",
            Throttle::RamdiskFull => {
                "The BU's RAM disk has no room for more than it holds: it asks for no events, and files wait for room."
            }
            Throttle::BuffersFull => "The RU's receive buffers are full: it waits for events to be committed.",
            Throttle::StoreFull => {
                "The BU holds (or has asked for) as much data as its store may: it asks for no more events until files are written."
            }
            Throttle::NotEnoughFus => "Fewer FU processes are alive than required: the BU asks for no events.",
            Throttle::TooManyLsQueued => {
                "The filter farm lags too many lumi sections behind: the BU asks for no events."
            }
            Throttle::FuOutputHigh => "An FU's output disk is above its high-water mark: the BU asks for no events.",
            Throttle::ResourceSummaryStale => {
                "No FU has published its resource summary recently: the BU asks for no events."
            }
            Throttle::PushHighWater => {
                "Push: a unit holds events past its high-water mark; the trigger holds until it has room."
            }
            Throttle::PushWindow => {
                "Push: an RU is a window of events ahead of the slowest RU and waits for it; the trigger holds."
            }
        }
    }

    fn from_code(code: u64) -> Self {
        Self::REASONS.into_iter().find(|t| *t as u64 == code).unwrap_or(Throttle::None)
    }
}

/// Something wrong with a running unit that an operator should see besides why it holds back
/// ([`Throttle`]), as a stable key. Each is shown for [`SUB_STATE_HOLD`] after its cause was
/// last seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubState {
    /// RU: a FED sent an event out of sequence; it is ignored for the rest of the run.
    SyncLoss = 0,
    /// RU: events were sent on without a FED (a FED given up on after the give-up time or
    /// masked, or one that lost sync, disconnected or whose stream broke). BU: events were built with a part missing.
    MissingData = 1,
    /// RU or EVM: data or messages for a peer could not be sent: no connection to it, or it has
    /// taken nothing for [`BLOCKED_AFTER`].
    Blocked = 2,
    /// RU: a FED's stream closed cleanly before the run's end; the FED is left out for the rest
    /// of the run (like [`SubState::SyncLoss`], the RU says so until its end).
    FedDisconnected = 3,
    /// RU: some of its FEDs' streams have not connected yet: the run does not start without
    /// them (`ru.connect_timeout_s` bounds the wait). Shown while it lasts, not held after.
    StreamsMissing = 4,
    /// RU: an event has waited for a FED's fragment for [`FED_SILENT_AFTER`] or more: the FED's
    /// stream brings nothing, and the trigger is held until it sends, ends or is masked.
    FedSilent = 5,
    /// RU: a FED was masked by an operator; its events go on without it for the rest of the run.
    FedMasked = 6,
}

/// How long an event waits for a FED before its RU says that FED is silent
/// ([`SubState::FedSilent`]): longer than a busy machine keeps a front end from being scheduled,
/// mostly.
pub const FED_SILENT_AFTER: Duration = Duration::from_secs(1);

/// How long a connection may take no bytes while bytes wait for it before its unit is
/// [`SubState::Blocked`].
pub const BLOCKED_AFTER: Duration = Duration::from_secs(1);

impl SubState {
    /// Every sub-state.
    pub const ALL: [SubState; 7] = [
        SubState::SyncLoss,
        SubState::MissingData,
        SubState::Blocked,
        SubState::FedDisconnected,
        SubState::StreamsMissing,
        SubState::FedSilent,
        SubState::FedMasked,
    ];

    /// The stable key.
    pub fn key(self) -> &'static str {
        match self {
            SubState::SyncLoss => "SYNC_LOSS",
            SubState::MissingData => "MISSING_DATA",
            SubState::Blocked => "BLOCKED",
            SubState::FedDisconnected => "FED_DISCONNECTED",
            SubState::StreamsMissing => "STREAMS_MISSING",
            SubState::FedSilent => "FED_SILENT",
            SubState::FedMasked => "FED_MASKED",
        }
    }

    /// What it means, in one sentence for an operator.
    pub fn sentence(self) -> &'static str {
        match self {
            SubState::SyncLoss => "A FED sent an event out of sequence: its data are left out for the rest of the run.",
            SubState::MissingData => "Events are built or sent on without the data of some FEDs.",
            SubState::Blocked => "Data for a peer cannot be sent: no connection to it, or it takes nothing.",
            SubState::FedDisconnected => {
                "A FED's stream closed before the run's end: its data are left out for the rest of the run."
            }
            SubState::StreamsMissing => "Some FEDs' streams have not connected yet: the run starts once every one has.",
            SubState::FedSilent => {
                "An event waits for a FED whose stream brings nothing: the trigger is held until it sends, ends or is masked."
            }
            SubState::FedMasked => {
                "A FED was masked by an operator: its events go on without it for the rest of the run."
            }
        }
    }
}

/// Why a FED's fragment counts as an error, as a stable key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FedError {
    /// The fragment failed a check (CRC-16, FED id, trailer) and was passed on flagged.
    Corrupt = 0,
    /// The fragment came after its event was sent on; it was dropped.
    Late = 1,
    /// An event was sent on without this FED's fragment (because the FED lost sync,
    /// disconnected, its stream broke, it was masked, or it was given up on after the give-up
    /// time the system sets).
    Missing = 2,
    /// The FED sent an event out of sequence: it is ignored for the rest of the run.
    SyncLost = 3,
    /// The FED's stream could not be read on (garbage, a fragment cut short).
    StreamBroken = 4,
    /// The FED's stream closed cleanly (at a fragment boundary) before the run's end: counted
    /// once, when it closes.
    Disconnected = 5,
    /// An operator masked the FED: counted once, when it is masked.
    Masked = 6,
    /// Its stream brought nothing for the give-up time (`ru.silent_fed_give_up_ms`, off by
    /// default): counted each time events stopped waiting for it.
    GivenUp = 7,
}

impl FedError {
    /// Every reason.
    pub const ALL: [FedError; 8] = [
        FedError::Corrupt,
        FedError::Late,
        FedError::Missing,
        FedError::SyncLost,
        FedError::StreamBroken,
        FedError::Disconnected,
        FedError::Masked,
        FedError::GivenUp,
    ];

    /// The stable key.
    pub fn key(self) -> &'static str {
        match self {
            FedError::Corrupt => "CORRUPT",
            FedError::Late => "LATE",
            FedError::Missing => "MISSING",
            FedError::SyncLost => "SYNC_LOST",
            FedError::StreamBroken => "STREAM_BROKEN",
            FedError::Disconnected => "DISCONNECTED",
            FedError::Masked => "MASKED",
            FedError::GivenUp => "GIVEN_UP",
        }
    }
}

/// Error counts per FED of an RU, one row per FED in the RU's order, made when the node is set
/// up: counting is an atomic add at the FED's index, with no lock and no allocation.
#[derive(Debug, Default)]
pub struct FedErrors {
    feds: Vec<FedId>,
    counts: Vec<[AtomicU64; FedError::ALL.len()]>,
}

impl FedErrors {
    /// Rows for `feds`, all zero.
    pub fn new(feds: &[FedId]) -> Self {
        FedErrors { feds: feds.to_vec(), counts: feds.iter().map(|_| Default::default()).collect() }
    }

    /// Counts `n` errors of `kind` for the FED at `index` in the RU's list (an index out of
    /// range counts nothing).
    pub fn add(&self, index: usize, kind: FedError, n: u64) {
        if let Some(row) = self.counts.get(index) {
            row[kind as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The index of `fed` in the RU's list.
    pub fn index_of(&self, fed: FedId) -> Option<usize> {
        self.feds.iter().position(|&f| f == fed)
    }

    /// The count of `kind` for `fed` (0 for a FED not in the list).
    pub fn get(&self, fed: FedId, kind: FedError) -> u64 {
        self.index_of(fed).map_or(0, |i| self.counts[i][kind as usize].load(Ordering::Relaxed))
    }

    /// The FEDs with at least one error, in the RU's order, with their counts by
    /// [`FedError::ALL`].
    pub fn with_errors(&self) -> Vec<(FedId, [u64; FedError::ALL.len()])> {
        self.feds
            .iter()
            .zip(&self.counts)
            .map(|(&fed, row)| (fed, std::array::from_fn(|k| row[k].load(Ordering::Relaxed))))
            .filter(|(_, counts)| counts.iter().any(|&n| n > 0))
            .collect()
    }
}

/// Milliseconds on a monotonic clock of the process, from 1 (0 means "never").
fn monotonic_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
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
    /// Push: events shipped incomplete because they aged (BU), a part of one never came.
    pub aged_events: Gauge,
    /// Push: super-fragments that came after their event was shipped, dropped (BU).
    pub late_parts: Gauge,
    /// Push: super-fragments not sent because their BU was excluded or could not be reached
    /// (RU).
    pub parts_unsent: Gauge,
    /// Push: BUs excluded from the run after their loss (RU 0).
    pub bus_excluded: Gauge,
    /// Push: events the destination function gave the BUs excluded before their exclusion
    /// (RU 0): those each did not publish are lost with it.
    pub events_to_excluded: Gauge,
    /// Events (orbit mode: orbits) published in files in the run, every incarnation's (BU).
    pub events_published: Gauge,
    /// Files published where readers see them (BU).
    pub files_published: Gauge,
    /// Orbit mode: orbit blocks the BU left out of their orbits (BU), which made them
    /// incomplete.
    pub orbit_blocks_left_out: Gauge,
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
    /// FU CPU time behind a BU, in ms: user and system time of every FU process that has
    /// published a resource summary in this run, as it last said (BU, with a filter farm).
    pub fu_cpu_ms: Gauge,
    /// The highest lumi section the BU has written a file of (BU).
    pub lumi_section: Gauge,
    /// Lumi sections the BU has closed (written their end-of-lumi record) (BU).
    pub lumi_sections_closed: Gauge,
    /// The highest lumi section the BU has closed (BU).
    pub last_closed_lumi_section: Gauge,
    /// Events the BU published in it (BU).
    pub last_closed_lumi_section_events: Gauge,
    /// Error counts per FED (RU; empty for other units).
    pub fed_errors: FedErrors,
    /// Data messages sent or received.
    pub data_messages: Gauge,
    /// Control messages sent.
    pub control_messages: Gauge,
    /// Protocol connections refused before their peer reached the unit: the caller sent no
    /// valid link opening (no proof of the run's link key, another run, not a Tessera
    /// connection), sent none within the connect time-out, or is not a peer that may call this
    /// unit (see docs/formats.md §13).
    pub links_refused: Gauge,
    /// CPU time of the unit's loop thread since that thread started, in ns (its thread CPU
    /// clock, `clock_gettime`), read about every [`CPU_SAMPLE_INTERVAL`]. Benchmarks take the
    /// difference over a window.
    pub loop_cpu_ns: Gauge,
    /// EVM (RU 0's node): 1 once the run has started, every stream of every RU connected.
    pub run_started: Gauge,
    /// EVM: when the trigger began (the run started), in µs since the Unix epoch; 0 before.
    pub trigger_began_unix_us: Gauge,
    /// EVM: when the trigger last triggered an event, in µs since the Unix epoch; 0 before.
    /// With `trigger_began_unix_us` it gives the time the trigger ran, which rates are over:
    /// the drain after its last event and the wait for the streams before its first are not.
    pub trigger_latest_unix_us: Gauge,
    /// RU: the FED an event has waited for longest, plus one (0 while no event waits).
    pub waiting_fed: Gauge,
    /// RU: how long that event has waited for it, in ms, as last published.
    pub waiting_ms: Gauge,
    /// RU: the FEDs whose streams have not connected yet.
    streams_missing: Mutex<Vec<FedId>>,
    /// Beats of the unit's loop: it adds one at most every [`CPU_SAMPLE_INTERVAL`] while it
    /// turns, and it turns at least every few ms even when idle, so a count that stops moving
    /// means a stalled loop (a watchdog compares it over seconds).
    pub heartbeats: Gauge,
    throttle: Gauge,
    /// When each sub-state's cause was last seen, by [`SubState`] (see [`monotonic_ms`]).
    sub_state_seen: [Gauge; SubState::ALL.len()],
    state: Gauge,
    failed: Gauge,
    problems: Mutex<(Vec<String>, u64)>,
}

impl UnitStats {
    /// The figures of an RU that reads `feds`, in this order.
    pub fn for_ru(feds: &[FedId]) -> Self {
        UnitStats { fed_errors: FedErrors::new(feds), ..UnitStats::default() }
    }

    /// RU: the FEDs whose streams have not connected yet, as last said.
    pub fn streams_missing(&self) -> Vec<FedId> {
        self.streams_missing.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// RU: says which FEDs' streams have not connected yet.
    pub fn set_streams_missing(&self, feds: Vec<FedId>) {
        *self.streams_missing.lock().unwrap_or_else(|e| e.into_inner()) = feds;
    }

    /// RU: the FED an event has waited for longest and for how long, if one waits.
    pub fn waiting(&self) -> Option<(FedId, Duration)> {
        let fed = self.waiting_fed.get().checked_sub(1)?;
        Some((fed as FedId, Duration::from_millis(self.waiting_ms.get())))
    }

    /// Says that the cause of `sub_state` is seen now: it is shown for [`SUB_STATE_HOLD`].
    pub fn saw(&self, sub_state: SubState) {
        self.sub_state_seen[sub_state as usize].set(monotonic_ms());
    }

    /// The sub-states whose cause was seen within [`SUB_STATE_HOLD`], in [`SubState::ALL`]'s
    /// order.
    pub fn sub_states(&self) -> Vec<SubState> {
        self.sub_states_at(monotonic_ms())
    }

    fn sub_states_at(&self, now_ms: u64) -> Vec<SubState> {
        let hold = SUB_STATE_HOLD.as_millis() as u64;
        SubState::ALL
            .into_iter()
            .filter(|&s| {
                // Streams missing is a state, shown while it lasts, not held after.
                if s == SubState::StreamsMissing {
                    return !self.streams_missing().is_empty();
                }
                let seen = self.sub_state_seen[s as usize].get();
                seen != 0 && now_ms.saturating_sub(seen) <= hold
            })
            .collect()
    }

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

    /// Ends a unit that drained its run but whose run failed (the EVM after its trigger stream
    /// broke): its state is Failed. [`UnitStats::failed`] stays false: the unit ended its part
    /// and leaves no other unit waiting for it, so nothing is to be stopped on its account (the
    /// BUs still close their files after it).
    pub fn end_failed_after_drain(&self) {
        self.transition(Transition::Fail);
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

    /// The problems kept from the `first` on: what someone who has said the first `first` still
    /// has to say.
    pub fn problems_from(&self, first: usize) -> Vec<String> {
        let p = self.problems.lock().unwrap_or_else(|e| e.into_inner());
        p.0.get(first..).unwrap_or_default().to_vec()
    }

    /// How many problems the unit has reported, without copying their texts.
    pub fn problem_count(&self) -> u64 {
        self.problems.lock().unwrap_or_else(|e| e.into_inner()).1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sub_state_is_shown_for_its_hold_after_its_cause_was_last_seen() {
        let stats = UnitStats::default();
        assert!(stats.sub_states().is_empty());
        stats.saw(SubState::Blocked);
        stats.saw(SubState::SyncLoss);
        assert_eq!(stats.sub_states(), [SubState::SyncLoss, SubState::Blocked], "in a fixed order");
        // Blocked seen at 1000 ms, sync loss later, at 4000 ms.
        let hold = SUB_STATE_HOLD.as_millis() as u64;
        stats.sub_state_seen[SubState::Blocked as usize].set(1000);
        stats.sub_state_seen[SubState::SyncLoss as usize].set(4000);
        assert_eq!(stats.sub_states_at(1000 + hold), [SubState::SyncLoss, SubState::Blocked]);
        assert_eq!(stats.sub_states_at(1001 + hold), [SubState::SyncLoss], "Blocked's hold has passed");
        assert!(stats.sub_states_at(4001 + hold).is_empty());
        let keys: Vec<&str> = SubState::ALL.iter().map(|s| s.key()).collect();
        assert_eq!(
            keys,
            ["SYNC_LOSS", "MISSING_DATA", "BLOCKED", "FED_DISCONNECTED", "STREAMS_MISSING", "FED_SILENT", "FED_MASKED"]
        );
    }

    #[test]
    fn fed_errors_count_per_fed_and_list_only_feds_with_errors() {
        let errors = FedErrors::new(&[1024, 4, 7]);
        errors.add(1, FedError::Corrupt, 1);
        errors.add(1, FedError::Missing, 3);
        errors.add(9, FedError::Late, 1);
        assert_eq!(errors.get(4, FedError::Corrupt), 1);
        assert_eq!(errors.get(7, FedError::Corrupt), 0);
        assert_eq!(errors.with_errors(), [(4, [1, 0, 3, 0, 0, 0, 0, 0])]);
        let keys: Vec<&str> = FedError::ALL.iter().map(|k| k.key()).collect();
        assert_eq!(
            keys,
            ["CORRUPT", "LATE", "MISSING", "SYNC_LOST", "STREAM_BROKEN", "DISCONNECTED", "MASKED", "GIVEN_UP"]
        );
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
