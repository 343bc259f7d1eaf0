//! Every built-in scenario over a few seeds (CI runs many more through `tessera sim`).

use tessera_sim::{replay_command, run, scenario};

fn check(name: &str, seeds: u64) -> Vec<tessera_sim::SimReport> {
    let sc = scenario(name).expect("built-in scenario");
    let mut reports = Vec::new();
    for seed in 0..seeds {
        let r = run(&sc, seed);
        assert!(
            r.violations.is_empty(),
            "{name} seed {seed} failed; replay with `{}`:\n{}",
            replay_command(name, seed),
            r.violations.join("\n")
        );
        // Every event published, or (push) lost with a lost BU.
        assert_eq!(r.events_checked + r.tally.lost_events, r.events_triggered, "{name} seed {seed}");
        if !sc.faults.trigger_stream_lost {
            assert_eq!(r.events_triggered, sc.events, "{name} seed {seed}");
        }
        reports.push(r);
    }
    reports
}

#[test]
fn scenario_1x1_lv1_wrap() {
    check("1x1_lv1_wrap", 5);
}

#[test]
fn scenario_2x2_bu_crash() {
    check("2x2_bu_crash", 5);
}

#[test]
fn scenario_4x4_slow_bu() {
    check("4x4_slow_bu", 3);
}

#[test]
fn scenario_2x2_missing_fed() {
    check("2x2_missing_fed", 5);
}

/// The RUs are full most of the run and their data streams unread: every event still comes out
/// whole (the check's "FEDs missing though no FED fault was injected"), and the streams were
/// held back.
#[test]
fn scenario_2x2_ru_full() {
    for r in check("2x2_ru_full", 5) {
        assert_eq!(r.tally.incomplete_events, 0, "seed {}", r.seed);
        assert!(r.tally.back_pressure > 0, "seed {}: the streams were never held back", r.seed);
    }
}

/// A FED at half the trigger's rate falls far behind it (more than a give-up time would allow) but is
/// never silent: its events wait for it, and none goes out without it.
#[test]
fn scenario_4x4_slow_fed() {
    for r in check("4x4_slow_fed", 3) {
        assert_eq!(r.tally.incomplete_events, 0, "seed {}", r.seed);
    }
}

/// The trigger stream closes a third to half-way through the run, before its event limit: the
/// EVM's node breaks the run (checked by the simulator at the end), every event triggered before
/// is built whole, and the data FEDs' fragments of later events are held as orphans.
#[test]
fn scenario_2x2_trigger_stream_lost() {
    let sc = scenario("2x2_trigger_stream_lost").unwrap();
    for r in check("2x2_trigger_stream_lost", 5) {
        assert_eq!((r.tally.trigger_breaks, r.tally.incomplete_events), (1, 0), "seed {}", r.seed);
        assert!(r.events_triggered > sc.events / 3 && r.events_triggered <= sc.events / 2 + 1, "seed {}", r.seed);
        assert!(r.tally.orphan_fragments > 0, "seed {}", r.seed);
    }
}

#[test]
fn scenario_8x8_random() {
    check("8x8_random", 3);
}

/// Orbit mode with BU crashes at a low L1 rate: every orbit published once, every event of every
/// orbit in a file, and the empty orbits (one in seven at 2 events per orbit) counted.
#[test]
fn scenario_2x2_orbit_bu_crash() {
    for r in check("2x2_orbit_bu_crash", 4) {
        assert!(r.tally.bu_crashes > 0 && r.tally.empty_orbits > 0, "seed {}: {:?}", r.seed, r.tally);
        assert!(r.tally.orbit_events > r.events_checked, "seed {}: {:?}", r.seed, r.tally);
    }
}

/// A source stalls and another dies: their orbits go out flagged incomplete, none is lost.
#[test]
fn scenario_4x4_orbit_missing_source() {
    for r in check("4x4_orbit_missing_source", 2) {
        assert!(r.tally.incomplete_events > 0, "seed {}", r.seed);
    }
}

/// Blocks one event short are left out of their orbits, and only they (the simulator's check of
/// the BU's verdicts); the orbit keeps all its events through the other sources.
#[test]
fn scenario_2x2_orbit_event_count_mismatch() {
    for r in check("2x2_orbit_event_count_mismatch", 4) {
        assert!(r.tally.blocks_left_out > 0, "seed {}: {:?}", r.seed, r.tally);
        assert_eq!(r.tally.incomplete_events, 0, "seed {}", r.seed);
    }
}

/// Receive memory for a few orbit blocks a source: the streams are held back, no orbit goes out
/// incomplete for it.
#[test]
fn scenario_2x2_orbit_ru_full() {
    for r in check("2x2_orbit_ru_full", 3) {
        assert_eq!(r.tally.incomplete_events, 0, "seed {}", r.seed);
        assert!(r.tally.back_pressure > 0, "seed {}: the streams were never held back", r.seed);
    }
}

#[test]
fn scenario_8x8_orbit_random() {
    check("8x8_orbit_random", 2);
}

/// Push with no fault: every event whole, none aged, none lost, nothing late.
#[test]
fn scenario_2x2_push() {
    for r in check("2x2_push", 4) {
        let t = r.tally;
        assert_eq!((t.incomplete_events, t.aged_events, t.late_parts, t.lost_events), (0, 0, 0, 0), "seed {}", r.seed);
    }
}

/// A BU writing 20 times slower: it stops reading, its RUs' sends wait, the throttle holds the
/// trigger (dead time), and no event is lost or shipped incomplete for it.
#[test]
fn scenario_4x4_push_slow_bu() {
    for r in check("4x4_push_slow_bu", 3) {
        let t = r.tally;
        assert!(t.dead_time_ns > 0, "seed {}: {t:?}", r.seed);
        assert_eq!((t.incomplete_events, t.lost_events), (0, 0), "seed {}", r.seed);
    }
}

/// A slow BU that never throttles: it leaves data messages that begin events unread when full
/// (it reads those that complete the events it holds), its RUs' sends wait and their streams are
/// held, their throttle holds the trigger; nothing is lost or incomplete.
#[test]
fn scenario_2x2_push_bu_full() {
    let reports = check("2x2_push_bu_full", 3);
    for r in &reports {
        let t = r.tally;
        assert!(t.held_messages > 0 && t.dead_time_ns > 0, "seed {}: {t:?}", r.seed);
        assert_eq!((t.incomplete_events, t.lost_events, t.aged_events), (0, 0, 0), "seed {}", r.seed);
    }
    assert!(reports.iter().any(|r| r.tally.back_pressure > 0), "the streams were never held back");
}

/// FEDs pause for up to ten times the give-up time a system might set, with fragments read in
/// pieces: no event goes out without them (the check), and the trigger was held meanwhile, the
/// time counted as dead time (the check's bound against the longest pause).
#[test]
fn scenario_4x4_fed_paused() {
    for r in check("4x4_fed_paused", 4) {
        let t = r.tally;
        assert_eq!(t.incomplete_events, 0, "seed {}", r.seed);
        assert!(t.dead_time_ns > 0 && t.partial_reads > 0, "seed {}: {t:?}", r.seed);
    }
}

/// A FED goes silent for good and is masked; another's stream ends: events go out without them
/// from then on only (the check), flagged and counted.
#[test]
fn scenario_2x2_fed_masked() {
    for r in check("2x2_fed_masked", 5) {
        assert!(r.tally.incomplete_events > 0, "seed {}", r.seed);
    }
}

/// Streams connect in any order, up to 50 ms late, strangers among them: no event is made before
/// the last is there (the check), none is incomplete, and the strangers are refused.
#[test]
fn scenario_4x4_late_connect() {
    for r in check("4x4_late_connect", 5) {
        let t = r.tally;
        assert_eq!(t.incomplete_events, 0, "seed {}", r.seed);
        assert!(t.refused_connections > 0 && t.partial_reads > 0, "seed {}: {t:?}", r.seed);
    }
}

/// 32 RUs and 32 BUs with stores of a dozen events: every BU's requests stay within its store
/// (the check's bound), and every event is built whole.
#[test]
fn scenario_32x32_small_store() {
    for r in check("32x32_small_store", 1) {
        assert_eq!(r.tally.incomplete_events, 0);
    }
}

/// Push with streams that connect late: nothing goes to a BU before every stream is there, so no
/// event ages and none is incomplete.
#[test]
fn scenario_4x4_push_late_connect() {
    for r in check("4x4_push_late_connect", 4) {
        let t = r.tally;
        assert_eq!((t.incomplete_events, t.aged_events, t.late_parts), (0, 0, 0), "seed {}", r.seed);
    }
}

/// A BU crashes and is excluded: what it was given and did not publish is counted lost, never
/// silent (the check's conservation), and the run goes on with the other BU. Started again, it
/// takes no event and closes its lumi sections, its records counting the same loss (the check's
/// end), and the run drains only once it has ended.
#[test]
fn scenario_2x2_push_bu_crash() {
    for r in check("2x2_push_bu_crash", 5) {
        assert_eq!(r.tally.bu_crashes, 1, "seed {}", r.seed);
        assert!(r.tally.lost_events > 0, "seed {}: {:?}", r.seed, r.tally);
    }
}

/// A FED stalls longer than the BUs wait for an event, and its RU gives it up (a give-up time is
/// set): the BUs ship its events flagged without its RU's part, and the part, sent after the RU
/// gave up, is dropped as late.
#[test]
fn scenario_4x4_push_late_fragment() {
    let reports = check("4x4_push_late_fragment", 6);
    let aged: u64 = reports.iter().map(|r| r.tally.aged_events).sum();
    let late: u64 = reports.iter().map(|r| r.tally.late_parts).sum();
    assert!(aged > 0 && late > 0, "{aged} aged, {late} late over the seeds");
}

#[test]
fn scenario_8x8_push_random() {
    check("8x8_push_random", 3);
}
