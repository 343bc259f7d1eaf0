//! `tessera run` serves its units' metrics while it runs: the figures move, and the JSON API
//! names the same units.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    answer.split_once("\r\n\r\n").unwrap().1.to_owned()
}

fn sum(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[test]
fn run_serves_metrics_that_move_and_an_api_that_names_the_units() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["run", "--seconds", "4", "--control", "127.0.0.1:0", "--output"])
        .arg(tmp.path().join("out"))
        .stdout(Stdio::null())
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
    assert!(child.wait().unwrap().success());
}
