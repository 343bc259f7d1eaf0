//! Incomplete events are visible: `tessera run`'s summary counts them per FED with the reason and
//! fails the run above the allowed number, and `tessera verify` names every event that misses a
//! FED of the run's list.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use common::tessera;
use std::path::Path;
use std::process::Output;

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A BU directory under `dir` holding run 1 (lumi sections of `events_per_ls` events, data FEDs
/// 0..3 and the trigger FED 1024) whose lumi section 2 was written without FED 3: its files,
/// `.jsn` and EoLS are those of the same run written with FEDs 0..2, so every rule of the file
/// contract holds. Returns the run directory.
fn run_without_fed_3_in_ls_2(dir: &Path, events_per_ls: u32) -> std::path::PathBuf {
    let per_ls = events_per_ls.to_string();
    for (bu, feds) in [("bu", "4"), ("without", "3")] {
        let output = dir.join(bu);
        let args = ["sample", "--output", output.to_str().unwrap(), "--feds", feds, "--events-per-ls", &per_ls];
        let out = tessera(&args);
        assert!(out.status.success(), "{:?}", text(&out));
    }
    let run_dir = dir.join("bu/run000001");
    for entry in std::fs::read_dir(dir.join("without/run000001")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if name.starts_with("run000001_ls0002_") {
            std::fs::copy(&path, run_dir.join(&name)).unwrap();
        }
    }
    run_dir
}

#[test]
fn verify_names_the_fed_that_events_miss_and_passes_with_the_feds_they_hold() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = run_without_fed_3_in_ls_2(dir.path(), 20);
    let run = run_dir.to_str().unwrap();
    // Without the run's FED list, nothing is wrong with the files.
    let out = tessera(&["verify", run]);
    assert!(out.status.success(), "{:?}", text(&out));
    // Against it, each event of lumi section 2 (events 21..=40) misses FED 3.
    let out = tessera(&["verify", run, "--expect-feds", "1024,0-3"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("20 of 60 events miss FEDs of the expected list (FED 3: 20)"), "{stdout}");
    let first =
        format!("{run}/run000001_ls0002_index000000.raw at byte 32: event 21: FED 3 missing (not flagged incomplete)");
    assert!(stdout.lines().any(|l| l == first), "{stdout}");
    for event in 21..=40 {
        assert!(stdout.contains(&format!(": event {event}: FED 3 missing")), "event {event}: {stdout}");
    }
    assert!(stdout.ends_with(&format!("{run}: 20 violations\n")), "{stdout}");
    // The system file's FEDs are the same list.
    let system = dir.path().join("system.yaml");
    std::fs::write(
        &system,
        "rus:\n  - name: ru0\n    feds: \"1024,0-1\"\n  - name: ru1\n    feds: \"2-3\"\nbus:\n  - name: bu0\n",
    )
    .unwrap();
    let out = tessera(&["verify", run, "--system", system.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["fed_coverage"]["missing_per_fed"], serde_json::json!({"3": 20}));
    assert_eq!(report["violations"].as_array().unwrap().len(), 20);
    // Listing only the FEDs every event holds passes, and says FED 3 is outside the list.
    let out = tessera(&["verify", run, "--expect-feds", "1024,0-2"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("0 of 60 events miss FEDs of the expected list"), "{stdout}");
    assert!(stdout.contains("events also hold FEDs outside the list (FED 3: 40)"), "{stdout}");
    assert!(stdout.contains("OK, every rule holds"), "{stdout}");
    // A bad list is refused.
    let out = tessera(&["verify", run, "--expect-feds", "1024,x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("--expect-feds 1024,x"), "{:?}", text(&out));
}

#[test]
fn verify_prints_the_first_100_violations_and_counts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = run_without_fed_3_in_ls_2(dir.path(), 150);
    let run = run_dir.to_str().unwrap();
    let out = tessera(&["verify", run, "--expect-feds", "1024,0-3"]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert_eq!(stdout.lines().filter(|l| l.contains(": FED 3 missing")).count(), 100, "{stdout}");
    assert!(stdout.contains(&format!("{run}: ... and 50 more violations (--json lists every one)")), "{stdout}");
    assert!(stdout.ends_with(&format!("{run}: 150 violations\n")), "{stdout}");
    assert!(stdout.contains("150 of 450 events miss FEDs of the expected list (FED 3: 150)"), "{stdout}");
}

/// A 2×2 system of 1000 events, free running, filter farm off, in which FED 4 (on `ru1`) skips
/// event 500: it loses its sync, and events 500..=1000 go out without it.
fn system_with_a_skipped_event(dir: &Path) -> std::path::PathBuf {
    let yaml = "run:\n  events: 1000\n  orbits_per_lumi_section: 64\n\
                trigger:\n  free_running: true\n\
                rus:\n  - name: ru0\n    feds: \"1024,0-2\"\n    fragment_size: {bytes: 2048}\n\
                \x20 - name: ru1\n    feds: \"3-5\"\n    fragment_size: {bytes: 2048}\n    faults: [\"skip@500/4\"]\n\
                bus:\n  - name: bu0\n  - name: bu1\n\
                bu:\n  max_events_per_file: 200\n  file_timeout_ms: 300\n\
                fu:\n  enabled: false\n";
    let path = dir.join("system.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

#[test]
fn run_counts_incomplete_events_per_fed_and_fails_above_the_allowed_number() {
    let dir = tempfile::tempdir().unwrap();
    let system = system_with_a_skipped_event(dir.path());
    let system = system.to_str().unwrap();
    // With the fault configured, incomplete events are expected: the run succeeds.
    let output = dir.path().join("expected");
    let out = tessera(&["run", system, "--output", output.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("events: 1000 built, 499 complete, 501 incomplete (FED 4: 501 MISSING after SYNC_LOST 1)"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "incomplete events: 501, any number allowed, because faults are configured (rus[1].faults: skip@500/4)"
        ),
        "{stdout}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(output.join("summary.json")).unwrap()).unwrap();
    assert_eq!((summary["built_complete"].as_u64(), summary["built_incomplete"].as_u64()), (Some(499), Some(501)));
    assert_eq!(
        summary["fed_errors"],
        serde_json::json!([{"fed": 4, "missing": 501, "errors": {"MISSING": 501, "SYNC_LOST": 1}}])
    );
    assert_eq!(summary["incomplete_check"]["within_limit"], serde_json::json!(true));
    assert_eq!(summary["incomplete_check"]["max_incomplete"], serde_json::Value::Null);
    // With none allowed, the same run fails, and says by which rule.
    let output = dir.path().join("none-allowed");
    let out = tessera(&["run", system, "--output", output.to_str().unwrap(), "--max-incomplete", "0"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("conservation: triggered 1000 = built 1000 + lost 0  holds"), "{stdout}");
    assert!(
        stdout.contains("incomplete events: 501, at most 0 allowed, by --max-incomplete 0  ABOVE THE LIMIT"),
        "{stdout}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(output.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["incomplete_check"]["within_limit"], serde_json::json!(false));
    assert_eq!(summary["incomplete_check"]["max_incomplete"], serde_json::json!(0));
}
