//! `tessera run` with `fu.process: reader`: processes that read the BUs' files through their
//! file brokers exactly as CMS's HLT does, four per BU, read every file once and the run ends
//! without waiting for a drain time-out; one killed after a grant loses its file to another.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use std::fs;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

/// A 2×2 system read by four readers per BU; `extra` is added to its `fu` section.
fn system(dir: &Path, extra: &str) -> std::path::PathBuf {
    let path = dir.join("system.yaml");
    fs::write(
        &path,
        format!(
            "run: {{events: 20000, orbits_per_lumi_section: 1024}}\ntrigger: {{rate_hz: 5000}}\n\
             rus:\n  - {{name: ru0, feds: \"1024,0-1\"}}\n  - {{name: ru1, feds: \"2-3\"}}\n\
             bus:\n  - {{name: bu0}}\n  - {{name: bu1}}\n\
             fu: {{process: reader, processes_per_bu: 4, drain_timeout_s: 600{extra}}}\n"
        ),
    )
    .unwrap();
    path
}

fn start(dir: &Path, system: &Path, env: &[(&str, &str)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("run")
        .arg(system)
        .arg("--output")
        .arg(dir.join("out"))
        .envs(env.iter().copied())
        .stdout(fs::File::create(dir.join("run.out")).unwrap())
        .stderr(fs::File::create(dir.join("run.log")).unwrap())
        .spawn()
        .unwrap()
}

/// Waits for `tessera run` to end, at most `timeout` (far less than the farm's drain time-out
/// of 600 s, which a run that does not see its files read would wait for); its summary.
fn finish(mut run: Child, dir: &Path, timeout: Duration) -> String {
    let status = common::wait_child(&mut run, timeout);
    let out = fs::read_to_string(dir.join("run.out")).unwrap();
    assert!(status.success(), "{out}\n{}", fs::read_to_string(dir.join("run.log")).unwrap());
    out
}

#[test]
fn run_2x2_four_readers_per_bu_read_every_file_once_and_the_run_ends_without_a_drain_time_out() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let out = finish(start(d, &system(d, ""), &[]), d, Duration::from_secs(120));
    assert!(out.contains("conservation: triggered 20000 = built 20000 + lost 0  holds"), "{out}");
    assert!(out.contains("chain: built 20000 = processed 20000 by the readers"), "{out}");
    let readers: Vec<&str> = out.lines().filter(|l| l.contains("/reader")).collect();
    assert_eq!(readers.len(), 8, "{out}");
    assert!(readers.iter().all(|l| l.ends_with(", 0 deviations")), "{out}");
    assert!(out.contains("0 taken back after a lease, 0 still out"), "{out}");
    // Every file was read and deleted, its index JSON removed by the broker.
    for bu in ["bu0", "bu1"] {
        let run_dir = d.join("out").join(bu).join("run000001");
        let left: Vec<_> = fs::read_dir(&run_dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .filter(|n| n.contains("_index"))
            .collect();
        assert!(left.is_empty(), "{bu}: {left:?}");
    }
}

#[test]
fn run_2x2_a_reader_killed_after_a_grant_loses_its_file_to_another_after_the_lease() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let run = start(d, &system(d, ", claim_lease_s: 2"), &[("TESSERA_READER_FILE_DELAY_MS", "200")]);
    let out_dir = d.join("out");
    let victim = common::kill_when_found("a reader of bu0 holding a file", Duration::from_secs(60), || {
        common::children_running(run.id(), "reader", "/bu0")
            .first()
            .copied()
            .filter(|&pid| common::holds_a_claim(&out_dir, pid))
    });
    let out = finish(run, d, Duration::from_secs(180));
    assert!(out.contains("conservation: triggered 20000 = built 20000 + lost 0  holds"), "{out}");
    assert!(out.contains("chain: built 20000 = processed 20000 by the readers"), "{out}");
    assert!(out.contains(&format!("(pid {victim};")), "the killed reader is said: {out}");
    assert!(out.contains("1 taken back after a lease, 0 still out"), "{out}");
}
