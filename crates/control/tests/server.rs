//! The control server over real HTTP: metrics that move with the units' figures, the JSON API
//! agreeing with them, and the token rule.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use tessera_control::{ControlConfig, ControlError, ControlServer, Unit, UnitKind};
use tessera_runtime::stats::{Throttle, UnitStats};

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
    let server =
        ControlServer::start(&ControlConfig { listen: "127.0.0.1:0".parse().unwrap(), token: None }, units, None)
            .unwrap();
    let addr = server.local_addr();
    let (status, text) = get(addr, "/metrics", None);
    assert_eq!(status, 200);
    assert_eq!(sample(&text, r#"tessera_events_triggered_total{unit="ru0",kind="evm"}"#), 0.0);
    assert!(text.contains("# TYPE tessera_events_built_total counter"), "{text}");
    evm.triggered.add(1234);
    bu.events_built.add(1000);
    bu.set_throttle(Throttle::NotEnoughFus);
    let (_, text) = get(addr, "/metrics", None);
    assert_eq!(sample(&text, r#"tessera_events_triggered_total{unit="ru0",kind="evm"}"#), 1234.0);
    assert_eq!(sample(&text, r#"tessera_events_built_total{unit="bu0",kind="bu"}"#), 1000.0);
    assert_eq!(sample(&text, r#"tessera_throttled{unit="bu0",kind="bu",reason="NOT_ENOUGH_FUS"}"#), 1.0);
    assert_eq!(sample(&text, r#"tessera_throttled{unit="bu0",kind="bu",reason="RAMDISK_HIGH_WATER"}"#), 0.0);
    let (status, json) = get(addr, "/api/v1/units", None);
    assert_eq!(status, 200);
    let units: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(units[1]["name"], "bu0");
    assert_eq!(units[1]["throttle"], "NOT_ENOUGH_FUS");
    assert_eq!(units[1]["figures"]["events_built_total"], 1000.0);
    assert_eq!(units[0]["figures"]["events_triggered_total"], 1234.0);
    assert_eq!(get(addr, "/nothing", None).0, 404);
}

#[test]
fn any_address_but_loopback_needs_a_token_and_every_request_brings_it() {
    let open = ControlConfig { listen: "0.0.0.0:0".parse().unwrap(), token: None };
    assert!(matches!(ControlServer::start(&open, units(), None), Err(ControlError::TokenRequired(_))));
    let guarded = ControlConfig { listen: "0.0.0.0:0".parse().unwrap(), token: Some("s3cret".into()) };
    let server = ControlServer::start(&guarded, units(), None).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", server.local_addr().port()).parse().unwrap();
    assert_eq!(get(addr, "/metrics", None).0, 401);
    assert_eq!(get(addr, "/metrics", Some("wrong")).0, 401);
    assert_eq!(get(addr, "/metrics", Some("s3cret")).0, 200);
}

/// Every metric the Grafana dashboard of the repository queries is one the server exports, so
/// that the two cannot drift apart.
#[test]
fn the_grafana_dashboard_queries_only_exported_metrics() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../monitoring/grafana-dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let exported = tessera_control::metrics_text(&units());
    let mut queried = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("tessera_") {
                    queried += 1;
                    assert!(exported.contains(&format!("# TYPE {word} ")), "{word} in {expr:?} is not exported");
                }
            }
        }
    }
    assert!(queried >= 10, "{queried}");
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
    let stop: tessera_control::StopAction = Arc::new(|| Ok("stopping".into()));
    for action in [Some(stop), None] {
        let config = ControlConfig { listen: "127.0.0.1:0".parse().unwrap(), token: None };
        let server = ControlServer::start(&config, units(), action).unwrap();
        let addr = server.local_addr();
        let (code, served) = get(addr, "/api/v1/openapi.json", None);
        assert_eq!(code, 200);
        let doc: serde_json::Value = serde_json::from_str(&served).unwrap();
        assert_eq!(doc, serde_json::from_str::<serde_json::Value>(tessera_control::OPENAPI).unwrap());
        let mut operations = 0;
        for (path, methods) in doc["paths"].as_object().unwrap() {
            for (method, operation) in methods.as_object().unwrap() {
                let code = status(addr, &method.to_uppercase(), path);
                assert!(
                    operation["responses"].get(code.to_string()).is_some(),
                    "{method} {path} answered {code}, not a documented status"
                );
                operations += 1;
            }
        }
        assert_eq!(operations, 6);
    }
}
