//! Two hosts, as two network namespaces joined by a veth pair: the EVM, `ru0` and `bu0` on
//! 10.231.7.1, `ru1` and `bu1` on 10.231.7.2, each unit its own `tessera` process inside its
//! host's namespace, from one system file, as the README's two-host example runs them. Every
//! event is built once and every run directory verifies.
//!
//! A second test puts an FU on the other host, reaching its BU only through the BU's file
//! broker, its resource summary included. The multi-host tests run the example across three
//! hosts through agents; the BUs hold back on FUs that reach them only through their brokers.
//!
//! Needs root (to create namespaces), `ip` and `curl`: without them the tests fail under CI and
//! elsewhere say that they skip ([`common::require`]).

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use common::{Lan, Processes, link_key_hex, require, spawn_logged, verified_events, wait_for_line};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const RUN: u32 = 52;
const EVENTS: u64 = 3000;

/// The two-host system, with `run_extra` (whole lines) added to its `run` section.
fn system_file_with(dir: &Path, run_extra: &str) -> std::path::PathBuf {
    let yaml = format!(
        "run:\n{run_extra}  number: {RUN}\n  first_event: {first}\n  events: {EVENTS}\n  orbits_per_lumi_section: 64\n  output: {out}\n\
         trigger:\n  free_running: true\n\
         evm:\n  port: 9100\n\
         rus:\n  - name: ru0\n    host: 10.231.7.1\n    ferol_port: 9000\n    feds: \"1024,0-2\"\n    fragment_size: {{bytes: 2048}}\n\
         \x20 - name: ru1\n    host: 10.231.7.2\n    ferol_port: 9000\n    control_port: 9001\n    feds: \"3-5\"\n    fragment_size: {{bytes: 4096}}\n\
         bus:\n  - name: bu0\n    host: 10.231.7.1\n    data_port: 9200\n  - name: bu1\n    host: 10.231.7.2\n    data_port: 9200\n\
         fu:\n  enabled: false\n",
        first = (1u64 << 24) - 1000,
        out = dir.display()
    );
    let path = dir.join("two-hosts.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Starts `tessera ARGS` on host `k` of `lan`, its log `dir/<label>.log`.
fn start(units: &mut Processes, dir: &Path, lan: &Lan, k: usize, label: &str, args: &[&str]) {
    let mut command = lan.tessera(k, args);
    command.env("TESSERA_LINK_KEY", link_key_hex());
    units.0.push((label.to_string(), spawn_logged(command, &dir.join(format!("{label}.log")))));
}

/// Runs the two-host system (its `run` section with `run_extra`) on hosts `tag`: each unit its
/// own process in its host's namespace. Returns what the EVM's process said and the events found
/// in the BUs' verified files; `None` when namespaces cannot be had here.
fn run_on_two_hosts(tag: char, run_extra: &str) -> Option<(String, usize)> {
    let lan = Lan::create("tsr", tag, &["10.231.7.1", "10.231.7.2"])?;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let system = system_file_with(d, run_extra);
    let sys = system.to_str().unwrap();
    let mut units = Processes(Vec::new());
    start(&mut units, d, &lan, 0, "bu0", &["bu", "--system", sys, "--name", "bu0"]);
    start(&mut units, d, &lan, 1, "bu1", &["bu", "--system", sys, "--name", "bu1"]);
    start(&mut units, d, &lan, 1, "ru1", &["ru", "--system", sys, "--name", "ru1"]);
    start(&mut units, d, &lan, 0, "evm", &["evm", "--system", sys]);
    wait_for_line(d, "evm.log", "run 52");
    wait_for_line(d, "ru1.log", "run 52");
    start(&mut units, d, &lan, 0, "ferol-ru0", &["ferol", "--system", sys, "--ru", "ru0"]);
    start(&mut units, d, &lan, 1, "ferol-ru1", &["ferol", "--system", sys, "--ru", "ru1"]);
    units.wait_all(d, Duration::from_secs(120));
    let evm = std::fs::read_to_string(d.join("evm.log")).unwrap();
    Some((evm, verified_events(d, RUN, &["bu0", "bu1"]).len()))
}

#[test]
fn two_hosts_in_network_namespaces_build_every_event() {
    let Some((evm, seen)) = run_on_two_hosts('e', "") else { return };
    assert!(evm.contains(&format!("triggered {EVENTS}, committed {EVENTS}")), "{evm}");
    assert_eq!(seen as u64, EVENTS, "every event in exactly one file");
}

/// The same two hosts under push: RU 0 leads, each RU pushes its blocks across the link, and
/// every event is built once, across the LV1 wrap.
#[test]
fn two_hosts_in_network_namespaces_push_every_event() {
    let Some((evm, seen)) = run_on_two_hosts('p', "  protocol: push\n") else { return };
    assert!(evm.contains(&format!("triggered {EVENTS} (push), 0 BUs excluded")), "{evm}");
    assert_eq!(seen as u64, EVENTS, "every event in exactly one file");
}

#[test]
fn fu_on_another_host_processes_a_bu_through_its_file_broker() {
    let Some(lan) = Lan::create("tsr", 'f', &["10.231.7.1", "10.231.7.2"]) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let yaml = format!(
        "run:\n  number: {RUN}\n  events: {EVENTS}\n  orbits_per_lumi_section: 64\n  output: {out}\n\
         trigger:\n  free_running: true\n\
         evm:\n  port: 9100\n\
         rus:\n  - name: ru0\n    host: 10.231.7.1\n    feds: \"1024,0-2\"\n\
         bus:\n  - name: bu0\n    host: 10.231.7.1\n    broker_port: 9300\n\
         fu:\n  enabled: false\n",
        out = d.join("out").display()
    );
    let system = d.join("broker.yaml");
    std::fs::write(&system, yaml).unwrap();
    let mut units = Processes(Vec::new());
    // The FU starts first and waits for the broker; it sees no BU directory, only the broker.
    let fu_out = d.join("fu-host-b");
    let fu_args =
        ["fu", "--broker", "10.231.7.1:9300", "--output", fu_out.to_str().unwrap(), "--run", &RUN.to_string()];
    start(&mut units, d, &lan, 1, "fu", &fu_args);
    start(&mut units, d, &lan, 0, "run", &["run", system.to_str().unwrap()]);
    units.wait_all(d, Duration::from_secs(120));
    let run = std::fs::read_to_string(d.join("run.log")).unwrap();
    assert!(run.contains("conservation: triggered 3000 = built 3000"), "{run}");
    // Every built event is in the remote FU's outputs, and nothing is left at the BU.
    let bu_run = d.join("out").join("bu0").join(format!("run{RUN:06}"));
    let out_run = fu_out.join(format!("run{RUN:06}"));
    let mut processed = 0;
    for entry in std::fs::read_dir(&out_run).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.contains("streamPhysics") && name.ends_with(".jsn") {
            let text = std::fs::read_to_string(out_run.join(&name)).unwrap();
            processed += tessera_formats::bookkeeping::FuOutputDoc::parse(&text).unwrap().processed;
        }
    }
    assert_eq!(processed, EVENTS);
    let left: Vec<_> = std::fs::read_dir(bu_run.join("fu")).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    let fu_log = std::fs::read_to_string(d.join("fu.log")).unwrap();
    assert!(fu_log.contains("\"events\":3000"), "{fu_log}");
    assert_summaries_came_and_went(&d.join("out").join("bu0"));
}

/// Asserts that FUs published resource summaries in `bu_dir` (a publication made the directory)
/// and removed them as they left, through the BU's broker before it went.
fn assert_summaries_came_and_went(bu_dir: &Path) {
    let resources = bu_dir.join(tessera_rundir::resources::RESOURCES_DIR);
    let left: Vec<_> = std::fs::read_dir(&resources)
        .unwrap_or_else(|e| panic!("no FU published a summary in {}: {e}", resources.display()))
        .collect();
    assert!(left.is_empty(), "summaries left behind: {left:?}");
}

/// Waits, at most 20 s, until the controller's metrics (read from its host) show both BUs
/// counting the two FUs of the filter host as live: a BU counts its FUs only when it holds back
/// on its farm, so both do, and neither holds back for a farm reason.
fn wait_for_farm_counted(lan: &Lan, d: &Path) {
    let log = std::fs::read_to_string(d.join("run.log")).unwrap();
    let address = log
        .lines()
        .find_map(|l| l.split("monitoring: http://").nth(1))
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("the controller serves its metrics\n{log}"))
        .to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = Command::new("ip")
            .args(["netns", "exec", &lan.hosts[3], "curl", "-sS", "--max-time", "5"])
            .arg(format!("http://{address}/metrics"))
            .output()
            .unwrap();
        let metrics = String::from_utf8_lossy(&got.stdout);
        let counted = ["bu0", "bu1"].iter().all(|bu| {
            metrics.lines().any(|l| l.starts_with(&format!("tessera_fu_processes{{unit=\"{bu}\"")) && l.ends_with(" 2"))
        });
        if counted {
            let held: Vec<&str> = metrics
                .lines()
                .filter(|l| l.starts_with("tessera_throttled{unit=\"bu") && l.ends_with(" 1"))
                .filter(|l| ["NOT_ENOUGH_FUS", "RESOURCE_SUMMARY_STALE"].iter().any(|k| l.contains(k)))
                .collect();
            assert!(held.is_empty(), "{held:?}");
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{}\n{metrics}", String::from_utf8_lossy(&got.stderr));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits, at most 20 s, until BU directory `bu_dir` holds live resource summaries of run `run`
/// from `count` FU processes on `host` (as the BU's broker names it).
fn wait_for_remote_summaries(bu_dir: &Path, run: u32, host: &str, count: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now = tessera_rundir::resources::now_unix_ms();
        let summaries = tessera_rundir::resources::read_summaries(bu_dir, run);
        let live = summaries.iter().filter(|s| s.host == host && now.saturating_sub(s.updated_unix_ms) < 5000);
        if live.count() == count {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{}: {summaries:?}", bu_dir.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The hosts of `examples/multi-host.yaml` (readout, builder, filter) and one for the controller.
const MULTI_HOST: [&str; 4] = ["10.231.9.1", "10.231.9.2", "10.231.9.3", "10.231.9.10"];
/// The placeholder names of the example's readout, builder and filter hosts.
const MULTI_HOST_PLACEHOLDERS: [&str; 3] = ["ru-host.example", "bu-host.example", "fu-host.example"];
const AGENT_TOKEN: &str = "multi-host-test-token";

fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `examples/multi-host.yaml` with the addresses of the test's hosts in place of its
/// placeholders, written into `d`.
fn multi_host_example(d: &Path) -> std::path::PathBuf {
    let mut text = std::fs::read_to_string(repo().join("examples/multi-host.yaml")).unwrap();
    for (placeholder, address) in MULTI_HOST_PLACEHOLDERS.iter().zip(MULTI_HOST) {
        assert!(text.contains(&format!(": {placeholder}")), "the example names no {placeholder}");
        text = text.replace(placeholder, address);
    }
    let path = d.join("multi-host.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Starts an agent on each of the example's three hosts, and `tessera run` of the example
/// (with `args`, and the hosts' addresses in place of its placeholders) on the controller's
/// host, its summary in `run.out`.
fn start_multi_host(units: &mut Processes, lan: &Lan, d: &Path, args: &[&str]) {
    for (k, address) in MULTI_HOST[..3].iter().enumerate() {
        lan.start_agent(units, d, k, &format!("agent{k}"), &format!("{address}:9900"), AGENT_TOKEN);
    }
    let example = multi_host_example(d);
    let mut command = lan.tessera(3, &["run"]);
    command
        .arg(example)
        .args(args)
        .env("TESSERA_AGENT_TOKEN", AGENT_TOKEN)
        .stdout(std::fs::File::create(d.join("run.out")).unwrap())
        .stderr(std::fs::File::create(d.join("run.log")).unwrap())
        .stdin(Stdio::null());
    units.0.push(("run".into(), command.spawn().unwrap()));
}

/// Waits for the controller (the last process started) to end; its exit code and summary.
fn wait_controller(units: &mut Processes, d: &Path, timeout: Duration) -> (Option<i32>, String) {
    let mut run = Processes(vec![units.0.pop().unwrap()]);
    let ended = run.wait_exit(d, timeout);
    (ended[0].1.code(), std::fs::read_to_string(d.join("run.out")).unwrap())
}

#[test]
fn multi_host_example_runs_2x2_across_three_hosts_through_their_agents() {
    let Some(lan) = Lan::create("tsr", 'm', &MULTI_HOST) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let out = d.join("out");
    let mut units = Processes(Vec::new());
    start_multi_host(&mut units, &lan, d, &["--seconds", "4", "--output", out.to_str().unwrap()]);
    let (code, summary) = wait_controller(&mut units, d, Duration::from_secs(180));
    assert_eq!(code, Some(0), "{summary}\n{}", common::logs(d));
    assert!(summary.contains("across 3 hosts"), "{summary}");
    for (unit, host) in
        [("ru0", "10.231.9.1"), ("bu1", "10.231.9.2"), ("bu0-fu1", "10.231.9.3"), ("mergers", "10.231.9.3")]
    {
        assert!(
            summary.lines().any(|l| l.trim_start().starts_with(unit) && l.contains(host)),
            "{unit} on {host}\n{summary}"
        );
    }
    let conservation = summary.lines().find(|l| l.starts_with("conservation:")).unwrap();
    assert!(conservation.ends_with("holds") && conservation.contains("lost 0"), "{summary}");
    let chain = summary.lines().find(|l| l.starts_with("chain:")).unwrap();
    assert!(chain.contains("in storage (tessera merge)") && chain.ends_with("holds"), "{summary}");
    // The FUs on the filter host read the BUs' files through their brokers only, and did work.
    for fu in ["bu0-fu0", "bu0-fu1", "bu1-fu0", "bu1-fu1"] {
        let report = std::fs::read_to_string(d.join(format!("agent2/{fu}/stdout"))).unwrap();
        let report: serde_json::Value = serde_json::from_str(report.trim()).unwrap();
        assert!(report["events"].as_u64().unwrap() > 0, "{fu}: {report}");
    }
    let fu_args = std::fs::read_to_string(d.join("run.log")).unwrap();
    assert!(fu_args.contains("started bu0-fu0 on 10.231.9.3: tessera fu --broker 10.231.9.2:9300"), "{fu_args}");
    for bu in ["bu0", "bu1"] {
        assert_summaries_came_and_went(&out.join(bu));
    }
}

#[test]
fn multi_host_bu_host_link_cut_is_detected_and_reported_with_its_units() {
    let curl = Command::new("curl").arg("--version").stdout(Stdio::null()).status().is_ok();
    if !require("no curl: the test reads the controller's metrics from inside a host's namespace", curl) {
        return;
    }
    let Some(lan) = Lan::create("tsr", 'c', &MULTI_HOST) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let out = d.join("out");
    let mut units = Processes(Vec::new());
    start_multi_host(&mut units, &lan, d, &["--seconds", "300", "--output", out.to_str().unwrap()]);
    wait_for_line(d, "run.log", "every unit is enabled");
    // The FUs on the filter host publish their resource summaries through the brokers on the
    // builder host, and the BUs, which hold back on them, read them.
    for bu in ["bu0", "bu1"] {
        wait_for_remote_summaries(&out.join(bu), 2001, "10-231-9-3", 2);
    }
    wait_for_farm_counted(&lan, d);
    std::thread::sleep(Duration::from_secs(2));
    lan.cut(1);
    let cut = std::time::Instant::now();
    let (code, summary) = wait_controller(&mut units, d, Duration::from_secs(60));
    // The heartbeat time-out is 3 s; one unanswered call (3 s) and the abort come on top.
    assert!(cut.elapsed() < Duration::from_secs(30), "reported after {:?}", cut.elapsed());
    assert_eq!(code, Some(1), "{summary}");
    let fault = summary
        .lines()
        .find(|l| l.starts_with("fault: HOST_UNREACHABLE"))
        .unwrap_or_else(|| panic!("{summary}\n{}", common::logs(d)));
    assert!(fault.contains("bu0, bu1 on 10.231.9.2: its agent has not answered"), "{fault}");
    // Nothing is said of units on the host that cannot be seen but that the cut cut off.
    assert!(!summary.contains("UNIT_STALLED bu"), "{summary}");
    assert!(summary.contains("conservation: NOT PROVEN"), "{summary}");
}
