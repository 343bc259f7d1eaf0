//! The control server over real HTTP: metrics that move with the units' figures, the JSON API
//! agreeing with them, and the token rule.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use tessera_control::{ControlConfig, ControlError, ControlServer, RunState, RunStatus, Served, Unit, UnitKind};
use tessera_runtime::stats::{FedError, SubState, Throttle, UnitStats};

/// One GET; the status code and the body.
fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// The value of the sample `name{labels}` in a Prometheus text.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

fn units() -> Vec<Unit> {
    vec![
        Unit { name: "ru0".into(), kind: UnitKind::Evm, stats: Arc::new(UnitStats::default()) },
        Unit { name: "bu0".into(), kind: UnitKind::Bu, stats: Arc::new(UnitStats::default()) },
    ]
}

#[test]
fn metrics_move_with_the_units_and_the_api_agrees() {
    let units = units();
    let (evm, bu) = (units[0].stats.clone(), units[1].stats.clone());
    let server = ControlServer::start(
        &ControlConfig { listen: "127.0.0.1:0".parse().unwrap(), token: None },
        Served::live(units),
    )
    .unwrap();
    let addr = server.local_addr();
    let (status, text) = get(addr, "/metrics", None);
    assert_eq!(status, 200);
    assert_eq!(sample(&text, r#"tessera_events_triggered_total{unit="ru0",kind="evm"}"#), 0.0);
    // OpenMetrics names a counter's family without `_total`, its samples with it.
    assert!(text.contains("# TYPE tessera_events_built counter"), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
    evm.triggered.add(1234);
    bu.events_built.add(1000);
    bu.set_throttle(Throttle::NotEnoughFus);
    evm.links_refused.add(2);
    let (_, text) = get(addr, "/metrics", None);
    assert_eq!(sample(&text, r#"tessera_events_triggered_total{unit="ru0",kind="evm"}"#), 1234.0);
    assert_eq!(sample(&text, r#"tessera_events_built_total{unit="bu0",kind="bu"}"#), 1000.0);
    assert_eq!(sample(&text, r#"tessera_links_refused_total{unit="ru0",kind="evm"}"#), 2.0);
    assert_eq!(sample(&text, r#"tessera_links_refused_total{unit="bu0",kind="bu"}"#), 0.0);
    assert_eq!(sample(&text, r#"tessera_throttled{unit="bu0",kind="bu",reason="NOT_ENOUGH_FUS"}"#), 1.0);
    assert_eq!(sample(&text, r#"tessera_throttled{unit="bu0",kind="bu",reason="RAMDISK_HIGH_WATER"}"#), 0.0);
    let (status, json) = get(addr, "/api/v1/units", None);
    assert_eq!(status, 200);
    let units: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(units[1]["name"], "bu0");
    assert_eq!(units[1]["throttle"], "NOT_ENOUGH_FUS");
    assert_eq!(units[1]["figures"]["events_built_total"], 1000.0);
    assert_eq!(units[0]["figures"]["events_triggered_total"], 1234.0);
    assert_eq!(units[0]["figures"]["links_refused_total"], 2.0);
    assert_eq!(get(addr, "/nothing", None).0, 404);
}

#[test]
fn any_address_but_loopback_needs_a_token_and_every_request_brings_it() {
    let open = ControlConfig { listen: "0.0.0.0:0".parse().unwrap(), token: None };
    assert!(matches!(ControlServer::start(&open, Served::live(units())), Err(ControlError::TokenRequired(_))));
    let guarded = ControlConfig { listen: "0.0.0.0:0".parse().unwrap(), token: Some("s3cret".into()) };
    let server = ControlServer::start(&guarded, Served::live(units())).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", server.local_addr().port()).parse().unwrap();
    assert_eq!(get(addr, "/metrics", None).0, 401);
    assert_eq!(get(addr, "/metrics", Some("wrong")).0, 401);
    assert_eq!(get(addr, "/metrics", Some("s3cret")).0, 200);
}

/// The `/metrics` page of a server with units and a run, as Prometheus reads it.
fn served_metrics() -> String {
    let run = Arc::new(RunStatus::new(7));
    let served = Served { run: Some(run), ..Served::live(units()) };
    let server =
        ControlServer::start(&ControlConfig { listen: "127.0.0.1:0".parse().unwrap(), token: None }, served).unwrap();
    let (status, text) = get(server.local_addr(), "/metrics", None);
    assert_eq!(status, 200);
    text
}

/// The metrics a PromQL expression names (Tessera's and the process's; `up` and the like are
/// Prometheus's own), each asserted to be a family of `exported`; how many there were.
fn assert_exported(expr: &str, exported: &str, whose: &str) -> usize {
    let mut named = 0;
    // Label values in quotes may hold any word: only what is outside them names metrics.
    for outside in expr.split('"').step_by(2) {
        for word in outside.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("tessera_") || word.starts_with("process_") {
                named += 1;
                // A counter's family is named without the `_total` of its samples.
                let counter = word.strip_suffix("_total").map(|family| format!("# TYPE {family} counter\n"));
                assert!(
                    exported.contains(&format!("# TYPE {word} ")) || counter.is_some_and(|c| exported.contains(&c)),
                    "{word} in {whose} {expr:?} is not exported"
                );
            }
        }
    }
    named
}

/// Every metric the Grafana dashboard of the repository queries is one the server exports, so
/// that the two cannot drift apart.
#[test]
fn the_grafana_dashboard_queries_only_exported_metrics() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../monitoring/grafana-dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let exported = served_metrics();
    let mut queried = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            queried += assert_exported(target["expr"].as_str().unwrap(), &exported, "the Grafana dashboard's query");
        }
    }
    assert!(queried >= 10, "{queried}");
}

/// Prometheus's alerting rules, as far as the test reads them.
#[derive(serde::Deserialize)]
struct RuleFile {
    groups: Vec<RuleGroup>,
}

#[derive(serde::Deserialize)]
struct RuleGroup {
    rules: Vec<Rule>,
}

#[derive(serde::Deserialize)]
struct Rule {
    alert: String,
    expr: String,
}

/// Every metric the alerting rules of the repository name is one the server exports, and every
/// rule names one: an alert on a metric that does not exist would never fire.
#[test]
fn the_alerting_rules_name_only_exported_metrics() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../monitoring/alerts.yaml");
    let rules: RuleFile = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let exported = served_metrics();
    let mut alerts = Vec::new();
    for rule in rules.groups.iter().flat_map(|g| &g.rules) {
        let named = assert_exported(&rule.expr, &exported, &rule.alert);
        assert!(
            named > 0 || rule.expr.starts_with("up{"),
            "{} names no metric of Tessera's: {:?}",
            rule.alert,
            rule.expr
        );
        alerts.push(rule.alert.as_str());
    }
    for alert in
        ["TesseraUnitUnreachable", "TesseraUnitThrottled", "TesseraConservationBroken", "TesseraRamDiskAlmostFull"]
    {
        assert!(alerts.contains(&alert), "{alert} in {alerts:?}");
    }
}

/// A request with any method; the status code.
fn status(addr: SocketAddr, method: &str, path: &str) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer[9..12].parse().unwrap()
}

/// The server serves its OpenAPI document, and answers every operation it describes with one of
/// the statuses it documents; with a stop action and without.
#[test]
fn every_documented_operation_answers_as_documented() {
    let act: tessera_control::Action = Arc::new(|| Ok("done".into()));
    let mask: tessera_control::MaskAction = Arc::new(|fed| Ok(format!("FED {fed} masked")));
    let run = Some(Arc::new(RunStatus::new(7)));
    let with = (Some(act), Some(mask), Some("run:\n  number: 7\n".to_owned()), run);
    for (action, mask, system, run) in [with, (None, None, None, None)] {
        let config = ControlConfig { listen: "127.0.0.1:0".parse().unwrap(), token: None };
        let served = Served { stop: action.clone(), enable: action, mask, system, run, ..Served::live(units()) };
        let server = ControlServer::start(&config, served).unwrap();
        let addr = server.local_addr();
        let (code, served) = get(addr, "/api/v1/openapi.json", None);
        assert_eq!(code, 200);
        let doc: serde_json::Value = serde_json::from_str(&served).unwrap();
        assert_eq!(doc, serde_json::to_value(tessera_control::openapi()).unwrap());
        let mut operations = 0;
        for (path, methods) in doc["paths"].as_object().unwrap() {
            for (method, operation) in methods.as_object().unwrap() {
                // A path parameter gets a value: FED 4.
                let code = status(addr, &method.to_uppercase(), &path.replace("{fed}", "4"));
                assert!(
                    operation["responses"].get(code.to_string()).is_some(),
                    "{method} {path} answered {code}, not a documented status"
                );
                operations += 1;
            }
        }
        assert_eq!(operations, 11);
    }
}

/// A process that cannot stop the run answers 409 with the sentence that says why, and its
/// action is not taken for done.
#[test]
fn a_stop_asked_of_an_ru_process_is_refused_with_its_reason() {
    let refuse: tessera_control::Action = Arc::new(|| Err(tessera_control::ActionRefused::RuCannotStop));
    let config = ControlConfig { listen: "127.0.0.1:0".parse().unwrap(), token: None };
    let server = ControlServer::start(&config, Served { stop: Some(refuse), ..Served::live(units()) }).unwrap();
    let mut stream = TcpStream::connect(server.local_addr()).unwrap();
    write!(stream, "POST /api/v1/stop HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert_eq!(&answer[9..12], "409", "{answer}");
    assert!(answer.contains("an RU does not stop the run: ask the EVM's process"), "{answer}");
}

/// The document and the router come from the same handlers: every operation the document
/// lists is served (above), no other method of a documented path is, and no path outside it.
#[test]
fn the_router_serves_what_the_openapi_document_lists_and_nothing_else() {
    let server = serve(units(), None);
    let addr = server.local_addr();
    let doc = serde_json::to_value(tessera_control::openapi()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 10, "{paths:?}");
    for (path, methods) in paths {
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            let documented = methods.get(method.to_lowercase()).is_some();
            let code = status(addr, method, path);
            assert_eq!(code == 405, !documented, "{method} {path} answered {code}");
        }
    }
    for path in ["/api/v1", "/api/v1/units/x", "/api/v2/units", "/metrics/x", "/openapi.json"] {
        assert_eq!(status(addr, "GET", path), 404, "{path}");
    }
}

/// A server on loopback for `units`, serving `system`.
fn serve(units: Vec<Unit>, system: Option<String>) -> ControlServer {
    let config = ControlConfig { listen: "127.0.0.1:0".parse().unwrap(), token: None };
    ControlServer::start(&config, Served { system, ..Served::live(units) }).unwrap()
}

#[test]
fn fed_errors_and_sub_states_show_in_the_metrics_and_the_api_with_their_sentences() {
    let ru = Arc::new(UnitStats::for_ru(&[3, 4, 5]));
    let bu = Arc::new(UnitStats::default());
    let server = serve(
        vec![
            Unit { name: "ru1".into(), kind: UnitKind::Ru, stats: ru.clone() },
            Unit { name: "bu0".into(), kind: UnitKind::Bu, stats: bu.clone() },
        ],
        None,
    );
    let addr = server.local_addr();
    let (_, text) = get(addr, "/metrics", None);
    assert!(!text.contains("tessera_fed_errors_total{"), "no errors, no series:\n{text}");
    assert_eq!(sample(&text, r#"tessera_sub_state{unit="ru1",kind="ru",reason="SYNC_LOSS"}"#), 0.0);
    ru.fed_errors.add(1, FedError::Corrupt, 2);
    ru.fed_errors.add(1, FedError::Missing, 7);
    ru.saw(SubState::SyncLoss);
    bu.set_throttle(Throttle::StoreFull);
    bu.saw(SubState::MissingData);
    let (_, text) = get(addr, "/metrics", None);
    assert_eq!(sample(&text, r#"tessera_fed_errors_total{unit="ru1",kind="ru",fed="4",reason="CORRUPT"}"#), 2.0);
    assert_eq!(sample(&text, r#"tessera_fed_errors_total{unit="ru1",kind="ru",fed="4",reason="MISSING"}"#), 7.0);
    assert!(!text.contains(r#"reason="LATE""#) && !text.contains(r#"fed="3""#), "only counts are written:\n{text}");
    assert_eq!(sample(&text, r#"tessera_sub_state{unit="ru1",kind="ru",reason="SYNC_LOSS"}"#), 1.0);
    assert_eq!(sample(&text, r#"tessera_sub_state{unit="ru1",kind="ru",reason="BLOCKED"}"#), 0.0);
    assert_eq!(sample(&text, r#"tessera_sub_state{unit="bu0",kind="bu",reason="MISSING_DATA"}"#), 1.0);
    let (_, json) = get(addr, "/api/v1/units", None);
    let units: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        units[0]["fed_errors"],
        serde_json::json!([{"fed": 4, "errors": {
            "CORRUPT": 2, "LATE": 0, "MISSING": 7, "SYNC_LOST": 0, "STREAM_BROKEN": 0, "DISCONNECTED": 0, "MASKED": 0,
            "GIVEN_UP": 0
        }}])
    );
    assert_eq!(
        units[0]["sub_states"],
        serde_json::json!([{"key": "SYNC_LOSS", "sentence": SubState::SyncLoss.sentence()}])
    );
    // Why the BU holds back comes first, then what else is wrong.
    let keys: Vec<&str> =
        units[1]["sub_states"].as_array().unwrap().iter().map(|s| s["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["BU_STORE_FULL", "MISSING_DATA"]);
    assert!(units[1]["sub_states"][0]["sentence"].as_str().unwrap().contains("until files are written"), "{units}");
    assert_eq!(units[1]["fed_errors"], serde_json::json!([]));
}

#[test]
fn conservation_says_what_is_in_flight_until_nothing_is() {
    let units = units();
    let (evm, bu) = (units[0].stats.clone(), units[1].stats.clone());
    let server = serve(units, None);
    let addr = server.local_addr();
    evm.triggered.add(100);
    evm.lost_lumi_closed.add(5);
    bu.events_published.add(60);
    let view: serde_json::Value = serde_json::from_str(&get(addr, "/api/v1/conservation", None).1).unwrap();
    assert_eq!((view["triggered"].as_u64(), view["published"].as_u64()), (Some(100), Some(60)), "{view}");
    assert_eq!(view["lost"], serde_json::json!({"LUMI_SECTION_CLOSED": 5}));
    assert_eq!((view["in_flight"].as_u64(), view["holds_so_far"].as_bool()), (Some(35), Some(true)), "{view}");
    assert!(view["sentence"].as_str().unwrap().starts_with("Holds so far: 35 events in flight"), "{view}");
    bu.events_published.add(35);
    let view: serde_json::Value = serde_json::from_str(&get(addr, "/api/v1/conservation", None).1).unwrap();
    assert_eq!(view["in_flight"], 0);
    assert!(view["sentence"].as_str().unwrap().starts_with("Holds: "), "{view}");
    bu.events_published.add(1);
    let view: serde_json::Value = serde_json::from_str(&get(addr, "/api/v1/conservation", None).1).unwrap();
    assert_eq!(view["holds_so_far"], false);
    assert!(view["sentence"].as_str().unwrap().starts_with("Does not hold"), "{view}");
}

#[test]
fn the_system_configuration_is_served_as_given() {
    let yaml = "run:\n  number: 7\nrus: []\n".to_owned();
    let server = serve(units(), Some(yaml.clone()));
    assert_eq!(get(server.local_addr(), "/api/v1/config", None), (200, yaml));
    let without = serve(units(), None);
    let (code, body) = get(without.local_addr(), "/api/v1/config", None);
    assert_eq!(code, 404);
    assert!(body.contains("without a system configuration"), "{body}");
}

#[test]
fn a_heartbeat_that_stops_moving_is_a_stall_after_the_time_out_only() {
    use std::time::{Duration, Instant};
    let mut watch = tessera_control::HeartbeatWatch::new(Duration::from_secs(3));
    let t0 = Instant::now();
    assert!(!watch.knows("bu0"));
    assert_eq!(watch.check("bu0", 10, t0), None);
    assert!(watch.knows("bu0"));
    assert_eq!(watch.check("bu0", 10, t0 + Duration::from_secs(3)), None, "not longer than the time-out");
    assert_eq!(watch.check("bu0", 10, t0 + Duration::from_secs(4)), Some(Duration::from_secs(4)));
    // A beat starts the count again; another unit is watched on its own.
    assert_eq!(watch.check("bu0", 11, t0 + Duration::from_secs(5)), None);
    assert_eq!(watch.check("bu0", 11, t0 + Duration::from_secs(7)), None);
    assert_eq!(watch.check("ru0", 5, t0 + Duration::from_secs(7)), None);
    assert_eq!(watch.check("bu0", 11, t0 + Duration::from_secs(9)), Some(Duration::from_secs(4)));
}

#[test]
fn the_run_is_served_as_its_filler_writes_it_in_the_api_and_the_metrics() {
    let run = Arc::new(RunStatus::new(42));
    let server = serve_run(Some(run.clone()));
    let addr = server.local_addr();
    let view: serde_json::Value = serde_json::from_str(&get(addr, "/api/v1/run", None).1).unwrap();
    assert_eq!((view["run"].as_u64(), view["state"].as_str()), (Some(42), Some("Configuring")), "{view}");
    run.update(|v| {
        v.state = RunState::Running;
        v.elapsed_s = 12.5;
        v.requested_rate_hz = Some(100_000.0);
        v.achieved_rate_hz = 40_000.0;
        v.mean_rate_hz = 60_000.0;
        v.dead_time_fraction = 0.6;
        v.dead_time_by_reason.insert("NOT_ENOUGH_FUS".into(), 0.6);
        v.lumi_sections_built = 9;
        v.lumi_sections_merged = 4;
        v.bottleneck = Some(
            "bottleneck: NOT_ENOUGH_FUS (60 % of the run held): the trigger got 60.0 kHz of the 100.0 kHz asked for"
                .into(),
        );
    });
    let (code, json) = get(addr, "/api/v1/run", None);
    assert_eq!(code, 200);
    let view: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(view["state"], "Running");
    assert_eq!(view["requested_rate_hz"], 100_000.0);
    assert_eq!(view["dead_time_by_reason"], serde_json::json!({"NOT_ENOUGH_FUS": 0.6}));
    assert_eq!((view["lumi_sections_built"].as_u64(), view["lumi_sections_merged"].as_u64()), (Some(9), Some(4)));
    let bottleneck = view["bottleneck"].as_str().unwrap();
    assert!(bottleneck.starts_with("bottleneck: NOT_ENOUGH_FUS"), "{bottleneck}");
    let (_, text) = get(addr, "/metrics", None);
    assert_eq!(sample(&text, r#"tessera_run_info{run="42",state="Running"}"#), 1.0);
    assert_eq!(sample(&text, r#"tessera_run_info{run="42",state="Configuring"}"#), 0.0);
    assert_eq!(sample(&text, r#"tessera_run_elapsed_seconds{run="42"}"#), 12.5);
    assert_eq!(sample(&text, r#"tessera_trigger_rate_requested_hz{run="42"}"#), 100_000.0);
    assert_eq!(sample(&text, r#"tessera_trigger_rate_hz{run="42"}"#), 40_000.0);
    assert_eq!(sample(&text, r#"tessera_dead_time_ratio{run="42"}"#), 0.6);
    assert_eq!(sample(&text, r#"tessera_dead_time_by_reason_ratio{run="42",reason="NOT_ENOUGH_FUS"}"#), 0.6);
    assert_eq!(sample(&text, r#"tessera_lumi_sections_built{run="42"}"#), 9.0);
    assert_eq!(sample(&text, r#"tessera_lumi_sections_merged{run="42"}"#), 4.0);
    // A process without a run says so, and has no run samples.
    let without = serve_run(None);
    let (code, body) = get(without.local_addr(), "/api/v1/run", None);
    assert_eq!(code, 404);
    assert!(body.contains("not a whole run"), "{body}");
    let (_, text) = get(without.local_addr(), "/metrics", None);
    assert!(text.contains("# TYPE tessera_run_info gauge") && !text.contains("tessera_run_info{"), "{text}");
}

/// A server on loopback for [`units`] and `run`.
fn serve_run(run: Option<Arc<RunStatus>>) -> ControlServer {
    let config = ControlConfig { listen: "127.0.0.1:0".parse().unwrap(), token: None };
    ControlServer::start(&config, Served { run, ..Served::live(units()) }).unwrap()
}

#[test]
fn metrics_carry_the_process_the_build_and_the_conservation_where_the_evm_is() {
    let units = units();
    let (evm, bu) = (units[0].stats.clone(), units[1].stats.clone());
    let server = serve(units, None);
    let (_, text) = get(server.local_addr(), "/metrics", None);
    assert!(sample(&text, "process_resident_memory_bytes") > 0.0, "{text}");
    assert!(sample(&text, "process_open_fds") > 0.0, "{text}");
    assert!(text.contains("# TYPE process_cpu_seconds counter"), "{text}");
    assert!(sample(&text, "process_cpu_seconds_total") > 0.0, "{text}");
    let build = format!(
        "tessera_build_info{{version=\"{}\",git_hash=\"{}\"}}",
        tessera_control::VERSION,
        tessera_control::GIT_HASH
    );
    assert_eq!(sample(&text, &build), 1.0);
    assert_eq!(sample(&text, "tessera_conservation_holds"), 1.0);
    evm.triggered.add(10);
    bu.events_published.add(11);
    let (_, text) = get(server.local_addr(), "/metrics", None);
    assert_eq!(sample(&text, "tessera_conservation_holds"), 0.0, "{text}");
    // Without the EVM the figures say nothing of the run's conservation: no sample.
    let bu_only =
        serve(vec![Unit { name: "bu0".into(), kind: UnitKind::Bu, stats: Arc::new(UnitStats::default()) }], None);
    let (_, text) = get(bu_only.local_addr(), "/metrics", None);
    assert!(!text.lines().any(|l| l.starts_with("tessera_conservation_holds ")), "{text}");
}

/// The file descriptors this process holds.
fn open_files() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn thousands_of_half_sent_requests_hold_at_most_the_bound_and_are_closed_after_the_head_time_out() {
    use tessera_control::{MAX_CONNECTIONS, REQUEST_HEAD_TIMEOUT};
    // The flood's 3000 client ends are this process's files too, as they are a real caller's.
    tessera_control::capacity::raise_open_files_limit();
    let server = serve(units(), None);
    let addr = server.local_addr();
    let before = open_files();
    // A stranger's flood: each connection a request head that never ends; as many as this
    // process may open beside the server's own ends (up to 3000), well past the bound.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
    let flood = (limit as usize).saturating_sub(before + MAX_CONNECTIONS + 64).min(3000);
    assert!(flood >= 2 * MAX_CONNECTIONS, "an open-file limit of {limit} leaves room for a flood of {flood} only");
    let mut held: Vec<TcpStream> = (0..flood)
        .filter_map(|_| {
            let mut s = TcpStream::connect(addr).ok()?;
            s.write_all(b"GET /api/v1/units HTTP/1.1\r\nHost: x\r\n").ok()?;
            Some(s)
        })
        .collect();
    assert_eq!(held.len(), flood);
    std::thread::sleep(std::time::Duration::from_millis(500));
    // This process holds the flood's client ends; the server side holds at most its bound.
    let server_side = open_files() - before - held.len();
    assert!(server_side <= MAX_CONNECTIONS + 8, "the server holds {server_side} connections");
    // Past the head time-out every half-sent request is closed by the server.
    std::thread::sleep(REQUEST_HEAD_TIMEOUT + std::time::Duration::from_secs(2));
    for s in &mut held {
        s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        let mut rest = Vec::new();
        // Closed (0 bytes or an error such as a reset), never left open: a read that times out
        // would fail here.
        if let Err(e) = s.read_to_end(&mut rest) {
            assert!(e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut, "{e}");
        }
    }
    drop(held);
    // And the server answers as before.
    let (status, body) = get(addr, "/api/v1/units", None);
    assert_eq!(status, 200, "{body}");
}
