//! `tessera pipestream scan` across hosts: four network namespaces on a LAN of the test's own
//! (10.231.11.1–4), each running `tessera agent`, and the driver on a fifth (10.231.11.10), so
//! that it reaches every instance only through its host's agent. A folded 4×4 topology, one
//! instance per host, each its client's and its server's: the servers bind their host's
//! address, take the other hosts' clients, and every message crosses the switch. Pipestream and
//! the raw-TCP baseline are measured at two sizes, with checksums, and lose nothing; iperf3 is
//! not run (it runs on loopback only) and the table says so.
//!
//! A second test: a file whose hosts need agents but that gives no `agent_port` is refused
//! (exit 2) at the line of the first such host, before anything starts.
//!
//! Needs root (to create namespaces) and `ip`: without them the first test fails under CI and
//! elsewhere says that it skips ([`common::require`]).

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use common::{Lan, Processes, logs, tessera, wait_child};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The instances' hosts, then the driver's.
const HOSTS: [&str; 5] = ["10.231.11.1", "10.231.11.2", "10.231.11.3", "10.231.11.4", "10.231.11.10"];
const AGENT_PORT: u16 = 9900;
const TOKEN: &str = "pipestream-hosts-test-token";

/// The scan's file, with its output under `d`.
fn scan_file(d: &Path) -> std::path::PathBuf {
    let yaml = format!(
        "hosts: [{hosts}]\n\
         clients: 4\nservers: 4\nfolded: true\n\
         agent_port: {AGENT_PORT}\n\
         message_bytes: 4096\nbuffer_bytes: 1048576\nthreads: 1\n\
         checksum: true\n\
         duration_s: 0.5\nwarmup_s: 0.2\ntimeout_s: 20\n\
         output: {out}\n\
         scan:\n  message_bytes: [4096, 65536]\n  threads: [1]\n\
         baselines:\n  raw_tcp: true\n  iperf3: true\n",
        hosts = HOSTS[..4].join(", "),
        out = d.join("out").display()
    );
    let path = d.join("pipestream.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

#[test]
fn folded_4x4_scan_runs_across_four_namespace_hosts_through_their_agents() {
    let Some(lan) = Lan::create("tps", 'p', &HOSTS) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut units = Processes(Vec::new());
    for (k, address) in HOSTS[..4].iter().enumerate() {
        lan.start_agent(&mut units, d, k, &format!("agent{k}"), &format!("{address}:{AGENT_PORT}"), TOKEN);
    }
    let file = scan_file(d);
    let started = Instant::now();
    let mut driver = lan
        .tessera(4, &["pipestream", "scan", file.to_str().unwrap()])
        .env("TESSERA_AGENT_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(d.join("scan.out")).unwrap())
        .stderr(std::fs::File::create(d.join("scan.log")).unwrap())
        .spawn()
        .unwrap();
    let status = wait_child(&mut driver, Duration::from_secs(180));
    let took = started.elapsed();
    let out = std::fs::read_to_string(d.join("scan.out")).unwrap();
    let everything = || format!("{out}\n{}\n{}", logs(d), instance_logs(d));
    assert!(status.success(), "the scan ended with {status}\n{}", everything());
    eprintln!("the scan took {took:?}:\n{out}");

    // Every point of pipestream and of raw TCP, at both sizes, moved data and lost nothing.
    let csv = std::fs::read_to_string(d.join("out/results.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|c| *c == name).unwrap_or_else(|| panic!("no {name}: {csv}"));
    let rows: Vec<Vec<&str>> = csv.lines().skip(1).map(|l| l.split(',').collect()).collect();
    let field = |row: &[&str], name: &str| row[column(name)].to_owned();
    for sender in ["pipestream", "raw-tcp"] {
        for size in ["4096", "65536"] {
            let row = rows
                .iter()
                .find(|r| {
                    (field(r, "topology"), field(r, "threads"), field(r, "message_bytes"), field(r, "sender"))
                        == ("4x4 folded".into(), "1".into(), size.into(), sender.into())
                })
                .unwrap_or_else(|| panic!("no {sender} row at {size} B\n{csv}"));
            let (bytes, errors): (u64, u64) =
                (field(row, "bytes").parse().unwrap(), field(row, "errors").parse().unwrap());
            assert!(bytes > 0 && errors == 0, "{sender} at {size} B: {bytes} bytes, {errors} errors\n{csv}");
        }
    }
    assert!(!rows.iter().any(|r| field(r, "sender") == "iperf3"), "iperf3 ran off loopback\n{csv}");
    let table = std::fs::read_to_string(d.join("out/table.txt")).unwrap();
    assert!(
        table.contains("iperf3 baseline: not run, it runs on loopback only and the hosts are not all this one"),
        "{table}"
    );
    assert!(out.contains(&table), "the table is printed\n{out}");
    let plots: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("plot: ")).collect();
    assert!(!plots.is_empty(), "{out}");
    for plot in plots {
        let svg = std::fs::read_to_string(plot).unwrap_or_else(|e| panic!("{plot}: {e}"));
        assert!(svg.contains("<svg"), "{plot}");
    }

    // Each agent started one instance (the topology's instance k on host k) and served it on
    // loopback; the driver ended it when the topology was done.
    for k in 0..4 {
        let instances = instance_dirs(d, k);
        assert_eq!(instances.len(), 1, "agent{k} started {instances:?}\n{}", everything());
        let name = instances[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.ends_with(&format!("-4x4-{k}")), "{name}");
        let log = std::fs::read_to_string(instances[0].join("log")).unwrap();
        assert!(log.contains(&format!("pipestream instance {name}: serving on http://127.0.0.1:")), "{log}");
        let agent = std::fs::read_to_string(d.join(format!("agent{k}.log"))).unwrap();
        assert!(agent.contains(&format!("started {name}: pipestream instance --name {name}")), "{agent}");
    }
    // Every host's instance sent to the three other hosts' servers and received from their
    // clients across the switch: far more than the driver's and agents' requests.
    for k in 0..4 {
        let (sent, received) = lan.link_bytes(k);
        assert!(sent > 4 << 20 && received > 4 << 20, "host {k}: {sent} bytes sent, {received} received");
    }
    // Two senders at two sizes, and nothing else, in the JSON too.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("out/results.json")).unwrap()).unwrap();
    assert_eq!(json.as_array().map(Vec::len), Some(4), "{json}");
}

/// The directories of the instances that agent `k` started.
fn instance_dirs(d: &Path, k: usize) -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<_> = std::fs::read_dir(d.join(format!("agent{k}")))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("ps")))
        .collect();
    dirs.sort();
    dirs
}

/// The logs of every instance the agents started, for a failure's message.
fn instance_logs(d: &Path) -> String {
    let mut all = String::new();
    for k in 0..4 {
        for dir in instance_dirs(d, k) {
            let text = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
            all += &format!("--- {}\n{text}\n", dir.join("log").display());
        }
    }
    all
}

#[test]
fn hosts_that_need_agents_without_agent_port_are_refused_at_their_line() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("no-agent-port.yaml");
    let out = tmp.path().join("out");
    let yaml = format!(
        "clients: 2\nservers: 2\nhosts:\n  - localhost\n  - {}\nfolded: true\noutput: {}\n",
        HOSTS[1],
        out.display()
    );
    std::fs::write(&file, yaml).unwrap();
    let got = tessera(&["pipestream", "scan", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&got.stderr);
    assert_eq!(got.status.code(), Some(2), "{stderr}");
    let at = format!("{}:5", file.display());
    assert!(stderr.contains(&at) && stderr.contains("hosts[1]") && stderr.contains("agent_port"), "{stderr}");
    assert!(!out.exists(), "nothing ran");
}
