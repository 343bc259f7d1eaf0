//! `tessera run` through agents, on loopback (no root needed): a 2×2 system with its filter
//! farm placed by the controller on a `tessera agent`, ending with both conservation checks;
//! a BU stopped mid-run (SIGSTOP: alive, but silent) reported stalled within seconds; a host
//! without an agent, or whose agent refuses the token, refused before anything starts; and an
//! agent that always needs a token, made and kept readable by its user alone when none is given.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use common::{Processes, free_ports, logs, spawn_logged, wait_for_line};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tessera_control::client;

/// A 2×2 system on loopback whose units the controller places through the agent at `agent`.
fn system_file(dir: &Path, agent: u16, limit: &str, heartbeat_timeout_s: f64) -> PathBuf {
    let p = free_ports(7);
    let yaml = format!(
        "run:\n  number: 61\n  {limit}\n  orbits_per_lumi_section: 256\n  output: {out}\n\
         trigger:\n  rate_hz: 20000\n\
         evm:\n  port: {}\n\
         rus:\n  - name: ru0\n    ferol_port: {}\n    feds: \"1024,0-1\"\n    fragment_size: {{bytes: 1024}}\n\
         \x20 - name: ru1\n    ferol_port: {}\n    control_port: {}\n    feds: \"2-3\"\n    fragment_size: {{bytes: 1024}}\n\
         bus:\n  - name: bu0\n    data_port: {}\n  - name: bu1\n    data_port: {}\n\
         fu:\n  processes_per_bu: 1\n\
         controller:\n  agent_port: {agent}\n  heartbeat_timeout_s: {heartbeat_timeout_s}\n",
        p[0],
        p[1],
        p[2],
        p[3],
        p[4],
        p[5],
        out = dir.join("out").display()
    );
    let path = dir.join("system.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Rewrites the system file at `system` through `edit`.
fn edit(system: &Path, edit: impl FnOnce(String) -> String) {
    std::fs::write(system, edit(std::fs::read_to_string(system).unwrap())).unwrap();
}

/// Whole systems through an agent run one at a time: seven of them at once on two cores starve
/// their units of CPU, and heartbeats and drains then time out for want of it, not of a fault.
fn one_system_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static SYSTEMS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SYSTEMS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The agents' token in these tests.
const TOKEN: &str = "agents-test-token";

/// Starts `tessera agent` with [`TOKEN`] on a free loopback port; returns its port.
fn start_agent(units: &mut Processes, dir: &Path) -> u16 {
    start_agent_with(units, dir, &[])
}

/// Starts `tessera agent` with [`TOKEN`] and the environment variables `env` (which the
/// processes it starts inherit) on a free loopback port; returns its port.
fn start_agent_with(units: &mut Processes, dir: &Path, env: &[(&str, &str)]) -> u16 {
    let port = free_ports(1)[0];
    let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
    command
        .args(["agent", "--listen", &format!("127.0.0.1:{port}"), "--token", TOKEN, "--work-dir"])
        .arg(dir.join("agent"))
        .envs(env.iter().copied());
    units.0.push(("agent".into(), spawn_logged(command, &dir.join("agent.log"))));
    wait_for_line(dir, "agent.log", "agent: serving");
    port
}

/// Starts `tessera run SYSTEM ARGS` with its summary in `run.out` and its log in `run.log`.
fn start_run(units: &mut Processes, dir: &Path, system: &Path, args: &[&str]) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
    command
        .arg("run")
        .arg(system)
        .args(args)
        .env("TESSERA_AGENT_TOKEN", TOKEN)
        .stdout(std::fs::File::create(dir.join("run.out")).unwrap());
    let log = std::fs::File::create(dir.join("run.log")).unwrap();
    let child = command.stderr(log).stdin(std::process::Stdio::null()).spawn().unwrap();
    units.0.push(("run".into(), child));
}

/// A 2×2 run (`limit`, `heartbeat_timeout_s`) through an agent, started: its directory, its
/// processes (the agent's, then the controller's) and the agent's port.
fn run_through_agent(limit: &str, heartbeat_timeout_s: f64) -> (tempfile::TempDir, Processes, u16) {
    edited_run_through_agent(limit, heartbeat_timeout_s, |y| y)
}

/// As [`run_through_agent`], its system file rewritten by `edit` first.
fn edited_run_through_agent(
    limit: &str,
    heartbeat_timeout_s: f64,
    edit_file: impl FnOnce(String) -> String,
) -> (tempfile::TempDir, Processes, u16) {
    let tmp = tempfile::tempdir().unwrap();
    let mut units = Processes(Vec::new());
    let agent = start_agent(&mut units, tmp.path());
    let system = system_file(tmp.path(), agent, limit, heartbeat_timeout_s);
    edit(&system, edit_file);
    start_run(&mut units, tmp.path(), &system, &[]);
    (tmp, units, agent)
}

/// Has the agent send `signal` to its process `process`.
fn signal(agent: u16, process: &str, signal: &str) {
    let addr: SocketAddr = format!("127.0.0.1:{agent}").parse().unwrap();
    let path = format!("/api/v1/processes/{process}/signal?signal={signal}");
    let answer = client::call(addr, "POST", &path, Some(TOKEN), None, Duration::from_secs(5)).unwrap();
    assert_eq!(answer.status, 202, "{}", answer.body);
}

/// Kills `bu1` (SIGKILL, through the agent) once the run is under way, waits for the run to end
/// with success, and returns its summary and `bu1`'s line in it.
fn kill_bu1_mid_run(units: &mut Processes, d: &Path, agent: u16) -> (String, String) {
    wait_for_line(d, "run.log", "every unit is enabled");
    std::thread::sleep(Duration::from_millis(700));
    signal(agent, "bu1", "KILL");
    let (code, out) = wait_run(units, d, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{}", logs(d));
    let bu1 = out.lines().find(|l| l.trim_start().starts_with("bu1 ")).unwrap().to_owned();
    (out, bu1)
}

/// Waits for the controller (the last process) to exit; returns its exit code and summary.
fn wait_run(units: &mut Processes, dir: &Path, timeout: Duration) -> (Option<i32>, String) {
    let deadline = Instant::now() + timeout;
    let (_, run) = units.0.last_mut().unwrap();
    let status = loop {
        if let Some(s) = run.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "tessera run still runs after {timeout:?}\n{}", logs(dir));
        std::thread::sleep(Duration::from_millis(50));
    };
    (status.code(), std::fs::read_to_string(dir.join("run.out")).unwrap())
}

#[test]
fn a_2x2_system_with_its_farm_runs_through_an_agent_and_conserves_every_event() {
    let _one_system = one_system_at_a_time();
    let (tmp, mut units, _) = run_through_agent("events: 3000", 3.0);
    let d = tmp.path();
    let (code, out) = wait_run(&mut units, d, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{}", logs(d));
    assert!(out.contains("conservation: triggered 3000 = built 3000 + lost 0  holds"), "{out}");
    assert!(out.contains("events: 3000 built, 3000 complete, 0 incomplete\n"), "{out}");
    assert!(!out.contains("incomplete events:"), "a clean run says 0 incomplete once, in its events line: {out}");
    assert!(out.contains("chain: built 3000 = processed 3000 by the FUs = processed 3000 in storage"), "{out}");
    let log = std::fs::read_to_string(d.join("run.log")).unwrap();
    // Started in the order a run needs: the farm, the BUs, the RUs, the EVM, then the trigger.
    let order: Vec<usize> = ["started bu0-fu0", "started bu0 ", "started ru1", "started ru0", "started trigger-ru0"]
        .iter()
        .map(|s| log.find(s).unwrap_or_else(|| panic!("{s} not in\n{log}")))
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "start order {order:?}\n{log}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("out/summary-run000061.json")).unwrap()).unwrap();
    assert_eq!(summary["conservation_holds"], true);
    assert_eq!(
        summary["reports"]["bu0"]["events_published"].as_u64().unwrap()
            + summary["reports"]["bu1"]["events_published"].as_u64().unwrap(),
        3000
    );
}

#[test]
fn a_2x2_bu_stalled_is_reported_within_seconds_and_ends_the_run() {
    let _one_system = one_system_at_a_time();
    let (tmp, mut units, agent) = run_through_agent("seconds: 120", 1.5);
    let d = tmp.path();
    wait_for_line(d, "run.log", "every unit is enabled");
    std::thread::sleep(Duration::from_secs(1));
    // Alive but silent: its loop and its control server stop, its sockets stay open.
    signal(agent, "bu1", "STOP");
    let at = Instant::now();
    let (code, out) = wait_run(&mut units, d, Duration::from_secs(60));
    // The heartbeat time-out is 1.5 s; a poll a second and the abort come on top.
    assert!(at.elapsed() < Duration::from_secs(20), "reported after {:?}", at.elapsed());
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("fault: UNIT_STALLED bu1 on 127.0.0.1: its"), "{out}\n{}", logs(d));
    let log = std::fs::read_to_string(d.join("run.log")).unwrap();
    assert!(log.contains("FAULT UNIT_STALLED bu1"), "{log}");
}

/// The address of the controller's control server, from its log.
fn controller_address(dir: &Path) -> SocketAddr {
    let log = std::fs::read_to_string(dir.join("run.log")).unwrap();
    let line = log.lines().find_map(|l| l.strip_prefix("monitoring: http://")).expect("the controller serves");
    line.split('/').next().unwrap().parse().unwrap()
}

fn get(addr: SocketAddr, method: &str, path: &str) -> String {
    let answer = client::call(addr, method, path, None, None, Duration::from_secs(5)).unwrap();
    assert!(answer.ok(), "{method} {path}: {answer:?}");
    answer.body
}

#[test]
fn a_2x2_run_through_agents_is_watched_and_stopped_through_the_controllers_api() {
    let _one_system = one_system_at_a_time();
    let (tmp, mut units, _) = run_through_agent("seconds: 120", 3.0);
    let d = tmp.path();
    wait_for_line(d, "run.log", "every unit is enabled");
    let log = std::fs::read_to_string(d.join("run.log")).unwrap();
    assert!(log.contains("every unit is configured (Ready)"), "configured before enabled\n{log}");
    let controller = controller_address(d);
    // Every unit of every host, with its host, as the units' own servers show them.
    let views: Vec<tessera_control::UnitView> = serde_json::from_str(&get(controller, "GET", "/api/v1/units")).unwrap();
    let mut names: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["bu0", "bu1", "ru0", "ru1"]);
    assert!(views.iter().all(|v| v.host.as_deref() == Some("127.0.0.1") && !v.stale), "{views:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !get(controller, "GET", "/metrics")
        .contains("tessera_events_triggered_total{unit=\"ru0\",kind=\"evm\",host=\"127.0.0.1\"} ")
        || serde_json::from_str::<serde_json::Value>(&get(controller, "GET", "/api/v1/conservation")).unwrap()["triggered"]
            == 0
    {
        assert!(Instant::now() < deadline, "the controller's figures never moved\n{}", logs(d));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(get(controller, "GET", "/").contains("<title>"), "the dashboard");
    // The run as a whole, as the controller fills it from the EVM's figures.
    let deadline = Instant::now() + Duration::from_secs(10);
    let run = loop {
        let run: serde_json::Value = serde_json::from_str(&get(controller, "GET", "/api/v1/run")).unwrap();
        if run["mean_rate_hz"].as_f64().is_some_and(|r| r > 0.0) {
            break run;
        }
        assert!(Instant::now() < deadline, "the run's figures never moved: {run}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!((run["run"].as_u64(), run["state"].as_str()), (Some(61), Some("Running")), "{run}");
    // The operator's stop: the trigger stops at the EVM, the run drains and conserves.
    let said = get(controller, "POST", "/api/v1/stop");
    assert!(said.contains("stopping the trigger"), "{said}");
    let (code, out) = wait_run(&mut units, d, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{}", logs(d));
    let conservation = out.lines().find(|l| l.starts_with("conservation:")).unwrap();
    assert!(conservation.contains("lost 0") && conservation.ends_with("holds"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("chain:") && l.ends_with("holds")), "{out}");
}

/// FED 2 (on ru1, a process the agent started) stalls at event 500: the controller's units say
/// that ru1 waits for it, and a mask asked of the controller reaches ru1 through its agent; the
/// events from the stall on go out without FED 2, the others whole.
#[test]
fn a_2x2_fed_stalled_is_masked_through_the_controllers_api_and_the_agent() {
    let _one_system = one_system_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let mut units = Processes(Vec::new());
    let agent = start_agent(&mut units, tmp.path());
    let system = system_file(tmp.path(), agent, "events: 2000", 3.0);
    edit(&system, |s| s.replace("    feds: \"2-3\"\n", "    feds: \"2-3\"\n    faults: [\"stall@500/2\"]\n"));
    start_run(&mut units, tmp.path(), &system, &[]);
    let d = tmp.path();
    wait_for_line(d, "run.log", "every unit is enabled");
    let addr = controller_address(d);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let views: serde_json::Value = serde_json::from_str(&get(addr, "GET", "/api/v1/units")).unwrap();
        let ru1 = views.as_array().unwrap().iter().find(|u| u["name"] == "ru1").cloned().unwrap_or_default();
        if ru1["waiting_for_fed"] == 2 && ru1["figures"]["fed_wait_seconds"].as_f64().unwrap_or(0.0) >= 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "ru1 never said it waits for FED 2: {ru1}\n{}", logs(d));
        std::thread::sleep(Duration::from_millis(200));
    }
    let said = get(addr, "POST", "/api/v1/feds/2/mask");
    assert!(said.contains("FED 2 masked at ru1"), "{said}");
    let refused = client::call(addr, "POST", "/api/v1/feds/1024/mask", None, None, Duration::from_secs(5)).unwrap();
    assert_eq!(refused.status, 409, "the trigger cannot be masked: {}", refused.body);
    let (code, out) = wait_run(&mut units, d, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{}", logs(d));
    assert!(out.contains("events: 2000 built, 499 complete, 1501 incomplete"), "{out}");
    assert!(out.contains("conservation: triggered 2000 = built 2000 + lost 0  holds"), "{out}");
}

#[test]
fn a_2x2_bu_killed_is_started_again_by_the_controller_and_nothing_is_lost() {
    let _one_system = one_system_at_a_time();
    // 40000 events at 20 kHz: two seconds of triggers, most of them after the kill.
    let (tmp, mut units, agent) = run_through_agent("events: 40000", 3.0);
    let d = tmp.path();
    let (out, bu1) = kill_bu1_mid_run(&mut units, d, agent);
    assert!(bu1.ends_with("(started again once after a crash)"), "{out}");
    assert!(out.contains("conservation: triggered 40000 = built 40000 + lost 0  holds"), "{out}");
    assert!(out.contains("chain: built 40000 = processed 40000 by the FUs = processed 40000 in storage"), "{out}");
    let log = std::fs::read_to_string(d.join("run.log")).unwrap();
    assert!(log.contains("PROCESS_ENDED bu1 on 127.0.0.1: ended with signal 9"), "{log}");
}

/// One FU of bu0, behind a slow HLT, is killed (SIGKILL) while it works on a file, after it
/// has published a lumi section of its own: the controller starts it again, the new process
/// takes the file over, and the summary counts the killed incarnation's published events (from
/// the ledger): both checks hold, exit 0, and `verify` finds every built event in storage.
#[test]
fn a_2x2_fu_killed_mid_file_is_started_again_and_every_event_is_counted() {
    let Some(script) = common::example_hlt("the test slows the FUs") else { return };
    let _one_system = one_system_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut units = Processes(Vec::new());
    let agent = start_agent_with(&mut units, d, &[("TESSERA_HLT_FILE_DELAY_MS", "100")]);
    let agent_pid = units.0[0].1.id();
    let system = system_file(d, agent, "events: 20000", 3.0);
    edit(&system, |yaml| {
        yaml.replace(
            "fu:\n  processes_per_bu: 1\n",
            &format!("fu:\n  processes_per_bu: 1\n  exec: [python3, {}]\n", script.display()),
        )
    });
    start_run(&mut units, d, &system, &[]);
    let out_dir = d.join("out");
    common::kill_when_found(
        "an FU of bu0 that published a lumi section, holding a claim",
        Duration::from_secs(60),
        || {
            common::fus_of(agent_pid, "bu0")
                .first()
                .copied()
                .filter(|&pid| common::has_published(&out_dir, pid) && common::holds_a_claim(&out_dir, pid))
        },
    );
    let (code, out) = wait_run(&mut units, d, Duration::from_secs(180));
    assert_eq!(code, Some(0), "{out}\n{}", logs(d));
    let log = std::fs::read_to_string(d.join("run.log")).unwrap();
    assert!(log.contains("PROCESS_ENDED bu0-fu0 on 127.0.0.1: ended with signal 9"), "{log}");
    assert!(out.contains("conservation: triggered 20000 = built 20000 + lost 0  holds"), "{out}");
    assert!(out.contains("chain: built 20000 = processed 20000 by the FUs = processed 20000 in storage"), "{out}");
    let bu_runs: Vec<PathBuf> = ["bu0", "bu1"].iter().map(|b| out_dir.join(b).join("run000061")).collect();
    let verify = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("verify")
        .arg(out_dir.join("storage").join("run000061"))
        .arg("--built")
        .args(&bu_runs)
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
}

/// Readers that keep to CMS's HLT's rules as the farm, four per BU, placed by the controller:
/// they read every file through the BUs' brokers, and the summary counts what they deleted.
#[test]
fn a_2x2_system_read_by_four_readers_per_bu_through_agents_conserves_every_event() {
    let _one_system = one_system_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut units = Processes(Vec::new());
    let agent = start_agent(&mut units, d);
    let system = system_file(d, agent, "events: 20000", 3.0);
    let ports = free_ports(2);
    edit(&system, |yaml| {
        yaml.replace("fu:\n  processes_per_bu: 1\n", "fu:\n  process: reader\n  processes_per_bu: 4\n")
            .replace("  - name: bu0\n", &format!("  - name: bu0\n    broker_port: {}\n", ports[0]))
            .replace("  - name: bu1\n", &format!("  - name: bu1\n    broker_port: {}\n", ports[1]))
    });
    start_run(&mut units, d, &system, &[]);
    let (code, out) = wait_run(&mut units, d, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{}", logs(d));
    assert!(out.contains("conservation: triggered 20000 = built 20000 + lost 0  holds"), "{out}");
    assert!(out.contains("chain: built 20000 = processed 20000 by the readers"), "{out}");
    assert_eq!(out.lines().filter(|l| l.contains("-reader")).count(), 8, "{out}");
}

/// FED 3 skips event 500 (a sync loss configured as a fault): through agents as on one host,
/// the summary splits complete from incomplete events, and `--max-incomplete 0` fails the run.
#[test]
fn a_2x2_run_through_an_agent_with_incomplete_events_fails_above_max_incomplete() {
    let _one_system = one_system_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut units = Processes(Vec::new());
    let agent = start_agent(&mut units, d);
    let system = system_file(d, agent, "events: 1000", 3.0);
    edit(&system, |yaml| yaml.replace("feds: \"2-3\"\n", "feds: \"2-3\"\n    faults: [\"skip@500/3\"]\n"));
    start_run(&mut units, d, &system, &["--max-incomplete", "0"]);
    let (code, out) = wait_run(&mut units, d, Duration::from_secs(120));
    assert_eq!(code, Some(1), "{out}\n{}", logs(d));
    assert!(out.contains("conservation: triggered 1000 = built 1000 + lost 0  holds"), "{out}");
    assert!(out.contains("events: 1000 built, 499 complete, 501 incomplete\n"), "{out}");
    assert!(out.contains("incomplete events: 501, at most 0 allowed, by --max-incomplete 0  ABOVE THE LIMIT"), "{out}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("out").join("summary-run000061.json")).unwrap()).unwrap();
    assert_eq!((summary["built_complete"].as_u64(), summary["built_incomplete"].as_u64()), (Some(499), Some(501)));
    assert_eq!(summary["incomplete_check"]["within_limit"], serde_json::json!(false));
}

#[test]
fn a_2x2_bu_port_taken_is_refused_at_configure_before_any_unit_takes_data() {
    let _one_system = one_system_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut units = Processes(Vec::new());
    let agent = start_agent(&mut units, d);
    let system = system_file(d, agent, "seconds: 120", 3.0);
    let yaml = std::fs::read_to_string(&system).unwrap();
    let port: u16 = yaml.split("data_port: ").nth(2).unwrap().lines().next().unwrap().parse().unwrap();
    let _squatter = TcpListener::bind(("127.0.0.1", port)).unwrap();
    start_run(&mut units, d, &system, &[]);
    let (code, out) = wait_run(&mut units, d, Duration::from_secs(60));
    assert_eq!(code, Some(1), "{out}");
    let fault = out.lines().find(|l| l.starts_with("fault:")).unwrap_or_else(|| panic!("{out}"));
    assert!(
        fault.contains("PROCESS_ENDED bu1 on 127.0.0.1")
            && fault.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{fault}"
    );
    let log = std::fs::read_to_string(d.join("run.log")).unwrap();
    assert!(!log.contains("every unit is configured"), "nothing was enabled\n{log}");
}

#[test]
fn a_wrong_token_is_refused_before_anything_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let port = free_ports(1)[0];
    let mut units = Processes(Vec::new());
    let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
    command
        .args(["agent", "--listen", &format!("127.0.0.1:{port}"), "--token", "right"])
        .arg("--work-dir")
        .arg(d.join("agent"));
    units.0.push(("agent".into(), spawn_logged(command, &d.join("agent.log"))));
    wait_for_line(d, "agent.log", "agent: serving");
    let system = system_file(d, port, "events: 10", 3.0);
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("run")
        .arg(&system)
        .env("TESSERA_AGENT_TOKEN", "wrong")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("host 127.0.0.1: agent 127.0.0.1:{port} refuses the token")), "{err}");
}

/// An agent given no token, even on loopback, makes one at its first start in `agent.token`
/// (mode 0600), refuses requests without it, keeps it across restarts, and refuses a token file
/// that others may read.
#[test]
fn an_agent_without_a_token_makes_one_readable_by_its_user_alone_and_refuses_requests_without_it() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let work = d.join("agent");
    let start = |units: &mut Processes, log: &str| {
        let port = free_ports(1)[0];
        let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
        command.args(["agent", "--listen", &format!("127.0.0.1:{port}"), "--work-dir"]).arg(&work);
        command.env_remove("TESSERA_AGENT_TOKEN");
        units.0.push(("agent".into(), spawn_logged(command, &d.join(log))));
        wait_for_line(d, log, "agent: serving");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        addr
    };
    let mut units = Processes(Vec::new());
    let addr = start(&mut units, "first.log");
    let file = work.join("agent.token");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    let token = std::fs::read_to_string(&file).unwrap().trim().to_owned();
    assert_eq!(token.len(), 64, "{token}");
    let log = std::fs::read_to_string(d.join("first.log")).unwrap();
    assert!(log.contains(&format!("using the token in {}", file.display())) && !log.contains(&token), "{log}");
    let ask = |token: Option<&str>| client::call(addr, "GET", "/api/v1/processes", token, None, Duration::from_secs(5));
    assert_eq!(ask(None).unwrap().status, 401);
    assert_eq!(ask(Some("guess")).unwrap().status, 401);
    assert_eq!(ask(Some(&token)).unwrap().status, 200);
    drop(units);
    // Started again, it keeps its token.
    let mut units = Processes(Vec::new());
    let addr = start(&mut units, "second.log");
    let again = client::call(addr, "GET", "/api/v1/processes", Some(&token), None, Duration::from_secs(5)).unwrap();
    assert_eq!(again.status, 200);
    drop(units);
    // A token file that others may read is refused.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refused = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["agent", "--listen", "127.0.0.1:0", "--work-dir"])
        .arg(&work)
        .env_remove("TESSERA_AGENT_TOKEN")
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("mode 644 lets others read the agent's token; make it 600"), "{err}");
}

#[test]
fn a_host_without_an_agent_is_refused_before_anything_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let nobody = free_ports(1)[0];
    let system = system_file(d, nobody, "events: 10", 3.0);
    let out = Command::new(env!("CARGO_BIN_EXE_tessera")).arg("run").arg(&system).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("host 127.0.0.1: agent 127.0.0.1:{nobody}: cannot connect")), "{err}");
    assert!(err.contains(&format!("start `tessera agent --listen 127.0.0.1:{nobody}` on 127.0.0.1")), "{err}");
    assert!(!d.join("out").exists(), "nothing was started or written");
}

/// The 2×2 under push through the agent with its farm: returns the run's directory and its
/// processes.
fn push_run_through_agent(limit: &str) -> (tempfile::TempDir, Processes, u16) {
    edited_run_through_agent(limit, 3.0, |y| {
        y.replace("  number: 61\n", "  number: 61\n  protocol: push\n")
            .replace("fu:\n", "push:\n  exclude_margin_events: 512\n  window_events: 1024\nfu:\n")
    })
}

/// A time-limited run under push: the front ends are separate processes that know nothing of
/// the stop, and every RU but RU 0 reads its FEDs past the trigger. RU 0 draws the stop line
/// past all that was read, so no event without its trigger part is built, and the run
/// conserves every event through the farm.
#[test]
fn a_2x2_push_system_runs_through_an_agent_for_a_time_and_conserves_every_event() {
    let _one_system = one_system_at_a_time();
    let (tmp, mut units, _) = push_run_through_agent("seconds: 4");
    let d = tmp.path();
    let (code, out) = wait_run(&mut units, d, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{}", logs(d));
    let line = out.lines().find(|l| l.starts_with("conservation:")).unwrap();
    assert!(line.ends_with(" + lost 0  holds"), "{out}");
    let (triggered, built) = {
        let n: Vec<u64> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
        (n[0], n[1])
    };
    assert!(triggered > 1000 && triggered == built, "{out}");
    assert!(out.contains(&format!("events: {built} built, {built} complete, 0 incomplete")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("chain: built ") && l.ends_with("holds")), "{out}");
}

#[test]
fn a_2x2_push_system_runs_through_an_agent_and_conserves_every_event() {
    let _one_system = one_system_at_a_time();
    let (tmp, mut units, _) = push_run_through_agent("events: 20000");
    let d = tmp.path();
    let (code, out) = wait_run(&mut units, d, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{}", logs(d));
    assert!(out.contains("conservation: triggered 20000 = built 20000 + lost 0  holds"), "{out}");
    assert!(out.contains("events: 20000 built, 20000 complete, 0 incomplete\n"), "{out}");
}

/// Under push a killed BU's events cannot go to another BU: RU 0 excludes it from an event no
/// RU has reached, and the run goes on with the other BU. Started again, it takes no event: it
/// publishes its whole files and closes its lumi sections, counting what it was given and did
/// not publish lost (`NLostEvents`), so that its FUs see the run end, conservation holds with
/// `BU_LOST` named, and the farm's chain holds through storage.
#[test]
fn a_2x2_push_bu_killed_is_excluded_started_again_to_close_its_lumi_sections_and_its_loss_is_counted() {
    let _one_system = one_system_at_a_time();
    let (tmp, mut units, agent) = push_run_through_agent("events: 60000");
    let d = tmp.path();
    let (out, bu1) = kill_bu1_mid_run(&mut units, d, agent);
    assert!(bu1.contains("LOST under push") && bu1.contains("started again to close its lumi sections"), "{out}");
    let line = out.lines().find(|l| l.starts_with("conservation:")).unwrap();
    assert!(line.starts_with("conservation: triggered 60000 = built ") && line.ends_with("holds"), "{out}");
    assert!(line.contains(" BU_LOST)"), "the lost BU's unpublished events are counted: {out}");
    assert!(out.lines().any(|l| l.starts_with("chain: built ") && l.ends_with("holds")), "{out}");
    let log = std::fs::read_to_string(d.join("run.log")).unwrap();
    assert!(log.contains("it is started again to close its lumi sections"), "{log}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("out").join("summary-run000061.json")).unwrap()).unwrap();
    let excluded = &summary["excluded"][0];
    assert_eq!(excluded["bu"], 1, "{summary}");
    assert!(excluded["from_event"].as_u64().unwrap() > 1, "{summary}");
    // Its end-of-lumi records count the loss: NEvents + NLostEvents = TotalEvents, the lost
    // summing to the summary's BU_LOST.
    let run_dir = d.join("out").join("bu1").join("run000061");
    let mut lost = 0;
    for entry in std::fs::read_dir(&run_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with("_EoLS.jsn") {
            let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let n: Vec<u64> =
                doc["data"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().parse().unwrap()).collect();
            assert_eq!(n[0] + n[3], n[2], "{}: {doc}", path.display());
            lost += n[3];
        }
    }
    assert!(lost > 0 && summary["lost"]["BU_LOST"] == lost, "{lost} {summary}");
}

/// The 2×2 in orbit mode through the agent with its farm (`limit` its orbits): returns the run's
/// directory, its processes and the agent's port.
fn orbit_run_through_agent(limit: &str) -> (tempfile::TempDir, Processes, u16) {
    edited_run_through_agent(limit, 3.0, |y| {
        y.replace("run:\n", "run:\n  mode: orbit\n")
            .replace("fragment_size: {bytes: 1024}", "fragment_size: {bytes: 256}")
    })
}

/// Orbit mode through an agent, as in one process: the controller starts each RU's DTHs
/// (`tessera ferol --system` in orbit mode), and every orbit is built, written and read by the
/// farm into storage.
#[test]
fn a_2x2_orbit_system_with_its_farm_runs_through_an_agent_and_conserves_every_orbit() {
    let _one_system = one_system_at_a_time();
    let (tmp, mut units, _) = orbit_run_through_agent("orbits: 3000");
    let d = tmp.path();
    let (code, out) = wait_run(&mut units, d, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{}", logs(d));
    assert!(out.contains("conservation: orbits triggered 3000 = built 3000 + lost 0  holds"), "{out}");
    assert!(out.contains("orbits: 3000 built, 3000 complete, 0 incomplete"), "{out}");
    // The farm's chain counts the events in those orbits, through the FUs into storage.
    let chain = out.lines().find(|l| l.starts_with("chain: built ")).unwrap_or_else(|| panic!("{out}"));
    assert!(chain.ends_with("holds") && !chain.starts_with("chain: built 3000 "), "{out}");
}

/// Orbit mode through an agent with a BU killed mid-run (SIGKILL): run control starts it again,
/// the EVM gives its orbits to whom it may, and every orbit is counted once, built and through
/// the farm into storage; the BU's summary line counts every incarnation's orbits.
#[test]
fn a_2x2_orbit_bu_killed_is_started_again_and_every_orbit_is_conserved_through_the_farm() {
    let _one_system = one_system_at_a_time();
    let (tmp, mut units, agent) = orbit_run_through_agent("orbits: 60000");
    let d = tmp.path();
    let (out, bu1) = kill_bu1_mid_run(&mut units, d, agent);
    assert!(bu1.contains("(started again once after a crash)"), "{out}");
    assert!(out.contains("conservation: orbits triggered 60000 = built 60000 + lost 0  holds"), "{out}");
    let orbits: Vec<u64> = out
        .lines()
        .filter(|l| ["bu0 ", "bu1 "].iter().any(|b| l.trim_start().starts_with(b)) && l.contains(" orbits ("))
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect();
    assert_eq!(orbits.iter().sum::<u64>(), 60000, "each BU's line counts every incarnation's orbits: {out}");
    let chain = out.lines().find(|l| l.starts_with("chain: built ")).unwrap_or_else(|| panic!("{out}"));
    assert!(chain.ends_with("holds"), "{out}");
}
