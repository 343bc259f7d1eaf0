//! Orbit mode as a user runs it: `examples/orbit.yaml` builds orbits from DTH streams through
//! the filter farm into storage with both conservation checks holding, and a run with faulty
//! sources keeps every orbit, leaves out what disagrees, and writes BU directories that
//! `tessera verify` reads byte for byte.

use std::path::Path;
use std::process::{Command, Output};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("tessera runs")
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/orbit.yaml").display().to_string()
}

#[test]
fn the_orbit_example_builds_orbits_into_storage_with_orbits_and_events_conserved() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out");
    let out = tessera(&["run", &example(), "--seconds", "2", "--output", output.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("conservation: orbits triggered "), "{stdout}");
    let line = |start: &str| stdout.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("{stdout}"));
    assert!(line("orbits: written ").ends_with("holds"), "{stdout}");
    assert!(line("chain: built ").ends_with("holds"), "{stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(output.join("summary.json")).unwrap()).unwrap();
    let chain = &summary["chain"];
    let written = chain["orbits_written"].as_u64().unwrap();
    assert!(written > 1000, "{chain}");
    assert_eq!(chain["orbits_processed_by_fus"].as_u64(), Some(written));
    // Orbits are 11.2 kHz, events 20 kHz: more events than orbits with events were built.
    assert!(chain["built"].as_u64().unwrap() > written, "{chain}");
    assert!(tessera(&["verify", output.join("storage/run000001").to_str().unwrap()]).status.success());
}

#[test]
fn faulty_sources_are_left_out_of_their_orbits_or_flagged_and_the_bu_directories_verify_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let system = dir.path().join("orbit.yaml");
    let yaml = std::fs::read_to_string(example()).unwrap();
    let yaml = yaml
        .replace("  enabled: true", "  enabled: false")
        .replace("    feds: \"4-7\"\n", "    feds: \"4-7\"\n    faults: [\"drop-event@3000/5\", \"bad-crc@4000/6\"]\n");
    std::fs::write(&system, yaml).unwrap();
    let output = dir.path().join("out");
    let out = tessera(&["run", system.to_str().unwrap(), "--seconds", "1", "--output", output.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("conservation: orbits triggered "), "{stdout}");
    let all = format!("{stdout}{stderr}");
    assert!(
        all.contains("source 5's block left out of the file: event count"),
        "the block without an event is left out and said: {all}"
    );
    assert!(all.contains("source 6 orbit 4000") && all.contains("CRC-32C mismatch"), "{all}");
    let mut violations = 0;
    for bu in ["bu0", "bu1"] {
        let run_dir = output.join(bu).join("run000001");
        let out = tessera(&["verify", run_dir.to_str().unwrap()]);
        let (stdout, stderr) = text(&out);
        if !out.status.success() {
            // The flagged block is written as it came: verify names its file and offset.
            assert!(stdout.contains("orbit 4000 source 6: orbit block: CRC-32C mismatch"), "{stdout}\n{stderr}");
            violations += 1;
        }
    }
    assert_eq!(violations, 1, "the one BU that wrote orbit 4000 has its bad CRC, the other verifies clean");
}

/// Orbit files read through the BUs' file brokers as CMSSW's DTH-mode reader reads them
/// (`fu.process: reader`): no deviation, every orbit written read, every event built deleted.
#[test]
fn readers_read_every_orbit_written_through_the_brokers_with_no_deviation() {
    let dir = tempfile::tempdir().unwrap();
    let system = dir.path().join("orbit.yaml");
    let yaml = std::fs::read_to_string(example()).unwrap();
    std::fs::write(&system, yaml.replace("  processes_per_bu: 2", "  processes_per_bu: 2\n  process: reader")).unwrap();
    let output = dir.path().join("out");
    let out = tessera(&["run", system.to_str().unwrap(), "--seconds", "2", "--output", output.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let line = |start: &str| stdout.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("{stdout}"));
    assert!(line("orbits: written ").ends_with("by the readers  holds"), "{stdout}");
    assert!(line("chain: built ").ends_with("holds"), "{stdout}");
    assert!(stdout.contains(" 0 deviations") && !stdout.contains("DEVIATION"), "{stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(output.join("summary.json")).unwrap()).unwrap();
    let chain = &summary["chain"];
    let written = chain["orbits_written"].as_u64().unwrap();
    assert!(written > 1000, "{chain}");
    assert_eq!(chain["orbits_processed_by_readers"].as_u64(), Some(written));
    // More events than orbits with events: the chain counts events, not orbits.
    assert!(chain["processed_by_readers"].as_u64().unwrap() > written, "{chain}");
}
