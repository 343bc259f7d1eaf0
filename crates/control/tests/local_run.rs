//! A 2×2 system run in this process and supervised by `LocalRun` as `tessera run` does: a run
//! stopped at its time limit drains every triggered event and ends; one with two operator stops
//! is cut short and aborted. The run's status the control API serves says which.

mod common;

use common::{Setup, plan, system};
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;
use tessera_control::RunState;
use tessera_control::local_run::{LocalRun, ProgressLine};
use tessera_control::system::Progress;
use tessera_control::trigger::Interval;

/// The progress the run showed: how many times, the events built at the last, and how many
/// times the shown lines were ended.
#[derive(Default)]
struct Seen {
    shown: usize,
    built: u64,
    ended: usize,
}

impl ProgressLine for Seen {
    fn show(&mut self, now: &Progress, _last: &Progress, _interval: &Interval) {
        self.shown += 1;
        self.built = now.built;
    }

    fn end(&mut self) {
        self.ended += 1;
    }
}

#[test]
fn a_run_at_its_time_limit_stops_drains_every_event_and_ends() {
    let tmp = tempfile::tempdir().unwrap();
    // More events than the run has time for: the time limit stops it.
    let setup = Setup::new(1, 100_000_000);
    let mut cfg = system(tmp.path(), &setup);
    cfg.run.seconds = Some(0.5);
    let interrupts = Arc::new(AtomicU32::new(0));
    let local = LocalRun::start(&cfg, tmp.path(), plan(tmp.path(), &setup), None, interrupts).unwrap();
    let status = local.served().run.expect("a run serves its status");
    let mut seen = Seen::default();
    let end = local.supervise(Duration::from_millis(50), &mut seen);
    let c = end.system.conservation();
    assert!(end.system.clean(), "{:#?}", end.system);
    assert!(!end.cut_short);
    assert!(c.holds && c.triggered > 0 && c.triggered < setup.events, "{c:?}");
    assert_eq!(c.built, c.triggered, "a drained run builds every event it triggered");
    assert!(seen.shown > 0 && seen.built <= c.built, "the progress was shown: {} times", seen.shown);
    assert_eq!(seen.ended, 2, "the progress line ends at the stop and when the loop ends");
    assert!(end.farm.is_none(), "no farm was asked for");
    assert_eq!(status.view().state, RunState::Merging, "the units ended; the caller has not checked the run yet");
    end.record(true);
    assert_eq!(status.view().state, RunState::Ended);
}

#[test]
fn a_second_operator_stop_cuts_the_run_short_and_it_is_aborted() {
    let tmp = tempfile::tempdir().unwrap();
    let setup = Setup::new(1, 100_000_000);
    let cfg = system(tmp.path(), &setup);
    // Two stops before the first look: the run stops and is cut short at once.
    let interrupts = Arc::new(AtomicU32::new(2));
    let local = LocalRun::start(&cfg, tmp.path(), plan(tmp.path(), &setup), None, interrupts).unwrap();
    let status = local.served().run.expect("a run serves its status");
    let end = local.supervise(Duration::from_millis(50), &mut Seen::default());
    assert!(end.cut_short && end.system.cut_short, "{:#?}", end.system.conservation());
    assert!(status.view().stop_requested);
    end.record(true);
    assert_eq!(status.view().state, RunState::Aborted, "a run cut short is aborted, checked or not");
}
