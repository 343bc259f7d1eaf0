//! `tessera run` under the signals an operator sends: a terminal's Ctrl-C goes to the whole
//! foreground process group, so the tests start `tessera run` in a group of its own and signal
//! the group, as a terminal would. One Ctrl-C (or SIGTERM) drains the run and both conservation
//! checks hold; a second one cuts it short within seconds, with whole files and a summary that
//! says what was cut; one alone, to a run that cannot drain, cuts it short within
//! `controller.stop_timeout_s`.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use rustix::process::{Pid, Signal, kill_process_group};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Starts `tessera run` of the default system, in a process group of its own, into `output`,
/// and returns once it has built events (its progress line says so).
fn start_run(output: &Path) -> Child {
    start_run_of(None, output, &[])
}

/// Starts `tessera run` of `system` (or the default system), with the environment variables
/// `env`, as [`start_run`] does.
fn start_run_of(system: Option<&Path>, output: &Path, env: &[(&str, &str)]) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
    command.arg("run");
    if let Some(system) = system {
        command.arg(system);
    }
    let mut child = command
        // 30 s bounds the run (the tests stop it long before) and what it may write.
        .args(["--seconds", "30", "--keep", "all", "--output", output.to_str().unwrap()])
        .envs(env.iter().copied())
        // Every process of the run inherits it: `assert_no_fu_left` finds what outlived it.
        .env(LEFT_BEHIND_MARK, output)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tessera run starts");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let built =
                line.split_whitespace().skip_while(|w| *w != "built").nth(1).and_then(|n| n.parse::<u64>().ok());
            eprintln!("tessera run: {line}"); // shown when the test fails
            if built.is_some_and(|n| n > 0) {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("tessera run builds events within 60 s");
    child
}

fn signal_group(child: &Child, signal: Signal) {
    kill_process_group(Pid::from_raw(child.id() as i32).unwrap(), signal).expect("the process group takes the signal");
}

/// Waits at most `timeout` for `child` to exit; returns its status, its standard output and how
/// long it took.
fn wait(mut child: Child, timeout: Duration) -> (ExitStatus, String, Duration) {
    let start = Instant::now();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
        out
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            panic!("tessera run still runs {timeout:?} after the signal");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status, reader.join().unwrap(), start.elapsed())
}

fn run_dirs(output: &Path, pattern: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for unit in std::fs::read_dir(output).unwrap().flatten() {
        if unit.file_name().to_string_lossy().starts_with(pattern) {
            for run in std::fs::read_dir(unit.path()).unwrap().flatten() {
                if run.file_name().to_string_lossy().starts_with("run") {
                    dirs.push(run.path());
                }
            }
        }
    }
    dirs
}

fn tessera(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().unwrap()
}

/// No FU process of the run is left behind (they are in groups of their own, so the group's
/// signal did not end them: `tessera run` did).
/// The variable that marks the processes of a run these tests start, FUs and HLT programs too.
const LEFT_BEHIND_MARK: &str = "TESSERA_TEST_RUN_OUTPUT";

/// Asserts that no process of the run into `output` outlived `tessera run`: no FU, and no HLT
/// program an FU started (given a second for the signals to land).
fn assert_no_fu_left(output: &Path) {
    let mark = format!("{LEFT_BEHIND_MARK}={}", output.display());
    let left = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
                environ.split(|&b| b == 0).any(|v| v == mark.as_bytes())
            })
            .map(|e| {
                String::from_utf8_lossy(&std::fs::read(e.path().join("cmdline")).unwrap_or_default()).replace('\0', " ")
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(1);
    while !left().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(left().is_empty(), "outlived tessera run: {:?}", left());
}

fn drains_cleanly(signal: Signal) {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out");
    let child = start_run(&output);
    signal_group(&child, signal);
    let (status, stdout, took) = wait(child, Duration::from_secs(150));
    assert!(status.success(), "{status}\n{stdout}");
    let conservation = stdout.lines().find(|l| l.starts_with("conservation:")).expect("a conservation line");
    assert!(conservation.contains("+ lost 0") && conservation.ends_with("holds"), "{stdout}");
    let chain = stdout.lines().find(|l| l.starts_with("chain:")).expect("a chain line");
    assert!(chain.ends_with("holds"), "{stdout}");
    assert!(!stdout.contains("cut short"), "{stdout}");
    eprintln!("drained {took:?} after {signal:?}");
    let bu_runs = run_dirs(&output, "bu");
    assert_eq!(bu_runs.len(), 2, "{bu_runs:?}");
    for run in &bu_runs {
        let out = tessera(&["verify", run.to_str().unwrap()]);
        assert!(out.status.success(), "{}: {}", run.display(), String::from_utf8_lossy(&out.stdout));
    }
    let storage = run_dirs(&output, "storage");
    assert_eq!(storage.len(), 1);
    let mut args = vec!["verify", storage[0].to_str().unwrap(), "--built"];
    args.extend(bu_runs.iter().map(|r| r.to_str().unwrap()));
    let out = tessera(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert_no_fu_left(&output);
}

#[test]
fn ctrl_c_to_the_process_group_drains_the_run_and_both_checks_hold() {
    drains_cleanly(Signal::INT);
}

#[test]
fn sigterm_to_the_process_group_drains_the_run_and_both_checks_hold() {
    drains_cleanly(Signal::TERM);
}

#[test]
fn a_second_ctrl_c_cuts_the_run_short_with_whole_files_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out");
    let child = start_run(&output);
    signal_group(&child, Signal::INT);
    std::thread::sleep(Duration::from_millis(300));
    signal_group(&child, Signal::INT);
    let (status, stdout, took) = wait(child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130), "{stdout}");
    assert!(took < Duration::from_secs(20), "cut short after {took:?}");
    let cut = stdout.lines().find(|l| l.starts_with("cut short:")).expect("a line saying what was cut short");
    assert!(cut.contains("were not built") && cut.contains("published BU files"), "{cut}");
    let conservation = stdout.lines().find(|l| l.starts_with("conservation:")).unwrap();
    assert!(conservation.ends_with("holds"), "every event is built or counted: {stdout}");
    assert!(!stdout.contains("FAILED"), "units cut short are not failures: {stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(output.join("summary.json")).unwrap()).unwrap();
    assert!(summary["cut_short"].is_string(), "{summary}");
    // Every published file is whole.
    let mut files = 0;
    for run in run_dirs(&output, "bu") {
        for f in std::fs::read_dir(&run).unwrap().flatten() {
            if f.path().extension().is_some_and(|e| e == "raw") {
                let out = tessera(&["inspect", f.path().to_str().unwrap()]);
                assert!(out.status.success(), "{}: {}", f.path().display(), String::from_utf8_lossy(&out.stdout));
                files += 1;
            }
        }
    }
    eprintln!("cut short {took:?} after the second Ctrl-C; {files} published files left to the FUs are whole");
    assert_no_fu_left(&output);
}

/// One SIGTERM, as a service manager sends, to a run whose filter farm cannot finish (its HLT
/// takes ten minutes a file) nor, held back by the farm, its builder drain: the run is cut short
/// within `controller.stop_timeout_s` (5 s here) and the FUs' grace, with a summary that says
/// so and every triggered event built or counted, rather than waiting for the farm's drain
/// time-out (`fu.drain_timeout_s`, 600 s here).
#[test]
fn sigterm_to_a_run_that_cannot_drain_cuts_it_short_within_the_stop_timeout() {
    let Some(script) = common::example_hlt("the test slows the FUs") else { return };
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out");
    let system = dir.path().join("system.yaml");
    std::fs::write(
        &system,
        format!(
            "trigger: {{rate_hz: 2000}}\nrus: [{{name: ru0, feds: \"1024,0-3\"}}]\nbus: [{{name: bu0}}]\n\
             fu: {{exec: [python3, {}], drain_timeout_s: 600}}\n\
             controller: {{stop_timeout_s: 5}}\n",
            script.display()
        ),
    )
    .unwrap();
    let child = start_run_of(Some(&system), &output, &[("TESSERA_HLT_FILE_DELAY_MS", "600000")]);
    signal_group(&child, Signal::TERM);
    let (status, stdout, took) = wait(child, Duration::from_secs(60));
    assert_eq!(status.code(), Some(130), "{stdout}");
    assert!(took < Duration::from_secs(30), "cut short after {took:?}");
    assert!(stdout.lines().any(|l| l.starts_with("cut short:")), "{stdout}");
    let conservation = stdout.lines().find(|l| l.starts_with("conservation:")).unwrap();
    assert!(conservation.ends_with("holds"), "every event is built or counted: {stdout}");
    eprintln!("cut short {took:?} after one SIGTERM");
    assert_no_fu_left(&output);
}
