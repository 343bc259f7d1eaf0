//! The trigger's account as a run goes on: the rate asked for, the rate got, and the dead time
//! (the share of time the trigger was held) per reason key, with one sentence that names the
//! bottleneck when the rate got falls short of the rate asked for.
//!
//! The emulated front ends say how long they held the trigger ([`Progress::held`]); the units
//! say why they hold back ([`Progress::throttles`]) and which FED an event waits for
//! ([`Progress::waiting`]); the machine says how busy it is ([`Progress::cpu`]). Each interval's
//! new dead time goes, in this order of precedence, to [`MACHINE_OVERLOADED`] when the machine's
//! cores were busy with more work ready than they run, and other work had more of them than the
//! run or the trigger was held for it ([`Load::overload_matters`]: a front end or a unit not
//! scheduled looks like a silent FED, and only the machine tells the two apart); to the FED an event has waited for
//! longest, `WAITING_FOR_FED_<id>` ([`waiting_for_fed`]), when it has waited at least
//! [`FED_SILENT_AFTER`]; to the throttles of that interval, shared equally; else to [`RU_INPUT`]
//! when the stream that held the trigger spent most of it in blocked writes (the RUs read slower
//! than the trigger, without being full), and to [`FRONT_END_SLOW`] otherwise (the front ends
//! themselves are slower than the trigger).

use crate::host_load::{Load, LoadWatch};
use crate::system::Progress;
use serde::Serialize;
use std::collections::BTreeMap;
use tessera_evb::types::FedId;
use tessera_runtime::stats::{FED_SILENT_AFTER, Throttle};

/// Dead time with no unit holding back, while the front ends' writes were blocked: the RUs read
/// the streams slower than the trigger asks.
pub const RU_INPUT: &str = "RU_INPUT";
/// Dead time with no unit holding back and the front ends not blocked in writes: the front ends
/// themselves send more slowly than the trigger (set to, or short of CPU to generate at the rate).
pub const FRONT_END_SLOW: &str = "FRONT_END_SLOW";
/// Dead time while the machine was overloaded: its cores busy, with more threads ready to run
/// than they run (see [`crate::host_load`]).
pub const MACHINE_OVERLOADED: &str = "MACHINE_OVERLOADED";
/// The prefix of the reason key of dead time spent waiting for one FED ([`waiting_for_fed`]).
pub const WAITING_FOR_FED: &str = "WAITING_FOR_FED_";

/// The reason key of dead time spent while events waited for `fed`, which sent nothing.
pub fn waiting_for_fed(fed: FedId) -> String {
    format!("{WAITING_FOR_FED}{fed}")
}

/// Below this share of the rate asked for, the summary names the bottleneck.
pub const SHORTFALL: f64 = 0.9;

/// What one reason key means, in one sentence for an operator.
pub fn reason_sentence(key: &str) -> String {
    if let Some(fed) = key.strip_prefix(WAITING_FOR_FED) {
        return format!(
            "Events wait for FED {fed}, whose stream brings nothing: the trigger is held until it sends, its stream \
             ends, or an operator masks it (POST /api/v1/feds/{fed}/mask)."
        );
    }
    match key {
        RU_INPUT => "The RUs read the front ends' streams slower than the trigger: their CPU is the limit.".into(),
        FRONT_END_SLOW => {
            "The front ends send more slowly than the trigger (set to, or short of CPU): the trigger waits for them."
                .into()
        }
        MACHINE_OVERLOADED => "The machine is overloaded: its cores are busy with more threads ready to run than \
                               they can run, so front ends and units wait for a core, and the trigger waits for them."
            .into(),
        _ => Throttle::REASONS.into_iter().find(|t| t.key() == key).map_or("", Throttle::sentence).into(),
    }
}

/// The figures of one interval (a progress line).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Interval {
    /// Triggers per second in the interval.
    pub achieved_hz: f64,
    /// Share of the interval the trigger was held, 0 to 1.
    pub dead_fraction: f64,
    /// The reason keys the interval's dead time went to.
    pub reasons: Vec<String>,
    /// What the machine did in the interval, where it can be read.
    pub load: Option<Load>,
    /// Whether the machine was overloaded in the interval in a way worth saying (see
    /// [`Load::overload_matters`]).
    pub overloaded: bool,
}

/// The figures of the whole run so far.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct TriggerSummary {
    /// The mean Poisson rate asked for, or `None` for free-running front ends.
    pub requested_hz: Option<f64>,
    /// Triggers per second over the run.
    pub achieved_hz: f64,
    /// Share of the run the trigger was held, 0 to 1.
    pub dead_fraction: f64,
    /// That share per reason key.
    pub dead_by_reason: BTreeMap<String, f64>,
    /// One sentence naming the bottleneck, when the rate got is below [`SHORTFALL`] of the
    /// rate asked for.
    pub bottleneck: Option<String>,
    /// The machine, if it was overloaded while the trigger ran in a way worth saying (see
    /// [`Load::overload_matters`]).
    pub overload: Option<Overload>,
}

/// How overloaded the machine was while the trigger ran: over the intervals it was, their mean
/// figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overload {
    /// Seconds the machine was overloaded.
    pub seconds: f64,
    /// Of the seconds the trigger ran.
    pub of_seconds: f64,
    /// The machine's figures over those seconds, on average.
    pub load: Load,
}

impl Overload {
    /// The overload in one line: "overloaded for 12.0 of 20.0 s: 2 cores 99 % busy, ...".
    pub fn sentence(&self) -> String {
        format!("overloaded for {:.1} of {:.1} s: {}", self.seconds, self.of_seconds, self.load.figures())
    }
}

/// The account, fed a [`Progress`] at each interval.
#[derive(Debug, Clone)]
pub struct TriggerAccount {
    requested_hz: Option<f64>,
    last: Progress,
    /// The end of the last interval before the trigger stopped, and the events triggered by
    /// then: the run's rates are over the time the trigger ran, not its drain.
    triggering: (f64, u64),
    /// Set once the trigger is stopped: the streams then catch up to the stop line, which holds
    /// no trigger.
    stopped: bool,
    /// Seconds of the intervals taken before the stop: what dead time and overload were counted
    /// over, and so the share's denominator (the trigger's own clock may be shorter: the
    /// streams' connecting is in the first interval).
    counted_s: f64,
    dead_by_reason: BTreeMap<String, f64>,
    loads: LoadWatch,
    /// Seconds overloaded while the trigger ran, and the sum of their loads weighted by them.
    overloaded: (f64, Option<Load>),
}

impl TriggerAccount {
    /// An account for a run asking `requested_hz` (`None`: free running, where dead time is not
    /// defined and stays 0).
    pub fn new(requested_hz: Option<f64>) -> Self {
        TriggerAccount {
            requested_hz,
            last: Progress::default(),
            triggering: (0.0, 0),
            stopped: false,
            counted_s: 0.0,
            dead_by_reason: BTreeMap::new(),
            loads: LoadWatch::default(),
            overloaded: (0.0, None),
        }
    }

    /// Takes the figures at the end of an interval and returns the interval's.
    pub fn interval(&mut self, now: &Progress) -> Interval {
        let seconds = (now.seconds - self.last.seconds).max(1e-9);
        let dead = if self.stopped { 0.0 } else { (now.held.dead_seconds - self.last.held.dead_seconds).max(0.0) };
        let writing = (now.held.write_seconds - self.last.held.write_seconds).max(0.0);
        let load = self.loads.read(now.cpu);
        let dead_fraction = (dead / seconds).min(1.0);
        let overloaded = load.is_some_and(|l| l.overload_matters(dead_fraction));
        let silent = now.waiting.filter(|&(_, waited)| waited >= FED_SILENT_AFTER).map(|(fed, _)| fed);
        let reasons: Vec<String> = if dead <= 0.0 {
            Vec::new()
        } else if overloaded {
            vec![MACHINE_OVERLOADED.into()]
        } else if let Some(fed) = silent {
            vec![waiting_for_fed(fed)]
        } else if !now.throttles.is_empty() {
            now.throttles.iter().map(|&t| t.to_owned()).collect()
        } else if writing >= dead / 2.0 {
            vec![RU_INPUT.into()]
        } else {
            vec![FRONT_END_SLOW.into()]
        };
        for key in &reasons {
            *self.dead_by_reason.entry(key.clone()).or_default() += dead / reasons.len() as f64;
        }
        if !self.stopped {
            self.counted_s += seconds;
        }
        if let Some(l) = load.filter(|_| overloaded && !self.stopped) {
            let (secs, sum) = &mut self.overloaded;
            let s = sum.unwrap_or(Load { busy: 0.0, runnable: 0.0, own_cores: 0.0, ..l });
            *sum = Some(Load {
                busy: s.busy + l.busy * seconds,
                runnable: s.runnable + l.runnable * seconds,
                own_cores: s.own_cores + l.own_cores * seconds,
                ..l
            });
            *secs += seconds;
        }
        let interval = Interval {
            achieved_hz: now.triggered.saturating_sub(self.last.triggered) as f64 / seconds,
            dead_fraction,
            reasons,
            load,
            overloaded,
        };
        // The time the trigger ran, on the EVM's own clock where it has one: up to this look
        // while it runs (a trigger held to the end ran all that time, triggering nothing), and
        // once stopped up to its last event, the stop line's, not the drain after it.
        self.triggering = match (self.stopped, now.since_trigger_began_s) {
            (false, Some(running)) => (running, now.triggered),
            (false, None) => (now.seconds, now.triggered),
            (true, _) if now.trigger_seconds > 0.0 => (self.triggering.0.max(now.trigger_seconds), now.triggered),
            (true, _) => self.triggering,
        };
        self.last = now.clone();
        interval
    }

    /// The trigger is stopped (a limit, Ctrl-C): no dead time counts from here on.
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// The run so far, up to the last interval taken, over the time the trigger ran.
    pub fn summary(&self) -> TriggerSummary {
        let achieved_hz = self.triggering.1 as f64 / self.triggering.0.max(1e-9);
        // Shares over the time they were counted over, so that they add up to at most 1.
        let seconds = self.triggering.0.max(self.counted_s).max(1e-9);
        let dead_by_reason: BTreeMap<String, f64> =
            self.dead_by_reason.iter().map(|(k, &v)| (k.clone(), (v / seconds).min(1.0))).collect();
        let overload = match self.overloaded {
            (secs, Some(sum)) if secs > 0.0 => Some(Overload {
                seconds: secs,
                of_seconds: seconds,
                load: Load {
                    busy: sum.busy / secs,
                    runnable: sum.runnable / secs,
                    own_cores: sum.own_cores / secs,
                    ..sum
                },
            }),
            _ => None,
        };
        let bottleneck = self.requested_hz.filter(|&r| achieved_hz < SHORTFALL * r).map(|requested| {
            let worst = dead_by_reason.iter().max_by(|a, b| a.1.total_cmp(b.1));
            let got = format!(
                "the trigger got {:.1} kHz of the {:.1} kHz asked for ({:.0} %)",
                achieved_hz / 1e3,
                requested / 1e3,
                100.0 * achieved_hz / requested
            );
            match (worst, &overload) {
                (Some((key, share)), Some(o)) if key == MACHINE_OVERLOADED => format!(
                    "bottleneck: {key} ({:.0} % of the run held): {got}. The machine was {}: front ends and units \
                     waited for a core, and the trigger for them.",
                    100.0 * share,
                    o.sentence()
                ),
                (Some((key, share)), _) => format!(
                    "bottleneck: {key} ({:.0} % of the run held): {got}. {}",
                    100.0 * share,
                    reason_sentence(key)
                ),
                (None, Some(o)) => {
                    format!("bottleneck: {MACHINE_OVERLOADED}: {got}. The machine was {}.", o.sentence())
                }
                (None, None) => format!("bottleneck: unknown: {got}, and no front end held the trigger"),
            }
        });
        TriggerSummary {
            requested_hz: self.requested_hz,
            achieved_hz,
            // Folded from +0.0: an empty sum of f64 is -0.0, which prints as "-0.0 %".
            dead_fraction: (self.dead_by_reason.values().fold(0.0, |a, b| a + b) / seconds).min(1.0),
            dead_by_reason,
            bottleneck,
            overload,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_load::CpuSample;
    use tessera_emu::sender::Held;

    fn at(seconds: f64, triggered: u64, dead: f64, write: f64, throttles: Vec<&'static str>) -> Progress {
        Progress {
            seconds,
            triggered,
            throttles,
            held: Held { dead_seconds: dead, write_seconds: write },
            ..Progress::default()
        }
    }

    #[test]
    fn dead_time_goes_to_the_throttles_of_its_interval() {
        let mut account = TriggerAccount::new(Some(100_000.0));
        let i = account.interval(&at(1.0, 20_000, 0.6, 0.1, vec!["RU_BUFFERS_FULL"]));
        assert_eq!(i.reasons, vec!["RU_BUFFERS_FULL".to_string()]);
        assert!((i.achieved_hz - 20_000.0).abs() < 1e-6);
        assert!((i.dead_fraction - 0.6).abs() < 1e-9);
        // Two reasons share the interval's 0.4 s.
        account.interval(&at(2.0, 40_000, 1.0, 0.1, vec!["BU_STORE_FULL", "RU_BUFFERS_FULL"]));
        // No throttle, writes not blocked: the emulator itself.
        let i = account.interval(&at(3.0, 60_000, 1.5, 0.2, vec![]));
        assert_eq!(i.reasons, vec![FRONT_END_SLOW.to_string()]);
        // No throttle, most of the dead time in blocked writes: the RUs read too slowly.
        let i = account.interval(&at(4.0, 80_000, 1.9, 0.6, vec![]));
        assert_eq!(i.reasons, vec![RU_INPUT.to_string()]);
        let s = account.summary();
        assert!((s.dead_by_reason["RU_BUFFERS_FULL"] - 0.8 / 4.0).abs() < 1e-9);
        assert!((s.dead_by_reason["BU_STORE_FULL"] - 0.2 / 4.0).abs() < 1e-9);
        assert!((s.dead_fraction - 1.9 / 4.0).abs() < 1e-9);
        // The drain brings no triggers and holds none: the figures stay those of the time the
        // trigger ran.
        account.stop();
        account.interval(&at(9.0, 80_000, 6.9, 5.6, vec![]));
        assert_eq!(account.summary(), s);
        let bottleneck = s.bottleneck.expect("20 kHz of 100 kHz is short");
        assert!(bottleneck.starts_with("bottleneck: RU_BUFFERS_FULL (20 % of the run held)"), "{bottleneck}");
        assert!(bottleneck.contains("20.0 kHz of the 100.0 kHz asked for"), "{bottleneck}");
    }

    /// A look at `seconds` since the units started, the trigger having begun at 0.4 s and
    /// triggered its last event at `latest` s.
    fn look(seconds: f64, triggered: u64, latest: f64) -> Progress {
        Progress {
            since_trigger_began_s: Some(seconds - 0.4),
            trigger_seconds: latest - 0.4,
            ..at(seconds, triggered, 0.0, 0.0, vec![])
        }
    }

    #[test]
    fn the_rate_is_over_the_triggers_own_clock_not_the_looks() {
        // The streams took 0.4 s to connect; the stop came at the look at 5.0 s, the trigger
        // reached the stop line at 5.1 s, and the look after it came at 6.0 s: neither the
        // connecting nor the drain counts.
        let mut account = TriggerAccount::new(Some(20_000.0));
        account.interval(&look(1.0, 12_000, 1.0));
        account.interval(&look(5.0, 92_000, 5.0));
        account.stop();
        account.interval(&look(6.0, 94_000, 5.1));
        let s = account.summary();
        assert!((s.achieved_hz - 20_000.0).abs() < 1.0, "{s:?}");
        assert_eq!(s.bottleneck, None);
    }

    #[test]
    fn a_trigger_held_to_the_end_ran_all_that_time() {
        // A FED paused from 2.4 s on: the trigger triggers nothing more, yet it runs.
        let mut account = TriggerAccount::new(Some(20_000.0));
        account.interval(&look(2.4, 40_000, 2.4));
        account.interval(&look(4.4, 40_000, 2.4));
        account.stop();
        account.interval(&look(5.4, 40_000, 2.4));
        let s = account.summary();
        assert!((s.achieved_hz - 10_000.0).abs() < 1.0, "{s:?}");
        assert!(s.bottleneck.is_some(), "{s:?}");
    }

    #[test]
    fn no_bottleneck_when_the_rate_is_met_or_not_asked_for() {
        let mut account = TriggerAccount::new(Some(10_000.0));
        account.interval(&at(2.0, 19_000, 0.0, 0.0, vec![]));
        assert_eq!(account.summary().bottleneck, None, "95 % of the rate asked for");
        let mut free = TriggerAccount::new(None);
        free.interval(&at(2.0, 19_000, 0.0, 0.0, vec![]));
        assert_eq!(free.summary().bottleneck, None);
        assert_eq!(free.summary().dead_fraction, 0.0);
    }

    #[test]
    fn every_reason_has_a_sentence() {
        let keys = Throttle::REASONS.iter().map(|t| t.key().to_owned());
        for key in
            keys.chain([RU_INPUT, FRONT_END_SLOW, MACHINE_OVERLOADED].map(String::from)).chain([waiting_for_fed(7)])
        {
            assert!(!reason_sentence(&key).is_empty(), "{key}");
        }
        assert!(reason_sentence(&waiting_for_fed(7)).contains("FED 7"));
    }

    fn cpu(busy: u64, total: u64, runnable: u64) -> Option<CpuSample> {
        Some(CpuSample { busy_ticks: busy, total_ticks: total, runnable, own_ticks: busy / 4, cores: 2 })
    }

    /// A FED an event has waited for a while takes the dead time by name, over the throttle its
    /// silence makes (full RU buffers); an overloaded machine takes it over both, since a front
    /// end not scheduled is silent too.
    #[test]
    fn dead_time_goes_to_an_overloaded_machine_then_to_a_silent_fed_then_to_the_throttles() {
        let mut account = TriggerAccount::new(Some(100_000.0));
        let mut p = at(0.0, 0, 0.0, 0.0, vec!["RU_BUFFERS_FULL"]);
        p.cpu = cpu(0, 0, 2);
        account.interval(&p);
        p = Progress { seconds: 1.0, triggered: 50_000, held: Held { dead_seconds: 0.5, write_seconds: 0.4 }, ..p };
        p.waiting = Some((7, FED_SILENT_AFTER * 2));
        p.cpu = cpu(100, 200, 2);
        assert_eq!(account.interval(&p).reasons, vec![waiting_for_fed(7)]);
        p.waiting = Some((7, FED_SILENT_AFTER / 2));
        p.seconds = 2.0;
        p.held.dead_seconds = 1.0;
        p.cpu = cpu(200, 400, 2);
        assert_eq!(account.interval(&p).reasons, vec!["RU_BUFFERS_FULL".to_string()], "a short wait is no silence");
        // Overloaded: cores busy, nine threads ready on average.
        p.waiting = Some((7, FED_SILENT_AFTER * 2));
        for t in 3u32..=10 {
            p.seconds = f64::from(t);
            p.held.dead_seconds += 0.5;
            let (busy, total) = (200 + 200 * u64::from(t - 2), 400 + 200 * u64::from(t - 2));
            p.cpu = cpu(busy, total, 20);
            account.interval(&p);
        }
        let s = account.summary();
        let o = s.overload.clone().expect("overloaded from the 4th s on (the ready threads averaged)");
        assert!(o.seconds >= 5.0 && o.load.busy > 0.99 && o.load.runnable > 6.0, "{o:?}");
        let b = s.bottleneck.expect("short of the rate");
        assert!(b.starts_with("bottleneck: MACHINE_OVERLOADED") && b.contains("2 cores 100 % busy"), "{b}");
    }
}
