//! The live dashboard in a real browser (headless Chromium, which `.ci/run` installs): during a
//! `tessera run`, the page shows the units and figures that move and agree with the API: the
//! FEDs in error, the sub-states with their sentences, the BUs' lumi sections, the run's
//! conservation so far, the system configuration, and every unit in the system diagram with the
//! API's state. Other tests serve the page with fixed answers of the API (a tiny HTTP server in
//! the test): views that name hosts, one of them stale, one partial and one held back, and a run
//! short of its requested rate: the page draws a box per host with its units, shows the
//! unreachable units as such and the held-back one amber with its reason, and the run's number,
//! state, rates, dead time and mergers; its Stop button POSTs the stop. Without Chromium they
//! fail under CI, and elsewhere say that they skip ([`common::require`]).

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;
mod live;

use live::{BAD_CRC_FED, SKIP_FED, request, start_run};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_control::{RunState, RunStatus};

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

/// The page at `path` (`/`, with a query if any): its DOM after its script has run for a few
/// (virtual) seconds.
fn rendered(chromium: &str, addr: SocketAddr, path: &str, profile: &std::path::Path) -> String {
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
        .arg(format!("http://{addr}{path}"))
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

/// The system diagram of a dumped page.
fn diagram(dom: &str) -> &str {
    let at = dom.find("id=\"diagram\"").unwrap_or_else(|| panic!("no diagram in\n{dom}"));
    let end = dom[at..].find("<h2>").map_or(dom.len(), |n| at + n);
    &dom[at..end]
}

/// The state the diagram shows for `unit`.
fn diagram_state(diagram: &str, unit: &str) -> String {
    let key = format!("data-unit=\"{unit}\" data-state=\"");
    let at = diagram.find(&key).unwrap_or_else(|| panic!("{unit} is not in the diagram:\n{diagram}")) + key.len();
    diagram[at..].chars().take_while(|c| *c != '"').collect()
}

/// Chromium, or `None` when this machine has none (a failure under CI: [`common::require`]).
fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok());
    let why = "no chromium: the test drives the dashboard in a real browser (.ci/run installs Debian's)";
    if common::require(why, found.is_some()) { found } else { None }
}

#[test]
fn the_dashboard_in_chromium_shows_figures_that_move_and_match_the_api() {
    let Some(chromium) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (mut run, addr) = start_run(tmp.path(), 30);
    std::thread::sleep(Duration::from_millis(1000));

    let api_before = units(addr);
    let first = rendered(chromium, addr, "/", &tmp.path().join("profile1"));
    let api_between = units(addr);
    let second = rendered(chromium, addr, "/", &tmp.path().join("profile2"));
    let api_after = units(addr);
    let (before, between, after) = (triggered(&api_before), triggered(&api_between), triggered(&api_after));

    for dom in [&first, &second] {
        assert!(shown(dom, "samples") >= 2, "the page updated itself:\n{dom}");
        for unit in ["ru0", "ru1", "bu0", "bu1"] {
            // A row of its own (amber, `class="throttled"`, while the unit holds back).
            assert!(dom.contains(&format!("<tr data-unit=\"{unit}\"")), "{unit} in the table");
        }
        assert!(dom.contains("Enabled"), "the units' states are shown");
        // The diagram shows every unit the API names, with the state the API gives it, in the
        // columns of a process that runs every unit itself (no hosts).
        let diagram = diagram(dom);
        assert!(!diagram.contains("data-host="), "no host boxes without hosts:\n{diagram}");
        for u in api_before.as_array().unwrap() {
            let name = u["name"].as_str().unwrap();
            let state = diagram_state(diagram, name);
            let states: Vec<&str> =
                [&api_before, &api_after].iter().map(|api| unit(api, name)["state"].as_str().unwrap()).collect();
            assert!(states.contains(&state.as_str()), "{name} is {state} in the diagram, {states:?} in the API");
        }
        assert!(diagram.find("data-unit=\"ru1\"") < diagram.find("data-unit=\"bu0\""), "RUs ⇉ BUs:\n{diagram}");
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

/// A unit view as a controller gathering several hosts gives it.
fn view(name: &str, kind: &str, host: &str, state: &str, built: u64) -> serde_json::Value {
    serde_json::json!({
        "name": name, "kind": kind, "host": host, "state": state, "throttle": "", "sub_states": [],
        "fed_errors": [], "failed": false, "problems": [],
        "figures": { "events_triggered_total": if kind == "evm" { built } else { 0 }, "events_built_total": built,
            "events_published_total": built, "events_in_flight": 0, "fragments_total": built * 4,
            "fragment_bytes_total": built * 8192, "problems_total": 0 },
    })
}

/// A script that clicks the page's Stop button `clicks` times once the page has drawn its first
/// answers, added to the page when it is asked for with `?clicks=N` (`?mask_clicks=N`: the first
/// Mask button of the Streams panel).
fn clicker(clicks: &str, button: &str) -> String {
    format!(
        "<script>setTimeout(() => {{ const b = document.querySelector('{button}'); \
         for (let i = 0; i < {clicks}; i++) b.click(); }}, 1500);</script>"
    )
}

/// The dashboard and fixed answers of the API, served on loopback for as long as the test runs;
/// the requests it was sent (method and path) are in `requests`. `POST /api/v1/stop` is
/// accepted and turns the run to Draining with its stop asked for.
struct Canned {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<String>>>,
}

/// Serves the dashboard, `units` as `/api/v1/units` and `run` as `/api/v1/run` (none: 404).
fn serve_canned(units: serde_json::Value, run: Option<Arc<RunStatus>>) -> Canned {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let units = units.to_string();
    let conservation = serde_json::json!({ "evm_here": true, "triggered": 5000, "published": 4000, "lost": {},
        "in_flight": 1000, "holds_so_far": true,
        "sentence": "Holds so far: 1000 events in flight; it holds for the run once none is left at its end." })
    .to_string();
    let seen = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (units, conservation, run, seen) = (units.clone(), conservation.clone(), run.clone(), seen.clone());
            std::thread::spawn(move || {
                let mut request = Vec::new();
                let mut buf = [0; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let request = String::from_utf8_lossy(&request);
                let mut words = request.split_whitespace();
                let method = words.next().unwrap_or("GET").to_owned();
                let target = words.next().unwrap_or("/");
                let (path, query) = target.split_once('?').unwrap_or((target, ""));
                seen.lock().unwrap().push(format!("{method} {path}"));
                let json = "application/json";
                let (status, kind, body) = match (method.as_str(), path, &run) {
                    ("GET", "/", _) => {
                        let clicks = match query.split_once('=') {
                            Some(("clicks", n)) => clicker(n, "#stop"),
                            Some(("mask_clicks", n)) => clicker(n, "button.mask"),
                            _ => String::new(),
                        };
                        let page = tessera_control::DASHBOARD.replace("</body>", &format!("{clicks}</body>"));
                        ("200 OK", "text/html; charset=utf-8", page)
                    }
                    ("GET", "/api/v1/units", _) => ("200 OK", json, units),
                    ("GET", "/api/v1/conservation", _) => ("200 OK", json, conservation),
                    ("GET", "/api/v1/config", _) => ("200 OK", "application/yaml", "run:\n  number: 7\n".to_owned()),
                    ("GET", "/api/v1/run", Some(run)) => ("200 OK", json, serde_json::to_string(&run.view()).unwrap()),
                    ("GET", "/api/v1/run", None) => ("404 Not Found", json, r#"{"error":"no run"}"#.to_owned()),
                    ("POST", "/api/v1/stop", _) => {
                        if let Some(run) = &run {
                            run.update(|v| {
                                v.state = RunState::Draining;
                                v.stop_requested = true;
                            });
                        }
                        ("202 Accepted", json, r#"{"result":"stopping the trigger; the run drains"}"#.to_owned())
                    }
                    ("POST", "/api/v1/feds/4/mask", _) => (
                        "202 Accepted",
                        json,
                        r#"{"result":"FED 4 masked at ru1: its events go on without it"}"#.to_owned(),
                    ),
                    _ => ("404 Not Found", "text/plain", "not here\n".to_owned()),
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    Canned { addr, requests }
}

/// A run of 100 kHz requested that achieves 45 kHz, its trigger held back mostly because ru1's
/// buffers are full, with 9 of its 12 closed lumi sections merged.
fn short_run() -> Arc<RunStatus> {
    let run = Arc::new(RunStatus::new(7));
    run.update(|v| {
        v.state = RunState::Running;
        v.elapsed_s = 83.4;
        v.requested_rate_hz = Some(100_000.0);
        v.achieved_rate_hz = 45_000.0;
        v.mean_rate_hz = 61_000.0;
        v.dead_time_fraction = 0.55;
        v.dead_time_by_reason = [("RU_BUFFERS_FULL".to_owned(), 0.5), ("BU_STORE_FULL".to_owned(), 0.05)].into();
        v.lumi_sections_built = 12;
        v.lumi_sections_merged = 9;
        v.bottleneck = Some("bottleneck: RU_BUFFERS_FULL (50 % of the run held): the trigger got 61.0 kHz of the 100.0 kHz asked for (61 %).".into());
    });
    run
}

/// The host box of `host` in a diagram, up to the next host box.
fn host_box<'a>(diagram: &'a str, host: &str) -> &'a str {
    let key = format!("data-host=\"{host}\"");
    let at = diagram.find(&key).unwrap_or_else(|| panic!("no box of host {host}:\n{diagram}"));
    let start = diagram[..at].rfind("<section").unwrap();
    let end = diagram[at..].find("<section").map_or(diagram.len(), |n| at + n);
    &diagram[start..end]
}

#[test]
fn the_dashboard_draws_the_hosts_with_their_units_and_shows_an_unreachable_one_as_such() {
    let Some(chromium) = chromium() else { return };
    let mut stale = view("bu1", "bu", "bu-host-2", "Enabled", 2000);
    stale["stale"] = true.into();
    let mut throttled = view("ru1", "ru", "ru-host", "Enabled", 5000);
    throttled["throttle"] = "RU_BUFFERS_FULL".into();
    let units = serde_json::json!([
        view("ru0", "evm", "ru-host", "Enabled", 5000),
        throttled,
        view("bu0", "bu", "bu-host-1", "Enabled", 2000),
        stale,
        // An older or partial view: the page must still draw it, and everything else.
        { "name": "bu2", "kind": "bu", "host": "bu-host-1", "state": "Unreachable" },
        { "name": "odd" },
    ]);
    let run = short_run();
    let canned = serve_canned(units, Some(run.clone()));
    let tmp = tempfile::tempdir().unwrap();
    let dom = rendered(chromium, canned.addr, "/", &tmp.path().join("profile"));

    assert!(shown(&dom, "samples") >= 2, "the page updated itself, no error stopped it:\n{dom}");
    let diagram = diagram(&dom);
    // A box per host, its units inside it, with their states.
    let ru_host = host_box(diagram, "ru-host");
    for unit in ["ru0", "ru1"] {
        assert_eq!(diagram_state(ru_host, unit), "Enabled", "{unit} in ru-host:\n{ru_host}");
    }
    assert!(ru_host.contains("RU_BUFFERS_FULL"), "ru1's throttle as a badge:\n{ru_host}");
    // ru1 holds back: amber with its reason, not green; ru0 runs free and is green.
    let ru1 = unit_box(diagram, "ru1");
    assert!(ru1.starts_with(r#"<div class="unit throttled" data-unit="ru1""#), "{ru1}");
    assert!(ru1.contains(r#"data-throttle="RU_BUFFERS_FULL""#) && ru1.contains("holds back: RU_BUFFERS_FULL"), "{ru1}");
    assert!(unit_box(diagram, "ru0").starts_with(r#"<div class="unit st-Enabled" data-unit="ru0""#), "{diagram}");
    assert!(dom.contains(r#"<tr data-unit="ru1" class="throttled">"#), "ru1's row is amber too:\n{dom}");
    // The heading and the tiles count the same units holding back as the diagram draws amber.
    assert_eq!(diagram.matches(r#"class="unit throttled""#).count(), 1, "{diagram}");
    assert_eq!(shown(&dom, "held_back"), 1);
    assert_eq!(text(&dom, "held"), " · ⚠ 1 holding back (ru1: RU_BUFFERS_FULL)");
    let bu_host_1 = host_box(diagram, "bu-host-1");
    assert_eq!(diagram_state(bu_host_1, "bu0"), "Enabled", "{bu_host_1}");
    // A unit whose state is Unreachable, and one whose view is stale, show as unreachable, not
    // as their last state; a host none of whose units answers is marked.
    assert_eq!(diagram_state(bu_host_1, "bu2"), "Unreachable", "{bu_host_1}");
    let bu_host_2 = host_box(diagram, "bu-host-2");
    assert_eq!(diagram_state(bu_host_2, "bu1"), "Unreachable", "{bu_host_2}");
    assert!(bu_host_2.contains("class=\"host unreachable\""), "{bu_host_2}");
    assert!(bu_host_2.contains("not answering") && bu_host_2.contains("last seen Enabled"), "{bu_host_2}");
    assert!(!bu_host_1.contains("class=\"host unreachable\""), "bu-host-1 still has bu0:\n{bu_host_1}");
    // The unit without a host is drawn too, in a box of its own.
    assert!(diagram.contains("data-unit=\"odd\""), "{diagram}");
    // The data flow from the readout hosts to the builder hosts.
    assert!(diagram.find("data-host=\"ru-host\"") < diagram.find("data-host=\"bu-host-1\""), "{diagram}");
    assert!(diagram.contains("⇉"), "{diagram}");
    // The heading and the units' table say it too.
    assert!(text(&dom, "unreachable").contains("2 unreachable (bu1, bu2)"), "{}", text(&dom, "unreachable"));
    assert!(dom.contains("<tr data-unit=\"bu1\" class=\"unreachable\">"), "{dom}");
    assert_eq!(
        text(&dom, "cons_sentence"),
        "Holds so far: 1000 events in flight; it holds for the run once none is left at its end."
    );
    assert!(text(&dom, "config").contains("number: 7"), "{dom}");

    // The run: number, state, time, the rates (the tile's trigger rate is the run's achieved
    // one), the dead time with its reasons, the mergers' progress, and why it is short.
    assert_eq!(text(&dom, "run_number"), "7");
    assert_eq!(text(&dom, "run_state"), "Running");
    assert_eq!(text(&dom, "run_elapsed"), "1 min 23 s");
    assert_eq!(text(&dom, "rate_requested"), "100.0 kHz");
    assert_eq!(text(&dom, "rate_achieved"), "45.0 kHz");
    assert_eq!(shown(&dom, "rate"), 45_000, "the tile shows the run's rate");
    assert!(unit_box(diagram, "ru0").contains("trigger 45.0 kHz"), "and so does the EVM's box:\n{diagram}");
    assert_eq!(text(&dom, "rate_mean"), "61.0 kHz");
    assert_eq!(text(&dom, "dead_time"), "55 %");
    for reason in ["RU_BUFFERS_FULL 50 %", "BU_STORE_FULL 5.0 %"] {
        let key = reason.split(' ').next().unwrap();
        assert!(dom.contains(&format!(r#"<div data-reason="{key}">{reason}</div>"#)), "{reason}:\n{dom}");
    }
    assert_eq!((shown(&dom, "ls_merged"), shown(&dom, "ls_built")), (9, 12));
    assert!(dom.contains(r#"<progress id="merge_progress" max="12" value="9">"#), "{dom}");
    let bottleneck = text(&dom, "bottleneck");
    assert!(bottleneck.contains(&run.view().bottleneck.unwrap()), "{bottleneck}");
    assert!(
        dom.contains(r#"<section class="run held" id="run_box" data-state="Running">"#),
        "the run's box is amber:\n{dom}"
    );
    assert_eq!(text(&dom, "stop"), "Stop the run");
    assert!(!canned.requests.lock().unwrap().iter().any(|r| r.starts_with("POST")), "nothing was stopped");
}

/// The `<div>` of `unit` in a diagram, up to the next unit's.
fn unit_box<'a>(diagram: &'a str, unit: &str) -> &'a str {
    let key = format!("data-unit=\"{unit}\"");
    let at = diagram.find(&key).unwrap_or_else(|| panic!("{unit} is not in the diagram:\n{diagram}"));
    let start = diagram[..at].rfind("<div").unwrap();
    let end = diagram[at..].find("<div class=\"unit").map_or(diagram.len(), |n| at + n);
    &diagram[start..end]
}

#[test]
fn the_dashboard_stop_button_posts_the_stop_after_a_second_click_and_shows_the_run_draining() {
    let Some(chromium) = chromium() else { return };
    let units = serde_json::json!([
        view("ru0", "evm", "ru-host", "Enabled", 5000),
        view("bu0", "bu", "bu-host", "Enabled", 5000)
    ]);
    let canned = serve_canned(units, Some(short_run()));
    let tmp = tempfile::tempdir().unwrap();
    let posts = || canned.requests.lock().unwrap().iter().filter(|r| r.starts_with("POST")).count();
    // One click only arms the button: nothing is stopped.
    let dom = rendered(chromium, canned.addr, "/?clicks=1", &tmp.path().join("profile1"));
    assert_eq!(posts(), 0, "{dom}");
    assert_eq!(text(&dom, "stop"), "Click again to stop the run");
    assert_eq!(text(&dom, "run_state"), "Running");
    let dom = rendered(chromium, canned.addr, "/?clicks=2", &tmp.path().join("profile2"));
    let posted: Vec<String> =
        canned.requests.lock().unwrap().iter().filter(|r| r.starts_with("POST")).cloned().collect();
    assert_eq!(posted, ["POST /api/v1/stop"], "two clicks, one stop:\n{dom}");
    assert_eq!(text(&dom, "stop_said"), "stop: stopping the trigger; the run drains");
    // The next answer of /api/v1/run says Draining, and the button stays off.
    assert_eq!(text(&dom, "run_state"), "Draining");
    assert!(text(&dom, "run_note").contains("stop requested"), "{dom}");
    assert!(dom.contains(r#"<button id="stop" type="button""#) && dom.contains("disabled=\"\""), "{dom}");
    assert_eq!(text(&dom, "stop"), "Stopping…");
}

/// The Streams panel lists what the RUs wait for: ru0 the streams of FEDs 6 and 7, ru1 FED 4
/// for 12.5 s, with a Mask button that, like Stop, only arms on a first click and posts
/// `/api/v1/feds/4/mask` on a second; the run's box says what the run waits for.
#[test]
fn the_dashboard_lists_what_the_rus_wait_for_and_masks_a_fed_after_a_second_click() {
    let Some(chromium) = chromium() else { return };
    let mut ru0 = view("ru0", "evm", "ru-host", "Enabled", 5000);
    ru0["streams_missing"] = serde_json::json!([6, 7]);
    let mut ru1 = view("ru1", "ru", "ru-host", "Enabled", 5000);
    ru1["waiting_for_fed"] = serde_json::json!(4);
    ru1["figures"]["fed_wait_seconds"] = serde_json::json!(12.5);
    let units = serde_json::json!([ru0, ru1, view("bu0", "bu", "bu-host", "Enabled", 5000)]);
    let run = short_run();
    run.update(|v| v.waiting = Some("ru1: its oldest event waits for FED 4 (12.5 s); 812 events held".into()));
    let canned = serve_canned(units, Some(run));
    let tmp = tempfile::tempdir().unwrap();
    let posts =
        || canned.requests.lock().unwrap().iter().filter(|r| r.starts_with("POST")).cloned().collect::<Vec<_>>();
    let dom = rendered(chromium, canned.addr, "/?mask_clicks=1", &tmp.path().join("profile1"));
    assert!(posts().is_empty(), "one click only arms: {dom}");
    let waits = &dom[dom.find(r#"id="fed_waits""#).unwrap_or_else(|| panic!("{dom}"))..];
    let waits = &waits[..waits.find("</tbody>").unwrap()];
    assert!(waits.contains("the streams of FEDs 6, 7 to connect"), "{waits}");
    assert!(
        waits.contains(r#"data-wait-fed="4""#) && waits.contains("FED 4's fragment of its oldest event"),
        "{waits}"
    );
    assert!(waits.contains("Click again to mask"), "{waits}");
    assert!(text(&dom, "waiting").contains("nothing built: ru1: its oldest event waits for FED 4"), "{dom}");
    let dom = rendered(chromium, canned.addr, "/?mask_clicks=2", &tmp.path().join("profile2"));
    assert_eq!(posts(), ["POST /api/v1/feds/4/mask"], "two clicks, one mask:\n{dom}");
    assert_eq!(text(&dom, "mask_said"), "mask: FED 4 masked at ru1: its events go on without it");
}

#[test]
fn the_dashboard_of_a_process_without_a_whole_run_says_so_and_shows_the_trigger_rate_from_the_units() {
    let Some(chromium) = chromium() else { return };
    let units = serde_json::json!([view("ru0", "evm", "ru-host", "Enabled", 5000)]);
    let canned = serve_canned(units, None);
    let tmp = tempfile::tempdir().unwrap();
    let dom = rendered(chromium, canned.addr, "/", &tmp.path().join("profile"));
    assert!(shown(&dom, "samples") >= 2, "{dom}");
    assert_eq!(text(&dom, "run_number"), "–");
    assert_eq!(text(&dom, "run_note"), "this process runs units, not a whole run");
    assert!(dom.contains(r#"<section class="run none" id="run_box""#), "{dom}");
    // The canned counts do not move: the trigger rate between two answers is 0.
    assert_eq!(shown(&dom, "rate"), 0);
    assert_eq!(shown(&dom, "held_back"), 0);
}
