//! Slow is not dead: `tessera run` on systems whose RUs are full, whose FEDs lag the trigger or
//! whose units are many builds every event complete; back-pressure holds the trigger instead
//! (dead time), and memory smaller than the files hold back is advised with its arithmetic.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use common::tessera;
use std::path::Path;
use std::process::Output;

/// Runs `system` (YAML) into a new directory of `dir`; returns the output and the summary.
fn run(dir: &Path, name: &str, system: &str) -> (Output, serde_json::Value) {
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, system).unwrap();
    let output = dir.join(name);
    let out = tessera(&["run", file.to_str().unwrap(), "--output", output.to_str().unwrap()]);
    let summary = std::fs::read_to_string(output.join("summary.json")).unwrap_or_else(|_| {
        panic!("no summary: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    (out, serde_json::from_str(&summary).unwrap())
}

fn assert_every_event_complete(out: &Output, summary: &serde_json::Value, events: u64) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(summary["built"].as_u64(), Some(events), "{stdout}");
    assert_eq!(summary["built_complete"].as_u64(), Some(events), "{stdout}");
    assert!(stdout.contains(&format!("events: {events} built, {events} complete, 0 incomplete")), "{stdout}");
}

/// Issue #15's first case: 16 kB fragments, 7 data FEDs on 2 RUs, 2 BUs, free running, every
/// setting at its default. Each FED's 8 chunks of 2 MiB hold fewer fragments than the BUs' files
/// hold back: `config check` accepts the file and says what that costs, with the arithmetic and
/// its remedy, and every event is built complete (before, 18,984 of 20,000 events held only the
/// trigger fragment).
#[test]
fn a_2x2_system_of_16_kb_fragments_with_the_defaults_builds_every_event_complete_and_is_advised_more_memory() {
    let dir = tempfile::tempdir().unwrap();
    let system = "run: {events: 10000}\ntrigger: {free_running: true}\nrus:\n  \
                  - {name: ru0, feds: \"1024,0-2\", fragment_size: {bytes: 16384}}\n  \
                  - {name: ru1, feds: \"3-6\", fragment_size: {bytes: 16384}}\n\
                  bus:\n  - {name: bu0}\n  - {name: bu1}\nfu: {enabled: false}\n";
    let file = dir.path().join("16k.yaml");
    std::fs::write(&file, system).unwrap();
    let check = tessera(&["config", "check", file.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&check.stdout).into_owned() + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{said}");
    assert!(
        said.contains("advice: ru.chunks_per_fed: 8 chunks of 2097152 bytes hold 889 of rus[0]'s fragments")
            && said.contains(
                "fewer than the 2000 events the BUs' open files can hold back (2 BUs × bu.max_events_per_file 1000)"
            )
            && said.contains("give at least 17 chunks, or bu.max_events_per_file at most 444"),
        "{said}"
    );
    let (out, summary) = run(dir.path(), "defaults", system);
    assert!(String::from_utf8_lossy(&out.stdout).contains("advice: ru.chunks_per_fed:"));
    assert_every_event_complete(&out, &summary, 10_000);
}

/// Issue #15's scaling case: 8 RUs × 8 BUs running free, 3 FEDs of 2 kB per RU (before, 42 % of
/// events came out incomplete).
#[test]
fn an_8x8_system_running_free_builds_every_event_complete() {
    let dir = tempfile::tempdir().unwrap();
    let mut system = String::from("run: {events: 10000}\ntrigger: {free_running: true}\nrus:\n");
    for r in 0..8 {
        let trigger = if r == 0 { "1024," } else { "" };
        system += &format!("  - {{name: ru{r}, feds: \"{trigger}{}-{}\"}}\n", 3 * r, 3 * r + 2);
    }
    system += "bus:\n";
    for b in 0..8 {
        system += &format!("  - {{name: bu{b}}}\n");
    }
    // Every other setting at its default: 8 BUs' files of 1000 events hold back more than the
    // RUs' memory holds, so files close early when an RU runs short.
    system += "fu: {enabled: false}\n";
    let (out, summary) = run(dir.path(), "8x8", &system);
    assert_every_event_complete(&out, &summary, 10_000);
}

/// Issue #15's lagging case: a data FED's front end sends 10 % slower than the trigger, falling
/// further and further behind it: its events wait for it, none goes out without it, and the
/// trigger is held (dead time).
#[test]
fn a_2x2_data_fed_10_percent_slower_than_the_trigger_holds_it_and_no_event_is_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    let system = "run: {events: 10000}\ntrigger: {rate_hz: 5000}\nrus:\n  \
                  - {name: ru0, feds: \"1024,0-2\"}\n  - {name: ru1, feds: \"3\", send_rate_percent: 90}\n\
                  bus:\n  - {name: bu0}\n  - {name: bu1}\nfu: {enabled: false}\n";
    let (out, summary) = run(dir.path(), "slow", system);
    assert_every_event_complete(&out, &summary, 10_000);
    let dead = summary["trigger"]["dead_fraction"].as_f64().unwrap();
    assert!(dead > 0.0, "the slow FED held the trigger: {}", summary["trigger"]);
}
