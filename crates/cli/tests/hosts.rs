//! Two hosts, as two network namespaces joined by a veth pair: the EVM, `ru0` and `bu0` on
//! 10.231.7.1, `ru1` and `bu1` on 10.231.7.2, each unit its own `tessera` process inside its
//! host's namespace, from one system file, as the README's two-host example runs them. Every
//! event is built once and every run directory verifies.
//!
//! A second test puts an FU on the other host, reaching its BU only through the BU's file
//! broker.
//!
//! Needs root (to create namespaces); without it the test says so and passes without running.

mod common;

use common::{Processes, spawn_logged, verified_events, wait_for_line};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const RUN: u32 = 52;
const EVENTS: u64 = 3000;

fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Two namespaces and the veth pair between them, removed when dropped.
struct Hosts {
    a: String,
    b: String,
}

impl Hosts {
    /// Two hosts named after this process and `tag`, so that tests running at once do not meet.
    fn create(tag: char) -> Option<Hosts> {
        let id = std::process::id();
        let hosts = Hosts { a: format!("tsr-a-{id}{tag}"), b: format!("tsr-b-{id}{tag}") };
        let (va, vb) = (format!("tva{id}{tag}"), format!("tvb{id}{tag}"));
        let steps: [&[&str]; 11] = [
            &["netns", "add", &hosts.a],
            &["netns", "add", &hosts.b],
            &["link", "add", &va, "type", "veth", "peer", "name", &vb],
            &["link", "set", &va, "netns", &hosts.a],
            &["link", "set", &vb, "netns", &hosts.b],
            &["-n", &hosts.a, "addr", "add", "10.231.7.1/24", "dev", &va],
            &["-n", &hosts.b, "addr", "add", "10.231.7.2/24", "dev", &vb],
            &["-n", &hosts.a, "link", "set", &va, "up"],
            &["-n", &hosts.b, "link", "set", &vb, "up"],
            &["-n", &hosts.a, "link", "set", "lo", "up"],
            &["-n", &hosts.b, "link", "set", "lo", "up"],
        ];
        for step in steps {
            if !ip(step) {
                eprintln!("skipped: `ip {}` failed (needs root and network namespaces)", step.join(" "));
                return None;
            }
        }
        Some(hosts)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        ip(&["netns", "del", &self.a]);
        ip(&["netns", "del", &self.b]);
    }
}

fn system_file(dir: &Path) -> std::path::PathBuf {
    let yaml = format!(
        "run:\n  number: {RUN}\n  first_event: {first}\n  events: {EVENTS}\n  orbits_per_lumi_section: 64\n  output: {out}\n\
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

fn start(units: &mut Processes, dir: &Path, host: &str, label: &str, args: &[&str]) {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", host, env!("CARGO_BIN_EXE_tessera")]).args(args);
    units.0.push((label.to_string(), spawn_logged(command, &dir.join(format!("{label}.log")))));
}

#[test]
fn two_hosts_in_network_namespaces_build_every_event() {
    let Some(hosts) = Hosts::create('e') else { return };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let system = system_file(d);
    let sys = system.to_str().unwrap();
    let mut units = Processes(Vec::new());
    start(&mut units, d, &hosts.a, "bu0", &["bu", "--system", sys, "--name", "bu0"]);
    start(&mut units, d, &hosts.b, "bu1", &["bu", "--system", sys, "--name", "bu1"]);
    start(&mut units, d, &hosts.b, "ru1", &["ru", "--system", sys, "--name", "ru1"]);
    start(&mut units, d, &hosts.a, "evm", &["evm", "--system", sys]);
    wait_for_line(d, "evm.log", "run 52");
    wait_for_line(d, "ru1.log", "run 52");
    start(&mut units, d, &hosts.a, "ferol-ru0", &["ferol", "--system", sys, "--ru", "ru0"]);
    start(&mut units, d, &hosts.b, "ferol-ru1", &["ferol", "--system", sys, "--ru", "ru1"]);
    units.wait_all(d, Duration::from_secs(120));
    let evm = std::fs::read_to_string(d.join("evm.log")).unwrap();
    assert!(evm.contains(&format!("triggered {EVENTS}, committed {EVENTS}")), "{evm}");
    let seen = verified_events(d, RUN, &["bu0", "bu1"]);
    assert_eq!(seen.len() as u64, EVENTS, "every event in exactly one file");
}

#[test]
fn fu_on_another_host_processes_a_bu_through_its_file_broker() {
    let Some(hosts) = Hosts::create('f') else { return };
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
    start(&mut units, d, &hosts.b, "fu", &fu_args);
    start(&mut units, d, &hosts.a, "run", &["run", system.to_str().unwrap()]);
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
}
