//! The simulator's self-check: each deliberate protocol bug must be caught within a few seeds,
//! which shows that the invariants can fail.

use tessera_sim::{Bug, run, scenario};

/// Runs `scenario_name` with `bug` switched on, seed after seed, and returns the first seed that
/// broke an invariant with its first violation.
fn first_catch(scenario_name: &str, bug: Bug, seeds: u64) -> Option<(u64, String)> {
    let sc = tessera_sim::Scenario { bug: Some(bug), ..scenario(scenario_name).expect("built-in scenario") };
    let caught = (0..seeds).find_map(|seed| run(&sc, seed).violations.first().map(|v| (seed, v.clone())));
    if let Some((seed, v)) = &caught {
        eprintln!("{bug:?} in {scenario_name}: caught at seed {seed}: {v}");
    }
    caught
}

/// The rule of the old fragment time-out, that an event goes on without a FED silent for a
/// while, is what the pauses of `4x4_fed_paused` must catch: a silent FED is not a dead one.
#[test]
fn giving_up_on_a_paused_fed_is_caught() {
    let (seed, v) = first_catch("4x4_fed_paused", Bug::GiveUpSilentFeds, 10).expect("bug not caught in 10 seeds");
    assert!(v.contains("neither ended nor was masked") || v.contains("though no give-up time"), "seed {seed}: {v}");
}

/// An EVM that starts the run before every stream is there makes events some FED cannot be in.
#[test]
fn starting_before_every_stream_connected_is_caught() {
    let (seed, v) = first_catch("4x4_late_connect", Bug::StartBeforeStreams, 10).expect("bug not caught in 10 seeds");
    assert!(v.contains("before every stream had connected"), "seed {seed}: {v}");
}

#[test]
fn commit_before_written_is_caught() {
    let (seed, v) = first_catch("4x4_slow_bu", Bug::CommitBeforeWritten, 20).expect("bug not caught in 20 seeds");
    assert!(v.contains("before its data was written"), "seed {seed}: {v}");
}

#[test]
fn forgetting_to_reassign_a_lost_bus_events_is_caught() {
    let (seed, v) = first_catch("2x2_bu_crash", Bug::ForgetReassign, 20).expect("bug not caught in 20 seeds");
    assert!(v.contains("no progress") || v.contains("never published"), "seed {seed}: {v}");
}

#[test]
fn releasing_ru_buffers_before_commit_is_caught() {
    let (seed, v) = first_catch("2x2_bu_crash", Bug::ReleaseBeforeCommit, 20).expect("bug not caught in 20 seeds");
    assert!(v.contains("after its release") || v.contains("no progress"), "seed {seed}: {v}");
}

#[test]
fn excluding_a_lost_bu_without_telling_the_rus_is_caught() {
    let (seed, v) = first_catch("2x2_push_bu_crash", Bug::ExcludeUntold, 20).expect("bug not caught in 20 seeds");
    assert!(v.contains("though no RU gives up on a FED"), "seed {seed}: {v}");
}
