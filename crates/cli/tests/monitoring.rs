//! `tessera run` serves its units' metrics while it runs: the figures move, and the JSON API
//! names the same units.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

/// One request; the body of a 2xx answer.
fn request(addr: SocketAddr, method: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 20"), "{answer}");
    answer.split_once("\r\n\r\n").unwrap().1.to_owned()
}

fn get(addr: SocketAddr, path: &str) -> String {
    request(addr, "GET", path)
}

fn sum(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[test]
fn run_serves_metrics_that_move_and_an_api_that_names_the_units_and_stops_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["run", "--seconds", "120", "--control", "127.0.0.1:0", "--output"])
        .arg(tmp.path().join("out"))
        .stdout(std::fs::File::create(tmp.path().join("summary.txt")).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut addr = None;
    let mut line = String::new();
    while addr.is_none() && stderr.read_line(&mut line).unwrap() > 0 {
        if let Some(rest) = line.strip_prefix("monitoring: http://") {
            addr = Some(rest.split('/').next().unwrap().parse::<SocketAddr>().unwrap());
        }
        line.clear();
    }
    // Keep reading so that the run never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let addr = addr.expect("tessera run says where its metrics are");
    std::thread::sleep(Duration::from_millis(800));
    let first = get(addr, "/metrics");
    std::thread::sleep(Duration::from_millis(1200));
    let second = get(addr, "/metrics");
    let triggered = |m: &str| sum(m, "tessera_events_triggered_total");
    assert!(triggered(&second) > triggered(&first) && triggered(&first) > 0.0, "{first}\n{second}");
    assert!(sum(&second, "tessera_fragment_bytes_total") > sum(&first, "tessera_fragment_bytes_total"));
    let units: serde_json::Value = serde_json::from_str(&get(addr, "/api/v1/units")).unwrap();
    let names: Vec<&str> = units.as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ru0", "ru1", "bu0", "bu1"]);
    let built_api: f64 =
        units.as_array().unwrap().iter().map(|u| u["figures"]["events_built_total"].as_f64().unwrap()).sum();
    assert!(built_api >= sum(&second, "tessera_events_built_total"), "the figures only grow");
    assert!(units.as_array().unwrap().iter().all(|u| u["state"] == "Enabled"), "{units}");
    assert!(second.contains(r#"tessera_unit_state{unit="bu0",kind="bu",state="Enabled"} 1"#), "{second}");
    // Stopping over the API drains the run and ends it cleanly, long before its 120 s.
    let said = request(addr, "POST", "/api/v1/stop");
    assert!(said.contains("stopping the trigger"), "{said}");
    let started = std::time::Instant::now();
    let status = child.wait().unwrap();
    let summary = std::fs::read_to_string(tmp.path().join("summary.txt")).unwrap();
    assert!(status.success(), "{status}\n{summary}");
    assert!(started.elapsed() < Duration::from_secs(60));
}
