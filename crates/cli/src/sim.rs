//! `tessera sim`: the deterministic simulation of `tessera_sim`, its scenarios run over many
//! seeds on every core, with a replay command for each seed that breaks an invariant.

use anyhow::{Context, Result};
use std::process::ExitCode;

/// `tessera sim`: the scenarios named (default: all), each over `seeds` seeds from `first_seed`;
/// exit status 1 if any seed broke an invariant.
pub fn sim(names: &[String], seeds: u64, first_seed: u64) -> Result<ExitCode> {
    let all = tessera_sim::scenarios();
    let chosen: Vec<tessera_sim::Scenario> = if names.is_empty() {
        all
    } else {
        // The command line takes only the scenarios' names.
        names
            .iter()
            .map(|n| tessera_sim::scenario(n).with_context(|| format!("no scenario {n:?}")))
            .collect::<Result<_>>()?
    };
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let mut failed = false;
    say!(
        "{:<32} {:>6} {:>10} {:>10} {:>8} {:>6} {:>6} {:>7} {:>7} {:>8}  result",
        "scenario",
        "seeds",
        "built",
        "in orbits",
        "crashes",
        "slow",
        "FED",
        "corrupt",
        "orphans",
        "steps"
    );
    for sc in &chosen {
        // Seeds are independent: run them on every core, report in seed order.
        let reports: Vec<tessera_sim::SimReport> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..jobs)
                .map(|j| {
                    s.spawn(move || {
                        (first_seed..first_seed + seeds)
                            .filter(|seed| seed % jobs == j)
                            .map(|seed| tessera_sim::run(sc, seed))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let mut all: Vec<_> = handles.into_iter().flat_map(|h| h.join().expect("simulation thread")).collect();
            all.sort_by_key(|r| r.seed);
            all
        });
        let sum = |f: fn(&tessera_sim::SimReport) -> u64| reports.iter().map(f).sum::<u64>();
        let bad: Vec<&tessera_sim::SimReport> = reports.iter().filter(|r| !r.violations.is_empty()).collect();
        say!(
            "{:<32} {:>6} {:>10} {:>10} {:>8} {:>6} {:>6} {:>7} {:>7} {:>8}  {}",
            sc.name,
            reports.len(),
            sum(|r| r.events_checked),
            if sc.orbit.is_some() { sum(|r| r.tally.orbit_events).to_string() } else { "-".to_string() },
            sum(|r| r.tally.bu_crashes),
            sum(|r| r.tally.slow_bus),
            sum(|r| r.tally.fed_faults),
            sum(|r| r.tally.corrupt_fragments),
            sum(|r| r.tally.orphan_fragments),
            sum(|r| r.tally.steps),
            if bad.is_empty() { "ok".to_string() } else { format!("{} FAILED", bad.len()) }
        );
        if sc.push.is_some() {
            say!(
                "  push: {} events aged, {} late parts dropped, {} events lost with lost BUs, {:.1} ms dead time, {} data \
                 messages left unread for a while",
                sum(|r| r.tally.aged_events),
                sum(|r| r.tally.late_parts),
                sum(|r| r.tally.lost_events),
                sum(|r| r.tally.dead_time_ns) as f64 / 1e6,
                sum(|r| r.tally.held_messages)
            );
        }
        for r in bad.iter().take(3) {
            failed = true;
            say!("  seed {} broke an invariant:", r.seed);
            for v in r.violations.iter().take(5) {
                say!("    {v}");
            }
            say!("  replay: {}", tessera_sim::replay_command(sc.name, r.seed));
        }
        failed |= !bad.is_empty();
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
