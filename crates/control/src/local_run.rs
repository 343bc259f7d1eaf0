//! A whole system run in this process, supervised to its end ([`LocalRun`]): the BUs' brokers
//! and the filter farm started before the system, the run's progress looked at while it runs,
//! its stop (the run's limit, or an operator's stop counted in the interrupts), its cut (a second
//! stop, or a first one past `controller.stop_timeout_s`), its give-up (nothing built for
//! [`DRAIN_TIMEOUT`] after the trigger's end), stalled units, failed FUs started again, the
//! run's status as the control API serves it, and then the farm's last files and the brokers'
//! drain. What it decides is said as `tracing` events; the caller shows the progress
//! ([`ProgressLine`]) and prints the summary from the [`LocalEnd`].

use crate::api::{MaskAction, Served, mask_at, tell_unit};
use crate::chain::storage_run_dir;
use crate::farm::{Farm, FarmDirs, FarmError, FarmOutcome, start_broker, wait_drained};
use crate::heartbeat::HeartbeatWatch;
use crate::run::{RunState, RunStatus};
use crate::stop::{DRAIN_TIMEOUT, OperatorStop, stop_action};
use crate::system::{Outcome, Progress, RunningSystem, SystemPlan};
use crate::trigger::{Interval, TriggerAccount, TriggerSummary};
use crate::units::{StuckWatch, Unit, UnitKind, unit_views};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tessera_config::SystemConfig;
use tessera_fu::broker::Broker;
use tessera_runtime::ru_node::NodeError;
use tessera_runtime::state::UnitState;
use tessera_runtime::stats::UnitStats;

/// A run that waits this long before it starts says so when it does.
const START_SAID_AFTER: Duration = Duration::from_secs(2);

/// Why a run in this process could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalRunError {
    /// A BU's broker or the filter farm did not start.
    #[error(transparent)]
    Farm(#[from] FarmError),
    /// A unit of the system did not start.
    #[error(transparent)]
    System(#[from] NodeError),
}

/// What the caller shows while the run goes: its progress, looked at every poll.
pub trait ProgressLine {
    /// The run's progress `now`, with the one looked at before (`last`) and the trigger's rate and
    /// dead time in between (`interval`).
    fn show(&mut self, now: &Progress, last: &Progress, interval: &Interval);
    /// The progress shown so far ends: a message follows (the stop), or the run's loop ended.
    fn end(&mut self);
}

/// The filter farm's end: its outcome, the streams it ran and its directories.
pub struct FarmEnd {
    /// How its FUs (or readers) and mergers ended.
    pub outcome: FarmOutcome,
    /// The streams of the system's HLT (none for readers).
    pub streams: Vec<String>,
    /// Its directories: the FUs', the mini-mergers' and storage.
    pub dirs: FarmDirs,
}

/// How a run in this process ended: the system's outcome, the farm's, the trigger's account,
/// and whether it was cut short. [`LocalEnd::record`] gives the run's status its last state.
pub struct LocalEnd {
    /// How the system's units and emulators ended.
    pub system: Outcome,
    /// How the filter farm ended (none without a farm).
    pub farm: Option<FarmEnd>,
    /// The trigger's account of the whole run.
    pub trigger: TriggerSummary,
    /// Whether the run, or its farm, was cut short.
    pub cut_short: bool,
    status: Arc<RunStatus>,
    run: u32,
}

impl LocalEnd {
    /// Gives the run's status (`GET /api/v1/run`) its last state once the caller has checked the
    /// run (`ok`: every unit ended cleanly and the conservation and chain hold): ended, or aborted
    /// if it was not ok or cut short; with the lumi sections the mergers wrote.
    pub fn record(&self, ok: bool) {
        self.status.update(|v| {
            v.state = if ok && !self.cut_short { RunState::Ended } else { RunState::Aborted };
            if let Some(farm) = &self.farm {
                v.lumi_sections_merged =
                    merged_lumi_sections(&storage_run_dir(&farm.dirs, self.run), farm.streams.len());
            }
        });
    }
}

/// A whole system started in this process, with its BUs' brokers and its filter farm, to be
/// supervised to its end ([`LocalRun::supervise`]).
pub struct LocalRun<'a> {
    cfg: &'a SystemConfig,
    output: PathBuf,
    readers: bool,
    brokers: Vec<Option<Broker>>,
    farm: Option<Farm>,
    system: RunningSystem,
    interrupts: Arc<AtomicU32>,
    status: Arc<RunStatus>,
}

impl<'a> LocalRun<'a> {
    /// Starts the run `plan` of `cfg` with its output in `output`: the BUs' brokers and the
    /// filter farm first (readers, if `cfg` reads by readers, else FUs running `streams`, if
    /// given), so that they are there when the first files appear, then the system. The operator's
    /// stops are counted in `interrupts`.
    pub fn start(
        cfg: &'a SystemConfig,
        output: &Path,
        plan: SystemPlan,
        streams: Option<Vec<String>>,
        interrupts: Arc<AtomicU32>,
    ) -> Result<Self, LocalRunError> {
        let units = if cfg.is_orbit_mode() { "orbits" } else { "events" };
        let limit = match (cfg.stream_limit(), cfg.run.seconds) {
            (Some(n), Some(s)) => format!("{n} {units} or {s} s"),
            (Some(n), None) => format!("{n} {units}"),
            (None, Some(s)) => format!("{s} s"),
            (None, None) => "Ctrl-C".into(),
        };
        tracing::info!(
            run = cfg.run.number,
            "tessera run {}: {} RUs ({} FEDs), {} BUs, {}, {}; until {limit} (Ctrl-C drains and stops); output in {}",
            cfg.run.number,
            cfg.rus.len(),
            cfg.all_feds().len(),
            cfg.bus.len(),
            cfg.transport.words(
                &std::env::var("UCX_TLS").map_or("of UCX's own choice".into(), |t| format!("{t}, from UCX_TLS"))
            ),
            trigger_words(cfg),
            output.display()
        );
        let readers = cfg.fu.read_by_readers();
        // Readers read through the brokers.
        let brokers =
            (0..cfg.bus.len()).map(|i| start_broker(cfg, i, output, readers)).collect::<Result<Vec<_>, _>>()?;
        let farm = if readers {
            let addresses: Vec<SocketAddr> = brokers.iter().flatten().map(|b| b.local_addr()).collect();
            Some(Farm::start_readers(cfg, output, &addresses)?)
        } else {
            streams.map(|streams| Farm::start(cfg, output, &streams)).transpose()?
        };
        let system = RunningSystem::start(plan)?;
        let status = Arc::new(RunStatus::new(cfg.run.number));
        Ok(LocalRun { cfg, output: output.to_owned(), readers, brokers, farm, system, interrupts, status })
    }

    /// The units of the system with their names and kinds, read live.
    fn units(&self) -> Vec<Unit> {
        self.cfg
            .rus
            .iter()
            .zip(&self.system.ru_stats)
            .enumerate()
            .map(|(i, (r, s))| Unit {
                name: r.name.clone(),
                kind: if i == 0 { UnitKind::Evm } else { UnitKind::Ru },
                stats: s.clone(),
            })
            .chain(self.cfg.bus.iter().zip(&self.system.bu_stats).map(|(b, s)| Unit {
                name: b.name.clone(),
                kind: UnitKind::Bu,
                stats: s.clone(),
            }))
            .collect()
    }

    /// What the run's control server serves: its units, read live, the run's stop (as a first
    /// Ctrl-C), the system file and the run's status.
    pub fn served(&self) -> Served {
        let units = self.units();
        let rus: Vec<(String, Vec<u16>)> = self.cfg.rus.iter().map(|r| (r.name.clone(), r.feds.clone())).collect();
        let controls = self.system.ru_controls();
        let mask: MaskAction =
            Arc::new(move |fed| mask_at(fed, "run", &rus, |i| tell_unit(&controls[i], &rus[i].0, fed)));
        Served {
            mask: Some(mask),
            stop: Some(stop_action(self.interrupts.clone())),
            system: Some(self.cfg.to_yaml()),
            run: Some(self.status.clone()),
            ..Served::live(units)
        }
    }

    /// Supervises the run to its end, looking at its progress every `poll` and showing it on
    /// `line`: stops the trigger at the run's limit or the first operator's stop, cuts the run
    /// short on a second (or a first past `controller.stop_timeout_s`), gives it up when it
    /// builds nothing for [`DRAIN_TIMEOUT`] after the trigger's end or a unit fails, reports
    /// stalled units and starts failed FUs again; then waits for the units, lets the farm
    /// process the last files and the brokers drain (within `fu.drain_timeout_s`, unless cut).
    pub fn supervise(self, poll: Duration, line: &mut dyn ProgressLine) -> LocalEnd {
        let units = self.units();
        let LocalRun { cfg, output, readers, brokers, mut farm, system, interrupts, status } = self;
        let begun = Instant::now();
        // Whether every stream of every RU has connected and the trigger started.
        let mut started = false;
        // Until the next look: the poll, or less to stop on time.
        let mut wait = poll;
        let mut stuck = StuckWatch::default();
        let operator = OperatorStop::new(interrupts.clone(), Duration::from_secs(cfg.controller.stop_timeout_s));
        let mut stopped = false;
        // The stop line drawn at the stop: the trigger runs on to it.
        let mut stop_line: Option<u64> = None;
        // Events built, and when that figure last grew.
        let mut built_last = (0u64, Instant::now());
        let mut last = Progress::default();
        let requested_hz = cfg.unit_rate_hz();
        let mut trigger = TriggerAccount::new(requested_hz);
        let named: Vec<(&str, &Arc<UnitStats>)> = cfg
            .rus
            .iter()
            .map(|r| r.name.as_str())
            .zip(&system.ru_stats)
            .chain(cfg.bus.iter().map(|b| b.name.as_str()).zip(&system.bu_stats))
            .collect();
        let mut watch = HeartbeatWatch::new(Duration::from_secs_f64(cfg.controller.heartbeat_timeout_s));
        let mut stalled = std::collections::BTreeSet::new();
        // Bounded: the run ends by its limit or a stop; after a stop within controller.stop_timeout_s,
        // after its limit as soon as it builds nothing for DRAIN_TIMEOUT.
        while !system.finished() {
            std::thread::sleep(wait);
            watch_heartbeats(&named, &mut watch, &mut stalled);
            if let Some(farm) = &mut farm {
                farm.restart_failed();
            }
            let p = system.progress();
            if !started && p.started {
                started = true;
                stuck.started();
                if begun.elapsed() > START_SAID_AFTER {
                    line.end();
                    tracing::info!(
                        run = cfg.run.number,
                        "the run starts: every stream of every RU has connected, after {:.1} s",
                        begun.elapsed().as_secs_f64()
                    );
                }
            }
            // With an event limit, or once stopped at the stop line, the trigger ends with its
            // last event: no time after counts, this interval's neither (the account is told
            // before it takes it). Until then a trigger held on its way to the line is dead
            // time like any other.
            if [cfg.run.events, stop_line].into_iter().flatten().min().is_some_and(|n| p.triggered >= n) {
                trigger.stop();
            }
            let interval = trigger.interval(&p);
            line.show(&p, &last, &interval);
            // Nothing built for a while, with events in flight or the run not started: say which
            // units hold what, and wait for whom.
            let waiting = stuck.look(p.triggered, p.built, p.started, || unit_views(&units));
            if let Some(said) = waiting.as_ref().and_then(|w| w.say.as_ref()) {
                line.end();
                tracing::warn!(run = cfg.run.number, "{said}");
            }
            status.update(|v| {
                v.state = match (stopped, p.started) {
                    (true, _) => RunState::Draining,
                    (false, true) => RunState::Running,
                    (false, false) => RunState::Configuring,
                };
                v.started = p.started;
                v.streams_missing = p.streams_missing.clone();
                v.waiting = waiting.map(|w| w.holds);
                v.machine_overloaded = interval.load.filter(|_| interval.overloaded).map(|l| l.figures());
                v.elapsed_s = p.since_trigger_began_s.unwrap_or(0.0);
                v.requested_rate_hz = requested_hz;
                v.achieved_rate_hz = interval.achieved_hz;
                v.dead_time_fraction = interval.dead_fraction;
                v.dead_time_by_reason = interval
                    .reasons
                    .iter()
                    .map(|r| (r.to_string(), interval.dead_fraction / interval.reasons.len() as f64))
                    .collect();
                let run = trigger.summary();
                v.mean_rate_hz = run.achieved_hz;
                v.bottleneck = run.bottleneck;
                v.lumi_sections_built = p.lumi_sections_closed;
                v.stop_requested = interrupts.load(Ordering::SeqCst) > 0;
            });
            last = p;
            // The trigger's own clock, not the look's: the run lasts what was asked, within a
            // few ms, however the poll falls.
            let left_s = cfg.run.seconds.zip(last.since_trigger_began_s).map(|(s, t)| s - t);
            let time_up = left_s.is_some_and(|left| left <= 0.0);
            wait = match left_s {
                Some(left) if left > 0.0 && !stopped => poll.min(Duration::from_secs_f64(left)),
                _ => poll,
            };
            let interrupted = interrupts.load(Ordering::SeqCst);
            if !stopped && (time_up || interrupted > 0) {
                stopped = true;
                let n = system.stop();
                stop_line = Some(n);
                line.end();
                let (who, what) = if cfg.is_orbit_mode() { ("source", "orbit") } else { ("FED", "event") };
                tracing::info!(
                    run = cfg.run.number,
                    last_event = n,
                    "stopping: every {who} ends after {what} {n} of the run; draining, at most {} s (Ctrl-C again cuts it short)",
                    cfg.controller.stop_timeout_s
                );
            }
            if interrupted > 1 || operator.cut() {
                tracing::warn!(run = cfg.run.number, "cutting the run short: units stop now, without draining");
                break;
            }
            if system_failed(&system) {
                break;
            }
            // A run that ends by its own limit drains as long as it builds: one that built nothing
            // for DRAIN_TIMEOUT after its trigger's end will not drain. (An operator's stop has its
            // own bound, `OperatorStop`, which cuts the run short.)
            let ended_by_limit = interrupted == 0 && (stopped || cfg.run.events.is_some_and(|n| last.triggered >= n));
            if !ended_by_limit || last.built > built_last.0 {
                built_last = (last.built, Instant::now());
            } else if built_last.1.elapsed() > DRAIN_TIMEOUT {
                tracing::error!(
                    run = cfg.run.number,
                    "the builder built nothing for {DRAIN_TIMEOUT:?} after the trigger's end ({} events in flight): its units are aborted",
                    last.triggered.saturating_sub(last.built)
                );
                break;
            }
        }
        line.end();
        let cut = || operator.cut();
        // The loop ends when the units have, or when they must be stopped now.
        let outcome = system.wait_or_cut(Duration::ZERO, &cut);
        status.update(|v| {
            v.state = RunState::Merging;
            v.lumi_sections_built = outcome.progress.lumi_sections_closed;
        });
        // A builder that built nothing and whose every BU failed (at its start, say) leaves its
        // farm nothing to read, ever: it is stopped at once rather than waited for.
        let no_bu_began = outcome.progress.built == 0 && outcome.bus.iter().all(Result::is_err);
        let farm = farm.map(|farm| {
            if no_bu_began && !cut() {
                tracing::warn!(
                    run = cfg.run.number,
                    "filter farm: every BU failed and nothing was built; stopping the farm"
                );
            } else if !cut() && readers {
                tracing::info!(run = cfg.run.number, "readers: reading the last files (Ctrl-C again cuts it short)");
            } else if !cut() {
                tracing::info!(
                    run = cfg.run.number,
                    "filter farm: processing the last files and merging into {} (Ctrl-C again cuts it short)",
                    farm.dirs.storage.display()
                );
            }
            let streams = farm.streams.clone();
            let dirs = farm.dirs.clone();
            let storage = storage_run_dir(&dirs, cfg.run.number);
            let mut looked = Instant::now();
            let tick = || {
                if looked.elapsed() >= Duration::from_secs(1) {
                    looked = Instant::now();
                    let merged = merged_lumi_sections(&storage, streams.len());
                    status.update(|v| v.lumi_sections_merged = merged);
                }
                no_bu_began || cut()
            };
            let mut outcome = farm.finish(Duration::from_secs(cfg.fu.drain_timeout_s), tick);
            // Stopped for want of a builder, not by the operator: the run failed, not cut short.
            outcome.cut_short &= !no_bu_began;
            if readers {
                outcome.read_through_brokers = Some(brokers.iter().flatten().map(|b| b.tally()).collect());
            }
            FarmEnd { outcome, streams, dirs }
        });
        for (i, broker) in brokers.iter().enumerate() {
            if broker.is_some() && !readers && !cut() {
                // FUs on other hosts finish their last files through the broker.
                let bu_dir = cfg.bu_directory(i, &output);
                let stale_after = Duration::from_secs(cfg.fu.resource_summary_stale_s);
                if !wait_drained(
                    &bu_dir,
                    cfg.run.number,
                    stale_after,
                    Duration::from_secs(cfg.fu.drain_timeout_s),
                    &cut,
                ) {
                    tracing::warn!(unit = %cfg.bus[i].name, "{}: files are left unprocessed in {}", cfg.bus[i].name, bu_dir.display());
                }
            }
        }
        drop(brokers);
        trigger.interval(&outcome.progress);
        let cut_short = outcome.cut_short || farm.as_ref().is_some_and(|f| f.outcome.cut_short);
        LocalEnd { system: outcome, farm, trigger: trigger.summary(), cut_short, status, run: cfg.run.number }
    }
}

/// Lumi sections whose final files the mergers have written for every one of `streams`
/// streams in the storage run directory `storage`.
fn merged_lumi_sections(storage: &Path, streams: usize) -> u64 {
    let mut per_ls: std::collections::BTreeMap<u32, usize> = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(storage).into_iter().flatten().flatten() {
        let name = entry.file_name();
        if let Ok(n) = tessera_formats::names::StreamFileName::parse(&name.to_string_lossy())
            && n.ext == "jsn"
        {
            *per_ls.entry(n.ls).or_default() += 1;
        }
    }
    per_ls.values().filter(|&&n| n >= streams).count() as u64
}

/// Reports, once each, the units whose loop has stopped beating while it should run: a stalled
/// unit (a deadlock, a thread that hangs in a call) shows before the run's drain time-out.
fn watch_heartbeats(
    units: &[(&str, &Arc<UnitStats>)],
    watch: &mut HeartbeatWatch,
    stalled: &mut std::collections::BTreeSet<String>,
) {
    let now = Instant::now();
    for (name, stats) in units {
        let running = matches!(
            stats.state(),
            UnitState::Configuring | UnitState::Ready | UnitState::Enabled | UnitState::Draining
        );
        if !running || stalled.contains(*name) {
            continue;
        }
        if let Some(still) = watch.check(name, stats.heartbeats.get(), now) {
            let why = format!("UNIT_STALLED {name}: its loop heartbeat has not moved for {:.1} s", still.as_secs_f64());
            tracing::error!(unit = %name, reason = "UNIT_STALLED", "{why}");
            stats.problem(why);
            stalled.insert((*name).to_owned());
        }
    }
}

/// Whether a unit of the system has failed.
fn system_failed(system: &RunningSystem) -> bool {
    system.ru_stats.iter().chain(&system.bu_stats).any(|s| s.failed())
}

/// The trigger in a few words: its rate, or in orbit mode the DTH streams' pace and L1 rate.
fn trigger_words(cfg: &SystemConfig) -> String {
    let free = cfg.trigger.free_running || (!cfg.is_orbit_mode() && cfg.trigger.rate_hz.is_none());
    match (cfg.is_orbit_mode(), free) {
        (false, true) => "free running".into(),
        (false, false) => format!("{} Hz Poisson trigger", cfg.trigger.clock_rate_hz()),
        (true, true) => format!("DTH orbit streams free running, {} Hz L1 rate", cfg.trigger.clock_rate_hz()),
        (true, false) => {
            format!("DTH orbit streams at the LHC orbit rate, {} Hz L1 rate", cfg.trigger.clock_rate_hz())
        }
    }
}
