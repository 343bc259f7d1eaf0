//! A stranger on every port during a run: tens of thousands of callers that never finish what
//! they began (an HTTP request head cut short on the control server, a few bytes and silence on
//! the units' data ports) cannot make a unit fail or lose an event. Each server holds at most
//! its bound of them at once, closes the rest as they come and the held ones after its time-out,
//! and the run ends whole, both conservation checks holding.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use common::{free_ports, logs};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Callers a flooding thread holds open at once: with four threads, well inside this process's
/// open-file limit, and each far past the bound of the server it calls.
const HELD_PER_THREAD: usize = 1500;

/// Opens callers to `to` that each send `first` and then nothing, holding the newest
/// [`HELD_PER_THREAD`] (the oldest are let go as new ones come), until `stop`; counts the
/// callers made in `made`.
fn flood(to: SocketAddr, first: &'static [u8], stop: Arc<AtomicBool>, made: Arc<AtomicU64>) {
    let mut held = std::collections::VecDeque::new();
    while !stop.load(Ordering::Relaxed) {
        match TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
            Ok(mut s) => {
                let _ = s.write_all(first);
                made.fetch_add(1, Ordering::Relaxed);
                held.push_back(s);
                if held.len() > HELD_PER_THREAD {
                    held.pop_front();
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// The control server's address that `tessera run`'s log names.
fn control_address(log: &Path) -> Option<SocketAddr> {
    let text = std::fs::read_to_string(log).ok()?;
    let start = "http://";
    let at = text.find(start)? + start.len();
    text[at..].split('/').next()?.parse().ok()
}

#[test]
fn a_2x2_run_flooded_on_its_control_server_and_every_data_port_ends_whole() {
    tessera_control::capacity::raise_open_files_limit();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let p = free_ports(6);
    let yaml = format!(
        "run:\n  number: 71\n  seconds: 8\n  orbits_per_lumi_section: 4096\n  output: {out}\n\
         trigger:\n  rate_hz: 10000\n\
         evm:\n  port: {}\n\
         rus:\n  - name: ru0\n    ferol_port: {}\n    feds: \"1024,0-1\"\n    fragment_size: {{bytes: 1024}}\n\
         \x20 - name: ru1\n    ferol_port: {}\n    feds: \"2-3\"\n    fragment_size: {{bytes: 1024}}\n\
         bus:\n  - name: bu0\n    data_port: {}\n  - name: bu1\n    data_port: {}\n\
         fu:\n  processes_per_bu: 1\n",
        p[0],
        p[1],
        p[2],
        p[3],
        p[4],
        out = d.join("out").display()
    );
    let system = d.join("system.yaml");
    std::fs::write(&system, yaml).unwrap();
    let log = d.join("run.log");
    let mut run = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("run")
        .arg(&system)
        .stdout(std::fs::File::create(d.join("run.out")).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let control = loop {
        if let Some(a) = control_address(&log) {
            break a;
        }
        assert!(Instant::now() < deadline, "no control address\n{}", logs(d));
        std::thread::sleep(Duration::from_millis(20));
    };
    let port = |n: u16| SocketAddr::from(([127, 0, 0, 1], n));
    let stop = Arc::new(AtomicBool::new(false));
    let targets: [(SocketAddr, &'static [u8]); 4] = [
        (control, b"GET /api/v1/units HTTP/1.1\r\nHost: x\r\n"),
        (port(p[0]), b"TSR"),              // the EVM's port: a link's opening cut short
        (port(p[1]), &[0x47, 0x00, 0x00]), // RU 0's FEROL port: a block header cut short
        (port(p[3]), b"TSR"),              // BU 0's data port
    ];
    let made: Vec<Arc<AtomicU64>> = targets.iter().map(|_| Arc::new(AtomicU64::new(0))).collect();
    let floods: Vec<_> = targets
        .iter()
        .zip(&made)
        .map(|(&(to, first), made)| {
            let (stop, made) = (stop.clone(), made.clone());
            std::thread::spawn(move || flood(to, first, stop, made))
        })
        .collect();
    let status = loop {
        if let Some(s) = run.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline + Duration::from_secs(150), "the run still runs\n{}", logs(d));
        std::thread::sleep(Duration::from_millis(50));
    };
    stop.store(true, Ordering::Relaxed);
    for f in floods {
        f.join().unwrap();
    }
    let out = std::fs::read_to_string(d.join("run.out")).unwrap();
    let made: Vec<u64> = made.iter().map(|m| m.load(Ordering::Relaxed)).collect();
    eprintln!("connections made by the strangers (control, EVM, RU 0 FEROL, BU 0): {made:?}");
    assert_eq!(status.code(), Some(0), "{made:?}\n{out}\n{}", logs(d));
    assert!(made.iter().sum::<u64>() >= 20_000, "the strangers made {made:?} connections");
    let line = out.lines().find(|l| l.starts_with("conservation:")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.ends_with(" + lost 0  holds"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("chain: built ") && l.ends_with("holds")), "{out}");
}
