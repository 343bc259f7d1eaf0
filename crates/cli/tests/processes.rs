//! The event builder as separate processes on loopback, as it runs across hosts: `tessera bu`
//! ×2, `tessera ru`, `tessera evm`, and `tessera ferol` for each RU's FEDs, all from one system
//! file. The runs cross the 24-bit LV1 wrap; afterwards every run directory passes `tessera
//! verify` (every payload byte against the seeded emulator) and every event is in exactly one
//! file. One run kills a BU with SIGKILL mid-run and restarts it: nothing lost, nothing
//! duplicated, and the run goes on to its end.

mod common;

use common::{Processes, logs, spawn_logged, verified_events, wait_for_line};
use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const RUN: u32 = 31;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A 2×2 system file with fixed ports, paced at `rate_hz` (free running when `None`).
fn system_file(dir: &Path, first_event: u64, events: u64, rate_hz: Option<f64>) -> std::path::PathBuf {
    let p: Vec<u16> = (0..6).map(|_| free_port()).collect();
    let trigger = match rate_hz {
        Some(r) => format!("trigger:\n  rate_hz: {r}\n"),
        None => "trigger:\n  free_running: true\n".to_string(),
    };
    let yaml = format!(
        "run:\n  number: {RUN}\n  first_event: {first_event}\n  events: {events}\n  orbits_per_lumi_section: 64\n  output: {out}\n\
         {trigger}\
         evm:\n  port: {evm}\n\
         rus:\n  - name: ru0\n    ferol_port: {f0}\n    feds: \"1024,0-2\"\n    fragment_size: {{bytes: 2048}}\n\
         \x20 - name: ru1\n    ferol_port: {f1}\n    control_port: {c1}\n    feds: \"3-5\"\n    fragment_size: {{mean_bytes: 3000, sigma_bytes: 1500}}\n\
         bus:\n  - name: bu0\n    data_port: {d0}\n  - name: bu1\n    data_port: {d1}\n\
         ru:\n  fragment_timeout_ms: 5000\n\
         bu:\n  max_events_per_file: 200\n  file_timeout_ms: 300\n",
        out = dir.display(),
        evm = p[0],
        f0 = p[1],
        f1 = p[2],
        c1 = p[3],
        d0 = p[4],
        d1 = p[5],
    );
    let path = dir.join("system.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

fn start(args: &[&str], log: &Path) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
    command.args(args);
    spawn_logged(command, log)
}

fn tessera_unit(system: &Path, dir: &Path, role: &str, name: Option<&str>, extra: &[&str]) -> (String, Child) {
    let mut args = vec![role, "--system", system.to_str().unwrap()];
    if let Some(n) = name {
        args.extend(["--name", n]);
    }
    args.extend(extra);
    let label = format!("{role}-{}{}", name.unwrap_or("evm"), extra.join(""));
    (label.clone(), start(&args, &dir.join(format!("{label}.log"))))
}

fn ferol(system: &Path, dir: &Path, ru: &str) -> (String, Child) {
    let log = if ru == "ru0" { "evm-evm.log".to_string() } else { format!("ru-{ru}.log") };
    wait_for_line(dir, &log, "run 31");
    let args = ["ferol", "--system", system.to_str().unwrap(), "--ru", ru];
    (format!("ferol-{ru}"), start(&args, &dir.join(format!("ferol-{ru}.log"))))
}

fn expected(first_event: u64, events: u64) -> BTreeSet<u32> {
    (first_event..first_event + events).map(|e| e as u32).collect()
}

#[test]
fn two_by_two_processes_build_every_event_across_the_lv1_wrap() {
    let dir = tempfile::tempdir().unwrap();
    let (first_event, events) = ((1u64 << 24) - 1000, 3000);
    let system = system_file(dir.path(), first_event, events, None);
    let d = dir.path();
    let mut units = Processes(vec![
        tessera_unit(&system, d, "bu", Some("bu0"), &[]),
        tessera_unit(&system, d, "bu", Some("bu1"), &[]),
        tessera_unit(&system, d, "ru", Some("ru1"), &[]),
        tessera_unit(&system, d, "evm", None, &[]),
        ferol(&system, d, "ru0"),
        ferol(&system, d, "ru1"),
    ]);
    units.wait_all(d, Duration::from_secs(120));
    let evm_log = std::fs::read_to_string(d.join("evm-evm.log")).unwrap();
    assert!(evm_log.contains(&format!("triggered {events}, committed {events}")), "{evm_log}");
    assert_eq!(
        verified_events(d, RUN, &["bu0", "bu1"]),
        expected(first_event, events),
        "every event in exactly one file"
    );
}

#[test]
fn two_by_two_bu_killed_and_restarted_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // 4 s of triggers at 5 kHz: the BU dies after about 1 s and is back after about 1.5 s.
    let (first_event, events) = ((1u64 << 24) - 3000, 20_000);
    let system = system_file(dir.path(), first_event, events, Some(5000.0));
    let d = dir.path();
    let mut units = Processes(vec![
        tessera_unit(&system, d, "bu", Some("bu0"), &[]),
        tessera_unit(&system, d, "ru", Some("ru1"), &[]),
        tessera_unit(&system, d, "evm", None, &[]),
        ferol(&system, d, "ru0"),
        ferol(&system, d, "ru1"),
    ]);
    let (_, mut victim) = tessera_unit(&system, d, "bu", Some("bu1"), &[]);
    let bu1_dir = d.join("bu1").join(format!("run{RUN:06}"));
    // Kill it once it has published a file of its own, so that it has something to recover.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_dir(&bu1_dir)
        .is_ok_and(|r| r.flatten().any(|e| e.path().extension().is_some_and(|x| x == "jsn")))
    {
        assert!(Instant::now() < deadline, "bu1 published nothing\n{}", logs(d));
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    victim.kill().unwrap(); // SIGKILL
    victim.wait().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    units.0.push(tessera_unit(&system, d, "bu", Some("bu1"), &["--restart"]));
    units.wait_all(d, Duration::from_secs(120));
    let evm_log = std::fs::read_to_string(d.join("evm-evm.log")).unwrap();
    assert!(evm_log.contains(&format!("triggered {events}, committed {events}")), "{evm_log}");
    let restarted = std::fs::read_to_string(d.join("bu-bu1--restart.log")).unwrap();
    assert!(restarted.contains("(incarnation 2)"), "{restarted}");
    assert_eq!(
        verified_events(d, RUN, &["bu0", "bu1"]),
        expected(first_event, events),
        "every event in exactly one file"
    );
}
