//! A whole 2×2 system on loopback, in one process: emulated FEROL streams into two RUs (the
//! first with the EVM), two BUs writing run directories. The run crosses the 24-bit LV1 wrap;
//! afterwards every run directory verifies byte for byte against the seeded emulator, every
//! event is in exactly one file, and triggered = built.

mod common;

use common::{Setup, built_events, plan, violations};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;
use tessera_emu::generator::SizeModel;
use tessera_runtime::system::RunningSystem;

/// Every event in the BUs' files, checking that the run directories verify and that no event is
/// in two files.
fn events_in_files(dir: &Path) -> BTreeSet<u32> {
    let found = violations(dir);
    assert!(found.is_empty(), "{found:#?}");
    built_events(dir).into_keys().collect()
}

#[test]
fn a_2x2_system_on_loopback_builds_every_event_across_the_lv1_wrap() {
    let tmp = tempfile::tempdir().unwrap();
    let first_event = (1u64 << 24) - 700;
    let events = 2000;
    let system = RunningSystem::start(plan(tmp.path(), &Setup::new(first_event, events))).unwrap();
    let outcome = system.wait(Duration::from_secs(30));
    assert!(outcome.clean(), "{outcome:#?}");
    let c = outcome.conservation();
    assert_eq!((c.triggered, c.built, c.holds), (events, events, true), "{c:?}");
    assert_eq!(c.built_incomplete, 0, "{:#?}", outcome.problems);
    assert!(c.per_bu.iter().all(|&n| n > 0), "both BUs built events: {c:?}");
    let expected: BTreeSet<u32> = (first_event..first_event + events).map(|e| e as u32).collect();
    assert_eq!(events_in_files(tmp.path()), expected, "every event in exactly one file");
}

#[test]
fn fragments_larger_than_a_ferol_block_travel_in_pieces() {
    let tmp = tempfile::tempdir().unwrap();
    let events = 300;
    let size = SizeModel::LogNormal { mean_bytes: 9000.0, sigma_bytes: 4000.0 };
    let system = RunningSystem::start(plan(tmp.path(), &Setup { size, ..Setup::new(1, events) })).unwrap();
    let outcome = system.wait(Duration::from_secs(30));
    assert!(outcome.clean(), "{outcome:#?}");
    assert_eq!(outcome.conservation().built, events);
    assert_eq!(events_in_files(tmp.path()).len() as u64, events);
}
