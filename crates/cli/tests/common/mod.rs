//! What the tests that run `tessera` units as processes share: starting them with their output
//! in a log file each, waiting for them (killing them whatever happens), and checking what they
//! wrote.

// Not every test binary that includes these helpers needs `require`.
#[allow(dead_code)]
mod require;

#[allow(unused_imports)]
pub use require::require;

// Only the tests that run on several hosts need network namespaces.
#[allow(dead_code)]
mod lan;

#[allow(unused_imports)]
pub use lan::Lan;

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};
use tessera_formats::raw::RawFile;

/// `n` ports free on loopback, for units that run as processes of their own. They are taken
/// below the kernel's ephemeral range (32768 and up by default), from which port-0 listeners and
/// outgoing connections draw theirs, so that no other socket of the tests can take one between
/// its choice here and its unit's bind; each test process has a range of its own.
/// Runs this package's `tessera` with `args` to its end.
pub fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("tessera runs")
}

pub fn free_ports(n: usize) -> Vec<u16> {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 60) as u16 * 200;
    let mut ports = Vec::with_capacity(n);
    while ports.len() < n {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(offset < 200, "a test process takes at most 200 ports");
        let port = base + offset;
        // Skip one a process outside the tests holds.
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            ports.push(port);
        }
    }
    ports
}

/// The run's link key for units a test starts by hand (`tessera evm|ru|bu`), as they read it
/// from `TESSERA_LINK_KEY`: one per test process, the same for every unit of its runs.
#[allow(dead_code)]
pub fn link_key_hex() -> &'static str {
    static KEY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    KEY.get_or_init(|| tessera_runtime::link::LinkKey::generate().unwrap().to_hex())
}

/// Starts `command` with stdout and stderr in `log` and no stdin.
pub fn spawn_logged(mut command: Command, log: &Path) -> Child {
    let out = std::fs::File::create(log).unwrap();
    command.stdout(out.try_clone().unwrap()).stderr(out).stdin(Stdio::null()).spawn().expect("the process starts")
}

/// Processes, by label, that are killed when the test ends, whatever happens.
pub struct Processes(pub Vec<(String, Child)>);

impl Processes {
    /// Waits for every process to exit, at most `timeout` in all; panics with the logs of `dir`
    /// if one is still running then or fails.
    pub fn wait_all(&mut self, dir: &Path, timeout: Duration) {
        for (name, status) in self.wait_exit(dir, timeout) {
            assert!(status.success(), "{name} failed: {status}\n{}", logs(dir));
        }
    }

    /// Waits for every process to exit, at most `timeout` in all (panics with the logs of `dir`
    /// otherwise), and returns how each ended.
    pub fn wait_exit(&mut self, dir: &Path, timeout: Duration) -> Vec<(String, ExitStatus)> {
        let deadline = Instant::now() + timeout;
        let mut ended = Vec::new();
        for (name, child) in &mut self.0 {
            let status = loop {
                if let Some(s) = child.try_wait().unwrap() {
                    break s;
                }
                assert!(Instant::now() < deadline, "{name} still runs after {timeout:?}\n{}", logs(dir));
                std::thread::sleep(Duration::from_millis(50));
            };
            ended.push((name.clone(), status));
        }
        ended
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Every `.log` file of `dir`, for a failure's message.
pub fn logs(dir: &Path) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.path().extension().is_some_and(|x| x == "log") {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            all += &format!("--- {}\n{text}\n", entry.path().display());
        }
    }
    // The units an agent started keep theirs in its work directory: the last lines of each.
    let mut units: Vec<_> = std::fs::read_dir(dir.join("agent")).into_iter().flatten().flatten().collect();
    units.sort_by_key(|e| e.file_name());
    for unit in units {
        let text = std::fs::read_to_string(unit.path().join("log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        all += &format!("--- {} (last 40 lines)\n{tail}\n", unit.path().join("log").display());
    }
    all
}

/// Waits until `log` in `dir` holds `text` (a unit prints its first line once its ports are
/// bound), at most 30 s.
pub fn wait_for_line(dir: &Path, log: &str, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(dir.join(log)).is_ok_and(|t| t.contains(text)) {
        assert!(Instant::now() < deadline, "{log} never said {text:?}\n{}", logs(dir));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `tessera verify` on the run directory of run `run` of each BU directory `dir/<bu>`, and
/// returns every event in their raw files, asserting that none is in two files.
pub fn verified_events(dir: &Path, run: u32, bus: &[&str]) -> BTreeSet<u32> {
    let mut seen = BTreeSet::new();
    for bu in bus {
        let run_dir = dir.join(bu).join(format!("run{run:06}"));
        let out =
            Command::new(env!("CARGO_BIN_EXE_tessera")).args(["verify", run_dir.to_str().unwrap()]).output().unwrap();
        assert!(out.status.success(), "{}: {}", run_dir.display(), String::from_utf8_lossy(&out.stdout));
        for entry in std::fs::read_dir(&run_dir).unwrap().flatten() {
            if entry.path().extension().is_some_and(|x| x == "raw") {
                let bytes = std::fs::read(entry.path()).unwrap();
                for ev in RawFile::parse(&bytes).unwrap().events() {
                    let (_, ev) = ev.unwrap();
                    assert!(seen.insert(ev.header.event), "event {} is in two files", ev.header.event);
                }
            }
        }
    }
    seen
}

/// The FU processes that process `parent` (`tessera run`, or an agent) started for BU `bu`, by
/// their command lines.
pub fn fus_of(parent: u32, bu: &str) -> Vec<u32> {
    children_running(parent, "fu", &format!("fu/{bu}"))
}

/// The processes that process `parent` started as `tessera <command> …` with an argument that
/// ends with `arg_end`.
pub fn children_running(parent: u32, command: &str, arg_end: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        let cmdline = std::fs::read_to_string(entry.path().join("cmdline")).unwrap_or_default();
        let args: Vec<&str> = cmdline.split('\0').collect();
        if ppid == Some(parent) && args.get(1) == Some(&command) && args.iter().any(|a| a.ends_with(arg_end)) {
            pids.push(pid);
        }
    }
    pids
}

/// Whether a file under `dir`, at any depth, has a name that `wanted` takes.
fn any_file_under(dir: &Path, wanted: &dyn Fn(&str) -> bool) -> bool {
    std::fs::read_dir(dir).into_iter().flatten().flatten().any(|e| {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            any_file_under(&e.path(), wanted)
        } else {
            wanted(&e.file_name().to_string_lossy())
        }
    })
}

/// Whether process `pid` holds a claim on a BU file under `dir`: it is working on that file.
pub fn holds_a_claim(dir: &Path, pid: u32) -> bool {
    any_file_under(dir, &|name| tessera_formats::names::ClaimedRawName::parse(name).is_ok_and(|c| c.pid == pid))
}

/// Whether FU process `pid` has published a lumi section's outputs under `dir`: a ledger entry
/// (`ledger/runRRRRRR_lsLLLL_<producer>.processed`) of its own is there.
pub fn has_published(dir: &Path, pid: u32) -> bool {
    any_file_under(dir, &|name| {
        let producer = name.strip_suffix(".processed").and_then(|n| n.rsplit_once('_')).map(|(_, p)| p);
        producer.and_then(|p| tessera_formats::names::Producer::from_token(p).ok()).and_then(|p| p.pid()) == Some(pid)
    })
}

/// Polls every few milliseconds, at most `timeout`, for the process `find` names, then kills it
/// with SIGKILL; its pid. Panics, saying `what` was looked for, if none comes.
pub fn kill_when_found(what: &str, timeout: Duration, find: impl Fn() -> Option<u32>) -> u32 {
    let deadline = Instant::now() + timeout;
    let victim = loop {
        if let Some(pid) = find() {
            break pid;
        }
        assert!(Instant::now() < deadline, "{what}: none in {timeout:?}");
        std::thread::sleep(Duration::from_millis(2));
    };
    let pid = rustix::process::Pid::from_raw(victim as i32).expect("a pid is not 0");
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("the process takes SIGKILL");
    victim
}

/// Waits at most `timeout` for `child` to exit; its status. Panics, killing it, if it does not.
pub fn wait_child(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the process still runs after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The example HLT, `examples/hlt/select.py`, if python3 runs here (under CI it must: the
/// caller's test fails, saying that `needed_for` needs it).
pub fn example_hlt(needed_for: &str) -> Option<std::path::PathBuf> {
    let python = Command::new("python3").arg("--version").output().is_ok();
    require(&format!("no python3: {needed_for} with the example HLT, examples/hlt/select.py"), python)
        .then(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hlt/select.py"))
}

/// The examples that name placeholder hosts under `.example`, each with the addresses that a
/// test may put in their place (private ones: checking sends nothing anywhere).
pub const PLACEHOLDERS: [(&str, &[(&str, &str)]); 2] = [
    (
        "multi-host.yaml",
        &[("ru-host.example", "10.231.9.1"), ("bu-host.example", "10.231.9.2"), ("fu-host.example", "10.231.9.3")],
    ),
    ("two-hosts.yaml", &[("host-a.example", "10.0.0.1"), ("host-b.example", "10.0.0.2")]),
];

/// The lines of `text` that name a host under `.example`, comments left out.
pub fn placeholder_lines(text: &str) -> usize {
    text.lines().filter(|l| l.split('#').next().unwrap_or_default().contains(".example")).count()
}
