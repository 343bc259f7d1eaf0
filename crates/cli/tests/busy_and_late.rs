//! A busy machine is not a broken detector: `tessera run` beside more busy threads than cores
//! builds every event complete and says that the machine is overloaded; front ends started as
//! processes of their own, in any order and late, build every event complete, since the run starts
//! only once every stream is there; an RU of 100 FEDs builds every event, one of 600 is refused
//! before anything starts; a FED that goes silent holds its events until an operator masks it,
//! and only the events from then on go without it; a run whose streams never come fails before
//! its first event, naming them; and 32 RUs × 32 BUs run free to their end.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;
#[allow(dead_code)]
mod live;

use common::{free_ports, spawn_logged, tessera, wait_child};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// Runs `system` (YAML) with `args` into a new directory of `dir`; its output and summary.
fn run(dir: &Path, name: &str, system: &str, args: &[&str]) -> (Output, serde_json::Value) {
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, system).unwrap();
    let output = dir.join(name);
    let mut all = vec!["run", file.to_str().unwrap(), "--output", output.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = tessera(&all);
    let summary = std::fs::read_to_string(output.join("summary.json")).unwrap_or_else(|_| {
        panic!("no summary: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    (out, serde_json::from_str(&summary).unwrap())
}

/// Asserts that the run ended well with `events` events, every one complete; its summary text.
fn every_event_complete(out: &Output, events: u64) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("events: {events} built, {events} complete, 0 incomplete")), "{stdout}");
    stdout
}

/// A seed for the random choices of a test, said so that a failure can be replayed
/// (`TESSERA_TEST_SEED`).
fn seed() -> u64 {
    let seed = std::env::var("TESSERA_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos() as u64);
    eprintln!("seed {seed} (TESSERA_TEST_SEED={seed} replays it)");
    seed
}

/// SplitMix64: the next number of `state`.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Busy threads on every core and more, until dropped.
struct CpuHogs(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl CpuHogs {
    /// `per_core` busy threads for each core of the machine.
    fn start(per_core: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        let threads = (0..per_core * cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    }
                })
            })
            .collect();
        CpuHogs(stop, threads)
    }
}

impl Drop for CpuHogs {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

/// The default system for 20 s beside four busy threads per core: the front ends and units
/// wait for a core, yet no event goes out incomplete (a silent FED holds the trigger, it is not
/// given up), and the summary says that the machine was overloaded, with its figures, rather than
/// naming a FED.
#[test]
fn default_2x2_beside_cpu_hogs_builds_every_event_complete_and_says_the_machine_is_overloaded() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out");
    let out = {
        let _hogs = CpuHogs::start(4);
        tessera(&["run", "--seconds", "20", "--output", output.to_str().unwrap()])
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(output.join("summary.json")).unwrap()).unwrap();
    let built = summary["built"].as_u64().unwrap();
    assert!(built > 0 && summary["built_complete"].as_u64() == Some(built), "{stdout}");
    assert!(stdout.contains(", 0 incomplete"), "{stdout}");
    assert!(stdout.contains("machine: overloaded for ") && stdout.contains("threads ready to run"), "{stdout}");
    // Short of its rate, the run names the overload as its bottleneck, not a FED.
    if let Some(line) = stdout.lines().find(|l| l.trim_start().starts_with("bottleneck:")) {
        assert!(line.contains("MACHINE_OVERLOADED"), "{line}");
    }
    assert!(!stdout.contains("WAITING_FOR_FED"), "{stdout}");
}

/// Nine front ends as processes of their own (`tessera ferol`, one per FED, 16 kB, free running)
/// and the run (`tessera run` of RUs that do not emulate their FEDs), started in a random order,
/// each after a random delay of up to 5 s: the run starts once every stream is there, and every
/// event is built complete.
#[test]
fn two_by_two_with_nine_front_end_processes_started_in_a_random_order_builds_every_event_complete() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ports = free_ports(2);
    let events = 2000;
    let system = format!(
        "run: {{number: 33, events: {events}, orbits_per_lumi_section: 1024}}\ntrigger: {{free_running: true}}\n\
         rus:\n  - {{name: ru0, feds: \"1024,0-3\", emulated: false, ferol_port: {}}}\n  \
         - {{name: ru1, feds: \"4-7\", emulated: false, ferol_port: {}}}\n\
         bus:\n  - {{name: bu0}}\n  - {{name: bu1}}\nfu: {{enabled: false}}\n",
        ports[0], ports[1]
    );
    let file = d.join("system.yaml");
    std::fs::write(&file, system).unwrap();
    let mut state = seed();
    // The run (None) and the nine FEDs, in a random order, each at a random time within 5 s.
    let mut starts: Vec<(u64, Option<u16>)> = std::iter::once(None)
        .chain([1024u16, 0, 1, 2, 3, 4, 5, 6, 7].map(Some))
        .map(|a| (next(&mut state) % 5000, a))
        .collect();
    starts.sort_unstable();
    let begun = Instant::now();
    let mut run = None;
    let mut front_ends = Vec::new();
    for (at_ms, who) in starts {
        std::thread::sleep(Duration::from_millis(at_ms).saturating_sub(begun.elapsed()));
        match who {
            None => {
                let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
                command.arg("run").arg(&file).arg("--output").arg(d.join("out"));
                run = Some(
                    command
                        .stdout(std::fs::File::create(d.join("run.out")).unwrap())
                        .stderr(std::fs::File::create(d.join("run.log")).unwrap())
                        .spawn()
                        .unwrap(),
                );
            }
            Some(fed) => {
                let port = if fed == 1024 || fed < 4 { ports[0] } else { ports[1] };
                let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
                command.args(["ferol", "--run", "33", "--orbits-per-ls", "1024", "--size", "16384", "--feds"]);
                command.arg(fed.to_string()).arg("--events").arg(events.to_string());
                command.arg("--connect").arg(format!("127.0.0.1:{port}"));
                front_ends.push((fed, spawn_logged(command, &d.join(format!("fed{fed}.log")))));
            }
        }
    }
    let status = wait_child(run.as_mut().unwrap(), Duration::from_secs(240));
    let summary = std::fs::read_to_string(d.join("run.out")).unwrap();
    let log = std::fs::read_to_string(d.join("run.log")).unwrap();
    for (fed, mut front_end) in front_ends {
        let ended = wait_child(&mut front_end, Duration::from_secs(30));
        assert!(ended.success(), "FED {fed}: {}", std::fs::read_to_string(d.join(format!("fed{fed}.log"))).unwrap());
    }
    assert!(status.success(), "{summary}\n{log}");
    assert!(summary.contains(&format!("events: {events} built, {events} complete, 0 incomplete")), "{summary}\n{log}");
}

/// One RU reads 100 FEDs (and the trigger): every stream finds room however they come, and
/// every event is built complete. An RU of 600 FEDs is past what an RU reads: `config check`
/// refuses it with the limit, before anything starts.
#[test]
fn an_ru_of_100_feds_builds_every_event_complete_and_one_of_600_is_refused_by_config_check() {
    let dir = tempfile::tempdir().unwrap();
    let system = |feds: u16| {
        format!(
            "run: {{events: 1000}}\ntrigger: {{free_running: true}}\n\
             rus:\n  - {{name: ru0, feds: \"1024,0-{}\", fragment_size: {{bytes: 512}}}}\n  \
             - {{name: ru1, feds: \"{feds}-{}\", fragment_size: {{bytes: 512}}}}\n\
             bus:\n  - {{name: bu0}}\n  - {{name: bu1}}\nru: {{chunk_bytes: 262144, chunks_per_fed: 4}}\n\
             fu: {{enabled: false}}\n",
            feds - 1,
            feds + 1
        )
    };
    let (out, _) = run(dir.path(), "fed100", &system(100), &[]);
    every_event_complete(&out, 1000);
    let file = dir.path().join("fed600.yaml");
    std::fs::write(&file, system(600)).unwrap();
    let check = tessera(&["config", "check", file.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&check.stderr);
    assert!(!check.status.success(), "{said}");
    assert!(said.contains("rus[0].feds: 601 FEDs; an RU reads at most 512 streams"), "{said}");
}

/// FED 4 stalls at event 1000 (its front end hangs, its connection open): its RU's events wait
/// for it, and the run says what it waits for, until an operator masks FED 4 through the control
/// API. From then on its events go out without it, flagged and counted against it; every event
/// before is complete.
#[test]
fn two_by_two_fed_stalled_then_masked_mid_run_makes_only_its_later_events_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = 4000;
    let file = d.join("stall.yaml");
    std::fs::write(
        &file,
        format!(
            "run: {{events: {events}, orbits_per_lumi_section: 4096}}\ntrigger: {{rate_hz: 5000}}\n\
             rus:\n  - {{name: ru0, feds: \"1024,0-2\"}}\n  - {{name: ru1, feds: \"3-5\", faults: [\"stall@1000/4\"]}}\n\
             bus:\n  - {{name: bu0}}\n  - {{name: bu1}}\nfu: {{enabled: false}}\n"
        ),
    )
    .unwrap();
    let (mut child, addr) = live::start_run_of(&file, &[], d);
    // The run waits for FED 4, and says so, for a second and more: in the API, and in a
    // progress line (once a second, so it is waited for too before the mask ends the wait).
    let deadline = Instant::now() + Duration::from_secs(120);
    let waited = loop {
        let units: serde_json::Value = serde_json::from_str(&live::request(addr, "GET", "/api/v1/units")).unwrap();
        let ru1 = units.as_array().unwrap().iter().find(|u| u["name"] == "ru1").unwrap().clone();
        let waited = ru1["figures"]["fed_wait_seconds"].as_f64().unwrap_or(0.0);
        let progress_said = std::fs::read_to_string(d.join("run.log")).is_ok_and(|l| l.contains("waiting for FED 4 ("));
        if ru1["waiting_for_fed"] == 4 && waited >= 1.5 && progress_said {
            let keys: Vec<&str> =
                ru1["sub_states"].as_array().unwrap().iter().filter_map(|s| s["key"].as_str()).collect();
            assert!(keys.contains(&"FED_SILENT"), "{ru1}");
            break waited;
        }
        assert!(
            Instant::now() < deadline,
            "the run never said it waits for FED 4 ({progress_said} in its progress): {ru1}\n{}",
            std::fs::read_to_string(d.join("run.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let said = live::request(addr, "POST", "/api/v1/feds/4/mask");
    assert!(said.contains("FED 4 masked at ru1"), "{said}");
    let status = wait_child(&mut child, Duration::from_secs(120));
    let summary = std::fs::read_to_string(d.join("summary.txt")).unwrap();
    let log = std::fs::read_to_string(d.join("run.log")).unwrap();
    assert!(status.success(), "{summary}\n{log}");
    // Events 1..=999 are whole; 1000 and every later one lack FED 4.
    let incomplete = events - 999;
    assert!(
        summary.contains(&format!(
            "events: {events} built, 999 complete, {incomplete} incomplete (FED 4: {incomplete} MISSING after MASKED 1)"
        )),
        "waited {waited} s before the mask:\n{summary}"
    );
    assert!(summary.contains("conservation: triggered 4000 = built 4000 + lost 0  holds"), "{summary}");
}

/// ru1's FEDs 4-5 are outside front ends that never come: the run waits for them for
/// `ru.connect_timeout_s`, then fails before its first event, naming them.
#[test]
fn two_by_two_whose_front_ends_never_connect_fails_before_its_first_event_naming_their_feds() {
    let dir = tempfile::tempdir().unwrap();
    let system = "run: {events: 1000}\ntrigger: {free_running: true}\n\
                  rus:\n  - {name: ru0, feds: \"1024,0-3\"}\n  - {name: ru1, feds: \"4-5\", emulated: false}\n\
                  bus:\n  - {name: bu0}\n  - {name: bu1}\nru: {connect_timeout_s: 3}\nfu: {enabled: false}\n";
    let started = Instant::now();
    let (out, summary) = run(dir.path(), "never", system, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(started.elapsed() < Duration::from_secs(60), "it waited {:?}", started.elapsed());
    assert!(
        stdout.contains("the streams of FEDs 4-5 never connected within 3 s (ru.connect_timeout_s)"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(summary["triggered"].as_u64(), Some(0), "no event was made: {stdout}");
}

/// 32 RUs × 32 BUs running free, 3 FEDs of 1 kB each and stores of 8 MB: every BU asks only for
/// what its store holds, reads all it asked for, and every event is built (before, the BUs' full
/// stores and the RUs' full buffers waited on each other for good).
#[test]
fn thirty_two_by_thirty_two_running_free_with_small_stores_builds_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let mut system = String::from("run: {events: 10000}\ntrigger: {free_running: true}\nrus:\n");
    for r in 0..32 {
        let trigger = if r == 0 { "1024," } else { "" };
        system += &format!(
            "  - {{name: ru{r}, feds: \"{trigger}{}-{}\", fragment_size: {{bytes: 1024}}}}\n",
            3 * r,
            3 * r + 2
        );
    }
    system += "bus:\n";
    for b in 0..32 {
        system += &format!("  - {{name: bu{b}}}\n");
    }
    system += "ru: {chunk_bytes: 1048576}\nbu: {frame_store_bytes: 8388608, max_events_per_file: 100, writer_threads: 1}\n\
               fu: {enabled: false}\n";
    let (out, summary) = run(dir.path(), "32x32", &system, &[]);
    every_event_complete(&out, 10_000);
    assert_eq!(summary["built"].as_u64(), Some(10_000));
}
