//! The trigger's account as a run goes on: the rate asked for, the rate got, and the dead time
//! (the share of time the trigger was held) per reason key, with one sentence that names the
//! bottleneck when the rate got falls short of the rate asked for.
//!
//! The emulated front ends say how long they held the trigger ([`Progress::held`]); the units
//! say why they hold back ([`Progress::throttles`]). Each interval's new dead time goes to the
//! throttles of that interval, shared equally; with no unit holding back it goes to
//! [`RU_INPUT`] when the stream that held the trigger spent most of it in blocked writes (the RUs
//! read slower than the trigger, without being full), and to [`FRONT_END_SLOW`] otherwise (the
//! front ends themselves are slower than the trigger).

use crate::system::Progress;
use serde::Serialize;
use std::collections::BTreeMap;
use tessera_runtime::stats::Throttle;

/// Dead time with no unit holding back, while the front ends' writes were blocked: the RUs read
/// the streams slower than the trigger asks.
pub const RU_INPUT: &str = "RU_INPUT";
/// Dead time with no unit holding back and the front ends not blocked in writes: the front ends
/// themselves send more slowly than the trigger (set to, or short of CPU to generate at the rate).
pub const FRONT_END_SLOW: &str = "FRONT_END_SLOW";

/// Below this share of the rate asked for, the summary names the bottleneck.
pub const SHORTFALL: f64 = 0.9;

/// What one reason key means, in one sentence for an operator.
pub fn reason_sentence(key: &str) -> &'static str {
    match key {
        RU_INPUT => "The RUs read the front ends' streams slower than the trigger: their CPU is the limit.",
        FRONT_END_SLOW => {
            "The front ends send more slowly than the trigger (set to, or short of CPU): the trigger waits for them."
        }
        _ => Throttle::REASONS.into_iter().find(|t| t.key() == key).map_or("", Throttle::sentence),
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
    pub reasons: Vec<&'static str>,
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
    pub dead_by_reason: BTreeMap<&'static str, f64>,
    /// One sentence naming the bottleneck, when the rate got is below [`SHORTFALL`] of the
    /// rate asked for.
    pub bottleneck: Option<String>,
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
    dead_by_reason: BTreeMap<&'static str, f64>,
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
            dead_by_reason: BTreeMap::new(),
        }
    }

    /// Takes the figures at the end of an interval and returns the interval's.
    pub fn interval(&mut self, now: &Progress) -> Interval {
        let seconds = (now.seconds - self.last.seconds).max(1e-9);
        let dead = if self.stopped { 0.0 } else { (now.held.dead_seconds - self.last.held.dead_seconds).max(0.0) };
        let writing = (now.held.write_seconds - self.last.held.write_seconds).max(0.0);
        let reasons: Vec<&'static str> = if dead <= 0.0 {
            Vec::new()
        } else if !now.throttles.is_empty() {
            now.throttles.clone()
        } else if writing >= dead / 2.0 {
            vec![RU_INPUT]
        } else {
            vec![FRONT_END_SLOW]
        };
        for &key in &reasons {
            *self.dead_by_reason.entry(key).or_default() += dead / reasons.len() as f64;
        }
        let interval = Interval {
            achieved_hz: now.triggered.saturating_sub(self.last.triggered) as f64 / seconds,
            dead_fraction: (dead / seconds).min(1.0),
            reasons,
        };
        if !self.stopped {
            self.triggering = (now.seconds, now.triggered);
        }
        self.last = now.clone();
        interval
    }

    /// The trigger is stopped (a limit, Ctrl-C): no dead time counts from here on.
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// The run so far, up to the last interval taken, over the time the trigger ran.
    pub fn summary(&self) -> TriggerSummary {
        let seconds = self.triggering.0.max(1e-9);
        let achieved_hz = self.triggering.1 as f64 / seconds;
        let dead_by_reason: BTreeMap<&'static str, f64> =
            self.dead_by_reason.iter().map(|(&k, &v)| (k, (v / seconds).min(1.0))).collect();
        let bottleneck = self.requested_hz.filter(|&r| achieved_hz < SHORTFALL * r).map(|requested| {
            let worst = dead_by_reason.iter().max_by(|a, b| a.1.total_cmp(b.1));
            let got = format!(
                "the trigger got {:.1} kHz of the {:.1} kHz asked for ({:.0} %)",
                achieved_hz / 1e3,
                requested / 1e3,
                100.0 * achieved_hz / requested
            );
            match worst {
                Some((key, share)) => format!(
                    "bottleneck: {key} ({:.0} % of the run held): {got}. {}",
                    100.0 * share,
                    reason_sentence(key)
                ),
                None => format!("bottleneck: unknown: {got}, and no front end held the trigger"),
            }
        });
        TriggerSummary {
            requested_hz: self.requested_hz,
            achieved_hz,
            // Folded from +0.0: an empty sum of f64 is -0.0, which prints as "-0.0 %".
            dead_fraction: (self.dead_by_reason.values().fold(0.0, |a, b| a + b) / seconds).min(1.0),
            dead_by_reason,
            bottleneck,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert_eq!(i.reasons, vec!["RU_BUFFERS_FULL"]);
        assert!((i.achieved_hz - 20_000.0).abs() < 1e-6);
        assert!((i.dead_fraction - 0.6).abs() < 1e-9);
        // Two reasons share the interval's 0.4 s.
        account.interval(&at(2.0, 40_000, 1.0, 0.1, vec!["BU_STORE_FULL", "RU_BUFFERS_FULL"]));
        // No throttle, writes not blocked: the emulator itself.
        let i = account.interval(&at(3.0, 60_000, 1.5, 0.2, vec![]));
        assert_eq!(i.reasons, vec![FRONT_END_SLOW]);
        // No throttle, most of the dead time in blocked writes: the RUs read too slowly.
        let i = account.interval(&at(4.0, 80_000, 1.9, 0.6, vec![]));
        assert_eq!(i.reasons, vec![RU_INPUT]);
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
        for key in Throttle::REASONS.iter().map(|t| t.key()).chain([RU_INPUT, FRONT_END_SLOW]) {
            assert!(!reason_sentence(key).is_empty(), "{key}");
        }
    }
}
