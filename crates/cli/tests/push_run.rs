//! Push as a user runs it: `examples/push.yaml` builds every event through the filter farm into
//! storage with both checks holding and files `tessera verify` accepts; a FED that skips an event
//! leaves the later events incomplete, flagged and counted, with conservation holding; a BU left
//! out of `push.bus` runs and gets nothing; and orbits are pushed as events are.

use std::path::Path;
use std::process::{Command, Output};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("tessera runs")
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn example(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name)).unwrap()
}

/// Runs `yaml` (for `seconds`, if given) under `dir`; returns the summary printed and the
/// summary's JSON.
fn run(dir: &Path, yaml: &str, seconds: Option<&str>) -> (String, serde_json::Value) {
    let system = dir.join("system.yaml");
    std::fs::write(&system, yaml).unwrap();
    let output = dir.join("out");
    let mut args = vec!["run", system.to_str().unwrap(), "--output", output.to_str().unwrap()];
    args.extend(seconds.iter().flat_map(|s| ["--seconds", s]));
    let out = tessera(&args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let summary = serde_json::from_str(&std::fs::read_to_string(output.join("summary.json")).unwrap()).unwrap();
    (stdout, summary)
}

fn line<'a>(stdout: &'a str, start: &str) -> &'a str {
    stdout.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no line {start:?} in {stdout}"))
}

#[test]
fn the_push_example_builds_every_event_into_storage_and_both_checks_hold() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, summary) = run(dir.path(), &example("push.yaml"), Some("2"));
    let conservation = line(&stdout, "conservation: triggered ");
    assert!(conservation.contains("+ lost 0") && conservation.ends_with("holds"), "{stdout}");
    assert!(line(&stdout, "chain: built ").ends_with("holds"), "{stdout}");
    assert_eq!(summary["protocol"], "push", "{summary}");
    let per_bu = summary["per_bu"].as_array().unwrap();
    assert!(per_bu.iter().all(|b| b["events"].as_u64().unwrap() > 1000 && b["push_late_parts"] == 0), "{summary}");
    assert_eq!(summary["built_incomplete"], 0, "{summary}");
    let storage = dir.path().join("out/storage/run000003");
    let out = tessera(&["verify", storage.to_str().unwrap()]);
    assert!(out.status.success(), "{:?}", text(&out));
}

#[test]
fn a_fed_that_skips_an_event_leaves_later_events_incomplete_flagged_and_counted_under_push() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = example("push.yaml")
        .replace("    feds: \"4-7\"\n", "    feds: \"4-7\"\n    faults: [\"skip@3000/5\"]\n")
        .replace("seconds: 10", "events: 8000");
    let (stdout, summary) = run(dir.path(), &yaml, None);
    assert!(line(&stdout, "conservation: triggered 8000 = built 8000 + lost 0").ends_with("holds"), "{stdout}");
    // FED 5 is out of sync from event 3000 on: every later event lacks it, flagged incomplete.
    let incomplete = summary["built_incomplete"].as_u64().unwrap();
    assert_eq!(incomplete, 5001, "{summary}");
    assert!(line(&stdout, "chain: built 8000").ends_with("holds"), "{stdout}");
}

#[test]
fn a_bu_left_out_of_push_bus_runs_and_gets_no_event() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = example("push.yaml").replace("  bus: [bu0, bu1]", "  bus: [bu0]").replace("seconds: 10", "events: 5000");
    let (stdout, summary) = run(dir.path(), &yaml, None);
    assert!(line(&stdout, "conservation: triggered 5000 = built 5000 + lost 0").ends_with("holds"), "{stdout}");
    let events: Vec<u64> =
        summary["per_bu"].as_array().unwrap().iter().map(|b| b["events"].as_u64().unwrap()).collect();
    assert_eq!(events, [5000, 0], "{summary}");
}

#[test]
fn orbits_are_pushed_as_events_are_and_both_checks_hold() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = example("orbit.yaml").replacen("run:\n", "run:\n  protocol: push\n", 1);
    let (stdout, _) = run(dir.path(), &yaml, Some("1"));
    assert!(line(&stdout, "conservation: orbits triggered ").ends_with("holds"), "{stdout}");
    assert!(line(&stdout, "orbits: written ").ends_with("holds"), "{stdout}");
    assert!(line(&stdout, "chain: built ").ends_with("holds"), "{stdout}");
}

#[test]
fn a_push_section_with_a_bu_that_does_not_exist_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let system = dir.path().join("system.yaml");
    std::fs::write(&system, example("push.yaml").replace("  bus: [bu0, bu1]", "  bus: [bu0, bu7]")).unwrap();
    let out = tessera(&["config", "check", system.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(stderr.contains("push.bus[1]: no BU is named \"bu7\" (the BUs: bu0, bu1)"), "{stderr}");
}
