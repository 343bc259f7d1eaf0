//! `tessera run` serves its units' metrics while it runs: the figures move, and the JSON API
//! names the same units.

mod live;

use live::{request, start_run};
use std::net::SocketAddr;
use std::time::Duration;

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
    let (mut child, addr) = start_run(tmp.path(), 120);
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
