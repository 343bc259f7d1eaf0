//! `tessera run` serves its units' metrics while it runs: the figures move, the JSON API names
//! the same units, the FED that got a bad CRC-16 is the one counted, the process's own figures
//! and its build are there, and the process serves the configuration it runs.

mod live;

use live::{BAD_CRC_EVENT, BAD_CRC_FED, SKIP_FED, request, start_run};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn get(addr: SocketAddr, path: &str) -> String {
    request(addr, "GET", path)
}

/// The value of the sample `series` (name and labels).
fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
        .parse()
        .unwrap()
}

fn sum(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// Reads `/metrics` until `moved` holds of the first reading and the latest, for at most a
/// minute (a run on a busy machine may be slow; the test asks only that the figure moves).
fn until_moved(addr: SocketAddr, moved: impl Fn(&str, &str) -> bool) -> (String, String) {
    let first = get(addr, "/metrics");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let latest = get(addr, "/metrics");
        if moved(&first, &latest) || Instant::now() > deadline {
            return (first, latest);
        }
    }
}

#[test]
fn run_serves_metrics_that_move_and_an_api_that_names_the_units_and_stops_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, addr) = start_run(tmp.path(), 30);
    std::thread::sleep(Duration::from_millis(800));
    let first = get(addr, "/metrics");
    std::thread::sleep(Duration::from_millis(1200));
    let second = get(addr, "/metrics");
    let triggered = |m: &str| sum(m, "tessera_events_triggered_total");
    assert!(triggered(&second) > triggered(&first) && triggered(&first) > 0.0, "{first}\n{second}");
    assert!(sum(&second, "tessera_fragment_bytes_total") > sum(&first, "tessera_fragment_bytes_total"));
    // The process's own figures, as every Prometheus client names them, and the build's.
    assert!(sample(&second, "process_cpu_seconds_total") > sample(&first, "process_cpu_seconds_total"), "{second}");
    assert!(sample(&second, "process_resident_memory_bytes") > 1e6, "{second}");
    assert!(sample(&second, "process_open_fds") > 0.0, "{second}");
    let build = format!("tessera_build_info{{version=\"{}\",git_hash=\"", env!("CARGO_PKG_VERSION"));
    assert!(second.lines().any(|l| l.starts_with(&build) && l.ends_with("\"} 1")), "{second}");
    let units: serde_json::Value = serde_json::from_str(&get(addr, "/api/v1/units")).unwrap();
    let names: Vec<&str> = units.as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ru0", "ru1", "bu0", "bu1"]);
    let built_api: f64 =
        units.as_array().unwrap().iter().map(|u| u["figures"]["events_built_total"].as_f64().unwrap()).sum();
    assert!(built_api >= sum(&second, "tessera_events_built_total"), "the figures only grow");
    assert!(units.as_array().unwrap().iter().all(|u| u["state"] == "Enabled"), "{units}");
    assert!(second.contains(r#"tessera_unit_state{unit="bu0",kind="bu",state="Enabled"} 1"#), "{second}");

    // The FED that got the bad CRC-16 is the one counted corrupt; the FED that skipped an event
    // lost its sync, and its later events go on without it. No other FED has an error.
    let fed_errors: Vec<&str> = second
        .lines()
        .filter(|l| l.starts_with("tessera_fed_errors_total{"))
        .map(|l| l.rsplit_once(' ').unwrap().0)
        .collect();
    let series = |fed: u16, reason: &str| {
        format!(r#"tessera_fed_errors_total{{unit="ru1",kind="ru",fed="{fed}",reason="{reason}"}}"#)
    };
    let (corrupt, missing, sync) =
        (series(BAD_CRC_FED, "CORRUPT"), series(SKIP_FED, "MISSING"), series(SKIP_FED, "SYNC_LOST"));
    assert_eq!(fed_errors, [&corrupt, &missing, &sync], "events {BAD_CRC_EVENT} and later are long past:\n{second}");
    assert_eq!(sample(&second, &corrupt), 1.0);
    assert_eq!(sample(&second, &sync), 1.0);
    assert!(sample(&second, &missing) > 0.0);
    let ru1 = units.as_array().unwrap().iter().find(|u| u["name"] == "ru1").unwrap();
    assert_eq!(ru1["fed_errors"][0]["fed"], BAD_CRC_FED, "{ru1}");
    assert_eq!(ru1["fed_errors"][0]["errors"]["CORRUPT"], 1, "{ru1}");
    assert_eq!(ru1["fed_errors"][1]["fed"], SKIP_FED, "{ru1}");
    assert_eq!(ru1["fed_errors"][1]["errors"]["SYNC_LOST"], 1, "{ru1}");
    assert_eq!(ru1["fed_errors"].as_array().unwrap().len(), 2, "{ru1}");
    let keys: Vec<&str> = ru1["sub_states"].as_array().unwrap().iter().map(|s| s["key"].as_str().unwrap()).collect();
    assert!(keys.contains(&"SYNC_LOSS") && keys.contains(&"MISSING_DATA"), "{ru1}");
    assert!(second.contains(r#"tessera_sub_state{unit="ru1",kind="ru",reason="SYNC_LOSS"} 1"#), "{second}");
    assert!(second.contains(r#"tessera_sub_state{unit="ru0",kind="evm",reason="SYNC_LOSS"} 0"#), "{second}");

    // The FUs' CPU time and the BUs' lumi sections move.
    let (a, b) = until_moved(addr, |a, b| {
        sum(b, "tessera_fu_cpu_seconds_total") > sum(a, "tessera_fu_cpu_seconds_total")
            && sum(b, "tessera_lumi_sections_closed_total") > sum(a, "tessera_lumi_sections_closed_total")
    });
    assert!(sum(&b, "tessera_fu_cpu_seconds_total") > sum(&a, "tessera_fu_cpu_seconds_total"), "{a}\n{b}");
    assert!(sum(&b, "tessera_lumi_sections_closed_total") > sum(&a, "tessera_lumi_sections_closed_total"), "{b}");
    assert!(sum(&b, "tessera_lumi_section") > 0.0, "{b}");

    // The configuration it runs, every key written out, the fault included.
    let config = get(addr, "/api/v1/config");
    assert!(config.contains("orbits_per_lumi_section: 4096") && config.contains("skip@2000/6"), "{config}");
    let said: serde_json::Value = serde_json::from_str(&get(addr, "/api/v1/conservation")).unwrap();
    assert_eq!((said["evm_here"].as_bool(), said["holds_so_far"].as_bool()), (Some(true), Some(true)), "{said}");
    assert!(said["triggered"].as_u64().unwrap() > 0, "{said}");
    // The run as a whole, as its loop fills it: number, state, the rate asked for and got.
    let run: serde_json::Value = serde_json::from_str(&get(addr, "/api/v1/run")).unwrap();
    assert_eq!((run["run"].as_u64(), run["state"].as_str()), (Some(1), Some("Running")), "{run}");
    assert!(run["elapsed_s"].as_f64().unwrap() > 1.0 && run["mean_rate_hz"].as_f64().unwrap() > 0.0, "{run}");
    let metrics = get(addr, "/metrics");
    assert_eq!(sample(&metrics, r#"tessera_run_info{run="1",state="Running"}"#), 1.0, "{metrics}");
    // Stopping over the API drains the run and ends it cleanly, long before its 120 s.
    let said = request(addr, "POST", "/api/v1/stop");
    assert!(said.contains("stopping the trigger"), "{said}");
    let started = std::time::Instant::now();
    let status = child.wait().unwrap();
    let summary = std::fs::read_to_string(tmp.path().join("summary.txt")).unwrap();
    assert!(status.success(), "{status}\n{summary}");
    assert!(started.elapsed() < Duration::from_secs(60));
}
