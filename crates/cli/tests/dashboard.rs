//! The live dashboard in a real browser (headless Chromium, which `.ci/run` installs): during a
//! `tessera run`, the page shows the units and figures that move and agree with the API: the
//! FEDs in error, the sub-states with their sentences, the BUs' lumi sections, the run's
//! conservation so far and the system configuration. Without Chromium the test says so and
//! passes without running.

mod live;

use live::{BAD_CRC_FED, SKIP_FED, request, start_run};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The units, from the API.
fn units(addr: SocketAddr) -> serde_json::Value {
    serde_json::from_str(&request(addr, "GET", "/api/v1/units")).unwrap()
}

/// The unit named `name` of the API's `units`.
fn unit<'a>(units: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    units.as_array().unwrap().iter().find(|u| u["name"] == name).unwrap()
}

/// A figure of a unit, from the API.
fn figure(units: &serde_json::Value, name: &str, figure: &str) -> u64 {
    unit(units, name)["figures"][figure].as_f64().unwrap() as u64
}

/// Events triggered, from the API.
fn triggered(units: &serde_json::Value) -> u64 {
    units.as_array().unwrap().iter().map(|u| u["figures"]["events_triggered_total"].as_f64().unwrap() as u64).sum()
}

/// The errors of `reason` the API counts for FED `fed` of ru1.
fn fed_errors(units: &serde_json::Value, fed: u16, reason: &str) -> u64 {
    let feds = unit(units, "ru1")["fed_errors"].as_array().unwrap();
    feds.iter().find(|e| e["fed"] == fed).map_or(0, |e| e["errors"][reason].as_u64().unwrap())
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

/// The text in the element with `id` of a dumped page (up to the next tag).
fn text(dom: &str, id: &str) -> String {
    let at = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id} in\n{dom}"));
    let start = at + dom[at..].find('>').unwrap() + 1;
    dom[start..].chars().take_while(|c| *c != '<').collect()
}

/// The number in the element with `id` of a dumped page.
fn shown(dom: &str, id: &str) -> u64 {
    let text: String = text(dom, id).chars().filter(char::is_ascii_digit).collect();
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

    let api_before = units(addr);
    let first = rendered(chromium, addr, &tmp.path().join("profile1"));
    let api_between = units(addr);
    let second = rendered(chromium, addr, &tmp.path().join("profile2"));
    let api_after = units(addr);
    let (before, between, after) = (triggered(&api_before), triggered(&api_between), triggered(&api_after));

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

    // The FEDs in error, as the API counts them, and no other.
    assert_eq!(shown(&second, &format!("fed-ru1-{BAD_CRC_FED}-CORRUPT")), 1);
    assert_eq!(shown(&second, &format!("fed-ru1-{SKIP_FED}-SYNC_LOST")), 1);
    let missing = shown(&second, &format!("fed-ru1-{SKIP_FED}-MISSING"));
    let (low, high) = (fed_errors(&api_between, SKIP_FED, "MISSING"), fed_errors(&api_after, SKIP_FED, "MISSING"));
    assert!(low <= missing && missing <= high && missing > 0, "{low} <= {missing} <= {high}");
    assert_eq!(second.matches("data-fed=").count(), 2, "{second}");
    // ru1's sub-state SYNC_LOSS (its FED out of sync stays out), with the API's sentence.
    let sub_states = unit(&api_after, "ru1")["sub_states"].as_array().unwrap();
    let sync_loss = sub_states.iter().find(|s| s["key"] == "SYNC_LOSS").unwrap_or_else(|| panic!("{api_after}"));
    let li = r#"data-unit="ru1" data-key="SYNC_LOSS">ru1: "#;
    let listed = second.find(li).map(|at| &second[at..]).unwrap_or_else(|| panic!("{second}"));
    assert!(listed.split("</li>").next().unwrap().ends_with(sync_loss["sentence"].as_str().unwrap()), "{listed}");
    // The BUs' lumi sections, between what the API said before and after.
    for bu in ["bu0", "bu1"] {
        let closed = shown(&second, &format!("ls-{bu}-closed"));
        let (low, high) = (
            figure(&api_between, bu, "lumi_sections_closed_total"),
            figure(&api_after, bu, "lumi_sections_closed_total"),
        );
        assert!(low <= closed && closed <= high, "{bu}: {low} <= {closed} <= {high}");
        // A BU that has written no file yet shows "–" (lumi sections count from 1).
        let writing = if text(&second, &format!("ls-{bu}-writing")) == "–" {
            0
        } else {
            shown(&second, &format!("ls-{bu}-writing"))
        };
        let (low, high) = (figure(&api_between, bu, "lumi_section"), figure(&api_after, bu, "lumi_section"));
        assert!(low <= writing && writing <= high, "{bu}: {low} <= {writing} <= {high}");
    }
    // The conservation so far adds up, in the API's bounds, and says that it holds so far.
    let cons = shown(&second, "cons_triggered");
    assert!(between <= cons && cons <= after, "{between} <= {cons} <= {after}");
    let parts = shown(&second, "cons_published") + shown(&second, "cons_lost") + shown(&second, "cons_in_flight");
    assert_eq!(parts, cons, "triggered = published + lost + in flight");
    let said = text(&second, "cons_sentence");
    assert!(said.starts_with("Holds so far: ") || said.starts_with("Holds: "), "{said}");
    // The system configuration the run was given.
    assert!(text(&second, "config").contains(&format!("skip@2000/{SKIP_FED}")), "{second}");

    request(addr, "POST", "/api/v1/stop");
    let status = run.wait().unwrap();
    let summary = std::fs::read_to_string(tmp.path().join("summary.txt")).unwrap();
    assert!(status.success(), "{status}\n{summary}");
}
