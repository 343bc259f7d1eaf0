//! Faults of the front ends on a real 2×2 system on loopback (see `common`): one FED stream gets
//! one fault from the emulator at one event, and the run must go on as docs/design.md §1 (guarantee 3) says: the run
//! ends, every triggered event is built exactly once (or the unit that cannot go on fails with an
//! error naming the FED, the byte offset and the last LV1), the counters and problems say what
//! happened, the built events carry the flags that tell what is wrong with them, and
//! `tessera verify` finds nothing but the injected corruption.
//!
//! Names: `two_by_two_<fault>_on_fed_<id>_<what the run does>`.
//!
//! Every run: events 1..=300, 2 kB fragments, the fault at event 101 of FED 4 (RU 1) unless said
//! otherwise. Every stream ends cleanly after the run's event limit; a fault on the trigger FED 1024 (a disconnect,
//! garbage, a skipped event) fails the run: the events triggered before it are built, the data
//! FEDs' fragments of later events are counted per FED as orphans.

mod common;

use common::{Built, FEDS, Setup, built_events, each_built_event, plan, stream, violations};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tessera_config::CorruptStreamPolicy;
use tessera_config::emulation::Fault;
use tessera_control::system::{Outcome, RunningSystem, UnitFailure};
use tessera_emu::generator::StreamGenerator;
use tessera_emu::sender::End;
use tessera_formats::Value;
use tessera_formats::ferol::{HEADER_BYTES, ferol_wire_len};
use tessera_formats::frd::flags;
use tessera_formats::tcds::{TCDS_FED_ID, TCDS_FRAGMENT_BYTES};
use tessera_runtime::ru_node::{TriggerBreak, TriggerFault};
use tessera_runtime::state::UnitState;
use tessera_runtime::stats::{FedError, SubState, UnitStats};

const EVENTS: u64 = 300;
/// The event that gets the fault.
const AT: u64 = 101;
/// The FED that gets it: on RU 1, the RU without the EVM.
const FED: u16 = 4;
/// Fragment size of every FED but the trigger.
const FRAGMENT_BYTES: usize = 2048;
/// How long a unit may take; a run that needs it has hung.
const WAIT: Duration = Duration::from_secs(30);

/// The setup of every run: `fault` at event [`AT`] of `fed`.
fn setup(fault: Fault, fed: u16) -> Setup {
    Setup { faults: vec![format!("{fault}@{AT}/{fed}")], ..Setup::new(1, EVENTS) }
}

/// Runs `setup` under `dir` to its end; the outcome, and the RUs' figures at the end.
fn run(dir: &Path, setup: &Setup) -> (Outcome, Vec<Arc<UnitStats>>) {
    let system = RunningSystem::start(plan(dir, setup)).unwrap();
    let stats = system.ru_stats.clone();
    (system.wait(WAIT), stats)
}

/// The RU that reads `fed`.
fn ru_of(fed: u16) -> usize {
    FEDS.iter().position(|feds| feds.contains(&fed)).unwrap()
}

/// The FEDs every event has when nothing is missing, sorted.
fn all_feds() -> Vec<u16> {
    let mut feds: Vec<u16> = FEDS.concat();
    feds.sort_unstable();
    feds
}

/// Byte offset in a FED's stream of event `event`'s blocks, every fragment before it whole.
fn stream_offset(event: u64) -> u64 {
    (event - 1) * ferol_wire_len(FRAGMENT_BYTES) as u64
}

/// Asserts a clean run in which every event was built once, `incomplete` of them with a part
/// missing; returns the built events.
fn assert_all_built(dir: &Path, outcome: &Outcome, incomplete: u64) -> BTreeMap<u32, Built> {
    assert!(outcome.clean(), "{outcome:#?}");
    let c = outcome.conservation();
    assert_eq!((c.triggered, c.built, c.holds), (EVENTS, EVENTS, true), "{c:?}");
    assert!(c.lost.is_empty(), "{c:?}");
    assert_eq!(c.built_incomplete, incomplete, "{c:?}\n{:#?}", outcome.problems);
    let built = built_events(dir);
    assert_eq!(built.keys().copied().collect::<Vec<_>>(), (1..=EVENTS as u32).collect::<Vec<_>>());
    built
}

/// Asserts that events before [`AT`] are whole and unflagged, and that [`AT`] and every event
/// after it lacks `fed` and is flagged incomplete (and nothing else).
fn assert_missing_from_fault_on(built: &BTreeMap<u32, Built>, fed: u16) {
    let whole = all_feds();
    let without: Vec<u16> = whole.iter().copied().filter(|&f| f != fed).collect();
    for (&event, b) in built {
        if u64::from(event) < AT {
            assert_eq!((b.flags, &b.feds), (flags::GENERATED, &whole), "event {event}");
        } else {
            assert_eq!((b.flags, &b.feds), (flags::GENERATED | flags::INCOMPLETE, &without), "event {event}");
        }
    }
}

/// Every problem the units reported that mentions `needle`.
fn problems_with<'a>(outcome: &'a Outcome, needle: &str) -> Vec<&'a String> {
    outcome.problems.iter().filter(|p| p.contains(needle)).collect()
}

/// Asserts that `verify` finds exactly the violations of event [`AT`], FED `fed`, in the file of
/// the BU that built it: one per message in `expected`, each the start of the message's text
/// after `event 101 FED <fed>: `.
fn assert_violations_only_at(dir: &Path, built: &BTreeMap<u32, Built>, fed: u16, expected: &[&str]) {
    let found = violations(dir);
    let bu = built[&(AT as u32)].bu;
    let prefix = format!("event {AT} FED {fed}: ");
    let mut left: Vec<&str> = Vec::new();
    for (b, v) in &found {
        assert_eq!(*b, bu, "a violation in the other BU's run directory: {found:#?}");
        assert!(v.file.ends_with(".raw") && v.offset.is_some(), "{found:#?}");
        left.push(v.message.strip_prefix(&prefix).unwrap_or_else(|| panic!("not event {AT} FED {fed}: {found:#?}")));
    }
    for start in expected {
        let i = left.iter().position(|m| m.starts_with(start)).unwrap_or_else(|| panic!("no {start:?}: {found:#?}"));
        left.remove(i);
    }
    assert!(left.is_empty(), "unexpected: {left:#?}");
}

/// Asserts that one fragment, FED's of event AT, was flagged corrupt, by its RU alone, that no
/// stream broke, and that it was reported once; returns the report.
fn the_one_corrupt_fragment(outcome: &Outcome, stats: &[Arc<UnitStats>]) -> String {
    let ru = ru_of(FED);
    assert_eq!(stats[ru].corrupt_fragments.get(), 1);
    assert_eq!(stats[1 - ru].corrupt_fragments.get(), 0);
    assert_eq!(stats.iter().map(|s| s.broken_streams.get()).sum::<u64>(), 0);
    let reported = problems_with(outcome, &format!("RU {ru}: FED {FED} fragment with LV1 {AT}"));
    assert_eq!(reported.len(), 1, "{:#?}", outcome.problems);
    reported[0].clone()
}

/// Asserts that the RUs' per-FED error counts are `expected` for [`FED`] (by [`FedError::ALL`])
/// and nothing for every other FED.
fn assert_fed_errors(stats: &[Arc<UnitStats>], expected: [u64; FedError::ALL.len()]) {
    let ru = ru_of(FED);
    assert_eq!(stats[ru].fed_errors.with_errors(), [(FED, expected)]);
    assert_eq!(stats[1 - ru].fed_errors.with_errors(), [], "the other RU's FEDs");
}

/// Asserts that `verify` finds nothing wrong: events that lack a FED are flagged incomplete,
/// which breaks no rule.
fn assert_verifies(dir: &Path) {
    let found = violations(dir);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn two_by_two_bad_crc_on_fed_4_is_built_flagged_fragment_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (outcome, stats) = run(tmp.path(), &setup(Fault::BadCrc, FED));
    let built = assert_all_built(tmp.path(), &outcome, 0);
    let reported = the_one_corrupt_fragment(&outcome, &stats);
    assert!(reported.contains("CRC-16 mismatch"), "{reported:?}");
    assert_fed_errors(&stats, [1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(stats[ru_of(FED)].fed_errors.get(FED, FedError::Corrupt), 1);
    // The fault is the only thing wrong: one event flagged, with every FED.
    for (&event, b) in &built {
        let expected = if u64::from(event) == AT { flags::GENERATED | flags::FRAGMENT_ERROR } else { flags::GENERATED };
        assert_eq!((b.flags, &b.feds), (expected, &all_feds()), "event {event}");
    }
    // The flipped bit is the first payload byte: the CRC-16 and the seeded payload disagree.
    assert_violations_only_at(
        tmp.path(),
        &built,
        FED,
        &["FED fragment: CRC-16 mismatch", "payload differs from its seeded content"],
    );
}

#[test]
fn two_by_two_wrong_fed_id_on_fed_4_is_built_flagged_fragment_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (outcome, stats) = run(tmp.path(), &setup(Fault::WrongFedId, FED));
    let built = assert_all_built(tmp.path(), &outcome, 0);
    let reported = the_one_corrupt_fragment(&outcome, &stats);
    let wrong = FED ^ 0x800;
    let says = format!("source id at byte {}: expected {FED}, found {wrong}", stream_offset(AT) + HEADER_BYTES as u64);
    assert!(reported.contains(&says), "{reported:?}");
    // Counted for the stream's FED, whatever id the fragment claims.
    assert_fed_errors(&stats, [1, 0, 0, 0, 0, 0, 0, 0]);
    // The fragment is kept as it came, under the id its header says.
    let mut with_wrong_id: Vec<u16> = all_feds().into_iter().map(|f| if f == FED { wrong } else { f }).collect();
    with_wrong_id.sort_unstable();
    for (&event, b) in &built {
        if u64::from(event) == AT {
            assert_eq!((b.flags, &b.feds), (flags::GENERATED | flags::FRAGMENT_ERROR, &with_wrong_id));
        } else {
            assert_eq!((b.flags, &b.feds), (flags::GENERATED, &all_feds()), "event {event}");
        }
    }
    // The RU set its trailer's F bit (unexpected FED id), and nothing else: no reader can take
    // it for FED 2052's data.
    assert_eq!(f_bits(tmp.path()), [(AT as u32, wrong)]);
    assert!(reported.ends_with("passed on flagged, its trailer's F bit (unexpected FED id) set"), "{reported:?}");
    // The CRC-16 was resealed (and does not cover the F bit): verify says the F bit, and does
    // not take the payload, seeded for FED 4, for FED 2052's.
    assert_violations_only_at(
        tmp.path(),
        &built,
        wrong,
        &[
            "trailer's F bit set: the RU received this id on another FED's stream, so the fragment is not FED 2052's data",
        ],
    );
}

/// Every fragment in the BUs' raw files whose trailer has the F bit (unexpected FED id) set,
/// as (event, the FED id its header claims).
fn f_bits(dir: &Path) -> Vec<(u32, u16)> {
    let mut found = Vec::new();
    each_built_event(dir, |_, ev| {
        for f in ev.fragments() {
            let (_, f) = f.unwrap();
            if f.trailer.wrong_fed_id {
                found.push((ev.header.event, f.header.source_id));
            }
        }
    });
    found
}

/// Runs `fault` on FED 4, which breaks its stream at stream byte `at`, and checks what every
/// broken stream must give: that stream alone broken, no fragment counted corrupt, the break
/// said once with the fragments before it, every event from the fault on built without FED 4,
/// the files verified. Gives the line that said the break.
fn assert_stream_broke_at(fault: Fault, at: u64) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let (outcome, stats) = run(tmp.path(), &setup(fault, FED));
    let missing = EVENTS - AT + 1;
    let built = assert_all_built(tmp.path(), &outcome, missing);
    let ru = ru_of(FED);
    assert_eq!(stats[ru].broken_streams.get(), 1);
    assert_eq!(stats[1 - ru].broken_streams.get(), 0);
    assert_eq!(stats.iter().map(|s| s.corrupt_fragments.get()).sum::<u64>(), 0);
    let reported = problems_with(&outcome, &format!("RU {ru}: FED {FED} stream, byte {at} "));
    assert_eq!(reported.len(), 1, "{:#?}", outcome.problems);
    assert!(reported[0].contains(&format!("after {} fragments, last LV1 Some({})", AT - 1, AT - 1)), "{reported:?}");
    assert_fed_errors(&stats, [0, 0, missing, 0, 1, 0, 0, 0]);
    assert_missing_from_fault_on(&built, FED);
    assert_verifies(tmp.path());
    reported[0].clone()
}

#[test]
fn two_by_two_truncated_fragment_on_fed_4_breaks_the_stream_and_later_events_are_incomplete() {
    // Half the fragment's words, 1 kB, came in one block marked last: where its trailer should
    // be, in the last word, is payload.
    let at = stream_offset(AT) + (HEADER_BYTES + FRAGMENT_BYTES / 2 - 8) as u64;
    let reported = assert_stream_broke_at(Fault::Truncate, at);
    assert!(reported.contains(&format!("FED trailer: bad EOE marker at byte {at}")), "{reported:?}");
}

#[test]
fn two_by_two_garbage_on_fed_4_breaks_the_stream_and_later_events_are_incomplete() {
    // The garbage starts where event 101's blocks would have.
    let reported = assert_stream_broke_at(Fault::Garbage, stream_offset(AT));
    assert!(reported.ends_with("the rest of the stream is thrown away"), "{reported:?}");
}

#[test]
fn two_by_two_disconnect_of_fed_4_is_said_at_once_and_later_events_are_incomplete() {
    let tmp = tempfile::tempdir().unwrap();
    let (outcome, stats) = run(tmp.path(), &setup(Fault::Disconnect, FED));
    let missing = EVENTS - AT + 1;
    let built = assert_all_built(tmp.path(), &outcome, missing);
    let ru = ru_of(FED);
    // A disconnect is a clean end of the stream, not a broken one.
    assert_eq!(stats.iter().map(|s| s.broken_streams.get()).sum::<u64>(), 0);
    assert_eq!(stats.iter().map(|s| s.corrupt_fragments.get()).sum::<u64>(), 0);
    let sent = outcome.emulators[ru].as_ref().unwrap().streams.iter().find(|s| s.fed == FED).unwrap().clone();
    assert_eq!((sent.end, sent.events), (End::Disconnect, AT - 1));
    // Said at once, as the stream closes: before any event goes on without FED 4 (which waits
    // for no time-out), with the FED, its last LV1 and the bytes it sent.
    let said = format!(
        "RU {ru}: FED {FED} disconnected: its stream closed after {} fragments, {} bytes (last LV1 Some({})), \
         before the run's end",
        AT - 1,
        stream_offset(AT),
        AT - 1
    );
    let at = outcome.problems.iter().position(|p| p.starts_with(&said));
    let first_missing = outcome.problems.iter().position(|p| p.contains(&format!("event {AT} sent on without")));
    assert!(at.is_some() && at < first_missing, "{:#?}", outcome.problems);
    assert!(
        outcome.problems[first_missing.unwrap()].ends_with(&format!("without FEDs [{FED}]: FED {FED} disconnected")),
        "{:#?}",
        outcome.problems
    );
    assert!(stats[ru].sub_states().contains(&SubState::FedDisconnected));
    assert!(!stats[1 - ru].sub_states().contains(&SubState::FedDisconnected));
    assert_fed_errors(&stats, [0, 0, missing, 0, 0, 1, 0, 0]);
    assert_missing_from_fault_on(&built, FED);
    assert_verifies(tmp.path());
}

#[test]
fn two_by_two_skipped_event_on_fed_4_loses_its_sync_and_later_events_are_incomplete() {
    let tmp = tempfile::tempdir().unwrap();
    let (outcome, stats) = run(tmp.path(), &setup(Fault::SkipEvent, FED));
    let missing = EVENTS - AT + 1;
    let built = assert_all_built(tmp.path(), &outcome, missing);
    assert_eq!(stats.iter().map(|s| s.broken_streams.get()).sum::<u64>(), 0);
    assert_eq!(stats.iter().map(|s| s.corrupt_fragments.get()).sum::<u64>(), 0);
    let lost =
        problems_with(&outcome, &format!("FED {FED} lost sync: expected event {AT}, it sent LV1 {:#08x}", AT + 1));
    assert_eq!(lost.len(), 1, "{:#?}", outcome.problems);
    // The events left out say why: the sync loss, not a time-out that never passed.
    let left_out = problems_with(&outcome, "sent on without");
    assert!(!left_out.is_empty(), "{:#?}", outcome.problems);
    assert!(
        left_out.iter().all(|p| p.ends_with(&format!("without FEDs [{FED}]: FED {FED} lost sync"))),
        "{left_out:#?}"
    );
    assert!(problems_with(&outcome, "time-out").is_empty(), "{:#?}", outcome.problems);
    assert_fed_errors(&stats, [0, 0, missing, 1, 0, 0, 0, 0]);
    // A FED out of sync stays out: the RU says so until its end (and for a while after).
    let ru = ru_of(FED);
    let sub_states = stats[ru].sub_states();
    assert!(sub_states.contains(&SubState::SyncLoss) && sub_states.contains(&SubState::MissingData), "{sub_states:?}");
    assert!(!stats[1 - ru].sub_states().contains(&SubState::SyncLoss));
    assert_missing_from_fault_on(&built, FED);
    assert_verifies(tmp.path());
}

#[test]
fn two_by_two_garbage_on_fed_4_fails_ru_1_when_told_to_and_the_run_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let setup = Setup { on_corrupt_stream: CorruptStreamPolicy::Fail, ..setup(Fault::Garbage, FED) };
    let (outcome, stats) = run(tmp.path(), &setup);
    let ru = ru_of(FED);
    let err = outcome.rus[ru].as_ref().unwrap_err().to_string();
    let at = stream_offset(AT);
    let (before, last) = (AT - 1, AT - 1);
    assert_eq!(
        err,
        format!(
            "RU {ru}: FED {FED} stream, byte {at} (after {before} fragments, last LV1 Some({last})): \
             FEROL block header: bad signature at byte {at}: expected 0x475a, found {}",
            Value::Hex(garbage_start(&setup, FED, AT).into())
        ),
    );
    assert_eq!(stats[ru].broken_streams.get(), 1);
    // The failure stops the others at once: the EVM fails on losing RU 1, or is aborted when RU 1's
    // failure is seen first; it is not left calling RU 1's closed port or waiting for a time-out.
    let evm = outcome.rus[0].as_ref().unwrap_err();
    let aborted = matches!(evm, UnitFailure::Stopped { why: "stopped because another unit failed", .. });
    let evm = evm.to_string();
    let lost = evm.starts_with(&format!("the EVM lost RU {ru}"));
    let aborted = aborted && evm.starts_with("aborted");
    assert!(lost || aborted, "{evm}");
    let errors = outcome.rus.iter().map(|r| r.as_ref().err()).chain(outcome.bus.iter().map(|b| b.as_ref().err()));
    for e in errors {
        let e = e.expect("every unit was stopped").to_string();
        assert!(!e.contains("could not be reached") && !e.contains("did not end within"), "{e}");
    }
    let c = outcome.conservation();
    assert!(c.built < EVENTS && c.holds, "{c:?}");
    assert_eq!(c.lost.get("UNIT_FAILED").copied().unwrap_or(0), c.triggered - c.built, "{c:?}");
}

/// The first two bytes of the garbage the emulator of `setup` sends for `event` of `fed`,
/// big-endian as a block signature is read.
fn garbage_start(setup: &Setup, fed: u16, event: u64) -> u16 {
    let mut generator = StreamGenerator::new(stream(fed, &Setup { first_event: event, ..setup.clone() })).unwrap();
    let e = generator.next_event().unwrap();
    assert_eq!(e.fault, Some(Fault::Garbage));
    u16::from_be_bytes([e.bytes[0], e.bytes[1]])
}

/// Asserts that a fault on the trigger stream at event [`AT`] failed the run, and how: the
/// EVM's unit drained and ended Failed with the fault in its report, every unit else ended
/// cleanly, the events triggered before it were built whole, and the data FEDs' fragments of
/// later events were counted per FED as orphans. Returns the fault.
fn assert_trigger_failed(dir: &Path, outcome: &Outcome, stats: &[Arc<UnitStats>]) -> TriggerFault {
    assert!(!outcome.clean(), "{outcome:#?}");
    let evm = outcome.rus[0].as_ref().expect("the EVM drains the run before it fails it");
    let fault = evm.trigger_fault.clone().expect("the fault is in the EVM's report");
    let before = AT - 1;
    let (fed, fragments, last_event) = (fault.fed, fault.fragments, fault.last_event);
    assert_eq!((fed, fragments, last_event), (TCDS_FED_ID, before, Some(before)), "{fault:?}");
    assert_eq!(fault.stream_offset, before * ferol_wire_len(TCDS_FRAGMENT_BYTES) as u64, "{fault:?}");
    assert_eq!((stats[0].state(), stats[0].failed()), (UnitState::Failed, false));
    assert!(outcome.rus[1].is_ok() && outcome.bus.iter().all(Result::is_ok), "{outcome:#?}");
    assert_eq!(problems_with(outcome, &format!("EVM: {fault}")).len(), 1, "{:#?}", outcome.problems);
    // The events before it, whole; none after it.
    let c = outcome.conservation();
    assert_eq!((c.triggered, c.built, c.built_incomplete, c.holds), (before, before, 0, true), "{c:?}");
    assert!(c.lost.is_empty(), "{c:?}");
    let built = built_events(dir);
    assert_eq!(built.keys().copied().collect::<Vec<_>>(), (1..AT as u32).collect::<Vec<_>>());
    for (&event, b) in &built {
        assert_eq!((b.flags, &b.feds), (flags::GENERATED, &all_feds()), "event {event}");
    }
    assert_verifies(dir);
    // What the data FEDs sent of later events: counted per FED, each RU its own, never the
    // trigger's; no more than they sent.
    for (r, feds) in FEDS.iter().enumerate() {
        let orphans = &outcome.rus[r].as_ref().unwrap().orphan_fragments;
        let data: Vec<u16> = feds.iter().copied().filter(|&f| f != TCDS_FED_ID).collect();
        assert_eq!(orphans.iter().map(|o| o.0).collect::<Vec<_>>(), data, "RU {r}: {orphans:?}");
        assert!(orphans.iter().all(|&(_, n)| n > 0 && n <= EVENTS - before), "RU {r}: {orphans:?}");
    }
    let said = format!("fragments received of events after the run's last event, {before}, discarded");
    assert_eq!(problems_with(outcome, &said).len(), 2, "{:#?}", outcome.problems);
    fault
}

#[test]
fn two_by_two_disconnect_of_the_trigger_fed_1024_fails_the_run_after_building_the_events_triggered() {
    let tmp = tempfile::tempdir().unwrap();
    let (outcome, stats) = run(tmp.path(), &setup(Fault::Disconnect, TCDS_FED_ID));
    let fault = assert_trigger_failed(tmp.path(), &outcome, &stats);
    assert_eq!(fault.what, TriggerBreak::Closed { expected: Some(EVENTS) });
    assert_eq!(fault.what.key(), "TRIGGER_STREAM_CLOSED");
    let sent = outcome.emulators[0].as_ref().unwrap().streams.iter().find(|s| s.fed == TCDS_FED_ID).unwrap().clone();
    assert_eq!((sent.end, sent.events), (End::Disconnect, AT - 1));
    assert_eq!(stats.iter().map(|s| s.broken_streams.get() + s.corrupt_fragments.get()).sum::<u64>(), 0);
}

#[test]
fn two_by_two_garbage_on_the_trigger_fed_1024_fails_the_run_after_building_the_events_triggered() {
    let tmp = tempfile::tempdir().unwrap();
    let (outcome, stats) = run(tmp.path(), &setup(Fault::Garbage, TCDS_FED_ID));
    let fault = assert_trigger_failed(tmp.path(), &outcome, &stats);
    let TriggerBreak::Broken(why) = &fault.what else { panic!("{fault:?}") };
    assert!(why.starts_with("FEROL block header: bad signature at byte"), "{why}");
    assert_eq!(stats[0].broken_streams.get(), 1);
    assert_eq!(stats[0].fed_errors.get(TCDS_FED_ID, FedError::StreamBroken), 1);
}

#[test]
fn two_by_two_skipped_event_on_the_trigger_fed_1024_fails_the_run_after_building_the_events_triggered() {
    let tmp = tempfile::tempdir().unwrap();
    let (outcome, stats) = run(tmp.path(), &setup(Fault::SkipEvent, TCDS_FED_ID));
    let fault = assert_trigger_failed(tmp.path(), &outcome, &stats);
    assert_eq!(fault.what, TriggerBreak::SyncLost { expected: AT, found_lv1: AT as u32 + 1 });
    assert_eq!(stats[0].fed_errors.get(TCDS_FED_ID, FedError::SyncLost), 1);
    assert_eq!(stats.iter().map(|s| s.broken_streams.get()).sum::<u64>(), 0);
}

#[test]
fn two_by_two_garbage_on_fed_4_early_in_a_long_run_does_not_hold_back_its_front_end() {
    let tmp = tempfile::tempdir().unwrap();
    // Megabytes after the fault, more than the sockets between the emulator and the RU hold: a
    // stream that nobody reads any more would block its emulator until the RU ends.
    let events = 5_000;
    let (outcome, stats) = run(tmp.path(), &Setup { events, ..setup(Fault::Garbage, FED) });
    assert!(outcome.clean(), "{outcome:#?}");
    let ru = ru_of(FED);
    let sent = outcome.emulators[ru].as_ref().unwrap().streams.iter().find(|s| s.fed == FED).unwrap().clone();
    assert_eq!((sent.end, sent.events), (End::Events, events), "the stream was sent to its end");
    assert_eq!(stats[ru].broken_streams.get(), 1);
    let c = outcome.conservation();
    assert_eq!((c.triggered, c.built, c.built_incomplete, c.holds), (events, events, events - AT + 1, true), "{c:?}");
}

#[test]
fn two_by_two_without_an_event_limit_ends_cleanly_at_the_stop_line_and_nothing_is_orphaned() {
    let tmp = tempfile::tempdir().unwrap();
    // The front ends send until the stop line: the trigger stream's end there is the stop.
    let mut plan = plan(tmp.path(), &Setup::new(1, EVENTS));
    for e in &mut plan.emulators {
        e.limits.events = None;
    }
    for r in &mut plan.rus {
        r.event_limit = None;
    }
    let system = RunningSystem::start(plan).unwrap();
    let stats = system.ru_stats.clone();
    let deadline = std::time::Instant::now() + WAIT;
    while system.progress().triggered < EVENTS && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let last = system.stop();
    let outcome = system.wait(WAIT);
    assert!(outcome.clean(), "{outcome:#?}");
    assert_eq!(outcome.problem_count, 0, "{:#?}", outcome.problems);
    let c = outcome.conservation();
    assert_eq!((c.triggered, c.built, c.built_incomplete, c.holds), (last, last, 0, true), "{c:?}");
    for r in &outcome.rus {
        let r = r.as_ref().unwrap();
        assert!(r.trigger_fault.is_none() && r.orphan_fragments.is_empty(), "{r:?}");
    }
    assert!(stats.iter().all(|s| s.state() == UnitState::Halted && s.fed_errors.with_errors().is_empty()));
}
