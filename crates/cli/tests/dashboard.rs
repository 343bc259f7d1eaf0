//! The live dashboard in a real browser (headless Chromium, which `.ci/run` installs): during a
//! `tessera run`, the page shows the units and figures that move and agree with the API.
//! Without Chromium the test says so and passes without running.

mod live;

use live::{request, start_run};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Events triggered, from the API.
fn triggered(addr: SocketAddr) -> u64 {
    let units: serde_json::Value = serde_json::from_str(&request(addr, "GET", "/api/v1/units")).unwrap();
    units.as_array().unwrap().iter().map(|u| u["figures"]["events_triggered_total"].as_f64().unwrap() as u64).sum()
}

/// The page's DOM after its script has run for a few (virtual) seconds.
fn rendered(chromium: &str, addr: SocketAddr, profile: &std::path::Path) -> String {
    let out = Command::new(chromium)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=3500",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("http://{addr}/"))
        .stderr(Stdio::null())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The number in the element with `id` of a dumped page.
fn shown(dom: &str, id: &str) -> u64 {
    let start = dom.find(&format!("id=\"{id}\">")).unwrap_or_else(|| panic!("no #{id} in\n{dom}")) + id.len() + 6;
    let text: String = dom[start..].chars().take_while(|c| *c != '<').filter(char::is_ascii_digit).collect();
    text.parse().unwrap_or_else(|_| panic!("#{id} holds no number in\n{dom}"))
}

#[test]
fn the_dashboard_in_chromium_shows_figures_that_move_and_match_the_api() {
    let Some(chromium) = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok())
    else {
        eprintln!("skipped: no chromium (.ci/run installs Debian's)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (mut run, addr) = start_run(tmp.path(), 120);
    std::thread::sleep(Duration::from_millis(1000));

    let before = triggered(addr);
    let first = rendered(chromium, addr, &tmp.path().join("profile1"));
    let between = triggered(addr);
    let second = rendered(chromium, addr, &tmp.path().join("profile2"));
    let after = triggered(addr);

    for dom in [&first, &second] {
        assert!(shown(dom, "samples") >= 2, "the page updated itself:\n{dom}");
        for unit in ["ru0", "ru1", "bu0", "bu1"] {
            assert!(dom.contains(&format!("<tr data-unit=\"{unit}\">")), "{unit} in the table");
        }
        assert!(dom.contains("Enabled"), "the units' states are shown");
    }
    let (a, b) = (shown(&first, "triggered"), shown(&second, "triggered"));
    assert!(before <= a && a <= between, "the page agrees with the API: {before} <= {a} <= {between}");
    assert!(between <= b && b <= after, "{between} <= {b} <= {after}");
    assert!(b > a && a > 0, "the figures move: {a} then {b}");
    // The rate of the last second may be 0 when the trigger is held back; that it is a number
    // is what the page owes.
    shown(&second, "rate");

    request(addr, "POST", "/api/v1/stop");
    let status = run.wait().unwrap();
    let summary = std::fs::read_to_string(tmp.path().join("summary.txt")).unwrap();
    assert!(status.success(), "{status}\n{summary}");
}
