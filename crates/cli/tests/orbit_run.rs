//! Orbit mode as a user runs it: `examples/orbit.yaml` builds orbits from DTH streams through
//! the filter farm into storage with both conservation checks holding, and a run with faulty
//! sources keeps every orbit, leaves out what disagrees, and writes BU directories that
//! `tessera verify` reads byte for byte.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use common::{free_ports, spawn_logged, wait_child};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn tessera(args: &[&str]) -> Output {
    common::tessera(args)
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

/// `examples/orbit.yaml` without the farm, with `more` appended to ru1's entry (faults) and
/// `--seconds 1`, run with `extra` arguments: its output directory and the run's output.
fn orbit_run(dir: &Path, edit: impl Fn(String) -> String, extra: &[&str]) -> (std::path::PathBuf, Output) {
    let system = dir.join("orbit.yaml");
    let yaml = std::fs::read_to_string(example()).unwrap().replace("  enabled: true", "  enabled: false");
    std::fs::write(&system, edit(yaml)).unwrap();
    let output = dir.join("out");
    let mut args = vec!["run", system.to_str().unwrap(), "--seconds", "1", "--output", output.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = tessera(&args);
    (output, out)
}

/// The faults a DTH sender can make of one source's block, each struck once.
fn faulty_sources(yaml: String) -> String {
    yaml.replace(
        "    feds: \"4-7\"\n",
        "    feds: \"4-7\"\n    faults: [\"drop-event@3000/5\", \"bad-crc@4000/6\", \"wrong-source-id@3500/7\"]\n",
    )
}

#[test]
fn blocks_cmssw_would_refuse_are_left_out_their_orbits_counted_incomplete_and_the_bu_directories_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (output, out) = orbit_run(dir.path(), faulty_sources, &[]);
    let (stdout, stderr) = text(&out);
    // Faults are configured: any number of incomplete orbits is allowed.
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("conservation: orbits triggered "), "{stdout}");
    let all = format!("{stdout}{stderr}");
    for (source, why) in [(5, "event count"), (6, "CRC-32C"), (7, "orbit header names source 2055")] {
        let said = all.lines().find(|l| {
            l.contains(&format!("source {source}'s block left out of the file, the orbit counted incomplete"))
        });
        assert!(said.is_some_and(|l| l.contains(why)), "source {source}: {why}\n{all}");
    }
    // The RU names the header that is wrong: the orbit header, not the stream's block header.
    assert!(
        all.contains("source 7 orbit 3500") && all.contains("orbit header") && !all.contains("DTH block header"),
        "{all}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(output.join("summary.json")).unwrap()).unwrap();
    assert!(summary["built_incomplete"].as_u64().unwrap() >= 3, "{summary}");
    let mut left_out = std::collections::BTreeMap::new();
    for bu in summary["per_bu"].as_array().unwrap() {
        for (source, why) in bu["orbit_blocks_left_out"].as_object().unwrap() {
            for (reason, n) in why.as_object().unwrap() {
                *left_out.entry((source.clone(), reason.clone())).or_insert(0) += n.as_u64().unwrap();
            }
        }
    }
    let keys: Vec<(&str, &str)> = left_out.keys().map(|(s, r)| (s.as_str(), r.as_str())).collect();
    assert_eq!(keys, [("5", "event_count"), ("6", "crc32c"), ("7", "source_id")], "{summary}");
    let system = dir.path().join("orbit.yaml");
    let mut missing_said = Vec::new();
    for bu in ["bu0", "bu1"] {
        let run_dir = output.join(bu).join("run000001");
        // No block CMSSW's reader refuses is in a file: every rule holds.
        let out = tessera(&["verify", run_dir.to_str().unwrap()]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{bu}: {stdout}\n{stderr}");
        // Against the system's sources, the orbits that lost a block are named.
        let out = tessera(&["verify", run_dir.to_str().unwrap(), "--system", system.to_str().unwrap()]);
        let (stdout, _) = text(&out);
        missing_said.extend(stdout.lines().filter(|l| l.contains("missing, its")).map(str::to_owned));
    }
    for (orbit, source) in [(3000, 5), (4000, 6), (3500, 7)] {
        assert!(
            missing_said.iter().any(|l| l.contains(&format!("orbit {orbit}: source {source} missing"))),
            "orbit {orbit}, source {source}: {missing_said:?}"
        );
    }
}

#[test]
fn orbits_left_incomplete_fail_a_run_above_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (_, out) = orbit_run(dir.path(), faulty_sources, &["--max-incomplete", "0"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let line = stdout.lines().find(|l| l.starts_with("incomplete orbits: ")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.ends_with("ABOVE THE LIMIT"), "{line}");
}

#[test]
fn many_empty_orbits_leave_no_hole_in_the_file_indices_and_every_count_agrees() {
    // 1 kHz of L1 over 11.2 kHz of orbits: 9 orbits in 10 empty; 2 orbits a file, so most files
    // hold no orbit with events and are never published.
    let dir = tempfile::tempdir().unwrap();
    let edit = |yaml: String| {
        yaml.replace("  rate_hz: 20000 ", "  rate_hz: 1000 ")
            .replace("max_events_per_file: 512", "max_events_per_file: 2")
    };
    let (output, out) = orbit_run(dir.path(), edit, &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(output.join("summary.json")).unwrap()).unwrap();
    for (i, bu) in ["bu0", "bu1"].into_iter().enumerate() {
        let run_dir = output.join(bu).join("run000001");
        let out = tessera(&["verify", run_dir.to_str().unwrap()]);
        let (v_out, v_err) = text(&out);
        assert!(out.status.success(), "{bu}: {v_out}\n{v_err}");
        let raw = std::fs::read_dir(&run_dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".raw"))
            .count() as u64;
        let eor = std::fs::read_to_string(run_dir.join("run000001_ls0000_EoR.jsn")).unwrap();
        let eor: serde_json::Value = serde_json::from_str(&eor).unwrap();
        let n_files: u64 = eor["data"][1].as_str().unwrap().parse().unwrap();
        let said = summary["per_bu"][i]["files"].as_u64().unwrap();
        assert_eq!((said, n_files), (raw, raw), "{bu}: the summary, the EoR and the directory agree");
        let orbits = summary["per_bu"][i]["events"].as_u64().unwrap();
        assert!(orbits > 2 * raw + 100, "{bu}: {orbits} orbits in {raw} files: many files were all empty");
    }
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

/// ru1's sources come from an outside DTH sender, `tessera dth --connect`, into the RU's listening
/// port, with a bad CRC-32C on source 6 and a block one event short on source 5. The system file
/// configures no fault, so the run allows no incomplete orbit: both orbits are counted
/// incomplete, the run fails above its limit, and the BU directories still verify, since no
/// bad block reached a file.
#[test]
fn an_outside_dth_sender_s_bad_blocks_are_left_out_and_fail_a_run_that_allows_no_incomplete_orbit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let port = free_ports(1)[0];
    let orbits = 6000;
    let system = format!(
        "run: {{number: 1, mode: orbit, orbits: {orbits}, seconds: null, orbits_per_lumi_section: 16384}}\n\
         trigger: {{rate_hz: 20000, seed: 1}}\n\
         rus:\n  - {{name: ru0, feds: \"1024,0-3\", fragment_size: {{bytes: 512}}}}\n  \
         - {{name: ru1, feds: \"4-7\", emulated: false, ferol_port: {port}}}\n\
         bus:\n  - {{name: bu0}}\n  - {{name: bu1}}\nbu: {{max_events_per_file: 512}}\nfu: {{enabled: false}}\n"
    );
    let file = d.join("system.yaml");
    std::fs::write(&file, system).unwrap();
    let mut run = Command::new(env!("CARGO_BIN_EXE_tessera"));
    run.arg("run").arg(&file).arg("--output").arg(d.join("out"));
    let mut run = run
        .stdout(std::fs::File::create(d.join("run.out")).unwrap())
        .stderr(std::fs::File::create(d.join("run.log")).unwrap())
        .spawn()
        .unwrap();
    let mut sender = Command::new(env!("CARGO_BIN_EXE_tessera"));
    sender.args(["dth", "--sources", "4-7", "--run", "1", "--orbits-per-ls", "16384", "--l1-rate-hz", "20000"]);
    sender.args(["--size", "512", "--paced", "--orbits", &orbits.to_string()]);
    sender.args(["--fault", "bad-crc@4000/6", "--fault", "drop-event@3000/5"]);
    sender.arg("--connect").arg(format!("127.0.0.1:{port}"));
    let mut sender = spawn_logged(sender, &d.join("dth.log"));
    let status = wait_child(&mut run, Duration::from_secs(240));
    let sent = wait_child(&mut sender, Duration::from_secs(30));
    let summary = std::fs::read_to_string(d.join("run.out")).unwrap();
    let log = std::fs::read_to_string(d.join("run.log")).unwrap();
    assert!(sent.success(), "{}", std::fs::read_to_string(d.join("dth.log")).unwrap());
    assert_eq!(status.code(), Some(1), "{summary}\n{log}");
    assert!(
        summary.contains(&format!("conservation: orbits triggered {orbits} = built {orbits} + lost 0  holds")),
        "{summary}"
    );
    let line = summary.lines().find(|l| l.starts_with("incomplete orbits: ")).unwrap_or_else(|| panic!("{summary}"));
    assert!(line.starts_with("incomplete orbits: 2, at most 0 allowed") && line.ends_with("ABOVE THE LIMIT"), "{line}");
    let all = format!("{summary}{log}");
    assert!(
        all.contains("source 6's block left out of the file, the orbit counted incomplete: orbit block: CRC-32C"),
        "{all}"
    );
    assert!(all.contains("source 5's block left out of the file, the orbit counted incomplete: event count"), "{all}");
    for bu in ["bu0", "bu1"] {
        let run_dir = d.join("out").join(bu).join("run000001");
        let out = tessera(&["verify", run_dir.to_str().unwrap()]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{bu}: {stdout}\n{stderr}");
    }
}
