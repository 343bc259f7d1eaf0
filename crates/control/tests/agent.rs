//! The agent over real HTTP: it starts, lists, signals and forgets processes, refuses what is
//! malformed, and needs its token. Its program here is `/bin/sh`, standing in for `tessera`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tessera_control::ControlError;
use tessera_control::agent::{Agent, AgentConfig, ProcessView, StartRequest};
use tessera_control::client::{Answer, call};
use tessera_runtime::link::LinkKey;

const TOKEN: &str = "s3cret";

fn agent(dir: &std::path::Path) -> Agent {
    Agent::start(AgentConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        token: TOKEN.into(),
        work_dir: dir.to_owned(),
        program: "/bin/sh".into(),
    })
    .unwrap()
}

fn ask(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> Answer {
    call(addr, method, path, Some(TOKEN), body, Duration::from_secs(5)).unwrap()
}

fn start(addr: SocketAddr, name: &str, script: &str) -> Answer {
    start_with_key(addr, name, script, None)
}

fn start_with_key(addr: SocketAddr, name: &str, script: &str, link_key: Option<LinkKey>) -> Answer {
    let request = StartRequest {
        name: name.into(),
        args: vec!["-c".into(), script.into()],
        system: Some("run: {number: 7}\n".into()),
        link_key,
    };
    ask(addr, "POST", "/api/v1/processes", Some(&serde_json::to_string(&request).unwrap()))
}

fn process(addr: SocketAddr, name: &str) -> ProcessView {
    let list: Vec<ProcessView> = serde_json::from_str(&ask(addr, "GET", "/api/v1/processes", None).body).unwrap();
    list.into_iter().find(|p| p.name == name).unwrap()
}

fn wait_ended(addr: SocketAddr, name: &str) -> ProcessView {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let p = process(addr, name);
        if p.exit.is_some() || Instant::now() > deadline {
            return p;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn it_starts_a_process_with_its_system_file_and_keeps_its_output_and_end() {
    let dir = tempfile::tempdir().unwrap();
    let a = agent(dir.path());
    let addr = a.local_addr();
    // The placeholders are filled in: the system file is written, and the process runs in its
    // own directory.
    let started = start(addr, "unit-1", "cat {system}; echo to the log >&2; exit 3");
    assert_eq!(started.status, 201, "{}", started.body);
    let p = wait_ended(addr, "unit-1");
    assert_eq!(p.exit.map(|e| e.code), Some(Some(3)));
    assert_eq!(p.stdout.as_deref(), Some("run: {number: 7}"));
    assert_eq!(p.log_tail, vec!["to the log".to_owned()]);
    assert_eq!(p.dir, dir.path().join("unit-1"));
    assert!(p.args[1].ends_with("unit-1/system.yaml; echo to the log >&2; exit 3"), "{:?}", p.args);
    // A name that ended may be used again (a restarted unit); the log of the one before stays.
    assert_eq!(start(addr, "unit-1", "exit 0").status, 201);
    assert!(wait_ended(addr, "unit-1").exit.unwrap().success());
    let before = std::fs::read_to_string(dir.path().join("unit-1.previous/log")).unwrap();
    assert_eq!(before, "to the log\n");
}

#[test]
fn a_unit_gets_the_runs_link_key_in_its_environment_never_on_its_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let a = agent(dir.path());
    let addr = a.local_addr();
    let key = LinkKey::generate().unwrap();
    let script = "echo \"key=$TESSERA_LINK_KEY args=$*\"";
    assert_eq!(start_with_key(addr, "unit-1", script, Some(key.clone())).status, 201);
    let p = wait_ended(addr, "unit-1");
    assert_eq!(p.stdout.as_deref(), Some(format!("key={} args=", key.to_hex()).as_str()));
    assert!(p.args.iter().all(|a| !a.contains(&key.to_hex())), "{:?}", p.args);
    // A process started without one (an FU, a merger) has none.
    assert_eq!(start(addr, "fu-1", script).status, 201);
    assert_eq!(wait_ended(addr, "fu-1").stdout.as_deref(), Some("key= args="));
    // A key that is not one is refused before anything starts.
    let bad = ask(addr, "POST", "/api/v1/processes", Some(r#"{"name":"unit-2","args":[],"link_key":"abc"}"#));
    assert!(bad.status == 400 || bad.status == 422, "{} {}", bad.status, bad.body);
    assert!(process_names(addr).iter().all(|n| n != "unit-2"));
}

fn process_names(addr: SocketAddr) -> Vec<String> {
    let list: Vec<ProcessView> = serde_json::from_str(&ask(addr, "GET", "/api/v1/processes", None).body).unwrap();
    list.into_iter().map(|p| p.name).collect()
}

#[test]
fn it_signals_a_running_process_and_refuses_a_second_of_the_same_name() {
    let dir = tempfile::tempdir().unwrap();
    let a = agent(dir.path());
    let addr = a.local_addr();
    assert_eq!(start(addr, "sleeper", "sleep 30").status, 201);
    let again = start(addr, "sleeper", "true");
    assert_eq!(again.status, 409);
    assert!(again.body.contains("sleeper is running already"), "{}", again.body);
    assert_eq!(a.running(), 1);
    let bad = ask(addr, "POST", "/api/v1/processes/sleeper/signal?signal=HUP", None);
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("expected INT, TERM, KILL, STOP or CONT"), "{}", bad.body);
    assert_eq!(ask(addr, "POST", "/api/v1/processes/nobody/signal?signal=TERM", None).status, 404);
    assert_eq!(ask(addr, "POST", "/api/v1/processes/sleeper/signal?signal=TERM", None).status, 202);
    assert_eq!(wait_ended(addr, "sleeper").exit.unwrap().signal, Some(15));
    // Stopping a process that has no control server is refused with the reason.
    assert_eq!(start(addr, "quiet", "sleep 30").status, 201);
    let stop = ask(addr, "POST", "/api/v1/processes/quiet/stop", None);
    assert_eq!(stop.status, 409);
    assert!(stop.body.contains("no control server"), "{}", stop.body);
    // Forgetting ends what still runs.
    assert_eq!(ask(addr, "DELETE", "/api/v1/processes", None).status, 200);
    assert_eq!(a.running(), 0);
    assert_eq!(ask(addr, "GET", "/api/v1/processes", None).body, "[]");
}

#[test]
fn it_refuses_bad_names_and_requests_without_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let a = agent(dir.path());
    let addr = a.local_addr();
    let bad = start(addr, "../../etc", "true");
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("expected 1 to 64 letters"), "{}", bad.body);
    let anonymous = call(addr, "GET", "/api/v1/health", None, None, Duration::from_secs(5)).unwrap();
    assert_eq!(anonymous.status, 401);
    let wrong = call(addr, "GET", "/api/v1/health", Some("guess"), None, Duration::from_secs(5)).unwrap();
    assert_eq!(wrong.status, 401);
    let health: serde_json::Value = serde_json::from_str(&ask(addr, "GET", "/api/v1/health", None).body).unwrap();
    assert_eq!(health["processes"], 0);
    assert_eq!(health["version"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn an_agent_needs_a_token_on_every_address_loopback_included() {
    let dir = tempfile::tempdir().unwrap();
    for listen in ["0.0.0.0:0", "127.0.0.1:0"] {
        let refused = Agent::start(AgentConfig {
            listen: listen.parse().unwrap(),
            token: " ".into(),
            work_dir: dir.path().to_owned(),
            program: "/bin/sh".into(),
        });
        assert!(matches!(refused, Err(ControlError::AgentToken(_))), "{listen}");
    }
}
