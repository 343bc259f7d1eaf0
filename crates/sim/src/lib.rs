//! Deterministic simulation of whole Tessera systems (docs/design.md §9, "Deterministic
//! simulation").
//!
//! One thread and one seeded random generator drive every unit of a system — the EVM's node,
//! the RUs, the BUs — with their FED streams, a network that delays and reorders messages between
//! connections (keeping order within one, as TCP does), and injected faults: BU crashes and
//! restarts at random points, slow BUs, paused, ended, masked, slow or out-of-sequence FEDs,
//! streams that connect in any order and late (strangers among them), fragments read in pieces,
//! a trigger stream that closes early, corrupt fragments, small BU stores, the 24-bit LV1 wrap.
//! After every step (every few steps in large systems) the simulator checks the invariants:
//!
//! - every event that entered the RUs is published in exactly one file, whole (a fragment or a
//!   "missing" mark for every FED) and correctly flagged, and no file is published before it is
//!   written;
//! - no unit holds more than its bound, and no buffer is freed twice or left held at the end;
//! - no event is made before every stream has connected, every configured stream is taken, and
//!   no event goes out without a FED unless its stream ended, it was masked or it lost sync (or,
//!   with a give-up time, it paused past it); a pause longer than an RU's window lasts is counted
//!   as dead time;
//! - the system makes progress: a run with a finite trigger count drains, and a stuck one says
//!   what each RU waits for;
//! - the trigger stream's end is judged right: its close after the run's events stops the
//!   trigger cleanly, a close before them fails the run, and the data FEDs' fragments of events
//!   never triggered are held as orphans, never built.
//!
//! The same seed replays the same run exactly.

#![warn(missing_docs)]

pub mod ideal;
mod readout;
pub mod rng;
pub mod scenario;
pub mod world;

pub use scenario::{Bug, Scenario, scenario, scenarios};
pub use world::Tally;

/// The outcome of one seed of one scenario.
#[derive(Debug, Clone)]
pub struct SimReport {
    /// The scenario's name.
    pub scenario: &'static str,
    /// The seed.
    pub seed: u64,
    /// Events checked (published and verified).
    pub events_checked: u64,
    /// Events the trigger issued: the scenario's, or fewer when its stream broke.
    pub events_triggered: u64,
    /// Simulated time at the end, in nanoseconds.
    pub sim_time_ns: u64,
    /// What was injected and seen.
    pub tally: Tally,
    /// Broken invariants; empty when the run passed.
    pub violations: Vec<String>,
}

/// Runs `scenario` with `seed`.
pub fn run(scenario: &Scenario, seed: u64) -> SimReport {
    let mut world = world::World::new(scenario, seed);
    let sim_time_ns = world.run();
    SimReport {
        scenario: scenario.name,
        seed,
        events_checked: world.published_count(),
        events_triggered: world.triggered_count(),
        sim_time_ns,
        tally: world.tally,
        violations: world.violations,
    }
}

/// The command that replays one seed.
pub fn replay_command(scenario: &str, seed: u64) -> String {
    format!("tessera sim --scenario {scenario} --seeds 1 --first-seed {seed}")
}
