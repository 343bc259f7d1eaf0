//! A whole system in one process: the front-end emulators, every RU (the first one with the
//! EVM) and every BU, each on its own threads, talking over loopback TCP exactly as they would
//! between hosts. This is what `tessera run` starts; the per-unit commands start the same nodes
//! one per process.

use crate::push_loss;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_emu::dth::{DthRunSummary, DthSenderConfig};
use tessera_emu::error::EmuError;
use tessera_emu::sender::{self, Held, RunSummary, SenderConfig, StopLine};
use tessera_evb::types::FedId;
use tessera_runtime::bu_node::{BuNode, BuNodeConfig, BuReport};
use tessera_runtime::ru_node::{Control, NodeError, RuNode, RuNodeConfig, RuReport};
use tessera_runtime::stats::{FedError, Throttle, UnitStats};

/// Events past the furthest FED at which a stop takes effect: far more than a stream sends in
/// the microseconds between looking at the streams and drawing the line.
pub const STOP_MARGIN_EVENTS: u64 = 1000;

/// What to start.
#[derive(Debug)]
pub struct SystemPlan {
    /// The RU nodes; the first is the EVM's.
    pub rus: Vec<RuNodeConfig>,
    /// The BU nodes.
    pub bus: Vec<BuNodeConfig>,
    /// The front-end emulators (their stop line is set here).
    pub emulators: Vec<SenderConfig>,
    /// Orbit mode: the DTH emulators (their stop line, in orbits, is set here).
    pub dth_emulators: Vec<DthSenderConfig>,
}

/// A system that runs.
pub struct RunningSystem {
    /// Live figures of each RU, the EVM's first.
    pub ru_stats: Vec<Arc<UnitStats>>,
    /// Live figures of each BU.
    pub bu_stats: Vec<Arc<UnitStats>>,
    controls: Vec<Control>,
    stop_line: Arc<StopLine>,
    rus: Vec<JoinHandle<Result<RuReport, NodeError>>>,
    bus: Vec<JoinHandle<Result<BuReport, NodeError>>>,
    emulators: Vec<JoinHandle<Result<RunSummary, EmuError>>>,
    dth_emulators: Vec<JoinHandle<Result<DthRunSummary, EmuError>>>,
    started: Instant,
}

/// Figures for a progress line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// Seconds since the start.
    pub seconds: f64,
    /// Events triggered.
    pub triggered: u64,
    /// Events published by the BUs.
    pub built: u64,
    /// Of those, each BU's.
    pub published_per_bu: Vec<u64>,
    /// Fragment bytes received by the RUs.
    pub fragment_bytes: u64,
    /// Receive chunks in use, of the total, over all RUs.
    pub chunks: (u64, u64),
    /// Bytes held in the BUs' frame stores.
    pub store_bytes: u64,
    /// Why units hold back, if any do.
    pub throttles: Vec<&'static str>,
    /// Problems reported so far.
    pub problems: u64,
    /// How long the emulated front ends have held the trigger so far (paced runs).
    pub held: Held,
    /// Lumi sections every BU has closed (the fewest any BU has): each BU closes every lumi
    /// section, so this is what the mergers can merge, counted as the run counts them.
    pub lumi_sections_closed: u64,
    /// Whether the run has started: every stream of every RU connected (the EVM says it).
    pub started: bool,
    /// How long ago the trigger began (`None` before): the run's seconds count from then, not
    /// from the units' start, which the streams' connecting follows.
    pub since_trigger_began_s: Option<f64>,
    /// Seconds from the trigger's beginning to its latest event: what its rate is over (the
    /// wait for the streams before, and the drain after, are not).
    pub trigger_seconds: f64,
    /// The FEDs whose streams have not connected yet, over all RUs.
    pub streams_missing: Vec<FedId>,
    /// The FED an event has waited for longest, over all RUs, and for how long.
    pub waiting: Option<(FedId, Duration)>,
    /// The machine and this process, as read at the figures' time (none where `/proc` is not).
    pub cpu: Option<crate::host_load::CpuSample>,
}

/// The trigger's clock from the EVM's figures: how long ago it began, and the seconds from then
/// to its latest event.
fn trigger_clock(evm: &UnitStats) -> (Option<f64>, f64) {
    let (began, latest) = (evm.trigger_began_unix_us.get(), evm.trigger_latest_unix_us.get());
    if began == 0 {
        return (None, 0.0);
    }
    let now = std::time::SystemTime::UNIX_EPOCH.elapsed().map_or(0, |d| d.as_micros() as u64);
    (Some(now.saturating_sub(began) as f64 / 1e6), latest.saturating_sub(began) as f64 / 1e6)
}

/// Why a unit of a system did not end with its report.
#[derive(Debug, thiserror::Error)]
pub enum UnitFailure {
    /// The unit ended with this error (boxed: a node's error is large).
    #[error(transparent)]
    Failed(Box<NodeError>),
    /// The unit was aborted by the system, for the reason given (the run was cut short, another
    /// unit failed, or the run did not drain in time).
    #[error("{source} ({why})")]
    Stopped {
        /// The unit's own error, which says only that it was aborted.
        source: Box<NodeError>,
        /// Why the system aborted it.
        why: &'static str,
    },
    /// The unit's thread panicked (a bug).
    #[error("the unit's thread panicked")]
    Panicked,
}

/// Why a front-end emulator of a system did not end with its summary.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorFailure {
    /// The emulator ended with this error.
    #[error(transparent)]
    Failed(#[from] EmuError),
    /// The emulator's thread panicked (a bug).
    #[error("the emulator's thread panicked")]
    Panicked,
}

/// How a system's run ended.
#[derive(Debug)]
pub struct Outcome {
    /// Each RU's end, the EVM's first.
    pub rus: Vec<Result<RuReport, UnitFailure>>,
    /// Each BU's end.
    pub bus: Vec<Result<BuReport, UnitFailure>>,
    /// Each emulator's end.
    pub emulators: Vec<Result<RunSummary, EmulatorFailure>>,
    /// Orbit mode: each DTH emulator's end.
    pub dth_emulators: Vec<Result<DthRunSummary, EmulatorFailure>>,
    /// Problems the units reported, the first ones of each unit.
    pub problems: Vec<String>,
    /// Problems reported in all.
    pub problem_count: u64,
    /// Wall time of the run.
    pub seconds: f64,
    /// The figures at the end.
    pub progress: Progress,
    /// Whether run control cut the run short ([`RunningSystem::cut_short`]): units were aborted
    /// on request, not because they failed.
    pub cut_short: bool,
    /// The error counts of every FED that has any, in the RUs' order.
    pub fed_errors: Vec<FedErrorCounts>,
}

/// One FED's error counts at the end of a run, as its RU counted them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FedErrorCounts {
    /// The FED.
    pub fed: FedId,
    /// Events its RU sent on without its fragment ([`FedError::Missing`]), whatever the reason.
    pub missing: u64,
    /// Its counts by reason key ([`FedError::key`]), those above 0, `MISSING` among them: the
    /// other keys say why events went without it (a lost sync, a broken stream, fragments that
    /// came late).
    pub errors: BTreeMap<String, u64>,
}

impl FedErrorCounts {
    /// The counts of every FED with at least one error, over `ru_stats`, in their order.
    pub fn of_units(ru_stats: &[Arc<UnitStats>]) -> Vec<FedErrorCounts> {
        ru_stats
            .iter()
            .flat_map(|s| s.fed_errors.with_errors())
            .map(|(fed, counts)| FedErrorCounts {
                fed,
                missing: counts[FedError::Missing as usize],
                errors: FedError::ALL
                    .into_iter()
                    .zip(counts)
                    .filter(|&(_, n)| n > 0)
                    .map(|(kind, n)| (kind.key().to_string(), n))
                    .collect(),
            })
            .collect()
    }
}

/// The conservation check of a run: every triggered event is built or counted lost by reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Conservation {
    /// Events the trigger issued (the EVM saw).
    pub triggered: u64,
    /// Events published in BU files.
    pub built: u64,
    /// Of those, events built whole: every FED of the system in them.
    pub built_complete: u64,
    /// Of those, events built with a part missing (flagged incomplete in their FRD header).
    pub built_incomplete: u64,
    /// Events lost, by reason key.
    pub lost: BTreeMap<String, u64>,
    /// Events published per BU.
    pub per_bu: Vec<u64>,
    /// Whether triggered = built + lost.
    pub holds: bool,
}

impl Outcome {
    /// The events the BUs published: the protocol's count, or in orbit mode (`orbits`) the
    /// events in the orbits they published.
    pub fn built_events(&self, orbits: bool) -> u64 {
        if !orbits {
            return self.conservation().built;
        }
        self.bus.iter().flatten().map(|b| b.orbit_events).sum()
    }

    /// Orbit mode: the orbits the BUs wrote in their published files (those with events).
    pub fn orbits_written(&self) -> u64 {
        self.bus.iter().flatten().map(|b| b.orbits_written).sum()
    }

    /// Whether every unit ended without an error, and the trigger stream did not break.
    pub fn clean(&self) -> bool {
        self.rus.iter().all(|r| r.as_ref().is_ok_and(|r| r.trigger_fault.is_none()))
            && self.bus.iter().all(Result::is_ok)
            && self.emulators.iter().all(Result::is_ok)
            && self.dth_emulators.iter().all(Result::is_ok)
    }

    /// The conservation figures. A unit that failed leaves events neither built nor accounted
    /// for: they are counted under `UNIT_FAILED`, and the check says whether that explains all.
    pub fn conservation(&self) -> Conservation {
        let triggered = self.progress.triggered;
        let per_bu: Vec<u64> = self.bus.iter().map(|b| b.as_ref().map_or(0, |r| r.events_published)).collect();
        let built: u64 = self.progress.built;
        let built_incomplete: u64 = self.bus.iter().flatten().map(|b| b.counters.incomplete_events).sum();
        let built_complete = built.saturating_sub(built_incomplete);
        let mut lost = BTreeMap::new();
        let closed =
            self.rus.first().and_then(|r| r.as_ref().ok()).and_then(|r| r.evm).map_or(0, |e| e.lost_lumi_closed);
        if closed > 0 {
            lost.insert("LUMI_SECTION_CLOSED".to_string(), closed);
        }
        // Push: a BU lost takes with it what it was given and did not publish.
        let excluded = self.rus.first().and_then(|r| r.as_ref().ok()).map_or(&[][..], |r| &r.excluded[..]);
        let per_bu_published = |bu: u16| self.progress.published_per_bu.get(usize::from(bu)).copied().unwrap_or(0);
        let bu_lost = push_loss::events_lost(excluded, per_bu_published);
        if bu_lost > 0 {
            lost.insert(push_loss::BU_LOST.to_string(), bu_lost);
        }
        if !self.clean() && triggered > built + closed + bu_lost {
            let why = if self.cut_short { "CUT_SHORT" } else { "UNIT_FAILED" };
            lost.insert(why.to_string(), triggered - built - closed - bu_lost);
        }
        let accounted = built + lost.values().sum::<u64>();
        Conservation { triggered, built, built_complete, built_incomplete, lost, per_bu, holds: accounted == triggered }
    }
}

impl RunningSystem {
    /// Starts every node and emulator. Listeners are bound already (in the plan), so the order
    /// does not matter: every unit keeps calling its peers until they answer.
    pub fn start(plan: SystemPlan) -> Result<Self, NodeError> {
        let stop_line = StopLine::new();
        let mut ru_stats = Vec::new();
        let mut controls = Vec::new();
        let mut rus = Vec::new();
        for (i, cfg) in plan.rus.into_iter().enumerate() {
            let node = RuNode::new(cfg)?;
            let stats = node.stats();
            ru_stats.push(stats.clone());
            controls.push(node.control());
            rus.push(spawn(format!("ru{i}"), move || flag_failure(&stats, || node.run())));
        }
        let mut bu_stats = Vec::new();
        let mut bus = Vec::new();
        for (i, cfg) in plan.bus.into_iter().enumerate() {
            let node = BuNode::new(cfg)?;
            let stats = node.stats();
            bu_stats.push(stats.clone());
            controls.push(node.control());
            bus.push(spawn(format!("bu{i}"), move || flag_failure(&stats, || node.run())));
        }
        let emulators = plan
            .emulators
            .into_iter()
            .enumerate()
            .map(|(i, mut cfg)| {
                cfg.stop = Some(stop_line.clone());
                spawn(format!("ferol{i}"), move || sender::run(cfg))
            })
            .collect();
        let dth_emulators = plan
            .dth_emulators
            .into_iter()
            .enumerate()
            .map(|(i, mut cfg)| {
                cfg.stop = Some(stop_line.clone());
                spawn(format!("dth{i}"), move || tessera_emu::dth::run(cfg))
            })
            .collect();
        Ok(RunningSystem {
            ru_stats,
            bu_stats,
            controls,
            stop_line,
            rus,
            bus,
            emulators,
            dth_emulators,
            started: Instant::now(),
        })
    }

    /// Stops the trigger: every FED stream ends after the same event, the EVM sees the trigger
    /// stream end there and drains the run. Returns the events each stream will have sent. The
    /// RUs are told where the streams end: a stream that ends before has failed.
    pub fn stop(&self) -> u64 {
        let events = self.stop_line.stop(STOP_MARGIN_EVENTS);
        for c in &self.controls[..self.ru_stats.len()] {
            c.streams_end_after(events);
        }
        events
    }

    /// Run control's handle on each RU, the EVM's first: to mask a FED, say
    /// ([`Control::mask_fed`]).
    pub fn ru_controls(&self) -> Vec<Control> {
        self.controls[..self.ru_stats.len()].to_vec()
    }

    /// When each generating front-end emulator started its trigger clock
    /// ([`StopLine::clock_starts`]): event `k` of the run (from 0) was due at such a start plus
    /// the `k`-th trigger time of the run's clock (`tessera bench protocols` measures latency
    /// from it). Empty until they start, and for replayed or DTH emulators.
    pub fn trigger_clock_starts(&self) -> Vec<Instant> {
        self.stop_line.clock_starts()
    }

    /// Whether every node has ended.
    pub fn finished(&self) -> bool {
        self.rus.iter().all(JoinHandle::is_finished) && self.bus.iter().all(JoinHandle::is_finished)
    }

    /// The figures now.
    pub fn progress(&self) -> Progress {
        let sum = |units: &[Arc<UnitStats>], f: fn(&UnitStats) -> u64| units.iter().map(|s| f(s)).sum::<u64>();
        let mut throttles: Vec<&'static str> = self
            .ru_stats
            .iter()
            .chain(&self.bu_stats)
            .map(|s| s.throttle())
            .filter(|&t| t != Throttle::None)
            .map(Throttle::key)
            .collect();
        throttles.sort_unstable();
        throttles.dedup();
        let (since_trigger_began_s, trigger_seconds) = self.ru_stats.first().map_or((None, 0.0), |s| trigger_clock(s));
        Progress {
            seconds: self.started.elapsed().as_secs_f64(),
            triggered: self.ru_stats.first().map_or(0, |s| s.triggered.get()),
            built: sum(&self.bu_stats, |s| s.events_published.get()),
            published_per_bu: self.bu_stats.iter().map(|s| s.events_published.get()).collect(),
            fragment_bytes: sum(&self.ru_stats, |s| s.fragment_bytes.get()),
            chunks: (sum(&self.ru_stats, |s| s.chunks_used.get()), sum(&self.ru_stats, |s| s.chunks_total.get())),
            store_bytes: sum(&self.bu_stats, |s| s.store_bytes.get()),
            throttles,
            problems: self.ru_stats.iter().chain(&self.bu_stats).map(|s| s.problem_count()).sum(),
            held: self.stop_line.held(),
            lumi_sections_closed: self.bu_stats.iter().map(|s| s.lumi_sections_closed.get()).min().unwrap_or(0),
            started: self.ru_stats.first().is_some_and(|s| s.run_started.get() == 1),
            since_trigger_began_s,
            trigger_seconds,
            streams_missing: self.ru_stats.iter().flat_map(|s| s.streams_missing()).collect(),
            waiting: self.ru_stats.iter().filter_map(|s| s.waiting()).max_by_key(|&(_, waited)| waited),
            cpu: crate::host_load::CpuSample::now(),
        }
    }

    /// Waits for the run to end, at most `timeout`; units still running then are aborted, and
    /// the outcome says so.
    pub fn wait(self, timeout: Duration) -> Outcome {
        self.wait_or_cut(timeout, &|| false)
    }

    /// Ends the run at once without draining it (an operator's second Ctrl-C): every unit is
    /// aborted, files not yet published stay unpublished, and the events they held are counted
    /// lost as `CUT_SHORT`.
    pub fn cut_short(self) -> Outcome {
        self.wait_or_cut(Duration::ZERO, &|| true)
    }

    /// Waits for the run to end, at most `timeout`, unless `cut` says to cut it short first
    /// (an operator's second Ctrl-C while it drains): then as [`RunningSystem::cut_short`].
    /// `cut` is asked every 20 ms.
    pub fn wait_or_cut(self, timeout: Duration, cut: &dyn Fn() -> bool) -> Outcome {
        let deadline = Instant::now() + timeout;
        while !self.finished() && Instant::now() < deadline && !cut() {
            // A node that failed leaves the others waiting for it: stop them all.
            if self.ru_stats.iter().chain(&self.bu_stats).any(|s| s.failed()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let cut_short = cut();
        // Units still running now are aborted: the run took too long, or a unit failed.
        let stopped = !self.finished();
        let failed = self.ru_stats.iter().chain(&self.bu_stats).any(|s| s.failed());
        if stopped {
            for c in &self.controls {
                c.abort();
            }
        }
        // Emulators end when their streams are closed, which aborting the RUs does.
        let _ = self.stop_line.stop(0);
        let progress = self.progress();
        let mut problems = Vec::new();
        let mut problem_count = 0;
        for s in self.ru_stats.iter().chain(&self.bu_stats) {
            let (p, n) = s.problems();
            problems.extend(p);
            problem_count += n;
        }
        let seconds = self.started.elapsed().as_secs_f64();
        // Says why a unit that was aborted here was (its own error says nothing of it).
        let why = if cut_short {
            "the run was cut short"
        } else if failed {
            "stopped because another unit failed"
        } else {
            "the run did not drain in time"
        };
        let note = |e: NodeError| match e {
            NodeError::Aborted(_) if stopped => UnitFailure::Stopped { source: Box::new(e), why },
            _ => UnitFailure::Failed(Box::new(e)),
        };
        Outcome {
            rus: self.rus.into_iter().map(|h| join_unit(h, &note)).collect(),
            bus: self.bus.into_iter().map(|h| join_unit(h, &note)).collect(),
            emulators: self.emulators.into_iter().map(join_emulator).collect(),
            dth_emulators: self.dth_emulators.into_iter().map(join_emulator).collect(),
            problems,
            problem_count,
            seconds,
            progress,
            cut_short,
            fed_errors: FedErrorCounts::of_units(&self.ru_stats),
        }
    }
}

fn join_unit<T>(
    h: JoinHandle<Result<T, NodeError>>,
    note: &dyn Fn(NodeError) -> UnitFailure,
) -> Result<T, UnitFailure> {
    match h.join() {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(note(e)),
        Err(_) => Err(UnitFailure::Panicked),
    }
}

/// Runs a unit, marking its figures as failed when it ends with an error or a panic (a bug,
/// which then fails the run instead of leaving the other units waiting).
fn flag_failure<T>(stats: &UnitStats, run: impl FnOnce() -> Result<T, NodeError>) -> Result<T, NodeError> {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(NodeError::Panicked(what))
    });
    if result.is_err() {
        stats.set_failed();
    }
    result
}

fn spawn<T: Send + 'static>(name: String, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    std::thread::Builder::new().name(name).spawn(f).expect("spawning a unit thread")
}

/// How an emulator's thread ended.
fn join_emulator<T>(h: JoinHandle<Result<T, EmuError>>) -> Result<T, EmulatorFailure> {
    match h.join() {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(EmulatorFailure::Failed(e)),
        Err(_) => Err(EmulatorFailure::Panicked),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fed_error_counts_list_every_fed_with_errors_over_the_rus_with_their_reasons() {
        let ru0 = Arc::new(UnitStats::for_ru(&[1024, 0, 1]));
        let ru1 = Arc::new(UnitStats::for_ru(&[2, 3]));
        ru0.fed_errors.add(2, FedError::Corrupt, 2);
        ru1.fed_errors.add(1, FedError::SyncLost, 1);
        ru1.fed_errors.add(1, FedError::Missing, 501);
        let counts = FedErrorCounts::of_units(&[ru0, ru1]);
        let by_key = |pairs: &[(&str, u64)]| pairs.iter().map(|&(k, n)| (k.to_string(), n)).collect();
        assert_eq!(
            counts,
            [
                FedErrorCounts { fed: 1, missing: 0, errors: by_key(&[("CORRUPT", 2)]) },
                FedErrorCounts { fed: 3, missing: 501, errors: by_key(&[("MISSING", 501), ("SYNC_LOST", 1)]) },
            ]
        );
    }
}
